//! Webhook subscriptions (since contract 1.7.0): the feed's events pushed
//! to an endpoint, signed, and how their deliveries stand.
//!
//! What answers hold that may grow within a major version — a
//! subscription's `types` and `state`, a delivery's `type` and `state` —
//! is a Rust enum here but a plain string in the contract: a value added
//! to a response enum breaks generated clients, so the contract lists the
//! values in descriptions instead.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::EventType;
use super::order::rfc3339_micros;

/// The longest accepted `url` of a new subscription, in characters (JSON
/// Schema `maxLength`).
pub const WEBHOOK_URL_MAX_CHARS: usize = 2048;

/// A webhook subscription to make (since 1.7.0).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewWebhook {
    /// Where the events are delivered: an absolute `https` URL whose host
    /// resolves only to public addresses (unless the operator admits
    /// private ones, and with them plain `http`). Printable ASCII, as URLs are
    /// (percent-encode anything else; a host with other letters in its
    /// punycode `xn--` form).
    // Only its length and characters are checked here; whether it may be
    // delivered to is the implementation's (`422 webhook_target_refused`).
    #[serde(deserialize_with = "deserialize_url")]
    #[schemars(url, length(max = 2048), regex(pattern = r"^[!-~]+$"))]
    pub url: String,
    /// The types of event to deliver (at least one). Omitted: every type
    /// the API key may see now. `null` is not accepted in its place.
    #[serde(default, deserialize_with = "deserialize_present_types")]
    #[schemars(with = "Vec<EventType>", length(min = 1))]
    pub types: Option<Vec<EventType>>,
}

fn deserialize_url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let url = String::deserialize(deserializer)?;
    if url.chars().count() > WEBHOOK_URL_MAX_CHARS {
        return Err(serde::de::Error::custom(format!(
            "url must be at most {WEBHOOK_URL_MAX_CHARS} characters"
        )));
    }
    if url.is_empty() || !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(serde::de::Error::custom(
            "url must be printable ASCII without spaces (percent-encode anything else)",
        ));
    }
    Ok(url)
}

/// `types` may be omitted (then `#[serde(default)]` gives `None`), but when
/// present it names at least one type, and `null` is no way of omitting it
/// (the contract does not declare it nullable). Repeated types count once.
fn deserialize_present_types<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<EventType>>, D::Error> {
    let named = Vec::<EventType>::deserialize(deserializer)?;
    if named.is_empty() {
        return Err(serde::de::Error::custom(
            "types must name at least one type of event (omit it for every type the key may see)",
        ));
    }
    let mut types: Vec<EventType> = Vec::with_capacity(named.len());
    for event_type in named {
        if !types.contains(&event_type) {
            types.push(event_type);
        }
    }
    Ok(Some(types))
}

/// Whether a subscription's events are sent. Written as a plain string in
/// the contract (`Webhook.state`), which may gain values in a minor version.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, strum::IntoStaticStr, strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum WebhookState {
    /// Deliveries are sent.
    Active,
    /// Nothing is sent until a replay makes it active again
    /// ([`WebhookDisabledReason`] says why).
    Disabled,
}

/// Why a subscription was disabled (`Webhook.disabledReason`, a plain
/// string in the contract).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, strum::IntoStaticStr, strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum WebhookDisabledReason {
    /// The endpoint answered `410 Gone`.
    Gone,
    /// A delivery failed on every attempt of the retry schedule.
    RetriesExhausted,
}

