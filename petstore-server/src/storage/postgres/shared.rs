//! PostgreSQL connections shared by every request, each carrying several
//! queries at once.
//!
//! tokio-postgres pipelines the queries of concurrent callers on one
//! connection: their messages go out together, and PostgreSQL works through
//! them in order and answers in order. Shared this way, a fixed set of
//! connections carries any number of requests in flight, with no request
//! waiting for a connection to be free — on a small machine, where
//! PostgreSQL shares the cores with the server, that is fewer processes to
//! wake and switch between, and fewer system calls on both sides. (A pool
//! that lends each connection to one request at a time gets none of that.)
//! Each request goes to the connection with the fewest in flight, at most
//! [`DEPTH`] on each, so that one whose backend waits for a core does not
//! collect more.
//!
//! Only statements that stand alone belong here: a transaction needs a
//! connection of its own, or other requests' statements would run inside
//! it. Each connection prepares its statements once, when it is made.
//!
//! A page's `LIMIT` is read through a subquery (`LIMIT (SELECT $2::bigint)`),
//! so that PostgreSQL plans the statement once per connection. Written
//! `LIMIT $2`, a plan for the value at hand (20 rows) always looked far
//! cheaper than one for any value, so PostgreSQL planned the statement
//! again on every execution: a page of 20 pets cost the database 30 µs
//! where it costs 17 planned once, a page of the feed 59 where it costs 27
//! (`pgbench`, BENCHMARKS.md, "twenty-sixth pass").
//!
//! A page of one status bounds `(status, id)` on both sides instead of
//! saying `status = $1 AND id > $2`: of the indexes, only `(status, id)`
//! can serve that, and it does at any depth. Given the plain form, the
//! planner walked the primary key and filtered, since it takes the
//! statuses to be spread evenly over the ids. They are not: the oldest
//! animals are mostly sold and the newest available, so a page of
//! available animals read every sold one first. (Measured the other way
//! round, over 1.2 million animals where every sold one came after 124,000
//! available ones: 11 ms for the first page of sold animals, 0.03 ms now.)
//! PostgreSQL may still plan such a page for the status at hand, about
//! 17 µs each time; the plan reads that index either way.
//!
//! Arrays of ids (placing and settling orders, reads by id) stay plain
//! parameters, planned for each batch: the plan for any array assumes 100
//! ids and scans a table of a few thousand rows whole, and PostgreSQL would
//! keep that plan while the table grows, until its next statistics
//! (BENCHMARKS.md, "twenty-sixth pass"). A page's plan for any value reads
//! its index from the first row on, at any size.
//!
//! A broken connection is replaced by the first request that finds it
//! broken, so the storage recovers by itself when the database is back. A
//! connection that does not answer within [`STATEMENT_TIMEOUT`] (the
//! database hung, a network partition) counts as broken: the requests
//! waiting on it fail as unavailable (503) and the next one makes a new
//! connection.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use super::READ_ONLY_TRANSACTION;
use super::connect::Primary;
use super::event_statements::EventStatements;
use super::order_statements::OrderStatements;
use crate::storage::{PostgresFailure, StorageError};

/// How long a request waits for a connection, or for one to be made, before
/// it fails with 503 (a statement on a shared connection then has
/// `STATEMENT_TIMEOUT` of its own).
pub(super) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a statement on a shared connection may take before the
/// connection is given up.
pub(super) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most statements in flight on one connection; a request beyond waits
/// for the first connection with room. Deeper, a backend that waits for a
/// core holds up more requests queued behind it.
pub(super) const DEPTH: usize = 4;

/// What a slot without a live connection counts as in flight when choosing
/// one: requests go to live connections, and a dead one is made again only
/// once the live ones are this busy (or all are dead).
const DEAD_SLOT_WEIGHT: usize = 16;

/// A page of the animals of status `$1` after `$2`, at most `$3` (see the
/// module's docs).
const LIST_BY_STATUS: &str = "
    SELECT id, name, category_id, status FROM pets
    WHERE (status, id) > ($1, $2) AND (status, id) <= ($1, 9223372036854775807)
    ORDER BY status, id LIMIT (SELECT $3::bigint)";

