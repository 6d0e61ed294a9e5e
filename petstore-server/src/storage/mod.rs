//! The storage interface and its implementations.
//!
//! The HTTP layer sees only [`Storage`]; which database sits behind it is
//! chosen once, at start-up, from the database URL.

use enumset::EnumSet;
use std::path::PathBuf;
use std::sync::Arc;

use petstore_api::model::{
    EncodedEvents, EncodedPets, Inventory, NewPet, OrderUpdateStatus, Pet, PetStatus,
};

pub mod events;
pub mod idempotency;
pub mod keys;
pub mod orders;
pub mod outage;
mod parked;
mod postgres;
mod sqlite;
mod url;
pub mod webhooks;

pub use events::{
    EVENT_SCAN_MAX, EventKind, EventPage, EventQuery, EventsOutcome, KindMarks, PARKED_READ_GAP,
    ParkedWait, ReadTo, StoredEvent,
};
pub use idempotency::{CreateOutcome, Fingerprint, Idempotency, PURGE_BATCH, Retention};
pub use keys::{KeyError, KeyStorage, Revoked, StoredKey};
pub use orders::{
    OrderPage, OrderQuery, Owner, OwnerId, PlaceOutcome, PlacedBy, StoredOrder, UpdateOutcome,
};
pub use postgres::PostgresStorage;
pub use sqlite::{SqliteKeys, SqliteStorage, SqliteWebhooks};
pub use url::{DatabaseUrl, DatabaseUrlError, PostgresUrl};
pub use webhooks::{
    AttemptOutcome, ClaimRoom, ClaimedDelivery, DeliveryState, DisabledReason, FinishedAttempt,
    NewDelivery, NewSubscription, NextStep, SealedSecret, StoredDelivery, StoredSubscription,
    SubscriptionOwner, SubscriptionState, WebhookCounts, WebhookStorage,
};

/// The longest list a backend serves in one call.
pub const LIST_MAX: u32 = 100;

