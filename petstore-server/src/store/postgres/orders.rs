//! The Store on PostgreSQL: orders, and the counts behind the inventory.
//!
//! - **One statement per change.** Placing an order is one statement: a
//!   conditional `UPDATE` makes the animal `pending` only if it is
//!   `available`, and the order is inserted only for the row it changed.
//!   PostgreSQL locks the animal's row for the `UPDATE`; a concurrent order
//!   for it waits for that commit, re-reads the row, finds it `pending`
//!   and inserts nothing — on any instance. Exactly one wins. Updating an
//!   order is one statement too (the order, only if `placed`, and its
//!   animal). In autocommit, each is its own transaction.
//! - **A second guard in the schema.** A partial unique index allows at
//!   most one `placed` or `delivered` order per animal, whatever wrote it.
//! - **Exact counts in O(1).** Statement-level triggers on `pets` add each
//!   statement's changes, per status, to one of the 64 rows of
//!   `pet_counts` (chosen by the backend's pid, so that concurrent writers
//!   rarely wait for one another), in the writer's own transaction. The
//!   inventory is the sum of those rows: exact at one snapshot, and the
//!   same cost at a thousand animals or ten million.
//! - **Idempotent orders** are transactions on a pooled connection, as
//!   idempotent creates are (`mod.rs`), with a key lock of their own: the
//!   two operations' keys are apart.

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::shared::Lease;
use super::{postgres, status_from_column};
use crate::store::idempotency::Idempotency;
use crate::store::orders::transition;
use crate::store::{OrderPage, OrderQuery, PlaceOutcome, StoreError, UpdateOutcome};
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

const ORDER_COLUMNS: &str = "id, pet_id, status, placed_at";

/// Reserves the animal `$1` if it is available and places its order.
const PLACE: &str = "
    WITH reserved AS (
        UPDATE pets SET status = 'pending' WHERE id = $1 AND status = 'available'
        RETURNING id
    )
    INSERT INTO orders (pet_id, status, placed_at)
    SELECT id, 'placed', statement_timestamp() FROM reserved
    RETURNING id, pet_id, status, placed_at";

/// [`PLACE`], keeping the record of the key `($2, $3)` (fingerprint `$4`,
/// made at `$5`) with the order; replaces an expired record of the key.
const PLACE_ONCE: &str = "
    WITH reserved AS (
        UPDATE pets SET status = 'pending' WHERE id = $1 AND status = 'available'
        RETURNING id
    ), placed AS (
        INSERT INTO orders (pet_id, status, placed_at)
        SELECT id, 'placed', statement_timestamp() FROM reserved
        RETURNING id, pet_id, status, placed_at
    ), kept AS (
        INSERT INTO order_idempotency_keys
            (scope, key, fingerprint, created_at, order_id, pet_id, placed_at)
        SELECT $2, $3, $4, $5, id, pet_id, placed_at FROM placed
        ON CONFLICT (scope, key) DO UPDATE SET
            fingerprint = excluded.fingerprint, created_at = excluded.created_at,
            order_id = excluded.order_id, pet_id = excluded.pet_id,
            placed_at = excluded.placed_at
    )
    SELECT id, pet_id, status, placed_at FROM placed";

/// Gives the order `$1`, if it is placed, the status `$2`, and its animal
/// the status `$3`.
const UPDATE: &str = "
    WITH changed AS (
        UPDATE orders SET status = $2 WHERE id = $1 AND status = 'placed'
        RETURNING id, pet_id, status, placed_at
    ), moved AS (
        UPDATE pets SET status = $3 FROM changed WHERE pets.id = changed.pet_id
        RETURNING pets.id
    )
    SELECT id, pet_id, status, placed_at FROM changed";

/// How often a decision that a concurrent change overtook is made again
/// (each attempt sees every change committed before it).
const ATTEMPTS: usize = 3;

/// The Store's statements, prepared on every shared connection.
pub(super) struct OrderStatements {
    get: Statement,
    list: Statement,
    list_by_status: Statement,
    /// An animal has few orders: its index, then the status filter.
    list_by_pet: Statement,
    inventory: Statement,
    place: Statement,
    update: Statement,
}

