//! Pages of the feed: from memory's tail when they start in it, else from
//! the file, on a few read-only connections. Both examine the rows the
//! same way ([`Scan`]) and make each event's data from memory.

use std::sync::{Arc, Mutex, TryLockError};

use rusqlite::types::{Type, ValueRef};
use rusqlite::{Connection, OpenFlags, params};
use tokio::sync::Semaphore;

use super::super::memory::{Committed, SharedMemory, read};
use super::super::rows::micros_to_time;
use super::super::schema::{BUSY_TIMEOUT, sqlite};
use crate::storage::{
    EVENT_SCAN_MAX, EventKind, EventPage, EventQuery, EventsOutcome, OwnerId, StorageError,
    StoredEvent,
};
use petstore_api::model::{EventData, Order, OrderStatus, PetStatus};

/// Read-only connections kept open for pages that start before memory's
/// tail: a page holds one only while it queries.
const READERS: usize = 4;

/// An event that passed the query's filters, before its data is made.
struct Row {
    id: i64,
    kind: EventKind,
    at: i64,
    pet_id: i64,
    order_id: Option<i64>,
    created: Option<PetStatus>,
}

/// The rows a page examines, in id order, and what it keeps of them.
struct Scan {
    query: EventQuery,
    found: Vec<Row>,
    examined: u32,
    last_examined: Option<i64>,
}

impl Scan {
    fn new(query: EventQuery) -> Scan {
        Scan {
            query,
            found: Vec::with_capacity(query.limit as usize),
            examined: 0,
            last_examined: None,
        }
    }

    /// Whether the page may examine another row: it is not full, and not
    /// at the bound.
    fn wants_more(&self) -> bool {
        self.found.len() < self.query.limit as usize && self.examined < EVENT_SCAN_MAX
    }

    /// Examines the event `id` of `kind` (about an order of `owner`, for
    /// an order event); `row` makes it when it is kept.
    fn examine(
        &mut self,
        id: i64,
        kind: EventKind,
        owner: impl FnOnce() -> Option<OwnerId>,
        row: impl FnOnce() -> Result<Row, StorageError>,
    ) -> Result<(), StorageError> {
        self.examined += 1;
        self.last_examined = Some(id);
        let seen = match self.query.owner {
            _ if !self.query.kinds.contains(kind) => false,
            Some(only) if kind.is_order() => owner() == Some(only),
            _ => true,
        };
        if seen {
            self.found.push(row()?);
        }
        Ok(())
    }

    /// The page, its events' data made from `memory`. `ended`: the rows up
    /// to the head ran out before the page was full or at the bound.
    fn page(
        self,
        memory: &Committed,
        after: i64,
        head: i64,
        ended: bool,
    ) -> Result<EventPage, StorageError> {
        // Ids are consecutive: a page that stopped (full, or at the bound)
        // reached the head only if its last row was the head.
        let (next_after, at_head) = if ended {
            (self.last_examined.unwrap_or(after), true)
        } else if self.found.len() == self.query.limit as usize {
            let last = self.found.last().map_or(after, |row| row.id);
            (last, last >= head)
        } else {
            let last = self.last_examined.unwrap_or(after);
            (last, last >= head)
        };
        let events = self
            .found
            .into_iter()
            .map(|row| stored_event(memory, row))
            .collect::<Result<_, _>>()?;
        Ok(EventPage {
            events,
            next_after,
            head,
            at_head,
        })
    }
}

/// Where a page starts: `query.after`, or the floor; or the page is
/// expired.
fn start(query: &EventQuery, floor: i64) -> Result<i64, EventsOutcome> {
    match query.after {
        Some(after) if after < floor => Err(EventsOutcome::Expired { floor }),
        Some(after) => Ok(after),
        None => Ok(floor),
    }
}

