//! The parameters of the operations: what the query and path extractors
//! parse, with messages that name the parameter when a value is wrong.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

use crate::model::{EventType, OrderInclude, OrderStatus, PetStatus};
use crate::{LIMIT_DEFAULT, LIMIT_MAX};

/// Query parameters of `GET /pets`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListPetsParams {
    /// Maximum number of animals returned (1 to 100, default 20).
    #[serde(default, deserialize_with = "limit_param")]
    #[schemars(with = "i32", range(min = 1, max = 100))]
    pub limit: PageLimit,
    /// Return only animals with this status.
    #[serde(default)]
    #[schemars(with = "PetStatus")]
    pub status: Option<PetStatus>,
    /// Return only animals whose `id` is greater than this one (the last
    /// `id` of the previous page).
    #[serde(default, deserialize_with = "after_param")]
    #[schemars(with = "i64")]
    pub after: Option<i64>,
}

/// How many items a page holds: from 1 to [`LIMIT_MAX`], checked once, as
/// the query is parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageLimit(u32);

impl PageLimit {
    /// The limit as a number.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// [`LIMIT_DEFAULT`], when `limit` is omitted.
impl Default for PageLimit {
    fn default() -> PageLimit {
        PageLimit(LIMIT_DEFAULT as u32)
    }
}

impl TryFrom<i64> for PageLimit {
    type Error = String;

    fn try_from(limit: i64) -> Result<PageLimit, String> {
        u32::try_from(limit)
            .ok()
            .filter(|limit| (1..=LIMIT_MAX as u32).contains(limit))
            .map(PageLimit)
            .ok_or_else(|| format!("limit must be between 1 and {LIMIT_MAX}, got {limit}"))
    }
}

/// An integer query parameter, with a message that names it when it is not
/// one (the query extractor's own would not).
fn integer_param<'de, D, T>(deserializer: D, name: &str, expected: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr,
{
    let text = String::deserialize(deserializer)?;
    text.parse()
        .map_err(|_| serde::de::Error::custom(format!("{name} must be {expected}, got {text:?}")))
}

fn limit_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PageLimit, D::Error> {
    let limit: i64 = integer_param(deserializer, "limit", "an integer between 1 and 100")?;
    PageLimit::try_from(limit).map_err(serde::de::Error::custom)
}

fn after_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    integer_param(
        deserializer,
        "after",
        "an integer in the int64 range (the last id of a page)",
    )
    .map(Some)
}

fn pet_id_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    integer_param(deserializer, "petId", "an integer in the int64 range").map(Some)
}

/// Query parameters of `GET /store/orders`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListOrdersParams {
    /// Maximum number of orders returned (1 to 100, default 20).
    #[serde(default, deserialize_with = "limit_param")]
    #[schemars(with = "i32", range(min = 1, max = 100))]
    pub limit: PageLimit,
    /// Return only orders with this status.
    #[serde(default)]
    #[schemars(with = "OrderStatus")]
    pub status: Option<OrderStatus>,
    /// Return only orders for this animal.
    #[serde(rename = "petId", default, deserialize_with = "pet_id_param")]
    #[schemars(with = "i64")]
    pub pet_id: Option<i64>,
    /// Return only orders whose `id` is greater than this one (the last
    /// `id` of the previous page).
    #[serde(default, deserialize_with = "after_param")]
    #[schemars(with = "i64")]
    pub after: Option<i64>,
    /// `placedBy`: include who placed each order (a key with `orders:manage`
    /// only).
    #[serde(default)]
    #[schemars(with = "OrderInclude")]
    pub include: Option<OrderInclude>,
}

/// The longest a `listEvents` request waits for an event, in seconds.
pub const EVENTS_WAIT_MAX: u32 = 30;

