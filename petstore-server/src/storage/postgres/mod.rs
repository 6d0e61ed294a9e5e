//! PostgreSQL, for running many server instances on one catalogue.
//!
//! - Identifiers come from an identity column, so instances never collide.
//! - Reads go through a few connections shared by every request, their
//!   queries pipelined (`shared.rs`); plain creates are stored many
//!   per statement, on shared connections of their own (`batch.rs`).
//!   Both run in autocommit mode: with PostgreSQL's default
//!   `synchronous_commit = on`, an `INSERT` has been flushed to the WAL when
//!   it returns, so a `201` is durable.
//! - An idempotent create is a transaction, on a pooled connection of its
//!   own.
//! - A lost connection fails the requests that were using it (503: on a
//!   shared connection, every request in flight on it); so does one that
//!   does not answer within a few seconds. Broken connections are replaced
//!   when next needed, so the server recovers by itself when the database
//!   is back.
//! - The events feed is written by triggers in each change's own statement
//!   (`feed.rs`); a watcher task per instance finds how far pages may read
//!   without ever skipping an event (`head.rs`).
//! - Webhooks' subscriptions and deliveries, claimed by many instances at
//!   once, are `webhooks.rs`, on a small pool of their own.

use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::Row;

use super::idempotency::{CreateOutcome, Idempotency};
use super::keys::{
    KeyError, KeyStorage, Revoked, StoredKey, limits_columns, scopes_column, stored_digest,
    stored_limits, stored_scopes,
};
use crate::budget::{KeyLimits, LimitsChange};
use petstore_api::scopes::Scopes;
mod batch;
mod connect;
mod event_statements;
mod feed;
mod head;
mod kept_pages;
mod notify;
mod order_statements;
mod orders;
mod parked;
mod reads;
mod shared;
mod webhook_statements;
mod webhooks;

use self::batch::{Batcher, CreateBatcher, WRITERS};
use self::connect::{PoolConnect, Primary};
use self::feed::ReadEvents;
use self::head::Head;
use self::kept_pages::KeptPages;
use self::orders::{Place, Update};
use self::parked::Scouting;
use self::reads::{CountPets, GetPet, ListPets};
use self::shared::{CONNECTION_TIMEOUT, STATEMENT_TIMEOUT, SharedConnections};
use self::webhooks::WEBHOOK_CONNECTIONS;
use super::parked::Parked;
use super::{
    EventKind, EventQuery, EventsOutcome, ListQuery, OpenError, OrderPage, OrderQuery, Owner,
    OwnerId, Page, ParkedWait, PlaceOutcome, PoolStats, PostgresFailure, PostgresUrl, ReadTo,
    SharedStats, Storage, StorageError, StorageStats, StoredOrder, UpdateOutcome,
};
use enumset::EnumSet;
use petstore_api::model::{EncodedEvents, Inventory, NewPet, OrderUpdateStatus, Pet, PetStatus};

/// Schema migrations; `petstore_schema.version` counts those applied.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE pets (
        id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        name        TEXT   NOT NULL,
        category_id BIGINT NOT NULL,
        status      TEXT   CHECK (status IN ('available', 'pending', 'sold'))
    );
    -- Serves the status-filtered list in id order; the unfiltered list walks
    -- the primary key. Either way a page costs O(limit), not O(catalogue).
    CREATE INDEX pets_by_status ON pets (status, id);",
    // API keys (see `keys.rs`): digests only; times in Unix seconds.
    "CREATE TABLE api_keys (
        name         TEXT   PRIMARY KEY,
        digest       BYTEA  NOT NULL UNIQUE,
        created_at   BIGINT NOT NULL,
        expires_at   BIGINT,
        last_used_at BIGINT,
        revoked_at   BIGINT
    );",
    // Idempotency keys (see `idempotency.rs`): the first 201 of each key,
    // a copy of the pet it answered, committed with the pet.
    "CREATE TABLE idempotency_keys (
        scope       BYTEA  NOT NULL,
        key         TEXT   NOT NULL,
        fingerprint BYTEA  NOT NULL,
        created_at  BIGINT NOT NULL,
        pet_id      BIGINT NOT NULL,
        name        TEXT   NOT NULL,
        category_id BIGINT NOT NULL,
        status      TEXT,
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);",
    // The Store (see `orders.rs`).
    orders::MIGRATION,
    // Scopes and owners (contract 1.4.0): a key's scopes are the bits of
    // `petstore_api::scopes::Scopes` (NULL, for the keys made before, is
    // every scope); an order's owner is the digest of the key that placed
    // it, `placed_by` that key's name (both NULL for orders placed before).
    // The index serves a customer's pages of its own orders.
    "ALTER TABLE api_keys ADD COLUMN scopes SMALLINT;
    ALTER TABLE orders ADD COLUMN owner BYTEA, ADD COLUMN placed_by TEXT;
    CREATE INDEX orders_by_owner ON orders (owner, id);",
    // Budgets (`budget.rs`): what a key sets of its own rate (requests per
    // `rate_seconds`), burst and cap on requests in flight, NULL being the
    // configured default; and the serving instances' heartbeats, from
    // which each counts the instances sharing every budget
    // (`ratelimit/`). Additive: instances of the version before keep
    // reading the keys as they did (and, not beating, are not counted).
    "ALTER TABLE api_keys ADD COLUMN rate_requests INTEGER, ADD COLUMN rate_seconds INTEGER,
        ADD COLUMN burst INTEGER, ADD COLUMN in_flight INTEGER;
    CREATE TABLE instances (
        id      TEXT        PRIMARY KEY,
        seen_at TIMESTAMPTZ NOT NULL
    );",
    // The counts' triggers, each one statement planned once per session
    // (see `orders.rs`): the inventory as exact, the Store's writes cheaper.
    orders::COUNTS_IN_ONE_STATEMENT,
    // The events feed (contract 1.6.0, see `feed.rs`): the events, written
    // by triggers on pets and orders, and the floor below which they were
    // purged.
    feed::MIGRATION,
    // Keys made with every scope (`--scopes all`, stored as the five bits
    // of 1.4.0) have every scope, including those added since (1.6.0:
    // `events:read`): "all" is stored as NULL from now on, as for keys made
    // before scopes existed.
    "UPDATE api_keys SET scopes = NULL WHERE scopes = 31;",
    // Webhooks (contract 1.7.0, see `webhooks.rs`): subscriptions and
    // their deliveries. Additive: the release before never reads them.
    webhook_statements::MIGRATION,
    // The claims' index per subscription (see `webhook_statements::CLAIM`).
    webhook_statements::CLAIM_INDEX,
];

