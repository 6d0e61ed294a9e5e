//! The embedded default: one SQLite file in WAL mode.
//!
//! - **Durability.** `synchronous=FULL` makes every commit fsync the WAL, and
//!   `create` answers only after its commit returned.
//! - **One writer, group commit.** All of the API's writes go to one thread
//!   that owns their connection. It takes every write that is waiting and
//!   commits them in one transaction — one fsync for the group instead of
//!   one each. The webhooks' bookkeeping writes on a connection of its own;
//!   the two take turns through the process's write gate (`gate.rs`), so
//!   neither meets `SQLITE_BUSY` and sleeps.
//! - **Reads come from memory.** The committed catalogue and orders are
//!   loaded at start-up and kept in memory, in id order and per status; the
//!   writer applies each group to them after its commit and before anyone is
//!   told of it, so memory holds exactly what the database holds (the server
//!   must be the file's only writer). Reads cost O(limit), never touch the
//!   disk, and never wait for a commit: the writer holds the lock only to
//!   apply a committed group, not while it commits.
//! - **Orders in the same groups.** Placing and updating orders go to the
//!   writer like creates and are committed in the same groups. Each is
//!   decided inside the group's transaction by the database itself (a
//!   conditional `UPDATE` of the animal's status), in the order the requests
//!   reached the writer: of concurrent orders for one animal, the first
//!   wins and the rest find it `pending`.
//! - **Events in the same transactions.** Each write records its events in
//!   its group's transaction, with ids the writer assigns in commit order;
//!   pages of the feed are read from memory, up to the head the writer
//!   sends after each commit (`feed/`); long polls parked at the head are
//!   woken by the kinds memory saw come (`storage/parked.rs`).
//!
//! Here: [`SqliteStorage`], the [`Storage`] these make. `writer.rs` is the
//! writer thread and its group commit; `writes.rs` each kind of write (a
//! create, with or without an idempotency key, an order placed, an order
//! updated), with its typed outcome; `memory.rs` the committed state in
//! memory (`catalogue.rs` the pets, `orders.rs` the orders, `ids.rs` the
//! ids both keep); `feed/` the events feed; `rows.rs` rows decoded;
//! `schema.rs` migrations and connection settings; `gate.rs` the turns of
//! the writing connections; `lock.rs` the
//! one-server-per-file lock; `keys.rs` the stored API keys; `webhooks.rs`
//! the webhooks' subscriptions and deliveries (on a connection of their own,
//! as the keys are).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::thread::JoinHandle;

use enumset::EnumSet;
use rusqlite::Connection;
use tokio::sync::{oneshot, watch};

mod catalogue;
mod feed;
mod gate;
mod ids;
mod keys;
mod lock;
mod memory;
mod orders;
mod rows;
mod schema;
mod webhooks;
mod writer;
mod writes;

pub use keys::SqliteKeys;
pub(super) use schema::is_unavailable;
pub use webhooks::SqliteWebhooks;

use self::feed::{EventLog, memory_page};
use self::gate::WriteGate;
use self::lock::DatabaseLock;
use self::memory::{SharedMemory, load, read, write};
use self::schema::{BUSY_TIMEOUT, configure_and_migrate, sqlite};
use self::writer::{FileIdentity, GroupJob, Job, Reply, WriteJob, Writer};
use self::writes::{Create, CreateOnce, Place, Update, Write};
use super::idempotency::{Claims, CreateOutcome, Idempotency};
use super::orders::{
    OrderPage, OrderQuery, Owner, OwnerId, PlaceOutcome, StoredOrder, UpdateOutcome, transition,
};
use super::parked::{EventKinds, Found, Parked};
use super::{
    EventKind, EventQuery, EventsOutcome, FatalSender, ListQuery, OpenError, Page, ParkedWait,
    ReadTo, Storage, StorageError, StorageMetrics, StorageStats, StoredEvent,
};
use crate::logging::panic_message;
use petstore_api::model::{
    EncodedEvents, Inventory, NewPet, OrderStatus, OrderUpdateStatus, Pet, PetStatus,
};

/// Finds the kinds of new events for parked polls in memory, which knows
/// each kind's last id: a look costs the same however many events came.
struct Scouting(Arc<SharedMemory>);