/// The query of `listEvents`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListEventsParams {
    /// Return only events after this one: the `id` of the last event read.
    /// An `id` the feed has not reached yet gives an empty array (or waits,
    /// with `wait`).
    #[serde(default, deserialize_with = "event_after_param")]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{1,18}$"))]
    pub after: Option<i64>,
    /// Maximum number of events returned (1 to 100, default 20).
    #[serde(default, deserialize_with = "limit_param")]
    #[schemars(with = "i32", range(min = 1, max = 100))]
    pub limit: PageLimit,
    /// Return only events of these types, comma-separated (for example
    /// `order.placed,order.delivered`). An unknown type is `400`.
    #[serde(default, deserialize_with = "types_param")]
    #[schemars(
        with = "String",
        regex(
            pattern = r"^(pet\.created|pet\.status_changed|order\.placed|order\.delivered|order\.cancelled)(,(pet\.created|pet\.status_changed|order\.placed|order\.delivered|order\.cancelled))*$"
        )
    )]
    pub types: Option<EventTypes>,
    /// When no event follows `after` yet, wait up to this many seconds (0 to
    /// 30, default 0: answer at once) for one.
    #[serde(default, deserialize_with = "wait_param")]
    #[schemars(with = "i32", range(min = 0, max = 30))]
    pub wait: u32,
}

/// The event types a `types` filter names, in the order given, without
/// repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTypes(Vec<EventType>);

impl EventTypes {
    /// The types.
    pub fn iter(&self) -> impl Iterator<Item = EventType> + '_ {
        self.0.iter().copied()
    }

    /// As the parameter spells them: comma-separated.
    pub fn to_param(&self) -> String {
        let names: Vec<&str> = self.iter().map(EventType::as_str).collect();
        names.join(",")
    }
}

fn event_after_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    event_id_param(deserializer, "after").map(Some)
}

/// A query parameter naming an event by its `id`: 1 to 18 decimal digits;
/// the message names the parameter.
fn event_id_param<'de, D: Deserializer<'de>>(deserializer: D, name: &str) -> Result<i64, D::Error> {
    let text = String::deserialize(deserializer)?;
    crate::model::parse_event_id(&text).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "{name} must be the id of an event (1 to {} decimal digits), got {text:?}",
            crate::model::EVENT_ID_DIGITS_MAX
        ))
    })
}

fn types_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<EventTypes>, D::Error> {
    let text = String::deserialize(deserializer)?;
    let mut types = Vec::new();
    for name in text.split(',') {
        let event_type: EventType = name.parse().map_err(|_| {
            serde::de::Error::custom(format!(
                "types must be event types separated by commas (pet.created, \
                 pet.status_changed, order.placed, order.delivered, order.cancelled), got \
                 {name:?}"
            ))
        })?;
        if !types.contains(&event_type) {
            types.push(event_type);
        }
    }
    Ok(Some(EventTypes(types)))
}

fn wait_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let wait: i64 = integer_param(deserializer, "wait", "an integer between 0 and 30")?;
    u32::try_from(wait)
        .ok()
        .filter(|wait| *wait <= EVENTS_WAIT_MAX)
        .ok_or_else(|| {
            serde::de::Error::custom(format!("wait must be between 0 and 30, got {wait}"))
        })
}

/// Query parameters of `GET /webhooks` (`listWebhooks`).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListWebhooksParams {
    /// Maximum number of subscriptions returned (1 to 100, default 20).
    #[serde(default, deserialize_with = "limit_param")]
    #[schemars(with = "i32", range(min = 1, max = 100))]
    pub limit: PageLimit,
    /// Return only subscriptions whose `id` is greater than this one (the
    /// last `id` of the previous page). Any int64: a value before the first
    /// `id` gives the first page, one past the last an empty array.
    #[serde(default, deserialize_with = "after_param")]
    #[schemars(with = "i64")]
    pub after: Option<i64>,
}