/// One shared connection and its prepared statements.
pub(super) struct Shared {
    pub client: Client,
    /// Tells this connection from every other this process made (the
    /// feed's head must know when its connection, and perhaps the
    /// database, changed under it).
    pub serial: u64,
    /// The connection's task, ended with it.
    task: JoinHandle<()>,
    /// `SELECT … WHERE id > $1 ORDER BY id LIMIT (SELECT $2::bigint)`.
    pub list: Statement,
    /// [`LIST_BY_STATUS`].
    pub list_by_status: Statement,
    /// `SELECT … WHERE id = ANY($1)`.
    pub get_many: Statement,
    /// `INSERT` of the pets in three arrays (names, category ids,
    /// statuses), `RETURNING` each row.
    pub insert_many: Statement,
    /// The Store's statements.
    pub orders: OrderStatements,
    /// The feed's statements.
    pub events: EventStatements,
}

impl Shared {
    /// Connects to the primary and prepares the statements; the
    /// connection's task runs on the current runtime until the connection
    /// ends (requests learn of a broken connection from their own query).
    async fn open(primary: &Primary) -> Result<Shared, tokio_postgres::Error> {
        let (client, task) = primary.connect().await?;
        let (list, list_by_status, get_many, insert_many, orders, events) = tokio::try_join!(
            client.prepare(
                "SELECT id, name, category_id, status FROM pets
                 WHERE id > $1 ORDER BY id LIMIT (SELECT $2::bigint)"
            ),
            client.prepare(LIST_BY_STATUS),
            client.prepare("SELECT id, name, category_id, status FROM pets WHERE id = ANY($1)"),
            client.prepare(
                "INSERT INTO pets (name, category_id, status)
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])
                 RETURNING id, name, category_id, status"
            ),
            OrderStatements::prepare(&client),
            EventStatements::prepare(&client),
        )?;
        static SERIALS: AtomicU64 = AtomicU64::new(0);
        Ok(Shared {
            client,
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            task,
            list,
            list_by_status,
            get_many,
            insert_many,
            orders,
            events,
        })
    }
}

/// A connection given up (its last user gone) is closed at once, even if
/// the database never answers again.
impl Drop for Shared {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One place for a shared connection: the current one, replaced when it
/// breaks.
struct Slot {
    current: ArcSwapOption<Shared>,
    /// Requests using it now.
    in_flight: AtomicUsize,
    /// Held while the slot reconnects, so that one request reconnects and
    /// the others wait for its connection instead of each making their own.
    reconnecting: tokio::sync::Mutex<()>,
}

/// The shared connections, handed out in turn.
pub(super) struct SharedConnections {
    primary: Arc<Primary>,
    slots: Box<[Slot]>,
    /// [`DEPTH`] per slot: a request holds one while it uses a connection.
    room: Arc<tokio::sync::Semaphore>,
    next: AtomicUsize,
    /// Set by [`SharedConnections::close`]: no more connections are made.
    closed: AtomicBool,
}

impl SharedConnections {
    /// `count` (at least one) slots, connected on first use.
    pub fn new(primary: Arc<Primary>, count: usize) -> SharedConnections {
        let slots: Box<[Slot]> = (0..count.max(1))
            .map(|_| Slot {
                current: ArcSwapOption::empty(),
                in_flight: AtomicUsize::new(0),
                reconnecting: tokio::sync::Mutex::new(()),
            })
            .collect();
        let room = Arc::new(tokio::sync::Semaphore::new(slots.len() * DEPTH));
        SharedConnections {
            primary,
            slots,
            room,
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// A live connection, for as long as the lease is held: the one with
    /// the fewest requests in flight (so that a connection whose backend
    /// is held up, its queries waiting behind one another, gets no more
    /// until it catches up), (re)connected if it has none or its connection
    /// broke. Fails (unavailable) when no connection can be made within
    /// [`CONNECTION_TIMEOUT`].
    pub async fn get(&self) -> Result<Lease<'_>, StorageError> {
        let room = tokio::time::timeout(CONNECTION_TIMEOUT, Arc::clone(&self.room).acquire_owned())
            .await
            .map_err(|_| unavailable("waiting for a connection", PostgresFailure::ConnectTimeout))?
            .map_err(|_| StorageError::Closed)?;
        let slot = self.least_busy();
        // Counted in flight from now on, even while it connects: others go
        // elsewhere meanwhile.
        let counted = Counted::new(slot);
        let shared = match live(&slot.current) {
            Some(shared) => shared,
            None => tokio::time::timeout(CONNECTION_TIMEOUT, self.connect(slot))
                .await
                .unwrap_or(Err(unavailable(
                    "connecting",
                    PostgresFailure::ConnectTimeout,
                )))?,
        };
        Ok(Lease {
            shared,
            counted,
            _room: room,
        })
    }

    /// The slot with the fewest requests in flight, live ones first; ties
    /// go round.
    fn least_busy(&self) -> &Slot {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..self.slots.len())
            .map(|i| &self.slots[(start + i) % self.slots.len()])
            .min_by_key(|slot| {
                let in_flight = slot.in_flight.load(Ordering::Relaxed);
                match is_live(&slot.current) {
                    true => in_flight,
                    false => in_flight + DEAD_SLOT_WEIGHT,
                }
            })
            .expect("at least one slot")
    }

