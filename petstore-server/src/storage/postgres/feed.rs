//! The events feed on PostgreSQL: the table, the triggers that write every
//! change's events, pages read back up to the head, and the purge. How the
//! head moves (the no-skip rule) is `head.rs`.
//!
//! - **Written by triggers, in the change's own statement.** `AFTER … FOR
//!   EACH STATEMENT` triggers with transition tables, as the counts' are
//!   (`orders.rs`): `pets` INSERT writes a `PetCreated` per animal; `orders`
//!   INSERT an `OrderPlaced` and its `PetOrdered` per order; `orders`
//!   UPDATE, for each order that left `placed`, an `OrderDelivered` and its
//!   `PetSold`, or an `OrderCancelled` and its `PetReturned`. So every path
//!   that changes a row writes its events — batched and keyed creates,
//!   `PLACE_MANY`, `PLACE_ONCE`, `UPDATE_MANY`, and the statements of the
//!   release before while a rolling upgrade runs — in the change's
//!   transaction; a statement that changed nothing (a refusal) writes none.
//! - **Ids from a sequence, taken under the row's lock.** A statement
//!   trigger runs once the statement's rows are changed, and each changed
//!   row stays locked until its transaction ends. A later change of the
//!   same row (an animal, an order) waits for that lock, so it takes its
//!   ids after the earlier change committed, and `events_ids` (`CACHE 1`:
//!   with a cache per session, a later `nextval` could return a smaller
//!   value) gives it larger ones: ids increase in commit order for every
//!   resource. (The transaction's xid would not do: it is taken when the
//!   transaction first writes, and a batch that wrote another row first
//!   would sort before a change of the same animal that committed
//!   earlier.) Within a statement, ids follow the rows' ids, an order's
//!   event before its animal's.
//! - **A row holds its event.** Besides the kind and the time: an order's
//!   owner (the customer filter) and `placed_at`, an animal's name and
//!   category and its status at creation — what never changes; every other
//!   status follows from the kind. So a page reads the events alone. (Read
//!   from `pets` and `orders` by a join, the same page cost the database
//!   three times a `listPets` page of 20; copied here by the triggers,
//!   whose statements have the rows at hand, it costs the writes nothing
//!   measurable.)
//! - **Pages cost the same at any depth.** A page scans the primary key
//!   from its cursor, at most [`EVENT_SCAN_MAX`] rows up to the head, and
//!   filters them (kinds, owner) in the same statement; it stops as soon as
//!   it has its `limit`. A page of every kind for any owner, which keeps
//!   every row, is a plain range of the key (`PAGE_ALL`), at a third of the
//!   filtering statement's cost.
//! - **Retention.** Purging deletes a prefix of ids and raises the floor in
//!   the same statement, so "every event above the floor is kept" holds at
//!   every commit.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use enumset::EnumSet;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::batch::{Job, Waiting, fail_all};
use super::postgres;
use super::shared::{Lease, SharedConnections};
use crate::storage::{
    EVENT_SCAN_MAX, EventKind, EventPage, EventQuery, EventsOutcome, LIST_MAX, StorageError,
    StoredEvent,
};
use petstore_api::model::{EventData, Order, OrderStatus, Pet, PetStatus};

