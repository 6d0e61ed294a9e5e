//! The events (since 1.6.0): what changed in the store, as CloudEvents 1.0
//! in their JSON format, read from the feed (`listEvents`) and delivered
//! by webhooks (since 1.7.0).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::order::rfc3339_micros;
use super::{Order, Pet, PetStatus};

/// A type of event, as a request names it (since 1.7.0): `pet.created`,
/// `pet.status_changed`, `order.placed`, `order.delivered` or
/// `order.cancelled`. Only requests hold it, so a minor version may add a
/// value; answers write a type as a plain string (`Event.type`,
/// `Webhook.types`).
// The variants carry plain comments, not doc comments: documented variants
// would make schemars emit a `oneOf` instead of the contract's plain `enum`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[allow(missing_docs)]
pub enum EventType {
    // An animal was added to the catalogue.
    #[serde(rename = "pet.created")]
    #[strum(serialize = "pet.created")]
    PetCreated,
    // An animal's status changed (ordered, sold, or available again).
    #[serde(rename = "pet.status_changed")]
    #[strum(serialize = "pet.status_changed")]
    PetStatusChanged,
    // An order was placed.
    #[serde(rename = "order.placed")]
    #[strum(serialize = "order.placed")]
    OrderPlaced,
    // An order was delivered.
    #[serde(rename = "order.delivered")]
    #[strum(serialize = "order.delivered")]
    OrderDelivered,
    // An order was cancelled.
    #[serde(rename = "order.cancelled")]
    #[strum(serialize = "order.cancelled")]
    OrderCancelled,
}

impl EventType {
    /// The wire spelling (`pet.created`, …).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the event is about an order (`order.*`), whose visibility
    /// follows the order's owner, rather than an animal (`pet.*`).
    pub fn is_order(self) -> bool {
        matches!(
            self,
            EventType::OrderPlaced | EventType::OrderDelivered | EventType::OrderCancelled
        )
    }
}

/// The CloudEvents `specversion` every event carries.
pub const CLOUDEVENTS_SPEC_VERSION: &str = "1.0";
/// The CloudEvents `source` of every event: the API's base path.
pub const EVENT_SOURCE: &str = "/v1";
/// The media type of every event's `data`.
pub const EVENT_DATA_CONTENT_TYPE: &str = "application/json";

/// The most digits an event `id` is written with (the contract's
/// `^[0-9]{1,18}$`): every int64 of up to 18 digits.
pub const EVENT_ID_DIGITS_MAX: usize = 18;

/// An event `id` as the feed writes it, parsed: 1 to
/// [`EVENT_ID_DIGITS_MAX`] decimal digits, nothing else.
pub fn parse_event_id(text: &str) -> Option<i64> {
    let digits =
        (1..=EVENT_ID_DIGITS_MAX).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok()).flatten()
}

/// A change in the store, as a CloudEvent (CloudEvents 1.0, JSON format).
///
/// `id` is unique and increases in the feed's order; it is the cursor
/// (`after`) to read on from. `type` is `pet.created`, `pet.status_changed`,
/// `order.placed`, `order.delivered` or `order.cancelled`; more types may
/// be added in a minor version, so skip events of a type you do not know.
/// `data` is the resource as it was right after the change, in its
/// contract shape: the `Pet` for `pet.*`, the `Order` for `order.*`
/// (without `placedBy`).
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Event {
    /// The CloudEvents version: always `1.0`.
    pub specversion: &'static str,
    /// The event's identifier: unique, increasing in the feed's order, and
    /// opaque (compare it with nothing; pass it back as `after`). Decimal
    /// digits.
    pub id: String,
    /// Where the event happened: always `/v1`, the API's base path.
    pub source: &'static str,
    /// What happened: `pet.created`, `pet.status_changed`, `order.placed`,
    /// `order.delivered` or `order.cancelled` (more may be added in a minor
    /// version).
    #[serde(rename = "type")]
    #[schemars(with = "String")]
    pub event_type: EventType,
    /// The resource the event is about, as a path below `source`:
    /// `pets/{petId}` or `store/orders/{orderId}`.
    pub subject: String,
    /// When the change was made, in UTC, with six fractional digits (an
    /// order's `placedAt` for `order.placed`): the time of the statement
    /// that made it, in the transaction that committed it. Times follow the
    /// feed's order wherever that order is certain: an animal's or an
    /// order's own events, and a change made after another was
    /// acknowledged, have times no earlier. Changes to different resources
    /// made at the same moment by several clients may have times a little
    /// out of the feed's order (on a busy PostgreSQL, by as much as a
    /// statement takes): go by `id`, never by `time`, to order events or to
    /// resume.
    #[serde(serialize_with = "rfc3339_micros")]
    pub time: DateTime<Utc>,
    /// The media type of `data`: always `application/json`.
    pub datacontenttype: &'static str,
    /// For `pet.status_changed` only: the animal's status before the
    /// change (its status after it is `data.status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previousstatus: Option<PetStatus>,
    /// The resource right after the change, in its contract shape: a `Pet`
    /// for `pet.*` events, an `Order` (without `placedBy`) for `order.*`
    /// events. Declared as an object, not as one of the two, so that a type
    /// added in a minor version may carry another resource without breaking
    /// a client that skips it.
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub data: EventData,
}

/// The resource an event carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[allow(missing_docs)]
pub enum EventData {
    Pet(Pet),
    Order(Order),
}

impl Event {
    /// The event `id` of type `event_type` about `data`, committed at `time`.
    pub fn new(
        id: i64,
        event_type: EventType,
        time: DateTime<Utc>,
        previous_status: Option<PetStatus>,
        data: EventData,
    ) -> Event {
        let subject = match &data {
            EventData::Pet(pet) => format!("pets/{}", pet.id),
            EventData::Order(order) => format!("store/orders/{}", order.id),
        };
        Event {
            specversion: CLOUDEVENTS_SPEC_VERSION,
            id: id.to_string(),
            source: EVENT_SOURCE,
            event_type,
            subject,
            time,
            datacontenttype: EVENT_DATA_CONTENT_TYPE,
            previousstatus: previous_status,
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    #[test]
    fn serde_and_strum_spell_every_type_alike() {
        for event_type in EventType::VARIANTS {
            let serde = serde_json::to_value(event_type).unwrap();
            assert_eq!(serde, event_type.as_str());
            assert_eq!(event_type.as_str().parse::<EventType>(), Ok(*event_type));
        }
    }
}