/// A boxed cause, for errors whose source comes from more than one library.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a storage operation failed. Each failure is either *unavailable* —
/// the database cannot serve right now (down, disk full, locked, file
/// replaced), so retrying later is right — or *internal* — data that does not
/// decode, a broken invariant, a bug in us — which retrying will not fix.
/// [`StorageError::is_unavailable`] tells which.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// SQLite failed.
    #[error("SQLite, {doing}")]
    Sqlite {
        /// What the storage was doing.
        doing: &'static str,
        /// SQLite's error (shared: one failed commit fails a whole group).
        #[source]
        source: Arc<rusqlite::Error>,
    },
    /// PostgreSQL failed, or could not be reached.
    #[error("PostgreSQL, {doing}")]
    Postgres {
        /// What the storage was doing.
        doing: &'static str,
        /// The driver's or the pool's error.
        #[source]
        source: PostgresFailure,
    },
    /// A stored row does not decode into a pet.
    #[error("pet {id}: column {column} holds {value}, which is not a valid {expected}")]
    Undecodable {
        /// The row's id.
        id: i64,
        /// The column that does not decode.
        column: &'static str,
        /// What it holds, as text.
        value: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// The database file was deleted or replaced under the running server;
    /// writes would go to a file nobody will ever open again.
    #[error(
        "the database file {path} was deleted or replaced while the server was running; \
         creates are refused until the server is restarted on the file now at that path"
    )]
    FileReplaced {
        /// The database file.
        path: PathBuf,
    },
    /// A stored API key does not decode.
    #[error("the stored API key {name:?}: {reason}")]
    BadKey {
        /// The key's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A stored webhook subscription, or one of its deliveries, does not
    /// decode.
    #[error("the stored webhook {id}: {reason}")]
    BadWebhook {
        /// The subscription's id.
        id: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// Something that cannot happen did (a bug in us).
    #[error("a broken invariant: {0}")]
    Invariant(&'static str),
    /// The SQLite writer thread is gone (it panicked): nothing can be written.
    #[error("the SQLite writer thread stopped: {0}")]
    WriterStopped(String),
    /// The storage was closed (the server is shutting down).
    #[error("the database is closed")]
    Closed,
    /// Too many creates are already waiting for the database: it is not
    /// keeping up, and waiting longer would only grow memory.
    #[error("{0} creates are already waiting for the database")]
    Overloaded(usize),
    /// The one statement of a batch (PostgreSQL: creates, orders placed or
    /// updated, reads of pets or events) failed: this request's failure is
    /// the batch's.
    #[error("a batched statement (one for many requests)")]
    Batch(#[source] Arc<StorageError>),
}

/// A PostgreSQL failure: from the driver or from the connection pool.
#[derive(Debug, thiserror::Error)]
pub enum PostgresFailure {
    /// The driver's error (the database's own, or a broken connection).
    #[error(transparent)]
    Driver(#[from] tokio_postgres::Error),
    /// The pool's own (no connection within the timeout, pool closed).
    /// A connection the pool could not make is the driver's error
    /// ([`From`] unwraps it: the pool's "Error occurred while creating a
    /// new object" adds nothing an operator needs).
    #[error(transparent)]
    Pool(deadpool_postgres::PoolError),
    /// No shared connection could be made within the timeout.
    #[error("no connection within the timeout")]
    ConnectTimeout,
    /// A shared connection did not answer a statement within the timeout
    /// (and was given up).
    #[error("no answer within the timeout")]
    StatementTimeout,
}

impl From<deadpool_postgres::PoolError> for PostgresFailure {
    fn from(error: deadpool_postgres::PoolError) -> PostgresFailure {
        match error {
            deadpool_postgres::PoolError::Backend(error) => PostgresFailure::Driver(error),
            other => PostgresFailure::Pool(other),
        }
    }
}

impl StorageError {
    /// Whether the failure is the database's being unavailable (retry
    /// later) rather than a bug or corrupt data (retrying will not help).
    pub fn is_unavailable(&self) -> bool {
        match self {
            StorageError::Sqlite { source, .. } => sqlite::is_unavailable(source),
            StorageError::Postgres { source, .. } => postgres::is_unavailable(source),
            StorageError::FileReplaced { .. }
            | StorageError::Closed
            | StorageError::Overloaded(_) => true,
            StorageError::Batch(cause) => cause.is_unavailable(),
            StorageError::Undecodable { .. }
            | StorageError::BadKey { .. }
            | StorageError::BadWebhook { .. }
            | StorageError::Invariant(_)
            | StorageError::WriterStopped(_) => false,
        }
    }
}

/// Why a database could not be opened. Each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process serves (or migrates) the same SQLite file.
    #[error(
        "the database {path} is in use by another petstore-server ({holder}); \
         one server per SQLite file: stop that one first, or use PostgreSQL for \
         several instances"
    )]
    InUse {
        /// The database file.
        path: PathBuf,
        /// What the lock file says of the process holding it.
        holder: String,
    },
    /// The SQLite file or its directory cannot be written.
    #[error(
        "the database {path} cannot be written ({reason}); the server needs to write the \
         file, its -wal and -shm files and its .lock file in that directory"
    )]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The file system does not support SQLite's write-ahead log.
    #[error(
        "cannot switch the database {path} to WAL mode (it stays in {mode} mode); \
         put it on a local file system"
    )]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite kept.
        mode: String,
    },
    /// The database was written by a newer server.
    #[error(
        "the database has schema version {found}, newer than the {known} this server knows; \
         upgrade petstore-server (the database was not modified)"
    )]
    NewerSchema {
        /// The version in the database.
        found: i64,
        /// The newest version this server knows.
        known: usize,
    },
    /// A `keys` command on a SQLite file that does not exist: most likely
    /// not the database the server uses.
    #[error(
        "the database {path} does not exist: create it with `petstore-server migrate` (with \
         the same --database or --config as the server), or check that it is the database \
         the server uses"
    )]
    NoDatabase {
        /// The file.
        path: PathBuf,
    },
    /// A server serves the SQLite file at another schema version than this
    /// program's, so a `keys` command cannot migrate it.
    #[error(
        "the database is served by a petstore-server at schema version {found}, but this \
         program needs version {known}; run the same petstore-server version as the server \
         (or stop the server and run `migrate`)"
    )]
    ServedAtOtherSchema {
        /// The version in the database.
        found: i64,
        /// This program's version.
        known: usize,
    },
    /// The schema version stored in the database is not a version at all.
    #[error(
        "the database's schema version is {0}, which no server writes; the database is damaged"
    )]
    InvalidSchemaVersion(i64),
    /// The database failed while being opened, migrated or loaded.
    #[error("{database}: {source}")]
    Storage {
        /// The database, password masked.
        database: String,
        /// What failed.
        #[source]
        source: StorageError,
    },
    /// A file operation failed (the lock file, the writer thread).
    #[error("{doing}: {source}")]
    Io {
        /// What the storage was doing.
        doing: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Where a backend can report that it can no longer work at all (e.g. its
/// writer thread panicked): the process should exit so that a supervisor
/// restarts it.
pub type FatalSender = tokio::sync::watch::Sender<Option<String>>;

/// Which page of pets to list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListQuery {
    /// At most this many pets (at most [`LIST_MAX`]).
    pub limit: u32,
    /// Only pets with this status, when given.
    pub status: Option<PetStatus>,
    /// Only pets whose id is greater than this, when given.
    pub after: Option<i64>,
}

/// A page of pets, already encoded as the contract's JSON: what a response
/// sends, written straight from the storage's rows.
#[derive(Clone, Debug)]
pub struct Page {
    /// The pets, in ascending id order.
    pub pets: EncodedPets,
    /// Whether more pets (of the status asked for) follow the last one.
    pub more: bool,
}

/// A catalogue of pets, and the storage that sells them.
///
/// An animal's status changes only with its order: placing one makes an
/// `available` animal `pending`, delivering it makes the animal `sold`,
/// cancelling it makes the animal `available` again — each in the order's
/// own transaction. Every method sees every change acknowledged before it
/// was called (on PostgreSQL, by any instance).
#[async_trait::async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Stores `pet` under a new identifier. Returns only once the pet is
    /// durable: an `Ok` is a promise that it survives a crash.
    async fn create(&self, pet: NewPet) -> Result<Pet, StorageError>;

    /// Stores `pet` under a new identifier unless the idempotency key
    /// already holds a live record (see [`CreateOutcome`]). The pet and the
    /// key's record are committed in one transaction: an `Ok(Created)` is a
    /// promise that both survive a crash, and no crash leaves one without
    /// the other. Never creates while another request holds the key.
    async fn create_idempotent(
        &self,
        pet: NewPet,
        idempotency: Idempotency,
    ) -> Result<CreateOutcome, StorageError>;

    /// Deletes at most `limit` idempotency records made before `made_before`
    /// (Unix seconds); returns how many it deleted. Each call is short, so
    /// purging never holds up creates for long.
    async fn purge_idempotency(
        &self,
        made_before: i64,
        limit: usize,
    ) -> Result<usize, StorageError>;

    /// A page of pets in ascending `id` order (see [`ListQuery`]), and
    /// whether more follow it. Costs the same at any depth.
    async fn list(&self, query: ListQuery) -> Result<Page, StorageError>;

    /// The pet with identifier `id`, if there is one.
    async fn get(&self, id: i64) -> Result<Option<Pet>, StorageError>;

    /// Orders the animal `pet_id`, once per idempotency key when one is
    /// given (see [`PlaceOutcome`]). The order, the animal's new status and
    /// the key's record are committed in one transaction before `Ok(Placed)`.
    async fn place_order(
        &self,
        pet_id: i64,
        owner: Owner,
        idempotency: Option<Idempotency>,
    ) -> Result<PlaceOutcome, StorageError>;

    /// Gives the order `id` the status `to`, and its animal the status that
    /// goes with it, in one transaction (see [`UpdateOutcome`]).
    async fn update_order(
        &self,
        id: i64,
        to: OrderUpdateStatus,
    ) -> Result<UpdateOutcome, StorageError>;

    /// The order with identifier `id`, if there is one (and, when `owner`
    /// is given, it belongs to that owner).
    async fn get_order(
        &self,
        id: i64,
        owner: Option<OwnerId>,
    ) -> Result<Option<StoredOrder>, StorageError>;

    /// A page of orders in ascending `id` order (see [`OrderQuery`]).
    async fn list_orders(&self, query: OrderQuery) -> Result<OrderPage, StorageError>;

    /// How many animals have each status, exactly, at one moment; costs
    /// the same however many animals there are.
    async fn inventory(&self) -> Result<Inventory, StorageError>;

    /// A page of the feed (since contract 1.6.0; see [`events`]): the
    /// events after `query.after` up to the head, in id order, or
    /// [`EventsOutcome::Expired`] when `after` is below the floor. Costs
    /// the same at any depth (at most [`EVENT_SCAN_MAX`] rows examined).
    /// A page that reaches the head has every change acknowledged before
    /// it was asked for, by any instance (unless a long transaction holds
    /// the head back).
    async fn events(&self, query: EventQuery) -> Result<EventsOutcome, StorageError>;

    /// [`Storage::events`] read to `to`, encoded as the feed answers it:
    /// what `listEvents` sends.
    async fn encoded_events(
        &self,
        query: EventQuery,
        to: ReadTo,
    ) -> Result<EventsOutcome<EncodedEvents>, StorageError>;

    /// Waits, until `deadline` at most, until a page of `kinds` after
    /// `head` (the head a page that reached it was read up to) may find an
    /// event: for a long poll parked at the head. Woken only when an event
    /// of its kinds came, looked at once a tick for every poll parked on
    /// the instance (`parked.rs`); it also says how far its kinds stayed
    /// quiet.
    async fn events_after(
        &self,
        kinds: EnumSet<EventKind>,
        head: i64,
        deadline: tokio::time::Instant,
    ) -> ParkedWait;

    /// The feed's head as it moves: the largest id a page may return. It
    /// changes after each commit that wrote events (on PostgreSQL, also
    /// after other instances' commits, within a poll interval), so that
    /// what follows the feed (long polls, by default; the webhooks'
    /// fan-out) waits on it instead of querying.
    fn events_head(&self) -> tokio::sync::watch::Receiver<i64>;

    /// Deletes at most `limit` of the oldest events, and only those
    /// committed before `before`, smallest ids first; raises the floor to
    /// the largest id deleted. Returns how many it deleted.
    async fn purge_events(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<usize, StorageError>;

    /// Whether the storage can serve now: the database is reachable (and its
    /// file is still the one opened), and nothing stopped it for good.
    async fn check_ready(&self) -> Result<(), StorageError>;

    /// Figures for monitoring.
    async fn stats(&self) -> Result<StorageStats, StorageError>;

    /// Finishes pending writes and closes the database. Later calls fail.
    async fn close(&self);
}

/// Figures a backend reports for monitoring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Pets stored (on PostgreSQL, above 100,000, the planner's estimate).
    pub pets: u64,
    /// Events retained in the feed (on PostgreSQL, above 100,000, the
    /// planner's estimate).
    pub events: u64,
    /// When the oldest retained event was committed, if there is one.
    pub oldest_event: Option<chrono::DateTime<chrono::Utc>>,
    /// The connection pool, for a backend that has one (PostgreSQL: the
    /// connections of idempotent creates' transactions).
    pub pool: Option<PoolStats>,
    /// The shared connections (PostgreSQL: reads and plain creates), open
    /// and at most.
    pub shared: Option<SharedStats>,
}

