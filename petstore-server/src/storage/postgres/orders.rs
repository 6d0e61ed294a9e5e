//! The Store on PostgreSQL: orders, and the counts behind the inventory.
//!
//! - **One statement per batch of changes.** Orders placed without an
//!   idempotency key are batched as plain creates are (`batch.rs`): one
//!   statement locks the animals asked for that are `available` (in id
//!   order, so that concurrent batches never deadlock), makes them
//!   `pending` and inserts an order for each. PostgreSQL re-reads a row it
//!   had to wait for: a concurrent order for the same animal, from this
//!   instance or another, finds it `pending` and inserts nothing. Exactly
//!   one wins. Updates are batched the same way (the orders, locked in id
//!   order and changed only if `placed`, and their animals). Every row is
//!   found by its id, one index probe each, never by a scan of a status's
//!   range (`order_statements.rs`). In autocommit, each batch is one
//!   transaction and one WAL flush. Whatever a batch did not do is read
//!   afterwards, to tell the refusals apart (no such animal, its status;
//!   no such order, its status).
//! - **A second guard in the schema.** A partial unique index allows at
//!   most one `placed` or `delivered` order per animal, whatever wrote it.
//! - **Exact counts in O(1).** Statement-level triggers on `pets` add each
//!   statement's changes, per status, to one of the 64 rows of
//!   `pet_counts` (chosen by the backend's pid, so that concurrent writers
//!   rarely wait for one another), in the writer's own transaction, with
//!   one `UPDATE` planned once per session. The
//!   inventory is the sum of those rows: exact at one snapshot, and the
//!   same cost at a thousand animals or ten million.
//! - **Idempotent orders** are transactions on a pooled connection, as
//!   idempotent creates are (`mod.rs`), with a key lock of their own: the
//!   two operations' keys are apart.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::batch::{Job, Waiting, fail_all};
use super::shared::{Lease, SharedConnections};
use super::{KeyState, begin_keyed, postgres, status_from_column};
use crate::storage::idempotency::Idempotency;
use crate::storage::orders::transition;
use crate::storage::{
    OrderPage, OrderQuery, Owner, OwnerId, PlaceOutcome, StorageError, StoredOrder, UpdateOutcome,
};
use petstore_api::model::{Inventory, Order, OrderStatus, PetStatus};

