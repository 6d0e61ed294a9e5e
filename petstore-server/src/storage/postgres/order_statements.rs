//! The Store's statements that every shared connection prepares (see
//! `orders.rs` for how they are used).

use tokio_postgres::{Client, Statement};

/// The columns `orders::order_from_row` reads.
const ORDER_COLUMNS: &str = "id, pet_id, status, placed_at, placed_by";

/// Reserves the animals of `$1` (distinct) that are available and places
/// an order for each, owned by the key of digest `$2` and name `$3` at the
/// same place.
///
/// Every row is found by its id, one index probe each, whatever the
/// statistics say: a status's whole range is never scanned. (Written as a
/// plain `status = …`, the planner may scan all of `pets_by_status` for
/// `available` when it believes few animals are — and that range holds an
/// entry for every version of every animal made available since the last
/// vacuum, which on a catalogue ordered again and again grows by thousands
/// a second. `(…) IS TRUE` is not a condition an index can serve.)
const PLACE_MANY: &str = "
    WITH locked AS (
        SELECT pets.id, wanted.owner, wanted.placed_by
        FROM unnest($1::bigint[], $2::bytea[], $3::text[]) AS wanted (pet_id, owner, placed_by)
        JOIN pets ON pets.id = wanted.pet_id
        WHERE (pets.status = 'available') IS TRUE
        ORDER BY pets.id FOR UPDATE OF pets
    ), reserved AS (
        UPDATE pets SET status = 'pending' FROM locked
        WHERE pets.id = locked.id AND (pets.status = 'available') IS TRUE
        RETURNING pets.id, locked.owner, locked.placed_by
    )
    INSERT INTO orders (pet_id, status, placed_at, owner, placed_by)
    SELECT id, 'placed', statement_timestamp(), owner, placed_by FROM reserved
    RETURNING id, pet_id, status, placed_at, placed_by";

/// Gives each order of `$1` that is placed the status of `$2` at its
/// place, and its animal the status of `$3`. The ids are distinct.
///
/// The orders asked for are locked in id order, whatever their status
/// (only these statements lock orders, always so), then changed if placed;
/// each is found by its id, as in [`PLACE_MANY`]: `orders_by_status` holds
/// an entry for every order that was ever placed and not yet vacuumed.
const UPDATE_MANY: &str = "
    WITH locked AS (
        SELECT orders.id, wanted.status, wanted.pet_status
        FROM unnest($1::bigint[], $2::text[], $3::text[]) AS wanted (id, status, pet_status)
        JOIN orders ON orders.id = wanted.id
        ORDER BY orders.id FOR UPDATE OF orders
    ), changed AS (
        UPDATE orders SET status = locked.status FROM locked
        WHERE orders.id = locked.id AND (orders.status = 'placed') IS TRUE
        RETURNING orders.id, orders.pet_id, orders.status, orders.placed_at, orders.placed_by,
            locked.pet_status
    ), moved AS (
        UPDATE pets SET status = changed.pet_status FROM changed
        WHERE pets.id = changed.pet_id
        RETURNING pets.id
    )
    SELECT id, pet_id, status, placed_at, placed_by FROM changed";

/// The Store's statements, prepared on every shared connection.
pub(super) struct OrderStatements {
    pub get: Statement,
    pub get_many: Statement,
    pub list: Statement,
    pub list_by_status: Statement,
    /// An animal has few orders: its index, then the status filter.
    pub list_by_pet: Statement,
    /// One owner's orders (a customer's): its index, then the filters.
    pub list_by_owner: Statement,
    pub inventory: Statement,
    pub place_many: Statement,
    pub update_many: Statement,
    pub pet_statuses: Statement,
}

impl OrderStatements {
    pub async fn prepare(client: &Client) -> Result<OrderStatements, tokio_postgres::Error> {
        let select = format!("SELECT {ORDER_COLUMNS} FROM orders");
        let by_id = format!("SELECT {ORDER_COLUMNS}, owner FROM orders WHERE id = $1");
        let by_ids = format!("{select} WHERE id = ANY($1)");
        // Limits as subqueries, a status as bounds: see `shared.rs`.
        let from = format!("{select} WHERE id > $1 ORDER BY id LIMIT (SELECT $2::bigint)");
        let by_status = format!(
            "{select} WHERE (status, id) > ($1, $2) AND (status, id) <= ($1, 9223372036854775807)
             ORDER BY status, id LIMIT (SELECT $3::bigint)"
        );
        let by_pet = format!(
            "{select} WHERE pet_id = $1 AND id > $2 AND ($3::text IS NULL OR status = $3)
             ORDER BY id LIMIT (SELECT $4::bigint)"
        );
        let by_owner = format!(
            "{select} WHERE owner = $1 AND id > $2 AND ($3::text IS NULL OR status = $3)
               AND ($4::bigint IS NULL OR pet_id = $4)
             ORDER BY id LIMIT (SELECT $5::bigint)"
        );
        let (get, get_many, list, list_by_status, list_by_pet, list_by_owner) = tokio::try_join!(
            client.prepare(&by_id),
            client.prepare(&by_ids),
            client.prepare(&from),
            client.prepare(&by_status),
            client.prepare(&by_pet),
            client.prepare(&by_owner),
        )?;
        let (inventory, place_many, update_many, pet_statuses) = tokio::try_join!(
            client.prepare(
                "SELECT coalesce(sum(available), 0)::bigint, coalesce(sum(pending), 0)::bigint,
                        coalesce(sum(sold), 0)::bigint
                 FROM pet_counts"
            ),
            client.prepare(PLACE_MANY),
            client.prepare(UPDATE_MANY),
            client.prepare("SELECT id, status FROM pets WHERE id = ANY($1)"),
        )?;
        Ok(OrderStatements {
            get,
            get_many,
            list,
            list_by_status,
            list_by_pet,
            list_by_owner,
            inventory,
            place_many,
            update_many,
            pet_statuses,
        })
    }
}
