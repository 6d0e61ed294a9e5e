//! The writer thread: the connection of the API's writes (the webhooks'
//! bookkeeping has its own, and they take turns, `gate.rs`). It takes
//! every write that is waiting, commits the group in one transaction (one
//! fsync), checks that the file it wrote is still the database's, makes
//! memory show the group, moves the feed's head past the group's events,
//! and only then answers each write.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{oneshot, watch};

use super::feed::{EventLog, purge};
use super::gate::WriteGate;
use super::lock::DatabaseLock;
use super::memory::{Committed, SharedMemory, write};
use super::schema::sqlite;
use super::writes::{Create, CreateOnce, Place, Update, Write, purge_records};
use crate::storage::{StorageError, StorageMetrics};

/// The most writes (creates, orders) one transaction commits.
const MAX_GROUP: usize = 512;

/// How often an idle writer checks that the database path still names the
/// file it has open (it also checks after every commit, before answering).
const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Where a write's answer goes.
pub(super) type Reply<T> = oneshot::Sender<Result<T, StorageError>>;

/// What the writer is asked to do.
pub(super) enum WriteJob {
    /// A write committed with others in a group.
    Group(GroupJob),
    /// Delete at most this many idempotency records made before this time.
    Purge(i64, usize, Reply<usize>),
    /// Delete at most this many of the oldest events, committed before
    /// this time (microseconds).
    PurgeEvents(i64, usize, Reply<usize>),
    /// Stop, having committed what came before.
    Close(oneshot::Sender<()>),
}

/// A write waiting for the writer, with where its answer goes. Writes
/// with an idempotency key are boxed: the common write, a plain create,
/// stays small on the channel.
pub(super) enum GroupJob {
    Create(Job<Create>),
    CreateOnce(Box<Job<CreateOnce>>),
    Place(Box<Job<Place>>),
    Update(Job<Update>),
}

impl From<Job<Create>> for GroupJob {
    fn from(job: Job<Create>) -> GroupJob {
        GroupJob::Create(job)
    }
}

impl From<Job<CreateOnce>> for GroupJob {
    fn from(job: Job<CreateOnce>) -> GroupJob {
        GroupJob::CreateOnce(Box::new(job))
    }
}

impl From<Job<Place>> for GroupJob {
    fn from(job: Job<Place>) -> GroupJob {
        GroupJob::Place(Box::new(job))
    }
}

impl From<Job<Update>> for GroupJob {
    fn from(job: Job<Update>) -> GroupJob {
        GroupJob::Update(job)
    }
}

/// One write and the request waiting for its outcome.
pub(super) struct Job<W: Write> {
    write: W,
    reply: Reply<W::Outcome>,
}

impl<W: Write> Job<W> {
    /// `write`, answered on `reply`.
    pub(super) fn new(write: W, reply: Reply<W::Outcome>) -> Job<W> {
        Job { write, reply }
    }

    /// Applies the write in the group's transaction; on an error, the job
    /// comes back to be failed with the rest of the group.
    fn apply(
        self,
        tx: &Connection,
        events: &mut EventLog,
    ) -> Result<Box<dyn Applied>, (Job<W>, rusqlite::Error)> {
        match self.write.apply(tx, events) {
            Ok(applied) => Ok(Box::new(Done { job: self, applied })),
            Err(error) => Err((self, error)),
        }
    }

    fn fail(self, error: StorageError) {
        // A request whose client hung up has no one to tell.
        drop(self.reply.send(Err(error)));
    }
}

impl GroupJob {
    fn apply(
        self,
        tx: &Connection,
        events: &mut EventLog,
    ) -> Result<Box<dyn Applied>, (GroupJob, rusqlite::Error)> {
        match self {
            GroupJob::Create(job) => job.apply(tx, events).map_err(|(j, e)| (j.into(), e)),
            GroupJob::CreateOnce(job) => job.apply(tx, events).map_err(|(j, e)| (j.into(), e)),
            GroupJob::Place(job) => job.apply(tx, events).map_err(|(j, e)| (j.into(), e)),
            GroupJob::Update(job) => job.apply(tx, events).map_err(|(j, e)| (j.into(), e)),
        }
    }

    fn fail(self, error: StorageError) {
        match self {
            GroupJob::Create(job) => job.fail(error),
            GroupJob::CreateOnce(job) => job.fail(error),
            GroupJob::Place(job) => job.fail(error),
            GroupJob::Update(job) => job.fail(error),
        }
    }
}

/// A write done in the group's transaction, with what it did.
struct Done<W: Write> {
    job: Job<W>,
    applied: W::Applied,
}

/// A [`Done`] of any kind of write, as the group holds it until it is
/// committed.
trait Applied: Send {
    /// Makes memory show the write (the group is committed).
    fn remember(&self, memory: &mut Committed);
    /// Answers the request (the group is committed and in memory).
    fn answer(self: Box<Self>);
    /// Answers the request with `error` (the group is not committed).
    fn fail(self: Box<Self>, error: StorageError);
}

impl<W: Write> Applied for Done<W> {
    fn remember(&self, memory: &mut Committed) {
        self.job.write.remember(&self.applied, memory);
    }

    fn answer(self: Box<Self>) {
        let Done { job, applied } = *self;
        let outcome = job.write.outcome(applied);
        drop(job.reply.send(outcome));
    }

    fn fail(self: Box<Self>, error: StorageError) {
        self.job.fail(error);
    }
}

/// Which file a path names: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileIdentity {
    device: u64,
    inode: u64,
}