/// How long an instance is counted after its last heartbeat: four beats
/// (`ratelimit::HEARTBEAT`) missed.
const INSTANCE_ALIVE: &str = "2 seconds";

/// Serialises migrations between instances starting at the same time.
const MIGRATION_LOCK: i64 = 0x7065_7473_746f_7265; // "petstore"

/// The most shared connections for reads (fewer when the pool is smaller),
/// each with at most `shared::DEPTH` statements in flight.
/// Measured on two cores (BENCHMARKS.md): 4 connections with unbounded
/// depth gave the most throughput and a p99 ten times the pool's — a
/// backend that waits for a core holds up everything queued on its
/// connection; 16 gave the pool's p99 and lost the throughput; 4 with a
/// depth of 4 gave both.
const READERS_MAX: usize = 4;

/// The PostgreSQL implementation of [`Storage`], [`KeyStorage`] and
/// [`WebhookStorage`](super::WebhookStorage).
pub struct PostgresStorage {
    /// Shared connections for reads, each request on the one with the
    /// fewest in flight.
    readers: Arc<SharedConnections>,
    /// Reads by id, pages and counts, each kind answered together (see
    /// `reads.rs`), on the readers' connections.
    gets: Batcher<GetPet>,
    lists: Batcher<ListPets>,
    counts: Batcher<CountPets>,
    /// Pages of the feed, answered together the same way.
    events: Batcher<ReadEvents>,
    /// The last page read for a parked long poll, with the head it was
    /// read up to, encoded (see `encoded_events`).
    last_parked: std::sync::Mutex<Option<(EventQuery, i64, EventsOutcome<EncodedEvents>)>>,
    /// Pages that stop short of the head, encoded (`kept_pages.rs`).
    kept_pages: KeptPages,
    /// The feed's head, and the task that moves it (on a connection of its
    /// own, so that neither reads nor writes delay it).
    head: Head,
    /// The head's connection.
    watcher: Arc<SharedConnections>,
    /// Each kind's last id up to the head, for long polls parked there.
    parked: Parked,
    /// Plain creates, stored in batches on shared connections of their own.
    creates: CreateBatcher,
    /// Orders placed without an idempotency key, and orders updated,
    /// batched the same way on the same connections.
    places: Batcher<Place>,
    updates: Batcher<Update>,
    /// Shared connections for writes: the batched creates, and orders
    /// placed and updated (a write may wait for a row another holds, which
    /// would hold up the reads queued behind it).
    writers: Arc<SharedConnections>,
    /// Connections for transactions (idempotent creates and orders).
    pool: Pool,
    /// One connection for everything else — readiness, figures, the key
    /// reload — so that a pool saturated by requests never makes a busy
    /// instance look unready, nor delays a revocation.
    admin: Pool,
    /// Connections for the webhook operations (`webhooks.rs`).
    webhooks: Pool,
    /// Connections for the webhooks' own bookkeeping: fan-out, claims,
    /// finishes, purges; their commits do not wait for the disk (see
    /// [`without_waiting_for_the_disk`]).
    deliveries: Pool,
}

/// Whether a PostgreSQL failure is the database's being unavailable — no
/// connection, a connection lost, the server shutting down, out of disk or
/// connections, a lock or serialisation conflict — rather than a bug in us
/// (a statement the server rejects, data that does not decode).
pub(super) fn is_unavailable(failure: &PostgresFailure) -> bool {
    let error = match failure {
        PostgresFailure::Driver(error) => error,
        PostgresFailure::Pool(_)
        | PostgresFailure::ConnectTimeout
        | PostgresFailure::StatementTimeout => return true,
    };
    let Some(db) = error.as_db_error() else {
        // Not the server's answer: the connection broke or could not be made.
        return true;
    };
    let code = db.code().code();
    // 08 connection exception, 53 insufficient resources, 57 operator
    // intervention (shutdown), 58 system error, 40 transaction rollback
    // (serialisation, deadlock), 55P03 lock not available, 25006 a write
    // refused by a node that no longer accepts writes (fenced or demoted:
    // the connection is dropped, and the next finds the primary).
    ["08", "53", "57", "58", "40"]
        .iter()
        .any(|class| code.starts_with(class))
        || code == "55P03"
        || code == READ_ONLY_TRANSACTION
}

/// SQLSTATE `read_only_sql_transaction`.
pub(super) const READ_ONLY_TRANSACTION: &str = "25006";

fn postgres<E: Into<PostgresFailure>>(doing: &'static str) -> impl Fn(E) -> StorageError {
    move |e| StorageError::Postgres {
        doing,
        source: e.into(),
    }
}

impl PostgresStorage {
    /// Connects (failing fast when the database is unreachable) and brings
    /// the schema up to date; what goes wrong in the background (the
    /// feed's head) is not logged (see [`PostgresStorage::open_logged`]).
    pub async fn open(url: &PostgresUrl) -> Result<PostgresStorage, OpenError> {
        let discard = slog::Logger::root(slog::Discard, slog::o!());
        PostgresStorage::open_logged(url, discard).await
    }