/// Query parameters of `GET /webhooks/{webhookId}/deliveries`
/// (`listWebhookDeliveries`).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListDeliveriesParams {
    /// Return only deliveries of events before this one: the `eventId` of
    /// the last delivery of the previous page.
    #[serde(default, deserialize_with = "event_before_param")]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{1,18}$"))]
    pub before: Option<i64>,
    /// Maximum number of deliveries returned (1 to 100, default 20).
    #[serde(default, deserialize_with = "limit_param")]
    #[schemars(with = "i32", range(min = 1, max = 100))]
    pub limit: PageLimit,
}

fn event_before_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    event_id_param(deserializer, "before").map(Some)
}

/// How long a rotated-out secret stays valid when `previousValidFor` is
/// omitted: 24 hours, time for every receiver to take the new one.
pub const PREVIOUS_SECRET_VALID_DEFAULT: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest a rotated-out secret may stay valid: 7 days.
pub const PREVIOUS_SECRET_VALID_MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Query parameters of `POST /webhooks/{webhookId}/rotate`
/// (`rotateWebhookSecret`).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RotateParams {
    /// How many seconds the replaced secret stays valid beside the new one
    /// (0 to 604800, that is 7 days; default 86400, 24 hours).
    #[serde(
        rename = "previousValidFor",
        default = "previous_valid_default",
        deserialize_with = "previous_valid_param"
    )]
    #[schemars(with = "i32", range(min = 0, max = 604800))]
    pub previous_valid_for: Duration,
}

fn previous_valid_default() -> Duration {
    PREVIOUS_SECRET_VALID_DEFAULT
}

fn previous_valid_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let max = PREVIOUS_SECRET_VALID_MAX.as_secs();
    let expected = format!("an integer number of seconds between 0 and {max}");
    let seconds: i64 = integer_param(deserializer, "previousValidFor", &expected)?;
    u64::try_from(seconds)
        .ok()
        .filter(|seconds| *seconds <= max)
        .map(Duration::from_secs)
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "previousValidFor must be between 0 and {max} seconds (7 days), got {seconds}"
            ))
        })
}

/// Query parameters of `GET /store/orders/{orderId}`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetOrderParams {
    /// `placedBy`: include who placed the order (a key with
    /// `orders:manage` only).
    #[serde(default)]
    #[schemars(with = "OrderInclude")]
    pub include: Option<OrderInclude>,
}

/// Path parameters of `GET /pets/{petId}`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PetPath {
    /// Identifier of the animal to read.
    #[serde(rename = "petId")]
    pub pet_id: i64,
}

/// Path parameters of `GET` and `PATCH /store/orders/{orderId}`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct OrderPath {
    /// Identifier of the order.
    #[serde(rename = "orderId")]
    pub order_id: i64,
}

