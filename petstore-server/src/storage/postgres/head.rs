//! The feed's head on PostgreSQL: the largest event id below which no
//! event can still appear, found by a watcher task on each instance.
//!
//! # Why a page may not simply read what is committed
//!
//! An event's id is taken from `events_ids` before its transaction commits
//! (`feed.rs`), so id 101 can be visible while 100 is still uncommitted: a
//! reader that went on from 101 would never see 100. A page therefore only
//! returns ids up to the head, and the head only passes an id once every
//! transaction that may still commit a smaller one has ended.
//!
//! # How the head is found
//!
//! Each round, in this order, in separate statements:
//!
//! 1. `s` = the last value `events_ids` handed out ([`IDS_TAKEN`](super::event_statements::IDS_TAKEN); a
//!    sequence is not transactional: this includes values taken by
//!    transactions still running), and the floor, for the kept pages
//!    (`kept_pages.rs`, [`Head::floor`]);
//! 2. then `next` = the next transaction id the cluster will assign, and
//!    `lsn` = the end of the WAL written so far, read in a later statement
//!    ([`HORIZON`](super::event_statements::HORIZON));
//! 3. `s` becomes the head once a later round (on the same connection)
//!    finds its snapshot's `xmin` at least `next` — no transaction with an
//!    xid below `next` is running any more — and the WAL durable up to
//!    `lsn`.
//!
//! Why that holds: a transaction takes an event id in a trigger that runs
//! after its statement changed a row, and changing a row assigns the
//! transaction its xid. So every transaction that took a value `≤ s` had
//! its xid before step 1 read `s`, hence before step 2 read `next`: its xid
//! is below `next`. Once `xmin ≥ next`, each of them has committed (its
//! events are visible to every snapshot taken from then on) or rolled back
//! (its ids are gone for good). No id `≤ s` can appear later.
//!
//! (`next` is not `pg_snapshot_xmax`: that is one past the latest
//! *completed* xid, and a transaction whose xid is larger than every
//! completed one is in neither the snapshot's `xmax` nor its `xip` list.
//! `age(xid)` counts from the next xid to assign when the statement has
//! none of its own: `xmax + age(xmax)` is it, read without assigning one.)
//!
//! Why the WAL too: a sequence logs its state to the WAL ahead of the
//! values it hands out, but a transaction that rolled back never flushes
//! it. Had the head passed ids of such a transaction, a crash (or a
//! failover) losing that WAL would hand the same ids out again, below the
//! head, where a page could skip them. Once the WAL up to `lsn` is flushed
//! (and, when the primary has synchronous standbys it can see, on them
//! too), the sequence comes back past `s` from any crash. A value that
//! waits only for the WAL's flush (a commit that does not wait for the
//! disk came after it: the webhooks' bookkeeping, or a URL that sets
//! `synchronous_commit = off`) is not left to the WAL writer, which may
//! take `wal_writer_delay` (200 ms) or three times that: once the flushed
//! position stands still between two rounds, the round has the WAL
//! flushed ([`FLUSH`](super::event_statements::FLUSH)) and looks again. The
//! comparisons mean something only within one server's life, so the
//! values still waiting are dropped whenever the watcher's connection is
//! a new one (the database may have restarted), and read again on it.
//!
//! Caveat: the head waits for *every* transaction with an xid in the
//! cluster, in any database, ours or not: a long writing transaction
//! anywhere (an idle one included, until `idle_in_transaction_session_timeout`
//! ends it) holds the head back for as long as it runs. It delays events,
//! never skips one.
//!
//! # When rounds run
//!
//! Right after each of this instance's writes that may have written events
//! commits, and when a page waits for the head (both by a local `Notify`),
//! at most one round per [`ROUND_GAP`]; as soon as another instance
//! notifies that it wrote (`LISTEN/NOTIFY`, `notify.rs`: a round that
//! followed this instance's writes notifies the others), and every
//! [`POLL`] in case a notification was lost; and, while a value waits for
//! older transactions to end, again after a short wait that grows to
//! [`POLL`].
//! A round is two small statements on a connection of the watcher's own,
//! made and replaced as the shared connections are (`shared.rs`), so the
//! head comes back by itself after a database restart or a failover;
//! failures are logged once and retried. A third, after the value is
//! published, when this instance wrote, tells the others and has the WAL
//! flushed (`notify.rs`), or only has it flushed, when the oldest value
//! waits for nothing else and nothing else flushes it.
//!
//! # Reading what was acknowledged, on any instance
//!
//! A page also reads the last id taken (`feed.rs`). When it went up to the
//! head and that value is above it, ids were handed out that the head has
//! not passed yet, perhaps to a change acknowledged before the page was
//! asked for: another instance's (which this one's head learns of when
//! that instance's notification arrives, or at its next poll) or this
//! one's (its round not run yet). The page is then read
//! again once the head reaches that value ([`Head::reaching`], which wakes
//! the watcher and waits at most [`SETTLE_WAIT`]). So a client that got
//! its `201` from any instance and then reads the feed on any sees its
//! event; a page costs nothing more while nothing is being written. Writes
//! themselves never wait for the head.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::error::SqlState;

