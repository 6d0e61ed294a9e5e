//! The events feed on SQLite (see `storage/events.rs` for what it promises).
//!
//! - **Written by the writer, in the write's transaction.** The one writer
//!   thread assigns ids itself ([`EventLog`]), in the order it applies the
//!   writes, so ids ascend in commit order; a group that rolls back gives
//!   its ids back, so committed ids are consecutive. After a commit, memory
//!   is changed, then the head (the largest committed id) is sent, then the
//!   group is answered: a client that got its answer finds its events.
//! - **Read from the file.** Unlike pets and orders, events are not kept in
//!   memory: a page is read on one of a few read-only connections
//!   ([`Readers`]; WAL lets them read while the writer writes), bounded by
//!   the head read before the query, so it never returns an id above which
//!   a smaller one could still appear. A pet's name and category, and an
//!   order's `placed_at`, never change: they come from memory, which holds
//!   every pet and order an event up to the head is about.
//! - **Purged as a prefix.** [`purge`] deletes the smallest ids while they
//!   are older than asked, and raises the floor in the same transaction; a
//!   page reads the floor and the rows in one read transaction, so a
//!   cursor is either served whole or expired.

use std::sync::{Arc, Mutex, TryLockError};

use chrono::{DateTime, Utc};
use rusqlite::types::{Type, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use tokio::sync::Semaphore;

use super::memory::{Committed, SharedMemory, read};
use super::rows::micros_to_time;
use super::schema::{BUSY_TIMEOUT, sqlite};
use crate::storage::{
    EVENT_SCAN_MAX, EventKind, EventPage, EventQuery, EventsOutcome, StorageError, StoredEvent,
};
use petstore_api::model::{EventData, Order, OrderStatus, Pet, PetStatus};

/// Read-only connections kept open for pages of the feed: a page holds one
/// only while it queries, so a few serve many long-polls.
pub(super) const READERS: usize = 4;

/// The writer's side of the feed: the next id to assign, and what the group
/// being written has written so far.
pub(super) struct EventLog {
    next: i64,
    /// The next id when the group began: where a rollback goes back to.
    group_start: i64,
    /// The time of the group's first event, if it wrote one.
    group_first_at: Option<i64>,
}

/// What a committed group wrote to the feed.
pub(super) struct Written {
    /// How many events.
    pub(super) count: u64,
    /// The first one's time (microseconds).
    pub(super) first_at: i64,
    /// The largest id: the new head.
    pub(super) head: i64,
}

impl EventLog {
    /// The log of the database `conn` opens: ids go on after the largest
    /// stored or purged one, so no id is ever given twice.
    pub(super) fn load(conn: &Connection) -> Result<EventLog, StorageError> {
        let head: i64 = conn
            .query_row(
                "SELECT max(coalesce((SELECT max(id) FROM events), 0), floor) FROM events_floor",
                [],
                |row| row.get(0),
            )
            .map_err(sqlite("reading the feed's head"))?;
        Ok(EventLog {
            next: head + 1,
            group_start: head + 1,
            group_first_at: None,
        })
    }

    /// The largest id committed (or purged): where the head starts.
    pub(super) fn head(&self) -> i64 {
        self.next - 1
    }

    /// A group begins: its events are counted from here.
    pub(super) fn begin_group(&mut self) {
        self.group_start = self.next;
        self.group_first_at = None;
    }

    /// The group rolled back: its ids are given again.
    pub(super) fn roll_back(&mut self) {
        self.next = self.group_start;
        self.group_first_at = None;
    }

    /// What the group wrote, if anything.
    pub(super) fn written(&self) -> Option<Written> {
        self.group_first_at.map(|first_at| Written {
            count: (self.next - self.group_start).unsigned_abs(),
            first_at,
            head: self.next - 1,
        })
    }

    /// Records `PetCreated` for `pet`, with the status it was created with.
    pub(super) fn pet_created(&mut self, tx: &Connection, pet: &Pet) -> rusqlite::Result<()> {
        self.record(
            tx,
            NewEvent {
                kind: EventKind::PetCreated,
                at: Utc::now().timestamp_micros(),
                pet_id: pet.id,
                order_id: None,
                owner: None,
                created_status: pet.status.map(PetStatus::as_str),
            },
        )
    }

    /// Records the order event of `order`'s having its status now (at
    /// `at`, microseconds), and right after it the status change of its
    /// animal that goes with it.
    pub(super) fn order_changed(
        &mut self,
        tx: &Connection,
        order: &Order,
        owner: Option<&[u8]>,
        at: i64,
    ) -> rusqlite::Result<()> {
        let kind = match order.status {
            OrderStatus::Placed => EventKind::OrderPlaced,
            OrderStatus::Delivered => EventKind::OrderDelivered,
            OrderStatus::Cancelled => EventKind::OrderCancelled,
        };
        let event = NewEvent {
            kind,
            at,
            pet_id: order.pet_id,
            order_id: Some(order.id),
            owner,
            created_status: None,
        };
        self.record(tx, event)?;
        match kind.pet_change() {
            Some(change) => self.record(
                tx,
                NewEvent {
                    kind: change,
                    order_id: None,
                    owner: None,
                    ..event
                },
            ),
            None => Ok(()),
        }
    }

    fn record(&mut self, tx: &Connection, event: NewEvent) -> rusqlite::Result<()> {
        tx.prepare_cached(
            "INSERT INTO events (id, kind, at, pet_id, order_id, owner, created_status)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            self.next,
            event.kind.code(),
            event.at,
            event.pet_id,
            event.order_id,
            event.owner,
            event.created_status
        ])?;
        self.next += 1;
        self.group_first_at.get_or_insert(event.at);
        Ok(())
    }
}

