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

/// One shared connection and its prepared statements.
pub(super) struct Shared {
    pub client: Client,
    /// Tells this connection from every other this process made (the
    /// feed's head must know when its connection, and perhaps the
    /// database, changed under it).
    pub serial: u64,
    /// The connection's task, ended with it.
    task: JoinHandle<()>,
    /// `SELECT … WHERE id > $1 ORDER BY id LIMIT $2`.
    pub list: Statement,
    /// `SELECT … WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3`.
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
                 WHERE id > $1 ORDER BY id LIMIT $2"
            ),
            client.prepare(
                "SELECT id, name, category_id, status FROM pets
                 WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3"
            ),
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
