//! The embedded default: one SQLite file in WAL mode.
//!
//! - **Durability.** `synchronous=FULL` makes every commit fsync the WAL, and
//!   `create` answers only after its commit returned.
//! - **One writer, group commit.** All writes go to one thread that owns the
//!   only writing connection, so writers never meet `SQLITE_BUSY`. It takes
//!   every create that is waiting and commits them in one transaction — one
//!   fsync for the group instead of one each.
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

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockWriteGuard, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;

mod catalogue;
mod ids;
mod keys;
mod lock;
mod orders;
mod schema;

pub use keys::SqliteKeys;
pub(super) use schema::is_unavailable;

use self::catalogue::Catalogue;
use self::lock::DatabaseLock;
use self::orders::OrderBook;
use self::schema::{BUSY_TIMEOUT, configure_and_migrate, sqlite};
use super::idempotency::{Claim, Claims, CreateOutcome, Idempotency};
use super::orders::{
    OrderPage, OrderQuery, Owner, OwnerId, PlaceOutcome, StoredOrder, UpdateOutcome, transition,
};
use super::{
    FatalSender, ListQuery, OpenError, Page, Storage, StorageError, StorageMetrics, StorageStats,
};
use chrono::{DateTime, Utc};
use petstore_api::model::{
    Inventory, NewPet, Order, OrderStatus, OrderUpdateStatus, Pet, PetStatus,
};

/// The most writes (creates, orders) one transaction commits.
const MAX_GROUP: usize = 512;
/// How often an idle writer checks that the database file is still the one
/// it has open (it also checks after every commit, before answering).
const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(2);

const SELECT_PET: &str = "SELECT id, name, category_id, status FROM pets";

type Reply<T> = oneshot::Sender<Result<T, StorageError>>;

enum WriteJob {
    /// A write committed with others in a group.
    Group(GroupJob),
    /// Delete at most this many idempotency records made before this time.
    Purge(i64, usize, oneshot::Sender<Result<usize, StorageError>>),
    Close(oneshot::Sender<()>),
}

/// A write waiting for the writer, with its idempotency key if it has one.
enum GroupJob {
    Create {
        pet: NewPet,
        once: Option<(Idempotency, Claim)>,
        reply: Reply<CreateOutcome>,
    },
    Place {
        pet_id: i64,
        // Boxed: the common write (a create) stays small.
        owner: Box<Owner>,
        once: Option<(Idempotency, Claim)>,
        reply: Reply<PlaceOutcome>,
    },
    Update {
        id: i64,
        to: OrderStatus,
        reply: Reply<UpdateOutcome>,
    },
}

impl GroupJob {
    fn fail(self, error: StorageError) {
        // A request whose client hung up has no one to tell.
        match self {
            GroupJob::Create { reply, .. } => drop(reply.send(Err(error))),
            GroupJob::Place { reply, .. } => drop(reply.send(Err(error))),
            GroupJob::Update { reply, .. } => drop(reply.send(Err(error))),
        }
    }
}

/// What the writer's transaction did for one write.
enum Applied {
    Created(i64),
    /// The key's live record, for the same pet (or a record that does not
    /// decode).
    Replayed(Result<Pet, StorageError>),
    KeyReused,
    Placed(PlaceOutcome),
    /// The order's outcome, and whether its status changed.
    Updated(UpdateOutcome, bool),
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
}

