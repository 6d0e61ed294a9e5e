//! What the database holds, in memory: every pet, every order and every
//! retained event, loaded at start-up
//! and changed only by the writer, after each commit (see the module's
//! documentation in `mod.rs`).

use std::sync::{RwLock, RwLockWriteGuard};

use rusqlite::Connection;

use super::catalogue::Catalogue;
use super::feed::Feed;
use super::orders::OrderBook;
use super::rows::{ORDER_COLUMNS, SELECT_PET, order_from_row, pet_from_row};
use super::schema::sqlite;
use crate::storage::{OwnerId, StorageError};

/// Everything the database holds, read once at start-up.
pub(super) fn load(conn: &Connection) -> Result<Committed, StorageError> {
    Ok(Committed {
        pets: load_pets(conn)?,
        orders: load_orders(conn)?,
        events: Feed::load(conn)?,
    })
}

fn load_pets(conn: &Connection) -> Result<Catalogue, StorageError> {
    let sql = sqlite("loading the catalogue");
    let mut catalogue = Catalogue::default();
    let mut select = conn
        .prepare(&format!("{SELECT_PET} ORDER BY id"))
        .map_err(&sql)?;
    let rows = select
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .map_err(&sql)?;
    for row in rows {
        catalogue.push(&pet_from_row(row.map_err(&sql)?)?);
    }
    Ok(catalogue)
}

fn load_orders(conn: &Connection) -> Result<OrderBook, StorageError> {
    let sql = sqlite("loading the orders");
    let mut orders = OrderBook::default();
    let mut select = conn
        .prepare(&format!(
            "SELECT {ORDER_COLUMNS}, owner FROM orders ORDER BY id"
        ))
        .map_err(&sql)?;
    let mut rows = select.query([]).map_err(&sql)?;
    while let Some(row) = rows.next().map_err(&sql)? {
        let order = order_from_row(row).map_err(&sql)?;
        let owner: Option<Vec<u8>> = row.get(5).map_err(&sql)?;
        let owner = owner.and_then(|bytes| <[u8; 32]>::try_from(bytes).ok().map(OwnerId));
        orders.push(&order, owner.as_ref());
    }
    Ok(orders)
}

/// What the database holds, in memory: every pet, every order, and the
/// feed's floor, tally and retained events.
pub(super) struct Committed {
    pub(super) pets: Catalogue,
    pub(super) orders: OrderBook,
    pub(super) events: Feed,
}

/// The committed state in memory; `None` once the storage is closed.
pub(super) type SharedMemory = RwLock<Option<Committed>>;

/// Reads the committed state with `f`, or fails once the storage is closed.
pub(super) fn read<T>(
    memory: &SharedMemory,
    f: impl FnOnce(&Committed) -> T,
) -> Result<T, StorageError> {
    // A poisoned lock means a panic elsewhere while holding it; `push`
    // checks before it changes anything, so memory is still whole.
    let guard = memory.read().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().map(f).ok_or(StorageError::Closed)
}

pub(super) fn write(memory: &SharedMemory) -> RwLockWriteGuard<'_, Option<Committed>> {
    memory.write().unwrap_or_else(|e| e.into_inner())
}