/// A webhook subscription (since 1.7.0): where events are delivered, which
/// ones, and how its deliveries stand. Its secret is never shown here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// Unique identifier assigned by the service when the subscription is
    /// made.
    pub id: i64,
    /// Where the events are delivered.
    #[schemars(url)]
    pub url: String,
    /// The types of event delivered: those asked for, or, when none were,
    /// every type the creating key could see then. Strings, not
    /// `EventType`: a minor version may add types, and a value a response
    /// holds may not be added within a major version.
    #[schemars(with = "Vec<String>")]
    pub types: Vec<EventType>,
    /// `active` (deliveries are sent) or `disabled` (nothing is sent until
    /// `replayWebhook` makes it active again; `disabledReason` says why). A
    /// string, not an enum: more values may be added in a minor version.
    #[schemars(with = "String")]
    pub state: WebhookState,
    /// Present only when `state` is `disabled`: `gone` (the endpoint
    /// answered `410 Gone`) or `retries_exhausted` (a delivery failed on
    /// every attempt of the retry schedule). More values may be added in a
    /// minor version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub disabled_reason: Option<WebhookDisabledReason>,
    /// When the subscription was made, in UTC, with six fractional digits.
    #[serde(serialize_with = "rfc3339_micros")]
    pub created_at: DateTime<Utc>,
    /// How many deliveries are neither delivered nor failed: waiting for
    /// their first attempt or for a retry, or being sent. While the
    /// subscription is `disabled`, the events committed meanwhile are not
    /// deliveries yet, and not counted: they become deliveries when
    /// `replayWebhook` makes it active again.
    #[schemars(with = "i64", range(min = 0))]
    pub pending: u64,
    /// When a delivery last succeeded. Absent until one has.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "optional_rfc3339_micros"
    )]
    #[schemars(with = "DateTime<Utc>")]
    pub last_success_at: Option<DateTime<Utc>>,
    /// When an attempt last failed. Absent until one has.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "optional_rfc3339_micros"
    )]
    #[schemars(with = "DateTime<Utc>")]
    pub last_failure_at: Option<DateTime<Utc>>,
}

/// A signing secret as answers show it (`whsec_` and base64): written out
/// as it is, but never by `Debug`, so that a logged value does not leak it.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct SigningSecret(String);

impl SigningSecret {
    /// The secret written `text` (`whsec_…`).
    pub fn new(text: String) -> SigningSecret {
        SigningSecret(text)
    }

    /// The secret's text, for the one answer that shows it (and tests).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(…)")
    }
}

/// A webhook subscription just made (since 1.7.0): every field of
/// `Webhook`, and its signing secret, which no other answer shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct WebhookCreated {
    /// The subscription.
    #[serde(flatten)]
    pub webhook: Webhook,
    /// The signing secret: `whsec_` followed by the base64 of 32 random
    /// bytes. Shown only here and by `rotateWebhookSecret`: keep it.
    #[schemars(with = "String")]
    pub secret: SigningSecret,
}

/// A webhook subscription's new signing secret (since 1.7.0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSecret {
    /// The new signing secret: `whsec_` followed by the base64 of 32 random
    /// bytes. Shown only here: keep it.
    #[schemars(with = "String")]
    pub secret: SigningSecret,
    /// Until when the replaced secret stays valid beside the new one, in
    /// UTC (the time of the rotation when `previousValidFor` was 0).
    #[serde(serialize_with = "rfc3339_micros")]
    pub previous_valid_until: DateTime<Utc>,
}

/// Where a delivery stands (`WebhookDelivery.state`, a plain string in the
/// contract).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, strum::IntoStaticStr, strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum WebhookDeliveryState {
    /// Waiting for its first attempt or a retry.
    Pending,
    /// An attempt is under way.
    Sending,
    /// The endpoint answered `2xx`.
    Delivered,
    /// Every attempt of the schedule failed, or the endpoint answered `410`.
    Failed,
}

/// The delivery of one event to a webhook subscription (since 1.7.0):
/// where it stands and how its last attempt ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// The event's `id` (its `webhook-id`). Decimal digits.
    #[serde(serialize_with = "decimal_string")]
    #[schemars(with = "String")]
    pub event_id: i64,
    /// The event's type (more may be added in a minor version).
    #[serde(rename = "type")]
    #[schemars(with = "String")]
    pub event_type: EventType,
    /// `pending` (waiting for its first attempt or a retry, not before
    /// `nextAttemptAt`), `sending` (an attempt is under way), `delivered`
    /// (the endpoint answered `2xx`) or `failed` (every attempt of the
    /// schedule failed, or the endpoint answered `410 Gone`). A string, not
    /// an enum: more values may be added in a minor version.
    #[schemars(with = "String")]
    pub state: WebhookDeliveryState,
    /// How many attempts were made (0 before the first).
    #[schemars(with = "i32", range(min = 0))]
    pub attempts: u32,
    /// The HTTP status the endpoint answered the last attempt with. Absent
    /// when it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i32")]
    pub last_status: Option<u16>,
    /// Why the last attempt failed (a status, a timeout, a connection or
    /// TLS error), as a short text. Absent when it did not fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub last_error: Option<String>,
    /// When the last attempt was made, in UTC. Absent before the first.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "optional_rfc3339_micros"
    )]
    #[schemars(with = "DateTime<Utc>")]
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// The earliest time the next attempt may be made, in UTC. Present
    /// only while `pending`. The attempt also waits until the same
    /// resource's earlier events are delivered or have failed, and, while
    /// the subscription is `disabled`, until `replayWebhook` enables it
    /// again; so this time may be past.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "optional_rfc3339_micros"
    )]
    #[schemars(with = "DateTime<Utc>")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the endpoint acknowledged it, in UTC. Present only once
    /// `delivered`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "optional_rfc3339_micros"
    )]
    #[schemars(with = "DateTime<Utc>")]
    pub delivered_at: Option<DateTime<Utc>>,
}