impl EventKinds for Scouting {
    async fn last_of_each(&mut self, from: i64, to: i64) -> Result<Found, StorageError> {
        read(&self.0, |memory| memory.events.last_of_each(from, to))
    }
}

/// The SQLite implementation of [`Storage`].
pub struct SqliteStorage {
    writer: mpsc::Sender<WriteJob>,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    /// What the database holds (see the module's documentation).
    memory: Arc<SharedMemory>,
    /// The idempotency keys whose creates are with the writer.
    claims: Arc<Claims>,
    /// The idempotency keys whose orders are with the writer (apart from
    /// the creates': the two operations' keys are apart).
    order_claims: Arc<Claims>,
    /// Set when the storage is being closed. A writer that is gone without
    /// that has died: creates then fail as internal errors, not as 503s.
    closing: AtomicBool,
    /// The database file, and which file it was at start-up.
    path: PathBuf,
    identity: FileIdentity,
    /// Set by the writer once the path no longer names that file.
    replaced: Arc<AtomicBool>,
    /// The feed's head, sent by the writer after each commit that wrote
    /// events.
    head: Arc<watch::Sender<i64>>,
    /// Each kind's last id up to the head, for long polls parked there.
    parked: Parked,
}

impl SqliteStorage {
    /// Opens (creating if needed) the database file at `path` and brings its
    /// schema up to date. Refuses when another process holds the file (see
    /// `lock.rs`) or when the file cannot be written. Errors are logged to
    /// `log`; a writer thread that dies is reported to `fatal`. The keys and
    /// the webhooks come with it, each on a connection of its own.
    pub async fn open(
        path: PathBuf,
        log: slog::Logger,
        fatal: FatalSender,
        metrics: StorageMetrics,
    ) -> Result<(SqliteStorage, SqliteKeys, SqliteWebhooks), OpenError> {
        // On the blocking pool, inside the runtime: the scout of parked
        // polls is spawned there.
        let open = move || SqliteStorage::open_blocking(path, log, fatal, metrics);
        tokio::task::spawn_blocking(open)
            .await
            .map_err(|e| OpenError::Io {
                doing: "opening the database".into(),
                source: std::io::Error::other(e.to_string()),
            })?
    }

    fn open_blocking(
        path: PathBuf,
        log: slog::Logger,
        fatal: FatalSender,
        metrics: StorageMetrics,
    ) -> Result<(SqliteStorage, SqliteKeys, SqliteWebhooks), OpenError> {
        let lock = DatabaseLock::acquire(&path)?;
        let in_file = |source: StorageError| OpenError::Storage {
            database: path.display().to_string(),
            source,
        };
        let mut conn = Connection::open(&path)
            .map_err(sqlite("opening the file"))
            .map_err(in_file)?;
        configure_and_migrate(&mut conn, &path)?;
        let memory = load(&conn).map_err(in_file)?;
        let events = EventLog::load(&conn).map_err(in_file)?;
        let head = Arc::new(watch::Sender::new(events.head()));
        let own_connection = |doing| {
            Connection::open(&path)
                .and_then(|conn| conn.busy_timeout(BUSY_TIMEOUT).map(|()| conn))
                .map_err(sqlite(doing))
                .map_err(in_file)
        };
        let keys_conn = own_connection("opening a connection for the keys")?;
        let webhooks_conn = own_connection("opening a connection for the webhooks")?;
        let identity = FileIdentity::of(&path).map_err(|source| OpenError::Io {
            doing: format!("reading the metadata of {}", path.display()),
            source,
        })?;
        let memory = Arc::new(RwLock::new(Some(memory)));
        let gate = WriteGate::default();
        let replaced = Arc::new(AtomicBool::new(false));

        let scouting = Scouting(Arc::clone(&memory));
        let parked = Parked::start(scouting, head.subscribe(), log.clone());

        let (writer, jobs) = mpsc::channel();
        let writer_thread = std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn({
                let memory = Arc::clone(&memory);
                let writer = Writer {
                    conn,
                    path: path.clone(),
                    identity,
                    replaced: Arc::clone(&replaced),
                    log: log.clone(),
                    metrics,
                    events,
                    head: Arc::clone(&head),
                    gate: gate.clone(),
                    _lock: lock,
                };
                move || {
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        writer.run(jobs, &memory)
                    }));
                    if let Err(panic) = outcome {
                        let message = panic_message(&*panic);
                        slog::crit!(log, "the SQLite writer thread panicked"; "panic" => &message);
                        let _ = fatal.send(Some(format!(
                            "the SQLite writer thread panicked: {message}"
                        )));
                    }
                }
            })
            .map_err(|source| OpenError::Io {
                doing: "starting the writer thread".into(),
                source,
            })?;
        let storage = SqliteStorage {
            writer,
            writer_thread: Mutex::new(Some(writer_thread)),
            memory,
            claims: Arc::default(),
            order_claims: Arc::default(),
            closing: AtomicBool::new(false),
            path,
            identity,
            replaced,
            parked,
            head,
        };
        let webhooks = SqliteWebhooks::on(webhooks_conn, gate);
        Ok((storage, SqliteKeys::on(keys_conn), webhooks))
    }

    /// Hands a write to the writer and waits for its commit and outcome.
    async fn write<W: Write>(&self, write: W) -> Result<W::Outcome, StorageError>
    where
        GroupJob: From<Job<W>>,
    {
        let (reply, answer) = oneshot::channel();
        let job = GroupJob::from(Job::new(write, reply));
        self.send(WriteJob::Group(job), answer).await
    }

    /// Sends the writer `job` and waits for its answer.
    async fn send<T>(
        &self,
        job: WriteJob,
        answer: oneshot::Receiver<Result<T, StorageError>>,
    ) -> Result<T, StorageError> {
        self.writer.send(job).map_err(|_| self.writer_gone())?;
        answer.await.map_err(|_| self.writer_gone())?
    }

    /// Why a write could not reach the writer: it died, or the storage closed.
    fn writer_gone(&self) -> StorageError {
        if self.closing.load(Ordering::SeqCst) {
            StorageError::Closed
        } else {
            StorageError::WriterStopped("it panicked; the process is shutting down".into())
        }
    }
}

