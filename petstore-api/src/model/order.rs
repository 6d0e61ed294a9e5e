//! The Store's resources (since 1.3.0): `Order`, `NewOrder`, `OrderStatus`,
//! `OrderUpdate` and `Inventory`.

use chrono::{DateTime, SecondsFormat, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

use super::PetStatus;

/// Where an order stands: `placed` (its animal is `pending`), `delivered`
/// (its animal is `sold`) or `cancelled` (its animal was made `available`
/// again).
// Plain comments on the variants: see `PetStatus`.
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
pub enum OrderStatus {
    // The animal is reserved for the order.
    Placed,
    // The animal was handed over: it is sold.
    Delivered,
    // The order was called off: the animal is available again.
    Cancelled,
}

impl OrderStatus {
    /// Every status, in the order the contract lists them.
    pub const ALL: [OrderStatus; 3] = [
        OrderStatus::Placed,
        OrderStatus::Delivered,
        OrderStatus::Cancelled,
    ];

    /// The wire (and database) spelling of the status: serde's, written
    /// by strum (a test compares the two).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parses the wire spelling; `None` for anything else.
    pub fn parse(s: &str) -> Option<OrderStatus> {
        s.parse().ok()
    }

    /// The status an order's animal has while the order has this one.
    pub fn pet_status(self) -> PetStatus {
        match self {
            OrderStatus::Placed => PetStatus::Pending,
            OrderStatus::Delivered => PetStatus::Sold,
            OrderStatus::Cancelled => PetStatus::Available,
        }
    }
}

/// An order to place.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewOrder {
    /// Identifier of the animal to order.
    pub pet_id: i64,
}

/// An order for an animal.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// Unique identifier assigned by the service when the order is placed.
    pub id: i64,
    /// Identifier of the animal ordered.
    pub pet_id: i64,
    /// Where the order stands.
    pub status: OrderStatus,
    /// When the order was placed, in UTC (assigned by the service).
    #[serde(serialize_with = "rfc3339_micros")]
    pub placed_at: DateTime<Utc>,
    /// The name of the API key that placed the order (since 1.4.0). Present
    /// only when asked for with `include=placedBy`, by a key with the scope
    /// `orders:manage`, and only for orders placed since 1.4.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub placed_by: Option<String>,
}

/// The contract's spelling of a time: RFC 3339 in UTC, always six
/// fractional digits and `Z` (chrono's own serialisation drops trailing
/// zeros, so a time's width would vary).
pub(crate) fn rfc3339_micros<S: Serializer>(
    time: &DateTime<Utc>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let written = write_rfc3339_micros(time);
    match written
        .as_ref()
        .and_then(|text| std::str::from_utf8(text).ok())
    {
        Some(text) => serializer.serialize_str(text),
        None => serializer.collect_str(&time.to_rfc3339_opts(SecondsFormat::Micros, true)),
    }
}

/// How long `2026-11-24T10:00:00.123456Z` is.
const RFC3339_MICROS_LEN: usize = 27;

/// `time` as `to_rfc3339_opts(SecondsFormat::Micros, true)` writes it
/// (ASCII), without chrono's formatting machinery (an allocation and a
/// format string walked per call, twice per order event of a feed page:
/// BENCHMARKS.md, "Contract 1.7.0"), and reading the date's fields once
/// from the UTC date (each of `DateTime`'s accessors converts it to local
/// time again: a third of a feed page's time went to writing times).
/// `None` for what it does not write (years outside 0–9999, a leap
/// second): the caller falls back to chrono.
pub(crate) fn write_rfc3339_micros(time: &DateTime<Utc>) -> Option<[u8; RFC3339_MICROS_LEN]> {
    use chrono::{Datelike, Timelike};
    let naive = time.naive_utc();
    let (date, clock) = (naive.date(), naive.time());
    let year = u32::try_from(date.year())
        .ok()
        .filter(|year| *year <= 9999)?;
    let nanos = clock.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    let seconds = clock.num_seconds_from_midnight();
    let micros = nanos / 1000;
    let pairs = [
        (0, year / 100),
        (2, year % 100),
        (5, date.month()),
        (8, date.day()),
        (11, seconds / 3600),
        (14, seconds / 60 % 60),
        (17, seconds % 60),
        (20, micros / 10_000),
        (22, micros / 100 % 100),
        (24, micros % 100),
    ];
    let mut buffer = *b"0000-00-00T00:00:00.000000Z";
    for (at, value) in pairs {
        // Every value is below 100.
        let pair = 2 * value as usize;
        buffer[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    Some(buffer)
}

/// `00`, `01`, … `99`: two digits at a time (a division by 100 instead of
/// two by 10).
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0; 200];
    let mut n = 0;
    while n < 100 {
        pairs[2 * n] = b'0' + (n / 10) as u8;
        pairs[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    pairs
};

/// What an order's answer may include beyond its own fields (since 1.4.0):
/// `placedBy`, the name of the API key that placed it, for a key with the
/// scope `orders:manage`.
// Plain comments on the variants: see `PetStatus`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema, strum::IntoStaticStr,
)]
#[serde(rename_all = "camelCase")]
#[strum(serialize_all = "camelCase")]
#[allow(missing_docs)]
pub enum OrderInclude {
    // Who placed the order.
    PlacedBy,
}

