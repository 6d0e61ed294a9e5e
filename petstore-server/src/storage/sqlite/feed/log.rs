//! The writer's side of the feed: events recorded in a write's
//! transaction, with the ids the writer assigns, and purges.

use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::super::schema::sqlite;
use crate::storage::{EventKind, StorageError};
use petstore_api::model::{Order, OrderStatus, Pet, PetStatus};

/// An event as memory retains it (see `retained.rs`).
#[derive(Clone, Copy, Debug)]
pub(in crate::storage::sqlite) struct RetainedEvent {
    pub(in crate::storage::sqlite) id: i64,
    pub(super) kind: EventKind,
    /// Microseconds.
    pub(super) at: i64,
    /// The animal's id for an animal's event, the order's for an order's.
    pub(super) subject: i64,
    /// For `PetCreated`: the status the animal was created with.
    pub(super) created: Option<PetStatus>,
}

/// The writer's side of the feed: the next id to assign, and the events of
/// the group being written, for memory once it is committed.
pub(in crate::storage::sqlite) struct EventLog {
    next: i64,
    /// The next id when the group began: where a rollback goes back to.
    group_start: i64,
    /// The group's events so far.
    group: Vec<RetainedEvent>,
}

impl EventLog {
    /// The log of the database `conn` opens: ids go on after the largest
    /// stored or purged one, so no id is ever given twice.
    pub(in crate::storage::sqlite) fn load(conn: &Connection) -> Result<EventLog, StorageError> {
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
            group: Vec::new(),
        })
    }

    /// The largest id committed (or purged): where the head starts.
    pub(in crate::storage::sqlite) fn head(&self) -> i64 {
        self.next - 1
    }

    /// A group begins.
    pub(in crate::storage::sqlite) fn begin_group(&mut self) {
        self.group_start = self.next;
        self.group.clear();
    }

    /// The group rolled back: its ids are given again.
    pub(in crate::storage::sqlite) fn roll_back(&mut self) {
        self.next = self.group_start;
        self.group.clear();
    }

    /// The events the group wrote, in id order.
    pub(in crate::storage::sqlite) fn written(&self) -> &[RetainedEvent] {
        &self.group
    }

    /// Records `PetCreated` for `pet`, with the status it was created with.
    pub(in crate::storage::sqlite) fn pet_created(
        &mut self,
        tx: &Connection,
        pet: &Pet,
    ) -> rusqlite::Result<()> {
        let event = NewEvent {
            kind: EventKind::PetCreated,
            at: Utc::now().timestamp_micros(),
            pet_id: pet.id,
            order_id: None,
            owner: None,
            created: pet.status,
        };
        self.record(tx, event)
    }

    /// Records the order event of `order`'s having its status now (at
    /// `at`, microseconds), and right after it the status change of its
    /// animal that goes with it.
    pub(in crate::storage::sqlite) fn order_changed(
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
            created: None,
        };
        self.record(tx, event)?;
        match kind.pet_change() {
            Some(change) => {
                let change = NewEvent {
                    kind: change,
                    order_id: None,
                    owner: None,
                    ..event
                };
                self.record(tx, change)
            }
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
            event.created.map(PetStatus::as_str)
        ])?;
        self.group.push(RetainedEvent {
            id: self.next,
            kind: event.kind,
            at: event.at,
            subject: event.order_id.unwrap_or(event.pet_id),
            created: event.created,
        });
        self.next += 1;
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
    /// For `PetCreated`: the status the animal was created with.
    created: Option<PetStatus>,
}

/// What a purge deleted: how many, up to which id, and the time of the
/// oldest event left.
pub(in crate::storage::sqlite) struct Purged {
    pub(in crate::storage::sqlite) count: usize,
    /// The largest id deleted: the new floor, if any was.
    pub(super) floor: Option<i64>,
    pub(super) oldest: Option<i64>,
}

/// Deletes at most `limit` of the smallest ids, while they are older than
/// `before` (microseconds): a prefix even if the clock once went back, so
/// the floor (raised to the largest id deleted) never passes a kept event.
pub(in crate::storage::sqlite) fn purge(
    conn: &mut Connection,
    before: i64,
    limit: usize,
) -> rusqlite::Result<Purged> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut floor = None;
    {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut oldest_first =
            tx.prepare_cached("SELECT id, at FROM events ORDER BY id LIMIT ?1")?;
        let mut rows = oldest_first.query([limit])?;
        while let Some(row) = rows.next()? {
            if row.get::<_, i64>(1)? >= before {
                break;
            }
            floor = Some(row.get::<_, i64>(0)?);
        }
    }
    let count = match floor {
        Some(floor) => {
            let count = tx
                .prepare_cached("DELETE FROM events WHERE id <= ?1")?
                .execute([floor])?;
            tx.prepare_cached("UPDATE events_floor SET floor = ?1 WHERE floor < ?1")?
                .execute([floor])?;
            count
        }
        None => 0,
    };
    let oldest = tx
        .prepare_cached("SELECT at FROM events ORDER BY id LIMIT 1")?
        .query_row([], |row| row.get(0))
        .optional()?;
    tx.commit()?;
    Ok(Purged {
        count,
        floor,
        oldest,
    })
}
