//! The embedded default: one SQLite file in WAL mode.
//!
//! - **Durability.** `synchronous=FULL` makes every commit fsync the WAL, and
//!   `create` answers only after its commit returned.
//! - **One writer, group commit.** All writes go to one thread that owns the
//!   only writing connection, so writers never meet `SQLITE_BUSY`. It takes
//!   every create that is waiting and commits them in one transaction — one
//!   fsync for the group instead of one each.
//! - **Readers do not wait for writers.** WAL readers see the last commit
//!   while a write is in progress; a small pool of read connections serves
//!   them on tokio's blocking threads.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::{PetStore, StoreError};
use crate::model::{NewPet, Pet, PetStatus};

/// Schema migrations; the database's `user_version` counts those applied.
const MIGRATIONS: &[&str] = &["CREATE TABLE pets (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        name        TEXT    NOT NULL,
        category_id INTEGER NOT NULL,
        status      TEXT    CHECK (status IN ('available', 'pending', 'sold'))
    );
    -- Serves the status-filtered list in id order; the unfiltered list walks
    -- the primary key. Either way a page costs O(limit), not O(catalogue).
    CREATE INDEX pets_by_status ON pets (status, id);"];

/// Read connections: reads are short, so a few serve two cores well.
const READERS: usize = 4;
/// The most creates one transaction commits.
const MAX_GROUP: usize = 512;
/// How long a connection waits on a lock (e.g. another process holding the
/// file) before the request fails with 503.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SELECT_PET: &str = "SELECT id, name, category_id, status FROM pets";

type Reply = oneshot::Sender<Result<Pet, StoreError>>;

enum WriteJob {
    Create(NewPet, Reply),
    Close(oneshot::Sender<()>),
}