/// The page `query` asks for up to `head` (read before this is called), from
/// memory; `None` when it starts before memory's tail (or the tail does not
/// reach the head), and must be read from the file.
pub(in crate::storage::sqlite) fn memory_page(
    memory: &Committed,
    query: EventQuery,
    head: i64,
) -> Option<Result<EventsOutcome, StorageError>> {
    let feed = &memory.events;
    let after = match start(&query, feed.floor) {
        Ok(after) => after,
        Err(expired) => return Some(Ok(expired)),
    };
    if !feed.any_of_after(query.kinds, after) {
        // Nothing of its kinds to examine: a long poll parked on a type
        // nobody writes would otherwise go through every commit's events.
        return Some(Ok(EventsOutcome::Page(EventPage {
            events: Vec::new(),
            next_after: after.max(head),
            head,
            at_head: true,
        })));
    }
    let from = after.saturating_add(1);
    let tail = &feed.tail;
    if from <= head && (tail.first().is_none_or(|first| from < first) || tail.last() < Some(head)) {
        return None;
    }
    let mut scan = Scan::new(query);
    let page = scan_tail(memory, &mut scan, from, head)
        .and_then(|ended| scan.page(memory, after, head, ended));
    Some(page.map(EventsOutcome::Page))
}

/// Examines the tail's events from `from` on, up to `head`; says whether
/// they ran out before the page was full or at the bound.
fn scan_tail(
    memory: &Committed,
    scan: &mut Scan,
    from: i64,
    head: i64,
) -> Result<bool, StorageError> {
    let tail = &memory.events.tail;
    for id in from..=head {
        if !scan.wants_more() {
            return Ok(false);
        }
        let Some(event) = tail.get(id) else {
            return Err(StorageError::Invariant(
                "the feed's tail does not reach the head",
            ));
        };
        // An order event's subject is its order: its animal and owner are
        // the order's.
        let order = || memory.orders.pet_and_owner(event.subject);
        let row = || {
            let (pet_id, order_id) = if event.kind.is_order() {
                let (pet_id, _) =
                    order().ok_or(StorageError::Invariant("an event's order is not in memory"))?;
                (pet_id, Some(event.subject))
            } else {
                (event.subject, None)
            };
            Ok(Row {
                id,
                kind: event.kind,
                at: event.at,
                pet_id,
                order_id,
                created: event.created,
            })
        };
        scan.examine(id, event.kind, || order().and_then(|(_, owner)| owner), row)?;
    }
    Ok(true)
}

/// The page `query` asks for up to `head` (read before this is called, so
/// every id up to it is committed, and in memory), from the file.
pub(in crate::storage::sqlite) fn file_page(
    conn: &Connection,
    memory: &SharedMemory,
    query: EventQuery,
    head: i64,
) -> Result<EventsOutcome, StorageError> {
    let sql = sqlite("reading the feed");
    // The floor and the rows from one snapshot: a purge committed between
    // them would otherwise take rows after a cursor it did not expire.
    let tx = conn.unchecked_transaction().map_err(&sql)?;
    let floor: i64 = tx
        .prepare_cached("SELECT floor FROM events_floor")
        .and_then(|mut select| select.query_row([], |row| row.get(0)))
        .map_err(&sql)?;
    let after = match start(&query, floor) {
        Ok(after) => after,
        Err(expired) => return Ok(expired),
    };
    let mut scan = Scan::new(query);
    let mut ended = false;
    {
        let mut select = tx
            .prepare_cached(
                "SELECT id, kind, at, pet_id, order_id, owner, created_status FROM events
                 WHERE id > ?1 AND id <= ?2 ORDER BY id LIMIT ?3",
            )
            .map_err(&sql)?;
        let mut rows = select
            .query(params![after, head, EVENT_SCAN_MAX])
            .map_err(&sql)?;
        while scan.wants_more() {
            let Some(row) = rows.next().map_err(&sql)? else {
                ended = true;
                break;
            };
            let id: i64 = row.get(0).map_err(&sql)?;
            let kind = decode_kind(id, row.get(1).map_err(&sql)?).map_err(&sql)?;
            let owner = || match row.get_ref(5) {
                Ok(ValueRef::Blob(owner)) => <[u8; 32]>::try_from(owner).ok().map(OwnerId),
                _ => None,
            };
            let decode = || -> rusqlite::Result<Row> {
                let created = match row.get_ref(6)? {
                    ValueRef::Null => None,
                    status => Some(decode_status(id, status)?),
                };
                Ok(Row {
                    id,
                    kind,
                    at: row.get(2)?,
                    pet_id: row.get(3)?,
                    order_id: row.get(4)?,
                    created,
                })
            };
            scan.examine(id, kind, owner, || decode().map_err(&sql))?;
        }
    }
    drop(tx);
    let page = read(memory, |memory| scan.page(memory, after, head, ended))??;
    Ok(EventsOutcome::Page(page))
}