    /// [`PostgresStorage::open`], logging to `log` what goes wrong in the
    /// background.
    pub async fn open_logged(
        url: &PostgresUrl,
        log: slog::Logger,
    ) -> Result<PostgresStorage, OpenError> {
        let in_database = |source: StorageError| OpenError::Storage {
            database: url.to_string(),
            source,
        };
        let mut config: tokio_postgres::Config = url
            .url()
            .parse()
            .map_err(postgres("parsing the URL"))
            .map_err(in_database)?;
        // No default `connect_timeout` here: `Primary` bounds each host's
        // whole handshake, by the URL's or its own (2 s).
        let options = match config.get_options() {
            // The URL's own options come last, so that they win.
            Some(given) => format!("{SESSION_OPTIONS} {given}"),
            None => SESSION_OPTIONS.to_owned(),
        };
        config.options(&options);
        let primary = Primary::new(&config);
        let readers = Arc::new(SharedConnections::new(
            Arc::clone(&primary),
            url.pool_size().min(READERS_MAX),
        ));
        let writers = Arc::new(SharedConnections::new(Arc::clone(&primary), WRITERS));
        let watcher = Arc::new(SharedConnections::new(Arc::clone(&primary), 1));
        let pool = build_pool(&config, &primary, url.pool_size(), url)?;
        let admin = build_pool(&config, &primary, 1, url)?;
        let webhooks = build_pool(&config, &primary, WEBHOOK_CONNECTIONS, url)?;
        // Its sessions' settings differ, so its connections are made by a
        // `Primary` of their own.
        let relaxed = without_waiting_for_the_disk(&config);
        let deliveries = build_pool(&relaxed, &Primary::new(&relaxed), WEBHOOK_CONNECTIONS, url)?;
        let mut client = pool
            .get()
            .await
            .map_err(postgres("connecting"))
            .map_err(in_database)?;
        migrate(&mut client).await.map_err(|e| match e {
            Migration::Store(e) => in_database(e),
            Migration::Refused(e) => e,
        })?;
        let head = Head::start(Arc::clone(&watcher), Arc::clone(&primary), log.clone());
        Ok(PostgresStorage {
            gets: Batcher::start(Arc::clone(&readers), readers.max()),
            lists: Batcher::start(Arc::clone(&readers), readers.max()),
            counts: Batcher::start(Arc::clone(&readers), readers.max()),
            events: Batcher::start(Arc::clone(&readers), readers.max()),
            last_parked: std::sync::Mutex::new(None),
            kept_pages: KeptPages::new(),
            parked: Parked::start(Scouting(Arc::clone(&readers)), head.receiver(), log),
            head,
            watcher,
            readers,
            creates: CreateBatcher::start(Arc::clone(&writers), WRITERS),
            places: Batcher::start(Arc::clone(&writers), WRITERS),
            updates: Batcher::start(Arc::clone(&writers), WRITERS),
            writers,
            pool,
            admin,
            webhooks,
            deliveries,
        })
    }

    /// A connection of the transaction pool (see [`Lent`]).
    async fn client(&self) -> Result<Lent<'_>, StorageError> {
        Lent::from(&self.pool).await
    }

    /// The connection for everything else (see [`Lent`]).
    async fn admin_client(&self) -> Result<Lent<'_>, StorageError> {
        Lent::from(&self.admin).await
    }

    /// The page `query` asks for, up to a head that has passed every change
    /// acknowledged before it was asked for (`Storage::events`), as the
    /// batch that read it shares it.
    async fn page_to_head(&self, query: EventQuery) -> Result<Arc<EventsOutcome>, StorageError> {
        let head = self.head.now();
        let read = self.events.submit(ReadEvents { query, head }).await?;
        let reached_head = matches!(&*read.outcome, EventsOutcome::Page(page) if page.at_head);
        let Some(taken) = read.taken.filter(|&taken| reached_head && taken > head) else {
            return Ok(read.outcome);
        };
        // Ids were taken that the head has not passed, perhaps by changes
        // acknowledged before this page was asked for (`head.rs`).
        match self.head.reaching(taken).await {
            // It did not move (see `SETTLE_WAIT`): the page stands.
            moved if moved == head => Ok(read.outcome),
            head => Ok(self
                .events
                .submit(ReadEvents { query, head })
                .await?
                .outcome),
        }
    }
}

/// A pooled connection, lent to one piece of work that must be done within
/// [`STATEMENT_TIMEOUT`] (see [`Lent::settle`]).
///
/// deadpool's recycling only asks whether a connection is closed, and a
/// connection to a database that stopped answering (a hung primary, a
/// network partition) is not: put back in the pool, it would hang every
/// request it is lent to, for as long as the database hangs — after a
/// failover, for ever. So a connection goes back to the pool only once its
/// work has succeeded; one dropped before (its deadline passed, its
/// request cancelled, its work failed) may still have a statement in
/// flight or a transaction open, and is closed instead.
struct Lent<'p> {
    client: Option<deadpool_postgres::Client>,
    pool: &'p Pool,
}

impl<'p> Lent<'p> {
    async fn from(pool: &'p Pool) -> Result<Lent<'p>, StorageError> {
        let client = pool.get().await.map_err(postgres("getting a connection"))?;
        Ok(Lent {
            client: Some(client),
            pool,
        })
    }

    fn client(&mut self) -> &mut deadpool_postgres::Client {
        self.client.as_mut().expect("lent until settled")
    }

    /// The outcome of the work done on this connection, `answer` (from
    /// `tokio::time::timeout(STATEMENT_TIMEOUT, …)`): on success, the
    /// connection goes back to the pool; otherwise it is closed. When the
    /// deadline passed, the pool's idle connections are closed too: they
    /// are most likely to the same database, and would each hang a
    /// request for the same deadline before being found out.
    fn settle<T, E: From<StorageError>>(
        mut self,
        doing: &'static str,
        answer: Result<Result<T, E>, tokio::time::error::Elapsed>,
    ) -> Result<T, E> {
        match answer {
            Ok(Ok(done)) => {
                drop(self.client.take());
                Ok(done)
            }
            Ok(Err(failed)) => Err(failed),
            Err(_) => {
                self.pool.retain(|_, _| false);
                Err(StorageError::Postgres {
                    doing,
                    source: PostgresFailure::StatementTimeout,
                }
                .into())
            }
        }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Out of the pool; dropping it ends its connection's task.
            drop(deadpool_postgres::Client::take(client));
        }
    }
}

