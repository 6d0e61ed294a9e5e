//! The embedded default: one SQLite file in WAL mode.
//!
//! - **Durability.** `synchronous=FULL` makes every commit fsync the WAL, and
//!   `create` answers only after its commit returned.
//! - **One writer, group commit.** All writes go to one thread that owns the
//!   only writing connection, so writers never meet `SQLITE_BUSY`. It takes
//!   every create that is waiting and commits them in one transaction — one
//!   fsync for the group instead of one each.
//! - **Reads come from memory.** The committed catalogue is loaded at
//!   start-up and kept in memory, in id order and per status; the writer adds
//!   each group to it after its commit and before anyone is told of it, so
//!   memory holds exactly what the database holds (the server must be the
//!   file's only writer). Reads cost O(limit), never touch the disk, and never
//!   wait for a write: the writer holds the lock only to append, not while it
//!   commits.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock, RwLockWriteGuard, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior, params};
use tokio::sync::oneshot;

use super::catalogue::Catalogue;
use super::{PetStore, StoreError};
use crate::model::{NewPet, Pet, PetStatus};

/// Schema migrations; the database's `user_version` counts those applied.
/// No secondary index: reads are served from memory (see `Catalogue`).
const MIGRATIONS: &[&str] = &["CREATE TABLE pets (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        name        TEXT    NOT NULL,
        category_id INTEGER NOT NULL,
        status      TEXT    CHECK (status IN ('available', 'pending', 'sold'))
    );"];

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
    catalogue: Arc<SharedCatalogue>,
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

        let catalogue = load(&conn).map_err(|e| describe(&e))?;
        let catalogue = Arc::new(RwLock::new(Some(catalogue)));

        let (writer, jobs) = mpsc::channel();
        let writer_thread = std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn({
                let catalogue = Arc::clone(&catalogue);
                move || run_writer(conn, jobs, &catalogue)
            })
            .map_err(|e| StoreError(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStore {
            writer,
            writer_thread: Mutex::new(Some(writer_thread)),
            catalogue,
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
fn run_writer(mut conn: Connection, jobs: mpsc::Receiver<WriteJob>, catalogue: &SharedCatalogue) {
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
        commit_group(&mut conn, group, catalogue);
        if let Some(done) = close {
            drop(conn);
            let _ = done.send(());
            return;
        }
    }
}

/// Commits the group, then makes it visible to readers, then answers: a
/// pet is never acknowledged before it is both durable and readable.
fn commit_group(conn: &mut Connection, group: Vec<(NewPet, Reply)>, catalogue: &SharedCatalogue) {
    if group.is_empty() {
        return;
    }
    match insert_all(conn, group.iter().map(|(pet, _)| pet)) {
        Ok(ids) => {
            let pets: Vec<(Pet, Reply)> = group
                .into_iter()
                .zip(ids)
                .map(|((pet, reply), id)| (Pet::from_new(id, pet), reply))
                .collect();
            if let Some(catalogue) = write(catalogue).as_mut() {
                pets.iter().for_each(|(pet, _)| catalogue.push(pet));
            }
            for (pet, reply) in pets {
                let _ = reply.send(Ok(pet));
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
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteJob::Create(pet, reply))
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    async fn list(&self, limit: u32, status: Option<PetStatus>) -> Result<Vec<Pet>, StoreError> {
        read(&self.catalogue, |catalogue| catalogue.first(limit, status))
    }

    async fn get(&self, id: i64) -> Result<Option<Pet>, StoreError> {
        read(&self.catalogue, |catalogue| catalogue.get(id))
    }

    async fn close(&self) {
        let (done, finished) = oneshot::channel();
        if self.writer.send(WriteJob::Close(done)).is_ok() {
            let _ = finished.await;
        }
        let thread = self
            .writer_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        *write(&self.catalogue) = None;
    }
}

fn closed() -> StoreError {
    StoreError("the database is closed".into())
}

/// Everything the database holds, read once at start-up.
fn load(conn: &Connection) -> rusqlite::Result<Catalogue> {
    let mut catalogue = Catalogue::default();
    let mut select = conn.prepare(&format!("{SELECT_PET} ORDER BY id"))?;
    for pet in select.query_map([], pet_from_row)? {
        catalogue.push(&pet?);
    }
    Ok(catalogue)
}

/// The in-memory catalogue; `None` once the store is closed.
type SharedCatalogue = RwLock<Option<Catalogue>>;

/// Reads the catalogue with `f`, or fails once the store is closed.
fn read<T>(catalogue: &SharedCatalogue, f: impl FnOnce(&Catalogue) -> T) -> Result<T, StoreError> {
    // A poisoned lock means a panic elsewhere while holding it; `push`
    // checks before it changes anything, so the catalogue is still whole.
    let guard = catalogue.read().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().map(f).ok_or_else(closed)
}

fn write(catalogue: &SharedCatalogue) -> RwLockWriteGuard<'_, Option<Catalogue>> {
    catalogue.write().unwrap_or_else(|e| e.into_inner())
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
