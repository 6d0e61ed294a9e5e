//! What a background task logs while its database does not answer: the
//! first failure, at `warn`, and the first success after it, at `info`
//! ("…: the database answers again"). The tries in between go to `debug`:
//! the tasks (the keys' reload, the feed's head on PostgreSQL, the
//! webhooks' fan-out and deliveries) try again every second or sooner, and
//! an outage of minutes would otherwise write thousands of the same
//! warning while saying nothing of its end. A failure that is not the
//! database's being unavailable (a statement it rejects, data that does
//! not decode: a bug in us) is an `error` each time, outage or not.

use std::sync::atomic::{AtomicBool, Ordering};

use super::StorageError;

/// One task's outage, if it is in one.
pub struct Outage {
    task: &'static str,
    failing: AtomicBool,
    log: slog::Logger,
}

impl Outage {
    /// No outage yet, for `task` (which the recovery record names).
    pub fn new(task: &'static str, log: slog::Logger) -> Outage {
        Outage {
            task,
            failing: AtomicBool::new(false),
            log,
        }
    }

    /// `doing` failed with `error`; it is tried again later.
    pub fn failed(&self, doing: &str, error: &StorageError) {
        let unavailable = error.is_unavailable();
        let error = petstore_api::error::chain(error);
        if !unavailable {
            slog::error!(self.log, "{doing} failed; trying again later"; "error" => error);
        } else if self.failing.swap(true, Ordering::Relaxed) {
            slog::debug!(self.log, "{doing} failed again; trying again later"; "error" => error);
        } else {
            slog::warn!(self.log, "{doing} failed; trying again later \
                (further failures are logged at debug until it succeeds)";
                "error" => error);
        }
    }

    /// Something of the task's succeeded: an outage it was in is over.
    pub fn answered(&self) {
        if self.failing.swap(false, Ordering::Relaxed) {
            slog::info!(self.log, "{}: the database answers again", self.task);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records each record's level and message.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<(slog::Level, String)>>>);

    impl slog::Drain for Seen {
        type Ok = ();
        type Err = slog::Never;
        fn log(&self, record: &slog::Record<'_>, _: &slog::OwnedKVList) -> Result<(), slog::Never> {
            let entry = (record.level(), record.msg().to_string());
            self.0.lock().unwrap().push(entry);
            Ok(())
        }
    }

    fn unavailable() -> StorageError {
        StorageError::Postgres {
            doing: "claiming",
            source: crate::storage::PostgresFailure::ConnectTimeout,
        }
    }

    /// A row that does not decode: retrying will not help.
    fn bug() -> StorageError {
        StorageError::Undecodable {
            id: 1,
            column: "kind",
            value: "9".to_owned(),
            expected: "event kind",
        }
    }

    #[test]
    fn an_outage_is_logged_when_it_starts_and_when_it_ends_and_a_bug_every_time() {
        let seen = Seen::default();
        let outage = Outage::new(
            "webhook deliveries",
            slog::Logger::root(seen.clone(), slog::o!()),
        );
        outage.answered();
        for _ in 0..50 {
            outage.failed("claiming webhook deliveries", &unavailable());
        }
        outage.answered();
        outage.answered();
        outage.failed("claiming webhook deliveries", &unavailable());

        outage.failed("recording webhook deliveries", &bug());
        outage.failed("recording webhook deliveries", &bug());

        let levels: Vec<slog::Level> = seen.0.lock().unwrap().iter().map(|(l, _)| *l).collect();
        let warnings = levels
            .iter()
            .filter(|&&l| l == slog::Level::Warning)
            .count();
        let infos = levels.iter().filter(|&&l| l == slog::Level::Info).count();
        let errors = levels.iter().filter(|&&l| l == slog::Level::Error).count();
        assert_eq!((warnings, infos, errors), (2, 1, 2), "{levels:?}");
        let seen = seen.0.lock().unwrap();
        assert_eq!(seen[0].0, slog::Level::Warning);
        assert!(
            seen[0].1.starts_with("claiming webhook deliveries failed"),
            "{}",
            seen[0].1
        );
        let recovered = seen.iter().find(|(l, _)| *l == slog::Level::Info).unwrap();
        assert_eq!(
            recovered.1,
            "webhook deliveries: the database answers again"
        );
    }
}