/// A connection pool of at most `size` connections, each made through
/// `primary`.
fn build_pool(
    config: &tokio_postgres::Config,
    primary: &Arc<Primary>,
    size: usize,
    url: &PostgresUrl,
) -> Result<Pool, OpenError> {
    let manager = Manager::from_connect(
        config.clone(),
        PoolConnect(Arc::clone(primary)),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(CONNECTION_TIMEOUT))
        .create_timeout(Some(CONNECTION_TIMEOUT))
        .recycle_timeout(Some(CONNECTION_TIMEOUT))
        .build()
        .map_err(|e| OpenError::Io {
            doing: format!("creating the connection pool for {url}"),
            source: std::io::Error::other(e.to_string()),
        })
}

/// Every session's settings, before the URL's own options (which win).
///
/// - A session cut off from us mid-transaction (a network partition) would
///   hold its idempotency key's lock until TCP gives up, hours later; our
///   transactions never idle, so a minute ends such a one.
/// - No JIT compilation: our statements each touch a few rows by an index,
///   and the planner's estimate for a claim behind a backlog (its subquery
///   per candidate) passes `jit_above_cost`, so PostgreSQL compiled every
///   claim, 30-50 ms of LLVM for a statement that then ran in 9 ms
///   (BENCHMARKS.md, issue 28, twentieth pass).
const SESSION_OPTIONS: &str = "-c idle_in_transaction_session_timeout=60s -c jit=off";

/// `config` with `synchronous_commit = off`, for the sessions of the
/// webhooks' own bookkeeping. Nothing of it is acknowledged to a client:
/// a crash or a failover can lose its last commits, which leaves the
/// fan-out's cursor, the deliveries and their outcomes as they were a
/// moment before (a lost commit is lost whole, and with those after it),
/// so deliveries are only made and sent again, with the same
/// `webhook-id`. The events, and every change an answer acknowledged,
/// still commit on the other sessions, which wait. Waiting for the WAL's
/// flush on every finish, two connections at a time, held delivery near
/// 1,600 a second (BENCHMARKS.md, "Contract 1.7.0"). SQLite's deliverer
/// commits likewise (`Commits::Relaxed`).
fn without_waiting_for_the_disk(config: &tokio_postgres::Config) -> tokio_postgres::Config {
    let mut config = config.clone();
    let options = config.get_options().unwrap_or_default();
    // Before the other options: a URL that sets it itself still wins.
    config.options(format!("-c synchronous_commit=off {options}"));
    config
}

/// Why migrating failed: the database, or a refusal.
enum Migration {
    Store(StorageError),
    Refused(OpenError),
}

/// Applies the migrations the database lacks under an advisory lock, so
/// that instances starting together migrate once. A database from a newer
/// server is left untouched.
async fn migrate(client: &mut deadpool_postgres::Client) -> Result<(), Migration> {
    let sql = |e: tokio_postgres::Error| Migration::Store(postgres("migrating the schema")(e));
    let tx = client.transaction().await.map_err(sql)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(sql)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS petstore_schema (version INTEGER NOT NULL);
         INSERT INTO petstore_schema (version)
             SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM petstore_schema);",
    )
    .await
    .map_err(sql)?;
    let row = tx
        .query_one("SELECT version FROM petstore_schema", &[])
        .await
        .map_err(sql)?;
    let current: i32 = row.try_get(0).map_err(sql)?;
    let current = usize::try_from(current)
        .map_err(|_| Migration::Refused(OpenError::InvalidSchemaVersion(current.into())))?;
    if current > MIGRATIONS.len() {
        return Err(Migration::Refused(OpenError::NewerSchema {
            found: current as i64,
            known: MIGRATIONS.len(),
        }));
    }
    for migration in &MIGRATIONS[current..] {
        tx.batch_execute(migration).await.map_err(sql)?;
    }
    let version = i32::try_from(MIGRATIONS.len()).expect("few migrations");
    tx.execute("UPDATE petstore_schema SET version = $1", &[&version])
        .await
        .map_err(sql)?;
    tx.commit().await.map_err(sql)
}

/// Decodes a row into a pet, never panicking: a column of an unexpected
/// type or value is reported with the row's id and the column's name.
fn pet_from_row(row: &Row) -> Result<Pet, StorageError> {
    pet_from_columns(row, 0)
}

/// [`pet_from_row`] for a pet whose four columns start at `first`.
fn pet_from_columns(row: &Row, first: usize) -> Result<Pet, StorageError> {
    let decode = postgres("decoding a row");
    let id: i64 = row.try_get(first).map_err(&decode)?;
    Ok(Pet {
        id,
        name: row.try_get(first + 1).map_err(&decode)?,
        category_id: row.try_get(first + 2).map_err(&decode)?,
        status: status_from_column(row, first + 3, id)?,
    })
}

/// The status in column `column` of the row of pet `id`.
fn status_from_column(
    row: &Row,
    column: usize,
    id: i64,
) -> Result<Option<PetStatus>, StorageError> {
    match row
        .try_get::<_, Option<&str>>(column)
        .map_err(postgres("decoding a row"))?
    {
        None => Ok(None),
        Some(text) => PetStatus::parse(text)
            .map(Some)
            .ok_or_else(|| StorageError::Undecodable {
                id,
                column: "status",
                value: format!("the text {text:?}"),
                expected: "status (available, pending, sold)",
            }),
    }
}

#[async_trait::async_trait]
impl Storage for PostgresStorage {
    async fn create(&self, pet: NewPet) -> Result<Pet, StorageError> {
        let created = self.creates.submit(pet).await;
        self.head.written();
        created
    }

    async fn create_idempotent(
        &self,
        pet: NewPet,
        once: Idempotency,
    ) -> Result<CreateOutcome, StorageError> {
        let mut lent = self.client().await?;
        let work = create_once(lent.client(), pet, once);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        let created = lent.settle("creating a pet with an idempotency key", answer);
        if !matches!(
            created,
            Ok(CreateOutcome::KeyInUse | CreateOutcome::KeyReused | CreateOutcome::Replayed(_))
        ) {
            self.head.written();
        }
        created
    }