impl OrderInclude {
    /// The wire spelling: serde's, written by strum (a test compares them).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The status an order is to have.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderUpdate {
    /// `delivered` (the animal is sold) or `cancelled` (the animal is
    /// available again).
    pub status: OrderUpdateStatus,
}

/// `delivered` (the animal is sold) or `cancelled` (the animal is available
/// again).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum OrderUpdateStatus {
    Delivered,
    Cancelled,
}

impl From<OrderUpdateStatus> for OrderStatus {
    fn from(status: OrderUpdateStatus) -> OrderStatus {
        match status {
            OrderUpdateStatus::Delivered => OrderStatus::Delivered,
            OrderUpdateStatus::Cancelled => OrderStatus::Cancelled,
        }
    }
}

/// How many animals have each status. Animals without a status are in no
/// count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Inventory {
    /// Animals that can be ordered.
    #[schemars(range(min = 0))]
    pub available: i64,
    /// Animals with a `placed` order (or created as `pending`).
    #[schemars(range(min = 0))]
    pub pending: i64,
    /// Animals whose order was delivered (or created as `sold`).
    #[schemars(range(min = 0))]
    pub sold: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placed_at_always_has_six_fractional_digits_and_z() {
        let order = Order {
            id: 1,
            pet_id: 2,
            status: OrderStatus::Placed,
            placed_at: DateTime::from_timestamp(1_795_305_600, 0).unwrap(),
            placed_by: None,
        };
        assert_eq!(
            serde_json::to_value(&order).unwrap(),
            json!({"id": 1, "petId": 2, "status": "placed",
                   "placedAt": "2026-11-22T00:00:00.000000Z"})
        );
    }

    #[test]
    fn order_bodies_are_strict() {
        let parse = |v| serde_json::from_value::<NewOrder>(v).map_err(|e| e.to_string());
        assert_eq!(parse(json!({"petId": 3})), Ok(NewOrder { pet_id: 3 }));
        assert!(parse(json!({"petId": 3, "quantity": 1})).is_err());
        assert!(parse(json!({})).is_err());
        let update = |v| serde_json::from_value::<OrderUpdate>(v).map_err(|e| e.to_string());
        assert!(update(json!({"status": "placed"})).is_err());
        assert!(update(json!({"status": "delivered", "x": 1})).is_err());
    }

    #[test]
    fn each_order_status_has_its_animals_status() {
        assert_eq!(OrderStatus::Placed.pet_status(), PetStatus::Pending);
        assert_eq!(OrderStatus::Delivered.pet_status(), PetStatus::Sold);
        assert_eq!(OrderStatus::Cancelled.pet_status(), PetStatus::Available);
        for status in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(status.as_str()), Some(status));
        }
    }

    #[test]
    fn strum_spells_each_value_as_serde_does() {
        for status in OrderStatus::ALL {
            assert_eq!(json!(status), json!(status.as_str()));
        }
        assert_eq!(json!(OrderInclude::PlacedBy), json!("placedBy"));
        assert_eq!(OrderInclude::PlacedBy.as_str(), "placedBy");
    }
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn times_are_written_as_chrono_writes_them() {
        let mut seconds: i64 = 1;
        let mut checked = 0;
        // Spread over the years 1970–9999, with every kind of fraction.
        while seconds < 253_402_300_799 {
            for nanos in [0, 1, 999, 1_000, 123_456_789, 999_999_999] {
                let time = DateTime::from_timestamp(seconds, nanos).unwrap();
                let ours = write_rfc3339_micros(&time).unwrap();
                let ours = std::str::from_utf8(&ours).unwrap();
                assert_eq!(ours, time.to_rfc3339_opts(SecondsFormat::Micros, true));
                checked += 1;
            }
            seconds = seconds * 3 + 7;
        }
        assert!(checked > 100);
        let leap = DateTime::from_timestamp(1_483_228_799, 1_500_000_000).unwrap();
        assert_eq!(write_rfc3339_micros(&leap), None);
    }
}