#[async_trait::async_trait]
impl Storage for SqliteStorage {
    async fn create(&self, pet: NewPet) -> Result<Pet, StorageError> {
        self.write(Create(pet)).await
    }

    async fn create_idempotent(
        &self,
        pet: NewPet,
        idempotency: Idempotency,
    ) -> Result<CreateOutcome, StorageError> {
        let Some(claim) = self.claims.claim(&idempotency) else {
            return Ok(CreateOutcome::KeyInUse);
        };
        let write = CreateOnce {
            pet,
            once: idempotency,
            claim,
        };
        self.write(write).await
    }

    async fn purge_idempotency(
        &self,
        made_before: i64,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let (reply, answer): (Reply<usize>, _) = oneshot::channel();
        self.send(WriteJob::Purge(made_before, limit, reply), answer)
            .await
    }

    async fn list(&self, query: ListQuery) -> Result<Page, StorageError> {
        read(&self.memory, |memory| memory.pets.page(query))
    }

    async fn get(&self, id: i64) -> Result<Option<Pet>, StorageError> {
        read(&self.memory, |memory| memory.pets.get(id))
    }

    async fn place_order(
        &self,
        pet_id: i64,
        owner: Owner,
        idempotency: Option<Idempotency>,
    ) -> Result<PlaceOutcome, StorageError> {
        let once = match idempotency {
            Some(idempotency) => match self.order_claims.claim(&idempotency) {
                Some(claim) => Some((idempotency, claim)),
                None => return Ok(PlaceOutcome::KeyInUse),
            },
            // Without a key there is nothing to replay: an animal that is
            // not available now is refused without waiting for a commit
            // (the losers of a race cost no fsync).
            None => match read(&self.memory, |memory| memory.pets.status(pet_id))? {
                None => return Ok(PlaceOutcome::NoSuchPet),
                Some(status) if status != Some(PetStatus::Available) => {
                    return Ok(PlaceOutcome::NotAvailable(status));
                }
                Some(_) => None,
            },
        };
        let write = Place {
            pet_id,
            owner,
            once,
        };
        self.write(write).await
    }

    async fn update_order(
        &self,
        id: i64,
        to: OrderUpdateStatus,
    ) -> Result<UpdateOutcome, StorageError> {
        let to = OrderStatus::from(to);
        // Only a placed order changes, and only the writer changes it; every
        // other answer holds from the committed orders as they are now.
        let decided = read(&self.memory, |memory| match memory.orders.get(id, None) {
            None => Some(UpdateOutcome::NoSuchOrder),
            Some(order) => match transition(order.status, to) {
                Ok(Some(_)) => None,
                Ok(None) => Some(UpdateOutcome::Done(order)),
                Err(from) => Some(UpdateOutcome::Invalid(from)),
            },
        })?;
        match decided {
            Some(outcome) => Ok(outcome),
            None => self.write(Update { id, to }).await,
        }
    }