impl SqliteStorage {
    /// Opens (creating if needed) the database file at `path` and brings its
    /// schema up to date. Refuses when another process holds the file (see
    /// `lock.rs`) or when the file cannot be written. Errors are logged to
    /// `log`; a writer thread that dies is reported to `fatal`.
    pub async fn open(
        path: PathBuf,
        log: slog::Logger,
        fatal: FatalSender,
        metrics: StorageMetrics,
    ) -> Result<(SqliteStorage, SqliteKeys), OpenError> {
        tokio::task::spawn_blocking(move || SqliteStorage::open_blocking(path, log, fatal, metrics))
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
    ) -> Result<(SqliteStorage, SqliteKeys), OpenError> {
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
        let keys_conn = Connection::open(&path)
            .and_then(|keys| keys.busy_timeout(BUSY_TIMEOUT).map(|()| keys))
            .map_err(sqlite("opening a connection for the keys"))
            .map_err(in_file)?;
        let identity = FileIdentity::of(&path).map_err(|source| OpenError::Io {
            doing: format!("reading the metadata of {}", path.display()),
            source,
        })?;
        let memory = Arc::new(RwLock::new(Some(memory)));
        let replaced = Arc::new(AtomicBool::new(false));

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
        };
        Ok((storage, SqliteKeys::on(keys_conn)))
    }

    /// Hands a write to the writer and waits for its commit.
    async fn write<T>(&self, job: impl FnOnce(Reply<T>) -> GroupJob) -> Result<T, StorageError> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteJob::Group(job(reply)))
            .map_err(|_| self.writer_gone())?;
        answer.await.map_err(|_| self.writer_gone())?
    }

    /// Why a create could not reach the writer: it died, or the storage closed.
    fn writer_gone(&self) -> StorageError {
        if self.closing.load(Ordering::SeqCst) {
            StorageError::Closed
        } else {
            StorageError::WriterStopped("it panicked; the process is shutting down".into())
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// Which file a path names: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
}

impl FileIdentity {
    fn of(path: &Path) -> std::io::Result<FileIdentity> {
        let metadata = std::fs::metadata(path)?;
        Ok(FileIdentity {
            device: metadata.dev(),
            inode: metadata.ino(),
        })
    }
}

/// The writer thread's state: the only writing connection, and what it
/// needs to notice that its file was deleted or replaced.
struct Writer {
    conn: Connection,
    path: PathBuf,
    /// The file opened at start-up.
    identity: FileIdentity,
    /// Set once the path no longer names that file; creates are refused.
    replaced: Arc<AtomicBool>,
    log: slog::Logger,
    metrics: StorageMetrics,
    /// Held for as long as the writer owns the database.
    _lock: DatabaseLock,
}

impl Writer {
    /// Takes jobs until told to close or until every sender is gone,
    /// committing each group of waiting creates at once, and checking the
    /// file between groups when idle.
    fn run(mut self, jobs: mpsc::Receiver<WriteJob>, memory: &SharedMemory) {
        loop {
            let first = match jobs.recv_timeout(FILE_CHECK_INTERVAL) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.check_file();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut group = Vec::new();
            let mut close = None;
            let mut purge = None;
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    WriteJob::Group(job) => group.push(job),
                    WriteJob::Purge(before, limit, reply) => {
                        purge = Some((before, limit, reply));
                        break;
                    }
                    WriteJob::Close(done) => {
                        close = Some(done);
                        break;
                    }
                }
                if group.len() < MAX_GROUP {
                    next = jobs.try_recv().ok();
                }
            }
            self.commit_group(group, memory);
            if let Some((before, limit, reply)) = purge {
                let purged = purge_records(&self.conn, before, limit)
                    .map_err(sqlite("purging idempotency records"));
                let _ = reply.send(purged);
            }
            if let Some(done) = close {
                drop(self);
                let _ = done.send(());
                return;
            }
        }
    }

    /// Whether the path still names the file the server has open; logs the
    /// moment it stops doing so.
    fn check_file(&mut self) -> bool {
        if self.replaced.load(Ordering::SeqCst) {
            return false;
        }
        let now = FileIdentity::of(&self.path);
        if now.as_ref().is_ok_and(|now| *now == self.identity) {
            return true;
        }
        self.replaced.store(true, Ordering::SeqCst);
        slog::error!(self.log, "the database file was deleted or replaced; refusing creates until restarted";
        "path" => %self.path.display(),
        "now" => match now {
            Ok(_) => "another file".to_owned(),
            Err(e) => e.to_string(),
        });
        false
    }

    fn file_replaced(&self) -> StorageError {
        StorageError::FileReplaced {
            path: self.path.clone(),
        }
    }

    /// Commits the group, checks that the committed file is still the
    /// database's, then makes the group visible to readers, then answers:
    /// a write is never acknowledged before it is durable and readable.
    ///
    /// A write with an idempotency key first looks for the key's live
    /// record in the same transaction, so a retry queued behind the first
    /// request finds the first one's record even within one group.
    fn commit_group(&mut self, group: Vec<GroupJob>, memory: &SharedMemory) {
        if group.is_empty() {
            return;
        }
        if !self.check_file() {
            return fail_all(group, || self.file_replaced());
        }
        let applied = match apply_all(&mut self.conn, &group) {
            Ok(applied) => applied,
            Err(e) => {
                let source = Arc::new(e);
                return fail_all(group, || StorageError::Sqlite {
                    doing: "committing a group of writes",
                    source: Arc::clone(&source),
                });
            }
        };
        // Written into a file that the path no longer names: lost at the
        // next start, so never acknowledged.
        if !self.check_file() {
            return fail_all(group, || self.file_replaced());
        }
        self.metrics.commit_group_size.observe(group.len() as f64);
        // The claims go before the answers: once a request is answered, a
        // retry with its key must find the committed record, not a claim.
        // Memory is changed before anyone is answered, in the order of the
        // transaction.
        let mut answers = Vec::with_capacity(group.len());
        {
            let mut memory = write(memory);
            for (job, applied) in group.into_iter().zip(applied) {
                answers.push(settle(job, applied, memory.as_mut()));
            }
        }
        answers.into_iter().for_each(Answer::send);
    }
}