use super::connect::Primary;
use super::event_statements::FLUSH;
use super::notify::{Listener, Sender};
use super::shared::{STATEMENT_TIMEOUT, SharedConnections};
use crate::storage::StorageError;
use crate::storage::outage::Outage;

/// How often the head is looked for with nothing else to prompt it (other
/// instances' writes whose notification was lost).
pub(super) const POLL: Duration = Duration::from_millis(200);

/// How long the floor a round read is taken to be the floor: past it (the
/// rounds are late, or hang on a database that stopped answering), or once
/// a round failed, [`Head::floor`] has none, and the pages kept are not
/// answered (`kept_pages.rs`): a page is then read from the database, or
/// fails as it does. (Rounds run every [`POLL`] at the least.)
const FLOOR_FRESH: Duration = Duration::from_millis(500);

/// The least time between the starts of two rounds: under a steady stream
/// of writes, rounds run at most this often instead of once per commit.
pub(super) const ROUND_GAP: Duration = Duration::from_millis(5);

/// The least time between two notifications to the other instances: they
/// learn of this one's writes at most this much later than otherwise, and
/// a busy instance notifies 50 times a second at most (each a commit of
/// its own, flushed to the disk: `notify.rs`).
const NOTICE_GAP: Duration = Duration::from_millis(20);

/// The first wait before looking again while a value waits for older
/// transactions (doubled each time, up to [`POLL`]).
const RECHECK: Duration = Duration::from_millis(1);

/// The wait before trying again after a failure (doubled each time, up to
/// a second).
const RETRY: Duration = Duration::from_millis(50);

/// How long a page waits for the head to pass the ids taken before it was
/// read; past it (a long transaction elsewhere holds the head), the page
/// is answered up to the head as it is.
pub(super) const SETTLE_WAIT: Duration = Duration::from_millis(500);

/// The most values waiting for older transactions at once; beyond, the
/// newest replaces the last (which then waits for the newer's `next`).
const PENDING_MAX: usize = 64;

/// The head of the feed as this instance knows it, and its watcher.
pub(super) struct Head {
    /// Wakes the watcher for a round.
    wake: Arc<Notify>,
    /// Set by this instance's writes: the next round tells the others.
    written: Arc<AtomicBool>,
    head: watch::Receiver<i64>,
    /// The floor as this instance last saw it.
    floor: Arc<Mutex<FloorSeen>>,
    watcher: JoinHandle<()>,
    /// Wakes the watcher when another instance wrote.
    listener: Listener,
}

impl Head {
    /// Starts the watcher, on the current runtime, with `connections` (one
    /// is enough) of its own, and its listener, which connects through
    /// `primary`; both log their failures to `log`.
    pub fn start(
        connections: Arc<SharedConnections>,
        primary: Arc<Primary>,
        log: slog::Logger,
    ) -> Head {
        Head::polling_every(connections, primary, log, POLL)
    }