impl OrderStatements {
    pub async fn prepare(client: &Client) -> Result<OrderStatements, tokio_postgres::Error> {
        let select = format!("SELECT {ORDER_COLUMNS} FROM orders");
        let by_id = format!("{select} WHERE id = $1");
        let from = format!("{select} WHERE id > $1 ORDER BY id LIMIT $2");
        let by_status = format!("{select} WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3");
        let by_pet = format!(
            "{select} WHERE pet_id = $1 AND id > $2 AND ($3::text IS NULL OR status = $3)
             ORDER BY id LIMIT $4"
        );
        let (get, list, list_by_status, list_by_pet, inventory, place, update) = tokio::try_join!(
            client.prepare(&by_id),
            client.prepare(&from),
            client.prepare(&by_status),
            client.prepare(&by_pet),
            client.prepare(
                "SELECT coalesce(sum(available), 0)::bigint, coalesce(sum(pending), 0)::bigint,
                        coalesce(sum(sold), 0)::bigint
                 FROM pet_counts"
            ),
            client.prepare(PLACE),
            client.prepare(UPDATE),
        )?;
        Ok(OrderStatements {
            get,
            list,
            list_by_status,
            list_by_pet,
            inventory,
            place,
            update,
        })
    }
}

/// Decodes an order's four columns, never panicking.
fn order_from_row(row: &Row) -> Result<Order, StoreError> {
    let decode = postgres("decoding an order");
    let id: i64 = row.try_get(0).map_err(&decode)?;
    let status: &str = row.try_get(2).map_err(&decode)?;
    Ok(Order {
        id,
        pet_id: row.try_get(1).map_err(&decode)?,
        status: OrderStatus::parse(status).ok_or_else(|| StoreError::Undecodable {
            id,
            column: "orders.status",
            value: format!("the text {status:?}"),
            expected: "status (placed, delivered, cancelled)",
        })?,
        placed_at: row.try_get(3).map_err(&decode)?,
    })
}

/// The order `id`, read on `shared`.
pub(super) async fn get(shared: &Lease<'_>, id: i64) -> Result<Option<Order>, StoreError> {
    let row = shared
        .run(
            "reading an order",
            shared.client.query_opt(&shared.orders.get, &[&id]),
        )
        .await?;
    row.as_ref().map(order_from_row).transpose()
}