/// The longest range of events one replay examines; `ReplayAccepted.through`
/// says where it stopped.
pub const REPLAY_EVENTS_MAX: usize = 1000;

/// The events to deliver again (since 1.7.0): from `from` to `to`, both
/// included, event `id`s as the feed gives them.
// A `from` greater than `to` is well-formed (its schema cannot say
// otherwise), so it is parsed, and refused by the operation (`422`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRange {
    /// The first event of the range (an event `id`).
    #[serde(deserialize_with = "event_id")]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{1,18}$"))]
    pub from: i64,
    /// The last event of the range (an event `id`), not less than `from`.
    #[serde(deserialize_with = "event_id")]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{1,18}$"))]
    pub to: i64,
}

/// An event `id` written as the feed writes it: decimal digits, at most 18
/// of them.
fn event_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let text = String::deserialize(deserializer)?;
    super::parse_event_id(&text).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "an event id is 1 to 18 decimal digits, got {text:?}"
        ))
    })
}

/// What a replay made pending (since 1.7.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ReplayAccepted {
    /// How many deliveries were made pending again (or made, where there
    /// were none).
    #[schemars(with = "i64", range(min = 0))]
    pub deliveries: u64,
    /// The last event `id` examined: `to` when the whole range was. While
    /// it is less than `to`, call again with `from` after it.
    #[serde(serialize_with = "decimal_string")]
    #[schemars(with = "String")]
    pub through: i64,
}

/// An id the contract writes as a string of decimal digits (event ids).
fn decimal_string<S: Serializer>(id: &i64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(id)
}