    /// [`Head::start`], polling every `poll` (tests: only notifications
    /// move a head that polls once an hour).
    fn polling_every(
        connections: Arc<SharedConnections>,
        primary: Arc<Primary>,
        log: slog::Logger,
        poll: Duration,
    ) -> Head {
        let wake = Arc::new(Notify::new());
        let written = Arc::new(AtomicBool::new(false));
        let (head_sender, head) = watch::channel(0);
        let floor = Arc::new(Mutex::new(FloorSeen::default()));
        let me = Sender::new();
        let (notice, notice_alone) = (me.notify_statement(), me.notify_alone());
        let listener = Listener::start(primary, me, Arc::clone(&wake), log.clone());
        let watcher = Watcher {
            connections,
            wake: Arc::clone(&wake),
            written: Arc::clone(&written),
            head: head_sender,
            floor: Arc::clone(&floor),
            pending: VecDeque::new(),
            session: None,
            poll,
            notice,
            notice_alone,
            flush_refused: false,
            telling_failed: false,
            noticed: None,
            flushed: 0,
            outage: Outage::new("events (the feed's head)", log.clone()),
            log,
        };
        Head {
            wake,
            written,
            head,
            floor,
            watcher: tokio::spawn(watcher.run()),
            listener,
        }
    }

    /// The head as it moves.
    pub fn receiver(&self) -> watch::Receiver<i64> {
        self.head.clone()
    }

    /// The head now, with no wait.
    pub fn now(&self) -> i64 {
        *self.head.borrow()
    }

    /// The floor (the largest id purged) as this instance knows it, if a
    /// round asked for it within [`FLOOR_FRESH`]: so at most that late
    /// after another instance's purge (a round late, usually).
    pub fn floor(&self) -> Option<Floor> {
        let seen = *lock(&self.floor);
        let fresh = seen.read_at.is_some_and(|at| at.elapsed() < FLOOR_FRESH);
        fresh.then_some(seen.floor)
    }

    /// Called once this instance's purge deleted the events up to `id`:
    /// the floor is at least that now.
    pub fn purged_to(&self, id: i64) {
        let mut seen = lock(&self.floor);
        seen.floor.floor = seen.floor.floor.max(id);
    }

    /// Called once a write that may have written events has committed (or
    /// failed, perhaps after committing), before it is answered: the head
    /// moves at once, not at the next poll.
    pub fn written(&self) {
        self.written.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// The head once it is at least `taken`, a value `events_ids` had
    /// handed out; or as it is after [`SETTLE_WAIT`].
    pub async fn reaching(&self, taken: i64) -> i64 {
        let mut head = self.head.clone();
        if *head.borrow() < taken {
            self.wake.notify_one();
            // Past the wait, or with the watcher gone (closed), the head
            // as it is: it is safe, only perhaps not the latest.
            let _ = tokio::time::timeout(SETTLE_WAIT, head.wait_for(|head| *head >= taken)).await;
        }
        *head.borrow()
    }

    /// Stops the watcher: the head moves no more, and every long-poll
    /// waiting on it is told (its sender is dropped).
    pub fn stop(&self) {
        self.watcher.abort();
        self.listener.stop();
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// The floor, and the watcher's connection it was read on: on another, it
/// compares with nothing before (the database may have been restored).
/// Connections are numbered in the order they are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Floor {
    pub session: u64,
    pub floor: i64,
}

/// The floor as last seen, and when a round asked for it (none before the
/// first round, or since one failed).
#[derive(Clone, Copy, Default)]
struct FloorSeen {
    floor: Floor,
    read_at: Option<Instant>,
}

fn lock(floor: &Mutex<FloorSeen>) -> MutexGuard<'_, FloorSeen> {
    // Every change is one assignment: a panic leaves a whole value.
    floor.lock().unwrap_or_else(|e| e.into_inner())
}

/// A value read in one round, waiting for the transactions that may still
/// commit ids up to it.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    /// The last id taken.
    ids: i64,
    /// The next xid then: the value is final once no xid below it runs…
    next_xid: i64,
    /// … and the WAL is durable up to this position.
    lsn: i64,
}