/// The feed's schema: the events, their ids, the floor, and the triggers
/// that write them. Additive: the release before keeps writing pets and
/// orders as it did, and its changes get their events too.
///
/// The kinds' codes are [`EventKind`]'s; an order's animal event is its
/// own code plus 3 (a test holds them to it).
pub(super) const MIGRATION: &str = "
    CREATE SEQUENCE events_ids AS BIGINT CACHE 1;
    CREATE TABLE events (
        id             BIGINT      PRIMARY KEY,
        kind           SMALLINT    NOT NULL,
        at             TIMESTAMPTZ NOT NULL,
        pet_id         BIGINT      NOT NULL,
        -- Order events and their animals' status changes.
        order_id       BIGINT,
        -- Order events: the digest of the key that placed the order, and
        -- when it was placed.
        owner          BYTEA,
        placed_at      TIMESTAMPTZ,
        -- Animal events: its name and category; PetCreated: the status it
        -- was created with.
        name           TEXT,
        category_id    BIGINT,
        created_status TEXT
    );
    -- The largest id purged: every event above it is kept.
    CREATE TABLE events_floor (
        one   BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
        floor BIGINT  NOT NULL
    );
    INSERT INTO events_floor (floor) VALUES (0);

    -- Each trigger takes its ids in the order of its `ORDER BY` (by row
    -- id, an order's event before its animal's): since 9.6, PostgreSQL
    -- evaluates the output expressions after the sort, so a volatile one
    -- such as `nextval` runs in the order the ORDER BY gives (the 9.6
    -- release notes). (Numbering the rows and joining them to the ids,
    -- sorted, gave the same order at about twice what the events cost
    -- the database.)
    CREATE FUNCTION events_after_pet_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO events (id, kind, at, pet_id, name, category_id, created_status)
        SELECT nextval('events_ids'), 1, statement_timestamp(), id, name, category_id, status
        FROM new_rows
        ORDER BY id;
        RETURN NULL;
    END $$;
    CREATE FUNCTION events_after_order_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO events (id, kind, at, pet_id, order_id, owner, placed_at, name,
                            category_id)
        SELECT nextval('events_ids'), step.kind, placed.placed_at, placed.pet_id, placed.id,
               CASE step.kind WHEN 2 THEN placed.owner END,
               CASE step.kind WHEN 2 THEN placed.placed_at END,
               CASE step.kind WHEN 5 THEN pets.name END,
               CASE step.kind WHEN 5 THEN pets.category_id END
        FROM new_rows AS placed
        JOIN pets ON pets.id = placed.pet_id
        CROSS JOIN (VALUES (2::smallint), (5::smallint)) AS step (kind)
        WHERE placed.status = 'placed'
        ORDER BY placed.id, step.kind;
        RETURN NULL;
    END $$;
    -- `UPDATE OF status` cannot be combined with transition tables: the
    -- orders that left `placed` are picked here.
    CREATE FUNCTION events_after_order_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO events (id, kind, at, pet_id, order_id, owner, placed_at, name,
                            category_id)
        SELECT nextval('events_ids'), step.kind, statement_timestamp(), settled.pet_id,
               settled.id,
               CASE WHEN step.of_order THEN settled.owner END,
               CASE WHEN step.of_order THEN settled.placed_at END,
               CASE WHEN NOT step.of_order THEN pets.name END,
               CASE WHEN NOT step.of_order THEN pets.category_id END
        FROM (SELECT after.id, after.pet_id, after.owner, after.placed_at,
                     CASE after.status WHEN 'delivered' THEN 3 ELSE 4 END::smallint AS kind
              FROM new_rows AS after JOIN old_rows AS before ON before.id = after.id
              WHERE before.status = 'placed'
                AND after.status IN ('delivered', 'cancelled')) AS settled
        JOIN pets ON pets.id = settled.pet_id
        CROSS JOIN LATERAL (VALUES (true, settled.kind), (false, settled.kind + 3::smallint))
            AS step (of_order, kind)
        ORDER BY settled.id, step.kind;
        RETURN NULL;
    END $$;
    CREATE TRIGGER pets_evented_on_insert AFTER INSERT ON pets
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION events_after_pet_insert();
    CREATE TRIGGER orders_evented_on_insert AFTER INSERT ON orders
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION events_after_order_insert();
    CREATE TRIGGER orders_evented_on_update AFTER UPDATE ON orders
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION events_after_order_update();
";

/// Deletes the longest run of the oldest events, at most `$2`, up to the
/// head `$3`, committed before `$1` (a prefix: it stops at the first one
/// that is not), and raises the floor to the largest id deleted, in one
/// statement; how many it deleted, and the largest of them. Concurrent purges
/// (other instances) delete what is left of their prefix and keep the
/// larger floor.
const PURGE: &str = "
    WITH oldest AS (
        SELECT id, at FROM events WHERE id <= $3 ORDER BY id LIMIT $2
    ), kept AS (
        SELECT min(id) AS id FROM oldest WHERE at >= $1
    ), gone AS (
        DELETE FROM events
        WHERE id IN (SELECT id FROM oldest
                     WHERE id < coalesce((SELECT id FROM kept), 9223372036854775807))
        RETURNING id
    ), raised AS (
        UPDATE events_floor SET floor = gone.last
        FROM (SELECT max(id) AS last FROM gone) AS gone
        WHERE gone.last > events_floor.floor
    )
    SELECT count(*), max(id) FROM gone";

/// A page of the feed, read up to `head`.
pub(super) struct ReadEvents {
    pub query: EventQuery,
    pub head: i64,
}

/// What reading a page came to, and, when it read up to the head, the last
/// id `events_ids` had handed out then (see `head.rs`, "Reading what was
/// acknowledged"). The outcome is shared by every request of a batch that
/// asked for the same page, not copied for each.
#[derive(Clone)]
pub(super) struct PageRead {
    pub outcome: Arc<EventsOutcome>,
    pub taken: Option<i64>,
}

impl Job for ReadEvents {
    type Output = PageRead;