    async fn purge_idempotency(
        &self,
        made_before: i64,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let mut lent = self.admin_client().await?;
        let client = lent.client();
        let work = async {
            let mut left = i64::try_from(limit).unwrap_or(i64::MAX);
            let mut deleted = 0;
            for table in ["idempotency_keys", "order_idempotency_keys"] {
                let gone = purge_keys(client, table, made_before, left).await?;
                deleted += gone;
                left = left.saturating_sub(i64::try_from(gone).unwrap_or(i64::MAX));
            }
            Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle("purging idempotency records", answer)
    }

    async fn list(&self, query: ListQuery) -> Result<Page, StorageError> {
        self.lists.submit(ListPets(query)).await
    }

    async fn get(&self, id: i64) -> Result<Option<Pet>, StorageError> {
        self.gets.submit(GetPet(id)).await
    }

    async fn place_order(
        &self,
        pet_id: i64,
        owner: Owner,
        idempotency: Option<Idempotency>,
    ) -> Result<PlaceOutcome, StorageError> {
        let placed = match idempotency {
            None => self.places.submit(Place(pet_id, owner)).await,
            Some(once) => {
                let mut lent = self.client().await?;
                let work = orders::place_once(lent.client(), pet_id, &owner, &once);
                let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
                lent.settle("placing an order with an idempotency key", answer)
            }
        };
        if matches!(placed, Ok(PlaceOutcome::Placed(_)) | Err(_)) {
            self.head.written();
        }
        placed
    }

    async fn update_order(
        &self,
        id: i64,
        to: OrderUpdateStatus,
    ) -> Result<UpdateOutcome, StorageError> {
        let to = to.into();
        let updated = self.updates.submit(Update { id, to }).await;
        if matches!(updated, Ok(UpdateOutcome::Done(_)) | Err(_)) {
            self.head.written();
        }
        updated
    }

    async fn get_order(
        &self,
        id: i64,
        owner: Option<OwnerId>,
    ) -> Result<Option<StoredOrder>, StorageError> {
        orders::get(&self.readers.get().await?, id, owner).await
    }

    async fn list_orders(&self, query: OrderQuery) -> Result<OrderPage, StorageError> {
        orders::list(&self.readers.get().await?, query).await
    }

    async fn inventory(&self) -> Result<Inventory, StorageError> {
        self.counts.submit(CountPets).await
    }

    async fn events(&self, query: EventQuery) -> Result<EventsOutcome, StorageError> {
        let read = self.page_to_head(query).await?;
        Ok(Arc::unwrap_or_clone(read))
    }

    /// To the head: [`Storage::events`]'s page, encoded, or the page kept
    /// for the query when one read before stopped short of the head
    /// (`kept_pages.rs`). To the known
    /// head: polls parked for the same types, woken by the same look of
    /// the scout (`parked.rs`), read from the same cursor (where their
    /// kinds were quiet) up to the same head, which never changes: the last
    /// page read is kept and given to the next poll that asks for it, so
    /// that they cost one statement between them.
    async fn encoded_events(
        &self,
        query: EventQuery,
        to: ReadTo,
    ) -> Result<EventsOutcome<EncodedEvents>, StorageError> {
        if to == ReadTo::Head {
            let floor = self.head.floor();
            if let Some(kept) = self.kept_pages.get(&query, floor) {
                return Ok(kept);
            }
            let outcome = self.page_to_head(query).await?.encoded();
            self.kept_pages
                .keep(query, &outcome, floor, self.head.floor());
            return Ok(outcome);
        }
        let head = self.head.now();
        let last_parked = || self.last_parked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((read, read_head, outcome)) = last_parked().as_ref()
            && (*read, *read_head) == (query, head)
        {
            return Ok(outcome.clone());
        }
        let outcome = self
            .events
            .submit(ReadEvents { query, head })
            .await?
            .outcome
            .encoded();
        *last_parked() = Some((query, head, outcome.clone()));
        Ok(outcome)
    }

    /// Woken by the kinds of the events after `head`, which one statement
    /// a tick reads for every poll parked on this instance (`parked.rs`);
    /// those it wakes at once read one page between them.
    async fn events_after(
        &self,
        kinds: EnumSet<EventKind>,
        head: i64,
        deadline: tokio::time::Instant,
    ) -> ParkedWait {
        self.parked.wait(kinds, head, deadline).await
    }

    fn events_head(&self) -> tokio::sync::watch::Receiver<i64> {
        self.head.receiver()
    }

    async fn purge_events(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // Never above the head: the events there are not all final yet.
        let head = self.head.now();
        let mut lent = self.admin_client().await?;
        let work = feed::purge(lent.client(), before, limit, head);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        let (deleted, last) = lent.settle("purging events", answer)?;
        if let Some(last) = last {
            self.head.purged_to(last);
        }
        Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
    }

    async fn check_ready(&self) -> Result<(), StorageError> {
        let doing = "checking the connection";
        let mut lent = self.admin_client().await?;
        let work = lent.client().simple_query("SELECT 1");
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer.map(|done| done.map_err(postgres(doing))))
            .map(drop)
    }

