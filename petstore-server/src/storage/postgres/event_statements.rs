//! The feed's statements, which every shared connection prepares (as the
//! Store's are in `order_statements.rs`): a page (`feed.rs`), the head's
//! two (`head.rs`) and the kinds parked polls wait for (`parked.rs`).

use tokio_postgres::{Client, Statement};

/// A page of events after `$1` (from the floor when NULL) up to the head
/// `$2`: of at most `$3` rows examined, those of the kinds `$4` (and, for
/// order kinds, of the owner `$5` when given), at most `$6`.
///
/// Each row says whether it `matched`; the last row examined comes too
/// (`last_examined`, and its position `examined`) when it did not match,
/// so that a page that is not full says how far it looked. `$6 + 1` rows
/// at most: a full page stops reading at its last event. With nothing
/// examined, one row of NULLs; every row has the floor (the scan is skipped
/// when `$1` is below it: expired). The last row examined, or the row of
/// NULLs, has last the last value `events_ids` had handed out when the
/// statement read it, after its snapshot (see `head.rs`, "Reading what was
/// acknowledged"); a page that stopped short of the head does not read it
/// (PostgreSQL runs the subquery when a row first needs it).
///
/// The limits are read through subqueries so that the plan does not depend
/// on their values: PostgreSQL then keeps one generic plan for the
/// statement (planned with the values each time, it spent more on planning
/// than on the page).
pub(super) const PAGE: &str = "
    SELECT floor.floor, page.id, page.kind, page.at, page.pet_id, page.order_id,
           page.placed_at, page.name, page.category_id, page.created_status,
           page.matched, page.last_examined, page.examined,
           CASE WHEN page.last_examined IS NOT FALSE THEN
               (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END
                FROM events_ids)
           END AS taken
    FROM events_floor AS floor
    LEFT JOIN LATERAL (
        SELECT * FROM (
            SELECT scanned.*,
                   scanned.kind = ANY($4)
                       AND ($5::bytea IS NULL OR scanned.kind NOT IN (2, 3, 4)
                            OR scanned.owner = $5) AS matched,
                   lead(scanned.id) OVER (ORDER BY scanned.id) IS NULL AS last_examined,
                   row_number() OVER (ORDER BY scanned.id) AS examined
            FROM (SELECT id, kind, at, pet_id, order_id, owner, placed_at, name, category_id,
                         created_status
                  FROM events
                  WHERE id > coalesce($1, floor.floor) AND id <= $2
                    AND coalesce($1 >= floor.floor, true)
                  ORDER BY id LIMIT (SELECT $3::bigint)) AS scanned
        ) AS numbered
        WHERE numbered.matched OR numbered.last_examined
        ORDER BY numbered.id LIMIT (SELECT $6::bigint + 1)
    ) AS page ON true";

/// [`PAGE`] for a page of every kind, of any owner (a key that sees the
/// whole feed): the first `$3` events after `$1` (from the floor when NULL)
/// up to the head `$2`, each with the floor and the last value `events_ids`
/// handed out; one row of NULLs but those two when there is none. Every
/// row examined is kept, so it needs none of `PAGE`'s window: a plain range
/// of the primary key, a third of `PAGE`'s time in the database (12 against
/// 35–40 µs, `EXPLAIN ANALYZE`, 100,000 events).
///
/// Planned once per connection (see `shared.rs`): its limit is a subquery,
/// and the floor is read once, in the outer query, as in `PAGE`. (Read in
/// the scan's condition, it was left out of every plan for a given `$1`
/// but not of the plan for any, which then looked dearer: on a new
/// database, before its first statistics, PostgreSQL planned every page
/// again.)
pub(super) const PAGE_ALL: &str = "
    SELECT floor.floor, page.id, page.kind, page.at, page.pet_id, page.order_id,
           page.placed_at, page.name, page.category_id, page.created_status,
           (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END
            FROM events_ids) AS taken
    FROM events_floor AS floor
    LEFT JOIN LATERAL (
        SELECT id, kind, at, pet_id, order_id, placed_at, name, category_id, created_status
        FROM events
        WHERE id > coalesce($1, floor.floor) AND id <= $2
        ORDER BY id LIMIT (SELECT $3::bigint)
    ) AS page ON true";

/// The last value `events_ids` handed out (0 before the first), and the
/// floor (for `kept_pages.rs`). (`PAGE` reads the first too.)
pub(super) const IDS_TAKEN: &str = "
    SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END,
           (SELECT floor FROM events_floor)
    FROM events_ids";

/// The statement's snapshot's `xmin`, the next xid the cluster will
/// assign, the end of the WAL written, how far it is durable (flushed,
/// and on the synchronous standbys when there are any and their positions
/// may be seen), and how far it is flushed here. See `head.rs`. (The
/// function behind `pg_stat_replication`, without the view's copy of
/// every session's activity.)
pub(super) const HORIZON: &str = "
    SELECT pg_snapshot_xmin(snapshot)::text::bigint,
           pg_snapshot_xmax(snapshot)::text::bigint + age(pg_snapshot_xmax(snapshot)::xid),
           (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
           (least(pg_current_wal_flush_lsn(),
                  (SELECT min(flush_lsn) FROM pg_stat_get_wal_senders()
                   WHERE sync_state IN ('sync', 'quorum'))) - '0/0'::pg_lsn)::bigint,
           (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint
    FROM pg_current_snapshot() AS snapshot";

/// Has the WAL flushed up to where it is written now: a value of the head
/// waits for that (`head.rs`). PostgreSQL does not wait for the flush of a
/// transaction that wrote nothing but its commit, whatever
/// `synchronous_commit` says (the WAL writer flushes it later), so this
/// one writes an empty logical message (transactional, prefix `petstore`:
/// logical decoding plugins that forward messages see it; it takes a
/// transaction id), and commits waiting for the local disk only (the head
/// waits for synchronous standbys itself). A role needs `EXECUTE` on
/// `pg_logical_emit_message`, which PostgreSQL grants to every role; where
/// it is refused, the head does without (`head.rs`).
pub(super) const FLUSH: &str = "SELECT set_config('synchronous_commit', 'local', true), \
    pg_logical_emit_message(true, 'petstore', '')";

/// Each kind's last id among the events after `$1` up to `$2` (a range of
/// the primary key), and the floor as kind 0, from one snapshot: a purge
/// of that range would otherwise look like a range without events.
pub(super) const KINDS_BETWEEN: &str = "
    SELECT kind, max(id) FROM events WHERE id > $1 AND id <= $2 GROUP BY kind
    UNION ALL
    SELECT 0::smallint, floor FROM events_floor";

/// The feed's statements, prepared on every shared connection.
pub(super) struct EventStatements {
    pub page: Statement,
    /// See [`PAGE_ALL`].
    pub page_all: Statement,
    /// See [`IDS_TAKEN`].
    pub ids_taken: Statement,
    /// See [`HORIZON`].
    pub horizon: Statement,
    /// See [`KINDS_BETWEEN`].
    pub kinds_between: Statement,
}

impl EventStatements {
    pub async fn prepare(client: &Client) -> Result<EventStatements, tokio_postgres::Error> {
        let (page, page_all, ids_taken, horizon, kinds_between) = tokio::try_join!(
            client.prepare(PAGE),
            client.prepare(PAGE_ALL),
            client.prepare(IDS_TAKEN),
            client.prepare(HORIZON),
            client.prepare(KINDS_BETWEEN),
        )?;
        Ok(EventStatements {
            page,
            page_all,
            ids_taken,
            horizon,
            kinds_between,
        })
    }
}