/// A committed write's answer, sent once memory shows the whole group.
enum Answer {
    Create(Reply<CreateOutcome>, Result<CreateOutcome, StorageError>),
    Place(Reply<PlaceOutcome>, PlaceOutcome),
    Update(Reply<UpdateOutcome>, UpdateOutcome),
    /// Already answered (with an error).
    Sent,
}

impl Answer {
    fn send(self) {
        // A request whose client hung up has no one to tell.
        match self {
            Answer::Create(reply, outcome) => drop(reply.send(outcome)),
            Answer::Place(reply, outcome) => drop(reply.send(Ok(outcome))),
            Answer::Update(reply, outcome) => drop(reply.send(Ok(outcome))),
            Answer::Sent => {}
        }
    }
}

/// Applies one committed write to memory (when the storage is still open)
/// and returns its answer.
fn settle(job: GroupJob, applied: Applied, memory: Option<&mut Committed>) -> Answer {
    match (job, applied) {
        (GroupJob::Create { pet, once, reply }, applied) => {
            drop(once);
            let outcome = match applied {
                Applied::Created(id) => {
                    let pet = Pet::from_new(id, pet);
                    if let Some(memory) = memory {
                        memory.pets.push(&pet);
                    }
                    Ok(CreateOutcome::Created(pet))
                }
                Applied::Replayed(pet) => pet.map(CreateOutcome::Replayed),
                Applied::KeyReused => Ok(CreateOutcome::KeyReused),
                _ => Err(StorageError::Invariant("a create applied as another write")),
            };
            Answer::Create(reply, outcome)
        }
        (
            GroupJob::Place {
                once, owner, reply, ..
            },
            Applied::Placed(outcome),
        ) => {
            drop(once);
            if let (PlaceOutcome::Placed(order), Some(memory)) = (&outcome, memory) {
                memory.pets.set_status(order.pet_id, PetStatus::Pending);
                memory.orders.push(order, Some(&owner.id));
            }
            Answer::Place(reply, outcome)
        }
        (GroupJob::Update { reply, .. }, Applied::Updated(outcome, changed)) => {
            if let (UpdateOutcome::Done(order), true, Some(memory)) = (&outcome, changed, memory) {
                memory.orders.set_status(order.id, order.status);
                memory
                    .pets
                    .set_status(order.pet_id, order.status.pet_status());
            }
            Answer::Update(reply, outcome)
        }
        (job, _) => {
            job.fail(StorageError::Invariant("a write applied as another"));
            Answer::Sent
        }
    }
}

