//! A few PostgreSQL connections shared by every request, each carrying many
//! queries at once.
//!
//! tokio-postgres pipelines the queries of concurrent callers on one
//! connection: their messages go out in one write, and PostgreSQL works
//! through them in order and answers in order. Shared this way, a handful
//! of connections carry any number of requests in flight, so that the
//! database runs a handful of busy backends instead of one per request — on
//! a small machine, where PostgreSQL shares the cores with the server, that
//! is fewer processes to wake and switch between, and fewer system calls on
//! both sides. (A pool that lends each connection to one request at a time
//! gets none of that.)
//!
//! Only statements that stand alone belong here: a transaction needs a
//! connection of its own, or other requests' statements would run inside
//! it. Each connection prepares its statements once, when it is made. A
//! broken connection is replaced by the first request that finds it broken,
//! so the store recovers by itself when the database is back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arc_swap::ArcSwapOption;
use tokio_postgres::{Client, NoTls, Statement};

use super::postgres::CONNECTION_TIMEOUT;
use super::{PostgresFailure, StoreError};

/// One shared connection and its prepared statements.
pub(super) struct Shared {
    pub client: Client,
    /// `SELECT … WHERE id > $1 ORDER BY id LIMIT $2`.
    pub list: Statement,
    /// `SELECT … WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3`.
    pub list_by_status: Statement,
    /// `SELECT … WHERE id = $1`.
    pub get: Statement,
    /// `INSERT` of the pets in three arrays (names, category ids,
    /// statuses), `RETURNING` each row.
    pub insert_many: Statement,
}

impl Shared {
    /// Connects and prepares the statements; the connection's task runs on
    /// the current runtime until the connection ends.
    async fn open(config: &tokio_postgres::Config) -> Result<Shared, tokio_postgres::Error> {
        let (client, connection) = config.connect(NoTls).await?;
        // The task ends with the connection (an error or the client's drop);
        // requests learn of a broken connection from their own query.
        tokio::spawn(connection);
        let (list, list_by_status, get, insert_many) = tokio::try_join!(
            client.prepare(
                "SELECT id, name, category_id, status FROM pets
                 WHERE id > $1 ORDER BY id LIMIT $2"
            ),
            client.prepare(
                "SELECT id, name, category_id, status FROM pets
                 WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3"
            ),
            client.prepare("SELECT id, name, category_id, status FROM pets WHERE id = $1"),
            client.prepare(
                "INSERT INTO pets (name, category_id, status)
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])
                 RETURNING id, name, category_id, status"
            ),
        )?;
        Ok(Shared {
            client,
            list,
            list_by_status,
            get,
            insert_many,
        })
    }
}

/// One place for a shared connection: the current one, replaced when it
/// breaks.
struct Slot {
    current: ArcSwapOption<Shared>,
    /// Held while the slot reconnects, so that one request reconnects and
    /// the others wait for its connection instead of each making their own.
    reconnecting: tokio::sync::Mutex<()>,
}

/// The shared connections, handed out in turn.
pub(super) struct SharedConnections {
    config: tokio_postgres::Config,
    slots: Box<[Slot]>,
    next: AtomicUsize,
    /// Set by [`SharedConnections::close`]: no more connections are made.
    closed: AtomicBool,
}

impl SharedConnections {
    /// `count` (at least one) slots, connected on first use.
    pub fn new(config: tokio_postgres::Config, count: usize) -> SharedConnections {
        let slots = (0..count.max(1))
            .map(|_| Slot {
                current: ArcSwapOption::empty(),
                reconnecting: tokio::sync::Mutex::new(()),
            })
            .collect();
        SharedConnections {
            config,
            slots,
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// A live connection: the next slot's, (re)connected if it has none or
    /// its connection broke. Fails (unavailable) when no connection can be
    /// made within [`CONNECTION_TIMEOUT`].
    pub async fn get(&self) -> Result<Arc<Shared>, StoreError> {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        if let Some(shared) = live(&slot.current) {
            return Ok(shared);
        }
        if self.closed.load(Ordering::Relaxed) {
            return Err(StoreError::Closed);
        }
        let unavailable = |source| StoreError::Postgres {
            doing: "connecting",
            source,
        };
        let _reconnecting = tokio::time::timeout(CONNECTION_TIMEOUT, slot.reconnecting.lock())
            .await
            .map_err(|_| unavailable(PostgresFailure::ConnectTimeout))?;
        // Another request may have reconnected while this one waited.
        if let Some(shared) = live(&slot.current) {
            return Ok(shared);
        }
        let shared = Arc::new(
            tokio::time::timeout(CONNECTION_TIMEOUT, Shared::open(&self.config))
                .await
                .map_err(|_| unavailable(PostgresFailure::ConnectTimeout))?
                .map_err(|e| unavailable(e.into()))?,
        );
        slot.current.store(Some(Arc::clone(&shared)));
        Ok(shared)
    }

    /// How many slots have a live connection.
    pub fn open(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| live(&slot.current).is_some())
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

/// The slot's connection, unless it has none or it broke.
fn live(current: &ArcSwapOption<Shared>) -> Option<Arc<Shared>> {
    current
        .load_full()
        .filter(|shared| !shared.client.is_closed())
}