/// The watcher task's state.
struct Watcher {
    connections: Arc<SharedConnections>,
    wake: Arc<Notify>,
    /// Whether this instance wrote since the last round.
    written: Arc<AtomicBool>,
    head: watch::Sender<i64>,
    /// See [`Head::floor`].
    floor: Arc<Mutex<FloorSeen>>,
    /// Oldest first; `ids`, `next_xid` and `lsn` increase along it.
    pending: VecDeque<Candidate>,
    /// The connection (`Shared::serial`) the pending values were read on.
    session: Option<u64>,
    /// How long to wait with nothing else to prompt a round.
    poll: Duration,
    /// The statements that tell the other instances (`notify.rs`), with
    /// and without flushing the WAL.
    notice: String,
    notice_alone: String,
    /// Whether the database refused `FLUSH` (no `EXECUTE` on
    /// `pg_logical_emit_message`): values then wait for the WAL writer.
    flush_refused: bool,
    /// Whether the last flush or notification failed (logged once).
    telling_failed: bool,
    /// When the other instances were last notified.
    noticed: Option<Instant>,
    /// How far the WAL was flushed here at the last round.
    flushed: i64,
    /// Whether the database stopped answering (the head stays meanwhile).
    outage: Outage,
    log: slog::Logger,
}

impl Watcher {
    async fn run(mut self) {
        let mut wait = Duration::ZERO;
        let mut recheck = RECHECK;
        let mut retry = RETRY;
        let mut last_round: Option<Instant> = None;
        loop {
            tokio::select! {
                () = self.wake.notified() => recheck = RECHECK,
                () = tokio::time::sleep(wait) => {}
            }
            if let Some(last) = last_round {
                tokio::time::sleep_until(last + ROUND_GAP).await;
            }
            last_round = Some(Instant::now());
            match self.round().await {
                Ok(flushed) => {
                    if flushed {
                        // What waited for the disk is final now.
                        recheck = RECHECK;
                    }
                    self.outage.answered();
                    retry = RETRY;
                    wait = match self.pending.is_empty() {
                        true => self.poll,
                        false => {
                            let now = recheck;
                            recheck = (recheck * 2).min(self.poll);
                            now
                        }
                    };
                    if self.written.load(Ordering::Acquire) {
                        // A notification put off (see `round`).
                        wait = wait.min(NOTICE_GAP);
                    }
                }
                Err(StorageError::Closed) => return,
                Err(error) => {
                    lock(&self.floor).read_at = None;
                    let head = *self.head.borrow();
                    let doing = format!(
                        "finding the feed's head (it stays at {head} until the \
                        database answers)"
                    );
                    self.outage.failed(&doing, &error);
                    wait = retry;
                    retry = (retry * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// One round: the last id taken, then the next xid; publishes what
    /// became final, and tells the other instances when this one wrote.
    /// Says whether it had the WAL flushed (look again soon).
    async fn round(&mut self) -> Result<bool, StorageError> {
        let connections = Arc::clone(&self.connections);
        let shared = connections.get().await?;
        let doing = "reading the events' ids taken";
        // The floor is as fresh as the question: the answer may be late.
        let asked = Instant::now();
        let taken = shared
            .run(
                doing,
                shared.client.query_one(&shared.events.ids_taken, &[]),
            )
            .await?;
        let ids: i64 = taken.try_get(0).map_err(super::postgres(doing))?;
        let floor: i64 = taken.try_get(1).map_err(super::postgres(doing))?;
        self.saw_floor(floor, shared.serial, asked);
        // Only now, in a statement of its own: see the module's doc.
        let doing = "reading the transaction horizon";
        let horizon = shared
            .run(doing, shared.client.query_one(&shared.events.horizon, &[]))
            .await?;
        let column = |i| horizon.try_get::<_, i64>(i).map_err(super::postgres(doing));
        let (xmin, next_xid, lsn, durable) = (column(0)?, column(1)?, column(2)?, column(3)?);
        let flushed_here = column(4)?;
        if self.session != Some(shared.serial) {
            // Another connection, perhaps to a restarted database or a
            // promoted standby: what the old one saw compares with nothing
            // here.
            self.pending.clear();
            self.session = Some(shared.serial);
        }
        self.add(Candidate { ids, next_xid, lsn });
        self.publish(xmin, durable);
        // Only when the WAL flushed here has not moved since the last
        // round (under writes, their commits flush it anyway, and a flush
        // of ours each round cost them 2 to 3 µs of the database's time a
        // request), and only what a flush here can help: not a standby
        // that lags.
        let stalled = std::mem::replace(&mut self.flushed, flushed_here) == flushed_here;
        let unflushed = stalled
            && !self.flush_refused
            && self
                .pending
                .front()
                .is_some_and(|first| first.next_xid <= xmin && first.lsn > flushed_here);
        // Last, so that this head does not wait for it. Every write that
        // set the flag has committed: the others' rounds will see it.
        // Within `NOTICE_GAP` of the last notification, it is left for a
        // later round (`run` has one come soon enough).
        let due = self.noticed.is_none_or(|at| at.elapsed() >= NOTICE_GAP);
        let notify = due && self.written.swap(false, Ordering::AcqRel);
        if notify {
            self.noticed = Some(Instant::now());
        }
        Ok((notify || unflushed) && self.tell(&shared.client, notify).await)
    }

    /// Has the WAL flushed, telling the other instances too when `notify`
    /// (the notification flushes it: `notify.rs`); says whether it did.
    /// Failures are logged once: the others then learn at their next
    /// poll, and this head waits for the WAL writer. A connection that
    /// broke shows in the next round.
    async fn tell(&mut self, client: &tokio_postgres::Client, notify: bool) -> bool {
        let statement = match (notify, self.flush_refused) {
            (true, false) => self.notice.as_str(),
            (true, true) => self.notice_alone.as_str(),
            (false, _) => FLUSH,
        };
        let outcome = tokio::time::timeout(STATEMENT_TIMEOUT, client.batch_execute(statement));
        let (error, refused) = match outcome.await {
            Ok(Ok(())) => {
                if std::mem::take(&mut self.telling_failed) {
                    slog::info!(
                        self.log,
                        "events: flushing the WAL and telling the other \
                        instances again"
                    );
                }
                return !self.flush_refused;
            }
            Ok(Err(error)) => {
                let refused = error.code().is_some_and(|code| {
                    *code == SqlState::INSUFFICIENT_PRIVILEGE
                        || *code == SqlState::UNDEFINED_FUNCTION
                });
                (petstore_api::error::chain(&error), refused)
            }
            Err(_) => ("no answer in time".to_owned(), false),
        };
        if refused && !self.flush_refused {
            self.flush_refused = true;
            slog::warn!(self.log, "events: the database refuses pg_logical_emit_message; \
                the feed's head waits for the WAL writer after commits that do not wait \
                for the disk (up to 3 × wal_writer_delay)"; "error" => error);
            if notify {
                // Told without the flush, then.
                let alone = client.batch_execute(&self.notice_alone);
                let _ = tokio::time::timeout(STATEMENT_TIMEOUT, alone).await;
            }
        } else if !std::mem::replace(&mut self.telling_failed, true) {
            slog::warn!(self.log, "events: cannot flush the WAL or tell the other instances; \
                they learn of this one's events at their next poll, and this one's head \
                may wait for the WAL writer meanwhile"; "error" => error);
        }
        false
    }

    /// Records the floor a round read on the connection `session`, asked
    /// for at `asked`: never lower than one this instance's purge raised
    /// meanwhile, unless the connection is another (the database may have
    /// been restored).
    fn saw_floor(&mut self, floor: i64, session: u64, asked: Instant) {
        let mut seen = lock(&self.floor);
        let before = seen.floor;
        let floor = match before.session == session {
            true => floor.max(before.floor),
            false => floor,
        };
        *seen = FloorSeen {
            floor: Floor { session, floor },
            read_at: Some(asked),
        };
    }

    /// Queues a round's value, unless the head already covers it.
    fn add(&mut self, candidate: Candidate) {
        if candidate.ids <= *self.head.borrow() {
            // Nothing new was taken: every id up to it is already final.
            return;
        }
        let full = self.pending.len() >= PENDING_MAX;
        match self.pending.back_mut() {
            // The same ids: the older value is final sooner.
            Some(last) if last.ids == candidate.ids => {}
            Some(last) if full => *last = candidate,
            _ => self.pending.push_back(candidate),
        }
    }

    /// Makes head the largest value whose transactions have all ended and
    /// whose ids the sequence can never hand out again, now that no xid
    /// below `xmin` runs and the WAL is durable up to `durable`.
    fn publish(&mut self, xmin: i64, durable: i64) {
        let mut newest = None;
        while let Some(first) = self.pending.front().copied() {
            if first.next_xid > xmin || first.lsn > durable {
                break;
            }
            self.pending.pop_front();
            newest = Some(first);
        }
        let Some(newest) = newest else {
            return;
        };
        self.head.send_if_modified(|head| {
            let moved = newest.ids > *head;
            *head = (*head).max(newest.ids);
            moved
        });
    }
}

#[cfg(test)]
mod tests {
    use enumset::EnumSet;
    use petstore_api::model::NewPet;
    use petstore_support::{SOON, eventually_some, within};

    use super::*;
    use crate::storage::{EventQuery, EventsOutcome, PostgresStorage, PostgresUrl, Storage};

    /// Another instance's head that polls once an hour moves within the
    /// test's bounds only if this instance's writes told it so. (The first
    /// write might also be found by a round the other's listener prompted
    /// when it started; the second only by a notification.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_instance_learns_of_a_write_from_its_notification() {
        let Some(database) = petstore_support::postgres::fresh_database().await else {
            return;
        };
        let url = PostgresUrl::parse(database.url()).expect("a PostgreSQL URL");
        let writer = PostgresStorage::open(&url)
            .await
            .expect("open the database");
        let config: tokio_postgres::Config = database.url().parse().expect("a PostgreSQL URL");
        let primary = Primary::new(&config);
        let connections = Arc::new(SharedConnections::new(Arc::clone(&primary), 1));
        let discard = slog::Logger::root(slog::Discard, slog::o!());
        let hour = Duration::from_secs(3600);
        let other = Head::polling_every(connections, primary, discard, hour);
        // A notification sent before both listen is lost (the poll would
        // bring it, an hour later).
        let (observer, connection) = tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        eventually_some("both instances listening", SOON, || async {
            let row = observer
                .query_one(
                    // (A listener's last query is `LISTEN`, or the empty
                    // one that checks its connection every 5 s.)
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND query IN ($1, '')
                       AND state = 'idle'",
                    &[&super::super::notify::LISTEN],
                )
                .await
                .expect("pg_stat_activity");
            (row.get::<_, i64>(0) == 2).then_some(())
        })
        .await;
        let mut head = other.receiver();
        for name in ["told", "told again"] {
            let created = NewPet {
                name: name.to_owned(),
                category_id: 1,
                status: None,
            };
            writer.create(created).await.expect("create");
            let query = EventQuery {
                after: None,
                limit: 10,
                kinds: EnumSet::all(),
                owner: None,
            };
            let event = match writer.events(query).await.expect("a page") {
                EventsOutcome::Page(page) => page.events.last().expect("the event").id,
                EventsOutcome::Expired { .. } => panic!("nothing was purged"),
            };
            within(
                "the other instance's head past the event",
                SOON,
                head.wait_for(|head| *head >= event),
            )
            .await
            .expect("the watcher runs");
        }
        other.stop();
        writer.close().await;
    }
}