    /// Makes the slot's connection, unless another request did meanwhile.
    async fn connect(&self, slot: &Slot) -> Result<Arc<Shared>, StorageError> {
        let _reconnecting = slot.reconnecting.lock().await;
        if let Some(shared) = live(&slot.current) {
            return Ok(shared);
        }
        if self.closed.load(Ordering::Relaxed) {
            return Err(StorageError::Closed);
        }
        let shared = Arc::new(
            Shared::open(&self.primary)
                .await
                .map_err(|e| unavailable("connecting", e.into()))?,
        );
        // `close` may have come while connecting: the connection is not kept.
        if self.closed.load(Ordering::Relaxed) {
            return Err(StorageError::Closed);
        }
        slot.current.store(Some(Arc::clone(&shared)));
        Ok(shared)
    }

    /// How many slots have a live connection.
    pub fn open(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| is_live(&slot.current))
            .count()
    }

    /// How many connections there are at most.
    pub fn max(&self) -> usize {
        self.slots.len()
    }

    /// Drops every connection (their tasks end once the queries in flight
    /// are answered) and makes no more.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        for slot in &self.slots {
            slot.current.store(None);
        }
    }
}

/// A shared connection, lent to one request (and shared with others).
pub(super) struct Lease<'a> {
    shared: Arc<Shared>,
    counted: Counted<'a>,
    /// Released with the lease.
    _room: tokio::sync::OwnedSemaphorePermit,
}

impl std::ops::Deref for Lease<'_> {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Lease<'_> {
    /// Runs `statement` on this connection, `doing` what it says, within
    /// [`STATEMENT_TIMEOUT`]. When the connection does not answer in time,
    /// it is given up (the next request makes a new one) and the statement
    /// fails as unavailable: it may or may not have taken effect.
    pub async fn run<T>(
        &self,
        doing: &'static str,
        statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, StorageError> {
        match tokio::time::timeout(STATEMENT_TIMEOUT, statement).await {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(error)) => {
                let code = error.as_db_error().map(|db| db.code().code());
                if code == Some(READ_ONLY_TRANSACTION) {
                    // A node that no longer accepts writes.
                    self.give_up();
                }
                Err(unavailable_or_not(doing, error))
            }
            Err(_) => {
                self.give_up();
                Err(unavailable(doing, PostgresFailure::StatementTimeout))
            }
        }
    }

    /// Takes this connection out of its slot (unless it was replaced
    /// already): the next request makes a new one.
    fn give_up(&self) {
        let slot = self.counted.0;
        let current = slot.current.load();
        if current
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, &self.shared))
        {
            slot.current.store(None);
        }
    }
}

impl Lease<'_> {
    /// Runs `statement` with `params`, `doing` what it says (see
    /// [`Lease::run`]), and decodes each row into a map entry with `entry`.
    pub async fn query_map<K: Eq + std::hash::Hash, V>(
        &self,
        doing: &'static str,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
        entry: impl Fn(&tokio_postgres::Row) -> Result<(K, V), StorageError>,
    ) -> Result<std::collections::HashMap<K, V>, StorageError> {
        let rows = self
            .run(doing, self.client.query(statement, params))
            .await?;
        rows.iter().map(entry).collect()
    }
}

/// A request counted in its slot's `in_flight` until dropped.
struct Counted<'a>(&'a Slot);

