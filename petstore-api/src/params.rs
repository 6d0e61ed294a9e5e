//! The parameters of the operations: what the query and path extractors
//! parse, with messages that name the parameter when a value is wrong.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

use crate::error::ApiError;
use crate::model::{OrderInclude, OrderStatus, PetStatus};
use crate::{LIMIT_DEFAULT, LIMIT_MAX};

/// Query parameters of `GET /pets`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListPetsParams {
    /// Maximum number of animals returned (1 to 100, default 20).
    #[serde(default = "default_limit", deserialize_with = "limit_param")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i32,
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

fn default_limit() -> i32 {
    LIMIT_DEFAULT
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

fn limit_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    integer_param(deserializer, "limit", "an integer between 1 and 100")
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

impl ListPetsParams {
    /// The page size asked for, checked against the contract's bounds.
    pub fn checked_limit(&self) -> Result<u32, ApiError> {
        checked_limit(self.limit)
    }
}

/// Query parameters of `GET /store/orders`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListOrdersParams {
    /// Maximum number of orders returned (1 to 100, default 20).
    #[serde(default = "default_limit", deserialize_with = "limit_param")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i32,
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

/// Query parameters of `GET /store/orders/{orderId}`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetOrderParams {
    /// `placedBy`: include who placed the order (a key with
    /// `orders:manage` only).
    #[serde(default)]
    #[schemars(with = "OrderInclude")]
    pub include: Option<OrderInclude>,
}

impl ListOrdersParams {
    /// The page size asked for, checked against the contract's bounds.
    pub fn checked_limit(&self) -> Result<u32, ApiError> {
        checked_limit(self.limit)
    }
}

fn checked_limit(limit: i32) -> Result<u32, ApiError> {
    u32::try_from(limit)
        .ok()
        .filter(|limit| (1..=LIMIT_MAX as u32).contains(limit))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "limit must be between 1 and {LIMIT_MAX}, got {limit}"
            ))
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> ListPetsParams {
        serde_urlencoded::from_str(query).unwrap()
    }

    #[test]
    fn limit_defaults_to_20_and_stays_within_1_to_100() {
        assert_eq!(params("").checked_limit().unwrap(), 20);
        assert_eq!(params("limit=1").checked_limit().unwrap(), 1);
        assert_eq!(params("limit=100").checked_limit().unwrap(), 100);
        for bad in [0, 101, -1, i32::MIN, i32::MAX] {
            let error = params(&format!("limit={bad}")).checked_limit().unwrap_err();
            assert_eq!(error.status, 400, "{bad}");
        }
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