/// [`rfc3339_micros`] of an optional time (`skip_serializing_if` leaves out
/// `None`; it is written `null` otherwise, which no answer does).
fn optional_rfc3339_micros<S: Serializer>(
    time: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => rfc3339_micros(time, serializer),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn new_webhook(value: serde_json::Value) -> Result<NewWebhook, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    #[test]
    fn a_new_webhook_names_its_types_or_omits_them_but_never_null_or_none() {
        let url = "https://hooks.example.com/petstore";
        let every = new_webhook(json!({"url": url})).unwrap();
        assert_eq!(every.types, None);
        let some = new_webhook(json!({
            "url": url,
            "types": ["order.placed", "pet.created", "order.placed"],
        }))
        .unwrap();
        assert_eq!(
            some.types,
            Some(vec![EventType::OrderPlaced, EventType::PetCreated])
        );
        let none = new_webhook(json!({"url": url, "types": []})).unwrap_err();
        assert!(none.contains("at least one type"), "{none}");
        assert!(new_webhook(json!({"url": url, "types": null})).is_err());
        let unknown = new_webhook(json!({"url": url, "types": ["order.shipped"]})).unwrap_err();
        assert!(unknown.contains("order.shipped"), "{unknown}");
        let misspelt = new_webhook(json!({"url": url, "type": ["pet.created"]})).unwrap_err();
        assert!(misspelt.contains("type"), "{misspelt}");
        let long = format!("https://hooks.example.com/{}", "a".repeat(2048));
        let long = new_webhook(json!({ "url": long })).unwrap_err();
        assert!(long.contains("at most 2048"), "{long}");
        for text in [
            "https://hooks.example.com/café",
            "https://hooks.example.com/a b",
            "",
        ] {
            let refused = new_webhook(json!({ "url": text })).unwrap_err();
            assert!(refused.contains("printable ASCII"), "{text}: {refused}");
        }
    }

    #[test]
    fn a_replay_range_is_two_event_ids() {
        let parse = |value| serde_json::from_value::<ReplayRange>(value).map_err(|e| e.to_string());
        assert_eq!(
            parse(json!({"from": "40", "to": "0057"})),
            Ok(ReplayRange { from: 40, to: 57 })
        );
        assert_eq!(
            parse(json!({"from": "7", "to": "7"})),
            Ok(ReplayRange { from: 7, to: 7 })
        );
        // Backwards is well-formed; the operation refuses it (422).
        assert_eq!(
            parse(json!({"from": "58", "to": "57"})),
            Ok(ReplayRange { from: 58, to: 57 })
        );
        for bad in [
            json!("-1"),
            json!(""),
            json!("4x"),
            json!(42),
            json!("1".repeat(19)),
        ] {
            let error = parse(json!({"from": bad, "to": "57"})).unwrap_err();
            assert!(!error.is_empty(), "{bad}");
        }
        assert!(parse(json!({"from": "1", "to": "2", "until": "3"})).is_err());
    }

    #[test]
    fn answers_write_ids_as_digits_times_with_micros_and_leave_out_what_is_absent() {
        let at = DateTime::from_timestamp(1_795_305_600, 120_000).unwrap();
        let webhook = Webhook {
            id: 3,
            url: "https://hooks.example.com/petstore".into(),
            types: vec![EventType::OrderPlaced, EventType::PetStatusChanged],
            state: WebhookState::Disabled,
            disabled_reason: Some(WebhookDisabledReason::RetriesExhausted),
            created_at: at,
            pending: 2,
            last_success_at: None,
            last_failure_at: Some(at),
        };
        let created = WebhookCreated {
            webhook: webhook.clone(),
            secret: SigningSecret::new("whsec_c2VjcmV0".into()),
        };
        assert_eq!(
            serde_json::to_value(&created).unwrap(),
            json!({
                "id": 3,
                "url": "https://hooks.example.com/petstore",
                "types": ["order.placed", "pet.status_changed"],
                "state": "disabled",
                "disabledReason": "retries_exhausted",
                "createdAt": "2026-11-22T00:00:00.000120Z",
                "pending": 2,
                "lastFailureAt": "2026-11-22T00:00:00.000120Z",
                "secret": "whsec_c2VjcmV0",
            })
        );
        assert!(
            !format!("{created:?}").contains("c2VjcmV0"),
            "Debug shows no secret"
        );
        let delivery = WebhookDelivery {
            event_id: 42,
            event_type: EventType::OrderPlaced,
            state: WebhookDeliveryState::Pending,
            attempts: 1,
            last_status: Some(503),
            last_error: Some("the endpoint answered 503".into()),
            last_attempt_at: Some(at),
            next_attempt_at: Some(at),
            delivered_at: None,
        };
        assert_eq!(
            serde_json::to_value(&delivery).unwrap(),
            json!({
                "eventId": "42",
                "type": "order.placed",
                "state": "pending",
                "attempts": 1,
                "lastStatus": 503,
                "lastError": "the endpoint answered 503",
                "lastAttemptAt": "2026-11-22T00:00:00.000120Z",
                "nextAttemptAt": "2026-11-22T00:00:00.000120Z",
            })
        );
        let accepted = ReplayAccepted {
            deliveries: 6,
            through: 57,
        };
        assert_eq!(
            serde_json::to_value(accepted).unwrap(),
            json!({"deliveries": 6, "through": "57"})
        );
    }

    #[test]
    fn serde_and_strum_spell_every_state_alike() {
        for state in [WebhookState::Active, WebhookState::Disabled] {
            let name: &str = state.into();
            assert_eq!(json!(state), json!(name));
        }
        for reason in [
            WebhookDisabledReason::Gone,
            WebhookDisabledReason::RetriesExhausted,
        ] {
            let name: &str = reason.into();
            assert_eq!(json!(reason), json!(name));
        }
        for state in [
            WebhookDeliveryState::Pending,
            WebhookDeliveryState::Sending,
            WebhookDeliveryState::Delivered,
            WebhookDeliveryState::Failed,
        ] {
            let name: &str = state.into();
            assert_eq!(json!(state), json!(name));
        }
    }
}