/// Connections shared by many requests at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedStats {
    /// The most it opens.
    pub max: usize,
    /// Open.
    pub open: usize,
}

/// A connection pool's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// The most connections it opens.
    pub max: usize,
    /// Connections open.
    pub open: usize,
    /// Open connections not in use.
    pub idle: usize,
    /// Requests waiting for a connection.
    pub waiting: usize,
}

/// What a backend measures as it works, recorded into these metrics.
#[derive(Clone, Debug)]
pub struct StorageMetrics {
    /// Writes per SQLite commit (group commit: creates and orders).
    pub commit_group_size: prometheus_client::metrics::histogram::Histogram,
}

impl Default for StorageMetrics {
    fn default() -> StorageMetrics {
        StorageMetrics {
            commit_group_size: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 10),
            ),
        }
    }
}

/// An open database: the catalogue, the keys and the webhooks, in the same
/// database.
#[derive(Clone)]
pub struct Database {
    /// The catalogue.
    pub pets: Arc<dyn Storage>,
    /// The API keys.
    pub keys: Arc<dyn KeyStorage>,
    /// The webhooks' subscriptions and deliveries.
    pub webhooks: Arc<dyn WebhookStorage>,
}

/// Opens the database at `url`, creating or migrating its schema. Errors
/// are logged to `log`; a failure that stops the storage for good is sent to
/// `fatal`.
pub async fn open(
    url: &DatabaseUrl,
    log: &slog::Logger,
    fatal: FatalSender,
    metrics: StorageMetrics,
) -> Result<Database, OpenError> {
    match url {
        DatabaseUrl::Sqlite(path) => {
            let (pets, keys, webhooks) =
                SqliteStorage::open(path.clone(), log.clone(), fatal, metrics).await?;
            Ok(Database {
                pets: Arc::new(pets),
                keys: Arc::new(keys),
                webhooks: Arc::new(webhooks),
            })
        }
        DatabaseUrl::Postgres(url) => {
            let storage = Arc::new(PostgresStorage::open_logged(url, log.clone()).await?);
            Ok(Database {
                pets: storage.clone(),
                keys: storage.clone(),
                webhooks: storage,
            })
        }
    }
}

/// Opens only the webhooks of the database at `url`, for the `webhooks`
/// commands: while a server serves it, or not (see [`SqliteWebhooks::open`]).
pub async fn open_webhooks(url: &DatabaseUrl) -> Result<Arc<dyn WebhookStorage>, OpenError> {
    match url {
        DatabaseUrl::Sqlite(path) => Ok(Arc::new(SqliteWebhooks::open(path.clone()).await?)),
        DatabaseUrl::Postgres(url) => Ok(Arc::new(
            PostgresStorage::open(&url.clone().with_pool_size(1)).await?,
        )),
    }
}

/// Opens only the keys of the database at `url`, for the `keys` commands:
/// while a server serves it, or not (see [`SqliteKeys::open`]).
pub async fn open_keys(url: &DatabaseUrl) -> Result<Arc<dyn KeyStorage>, OpenError> {
    match url {
        DatabaseUrl::Sqlite(path) => Ok(Arc::new(SqliteKeys::open(path.clone()).await?)),
        DatabaseUrl::Postgres(url) => Ok(Arc::new(
            PostgresStorage::open(&url.clone().with_pool_size(1)).await?,
        )),
    }
}