/// The SQLite implementation of [`PetStore`].
pub struct SqliteStore {
    writer: mpsc::Sender<WriteJob>,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    readers: Arc<ReaderPool>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` and brings its
    /// schema up to date.
    pub async fn open(path: PathBuf) -> Result<SqliteStore, StoreError> {
        tokio::task::spawn_blocking(move || SqliteStore::open_blocking(path))
            .await
            .map_err(|e| StoreError(format!("opening the database panicked: {e}")))?
    }

    fn open_blocking(path: PathBuf) -> Result<SqliteStore, StoreError> {
        let describe = |e: &dyn std::fmt::Display| StoreError(format!("{}: {e}", path.display()));
        let mut conn = Connection::open(&path).map_err(|e| describe(&e))?;
        configure(&conn).map_err(|e| describe(&e))?;
        migrate(&mut conn).map_err(|e| describe(&e))?;

        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let reader = Connection::open_with_flags(&path, flags).map_err(|e| describe(&e))?;
            reader
                .busy_timeout(BUSY_TIMEOUT)
                .map_err(|e| describe(&e))?;
            readers.push(reader);
        }

        let (writer, jobs) = mpsc::channel();
        let writer_thread = std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run_writer(conn, jobs))
            .map_err(|e| StoreError(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStore {
            writer,
            writer_thread: Mutex::new(Some(writer_thread)),
            readers: ReaderPool::new(readers),
        })
    }
}

fn configure(conn: &Connection) -> Result<(), String> {
    let sql = |e: rusqlite::Error| e.to_string();
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!(
            "cannot switch the database to WAL mode (it stays in {mode} mode)"
        ));
    }
    conn.pragma_update(None, "synchronous", "FULL").map_err(sql)
}

/// Applies the migrations the database lacks, each in its own transaction
/// with the version bump. A database from a newer server is left untouched.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let sql = |e: rusqlite::Error| StoreError(e.to_string());
    let current: usize = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(sql)?;
    if current > MIGRATIONS.len() {
        return Err(StoreError(format!(
            "the database has schema version {current}, newer than the {} this server knows; \
             upgrade petstore-server (the database was not modified)",
            MIGRATIONS.len()
        )));
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

/// The writer thread: takes jobs until told to close or until every sender
/// is gone, committing each group of waiting creates at once.
fn run_writer(mut conn: Connection, jobs: mpsc::Receiver<WriteJob>) {
    while let Ok(first) = jobs.recv() {
        let mut group = Vec::new();
        let mut close = None;
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                WriteJob::Create(pet, reply) => group.push((pet, reply)),
                WriteJob::Close(done) => {
                    close = Some(done);
                    break;
                }
            }
            if group.len() < MAX_GROUP {
                next = jobs.try_recv().ok();
            }
        }
        commit_group(&mut conn, group);
        if let Some(done) = close {
            drop(conn);
            let _ = done.send(());
            return;
        }
    }
}

fn commit_group(conn: &mut Connection, group: Vec<(NewPet, Reply)>) {
    if group.is_empty() {
        return;
    }
    match insert_all(conn, group.iter().map(|(pet, _)| pet)) {
        Ok(ids) => {
            for ((pet, reply), id) in group.into_iter().zip(ids) {
                let _ = reply.send(Ok(Pet::from_new(id, pet)));
            }
        }
        Err(e) => {
            for (_, reply) in group {
                let _ = reply.send(Err(StoreError(e.to_string())));
            }
        }
    }
}

/// Inserts the pets in one transaction; all or none are stored.
fn insert_all<'a>(
    conn: &mut Connection,
    pets: impl Iterator<Item = &'a NewPet>,
) -> rusqlite::Result<Vec<i64>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut ids = Vec::new();
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO pets (name, category_id, status) VALUES (?1, ?2, ?3) RETURNING id",
        )?;
        for pet in pets {
            let status = pet.status.map(PetStatus::as_str);
            ids.push(
                insert.query_row(params![pet.name, pet.category_id, status], |row| row.get(0))?,
            );
        }
    }
    tx.commit()?;
    Ok(ids)
}

fn pet_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Pet> {
    let status = match row.get_ref(3)?.as_str_or_null()? {
        None => None,
        Some(text) => Some(PetStatus::parse(text).ok_or_else(|| {
            rusqlite::Error::InvalidColumnType(
                3,
                format!("status {text:?}"),
                rusqlite::types::Type::Text,
            )
        })?),
    };
    Ok(Pet {
        id: row.get(0)?,
        name: row.get(1)?,
        category_id: row.get(2)?,
        status,
    })
}

#[async_trait::async_trait]
impl PetStore for SqliteStore {
    async fn create(&self, pet: NewPet) -> Result<Pet, StoreError> {
        let closed = || StoreError("the database is closed".into());
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteJob::Create(pet, reply))
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    async fn list(&self, limit: u32, status: Option<PetStatus>) -> Result<Vec<Pet>, StoreError> {
        self.readers
            .read(move |conn| match status {
                None => {
                    let mut stmt =
                        conn.prepare_cached(&format!("{SELECT_PET} ORDER BY id LIMIT ?1"))?;
                    stmt.query_map(params![limit], pet_from_row)?.collect()
                }
                Some(status) => {
                    let mut stmt = conn.prepare_cached(&format!(
                        "{SELECT_PET} WHERE status = ?1 ORDER BY id LIMIT ?2"
                    ))?;
                    stmt.query_map(params![status.as_str(), limit], pet_from_row)?
                        .collect()
                }
            })
            .await
    }

    async fn get(&self, id: i64) -> Result<Option<Pet>, StoreError> {
        self.readers
            .read(move |conn| {
                conn.prepare_cached(&format!("{SELECT_PET} WHERE id = ?1"))?
                    .query_row(params![id], pet_from_row)
                    .optional()
            })
            .await
    }

    async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.writer.send(WriteJob::Close(done)).is_ok() {
            let _ = closed.await;
        }
        let thread = self
            .writer_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.readers.close();
    }
}

/// A fixed set of read-only connections lent to blocking tasks.
struct ReaderPool {
    idle: Mutex<Vec<Connection>>,
    available: Arc<Semaphore>,
}

impl ReaderPool {
    fn new(connections: Vec<Connection>) -> Arc<ReaderPool> {
        Arc::new(ReaderPool {
            available: Arc::new(Semaphore::new(connections.len())),
            idle: Mutex::new(connections),
        })
    }

    /// Runs `query` on a pooled connection on a blocking thread.
    async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        query: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let permit = Arc::clone(&self.available)
            .acquire_owned()
            .await
            .map_err(|_| StoreError("the database is closed".into()))?;
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let lease = Lease::take(pool, permit);
            query(lease.connection())
        })
        .await
        .map_err(|e| StoreError(format!("a database read panicked: {e}")))?
        .map_err(|e| StoreError(e.to_string()))
    }

    fn close(&self) {
        self.available.close();
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// A connection out of the pool; goes back on drop, even after a panic.
struct Lease {
    pool: Arc<ReaderPool>,
    connection: Option<Connection>,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    fn take(pool: Arc<ReaderPool>, permit: OwnedSemaphorePermit) -> Lease {
        // The permit guarantees an idle connection is there.
        let connection = pool.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        Lease {
            pool,
            connection,
            _permit: permit,
        }
    }

    fn connection(&self) -> &Connection {
        self.connection
            .as_ref()
            .expect("a permit always comes with a connection")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(connection);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_pet(name: &str, status: Option<PetStatus>) -> NewPet {
        NewPet {
            name: name.into(),
            category_id: 7,
            status,
        }
    }

    #[tokio::test]
    async fn created_pets_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pets.db");
        let store = SqliteStore::open(path.clone()).await.unwrap();
        let rex = store
            .create(new_pet("Rex", Some(PetStatus::Sold)))
            .await
            .unwrap();
        let tom = store.create(new_pet("Tom", None)).await.unwrap();
        assert!(tom.id > rex.id);
        store.close().await;

        let store = SqliteStore::open(path).await.unwrap();
        assert_eq!(store.get(rex.id).await.unwrap(), Some(rex.clone()));
        assert_eq!(store.list(10, None).await.unwrap(), vec![rex.clone(), tom]);
        assert_eq!(
            store.list(10, Some(PetStatus::Sold)).await.unwrap(),
            vec![rex]
        );
        store.close().await;
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("future.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        let error = SqliteStore::open(path.clone())
            .await
            .err()
            .expect("must refuse");
        assert!(error.0.contains("schema version 99"), "{error}");
        let conn = Connection::open(&path).unwrap();
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
            .unwrap();
        assert_eq!(tables, 0);
    }

    #[tokio::test]
    async fn writes_after_close_fail_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).await.unwrap();
        store.close().await;
        assert!(store.create(new_pet("Late", None)).await.is_err());
        assert!(store.list(1, None).await.is_err());
    }
}