    /// Each distinct page once (many long-polls waiting at the same cursor
    /// wake together), pipelined on one connection.
    async fn run(batch: Vec<Waiting<ReadEvents>>, connections: &SharedConnections) {
        let shared = match connections.get().await {
            Ok(shared) => shared,
            Err(error) => return fail_all(batch, error),
        };
        // The same query up to the same head is the same page.
        let mut by_page: HashMap<(EventQuery, i64), Vec<Waiting<ReadEvents>>> = HashMap::new();
        for waiting in batch {
            let ReadEvents { query, head } = waiting.job;
            by_page.entry((query, head)).or_default().push(waiting);
        }
        let pages = by_page.into_iter().map(async |(_, waiting)| {
            let ReadEvents { query, head } = waiting[0].job;
            match page(&shared, query, head).await {
                Ok(read) => {
                    // The last one takes the page itself: alone, it may
                    // then have it without a copy (`Arc::unwrap_or_clone`).
                    let mut waiting = waiting;
                    let last = waiting.pop();
                    for request in waiting {
                        let _ = request.answer.send(Ok(read.clone()));
                    }
                    if let Some(last) = last {
                        let _ = last.answer.send(Ok(read));
                    }
                }
                Err(error) => fail_all(waiting, error),
            }
        });
        futures::future::join_all(pages).await;
    }
}

/// The page `query` asks for, up to `head`, read on `shared`.
async fn page(shared: &Lease<'_>, query: EventQuery, head: i64) -> Result<PageRead, StorageError> {
    let doing = "reading events";
    let limit = query.limit.clamp(1, LIST_MAX);
    let every = query.owner.is_none() && query.kinds == EnumSet::all();
    let rows = if every {
        let params: [&(dyn ToSql + Sync); 3] = [&query.after, &head, &(i64::from(limit) + 1)];
        let rows = shared.client.query(&shared.events.page_all, &params);
        shared.run(doing, rows).await?
    } else {
        let kinds: Vec<i16> = query.kinds.iter().map(EventKind::code).collect();
        let owner = query.owner.as_ref().map(|owner| &owner.0[..]);
        let params: [&(dyn ToSql + Sync); 6] = [
            &query.after,
            &head,
            &i64::from(EVENT_SCAN_MAX),
            &kinds,
            &owner,
            &i64::from(limit),
        ];
        let rows = shared.client.query(&shared.events.page, &params);
        shared.run(doing, rows).await?
    };
    let decode = postgres(doing);
    let first = rows.first().ok_or(StorageError::Invariant(
        "a page of events came without its floor",
    ))?;
    let floor: i64 = first.try_get(0).map_err(&decode)?;
    if query.after.is_some_and(|after| after < floor) {
        return Ok(PageRead {
            outcome: Arc::new(EventsOutcome::Expired { floor }),
            taken: None,
        });
    }
    let taken_column = if every { 10 } else { 13 };
    let mut events = Vec::new();
    // The last row examined, and how many were: (id, examined).
    let mut last_examined = None;
    let mut taken = None;
    // Whether an event after a full page was read (and left for the next).
    let mut beyond = false;
    for (at, row) in rows.iter().enumerate() {
        let Some(id) = row.try_get::<_, Option<i64>>(1).map_err(&decode)? else {
            // Nothing examined.
            taken = row.try_get(taken_column).map_err(&decode)?;
            break;
        };
        // `PAGE_ALL` keeps every row it examines, and stops after `limit +
        // 1`: its last row is the scan's last when it ran out before that.
        let (matched, last) = match every {
            true => (
                true,
                at + 1 == rows.len() && (at < limit as usize || id >= head),
            ),
            false => (
                row.try_get(10).map_err(&decode)?,
                row.try_get(11).map_err(&decode)?,
            ),
        };
        if matched {
            match events.len() < limit as usize {
                true => events.push(event_from_row(row)?),
                false => beyond = true,
            }
        }
        if last {
            let examined = match every {
                true => i64::try_from(at + 1).unwrap_or(i64::MAX),
                false => row.try_get::<_, i64>(12).map_err(&decode)?,
            };
            last_examined = Some((id, examined));
            taken = row.try_get(taken_column).map_err(&decode)?;
        }
    }
    // The scan went up to the head: it stopped short of its bound, or
    // at the head itself.
    let to_head = last_examined
        .is_some_and(|(id, examined)| examined < i64::from(EVENT_SCAN_MAX) || id >= head);
    let (next_after, at_head) = match (events.last(), last_examined) {
        // Full: on from its last event (what follows it may not have been
        // examined); at the head only if nothing it may show follows.
        (Some(last), _) if events.len() == limit as usize => {
            (last.id, last.id >= head || (to_head && !beyond))
        }
        (_, Some((id, _))) => (id, to_head),
        (_, None) => (query.after.unwrap_or(floor), true),
    };
    let outcome = Arc::new(EventsOutcome::Page(EventPage {
        events,
        next_after,
        head,
        at_head,
    }));
    Ok(PageRead { outcome, taken })
}

