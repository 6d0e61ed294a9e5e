//! The resources of the contract: `Pet`, `NewPet`, `PetStatus`; the
//! Store's: `Order`, `NewOrder`, `OrderStatus`, `OrderUpdate`, `Inventory`;
//! the feed's `Event` and `EventType`; and the webhook subscriptions'
//! (`NewWebhook`, `Webhook`, `WebhookCreated`, `WebhookSecret`,
//! `WebhookDelivery`, `ReplayRange`, `ReplayAccepted`).
//!
//! These types are the boundary between the wire and the storage layer. Their
//! doc comments and `schemars` attributes become the emitted OpenAPI document,
//! which CI compares with `openapi/petstore.yaml`.

mod encoded;
mod event;
mod order;
mod webhook;

pub use encoded::{
    EncodedEvents, EncodedPets, EventArrayWriter, EventDataRef, PetArrayWriter, encode_event,
};
pub use event::{
    CLOUDEVENTS_SPEC_VERSION, EVENT_DATA_CONTENT_TYPE, EVENT_ID_DIGITS_MAX, EVENT_SOURCE, Event,
    EventData, EventType, parse_event_id,
};
pub use order::{
    Inventory, NewOrder, Order, OrderInclude, OrderStatus, OrderUpdate, OrderUpdateStatus,
};
pub use webhook::{
    NewWebhook, REPLAY_EVENTS_MAX, ReplayAccepted, ReplayRange, SigningSecret,
    WEBHOOK_URL_MAX_CHARS, Webhook, WebhookCreated, WebhookDelivery, WebhookDeliveryState,
    WebhookDisabledReason, WebhookSecret, WebhookState,
};

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// Longest accepted `name`, in Unicode code points (JSON Schema `maxLength`).
pub const NAME_MAX_CHARS: usize = 255;

/// Availability of an animal.
// The variants carry plain comments, not doc comments: documented variants
// would make schemars emit a `oneOf` instead of the contract's plain `enum`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Deserialize,
    Serialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
#[allow(missing_docs)]
pub enum PetStatus {
    // The animal can be bought.
    Available,
    // A sale of the animal is under way.
    Pending,
    // The animal has been sold.
    Sold,
}

impl PetStatus {
    /// Every status, in the order the contract lists them.
    pub const ALL: [PetStatus; 3] = [PetStatus::Available, PetStatus::Pending, PetStatus::Sold];

    /// The wire (and database) spelling of the status: serde's, written
    /// by strum (a test compares the two).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parses the wire spelling; `None` for anything else.
    pub fn parse(s: &str) -> Option<PetStatus> {
        s.parse().ok()
    }
}

/// An animal to add. A Pet is a NewPet plus the `id` field.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewPet {
    /// The animal's name.
    #[serde(deserialize_with = "deserialize_name")]
    #[schemars(
        length(min = 1, max = 255),
        regex(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")
    )]
    pub name: String,
    /// Identifier of the category.
    pub category_id: i64,
    /// Availability. Omitted means no status; `null` is rejected.
    // `with`: the schema is the plain (optional, non-nullable) `PetStatus`.
    #[serde(
        default,
        deserialize_with = "deserialize_present_status",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "PetStatus")]
    pub status: Option<PetStatus>,
}

/// An animal in the catalogue.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pet {
    /// Unique identifier assigned by the service on creation.
    pub id: i64,
    /// The animal's name.
    #[schemars(
        length(min = 1, max = 255),
        regex(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")
    )]
    pub name: String,
    /// Identifier of the category the animal belongs to.
    pub category_id: i64,
    /// Availability of the animal; absent when it was created without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "PetStatus")]
    pub status: Option<PetStatus>,
}

impl Pet {
    /// The stored form of `new` under the identifier the database assigned.
    pub fn from_new(id: i64, new: NewPet) -> Pet {
        Pet {
            id,
            name: new.name,
            category_id: new.category_id,
            status: new.status,
        }
    }
}

/// Why a `name` is not acceptable, or `None` when it is.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("name must not be empty")
    } else if name.chars().count() > NAME_MAX_CHARS {
        Some("name must be at most 255 characters")
    } else if name.chars().any(char::is_control) {
        Some("name must not contain control characters")
    } else {
        None
    }
}

fn deserialize_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    match name_problem(&name) {
        Some(problem) => Err(serde::de::Error::custom(problem)),
        None => Ok(name),
    }
}

/// `status` may be omitted (then `#[serde(default)]` gives `None`), but when
/// it is present it must be a status: `null` is not a way of omitting it,
/// because the contract does not declare the field nullable.
fn deserialize_present_status<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<PetStatus>, D::Error> {
    PetStatus::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Result<NewPet, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    #[test]
    fn status_may_be_omitted_but_not_null() {
        let pet = parse(json!({"name": "Rex", "categoryId": 1})).unwrap();
        assert_eq!(pet.status, None);
        let err = parse(json!({"name": "Rex", "categoryId": 1, "status": null})).unwrap_err();
        assert!(err.contains("status") || err.contains("null"), "{err}");
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = parse(json!({"name": "Rex", "categoryId": 1, "colour": "red"})).unwrap_err();
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn names_are_bounded_and_printable() {
        assert!(name_problem("Rex").is_none());
        assert!(name_problem("Ünïcødé 🐕").is_none());
        assert!(name_problem(&"é".repeat(255)).is_none());
        assert_eq!(name_problem(""), Some("name must not be empty"));
        assert_eq!(
            name_problem(&"a".repeat(256)),
            Some("name must be at most 255 characters")
        );
        assert_eq!(
            name_problem("a\nb"),
            Some("name must not contain control characters")
        );
        assert_eq!(
            name_problem("a\u{85}b"),
            Some("name must not contain control characters")
        );
    }

    #[test]
    fn status_spellings_round_trip() {
        for status in PetStatus::ALL {
            assert_eq!(PetStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                json!(status.as_str())
            );
        }
        assert_eq!(PetStatus::parse("Available"), None);
    }
}
