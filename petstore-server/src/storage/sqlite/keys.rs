//! API keys in the SQLite file, on a connection of their own.
//!
//! The serving process keeps one such connection beside its writer; the
//! `keys` commands open one while a server runs (as the `webhooks` commands
//! do for theirs, `webhooks.rs`). SQLite serialises their
//! writes with its own locks (waiting up to the busy timeout), and the
//! pets, which only the serving process writes, are not touched here.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use super::lock::DatabaseLock;
use super::schema::{on_connection, open_for_command, sqlite};
use crate::budget::{KeyLimits, LimitsChange};
use crate::storage::keys::{
    KeyError, KeyStorage, Revoked, StoredKey, limits_columns, scopes_column, stored_digest,
    stored_limits, stored_scopes,
};
use crate::storage::{OpenError, StorageError};
use petstore_api::scopes::Scopes;

/// The SQLite implementation of [`KeyStorage`].
pub struct SqliteKeys {
    conn: Arc<Mutex<Connection>>,
    /// Held when no server had the file: nothing else migrates it meanwhile.
    _lock: Option<DatabaseLock>,
}

impl SqliteKeys {
    /// Keys on an open connection of the serving process.
    pub(super) fn on(conn: Connection) -> SqliteKeys {
        SqliteKeys {
            conn: Arc::new(Mutex::new(conn)),
            _lock: None,
        }
    }

    /// Opens the keys of the database at `path` for the `keys` commands,
    /// whether or not a server is serving it ([`open_for_command`]).
    pub async fn open(path: PathBuf) -> Result<SqliteKeys, OpenError> {
        tokio::task::spawn_blocking(move || SqliteKeys::open_blocking(&path))
            .await
            .map_err(|e| OpenError::Io {
                doing: "opening the database".into(),
                source: std::io::Error::other(e.to_string()),
            })?
    }

    fn open_blocking(path: &Path) -> Result<SqliteKeys, OpenError> {
        let (conn, lock) = open_for_command(path)?;
        Ok(SqliteKeys {
            conn: Arc::new(Mutex::new(conn)),
            _lock: lock,
        })
    }

    /// Runs `f` on the connection, off the async workers.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> T {
        on_connection(&self.conn, f).await
    }
}

type KeyRow = (
    String,
    Vec<u8>,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    [Option<i64>; 4],
);

fn key_from_row(
    (name, digest, created_at, expires_at, last_used_at, revoked_at, scopes, limits): KeyRow,
) -> Result<StoredKey, StorageError> {
    let digest = stored_digest(&name, &digest)?;
    let [rate_requests, rate_seconds, burst, in_flight] = limits;
    Ok(StoredKey {
        limits: stored_limits(&name, rate_requests, rate_seconds, burst, in_flight)?,
        name,
        digest,
        created_at,
        expires_at,
        scopes: stored_scopes(scopes),
        last_used_at,
        revoked_at,
    })
}