impl<'a> Counted<'a> {
    fn new(slot: &'a Slot) -> Counted<'a> {
        slot.in_flight.fetch_add(1, Ordering::Relaxed);
        Counted(slot)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn unavailable(doing: &'static str, source: PostgresFailure) -> StorageError {
    StorageError::Postgres { doing, source }
}

/// The driver's error, which [`StorageError::is_unavailable`] sorts out.
fn unavailable_or_not(doing: &'static str, error: tokio_postgres::Error) -> StorageError {
    StorageError::Postgres {
        doing,
        source: error.into(),
    }
}

/// The slot's connection, unless it has none or it broke.
fn live(current: &ArcSwapOption<Shared>) -> Option<Arc<Shared>> {
    current
        .load_full()
        .filter(|shared| !shared.client.is_closed())
}

/// Whether the slot has a connection that has not broken; it is asked of
/// every slot on every request, so it takes no reference of its own.
fn is_live(current: &ArcSwapOption<Shared>) -> bool {
    current
        .load()
        .as_ref()
        .is_some_and(|shared| !shared.client.is_closed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::PostgresUrl;
    use crate::storage::postgres::PostgresStorage;
    use petstore_support::postgres::TestDatabase;

    type Cluster = Arc<petstore_support::postgres::Cluster>;

    /// A database of the schema, without autovacuum, on a cluster of its
    /// own (its long transactions would hold back the feed's head of every
    /// other test on a shared one), and the way to connect to it.
    async fn schema() -> Option<(Cluster, TestDatabase, Arc<Primary>)> {
        let cluster = petstore_support::postgres::own_cluster().await?;
        let database = cluster.fresh_database().await;
        let url = PostgresUrl::parse(database.url()).expect("a PostgreSQL URL");
        drop(PostgresStorage::open(&url).await.expect("the schema"));
        let config: tokio_postgres::Config = database.url().parse().expect("a URL");
        let primary = Primary::new(&config);
        // Statistics only when a test asks for them: an ANALYZE by
        // autovacuum would end the time before them, or invalidate a plan
        // in the middle of a test.
        let (client, task) = primary.connect().await.expect("a connection");
        client
            .batch_execute(
                "ALTER TABLE pets SET (autovacuum_enabled = off);
                 ALTER TABLE orders SET (autovacuum_enabled = off);
                 ALTER TABLE events SET (autovacuum_enabled = off)",
            )
            .await
            .expect("autovacuum off");
        task.abort();
        Some((cluster, database, primary))
    }

    /// Reads each page that one plan serves for every value ten times on
    /// a new connection, then asserts that PostgreSQL planned each for the
    /// values at hand only on the first five executions, as it does before
    /// it compares with a plan for all. (The pages of one status are the
    /// next test's.)
    async fn assert_planned_once(primary: &Primary, head: i64, regime: &str) {
        let shared = Shared::open(primary).await.expect("a connection");
        let client = &shared.client;
        let (after, limit) = (1_i64, 21_i64);
        let (owner, no_status) = (&b"\x01\x02"[..], None::<&str>);
        let kinds: Vec<i16> = (1..=7).collect();
        for _ in 0..10 {
            let pages: [(&Statement, &[&(dyn ToSql + Sync)]); 6] = [
                (&shared.list, &[&after, &limit]),
                (&shared.orders.list, &[&after, &limit]),
                (
                    &shared.orders.list_by_pet,
                    &[&1_i64, &after, &no_status, &limit],
                ),
                (
                    &shared.orders.list_by_owner,
                    &[&owner, &after, &no_status, &None::<i64>, &limit],
                ),
                (&shared.events.page_all, &[&Some(after), &head, &limit]),
                (
                    &shared.events.page,
                    &[&Some(after), &head, &1000_i64, &kinds, &Some(owner), &limit],
                ),
            ];
            for (statement, params) in pages {
                client.query(statement, params).await.expect("a page");
            }
        }
        let plans = client
            .query(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
                 WHERE generic_plans + custom_plans = 10",
                &[],
            )
            .await
            .expect("the session's statements");
        assert_eq!(plans.len(), 6, "{regime}: the pages read ten times each");
        for plan in plans {
            let (statement, generic, custom): (String, i64, i64) =
                (plan.get(0), plan.get(1), plan.get(2));
            assert!(
                custom <= 5 && generic >= 5,
                "{regime}: planned {custom} times for the values at hand, {generic} times \
                 for all: {statement}"
            );
        }
    }

    /// Planned once per connection, whatever the statistics say: on a new
    /// database, before its first statistics, and on one of a million
    /// events, where a plan for the values at hand looked cheaper than one
    /// for all with `LIMIT $2` (and, before them, with the floor read in the
    /// scan's condition).
    #[tokio::test]
    async fn a_page_is_planned_once_per_connection() {
        let Some((_cluster, _database, primary)) = schema().await else {
            return;
        };
        let (client, task) = primary.connect().await.expect("a connection");
        client
            .batch_execute(
                "INSERT INTO pets (name, category_id, status)
                     SELECT 'Rex', 1, 'available' FROM generate_series(1, 1000);
                 INSERT INTO orders (pet_id, status, placed_at, owner)
                     SELECT id, 'cancelled', now(), '\\x0102' FROM pets WHERE id <= 500",
            )
            .await
            .expect("rows");
        assert_planned_once(&primary, 1000, "before the first statistics").await;
        client
            .batch_execute(
                "INSERT INTO pets (name, category_id, status)
                     SELECT 'Rex', 1, 'available' FROM generate_series(1, 200000);
                 INSERT INTO orders (pet_id, status, placed_at, owner)
                     SELECT id, 'cancelled', now(), '\\x0102' FROM pets
                     WHERE id > 500 AND id <= 100000;
                 INSERT INTO events (id, kind, at, pet_id, name, category_id)
                     SELECT nextval('events_ids'), 1, now(), 1, 'Rex', 1
                     FROM generate_series(1, 1000000);
                 ANALYZE",
            )
            .await
            .expect("rows");
        assert_planned_once(&primary, 1_200_000, "a million events").await;
        task.abort();
    }

    /// A page of one status reads that status's rows, however the statuses
    /// are spread over the ids: here every sold animal (and cancelled
    /// order) comes before the first available one (placed), which a walk
    /// of the primary key would read first. Whether PostgreSQL plans for
    /// the status at hand or for any.
    #[tokio::test]
    async fn a_page_of_one_status_reads_that_status_alone() {
        let Some((_cluster, _database, primary)) = schema().await else {
            return;
        };
        let shared = Shared::open(&primary).await.expect("a connection");
        let client = &shared.client;
        client
            .batch_execute(
                "INSERT INTO pets (name, category_id, status)
                     SELECT 'Rex', 1, 'sold' FROM generate_series(1, 100000);
                 INSERT INTO pets (name, category_id, status)
                     SELECT 'Max', 1, 'available' FROM generate_series(1, 30);
                 INSERT INTO orders (pet_id, status, placed_at)
                     SELECT id, CASE WHEN status = 'sold' THEN 'cancelled' ELSE 'placed' END,
                            now()
                     FROM pets ORDER BY id",
            )
            .await
            .expect("rows");
        client.batch_execute("ANALYZE").await.expect("statistics");
        let prepared = client
            .query(
                "SELECT statement FROM pg_prepared_statements
                 WHERE statement ~ 'FROM (pets|orders)\\s+WHERE \\(?status'",
                &[],
            )
            .await
            .expect("the session's statements");
        assert_eq!(prepared.len(), 2, "the animals' and the orders'");
        for row in prepared {
            let statement: String = row.get(0);
            let status = match statement.contains("FROM pets") {
                true => "available",
                false => "placed",
            };
            for mode in ["force_custom_plan", "force_generic_plan"] {
                let plan = client
                    .simple_query(&format!(
                        "SET plan_cache_mode = {mode};
                         PREPARE page AS {statement};
                         EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
                             EXECUTE page('{status}', {}, 21);
                         DEALLOCATE page",
                        i64::MIN
                    ))
                    .await
                    .expect("the plan");
                let json = plan
                    .iter()
                    .find_map(|message| match message {
                        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
                        _ => None,
                    })
                    .expect("EXPLAIN's row");
                let plan: serde_json::Value = serde_json::from_str(json).expect("JSON");
                let top = &plan[0]["Plan"];
                // (PostgreSQL 18 writes the rows with decimals.)
                let rows = top["Actual Rows"].as_f64();
                assert_eq!(rows, Some(21.0), "{mode}: {statement}");
                let blocks = top["Shared Hit Blocks"].as_u64().unwrap_or(0)
                    + top["Shared Read Blocks"].as_u64().unwrap_or(0);
                assert!(
                    blocks < 50,
                    "{mode}: {blocks} blocks read for a page: {statement}\n{plan:#}"
                );
            }
        }
    }
}