/// An event's row, as the writer inserts it.
#[derive(Clone, Copy)]
struct NewEvent<'a> {
    kind: EventKind,
    /// Microseconds.
    at: i64,
    pet_id: i64,
    /// For an order event.
    order_id: Option<i64>,
    /// For an order event: the order's owner.
    owner: Option<&'a [u8]>,
    /// For `PetCreated`: the status the pet was created with.
    created_status: Option<&'static str>,
}

/// The events retained, as memory counts them for the figures (changed by
/// the writer after each commit that wrote or purged some).
#[derive(Default)]
pub(super) struct EventTally {
    /// How many.
    pub(super) count: u64,
    /// The time of the smallest id (microseconds).
    pub(super) oldest: Option<i64>,
}

impl EventTally {
    /// The tally of what the database holds (a count of the table: once,
    /// at start-up).
    pub(super) fn load(conn: &Connection) -> Result<EventTally, StorageError> {
        conn.query_row(
            "SELECT (SELECT count(*) FROM events), (SELECT at FROM events ORDER BY id LIMIT 1)",
            [],
            |row| {
                Ok(EventTally {
                    count: row.get::<_, i64>(0)?.unsigned_abs(),
                    oldest: row.get(1)?,
                })
            },
        )
        .map_err(sqlite("counting the events"))
    }

    /// A group committed these events.
    pub(super) fn add(&mut self, written: &Written) {
        self.count += written.count;
        self.oldest.get_or_insert(written.first_at);
    }

    /// A purge committed.
    pub(super) fn remove(&mut self, purged: &Purged) {
        self.count = self.count.saturating_sub(purged.count as u64);
        self.oldest = purged.oldest;
    }

    /// The oldest event's time.
    pub(super) fn oldest(&self) -> Option<DateTime<Utc>> {
        self.oldest.map(micros_to_time)
    }
}

/// What a purge deleted, and the time of the oldest event left.
pub(super) struct Purged {
    pub(super) count: usize,
    pub(super) oldest: Option<i64>,
}

/// Deletes at most `limit` of the smallest ids, while they are older than
/// `before` (microseconds): a prefix even if the clock once went back, so
/// the floor (raised to the largest id deleted) never passes a kept event.
pub(super) fn purge(conn: &mut Connection, before: i64, limit: usize) -> rusqlite::Result<Purged> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut last = None;
    {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut oldest_first =
            tx.prepare_cached("SELECT id, at FROM events ORDER BY id LIMIT ?1")?;
        let mut rows = oldest_first.query([limit])?;
        while let Some(row) = rows.next()? {
            if row.get::<_, i64>(1)? >= before {
                break;
            }
            last = Some(row.get::<_, i64>(0)?);
        }
    }
    let count = match last {
        Some(last) => {
            let count = tx
                .prepare_cached("DELETE FROM events WHERE id <= ?1")?
                .execute([last])?;
            tx.prepare_cached("UPDATE events_floor SET floor = ?1 WHERE floor < ?1")?
                .execute([last])?;
            count
        }
        None => 0,
    };
    let oldest = oldest(&tx)?;
    tx.commit()?;
    Ok(Purged { count, oldest })
}

fn oldest(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT at FROM events ORDER BY id LIMIT 1")?
        .query_row([], |row| row.get(0))
        .optional()
}

