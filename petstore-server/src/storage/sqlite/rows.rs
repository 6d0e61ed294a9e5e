//! Rows as stored, decoded: what is read at start-up and inside the
//! writer's transactions alike.

use chrono::{DateTime, Utc};

use crate::storage::StorageError;
use petstore_api::model::{Order, OrderStatus, Pet, PetStatus};

/// The columns of a pet, in [`RawRow`]'s order.
pub(super) const SELECT_PET: &str = "SELECT id, name, category_id, status FROM pets";

/// A time stored as microseconds since the Unix epoch.
pub(super) fn micros_to_time(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

/// A row as stored, before it is checked.
pub(super) type RawRow = (
    i64,
    rusqlite::types::Value,
    rusqlite::types::Value,
    rusqlite::types::Value,
);

/// Decodes a stored row into a pet, naming the id and the column of any
/// value that is not what the schema promises (another program may have
/// written it).
pub(super) fn pet_from_row((id, name, category_id, status): RawRow) -> Result<Pet, StorageError> {
    use rusqlite::types::Value;
    let wrong = |column, value: &Value, expected| StorageError::Undecodable {
        id,
        column,
        value: describe(value),
        expected,
    };
    let name = match name {
        Value::Text(name) => name,
        other => return Err(wrong("name", &other, "name (text)")),
    };
    let category_id = match category_id {
        Value::Integer(category_id) => category_id,
        other => return Err(wrong("category_id", &other, "categoryId (int64)")),
    };
    let status = match &status {
        Value::Null => None,
        Value::Text(text) => Some(
            PetStatus::parse(text)
                .ok_or_else(|| wrong("status", &status, "status (available, pending, sold)"))?,
        ),
        other => return Err(wrong("status", other, "status (available, pending, sold)")),
    };
    Ok(Pet {
        id,
        name,
        category_id,
        status,
    })
}

fn describe(value: &rusqlite::types::Value) -> String {
    use rusqlite::types::Value;
    match value {
        Value::Null => "NULL".into(),
        Value::Integer(i) => format!("the integer {i}"),
        Value::Real(r) => format!("the real {r}"),
        Value::Text(t) => format!("the text {t:?}"),
        Value::Blob(b) => format!("a blob of {} bytes", b.len()),
    }
}

/// The columns [`order_from_row`] reads.
pub(super) const ORDER_COLUMNS: &str = "id, pet_id, status, placed_at, placed_by";

/// An order as stored: [`ORDER_COLUMNS`], `placed_at` in microseconds.
pub(super) fn order_from_row(row: &rusqlite::Row) -> rusqlite::Result<Order> {
    let id = row.get(0)?;
    let status: String = row.get(2)?;
    let status = OrderStatus::parse(&status).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(
            2,
            format!("status of order {id}: {status:?}"),
            rusqlite::types::Type::Text,
        )
    })?;
    Ok(Order {
        id,
        pet_id: row.get(1)?,
        status,
        placed_at: micros_to_time(row.get(3)?),
        placed_by: row.get(4)?,
    })
}