/// The event of a page's row (see [`event_statements::PAGE`](super::event_statements::PAGE)).
fn event_from_row(row: &Row) -> Result<StoredEvent, StorageError> {
    let decode = postgres("decoding an event");
    let id: i64 = row.try_get(1).map_err(&decode)?;
    let code: i16 = row.try_get(2).map_err(&decode)?;
    let kind = EventKind::from_code(code.into()).ok_or_else(|| StorageError::Undecodable {
        id,
        column: "events.kind",
        value: code.to_string(),
        expected: "event kind (1 to 7)",
    })?;
    let time: DateTime<Utc> = row.try_get(3).map_err(&decode)?;
    let pet_id: i64 = row.try_get(4).map_err(&decode)?;
    let missing = |column, expected| StorageError::Undecodable {
        id,
        column,
        value: "NULL".to_owned(),
        expected,
    };
    let data = if kind.is_order() {
        let order_id: Option<i64> = row.try_get(5).map_err(&decode)?;
        let placed_at: Option<DateTime<Utc>> = row.try_get(6).map_err(&decode)?;
        let status = match kind {
            EventKind::OrderPlaced => OrderStatus::Placed,
            EventKind::OrderDelivered => OrderStatus::Delivered,
            _ => OrderStatus::Cancelled,
        };
        EventData::Order(Order {
            id: order_id.ok_or_else(|| missing("events.order_id", "order id"))?,
            pet_id,
            status,
            placed_at: placed_at.ok_or_else(|| missing("events.placed_at", "time"))?,
            placed_by: None,
        })
    } else {
        let status = match kind.status_change() {
            Some((_, after)) => Some(after),
            None => {
                let created: Option<&str> = row.try_get(9).map_err(&decode)?;
                created
                    .map(|text| {
                        PetStatus::parse(text).ok_or_else(|| StorageError::Undecodable {
                            id,
                            column: "events.created_status",
                            value: format!("the text {text:?}"),
                            expected: "status (available, pending, sold)",
                        })
                    })
                    .transpose()?
            }
        };
        let name: Option<String> = row.try_get(7).map_err(&decode)?;
        let category_id: Option<i64> = row.try_get(8).map_err(&decode)?;
        EventData::Pet(Pet {
            id: pet_id,
            name: name.ok_or_else(|| missing("events.name", "name"))?,
            category_id: category_id.ok_or_else(|| missing("events.category_id", "category"))?,
            status,
        })
    };
    Ok(StoredEvent {
        id,
        kind,
        time,
        data,
    })
}

/// Purges at most `limit` of the oldest events committed before `before`,
/// none above `head` (see [`PURGE`]); how many it deleted, and the largest
/// id it deleted, if any (the floor is at least that now).
pub(super) async fn purge(
    client: &deadpool_postgres::Client,
    before: DateTime<Utc>,
    limit: i64,
    head: i64,
) -> Result<(u64, Option<i64>), StorageError> {
    let doing = "purging events";
    let statement = client
        .prepare_cached(PURGE)
        .await
        .map_err(postgres(doing))?;
    let row = client
        .query_one(&statement, &[&before, &limit, &head])
        .await
        .map_err(postgres(doing))?;
    let deleted: i64 = row.try_get(0).map_err(postgres(doing))?;
    let last: Option<i64> = row.try_get(1).map_err(postgres(doing))?;
    Ok((u64::try_from(deleted).unwrap_or(0), last))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The triggers write the codes as numbers: `PetCreated` is 1, the
    /// order kinds 2 to 4, and each order kind's animal change its code
    /// plus 3.
    #[test]
    fn the_triggers_codes_are_the_kinds() {
        assert_eq!(EventKind::PetCreated.code(), 1);
        let order_kinds: Vec<i16> = EventKind::ALL
            .into_iter()
            .filter(|kind| kind.is_order())
            .map(EventKind::code)
            .collect();
        assert_eq!(order_kinds, [2, 3, 4]);
        for kind in EventKind::ALL.into_iter().filter(|kind| kind.is_order()) {
            let pet = kind.pet_change().expect("an order kind changes its animal");
            assert_eq!(pet.code(), kind.code() + 3, "{kind:?}");
        }
    }
}
