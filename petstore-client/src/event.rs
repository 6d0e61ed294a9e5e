//! Reading an event of the feed (since 1.6.0): its type as an
//! [`EventType`], and the animal or the order it carries
//! ([`types::Event::pet`], [`types::Event::order`]).
//!
//! In the contract, an event's `type` is a string, not an enum, and its
//! `data` an object, not a `Pet` or an `Order`: a minor version may add a
//! type, carrying another resource, and a client that does not know it is
//! to skip it, not fail on it. So [`types::Event`] keeps both as the service
//! sent them, and these helpers read them into this version's types only
//! where this version knows what they are.

use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;

use crate::types;
use crate::types::error::ConversionError;

/// A type of event this version of the crate knows, as
/// [`types::Event::event_type`] reads it from the event's `type`.
///
/// A minor version of the contract may add a type, and with it a variant
/// here: a `match` needs a `_` arm. An event of a type this version does not
/// know has no `EventType` (`event_type()` is `None`); it is still in the
/// feed, with its `type_` and `data` as the service sent them.
///
/// ```
/// use petstore_client::EventType;
///
/// let placed: EventType = "order.placed".parse().unwrap();
/// assert_eq!(placed, EventType::OrderPlaced);
/// assert_eq!(placed.to_string(), "order.placed");
/// assert!("pet.adopted".parse::<EventType>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    /// `pet.created`: an animal was added; `data` is the [`types::Pet`].
    PetCreated,
    /// `pet.status_changed`: an animal's status changed (an order placed,
    /// delivered or cancelled); `data` is the [`types::Pet`] with its new
    /// status, `previousstatus` its status before.
    PetStatusChanged,
    /// `order.placed`: `data` is the [`types::Order`].
    OrderPlaced,
    /// `order.delivered`: `data` is the [`types::Order`].
    OrderDelivered,
    /// `order.cancelled`: `data` is the [`types::Order`].
    OrderCancelled,
}

/// Every type, in the contract's order.
const KNOWN: &[EventType] = &[
    EventType::PetCreated,
    EventType::PetStatusChanged,
    EventType::OrderPlaced,
    EventType::OrderDelivered,
    EventType::OrderCancelled,
];

impl EventType {
    /// The type as the contract writes it, e.g. `order.placed`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::PetCreated => "pet.created",
            EventType::PetStatusChanged => "pet.status_changed",
            EventType::OrderPlaced => "order.placed",
            EventType::OrderDelivered => "order.delivered",
            EventType::OrderCancelled => "order.cancelled",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventType {
    type Err = ConversionError;

    /// The known type written `value`; any other value is an error that
    /// lists the known ones.
    fn from_str(value: &str) -> Result<EventType, ConversionError> {
        KNOWN
            .iter()
            .copied()
            .find(|known| known.as_str() == value)
            .ok_or_else(|| {
                let known: Vec<&str> = KNOWN.iter().map(|known| known.as_str()).collect();
                format!(
                    "unknown event type {value:?}: expected one of {}",
                    known.join(", ")
                )
                .into()
            })
    }
}

/// Written as the contract spells it (`"order.placed"`): the type of
/// `NewWebhook.types` (since contract 1.7.0), which a subscription's body
/// carries.
impl serde::Serialize for EventType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Read from the contract's spelling; a type this version does not know is
/// an error that lists the known ones (a request names only known types;
/// an answer's types are strings: see [`types::Event::event_type`]).
impl<'de> serde::Deserialize<'de> for EventType {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<EventType, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl types::Event {
    /// The event's type, if this version of the crate knows it; `None` for a
    /// type added since, which the caller is to skip (its `type_` says what
    /// it is).
    pub fn event_type(&self) -> Option<EventType> {
        self.type_.parse().ok()
    }

    /// The animal right after the change, for a `pet.*` event (its `data`);
    /// `None` for any other event, or when `data` is not an animal this
    /// version can read.
    pub fn pet(&self) -> Option<types::Pet> {
        self.data_of("pet.")
    }