/// The schema of the Store: orders, their idempotency records, and the
/// counts of animals per status kept by triggers.
pub(super) const MIGRATION: &str = "
    CREATE TABLE orders (
        id        BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        pet_id    BIGINT      NOT NULL REFERENCES pets (id),
        status    TEXT        NOT NULL CHECK (status IN ('placed', 'delivered', 'cancelled')),
        placed_at TIMESTAMPTZ NOT NULL
    );
    CREATE UNIQUE INDEX orders_one_live_per_pet ON orders (pet_id)
        WHERE status IN ('placed', 'delivered');
    CREATE INDEX orders_by_status ON orders (status, id);
    CREATE INDEX orders_by_pet ON orders (pet_id, id);

    -- The first 201 of each key of placeOrder, committed with the order.
    CREATE TABLE order_idempotency_keys (
        scope       BYTEA       NOT NULL,
        key         TEXT        NOT NULL,
        fingerprint BYTEA       NOT NULL,
        created_at  BIGINT      NOT NULL,
        order_id    BIGINT      NOT NULL,
        pet_id      BIGINT      NOT NULL,
        placed_at   TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX order_idempotency_keys_by_age ON order_idempotency_keys (created_at);

    CREATE TABLE pet_counts (
        shard     INTEGER PRIMARY KEY,
        available BIGINT  NOT NULL DEFAULT 0,
        pending   BIGINT  NOT NULL DEFAULT 0,
        sold      BIGINT  NOT NULL DEFAULT 0
    );
    INSERT INTO pet_counts (shard) SELECT generate_series(0, 63);

    -- Adds a statement's changes to the counts, in the writer's shard.
    CREATE FUNCTION pet_counts_add(available BIGINT, pending BIGINT, sold BIGINT)
    RETURNS void LANGUAGE sql AS $$
        UPDATE pet_counts SET available = pet_counts.available + $1,
                              pending = pet_counts.pending + $2,
                              sold = pet_counts.sold + $3
        WHERE shard = pg_backend_pid() % 64 AND ($1 <> 0 OR $2 <> 0 OR $3 <> 0)
    $$;
    CREATE FUNCTION pet_counts_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pet_counts_add(count(*) FILTER (WHERE status = 'available'),
                               count(*) FILTER (WHERE status = 'pending'),
                               count(*) FILTER (WHERE status = 'sold'))
        FROM new_rows;
        RETURN NULL;
    END $$;
    CREATE FUNCTION pet_counts_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pet_counts_add(coalesce(sum(n) FILTER (WHERE status = 'available'), 0)::bigint,
                               coalesce(sum(n) FILTER (WHERE status = 'pending'), 0)::bigint,
                               coalesce(sum(n) FILTER (WHERE status = 'sold'), 0)::bigint)
        FROM (SELECT status, 1 AS n FROM new_rows
              UNION ALL SELECT status, -1 FROM old_rows) AS changed;
        RETURN NULL;
    END $$;
    CREATE FUNCTION pet_counts_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pet_counts_add(-count(*) FILTER (WHERE status = 'available'),
                               -count(*) FILTER (WHERE status = 'pending'),
                               -count(*) FILTER (WHERE status = 'sold'))
        FROM old_rows;
        RETURN NULL;
    END $$;
    CREATE FUNCTION pet_counts_after_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE pet_counts SET available = 0, pending = 0, sold = 0;
        RETURN NULL;
    END $$;
    CREATE TRIGGER pets_counted_on_insert AFTER INSERT ON pets
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION pet_counts_after_insert();
    CREATE TRIGGER pets_counted_on_update AFTER UPDATE ON pets
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION pet_counts_after_update();
    CREATE TRIGGER pets_counted_on_delete AFTER DELETE ON pets
        REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION pet_counts_after_delete();
    CREATE TRIGGER pets_counted_on_truncate AFTER TRUNCATE ON pets
        FOR EACH STATEMENT EXECUTE FUNCTION pet_counts_after_truncate();

    -- The animals already there, counted once the triggers hold the table
    -- (creating them locked out every writer until this commits).
    UPDATE pet_counts SET
        available = (SELECT count(*) FROM pets WHERE status = 'available'),
        pending = (SELECT count(*) FROM pets WHERE status = 'pending'),
        sold = (SELECT count(*) FROM pets WHERE status = 'sold')
    WHERE shard = 0;
";

/// The counts' triggers, each one statement: the shard's `UPDATE` runs in
/// the trigger's own plpgsql, whose plan is made once per session. Through
/// `pet_counts_add`, a SQL function, it was planned again for every
/// statement that changed a pet, a third of the trigger's time. (The
/// function stays, unused, for the instances of the version before while a
/// rolling upgrade runs: their triggers are these.)
pub(super) const COUNTS_IN_ONE_STATEMENT: &str = "
    CREATE OR REPLACE FUNCTION pet_counts_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE pet_counts SET available = pet_counts.available + d.available,
                              pending = pet_counts.pending + d.pending,
                              sold = pet_counts.sold + d.sold
        FROM (SELECT count(*) FILTER (WHERE status = 'available') AS available,
                     count(*) FILTER (WHERE status = 'pending') AS pending,
                     count(*) FILTER (WHERE status = 'sold') AS sold
              FROM new_rows) AS d
        WHERE shard = pg_backend_pid() % 64
          AND (d.available <> 0 OR d.pending <> 0 OR d.sold <> 0);
        RETURN NULL;
    END $$;
    CREATE OR REPLACE FUNCTION pet_counts_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE pet_counts SET available = pet_counts.available + d.available,
                              pending = pet_counts.pending + d.pending,
                              sold = pet_counts.sold + d.sold
        FROM (SELECT coalesce(sum(n) FILTER (WHERE status = 'available'), 0) AS available,
                     coalesce(sum(n) FILTER (WHERE status = 'pending'), 0) AS pending,
                     coalesce(sum(n) FILTER (WHERE status = 'sold'), 0) AS sold
              FROM (SELECT status, 1 AS n FROM new_rows
                    UNION ALL SELECT status, -1 FROM old_rows) AS changed) AS d
        WHERE shard = pg_backend_pid() % 64
          AND (d.available <> 0 OR d.pending <> 0 OR d.sold <> 0);
        RETURN NULL;
    END $$;
    CREATE OR REPLACE FUNCTION pet_counts_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE pet_counts SET available = pet_counts.available - d.available,
                              pending = pet_counts.pending - d.pending,
                              sold = pet_counts.sold - d.sold
        FROM (SELECT count(*) FILTER (WHERE status = 'available') AS available,
                     count(*) FILTER (WHERE status = 'pending') AS pending,
                     count(*) FILTER (WHERE status = 'sold') AS sold
              FROM old_rows) AS d
        WHERE shard = pg_backend_pid() % 64
          AND (d.available <> 0 OR d.pending <> 0 OR d.sold <> 0);
        RETURN NULL;
    END $$;
";

/// One order for the animal `$1`, as a batch places them, keeping the record of the key `($2, $3)` (fingerprint `$4`,
/// made at `$5`) with the order; replaces an expired record of the key.
const PLACE_ONCE: &str = "
    WITH reserved AS (
        UPDATE pets SET status = 'pending' WHERE id = $1 AND status = 'available'
        RETURNING id
    ), placed AS (
        INSERT INTO orders (pet_id, status, placed_at, owner, placed_by)
        SELECT id, 'placed', statement_timestamp(), $6, $7 FROM reserved
        RETURNING id, pet_id, status, placed_at, placed_by
    ), kept AS (
        INSERT INTO order_idempotency_keys
            (scope, key, fingerprint, created_at, order_id, pet_id, placed_at)
        SELECT $2, $3, $4, $5, id, pet_id, placed_at FROM placed
        ON CONFLICT (scope, key) DO UPDATE SET
            fingerprint = excluded.fingerprint, created_at = excluded.created_at,
            order_id = excluded.order_id, pet_id = excluded.pet_id,
            placed_at = excluded.placed_at
    )
    SELECT id, pet_id, status, placed_at, placed_by FROM placed";

/// How often a decision that a concurrent change overtook is made again
/// (each attempt sees every change committed before it).
const ATTEMPTS: usize = 3;

/// Decodes an order's columns (`order_statements::ORDER_COLUMNS`), never panicking.
fn order_from_row(row: &Row) -> Result<StoredOrder, StorageError> {
    let decode = postgres("decoding an order");
    let id: i64 = row.try_get(0).map_err(&decode)?;
    let status: &str = row.try_get(2).map_err(&decode)?;
    Ok(StoredOrder::new(Order {
        id,
        pet_id: row.try_get(1).map_err(&decode)?,
        status: OrderStatus::parse(status).ok_or_else(|| StorageError::Undecodable {
            id,
            column: "orders.status",
            value: format!("the text {status:?}"),
            expected: "status (placed, delivered, cancelled)",
        })?,
        placed_at: row.try_get(3).map_err(&decode)?,
        placed_by: row.try_get(4).map_err(&decode)?,
    }))
}

/// The order `id`, read on `shared`, if it is `owner`'s (when given).
pub(super) async fn get(
    shared: &Lease<'_>,
    id: i64,
    owner: Option<OwnerId>,
) -> Result<Option<StoredOrder>, StorageError> {
    let row = shared
        .run(
            "reading an order",
            shared.client.query_opt(&shared.orders.get, &[&id]),
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    if let Some(owner) = owner {
        let stored: Option<&[u8]> = row.try_get(5).map_err(postgres("decoding an order"))?;
        if stored != Some(&owner.0[..]) {
            return Ok(None);
        }
    }
    order_from_row(&row).map(Some)
}

/// A page of orders, read on `shared`.
pub(super) async fn list(shared: &Lease<'_>, query: OrderQuery) -> Result<OrderPage, StorageError> {
    let limit = query.limit as usize;
    let fetch = i64::from(query.limit) + 1;
    let after = query.after.unwrap_or(i64::MIN);
    let status = query.status.map(OrderStatus::as_str);
    let statements = &shared.orders;
    let client = &shared.client;
    let doing = "listing orders";
    let rows = match (query.owner, query.pet_id, status) {
        (Some(owner), pet_id, status) => {
            let owner = &owner.0[..];
            let params: [&(dyn ToSql + Sync); 5] = [&owner, &after, &status, &pet_id, &fetch];
            shared
                .run(doing, client.query(&statements.list_by_owner, &params))
                .await?
        }
        (None, Some(pet_id), status) => {
            let params: [&(dyn ToSql + Sync); 4] = [&pet_id, &after, &status, &fetch];
            shared
                .run(doing, client.query(&statements.list_by_pet, &params))
                .await?
        }
        (None, None, Some(status)) => {
            let params: [&(dyn ToSql + Sync); 3] = [&status, &after, &fetch];
            shared
                .run(doing, client.query(&statements.list_by_status, &params))
                .await?
        }
        (None, None, None) => {
            let params: [&(dyn ToSql + Sync); 2] = [&after, &fetch];
            shared
                .run(doing, client.query(&statements.list, &params))
                .await?
        }
    };
    Ok(OrderPage {
        orders: rows
            .iter()
            .take(limit)
            .map(order_from_row)
            .collect::<Result<_, _>>()?,
        more: rows.len() > limit,
    })
}

/// The counts of animals per status, read on `shared`.
pub(super) async fn inventory(shared: &Lease<'_>) -> Result<Inventory, StorageError> {
    let doing = "reading the inventory";
    let row = shared
        .run(
            doing,
            shared.client.query_one(&shared.orders.inventory, &[]),
        )
        .await?;
    let count =
        |column| -> Result<i64, StorageError> { row.try_get(column).map_err(postgres(doing)) };
    Ok(Inventory {
        available: count(0)?,
        pending: count(1)?,
        sold: count(2)?,
    })
}

/// An order for an animal by an owner, placed in the next batch.
pub(super) struct Place(pub i64, pub Owner);

/// A status asked for an order, given in the next batch.
pub(super) struct Update {
    pub id: i64,
    pub to: OrderStatus,
}

impl Job for Place {
    type Output = PlaceOutcome;

    async fn run(batch: Vec<Waiting<Place>>, connections: &SharedConnections) {
        in_rounds(batch, connections, place_round).await;
    }
}

impl Job for Update {
    type Output = UpdateOutcome;

    async fn run(batch: Vec<Waiting<Update>>, connections: &SharedConnections) {
        in_rounds(batch, connections, update_round).await;
    }
}

/// Runs `round` on `batch`, then on what it leaves undecided (a change that
/// overtook it), at most [`ATTEMPTS`] times.
async fn in_rounds<J: Job>(
    mut batch: Vec<Waiting<J>>,
    connections: &SharedConnections,
    round: impl AsyncFn(Vec<Waiting<J>>, &SharedConnections) -> Round<J>,
) {
    for _ in 0..ATTEMPTS {
        if batch.is_empty() {
            return;
        }
        batch = match round(batch, connections).await {
            Ok(undecided) => undecided,
            Err((failed, error)) => return fail_all(failed, error),
        };
    }
    for waiting in batch {
        let overtaken = "a change was overtaken by others, again and again";
        let _ = waiting.answer.send(Err(StorageError::Invariant(overtaken)));
    }
}

/// What a round leaves undecided, or the writes it failed and why.
type Round<J> = Result<Vec<Waiting<J>>, (Vec<Waiting<J>>, StorageError)>;

/// Places the batch's orders in one statement; reads why the others were
/// not placed. An animal that is available again is left for the next
/// round.
async fn place_round(batch: Vec<Waiting<Place>>, connections: &SharedConnections) -> Round<Place> {
    let shared = match connections.get().await {
        Ok(shared) => shared,
        Err(error) => return Err((batch, error)),
    };
    // Each animal once, for the first request for it (the others lose).
    let mut seen = std::collections::HashSet::new();
    let first: Vec<&Place> = batch
        .iter()
        .map(|w| &w.job)
        .filter(|place| seen.insert(place.0))
        .collect();
    let ids: Vec<i64> = first.iter().map(|place| place.0).collect();
    let owners: Vec<&[u8]> = first.iter().map(|place| &place.1.id.0[..]).collect();
    let names: Vec<&str> = first.iter().map(|place| place.1.name.as_str()).collect();
    let statement = &shared.orders.place_many;
    let params: [&(dyn ToSql + Sync); 3] = [&ids, &owners, &names];
    let mut placed = match shared
        .query_map("placing orders", statement, &params, order_by_pet)
        .await
    {
        Ok(placed) => placed,
        Err(error) => return Err((batch, error)),
    };
    // Committed: each order goes to the first request for its animal.
    let mut losers = Vec::new();
    for waiting in batch {
        match placed.remove(&waiting.job.0) {
            Some(order) => drop(waiting.answer.send(Ok(PlaceOutcome::Placed(order)))),
            None => losers.push(waiting),
        }
    }
    if losers.is_empty() {
        return Ok(losers);
    }
    let ids: Vec<i64> = losers.iter().map(|w| w.job.0).collect();
    let statement = &shared.orders.pet_statuses;
    let statuses = match shared
        .query_map("reading pets", statement, &[&ids], status_by_pet)
        .await
    {
        Ok(statuses) => statuses,
        Err(error) => return Err((losers, error)),
    };
    let mut again = Vec::new();
    for waiting in losers {
        let outcome = match statuses.get(&waiting.job.0) {
            None => PlaceOutcome::NoSuchPet,
            Some(Some(PetStatus::Available)) => {
                again.push(waiting);
                continue;
            }
            Some(status) => PlaceOutcome::NotAvailable(*status),
        };
        let _ = waiting.answer.send(Ok(outcome));
    }
    Ok(again)
}

/// Updates the batch's orders in one statement, one request per order;
/// reads the orders it did not change. Then answers every request as the
/// order now is: the one that went into the statement finds the status it
/// asked for, and the others for the same order are answered as if each
/// came just after it (each taking a round of its own would leave more than
/// [`ATTEMPTS`] requests for one order failed). What finds an order still
/// `placed` (a change overtook the statement) is left for the next round.
async fn update_round(
    batch: Vec<Waiting<Update>>,
    connections: &SharedConnections,
) -> Round<Update> {
    // Each order once, for the first request for it.
    let mut seen = std::collections::HashSet::new();
    let first: Vec<&Update> = batch
        .iter()
        .map(|w| &w.job)
        .filter(|update| seen.insert(update.id))
        .collect();
    let shared = match connections.get().await {
        Ok(shared) => shared,
        Err(error) => return Err((batch, error)),
    };
    let ids: Vec<i64> = first.iter().map(|update| update.id).collect();
    let to: Vec<&str> = first.iter().map(|update| update.to.as_str()).collect();
    let pets: Vec<&str> = first
        .iter()
        .map(|update| update.to.pet_status().as_str())
        .collect();
    let statement = &shared.orders.update_many;
    let params: [&(dyn ToSql + Sync); 3] = [&ids, &to, &pets];
    // The orders as the round leaves them, by id.
    let mut orders = match shared
        .query_map("updating orders", statement, &params, order_by_id)
        .await
    {
        Ok(changed) => changed,
        Err(error) => return Err((batch, error)),
    };
    let mut unread: Vec<i64> = batch
        .iter()
        .map(|w| w.job.id)
        .filter(|id| !orders.contains_key(id))
        .collect();
    unread.sort_unstable();
    unread.dedup();
    if !unread.is_empty() {
        let statement = &shared.orders.get_many;
        match shared
            .query_map("reading orders", statement, &[&unread], order_by_id)
            .await
        {
            Ok(current) => orders.extend(current),
            Err(error) => return Err((batch, error)),
        }
    }
    let mut later = Vec::new();
    for waiting in batch {
        let outcome = match orders.get(&waiting.job.id) {
            None => UpdateOutcome::NoSuchOrder,
            Some(order) => match transition(order.status, waiting.job.to) {
                Ok(None) => UpdateOutcome::Done(order.clone()),
                Err(from) => UpdateOutcome::Invalid(from),
                // Still `placed`: a change overtook this round's statement.
                Ok(Some(_)) => {
                    later.push(waiting);
                    continue;
                }
            },
        };
        let _ = waiting.answer.send(Ok(outcome));
    }
    Ok(later)
}

fn order_by_id(row: &Row) -> Result<(i64, StoredOrder), StorageError> {
    order_from_row(row).map(|order| (order.id, order))
}

fn order_by_pet(row: &Row) -> Result<(i64, StoredOrder), StorageError> {
    order_from_row(row).map(|order| (order.pet_id, order))
}

/// `id, status` of a pet.
fn status_by_pet(row: &Row) -> Result<(i64, Option<PetStatus>), StorageError> {
    let id: i64 = row.try_get(0).map_err(postgres("decoding a row"))?;
    Ok((id, status_from_column(row, 1, id)?))
}

/// Places an order with an idempotency key: one transaction on a pooled
/// connection — the key's lock (held elsewhere: 409), its live record (a
/// replay or a reuse), else the order with the record.
pub(super) async fn place_once(
    client: &mut deadpool_postgres::Client,
    pet_id: i64,
    owner: &Owner,
    once: &Idempotency,
) -> Result<PlaceOutcome, StorageError> {
    let doing = "placing an order with an idempotency key";
    let sql = postgres(doing);
    let place = client.prepare_cached(PLACE_ONCE).await.map_err(&sql)?;
    let status = client
        .prepare_cached("SELECT status FROM pets WHERE id = $1")
        .await
        .map_err(&sql)?;
    let select = "SELECT fingerprint, created_at, order_id, pet_id, placed_at
                  FROM order_idempotency_keys WHERE scope = $1 AND key = $2";
    for _ in 0..ATTEMPTS {
        let tx = match begin_keyed(client, select, once.order_lock_id(), once, doing).await? {
            KeyState::Free(tx) => tx,
            KeyState::InUse => return Ok(PlaceOutcome::KeyInUse),
            KeyState::Reused => return Ok(PlaceOutcome::KeyReused),
            KeyState::Replay(record) => {
                return Ok(PlaceOutcome::Replayed(StoredOrder::new(Order {
                    id: record.try_get(2).map_err(&sql)?,
                    pet_id: record.try_get(3).map_err(&sql)?,
                    status: OrderStatus::Placed,
                    placed_at: record.try_get(4).map_err(&sql)?,
                    // The key that placed it is the one replaying it.
                    placed_by: None,
                })));
            }
        };
        let caller = &once.caller.0[..];
        let fingerprint = once.fingerprint.as_bytes();
        let placed = tx
            .query_opt(
                &place,
                &[
                    &pet_id,
                    &caller,
                    &once.key,
                    &fingerprint,
                    &once.now,
                    &&owner.id.0[..],
                    &owner.name,
                ],
            )
            .await
            .map_err(&sql)?;
        if let Some(row) = placed {
            let order = order_from_row(&row)?;
            tx.commit().await.map_err(&sql)?;
            return Ok(PlaceOutcome::Placed(order));
        }
        let current = tx.query_opt(&status, &[&pet_id]).await.map_err(&sql)?;
        let _ = tx.rollback().await;
        let Some(current) = current else {
            return Ok(PlaceOutcome::NoSuchPet);
        };
        match status_from_column(&current, 0, pet_id)? {
            Some(PetStatus::Available) => continue,
            status => return Ok(PlaceOutcome::NotAvailable(status)),
        }
    }
    Err(StorageError::Invariant(
        "an available animal could not be ordered, again and again",
    ))
}