/// Answers every write of the group with the error `error` makes.
fn fail_all(group: Vec<GroupJob>, error: impl Fn() -> StorageError) {
    for job in group {
        job.fail(error());
    }
}

/// Applies the writes in one transaction, in order; all or none are
/// stored. A write with an idempotency key whose live record exists
/// changes nothing.
fn apply_all(conn: &mut Connection, jobs: &[GroupJob]) -> rusqlite::Result<Vec<Applied>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut applied = Vec::with_capacity(jobs.len());
    for job in jobs {
        applied.push(match job {
            GroupJob::Create { pet, once, .. } => {
                apply_create(&tx, pet, once.as_ref().map(|(once, _)| once))?
            }
            GroupJob::Place {
                pet_id,
                owner,
                once,
                ..
            } => Applied::Placed(apply_place(
                &tx,
                *pet_id,
                owner,
                once.as_ref().map(|(once, _)| once),
            )?),
            GroupJob::Update { id, to, .. } => {
                let (outcome, changed) = apply_update(&tx, *id, *to)?;
                Applied::Updated(outcome, changed)
            }
        });
    }
    tx.commit()?;
    Ok(applied)
}

fn apply_create(
    tx: &Connection,
    pet: &NewPet,
    once: Option<&Idempotency>,
) -> rusqlite::Result<Applied> {
    if let Some(once) = once
        && let Some(found) = live_record(tx, once)?
    {
        return Ok(found);
    }
    let status = pet.status.map(PetStatus::as_str);
    let id = tx
        .prepare_cached(
            "INSERT INTO pets (name, category_id, status) VALUES (?1, ?2, ?3) RETURNING id",
        )?
        .query_row(params![pet.name, pet.category_id, status], |row| row.get(0))?;
    if let Some(once) = once {
        // Replaces an expired record of the key, if one is left.
        tx.prepare_cached(
            "INSERT INTO idempotency_keys
                 (scope, key, fingerprint, created_at, pet_id, name, category_id, status)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (scope, key) DO UPDATE SET
                 fingerprint = excluded.fingerprint, created_at = excluded.created_at,
                 pet_id = excluded.pet_id, name = excluded.name,
                 category_id = excluded.category_id, status = excluded.status",
        )?
        .execute(params![
            &once.caller.0[..],
            once.key,
            once.fingerprint.as_bytes(),
            once.now,
            id,
            pet.name,
            pet.category_id,
            status
        ])?;
    }
    Ok(Applied::Created(id))
}

