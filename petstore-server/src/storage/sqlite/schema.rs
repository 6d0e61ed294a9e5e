//! What every connection to a SQLite database shares, the storage's and the
//! key commands' alike: its configuration (busy timeout, WAL, full sync),
//! the schema's migrations, how a SQLite error is classified, and how work
//! runs on a connection of its own beside the writer (the keys', the
//! webhooks').

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use super::lock::DatabaseLock;
use crate::storage::{OpenError, StorageError};

/// Schema migrations; the database's `user_version` counts those applied.
/// No secondary index: reads are served from memory (see `Catalogue`).
pub(super) const MIGRATIONS: &[&str] = &[
    "CREATE TABLE pets (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        name        TEXT    NOT NULL,
        category_id INTEGER NOT NULL,
        status      TEXT    CHECK (status IN ('available', 'pending', 'sold'))
    );",
    // API keys (see `keys.rs`): digests only; times in Unix seconds.
    "CREATE TABLE api_keys (
        name         TEXT    PRIMARY KEY,
        digest       BLOB    NOT NULL UNIQUE,
        created_at   INTEGER NOT NULL,
        expires_at   INTEGER,
        last_used_at INTEGER,
        revoked_at   INTEGER
    );",
    // Idempotency keys (see `idempotency.rs`): the first 201 of each key,
    // a copy of the pet it answered, committed with the pet.
    "CREATE TABLE idempotency_keys (
        scope       BLOB    NOT NULL,
        key         TEXT    NOT NULL,
        fingerprint BLOB    NOT NULL,
        created_at  INTEGER NOT NULL,
        pet_id      INTEGER NOT NULL,
        name        TEXT    NOT NULL,
        category_id INTEGER NOT NULL,
        status      TEXT,
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);",
    // The Store (contract 1.3.0). `placed_at` is in microseconds since the
    // Unix epoch. The partial unique index is the database's own guard of
    // "at most one placed or delivered order per animal".
    "CREATE TABLE orders (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        pet_id    INTEGER NOT NULL REFERENCES pets (id),
        status    TEXT    NOT NULL CHECK (status IN ('placed', 'delivered', 'cancelled')),
        placed_at INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX orders_one_live_per_pet ON orders (pet_id)
        WHERE status IN ('placed', 'delivered');
    CREATE TABLE order_idempotency_keys (
        scope       BLOB    NOT NULL,
        key         TEXT    NOT NULL,
        fingerprint BLOB    NOT NULL,
        created_at  INTEGER NOT NULL,
        order_id    INTEGER NOT NULL,
        pet_id      INTEGER NOT NULL,
        placed_at   INTEGER NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX order_idempotency_keys_by_age ON order_idempotency_keys (created_at);",
    // Scopes and owners (contract 1.4.0). A key's scopes are the bits of
    // `petstore_api::scopes::Scopes`; NULL, for the keys made before, is
    // every scope. An order's owner is the digest of the key that placed it,
    // and `placed_by` that key's name; both NULL for orders placed before.
    "ALTER TABLE api_keys ADD COLUMN scopes INTEGER;
    ALTER TABLE orders ADD COLUMN owner BLOB;
    ALTER TABLE orders ADD COLUMN placed_by TEXT;",
    // Budgets (`budget.rs`): what a key sets of its own rate (requests per
    // `rate_seconds`), burst and cap on requests in flight; NULL is the
    // configured default. Additive: a server of the version before reads
    // the keys as it did.
    "ALTER TABLE api_keys ADD COLUMN rate_requests INTEGER;
    ALTER TABLE api_keys ADD COLUMN rate_seconds INTEGER;
    ALTER TABLE api_keys ADD COLUMN burst INTEGER;
    ALTER TABLE api_keys ADD COLUMN in_flight INTEGER;",
    // The events feed (contract 1.6.0; see `events.rs`). The writer thread
    // assigns ids in commit order itself (no AUTOINCREMENT: a purge must
    // never let an id come back, and the floor, not SQLite's sequence,
    // remembers the largest purged). `at` is in microseconds since the Unix
    // epoch; `owner` is an order event's order's owner (the customer
    // filter); `created_status` a `PetCreated`'s status at creation. A pet's
    // name and category never change, and an order's `placed_at` neither:
    // a page takes them from memory. `events_floor` holds the largest id
    // purged, in one row.
    "CREATE TABLE events (
        id             INTEGER PRIMARY KEY,
        kind           INTEGER NOT NULL,
        at             INTEGER NOT NULL,
        pet_id         INTEGER NOT NULL,
        order_id       INTEGER,
        owner          BLOB,
        created_status TEXT
    );
    CREATE TABLE events_floor (
        one   INTEGER PRIMARY KEY CHECK (one = 1),
        floor INTEGER NOT NULL
    );
    INSERT INTO events_floor (one, floor) VALUES (1, 0);",
    // Keys made with every scope (`--scopes all`, stored as the five bits
    // of 1.4.0) have every scope, including those added since (1.6.0:
    // `events:read`): "all" is stored as NULL from now on, as for keys made
    // before scopes existed.
    "UPDATE api_keys SET scopes = NULL WHERE scopes = 31;",
    // Webhooks (contract 1.7.0; see `storage/webhooks.rs`), written on a
    // connection of their own (`webhooks.rs`), not by the writer. Times in
    // microseconds since the Unix epoch; `kinds` the bits of the event
    // kinds; owners 32 bytes; secrets sealed. AUTOINCREMENT: a deleted
    // subscription's id never comes back. A delivery's `resource` is a
    // pet's id or minus an order's; `webhook_deliveries_open` serves the
    // guard that keeps one resource's deliveries in event order.
    "CREATE TABLE webhooks (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        url             TEXT    NOT NULL,
        kinds           INTEGER NOT NULL,
        sees_owner      BLOB,
        creator         BLOB    NOT NULL,
        creator_name    TEXT    NOT NULL,
        state           TEXT    NOT NULL CHECK (state IN ('active', 'disabled')),
        disabled_reason TEXT,
        secret          BLOB    NOT NULL,
        previous_secret BLOB,
        previous_until  INTEGER,
        fanned_out      INTEGER NOT NULL,
        created_at      INTEGER NOT NULL,
        last_success_at INTEGER,
        last_failure_at INTEGER,
        CHECK ((state = 'disabled') = (disabled_reason IS NOT NULL))
    );
    CREATE INDEX webhooks_by_creator ON webhooks (creator, id);
    CREATE TABLE webhook_deliveries (
        webhook_id   INTEGER NOT NULL REFERENCES webhooks (id),
        event_id     INTEGER NOT NULL,
        kind         INTEGER NOT NULL,
        resource     INTEGER NOT NULL,
        body         TEXT    NOT NULL,
        state        TEXT    NOT NULL
                     CHECK (state IN ('pending', 'sending', 'delivered', 'failed')),
        attempts     INTEGER NOT NULL DEFAULT 0,
        next_at      INTEGER NOT NULL,
        lease_owner  TEXT,
        lease_until  INTEGER,
        last_status  INTEGER,
        last_error   TEXT,
        last_at      INTEGER,
        delivered_at INTEGER,
        PRIMARY KEY (webhook_id, event_id)
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at)
        WHERE state IN ('pending', 'sending');
    CREATE INDEX webhook_deliveries_open ON webhook_deliveries (webhook_id, resource, event_id)
        WHERE state IN ('pending', 'sending');
    CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (last_at)
        WHERE state IN ('delivered', 'failed');",
    // The claims' index in the order deliveries are claimed (`next_at`,
    // then `event_id`), so that a claim reads its first few due deliveries
    // from it. On `next_at` alone, a claim sorted every due delivery: 52 ms
    // a claim behind 35,000, which held a backlog's delivery near 300 a
    // second (BENCHMARKS.md, "Issue 28, eighth pass").
    "DROP INDEX webhook_deliveries_due;
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at, event_id)
        WHERE state IN ('pending', 'sending');",
    // Each subscription's open deliveries in the claims' order (as on
    // PostgreSQL), so that a claim takes each subscription's first few due
    // (no more than its room: one subscription cannot take every request
    // in flight), and `next_due` reads each one's first pending delivery
    // that nothing holds back and stops there: it read every open
    // delivery, 69-78 ms behind 35,000, after every claim that found
    // nothing (BENCHMARKS.md, "Issue 28, ninth pass").
    "DROP INDEX webhook_deliveries_due;
    CREATE INDEX webhook_deliveries_due_per_webhook
        ON webhook_deliveries (webhook_id, next_at, event_id)
        WHERE state IN ('pending', 'sending');",
];