#[async_trait::async_trait]
impl KeyStorage for SqliteKeys {
    async fn create_key(&self, key: StoredKey) -> Result<(), KeyError> {
        self.with(move |conn| {
            let [rate_requests, rate_seconds, burst, in_flight] = limits_columns(key.limits);
            let inserted = conn.execute(
                "INSERT INTO api_keys (name, digest, created_at, expires_at, scopes,
                     rate_requests, rate_seconds, burst, in_flight)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    key.name,
                    key.digest.0.as_slice(),
                    key.created_at,
                    key.expires_at,
                    scopes_column(key.scopes),
                    rate_requests,
                    rate_seconds,
                    burst,
                    in_flight
                ],
            );
            match inserted {
                Ok(_) => Ok(()),
                Err(e)
                    if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation)
                        && e.to_string().contains("api_keys.name") =>
                {
                    Err(KeyError::DuplicateName(key.name))
                }
                Err(e) => Err(sqlite("storing a key")(e).into()),
            }
        })
        .await
    }

    async fn list_keys(&self) -> Result<Vec<StoredKey>, StorageError> {
        self.with(|conn| {
            let sql = sqlite("reading the keys");
            let mut select = conn
                .prepare_cached(
                    "SELECT name, digest, created_at, expires_at, last_used_at, revoked_at, scopes,
                         rate_requests, rate_seconds, burst, in_flight
                     FROM api_keys ORDER BY created_at, name",
                )
                .map_err(&sql)?;
            let rows = select
                .query_map([], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                        row.get(6)?,
                        [row.get(7)?, row.get(8)?, row.get(9)?, row.get(10)?],
                    ))
                })
                .map_err(&sql)?;
            rows.map(|row| key_from_row(row.map_err(&sql)?)).collect()
        })
        .await
    }

    async fn revoke_key(&self, name: &str, at: i64) -> Result<Revoked, KeyError> {
        let name = name.to_owned();
        self.with(move |conn| {
            let sql = sqlite("revoking a key");
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&sql)?;
            let found: Option<Option<i64>> = tx
                .query_row(
                    "SELECT revoked_at FROM api_keys WHERE name = ?1",
                    [&name],
                    |row| row.get(0),
                )
                .optional()
                .map_err(&sql)?;
            let revoked = match found {
                None => return Err(KeyError::UnknownName(name)),
                Some(Some(earlier)) => Revoked::Already(earlier),
                Some(None) => {
                    tx.execute(
                        "UPDATE api_keys SET revoked_at = ?2 WHERE name = ?1",
                        params![name, at],
                    )
                    .map_err(&sql)?;
                    Revoked::Now
                }
            };
            tx.commit().map_err(&sql)?;
            Ok(revoked)
        })
        .await
    }

    async fn set_key_scopes(&self, name: &str, scopes: Scopes) -> Result<Scopes, KeyError> {
        let name = name.to_owned();
        self.with(move |conn| {
            let sql = sqlite("changing a key's scopes");
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&sql)?;
            let found: Option<Option<i64>> = tx
                .query_row(
                    "SELECT scopes FROM api_keys WHERE name = ?1",
                    [&name],
                    |row| row.get(0),
                )
                .optional()
                .map_err(&sql)?;
            let Some(before) = found else {
                return Err(KeyError::UnknownName(name));
            };
            tx.execute(
                "UPDATE api_keys SET scopes = ?2 WHERE name = ?1",
                params![name, scopes_column(scopes)],
            )
            .map_err(&sql)?;
            tx.commit().map_err(&sql)?;
            Ok(stored_scopes(before))
        })
        .await
    }

    async fn set_key_limits(
        &self,
        name: &str,
        change: LimitsChange,
    ) -> Result<(KeyLimits, KeyLimits), KeyError> {
        let name = name.to_owned();
        self.with(move |conn| {
            let sql = sqlite("changing a key's budget");
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&sql)?;
            let found: Option<[Option<i64>; 4]> = tx
                .query_row(
                    "SELECT rate_requests, rate_seconds, burst, in_flight
                     FROM api_keys WHERE name = ?1",
                    [&name],
                    |row| Ok([row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?]),
                )
                .optional()
                .map_err(&sql)?;
            let Some([rate_requests, rate_seconds, burst, in_flight]) = found else {
                return Err(KeyError::UnknownName(name));
            };
            let before = stored_limits(&name, rate_requests, rate_seconds, burst, in_flight)?;
            let after = before.changed(change);
            let [rate_requests, rate_seconds, burst, in_flight] = limits_columns(after);
            tx.execute(
                "UPDATE api_keys SET rate_requests = ?2, rate_seconds = ?3, burst = ?4,
                     in_flight = ?5
                 WHERE name = ?1",
                params![name, rate_requests, rate_seconds, burst, in_flight],
            )
            .map_err(&sql)?;
            tx.commit().map_err(&sql)?;
            Ok((before, after))
        })
        .await
    }

    async fn heartbeat(&self, _instance: &str) -> Result<u32, StorageError> {
        // The file's lock admits one server (`lock.rs`).
        Ok(1)
    }

    async fn forget_instance(&self, _instance: &str) -> Result<(), StorageError> {
        Ok(())
    }

    async fn record_key_use(&self, uses: Vec<(String, i64)>) -> Result<(), StorageError> {
        self.with(move |conn| {
            let sql = sqlite("recording key use");
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&sql)?;
            {
                let mut update = tx
                    .prepare_cached(
                        "UPDATE api_keys SET last_used_at = ?2
                         WHERE name = ?1 AND (last_used_at IS NULL OR last_used_at < ?2)",
                    )
                    .map_err(&sql)?;
                for (name, at) in &uses {
                    update.execute(params![name, at]).map_err(&sql)?;
                }
            }
            tx.commit().map_err(&sql)
        })
        .await
    }
}