/// Path parameters of the operations on one webhook subscription
/// (`/webhooks/{webhookId}` and below it).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebhookPath {
    /// Identifier of the webhook subscription.
    #[serde(rename = "webhookId")]
    pub webhook_id: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_defaults_to_20_and_stays_within_1_to_100() {
        let limit = |query: &str| {
            serde_urlencoded::from_str::<ListPetsParams>(query)
                .map(|params| params.limit.get())
                .map_err(|e| e.to_string())
        };
        assert_eq!(limit(""), Ok(20));
        assert_eq!(limit("limit=1"), Ok(1));
        assert_eq!(limit("limit=100"), Ok(100));
        for bad in [0, 101, -1, i64::from(i32::MIN), i64::MAX] {
            let error = limit(&format!("limit={bad}")).unwrap_err();
            assert_eq!(error, format!("limit must be between 1 and 100, got {bad}"));
        }
        assert!(
            limit("limit=x")
                .unwrap_err()
                .contains("limit must be an integer")
        );
        let orders = serde_urlencoded::from_str::<ListOrdersParams>("limit=0");
        assert!(
            orders
                .unwrap_err()
                .to_string()
                .contains("limit must be between")
        );
    }

    #[test]
    fn event_parameters_are_checked_and_name_what_is_wrong() {
        let parse = |query: &str| {
            serde_urlencoded::from_str::<ListEventsParams>(query).map_err(|e| e.to_string())
        };
        let params = parse("").unwrap();
        assert_eq!(
            (params.after, params.limit.get(), params.wait),
            (None, 20, 0)
        );
        assert_eq!(params.types, None);
        let params =
            parse("after=0042&types=order.placed,pet.created,order.placed&wait=30").unwrap();
        assert_eq!((params.after, params.wait), (Some(42), 30));
        assert_eq!(params.types.unwrap().to_param(), "order.placed,pet.created");
        assert!(
            parse("after=-1")
                .unwrap_err()
                .contains("after must be the id of an event")
        );
        assert!(parse("after=").unwrap_err().contains("after must be"));
        assert!(
            parse("after=99999999999999999999")
                .unwrap_err()
                .contains("after")
        );
        assert!(
            parse("types=order.shipped")
                .unwrap_err()
                .contains("\"order.shipped\"")
        );
        assert!(parse("types=").unwrap_err().contains("types must be"));
        assert!(
            parse("wait=31")
                .unwrap_err()
                .contains("wait must be between 0 and 30")
        );
        assert!(
            parse("wait=x")
                .unwrap_err()
                .contains("wait must be an integer")
        );
    }

    #[test]
    fn webhook_parameters_are_checked_and_name_what_is_wrong() {
        let webhooks = |query: &str| {
            serde_urlencoded::from_str::<ListWebhooksParams>(query).map_err(|e| e.to_string())
        };
        let params = webhooks("").unwrap();
        assert_eq!((params.limit.get(), params.after), (20, None));
        let params = webhooks("limit=100&after=-7").unwrap();
        assert_eq!((params.limit.get(), params.after), (100, Some(-7)));
        assert!(webhooks("limit=101").unwrap_err().contains("limit must be"));
        assert!(webhooks("after=x").unwrap_err().contains("after must be"));

        let deliveries = |query: &str| {
            serde_urlencoded::from_str::<ListDeliveriesParams>(query).map_err(|e| e.to_string())
        };
        let params = deliveries("").unwrap();
        assert_eq!((params.limit.get(), params.before), (20, None));
        let params = deliveries("before=0042&limit=5").unwrap();
        assert_eq!((params.limit.get(), params.before), (5, Some(42)));
        for bad in [
            "before=-1",
            "before=",
            "before=4x",
            "before=99999999999999999999",
        ] {
            let error = deliveries(bad).unwrap_err();
            assert!(
                error.contains("before must be the id of an event"),
                "{bad}: {error}"
            );
        }

        let rotate = |query: &str| {
            serde_urlencoded::from_str::<RotateParams>(query)
                .map(|params| params.previous_valid_for)
                .map_err(|e| e.to_string())
        };
        assert_eq!(rotate(""), Ok(Duration::from_secs(86400)));
        assert_eq!(rotate("previousValidFor=0"), Ok(Duration::ZERO));
        assert_eq!(
            rotate("previousValidFor=604800"),
            Ok(Duration::from_secs(604800))
        );
        for bad in ["previousValidFor=604801", "previousValidFor=-1"] {
            let error = rotate(bad).unwrap_err();
            assert!(
                error.contains("previousValidFor must be between 0 and 604800 seconds"),
                "{bad}: {error}"
            );
        }
        assert!(
            rotate("previousValidFor=1d")
                .unwrap_err()
                .contains("previousValidFor must be an integer number of seconds")
        );
    }

    #[test]
    fn order_filters_name_the_parameter_that_is_wrong() {
        let parse = |query: &str| {
            serde_urlencoded::from_str::<ListOrdersParams>(query).map_err(|e| e.to_string())
        };
        let params = parse("status=placed&petId=-4&after=9").unwrap();
        assert_eq!(params.status, Some(OrderStatus::Placed));
        assert_eq!((params.pet_id, params.after), (Some(-4), Some(9)));
        assert!(parse("petId=x").unwrap_err().contains("petId"));
        assert!(parse("status=sold").is_err());
    }
}