/// Orders the animal if it is available: its status and the new order in
/// the group's transaction.
fn apply_place(
    tx: &Connection,
    pet_id: i64,
    owner: &Owner,
    once: Option<&Idempotency>,
) -> rusqlite::Result<PlaceOutcome> {
    if let Some(once) = once
        && let Some(found) = live_order_record(tx, once)?
    {
        return Ok(found);
    }
    let reserved = tx
        .prepare_cached(
            "UPDATE pets SET status = 'pending' WHERE id = ?1 AND status = 'available'",
        )?
        .execute(params![pet_id])?;
    if reserved == 0 {
        let status: Option<Option<String>> = tx
            .prepare_cached("SELECT status FROM pets WHERE id = ?1")?
            .query_row(params![pet_id], |row| row.get(0))
            .optional()?;
        return Ok(match status {
            None => PlaceOutcome::NoSuchPet,
            Some(status) => {
                PlaceOutcome::NotAvailable(status.as_deref().and_then(PetStatus::parse))
            }
        });
    }
    let placed_at = Utc::now();
    let micros = placed_at.timestamp_micros();
    let id: i64 = tx
        .prepare_cached(
            "INSERT INTO orders (pet_id, status, placed_at, owner, placed_by)
             VALUES (?1, 'placed', ?2, ?3, ?4) RETURNING id",
        )?
        .query_row(
            params![pet_id, micros, &owner.id.0[..], owner.name],
            |row| row.get(0),
        )?;
    if let Some(once) = once {
        tx.prepare_cached(
            "INSERT INTO order_idempotency_keys
                 (scope, key, fingerprint, created_at, order_id, pet_id, placed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (scope, key) DO UPDATE SET
                 fingerprint = excluded.fingerprint, created_at = excluded.created_at,
                 order_id = excluded.order_id, pet_id = excluded.pet_id,
                 placed_at = excluded.placed_at",
        )?
        .execute(params![
            &once.caller.0[..],
            once.key,
            once.fingerprint.as_bytes(),
            once.now,
            id,
            pet_id,
            micros
        ])?;
    }
    Ok(PlaceOutcome::Placed(StoredOrder::new(Order {
        id,
        pet_id,
        status: OrderStatus::Placed,
        placed_at: micros_to_time(micros),
        placed_by: Some(owner.name.clone()),
    })))
}

/// Gives the order the status `to` (and its animal the status that goes
/// with it) if the order may change so; says whether it changed.
fn apply_update(
    tx: &Connection,
    id: i64,
    to: OrderStatus,
) -> rusqlite::Result<(UpdateOutcome, bool)> {
    let found = tx
        .prepare_cached(&format!("SELECT {ORDER_COLUMNS} FROM orders WHERE id = ?1"))?
        .query_row(params![id], order_from_row)
        .optional()?;
    let Some(mut order) = found else {
        return Ok((UpdateOutcome::NoSuchOrder, false));
    };
    match transition(order.status, to) {
        Err(from) => Ok((UpdateOutcome::Invalid(from), false)),
        Ok(None) => Ok((UpdateOutcome::Done(StoredOrder::new(order)), false)),
        Ok(Some(to)) => {
            tx.prepare_cached("UPDATE orders SET status = ?2 WHERE id = ?1")?
                .execute(params![id, to.as_str()])?;
            tx.prepare_cached("UPDATE pets SET status = ?2 WHERE id = ?1")?
                .execute(params![order.pet_id, to.pet_status().as_str()])?;
            order.status = to;
            Ok((UpdateOutcome::Done(StoredOrder::new(order)), true))
        }
    }
}

/// A time stored as microseconds since the Unix epoch.
fn micros_to_time(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

/// What a key's live record says of a request with it.
enum Live<T> {
    /// The same body: the first answer, `T`, again.
    Replay(T),
    /// Another body.
    Reused,
}

/// The key's live record in what `select` reads (`fingerprint, created_at`
/// and then the first answer's columns, for `scope = ?1 AND key = ?2`),
/// the answer read by `replay`.
fn live_key<T>(
    tx: &Connection,
    select: &str,
    once: &Idempotency,
    replay: impl FnOnce(&rusqlite::Row) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<Live<T>>> {
    let mut select = tx.prepare_cached(select)?;
    let mut rows = select.query(params![&once.caller.0[..], once.key])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let created_at: i64 = row.get(1)?;
    if !once.is_live(created_at) {
        return Ok(None);
    }
    let fingerprint: Vec<u8> = row.get(0)?;
    if fingerprint != once.fingerprint.as_bytes() {
        return Ok(Some(Live::Reused));
    }
    replay(row).map(|answer| Some(Live::Replay(answer)))
}

/// The key's live record, as what a create with it comes to: a replay of
/// the same pet, or a reuse of the key for another.
fn live_record(tx: &Connection, once: &Idempotency) -> rusqlite::Result<Option<Applied>> {
    let found = live_key(
        tx,
        "SELECT fingerprint, created_at, pet_id, name, category_id, status
         FROM idempotency_keys WHERE scope = ?1 AND key = ?2",
        once,
        |row| Ok((row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?)),
    )?;
    Ok(found.map(|live| match live {
        Live::Replay(stored) => Applied::Replayed(pet_from_row(stored)),
        Live::Reused => Applied::KeyReused,
    }))
}

/// The order key's live record, as what an order with it comes to: a
/// replay of the same order, or a reuse of the key for another animal.
fn live_order_record(
    tx: &Connection,
    once: &Idempotency,
) -> rusqlite::Result<Option<PlaceOutcome>> {
    let found = live_key(
        tx,
        "SELECT fingerprint, created_at, order_id, pet_id, placed_at
         FROM order_idempotency_keys WHERE scope = ?1 AND key = ?2",
        once,
        |row| {
            Ok(Order {
                id: row.get(2)?,
                pet_id: row.get(3)?,
                status: OrderStatus::Placed,
                placed_at: micros_to_time(row.get(4)?),
                // The key that placed it is the one replaying it.
                placed_by: None,
            })
        },
    )?;
    Ok(found.map(|live| match live {
        Live::Replay(order) => PlaceOutcome::Replayed(StoredOrder::new(order)),
        Live::Reused => PlaceOutcome::KeyReused,
    }))
}

/// Deletes at most `limit` idempotency records (of creates, then of
/// orders) made before `before`.
fn purge_records(conn: &Connection, before: i64, limit: usize) -> rusqlite::Result<usize> {
    let mut purged = 0;
    for table in ["idempotency_keys", "order_idempotency_keys"] {
        purged += conn
            .prepare_cached(&format!(
                "DELETE FROM {table} WHERE rowid IN
                     (SELECT rowid FROM {table} WHERE created_at < ?1 LIMIT ?2)"
            ))?
            .execute(params![before, (limit - purged) as i64])?;
    }
    Ok(purged)
}

/// A row as stored, before it is checked.
type RawRow = (
    i64,
    rusqlite::types::Value,
    rusqlite::types::Value,
    rusqlite::types::Value,
);

/// Decodes a stored row into a pet, naming the id and the column of any
/// value that is not what the schema promises (another program may have
/// written it).
fn pet_from_row((id, name, category_id, status): RawRow) -> Result<Pet, StorageError> {
    use rusqlite::types::Value;
    let wrong = |column, value: &Value, expected| StorageError::Undecodable {
        id,
        column,
        value: describe(value),
        expected,
    };
    let name = match name {
        Value::Text(name) => name,
        other => return Err(wrong("name", &other, "name (text)")),
    };
    let category_id = match category_id {
        Value::Integer(category_id) => category_id,
        other => return Err(wrong("category_id", &other, "categoryId (int64)")),
    };
    let status = match &status {
        Value::Null => None,
        Value::Text(text) => Some(
            PetStatus::parse(text)
                .ok_or_else(|| wrong("status", &status, "status (available, pending, sold)"))?,
        ),
        other => return Err(wrong("status", other, "status (available, pending, sold)")),
    };
    Ok(Pet {
        id,
        name,
        category_id,
        status,
    })
}

fn describe(value: &rusqlite::types::Value) -> String {
    use rusqlite::types::Value;
    match value {
        Value::Null => "NULL".into(),
        Value::Integer(i) => format!("the integer {i}"),
        Value::Real(r) => format!("the real {r}"),
        Value::Text(t) => format!("the text {t:?}"),
        Value::Blob(b) => format!("a blob of {} bytes", b.len()),
    }
}

#[async_trait::async_trait]
impl Storage for SqliteStorage {
    async fn create(&self, pet: NewPet) -> Result<Pet, StorageError> {
        let created = self.write(|reply| GroupJob::Create {
            pet,
            once: None,
            reply,
        });
        match created.await? {
            CreateOutcome::Created(pet) => Ok(pet),
            _ => Err(StorageError::Invariant(
                "a create without an idempotency key came to something else than a create",
            )),
        }
    }

    async fn create_idempotent(
        &self,
        pet: NewPet,
        idempotency: Idempotency,
    ) -> Result<CreateOutcome, StorageError> {
        let Some(claim) = self.claims.claim(&idempotency) else {
            return Ok(CreateOutcome::KeyInUse);
        };
        self.write(|reply| GroupJob::Create {
            pet,
            once: Some((idempotency, claim)),
            reply,
        })
        .await
    }

    async fn purge_idempotency(
        &self,
        made_before: i64,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteJob::Purge(made_before, limit, reply))
            .map_err(|_| self.writer_gone())?;
        answer.await.map_err(|_| self.writer_gone())?
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
        self.write(|reply| GroupJob::Place {
            pet_id,
            owner: Box::new(owner),
            once,
            reply,
        })
        .await
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
            None => self.write(|reply| GroupJob::Update { id, to, reply }).await,
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
        let pets = read(&self.memory, |memory| memory.pets.len())?;
        Ok(StorageStats {
            pets: pets as u64,
            pool: None,
            shared: None,
        })
    }

    async fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
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

/// Everything the database holds, read once at start-up.
fn load(conn: &Connection) -> Result<Committed, StorageError> {
    Ok(Committed {
        pets: load_pets(conn)?,
        orders: load_orders(conn)?,
    })
}

fn load_pets(conn: &Connection) -> Result<Catalogue, StorageError> {
    let sql = sqlite("loading the catalogue");
    let mut catalogue = Catalogue::default();
    let mut select = conn
        .prepare(&format!("{SELECT_PET} ORDER BY id"))
        .map_err(&sql)?;
    let rows = select
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .map_err(&sql)?;
    for row in rows {
        catalogue.push(&pet_from_row(row.map_err(&sql)?)?);
    }
    Ok(catalogue)
}

fn load_orders(conn: &Connection) -> Result<OrderBook, StorageError> {
    let sql = sqlite("loading the orders");
    let mut orders = OrderBook::default();
    let mut select = conn
        .prepare(&format!(
            "SELECT {ORDER_COLUMNS}, owner FROM orders ORDER BY id"
        ))
        .map_err(&sql)?;
    let mut rows = select.query([]).map_err(&sql)?;
    while let Some(row) = rows.next().map_err(&sql)? {
        let order = order_from_row(row).map_err(&sql)?;
        let owner: Option<Vec<u8>> = row.get(5).map_err(&sql)?;
        let owner = owner.and_then(|bytes| <[u8; 32]>::try_from(bytes).ok().map(OwnerId));
        orders.push(&order, owner.as_ref());
    }
    Ok(orders)
}

/// The columns [`order_from_row`] reads.
const ORDER_COLUMNS: &str = "id, pet_id, status, placed_at, placed_by";

/// An order as stored: [`ORDER_COLUMNS`], `placed_at` in microseconds.
fn order_from_row(row: &rusqlite::Row) -> rusqlite::Result<Order> {
    let id = row.get(0)?;
    let status: String = row.get(2)?;
    let status = OrderStatus::parse(&status).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(
            2,
            format!("status of order {id}: {status:?}"),
            rusqlite::types::Type::Text,
        )
    })?;
    Ok(Order {
        id,
        pet_id: row.get(1)?,
        status,
        placed_at: micros_to_time(row.get(3)?),
        placed_by: row.get(4)?,
    })
}

/// What the database holds, in memory: every pet and every order.
#[derive(Default)]
struct Committed {
    pets: Catalogue,
    orders: OrderBook,
}

/// The committed state in memory; `None` once the storage is closed.
type SharedMemory = RwLock<Option<Committed>>;

/// Reads the committed state with `f`, or fails once the storage is closed.
fn read<T>(memory: &SharedMemory, f: impl FnOnce(&Committed) -> T) -> Result<T, StorageError> {
    // A poisoned lock means a panic elsewhere while holding it; `push`
    // checks before it changes anything, so memory is still whole.
    let guard = memory.read().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().map(f).ok_or(StorageError::Closed)
}

fn write(memory: &SharedMemory) -> RwLockWriteGuard<'_, Option<Committed>> {
    memory.write().unwrap_or_else(|e| e.into_inner())
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
        .map(|(storage, _keys)| storage)
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
        let (storage, _keys) =
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