/// A page of orders, read on `shared`.
pub(super) async fn list(shared: &Lease<'_>, query: OrderQuery) -> Result<OrderPage, StoreError> {
    let limit = query.limit as usize;
    let fetch = i64::from(query.limit) + 1;
    let after = query.after.unwrap_or(i64::MIN);
    let status = query.status.map(OrderStatus::as_str);
    let statements = &shared.orders;
    let client = &shared.client;
    let doing = "listing orders";
    let rows = match (query.pet_id, status) {
        (Some(pet_id), status) => {
            let params: [&(dyn ToSql + Sync); 4] = [&pet_id, &after, &status, &fetch];
            shared
                .run(doing, client.query(&statements.list_by_pet, &params))
                .await?
        }
        (None, Some(status)) => {
            let params: [&(dyn ToSql + Sync); 3] = [&status, &after, &fetch];
            shared
                .run(doing, client.query(&statements.list_by_status, &params))
                .await?
        }
        (None, None) => {
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
pub(super) async fn inventory(shared: &Lease<'_>) -> Result<Inventory, StoreError> {
    let doing = "reading the inventory";
    let row = shared
        .run(
            doing,
            shared.client.query_one(&shared.orders.inventory, &[]),
        )
        .await?;
    let count =
        |column| -> Result<i64, StoreError> { row.try_get(column).map_err(postgres(doing)) };
    Ok(Inventory {
        available: count(0)?,
        pending: count(1)?,
        sold: count(2)?,
    })
}

/// Places an order for the animal `pet_id` on `shared` (autocommit).
pub(super) async fn place(shared: &Lease<'_>, pet_id: i64) -> Result<PlaceOutcome, StoreError> {
    for _ in 0..ATTEMPTS {
        let row = shared
            .run(
                "placing an order",
                shared.client.query_opt(&shared.orders.place, &[&pet_id]),
            )
            .await?;
        if let Some(row) = row {
            return Ok(PlaceOutcome::Placed(order_from_row(&row)?));
        }
        if let Some(refused) = why_not_placed(shared, pet_id).await? {
            return Ok(refused);
        }
    }
    Err(StoreError::Invariant(
        "an available animal could not be ordered, again and again",
    ))
}

/// Why an order for `pet_id` placed nothing, read after the statement (so
/// after any order it waited for): no such animal, or its status. `None`
/// when it is available again (its order cancelled meanwhile): try again.
async fn why_not_placed(
    shared: &Lease<'_>,
    pet_id: i64,
) -> Result<Option<PlaceOutcome>, StoreError> {
    let row = shared
        .run(
            "reading a pet",
            shared.client.query_opt(&shared.get, &[&pet_id]),
        )
        .await?;
    let Some(row) = row else {
        return Ok(Some(PlaceOutcome::NoSuchPet));
    };
    match status_from_column(&row, 3, pet_id)? {
        Some(PetStatus::Available) => Ok(None),
        status => Ok(Some(PlaceOutcome::NotAvailable(status))),
    }
}

/// Gives the order `id` the status `to` on `shared` (autocommit).
pub(super) async fn update(
    shared: &Lease<'_>,
    id: i64,
    to: OrderStatus,
) -> Result<UpdateOutcome, StoreError> {
    let pet_status = to.pet_status().as_str();
    for _ in 0..ATTEMPTS {
        let row = shared
            .run(
                "updating an order",
                shared
                    .client
                    .query_opt(&shared.orders.update, &[&id, &to.as_str(), &pet_status]),
            )
            .await?;
        if let Some(row) = row {
            return Ok(UpdateOutcome::Done(order_from_row(&row)?));
        }
        // Not placed when the statement ran (or no such order): read it as
        // it is now, after any change the statement waited for.
        let Some(order) = get(shared, id).await? else {
            return Ok(UpdateOutcome::NoSuchOrder);
        };
        match transition(order.status, to) {
            Ok(None) => return Ok(UpdateOutcome::Done(order)),
            Err(from) => return Ok(UpdateOutcome::Invalid(from)),
            Ok(Some(_)) => continue,
        }
    }
    Err(StoreError::Invariant(
        "a placed order could not be changed, again and again",
    ))
}

/// Places an order with an idempotency key: one transaction on a pooled
/// connection — the key's lock (held elsewhere: 409), its live record (a
/// replay or a reuse), else the order with the record.
pub(super) async fn place_once(
    client: &mut deadpool_postgres::Client,
    pet_id: i64,
    once: &Idempotency,
) -> Result<PlaceOutcome, StoreError> {
    let sql = postgres("placing an order with an idempotency key");
    let try_lock = client
        .prepare_cached("SELECT pg_try_advisory_xact_lock($1)")
        .await
        .map_err(&sql)?;
    let select = client
        .prepare_cached(
            "SELECT fingerprint, created_at, order_id, pet_id, placed_at
             FROM order_idempotency_keys WHERE scope = $1 AND key = $2",
        )
        .await
        .map_err(&sql)?;
    let place = client.prepare_cached(PLACE_ONCE).await.map_err(&sql)?;
    let status = client
        .prepare_cached("SELECT status FROM pets WHERE id = $1")
        .await
        .map_err(&sql)?;
    for _ in 0..ATTEMPTS {
        // READ COMMITTED whatever the database's default: each statement
        // sees what was committed before it, the record after the lock.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
            .start()
            .await
            .map_err(&sql)?;
        let locked: bool = tx
            .query_one(&try_lock, &[&once.order_lock_id()])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(&sql)?;
        if !locked {
            let _ = tx.rollback().await;
            return Ok(PlaceOutcome::KeyInUse);
        }
        let scope = &once.scope[..];
        if let Some(record) = tx
            .query_opt(&select, &[&scope, &once.key])
            .await
            .map_err(&sql)?
        {
            let created_at: i64 = record.try_get(1).map_err(&sql)?;
            if once.is_live(created_at) {
                let fingerprint: &[u8] = record.try_get(0).map_err(&sql)?;
                let outcome = if fingerprint == once.fingerprint {
                    PlaceOutcome::Replayed(Order {
                        id: record.try_get(2).map_err(&sql)?,
                        pet_id: record.try_get(3).map_err(&sql)?,
                        status: OrderStatus::Placed,
                        placed_at: record.try_get(4).map_err(&sql)?,
                    })
                } else {
                    PlaceOutcome::KeyReused
                };
                let _ = tx.rollback().await;
                return Ok(outcome);
            }
        }
        let fingerprint = &once.fingerprint[..];
        let placed = tx
            .query_opt(
                &place,
                &[&pet_id, &scope, &once.key, &fingerprint, &once.now],
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
    Err(StoreError::Invariant(
        "an available animal could not be ordered, again and again",
    ))
}

/// Deletes at most `limit` order idempotency records made before `before`.
pub(super) async fn purge(
    client: &deadpool_postgres::Client,
    before: i64,
    limit: i64,
) -> Result<u64, StoreError> {
    client
        .execute(
            "DELETE FROM order_idempotency_keys
             WHERE ctid = ANY(ARRAY(SELECT ctid FROM order_idempotency_keys
                                    WHERE created_at < $1 LIMIT $2))
               AND created_at < $1",
            &[&before, &limit],
        )
        .await
        .map_err(postgres("purging order idempotency records"))
}