    async fn get_order(
        &self,
        id: i64,
        owner: Option<OwnerId>,
    ) -> Result<Option<StoredOrder>, StorageError> {
        read(&self.memory, |memory| memory.orders.get(id, owner))
    }

    async fn list_orders(&self, query: OrderQuery) -> Result<OrderPage, StorageError> {
        read(&self.memory, |memory| memory.orders.page(query))
    }

    async fn inventory(&self) -> Result<Inventory, StorageError> {
        read(&self.memory, |memory| memory.pets.inventory())
    }

    async fn events(&self, query: EventQuery) -> Result<EventsOutcome, StorageError> {
        // Read before the page: every id up to it is committed, and in
        // memory.
        let head = *self.head.borrow();
        read(&self.memory, |memory| {
            memory_page::<Vec<StoredEvent>>(memory, query, head)
        })?
    }

    /// One instance: the head it knows is the head.
    async fn encoded_events(
        &self,
        query: EventQuery,
        _to: ReadTo,
    ) -> Result<EventsOutcome<EncodedEvents>, StorageError> {
        let head = *self.head.borrow();
        read(&self.memory, |memory| {
            memory_page::<EncodedEvents>(memory, query, head)
        })?
    }

    /// Woken by the kinds memory saw come after `head`, looked at once a
    /// tick for every poll parked (`storage/parked.rs`).
    async fn events_after(
        &self,
        kinds: EnumSet<EventKind>,
        head: i64,
        deadline: tokio::time::Instant,
    ) -> ParkedWait {
        self.parked.wait(kinds, head, deadline).await
    }

    fn events_head(&self) -> watch::Receiver<i64> {
        self.head.subscribe()
    }

    async fn purge_events(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let (reply, answer): (Reply<usize>, _) = oneshot::channel();
        let before = before.timestamp_micros();
        self.send(WriteJob::PurgeEvents(before, limit, reply), answer)
            .await
    }