/// How long a connection waits on a lock (e.g. another program holding the
/// file) before the request fails with 503.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Whether a SQLite error is the database's being unavailable (busy, full,
/// I/O failing, file gone) rather than corrupt data or a bug in us.
pub(in crate::storage) fn is_unavailable(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
                | ErrorCode::ReadOnly
                | ErrorCode::OutOfMemory
                | ErrorCode::FileLockingProtocolFailed
        )
    )
}

/// Runs `f` on `conn` (a connection of its own beside the writer's), off
/// the async workers: its statements may wait on SQLite's locks for up to
/// the busy timeout.
pub(super) async fn on_connection<T: Send + 'static>(
    conn: &Arc<Mutex<Connection>>,
    f: impl FnOnce(&mut Connection) -> T + Send + 'static,
) -> T {
    let conn = Arc::clone(conn);
    let run = move || f(&mut conn.lock().unwrap_or_else(|e| e.into_inner()));
    match tokio::task::spawn_blocking(run).await {
        Ok(result) => result,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

pub(super) fn sqlite(doing: &'static str) -> impl Fn(rusqlite::Error) -> StorageError {
    move |source| StorageError::Sqlite {
        doing,
        source: Arc::new(source),
    }
}

/// A write that failed at start-up because the file or its directory is
/// read-only is reported as such; anything else as it is.
fn read_only_or(
    path: &Path,
    error: StorageError,
    otherwise: impl FnOnce(StorageError) -> OpenError,
) -> OpenError {
    match &error {
        StorageError::Sqlite { source, .. }
            if matches!(
                source.sqlite_error_code(),
                Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen)
            ) =>
        {
            OpenError::ReadOnly {
                path: path.to_owned(),
                reason: source.to_string(),
            }
        }
        _ => otherwise(error),
    }
}

/// Configures a fresh connection (busy timeout, WAL, full sync) and brings
/// the schema up to date; a read-only file or directory is reported as such.
pub(super) fn configure_and_migrate(conn: &mut Connection, path: &Path) -> Result<(), OpenError> {
    let in_file = |source: StorageError| OpenError::Storage {
        database: path.display().to_string(),
        source,
    };
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        return Err(OpenError::ReadOnly {
            path: path.to_owned(),
            reason: "SQLite could open it for reading only".into(),
        });
    }
    let refused = |e| match e {
        Migration::Store(e) => read_only_or(path, e, in_file),
        Migration::Refused(e) => e,
    };
    configure(conn, path).map_err(refused)?;
    migrate(conn).map_err(refused)
}