    /// The order right after the change, for an `order.*` event (its
    /// `data`, without `placedBy`); `None` for any other event, or when
    /// `data` is not an order this version can read.
    pub fn order(&self) -> Option<types::Order> {
        self.data_of("order.")
    }

    /// `data` as a `T`, for an event whose type begins with `prefix`: the
    /// contract gives the resource by the type's first part, which a type
    /// added in a minor version keeps (a `pet.…` event carries a `Pet`).
    fn data_of<T: DeserializeOwned>(&self, prefix: &str) -> Option<T> {
        if !self.type_.starts_with(prefix) {
            return None;
        }
        T::deserialize(&self.data).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(type_: &str, data: serde_json::Value) -> types::Event {
        serde_json::from_value(json!({
            "specversion": "1.0",
            "id": "42",
            "source": "/v1",
            "type": type_,
            "subject": "pets/7",
            "time": "2026-11-24T09:30:00.123456Z",
            "datacontenttype": "application/json",
            "data": data,
        }))
        .unwrap()
    }

    #[test]
    fn every_known_type_reads_back_as_itself() {
        for known in KNOWN {
            assert_eq!(known.as_str().parse::<EventType>().unwrap(), *known);
            assert_eq!(known.to_string(), known.as_str());
            assert_eq!(json!(known), json!(known.as_str()));
            assert_eq!(
                serde_json::from_value::<EventType>(json!(known.as_str())).unwrap(),
                *known
            );
        }
        let unknown = serde_json::from_value::<EventType>(json!("pet.adopted")).unwrap_err();
        assert!(unknown.to_string().contains("pet.created"), "{unknown}");
        let error = "pet.adopted".parse::<EventType>().unwrap_err();
        assert!(error.to_string().contains("order.cancelled"), "{error}");
    }

    /// Every known type may be asked for in `types`: the contract's pattern
    /// for it admits them all.
    #[test]
    fn the_contract_s_filter_admits_every_known_type() {
        let all: Vec<&str> = KNOWN.iter().map(|known| known.as_str()).collect();
        assert!(types::ListEventsTypes::try_from(all.join(",")).is_ok());
    }

    #[test]
    fn a_pet_event_carries_a_pet_and_an_order_event_an_order() {
        let pet = json!({"id": 7, "name": "Rex", "categoryId": 1, "status": "pending"});
        let changed = event("pet.status_changed", pet);
        assert_eq!(changed.event_type(), Some(EventType::PetStatusChanged));
        let rex = changed.pet().unwrap();
        assert_eq!((rex.id, rex.status), (7, Some(types::PetStatus::Pending)));
        assert_eq!(changed.order(), None);

        let order = json!({"id": 3, "petId": 7, "status": "placed",
                           "placedAt": "2026-11-24T09:30:00.123456Z"});
        let placed = event("order.placed", order);
        let order = placed.order().unwrap();
        assert_eq!((order.id, order.pet_id), (3, 7));
        assert_eq!(placed.pet(), None);
    }

    /// A type added in a later minor version is no error: it has no
    /// `EventType`, and a `pet.…` one still carries its animal.
    #[test]
    fn an_unknown_type_is_read_without_failing() {
        let pet = json!({"id": 7, "name": "Rex", "categoryId": 1, "since": "1.7.0"});
        let adopted = event("pet.adopted", pet);
        assert_eq!(adopted.event_type(), None);
        assert_eq!(adopted.pet().unwrap().id, 7);

        let other = event("vet.visit", json!({"id": 1, "clinic": "North"}));
        assert_eq!(other.event_type(), None);
        assert_eq!((other.pet(), other.order()), (None, None));
    }

    #[test]
    fn data_that_is_not_the_resource_is_none() {
        let broken = event("pet.created", json!({"id": "seven"}));
        assert_eq!(broken.pet(), None);
    }
}
