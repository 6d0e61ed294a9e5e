//! Telling the other instances that this one wrote events: `LISTEN/NOTIFY`
//! on one channel, so that their heads move as soon as the notification
//! arrives rather than at their next poll (`POLL`, `head.rs`).
//!
//! A notification only wakes a head's watcher for a round; the round reads
//! what is in the database. So a notification lost (the listening
//! connection down, the database restarted) costs only time: the watcher
//! still polls, as it did before instances notified.
//!
//! - **Never from a write's transaction**: `NOTIFY` takes a lock for the
//!   whole cluster at commit, and would serialize the writes. The watcher
//!   notifies instead, at the end of a round that followed this instance's
//!   writes, at most every `NOTICE_GAP` (`head.rs`).
//! - **Committed to the disk**: a round's value passes only once the WAL
//!   up to where it read is flushed, so a commit record left unflushed by
//!   the notification would hold the others' heads back until the WAL
//!   writer runs (`wal_writer_delay`, 200 ms by default; measured: a
//!   follower on another instance got its events after 74 ms at the
//!   median, 115 at p99), and PostgreSQL leaves unflushed the commit of a
//!   transaction that wrote nothing else. The notification is therefore
//!   sent by the statement that flushes the WAL (`FLUSH`,
//!   `event_statements.rs`).
//! - **One statement**: no transaction block that a failure could leave
//!   open on the watcher's connection.
//! - **Signed**: the payload names the sending instance, whose own
//!   listener ignores it (its own round already looked).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::connect::{OnNotification, Primary};
use super::event_statements::FLUSH;
use super::shared::{CONNECTION_TIMEOUT, STATEMENT_TIMEOUT};

/// What the instances listen on.
pub(super) const LISTEN: &str = "LISTEN petstore_events";

/// How often a listening connection is checked: one that stopped answering
/// (a hung server, a partition) would otherwise keep it waiting, deaf,
/// after the watcher moved to another primary.
const CHECK: Duration = Duration::from_secs(5);

/// The first wait before listening again (doubled each time, up to
/// [`RETRY_MAX`]).
const RETRY: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// This instance's name in its notifications.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sender(String);

impl Sender {
    /// A name no other instance has (random).
    pub fn new() -> Sender {
        Sender(uuid::Uuid::new_v4().simple().to_string())
    }

    /// The statement that tells the other instances, and flushes the WAL
    /// (see the module's doc). The name is hexadecimal digits: nothing to
    /// quote.
    pub fn notify_statement(&self) -> String {
        format!("{FLUSH}, {}", self.notification())
    }

    /// The statement that only tells them, where `FLUSH` is refused.
    pub fn notify_alone(&self) -> String {
        format!("SELECT {}", self.notification())
    }

    fn notification(&self) -> String {
        format!("pg_notify('petstore_events', '{}')", self.0)
    }
}

/// The task that listens, on a connection of its own, and wakes a head's
/// watcher at each other instance's notification.
pub(super) struct Listener {
    task: JoinHandle<()>,
}

impl Listener {
    /// Listens on the current runtime, connecting through `primary`, and
    /// wakes `watcher` at each notification not from `me`, and whenever
    /// it starts listening again (what was sent meanwhile was lost); logs
    /// to `log`.
    pub fn start(
        primary: Arc<Primary>,
        me: Sender,
        watcher: Arc<Notify>,
        log: slog::Logger,
    ) -> Listener {
        Listener {
            task: tokio::spawn(listen(primary, me, watcher, log)),
        }
    }

    /// Stops listening.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listen(primary: Arc<Primary>, me: Sender, watcher: Arc<Notify>, log: slog::Logger) {
    let mut retry = RETRY;
    let mut failing = false;
    loop {
        let started = tokio::time::Instant::now();
        match listen_once(&primary, &me, &watcher, &log, &mut failing).await {
            Ok(ended) => {
                slog::debug!(log, "events: the listening connection ended"; "why" => ended);
            }
            Err(error) => {
                if !std::mem::replace(&mut failing, true) {
                    slog::warn!(log, "events: cannot listen for other instances' writes; \
                        their events reach this instance's feed at its next poll meanwhile";
                        "error" => error);
                }
            }
        }
        // A connection that ends at once, again and again (a pooler, a
        // short `idle_session_timeout`), is not made again at once.
        if started.elapsed() >= RETRY_MAX {
            retry = RETRY;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// Listens on one connection until it ends or stops answering (why, as
/// `Ok`); `Err` when listening could not start. Logs that it listens
/// again after `failing`.
async fn listen_once(
    primary: &Primary,
    me: &Sender,
    watcher: &Arc<Notify>,
    log: &slog::Logger,
    failing: &mut bool,
) -> Result<&'static str, String> {
    let chain = |error: tokio_postgres::Error| petstore_api::error::chain(&error);
    let received: OnNotification = {
        let (me, watcher) = (me.clone(), Arc::clone(watcher));
        Arc::new(move |notification| {
            if notification.payload() != me.0 {
                watcher.notify_one();
            }
        })
    };
    let connected = tokio::time::timeout(CONNECTION_TIMEOUT, primary.connect_listening(received))
        .await
        .map_err(|_| "no host answered in time".to_owned())?;
    let (client, mut driver) = connected.map_err(chain)?;
    match tokio::time::timeout(STATEMENT_TIMEOUT, client.batch_execute(LISTEN)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            driver.abort();
            return Err(chain(error));
        }
        Err(_) => {
            driver.abort();
            return Err("LISTEN was not answered in time".to_owned());
        }
    }
    if std::mem::take(failing) {
        slog::info!(log, "events: listening for other instances' writes again");
    }
    watcher.notify_one();
    let mut checks = tokio::time::interval_at(tokio::time::Instant::now() + CHECK, CHECK);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut driver => return Ok("closed"),
            _ = checks.tick() => {
                let check = tokio::time::timeout(STATEMENT_TIMEOUT, client.simple_query(""));
                if !matches!(check.await, Ok(Ok(_))) {
                    driver.abort();
                    return Ok("it stopped answering");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each statement runs, and the one that flushes leaves every WAL
    /// record written before it flushed, although the commit before it
    /// did not wait for the disk (on a cluster of its own: no other
    /// session flushes meanwhile, and the WAL writer waits 10 s).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_notification_flushes_what_was_written_before_it() {
        let Some(cluster) = petstore_support::postgres::own_cluster().await else {
            return;
        };
        let database = cluster.fresh_database().await;
        let (client, connection) = tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        cluster.slow_wal_writer().await.unwrap();
        // Commits that do not wait for the disk.
        client
            .batch_execute("SET synchronous_commit = off; CREATE TABLE written (x int)")
            .await
            .unwrap();
        let me = Sender::new();
        for statement in [me.notify_statement(), me.notify_alone(), FLUSH.to_owned()] {
            let written: i64 = client
                .query_one(
                    "INSERT INTO written VALUES (1)
                     RETURNING (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            client.batch_execute(&statement).await.unwrap();
            let flushed: i64 = client
                .query_one(
                    "SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if statement != me.notify_alone() {
                assert!(
                    flushed >= written,
                    "{statement}: flushed {flushed}, written {written}"
                );
            }
        }
    }
}
