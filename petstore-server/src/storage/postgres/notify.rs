//! Telling the other instances that this one wrote events: `LISTEN/NOTIFY`
//! on one channel, so that their heads move at once rather than at their
//! next poll ([`POLL`](super::head::POLL)).
//!
//! A notification only wakes a head's watcher for a round; the round reads
//! what is in the database. So a notification lost (the listening
//! connection down, the database restarted, the queue full) costs only
//! time: the watcher still polls, as it did before instances notified.
//!
//! The writes themselves never notify: `NOTIFY` in a transaction takes a
//! lock for the whole cluster at its commit, and would serialize every
//! write. The watcher notifies instead, after a round that followed this
//! instance's writes, at most once per round
//! ([`ROUND_GAP`](super::head::ROUND_GAP)), in a transaction of its own
//! that does not wait for the disk.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::connect::Primary;
use super::shared::CONNECTION_TIMEOUT;

/// What the instances listen on.
pub(super) const LISTEN: &str = "LISTEN petstore_events";

/// What an instance sends once its writes committed: a transaction of its
/// own (a notification is sent at commit), committed without waiting for
/// the disk (losing it in a crash loses a wake-up, not an event).
pub(super) const NOTIFY: &str = "BEGIN; SET LOCAL synchronous_commit = off; \
    NOTIFY petstore_events; COMMIT";

/// The first wait before connecting again (doubled each time, up to
/// [`RETRY_MAX`]).
const RETRY: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The task that listens, on a connection of its own, and wakes a head's
/// watcher at each notification.
pub(super) struct Listener {
    task: JoinHandle<()>,
}

impl Listener {
    /// Listens on the current runtime, connecting through `primary`, and
    /// wakes `watcher` at each notification, and whenever it starts
    /// listening again (what was sent meanwhile was lost); logs to `log`.
    pub fn start(primary: Arc<Primary>, watcher: Arc<Notify>, log: slog::Logger) -> Listener {
        Listener {
            task: tokio::spawn(listen(primary, watcher, log)),
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

async fn listen(primary: Arc<Primary>, watcher: Arc<Notify>, log: slog::Logger) {
    let mut retry = RETRY;
    let mut failing = false;
    loop {
        let connected = tokio::time::timeout(
            CONNECTION_TIMEOUT,
            primary.connect_listening(Arc::clone(&watcher)),
        )
        .await;
        let listening = match connected {
            Ok(Ok((client, driver))) => match client.batch_execute(LISTEN).await {
                Ok(()) => Ok((client, driver)),
                Err(error) => {
                    driver.abort();
                    Err(petstore_api::error::chain(&error))
                }
            },
            Ok(Err(error)) => Err(petstore_api::error::chain(&error)),
            Err(_) => Err("no host answered in time".to_owned()),
        };
        match listening {
            Ok((_client, driver)) => {
                if std::mem::take(&mut failing) {
                    slog::info!(log, "events: listening for other instances' writes again");
                }
                retry = RETRY;
                watcher.notify_one();
                // Until the connection ends; the client is held till then.
                let _ = driver.await;
            }
            Err(error) => {
                if !std::mem::replace(&mut failing, true) {
                    slog::warn!(log, "events: cannot listen for other instances' writes; \
                        their events reach this instance's feed at its next poll meanwhile";
                        "error" => error);
                }
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}