    async fn stats(&self) -> Result<StorageStats, StorageError> {
        let doing = "counting pets and events";
        let mut lent = self.admin_client().await?;
        // Exact while small; above that the planner's estimate, since an
        // exact count would scan the whole table on every scrape. (A table
        // never analysed estimates -1: counted.)
        let work = lent.client().query_one(
            "SELECT (SELECT CASE WHEN c.reltuples < 100000
                            THEN (SELECT count(*) FROM pets)
                            ELSE c.reltuples::bigint END
                     FROM pg_class c WHERE c.oid = 'pets'::regclass),
                    (SELECT CASE WHEN c.reltuples < 100000
                            THEN (SELECT count(*) FROM events)
                            ELSE c.reltuples::bigint END
                     FROM pg_class c WHERE c.oid = 'events'::regclass),
                    (SELECT at FROM events ORDER BY id LIMIT 1)",
            &[],
        );
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        let row = lent.settle(doing, answer.map(|done| done.map_err(postgres(doing))))?;
        let pets: i64 = row.try_get(0).map_err(postgres(doing))?;
        let events: i64 = row.try_get(1).map_err(postgres(doing))?;
        let oldest_event = row.try_get(2).map_err(postgres(doing))?;
        let status = self.pool.status();
        Ok(StorageStats {
            pets: u64::try_from(pets).unwrap_or(0),
            events: u64::try_from(events).unwrap_or(0),
            oldest_event,
            pool: Some(PoolStats {
                max: status.max_size,
                open: status.size,
                idle: status.available,
                waiting: status.waiting,
            }),
            shared: Some(SharedStats {
                max: self.readers.max() + self.writers.max() + self.watcher.max(),
                open: self.readers.open() + self.writers.open() + self.watcher.open(),
            }),
        })
    }

    async fn close(&self) {
        self.head.stop();
        self.parked.stop();
        self.readers.close();
        self.writers.close();
        self.watcher.close();
        self.pool.close();
        self.admin.close();
        self.webhooks.close();
        self.deliveries.close();
    }
}

/// One transaction: the key's advisory lock (not free: another request,
/// on any instance, holds the key: 409), then its live record (a replay
/// or a reuse), else the pet and the record together. The record is
/// read only once the lock is held, so a request that committed the
/// key before is always seen.
async fn create_once(
    client: &mut deadpool_postgres::Client,
    pet: NewPet,
    once: Idempotency,
) -> Result<CreateOutcome, StorageError> {
    let doing = "creating a pet with an idempotency key";
    let sql = postgres(doing);
    // Replaces an expired record of the key, if one is left.
    let insert = client
        .prepare_cached(
            "WITH pet AS (
                 INSERT INTO pets (name, category_id, status) VALUES ($1, $2, $3)
                 RETURNING id, name, category_id, status)
             INSERT INTO idempotency_keys
                 (scope, key, fingerprint, created_at, pet_id, name, category_id, status)
             SELECT $4, $5, $6, $7, id, name, category_id, status FROM pet
             ON CONFLICT (scope, key) DO UPDATE SET
                 fingerprint = excluded.fingerprint, created_at = excluded.created_at,
                 pet_id = excluded.pet_id, name = excluded.name,
                 category_id = excluded.category_id, status = excluded.status
             RETURNING pet_id",
        )
        .await
        .map_err(&sql)?;
    let select = "SELECT fingerprint, created_at, pet_id, name, category_id, status
                  FROM idempotency_keys WHERE scope = $1 AND key = $2";
    let tx = match begin_keyed(client, select, once.lock_id(), &once, doing).await? {
        KeyState::Free(tx) => tx,
        KeyState::InUse => return Ok(CreateOutcome::KeyInUse),
        KeyState::Reused => return Ok(CreateOutcome::KeyReused),
        KeyState::Replay(record) => {
            return Ok(CreateOutcome::Replayed(pet_from_columns(&record, 2)?));
        }
    };
    let status = pet.status.map(PetStatus::as_str);
    let (caller, fingerprint) = (&once.caller.0[..], once.fingerprint.as_bytes());
    let row = tx
        .query_one(
            &insert,
            &[
                &pet.name,
                &pet.category_id,
                &status,
                &caller,
                &once.key,
                &fingerprint,
                &once.now,
            ],
        )
        .await
        .map_err(&sql)?;
    let id: i64 = row.try_get(0).map_err(&sql)?;
    tx.commit().await.map_err(&sql)?;
    Ok(CreateOutcome::Created(Pet::from_new(id, pet)))
}

/// What a request with an idempotency key found of its key.
enum KeyState<'c> {
    /// The key is this request's: its transaction, with the key's lock held.
    Free(deadpool_postgres::Transaction<'c>),
    /// Another request, on any instance, holds the key.
    InUse,
    /// The key's live record is for another body.
    Reused,
    /// The key's live record is for the same body: the first answer's row.
    Replay(Row),
}

/// Deletes at most `limit` records made before `before` from the
/// idempotency table `table`. By `ctid`, re-checking the age: a record a
/// request renewed in the meantime is a new row version, and stays.
async fn purge_keys(
    client: &deadpool_postgres::Client,
    table: &'static str,
    before: i64,
    limit: i64,
) -> Result<u64, StorageError> {
    let statement = format!(
        "DELETE FROM {table}
         WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} WHERE created_at < $1 LIMIT $2))
           AND created_at < $1"
    );
    client
        .execute(statement.as_str(), &[&before, &limit])
        .await
        .map_err(postgres("purging idempotency records"))
}

/// Begins a READ COMMITTED transaction (whatever the database's default)
/// for a request with `once`, takes the key's lock `lock_id`, and only then
/// reads the key's record with `select` (`fingerprint, created_at, …` for
/// `scope = $1 AND key = $2`), so that a request that committed the key
/// before is always seen. The transaction is kept only when the key is
/// free; otherwise it is rolled back (the read-only answers stand even if
/// that fails: nothing was written, and PostgreSQL ends the transaction
/// with its session).
async fn begin_keyed<'c>(
    client: &'c mut deadpool_postgres::Client,
    select: &str,
    lock_id: i64,
    once: &Idempotency,
    doing: &'static str,
) -> Result<KeyState<'c>, StorageError> {
    let sql = postgres(doing);
    let try_lock = client
        .prepare_cached("SELECT pg_try_advisory_xact_lock($1)")
        .await
        .map_err(&sql)?;
    let select = client.prepare_cached(select).await.map_err(&sql)?;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
        .start()
        .await
        .map_err(&sql)?;
    let locked: bool = tx
        .query_one(&try_lock, &[&lock_id])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(&sql)?;
    if !locked {
        let _ = tx.rollback().await;
        return Ok(KeyState::InUse);
    }
    let record = tx
        .query_opt(&select, &[&&once.caller.0[..], &once.key])
        .await
        .map_err(&sql)?;
    let live = match record {
        Some(record) if once.is_live(record.try_get(1).map_err(&sql)?) => record,
        _ => return Ok(KeyState::Free(tx)),
    };
    let fingerprint: &[u8] = live.try_get(0).map_err(&sql)?;
    let state = match fingerprint == once.fingerprint.as_bytes() {
        true => KeyState::Replay(live),
        false => KeyState::Reused,
    };
    let _ = tx.rollback().await;
    Ok(state)
}