    async fn check_ready(&self) -> Result<(), StorageError> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(StorageError::Closed);
        }
        let finished = self
            .writer_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(JoinHandle::is_finished);
        if finished {
            return Err(self.writer_gone());
        }
        let same_file = FileIdentity::of(&self.path).is_ok_and(|now| now == self.identity);
        if self.replaced.load(Ordering::SeqCst) || !same_file {
            return Err(StorageError::FileReplaced {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    async fn stats(&self) -> Result<StorageStats, StorageError> {
        let (pets, events, oldest_event) = read(&self.memory, |memory| {
            let events = &memory.events;
            (memory.pets.len(), events.count, events.oldest())
        })?;
        Ok(StorageStats {
            pets: pets as u64,
            events,
            oldest_event,
            pool: None,
            shared: None,
        })
    }

    async fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.parked.stop();
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
        *write(&self.memory) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn new_pet(name: &str, status: Option<PetStatus>) -> NewPet {
        NewPet {
            name: name.into(),
            category_id: 7,
            status,
        }
    }

    fn discard() -> slog::Logger {
        slog::Logger::root(slog::Discard, slog::o!())
    }

    fn query(status: Option<PetStatus>) -> ListQuery {
        ListQuery {
            limit: 10,
            status,
            after: None,
        }
    }

    async fn list(storage: &SqliteStorage, status: Option<PetStatus>) -> Vec<Pet> {
        let page = storage.list(query(status)).await.unwrap();
        serde_json::from_slice(&page.pets.into_bytes()).expect("a JSON array of pets")
    }

    async fn open(path: &Path) -> Result<SqliteStorage, OpenError> {
        SqliteStorage::open(
            path.to_owned(),
            discard(),
            FatalSender::new(None),
            StorageMetrics::default(),
        )
        .await
        .map(|(storage, _keys, _webhooks)| storage)
    }

    #[tokio::test]
    async fn created_pets_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pets.db");
        let storage = open(&path).await.unwrap();
        let rex = storage
            .create(new_pet("Rex", Some(PetStatus::Sold)))
            .await
            .unwrap();
        let tom = storage.create(new_pet("Tom", None)).await.unwrap();
        assert!(tom.id > rex.id);
        storage.close().await;

        let storage = open(&path).await.unwrap();
        assert_eq!(storage.get(rex.id).await.unwrap(), Some(rex.clone()));
        assert_eq!(list(&storage, None).await, vec![rex.clone(), tom]);
        assert_eq!(list(&storage, Some(PetStatus::Sold)).await, vec![rex]);
        storage.close().await;
    }

    #[tokio::test]
    async fn a_newer_or_negative_schema_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        for (version, expected) in [(99, "schema version 99"), (-3, "schema version is -3")] {
            let path = dir.path().join(format!("v{version}.db"));
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", version).unwrap();
            drop(conn);
            let error = open(&path).await.err().expect("must refuse").to_string();
            assert!(error.contains(expected), "{error}");
            let conn = Connection::open(&path).unwrap();
            let tables: i64 = conn
                .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
                .unwrap();
            assert_eq!(tables, 0);
        }
    }

    #[tokio::test]
    async fn a_second_store_on_the_same_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pets.db");
        let first = open(&path).await.unwrap();
        let error = open(&path).await.err().expect("must refuse");
        assert!(matches!(error, OpenError::InUse { .. }), "{error}");
        let rex = first.create(new_pet("Rex", None)).await.unwrap();
        first.close().await;
        let second = open(&path).await.expect("free once the first closed");
        assert_eq!(second.get(rex.id).await.unwrap(), Some(rex));
        second.close().await;
    }

    #[tokio::test]
    async fn a_row_that_does_not_decode_is_named_by_id_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pets.db");
        let storage = open(&path).await.unwrap();
        let rex = storage.create(new_pet("Rex", None)).await.unwrap();
        storage.close().await;
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA ignore_check_constraints = ON")
            .unwrap();
        conn.execute("UPDATE pets SET status = 'weird' WHERE id = ?1", [rex.id])
            .unwrap();
        drop(conn);
        let error = open(&path).await.err().expect("must refuse").to_string();
        assert!(
            error.contains(&format!(
                "pet {}: column status holds the text \"weird\"",
                rex.id
            )),
            "{error}"
        );
    }

    #[tokio::test]
    async fn writes_after_close_fail_as_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let storage = open(&dir.path().join("c.db")).await.unwrap();
        storage.close().await;
        let error = storage.create(new_pet("Late", None)).await.unwrap_err();
        assert!(error.is_unavailable(), "{error}");
        assert!(storage.list(query(None)).await.is_err());
    }

    #[tokio::test]
    async fn a_deleted_database_file_refuses_creates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone.db");
        let storage = open(&path).await.unwrap();
        let rex = storage.create(new_pet("Rex", None)).await.unwrap();
        std::fs::remove_file(&path).unwrap();
        let error = storage.create(new_pet("Lost", None)).await.unwrap_err();
        assert!(
            matches!(error, StorageError::FileReplaced { .. }) && error.is_unavailable(),
            "{error}"
        );
        assert_eq!(list(&storage, None).await, vec![rex]);
        storage.close().await;
    }

    #[tokio::test]
    async fn a_panicking_writer_is_reported_as_fatal_and_creates_fail_as_internal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pets.db");
        let (fatal, mut failure) = tokio::sync::watch::channel(None);
        let (storage, _keys, _webhooks) =
            SqliteStorage::open(path.clone(), discard(), fatal, StorageMetrics::default())
                .await
                .unwrap();
        storage.create(new_pet("Rex", None)).await.unwrap();
        // Another program rewinds the id sequence behind the server's back:
        // the next id is not above the last one the catalogue holds, which
        // breaks its invariant.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("DELETE FROM pets; UPDATE sqlite_sequence SET seq = 0;")
            .unwrap();
        let error = storage.create(new_pet("Tom", None)).await.unwrap_err();
        assert!(!error.is_unavailable(), "{error}");
        let message = failure
            .wait_for(Option::is_some)
            .await
            .unwrap()
            .clone()
            .unwrap();
        assert!(message.contains("ids must ascend"), "{message}");
        let again = storage.create(new_pet("Max", None)).await.unwrap_err();
        assert!(matches!(again, StorageError::WriterStopped(_)), "{again}");
    }
}