/// The event `row`, its data made from memory: the animal as it was right
/// after the change (a pet's name and category never change), or the
/// order (whose `placed_at` never changes).
fn stored_event(memory: &Committed, row: Row) -> Result<StoredEvent, StorageError> {
    let Some(mut pet) = memory.pets.get(row.pet_id) else {
        return Err(StorageError::Invariant(
            "an event's animal is not in memory",
        ));
    };
    let data = match (row.kind, row.order_id) {
        (EventKind::PetCreated, _) => {
            pet.status = row.created;
            EventData::Pet(pet)
        }
        (kind, Some(order_id)) if kind.is_order() => {
            let placed_at = memory
                .orders
                .placed_at(order_id)
                .ok_or(StorageError::Invariant("an event's order is not in memory"))?;
            let status = match kind {
                EventKind::OrderDelivered => OrderStatus::Delivered,
                EventKind::OrderCancelled => OrderStatus::Cancelled,
                _ => OrderStatus::Placed,
            };
            EventData::Order(Order {
                id: order_id,
                pet_id: row.pet_id,
                status,
                placed_at,
                placed_by: None,
            })
        }
        (kind, _) => match kind.status_change() {
            Some((_, after)) => {
                pet.status = Some(after);
                EventData::Pet(pet)
            }
            None => return Err(StorageError::Invariant("an order event without its order")),
        },
    };
    Ok(StoredEvent {
        id: row.id,
        kind: row.kind,
        time: micros_to_time(row.at),
        data,
    })
}

/// The kind stored as `code` in the event `id`.
pub(super) fn decode_kind(id: i64, code: i64) -> rusqlite::Result<EventKind> {
    EventKind::from_code(code).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(1, format!("kind of event {id}: {code}"), Type::Integer)
    })
}

/// The status stored as `created_status` in the event `id`.
pub(super) fn decode_status(id: i64, status: ValueRef<'_>) -> rusqlite::Result<PetStatus> {
    let text = status.as_str().ok();
    text.and_then(PetStatus::parse).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(
            6,
            format!("created_status of event {id}: {text:?}"),
            Type::Text,
        )
    })
}

/// A few read-only connections to the database, open for the storage's
/// life, each used by one page at a time. Extra SQLite connections are
/// safe beside the writer's (`lock.rs`): SQLite shares one descriptor's
/// POSIX locks among its connections within a process.
pub(in crate::storage::sqlite) struct Readers {
    /// `None` once closed.
    slots: Vec<Mutex<Option<Connection>>>,
    /// One for each idle slot: a page waits here, not on a thread.
    permits: Arc<Semaphore>,
}

impl Readers {
    /// Opens `READERS` read-only connections to the database at `path`.
    pub(in crate::storage::sqlite) fn open(
        path: &std::path::Path,
    ) -> Result<Readers, StorageError> {
        let open = || {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            Ok(Mutex::new(Some(conn)))
        };
        let slots = (0..READERS)
            .map(|_| open())
            .collect::<rusqlite::Result<_>>()
            .map_err(sqlite("opening the feed's readers"))?;
        Ok(Readers {
            slots,
            permits: Arc::new(Semaphore::new(READERS)),
        })
    }

    /// Runs `f` on an idle connection, on a blocking thread.
    pub(in crate::storage::sqlite) async fn read<T: Send + 'static>(
        self: &Arc<Readers>,
        f: impl FnOnce(&Connection) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| StorageError::Closed)?;
        let readers = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            // Held until the slot is back: a page whose request went away
            // still owns its connection until its query is done.
            let _permit = permit;
            let mut slot = readers
                .slots
                .iter()
                .find_map(|slot| match slot.try_lock() {
                    Ok(slot) => Some(slot),
                    // A panic in a page leaves the connection usable.
                    Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                    Err(TryLockError::WouldBlock) => None,
                })
                .ok_or(StorageError::Invariant(
                    "a reader's permit without an idle reader",
                ))?;
            f(slot.as_mut().ok_or(StorageError::Closed)?)
        })
        .await
        .map_err(|_| StorageError::Invariant("a read of the feed panicked"))?
    }

    /// Waits for the pages being read, then closes every connection; later
    /// reads fail as closed.
    pub(in crate::storage::sqlite) async fn close(&self) {
        let all = u32::try_from(READERS).expect("a few readers");
        let held = self.permits.acquire_many(all).await;
        for slot in &self.slots {
            slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        self.permits.close();
        drop(held);
    }
}