/// A few read-only connections to the database, open for the storage's
/// life, each used by one page at a time. Extra SQLite connections are
/// safe beside the writer's (`lock.rs`): SQLite shares one descriptor's
/// POSIX locks among its connections within a process.
pub(super) struct Readers {
    /// `None` once closed.
    slots: Vec<Mutex<Option<Connection>>>,
    /// One for each idle slot: a page waits here, not on a thread.
    permits: Arc<Semaphore>,
}

impl Readers {
    /// Opens `READERS` read-only connections to the database at `path`.
    pub(super) fn open(path: &std::path::Path) -> Result<Readers, StorageError> {
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
    pub(super) async fn read<T: Send + 'static>(
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
    pub(super) async fn close(&self) {
        let all = u32::try_from(READERS).expect("a few readers");
        let held = self.permits.acquire_many(all).await;
        for slot in &self.slots {
            slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        self.permits.close();
        drop(held);
    }
}

/// An event row that passed the query's filters, before its data is
/// looked up.
struct Row {
    id: i64,
    kind: EventKind,
    at: i64,
    pet_id: i64,
    order_id: Option<i64>,
    created_status: Option<PetStatus>,
}

/// The page `query` asks for, up to `head` (read before this is called,
/// so every id up to it is committed, and in memory).
pub(super) fn read_page(
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
    let after = match query.after {
        Some(after) if after < floor => return Ok(EventsOutcome::Expired { floor }),
        Some(after) => after,
        None => floor,
    };
    let limit = query.limit as usize;
    let mut found = Vec::with_capacity(limit);
    let mut examined = 0;
    let mut last_examined = None;
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
        while found.len() < limit {
            let Some(row) = rows.next().map_err(&sql)? else {
                ended = true;
                break;
            };
            examined += 1;
            let id: i64 = row.get(0).map_err(&sql)?;
            last_examined = Some(id);
            let kind = decode_kind(id, row.get(1).map_err(&sql)?).map_err(&sql)?;
            if !query.kinds.contains(kind) {
                continue;
            }
            if let Some(owner) = query.owner
                && kind.is_order()
                && row.get_ref(5).map_err(&sql)? != ValueRef::Blob(&owner.0)
            {
                continue;
            }
            let created_status = match row.get_ref(6).map_err(&sql)? {
                ValueRef::Null => None,
                status => Some(decode_status(id, status).map_err(&sql)?),
            };
            found.push(Row {
                id,
                kind,
                at: row.get(2).map_err(&sql)?,
                pet_id: row.get(3).map_err(&sql)?,
                order_id: row.get(4).map_err(&sql)?,
                created_status,
            });
        }
    }
    drop(tx);
    // Every row up to the head was examined when the rows ran out before
    // the scan's bound; otherwise the page stopped at a full page or at the
    // bound, and ids are consecutive, so it reached the head only if its
    // last row was the head.
    let all_examined = ended && examined < EVENT_SCAN_MAX;
    let (next_after, at_head) = if all_examined {
        (last_examined.unwrap_or(after), true)
    } else if found.len() == limit {
        let last = found.last().map_or(after, |row| row.id);
        (last, last >= head)
    } else {
        let last = last_examined.unwrap_or(after);
        (last, last >= head)
    };
    let events = read(memory, |memory| {
        found
            .into_iter()
            .map(|row| stored_event(memory, row))
            .collect::<Result<Vec<_>, _>>()
    })??;
    Ok(EventsOutcome::Page(EventPage {
        events,
        next_after,
        head,
        at_head,
    }))
}

/// The event `row`, its data made from memory: the animal as it was right
/// after the change, or the order.
fn stored_event(memory: &Committed, row: Row) -> Result<StoredEvent, StorageError> {
    let Some(mut pet) = memory.pets.get(row.pet_id) else {
        return Err(StorageError::Invariant(
            "an event's animal is not in memory",
        ));
    };
    let data = match (row.kind, row.order_id) {
        (EventKind::PetCreated, _) => {
            pet.status = row.created_status;
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

fn decode_kind(id: i64, code: i64) -> rusqlite::Result<EventKind> {
    EventKind::from_code(code).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(1, format!("kind of event {id}: {code}"), Type::Integer)
    })
}

fn decode_status(id: i64, status: ValueRef<'_>) -> rusqlite::Result<PetStatus> {
    let text = status.as_str().ok();
    text.and_then(PetStatus::parse).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(
            6,
            format!("created_status of event {id}: {text:?}"),
            Type::Text,
        )
    })
}