/// The key `name`'s `columns`, its row locked until `tx` ends; an unknown
/// name is an error.
async fn locked_key(
    tx: &deadpool_postgres::Transaction<'_>,
    columns: &str,
    name: &str,
    doing: &'static str,
) -> Result<Row, KeyError> {
    let select = format!("SELECT {columns} FROM api_keys WHERE name = $1 FOR UPDATE");
    tx.query_opt(select.as_str(), &[&name])
        .await
        .map_err(postgres(doing))?
        .ok_or_else(|| KeyError::UnknownName(name.to_owned()))
}

fn key_from_row(row: &Row) -> Result<StoredKey, StorageError> {
    let decode = postgres("decoding a key");
    let name: String = row.try_get(0).map_err(&decode)?;
    let digest = stored_digest(&name, row.try_get(1).map_err(&decode)?)?;
    Ok(StoredKey {
        digest,
        created_at: row.try_get(2).map_err(&decode)?,
        expires_at: row.try_get(3).map_err(&decode)?,
        scopes: stored_scopes(
            row.try_get::<_, Option<i16>>(6)
                .map_err(&decode)?
                .map(i64::from),
        ),
        last_used_at: row.try_get(4).map_err(&decode)?,
        revoked_at: row.try_get(5).map_err(&decode)?,
        limits: limits_from_columns(&name, row, 7)?,
        name,
    })
}

/// The four budget columns of `row` from `first`, as [`KeyLimits`].
fn limits_from_columns(name: &str, row: &Row, first: usize) -> Result<KeyLimits, StorageError> {
    let decode = postgres("decoding a key's budget");
    let column = |index: usize| -> Result<Option<i64>, StorageError> {
        Ok(row
            .try_get::<_, Option<i32>>(first + index)
            .map_err(&decode)?
            .map(i64::from))
    };
    stored_limits(name, column(0)?, column(1)?, column(2)?, column(3)?)
}

/// [`limits_columns`] as PostgreSQL's `INTEGER`s; a setting above
/// `i32::MAX` is refused.
fn limits_as_integers(name: &str, limits: KeyLimits) -> Result<[Option<i32>; 4], KeyError> {
    let mut columns = [None; 4];
    for (column, value) in columns.iter_mut().zip(limits_columns(limits)) {
        *column = value
            .map(|value| {
                i32::try_from(value).map_err(|_| StorageError::BadKey {
                    name: name.to_owned(),
                    reason: format!("{value} is too large a budget setting"),
                })
            })
            .transpose()?;
    }
    Ok(columns)
}

#[async_trait::async_trait]
impl KeyStorage for PostgresStorage {
    async fn create_key(&self, key: StoredKey) -> Result<(), KeyError> {
        let doing = "storing a key";
        let sql = postgres(doing);
        let [rate_requests, rate_seconds, burst, in_flight] =
            limits_as_integers(&key.name, key.limits)?;
        let mut lent = self.admin_client().await?;
        let work = async {
            lent.client()
                .execute(
                    "INSERT INTO api_keys (name, digest, created_at, expires_at, scopes,
                     rate_requests, rate_seconds, burst, in_flight)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    &[
                        &key.name,
                        &&key.digest.0[..],
                        &key.created_at,
                        &key.expires_at,
                        &scopes_column(key.scopes).map(|bits| bits as i16),
                        &rate_requests,
                        &rate_seconds,
                        &burst,
                        &in_flight,
                    ],
                )
                .await
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        let answer = answer.map(|inserted| match inserted {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_db_error().is_some_and(|db| {
                    db.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                        && db.constraint() == Some("api_keys_pkey")
                }) =>
            {
                Err(KeyError::DuplicateName(key.name.clone()))
            }
            Err(e) => Err(sql(e).into()),
        });
        lent.settle(doing, answer)
    }

    async fn list_keys(&self) -> Result<Vec<StoredKey>, StorageError> {
        let doing = "reading the keys";
        let sql = postgres(doing);
        let mut lent = self.admin_client().await?;
        let client = lent.client();
        let work = async {
            let select = client
                .prepare_cached(
                    "SELECT name, digest, created_at, expires_at, last_used_at, revoked_at, scopes,
                     rate_requests, rate_seconds, burst, in_flight
                 FROM api_keys ORDER BY created_at, name",
                )
                .await
                .map_err(&sql)?;
            let rows = client.query(&select, &[]).await.map_err(&sql)?;
            rows.iter().map(key_from_row).collect()
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer)
    }

    async fn revoke_key(&self, name: &str, at: i64) -> Result<Revoked, KeyError> {
        let doing = "revoking a key";
        let sql = postgres(doing);
        let mut lent = self.admin_client().await?;
        let client = lent.client();
        let work = async {
            let tx = client.transaction().await.map_err(&sql)?;
            let row = locked_key(&tx, "revoked_at", name, doing).await?;
            let revoked = match row.try_get::<_, Option<i64>>(0).map_err(&sql)? {
                Some(earlier) => Revoked::Already(earlier),
                None => {
                    tx.execute(
                        "UPDATE api_keys SET revoked_at = $2 WHERE name = $1",
                        &[&name, &at],
                    )
                    .await
                    .map_err(&sql)?;
                    Revoked::Now
                }
            };
            tx.commit().await.map_err(&sql)?;
            Ok(revoked)
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer)
    }