/// A connection to the database at `path` for the operator's commands
/// (`keys`, `webhooks`), whether or not a server is serving it, and the
/// file's lock when none was. The file must exist (a key stored in a new
/// file would most likely be in the wrong place). With no server, the
/// database is migrated as `migrate` would; with one, it must already be
/// at this program's schema version (the server migrated it).
pub(super) fn open_for_command(
    path: &Path,
) -> Result<(Connection, Option<DatabaseLock>), OpenError> {
    if !path.exists() {
        return Err(OpenError::NoDatabase {
            path: path.to_owned(),
        });
    }
    let in_file = |source: StorageError| OpenError::Storage {
        database: path.display().to_string(),
        source,
    };
    match DatabaseLock::acquire(path) {
        Ok(lock) => {
            let mut conn = Connection::open(path)
                .map_err(sqlite("opening the file"))
                .map_err(in_file)?;
            configure_and_migrate(&mut conn, path)?;
            Ok((conn, Some(lock)))
        }
        Err(OpenError::InUse { .. }) => {
            let conn = Connection::open(path)
                .map_err(sqlite("opening the file"))
                .map_err(in_file)?;
            conn.busy_timeout(BUSY_TIMEOUT)
                .map_err(sqlite("configuring the connection"))
                .map_err(in_file)?;
            let found = schema_version(&conn).map_err(in_file)?;
            if found != MIGRATIONS.len() as i64 {
                return Err(OpenError::ServedAtOtherSchema {
                    found,
                    known: MIGRATIONS.len(),
                });
            }
            Ok((conn, None))
        }
        Err(other) => Err(other),
    }
}

/// The schema version the database says it has.
pub(super) fn schema_version(conn: &Connection) -> Result<i64, StorageError> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(sqlite("reading the schema version"))
}

fn configure(conn: &Connection, path: &Path) -> Result<(), Migration> {
    let sql = |e| Migration::Store(sqlite("configuring the connection")(e));
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Migration::Refused(OpenError::NoWal {
            path: path.to_owned(),
            mode,
        }));
    }
    conn.pragma_update(None, "synchronous", "FULL").map_err(sql)
}

/// Why configuring or migrating failed: the database, or a refusal.
enum Migration {
    Store(StorageError),
    Refused(OpenError),
}

/// Applies the migrations the database lacks, each in its own transaction
/// with the version bump. A database from a newer server is left untouched.
fn migrate(conn: &mut Connection) -> Result<(), Migration> {
    let sql = |e| Migration::Store(sqlite("migrating the schema")(e));
    let current = schema_version(conn).map_err(Migration::Store)?;
    let current = usize::try_from(current)
        .map_err(|_| Migration::Refused(OpenError::InvalidSchemaVersion(current)))?;
    if current > MIGRATIONS.len() {
        return Err(Migration::Refused(OpenError::NewerSchema {
            found: current as i64,
            known: MIGRATIONS.len(),
        }));
    }
    for (version, migration) in MIGRATIONS.iter().enumerate().skip(current) {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Exclusive)
            .map_err(sql)?;
        tx.execute_batch(migration).map_err(sql)?;
        tx.pragma_update(None, "user_version", version + 1)
            .map_err(sql)?;
        tx.commit().map_err(sql)?;
    }
    Ok(())
}