impl FileIdentity {
    pub(super) fn of(path: &Path) -> std::io::Result<FileIdentity> {
        let metadata = std::fs::metadata(path)?;
        Ok(FileIdentity {
            device: metadata.dev(),
            inode: metadata.ino(),
        })
    }
}

/// The writer thread's state: the only writing connection, and what it
/// needs to notice that its file was deleted or replaced.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) path: PathBuf,
    /// The file opened at start-up.
    pub(super) identity: FileIdentity,
    /// Set once the path no longer names that file; writes are refused.
    pub(super) replaced: Arc<AtomicBool>,
    pub(super) log: slog::Logger,
    pub(super) metrics: StorageMetrics,
    /// The feed's ids, assigned in commit order.
    pub(super) events: EventLog,
    /// The feed's head: sent after each commit that wrote events.
    pub(super) head: Arc<watch::Sender<i64>>,
    /// Taken around each transaction, in turn with the webhooks'.
    pub(super) gate: WriteGate,
    /// Held for as long as the writer owns the database.
    pub(super) _lock: DatabaseLock,
}

impl Writer {
    /// Takes jobs until told to close or until every sender is gone,
    /// committing each group of waiting writes at once, and checking the
    /// file between groups when idle.
    pub(super) fn run(mut self, jobs: mpsc::Receiver<WriteJob>, memory: &SharedMemory) {
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
            let mut purge_events = None;
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    WriteJob::Group(job) => group.push(job),
                    WriteJob::Purge(before, limit, reply) => {
                        purge = Some((before, limit, reply));
                        break;
                    }
                    WriteJob::PurgeEvents(before, limit, reply) => {
                        purge_events = Some((before, limit, reply));
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
            let gate = self.gate.clone();
            if let Some((before, limit, reply)) = purge {
                let held = gate.enter();
                let purged = purge_records(&self.conn, before, limit)
                    .map_err(sqlite("purging idempotency records"));
                drop(held);
                let _ = reply.send(purged);
            }
            if let Some((before, limit, reply)) = purge_events {
                let held = gate.enter();
                let purged = self.purge_events(before, limit, memory);
                drop(held);
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
        slog::error!(self.log, "the database file was deleted or replaced; refusing writes until restarted";
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
    fn commit_group(&mut self, group: Vec<GroupJob>, memory: &SharedMemory) {
        if group.is_empty() {
            return;
        }
        if !self.check_file() {
            return group
                .into_iter()
                .for_each(|job| job.fail(self.file_replaced()));
        }
        let size = group.len();
        self.events.begin_group();
        let held = self.gate.enter();
        let applied = apply_all(&mut self.conn, &mut self.events, group);
        drop(held);
        let applied = match applied {
            Ok(applied) => applied,
            Err(failed) => {
                // Nothing of the group is stored: its ids go to the next.
                self.events.roll_back();
                return failed.fail_all();
            }
        };
        // Written into a file that the path no longer names: lost at the
        // next start, so never acknowledged.
        if !self.check_file() {
            return applied
                .into_iter()
                .for_each(|job| job.fail(self.file_replaced()));
        }
        self.metrics.commit_group_size.observe(size as f64);
        // Memory is changed before anyone is answered, in the order of the
        // transaction. A closed storage has no memory left to change.
        let written = self.events.written();
        if let Some(memory) = write(memory).as_mut() {
            applied.iter().for_each(|job| job.remember(memory));
            memory.events.append(written);
        }
        // Then the head, so that a page read once a request is answered
        // reaches its events (and finds in memory what they are about).
        if let Some(last) = written.last() {
            self.head.send_replace(last.id);
        }
        applied.into_iter().for_each(|job| job.answer());
    }

    /// Deletes at most `limit` of the oldest events committed before
    /// `before` (microseconds), raising the floor; memory follows.
    fn purge_events(
        &mut self,
        before: i64,
        limit: usize,
        memory: &SharedMemory,
    ) -> Result<usize, StorageError> {
        let purged = purge(&mut self.conn, before, limit).map_err(sqlite("purging events"))?;
        if let Some(memory) = write(memory).as_mut() {
            memory.events.purged(&purged);
        }
        Ok(purged.count)
    }
}

/// A group that could not be committed, and every write of it.
struct GroupFailure {
    source: Arc<rusqlite::Error>,
    applied: Vec<Box<dyn Applied>>,
    pending: Vec<GroupJob>,
}

impl GroupFailure {
    /// Answers every write of the group with the error.
    fn fail_all(self) {
        let error = || StorageError::Sqlite {
            doing: "committing a group of writes",
            source: Arc::clone(&self.source),
        };
        self.applied.into_iter().for_each(|job| job.fail(error()));
        self.pending.into_iter().for_each(|job| job.fail(error()));
    }
}

/// Applies the writes in one transaction, in order; all or none are
/// stored.
fn apply_all(
    conn: &mut Connection,
    events: &mut EventLog,
    group: Vec<GroupJob>,
) -> Result<Vec<Box<dyn Applied>>, GroupFailure> {
    let failure = |error, applied, pending| GroupFailure {
        source: Arc::new(error),
        applied,
        pending,
    };
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return Err(failure(e, Vec::new(), group)),
    };
    let mut applied = Vec::with_capacity(group.len());
    let mut pending = group.into_iter();
    while let Some(job) = pending.next() {
        match job.apply(&tx, events) {
            Ok(done) => applied.push(done),
            Err((job, e)) => {
                let rest = std::iter::once(job).chain(pending).collect();
                return Err(failure(e, applied, rest));
            }
        }
    }
    match tx.commit() {
        Ok(()) => Ok(applied),
        Err(e) => Err(failure(e, applied, Vec::new())),
    }
}