    async fn set_key_scopes(&self, name: &str, scopes: Scopes) -> Result<Scopes, KeyError> {
        let doing = "changing a key's scopes";
        let sql = postgres(doing);
        let mut lent = self.admin_client().await?;
        let client = lent.client();
        let work = async {
            let tx = client.transaction().await.map_err(&sql)?;
            let row = locked_key(&tx, "scopes", name, doing).await?;
            let before: Option<i16> = row.try_get(0).map_err(&sql)?;
            tx.execute(
                "UPDATE api_keys SET scopes = $2 WHERE name = $1",
                &[&name, &scopes_column(scopes).map(|bits| bits as i16)],
            )
            .await
            .map_err(&sql)?;
            tx.commit().await.map_err(&sql)?;
            Ok(stored_scopes(before.map(i64::from)))
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer)
    }

    async fn set_key_limits(
        &self,
        name: &str,
        change: LimitsChange,
    ) -> Result<(KeyLimits, KeyLimits), KeyError> {
        let doing = "changing a key's budget";
        let sql = postgres(doing);
        let mut lent = self.admin_client().await?;
        let client = lent.client();
        let work = async {
            let tx = client.transaction().await.map_err(&sql)?;
            let row = locked_key(
                &tx,
                "rate_requests, rate_seconds, burst, in_flight",
                name,
                doing,
            )
            .await?;
            let before = limits_from_columns(name, &row, 0)?;
            let after = before.changed(change);
            let [rate_requests, rate_seconds, burst, in_flight] = limits_as_integers(name, after)?;
            tx.execute(
            "UPDATE api_keys SET rate_requests = $2, rate_seconds = $3, burst = $4, in_flight = $5
             WHERE name = $1",
            &[&name, &rate_requests, &rate_seconds, &burst, &in_flight],
        )
        .await
        .map_err(&sql)?;
            tx.commit().await.map_err(&sql)?;
            Ok((before, after))
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer)
    }

    async fn heartbeat(&self, instance: &str) -> Result<u32, StorageError> {
        let doing = "recording this instance's heartbeat";
        let sql = postgres(doing);
        // The database's clock, not the instances': theirs may disagree.
        // The statement's snapshot does not see its own upsert, hence `1 +`
        // the others; instances silent for a minute are deleted on the way.
        let beat = format!(
            "WITH beat AS (
                 INSERT INTO instances (id, seen_at) VALUES ($1, clock_timestamp())
                 ON CONFLICT (id) DO UPDATE SET seen_at = EXCLUDED.seen_at
             ), gone AS (
                 DELETE FROM instances
                 WHERE seen_at < clock_timestamp() - interval '1 minute' AND id <> $1
             )
             SELECT 1 + count(*) FROM instances
             WHERE id <> $1 AND seen_at > clock_timestamp() - interval '{INSTANCE_ALIVE}'"
        );
        let mut lent = self.admin_client().await?;
        let client = lent.client();
        let work = async {
            let statement = client.prepare_cached(&beat).await.map_err(&sql)?;
            let row = client
                .query_one(&statement, &[&instance])
                .await
                .map_err(&sql)?;
            row.try_get::<_, i64>(0).map_err(&sql)
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        let live = lent.settle(doing, answer)?;
        Ok(u32::try_from(live).unwrap_or(u32::MAX))
    }

    async fn forget_instance(&self, instance: &str) -> Result<(), StorageError> {
        let doing = "removing this instance's heartbeat";
        let mut lent = self.admin_client().await?;
        let work = async {
            lent.client()
                .execute("DELETE FROM instances WHERE id = $1", &[&instance])
                .await
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer.map(|done| done.map_err(postgres(doing))))
            .map(drop)
    }

    async fn record_key_use(&self, uses: Vec<(String, i64)>) -> Result<(), StorageError> {
        let doing = "recording key use";
        let (names, times): (Vec<String>, Vec<i64>) = uses.into_iter().unzip();
        let mut lent = self.admin_client().await?;
        let work = async {
            lent.client()
                .execute(
                    "UPDATE api_keys k SET last_used_at = u.at
                 FROM unnest($1::text[], $2::bigint[]) AS u(name, at)
                 WHERE k.name = u.name AND (k.last_used_at IS NULL OR k.last_used_at < u.at)",
                    &[&names, &times],
                )
                .await
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer.map(|done| done.map_err(postgres(doing))))
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn setting(pool: &Pool, name: &str) -> String {
        let client = pool.get().await.expect("a connection");
        let row = client
            .query_one("SELECT current_setting($1)", &[&name])
            .await
            .expect("the setting");
        row.get(0)
    }

    /// Every session has the settings the storage relies on, the
    /// deliverer's (whose own settings differ) included.
    #[tokio::test]
    async fn every_session_runs_without_jit_and_ends_an_idle_transaction() {
        let Some(database) = petstore_support::postgres::fresh_database().await else {
            return;
        };
        let url = PostgresUrl::parse(database.url()).expect("a PostgreSQL URL");
        let storage = PostgresStorage::open(&url)
            .await
            .expect("open the database");
        for pool in [
            &storage.pool,
            &storage.admin,
            &storage.webhooks,
            &storage.deliveries,
        ] {
            assert_eq!(setting(pool, "jit").await, "off");
            assert_eq!(
                setting(pool, "idle_in_transaction_session_timeout").await,
                "1min"
            );
        }
        assert_eq!(
            setting(&storage.deliveries, "synchronous_commit").await,
            "off"
        );
    }

    /// An operator who wants JIT back says so in the URL.
    #[tokio::test]
    async fn the_urls_own_options_win() {
        let Some(database) = petstore_support::postgres::fresh_database().await else {
            return;
        };
        let separator = if database.url().contains('?') {
            '&'
        } else {
            '?'
        };
        let with_jit = format!("{}{separator}options=-c%20jit%3Don", database.url());
        let url = PostgresUrl::parse(&with_jit).expect("a PostgreSQL URL");
        let storage = PostgresStorage::open(&url)
            .await
            .expect("open the database");
        assert_eq!(setting(&storage.pool, "jit").await, "on");
    }
}
