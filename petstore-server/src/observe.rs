//! What each request did, for the access log and the metrics.
//!
//! dropshot has no middleware: the one place that sees every request's
//! status and latency — including requests refused before any handler ran
//! (bad parameters, 404, 405) — is its "request completed" log record. So
//! the server's logger is wrapped in an [`ObservingDrain`] that reads those
//! records as they are made: it counts them in the metrics and adds to them
//! what the authentication extractor noted about the request (the
//! operationId and the name of the key), found by request id.
//!
//! dropshot logs a request whose client hung up before the answer as a
//! warning, `request handling cancelled (client disconnected)`. That is the
//! client's doing, not the server's (a follower that stopped following a
//! long poll, a caller that gave up): the observer makes it an access record
//! at `info`, counted as status 499 as nginx does. dropshot's guard logs the
//! same record while a handler's panic unwinds; that one is a bug of ours,
//! and the observer logs it as the error `request handler panicked`, counted
//! as a 500.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use dashmap::DashMap;
use slog::{Drain, Key, Level, OwnedKVList, Record, RecordStatic, Serializer};

use crate::logging::{REQUEST_CANCELLED, REQUEST_COMPLETED};
use crate::metrics::Metrics;

/// What the authentication extractor learned about one request.
#[derive(Clone, Debug)]
struct Note {
    operation: Arc<str>,
    key: Option<Arc<str>>,
}

/// Notes on requests in flight, by request id.
///
/// Every request writes and takes a note, from whichever worker runs it, so
/// both maps are sharded (`DashMap`): requests on different shards never
/// wait for each other, where one `Mutex<HashMap>` made every request of
/// the server take the same lock twice.
#[derive(Debug, Default)]
pub struct RequestNotes {
    pending: DashMap<String, Note>,
    /// Each operationId once, shared by every note and metric label.
    operations: DashMap<String, Arc<str>>,
}

impl RequestNotes {
    /// Notes the operation a request is for and, once authenticated, the
    /// name of its key.
    pub fn note(&self, request_id: &str, operation: &str, key: Option<Arc<str>>) {
        let operation = self.intern(operation);
        // Every noted request logs its completion or its cancellation (dropshot
        // logs the latter from a guard, also when a handler panics), and
        // either takes the note back: nothing stays behind.
        self.pending
            .insert(request_id.to_owned(), Note { operation, key });
    }

    fn intern(&self, operation: &str) -> Arc<str> {
        if let Some(known) = self.operations.get(operation) {
            return Arc::clone(&known);
        }
        let entry = self.operations.entry(operation.to_owned());
        Arc::clone(&entry.or_insert_with(|| operation.into()))
    }

    fn take(&self, request_id: &str) -> Option<Note> {
        self.pending.remove(request_id).map(|(_, note)| note)
    }
}

/// Wraps the server's logger; see the module's documentation.
pub struct ObservingDrain {
    inner: slog::Logger,
    /// Nothing in a note's insert or removal panics but allocation, which
    /// aborts: no panic can leave a shard half-written.
    notes: AssertUnwindSafe<Arc<RequestNotes>>,
    /// A panic while a metric is updated leaves at worst a count off by one.
    metrics: AssertUnwindSafe<Arc<Metrics>>,
}

impl ObservingDrain {
    /// Observes the records logged through it, then passes them to `inner`.
    pub fn new(
        inner: slog::Logger,
        notes: Arc<RequestNotes>,
        metrics: Arc<Metrics>,
    ) -> ObservingDrain {
        ObservingDrain {
            inner,
            notes: AssertUnwindSafe(notes),
            metrics: AssertUnwindSafe(metrics),
        }
    }
}

impl Drain for ObservingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let message = record.msg().as_str();
        let cancelled = message == Some(REQUEST_CANCELLED);
        if message != Some(REQUEST_COMPLETED) && !cancelled {
            return Drain::log(&self.inner, record, values);
        }
        let mut fields = Fields {
            notes: &self.notes,
            note: None,
            status: 0,
            latency_us: 0,
        };
        let _ = slog::KV::serialize(values, record, &mut fields);
        let _ = slog::KV::serialize(&record.kv(), record, &mut fields);
        let note = fields.note.take();
        let panicked = cancelled && std::thread::panicking();
        let (status, level, message) = match (cancelled, panicked) {
            (false, _) => (fields.status, record.level(), *record.msg()),
            (true, false) => (499, Level::Info, *record.msg()),
            (true, true) => (500, Level::Error, format_args!("request handler panicked")),
        };
        self.metrics.request_done(
            note.as_ref().map(|note| &note.operation),
            status,
            fields.latency_us as f64 / 1e6,
        );
        let record_static = RecordStatic {
            location: record.location(),
            tag: record.tag(),
            level,
        };
        match note {
            Some(Note { operation, key }) => {
                let key = key.unwrap_or_else(|| Arc::from("-"));
                let kv = (
                    record.kv(),
                    slog::o!("operation_id" => operation, "key" => key),
                );
                let record = Record::new(&record_static, &message, slog::BorrowedKV(&kv));
                Drain::log(&self.inner, &record, values)
            }
            // No handler ran (a 404 or 405 of the router): dropshot's fields.
            None => {
                let kv = record.kv();
                let record = Record::new(&record_static, &message, kv);
                Drain::log(&self.inner, &record, values)
            }
        }
    }
}

/// The fields of a completion record the observer needs; the note is
/// taken as soon as the request id is seen.
struct Fields<'a> {
    notes: &'a RequestNotes,
    note: Option<Note>,
    status: u16,
    latency_us: u128,
}

impl Serializer for Fields<'_> {
    fn emit_arguments(&mut self, _key: Key, _value: &std::fmt::Arguments<'_>) -> slog::Result {
        Ok(())
    }

    fn emit_str(&mut self, key: Key, value: &str) -> slog::Result {
        if key == "req_id" {
            self.note = self.notes.take(value);
        }
        Ok(())
    }

    fn emit_u16(&mut self, key: Key, value: u16) -> slog::Result {
        if key == "response_code" {
            self.status = value;
        }
        Ok(())
    }

    fn emit_u128(&mut self, key: Key, value: u128) -> slog::Result {
        if key == "latency_us" {
            self.latency_us = value;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use slog::Logger;

    use super::*;

    /// The level and message of each record that reached the output.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<(Level, String)>>>);

    impl Drain for Seen {
        type Ok = ();
        type Err = slog::Never;

        fn log(&self, record: &Record<'_>, _: &OwnedKVList) -> Result<(), slog::Never> {
            let seen = (record.level(), record.msg().to_string());
            self.0.lock().unwrap().push(seen);
            Ok(())
        }
    }

    /// Logs as dropshot's guard does when a request's task is dropped.
    struct RequestGuard(Logger);

    impl Drop for RequestGuard {
        fn drop(&mut self) {
            slog::warn!(self.0, "request handling cancelled (client disconnected)";
                "latency_us" => 5u128);
        }
    }

    #[test]
    fn a_client_that_hung_up_is_an_access_record_and_a_handler_that_panicked_an_error() {
        let seen = Seen::default();
        let observed = ObservingDrain::new(
            Logger::root(seen.clone(), slog::o!()),
            Arc::default(),
            Arc::new(Metrics::new(Default::default())),
        );
        let log = Logger::root(observed, slog::o!());
        drop(RequestGuard(log.clone()));
        let unwound = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _guard = RequestGuard(log.clone());
            panic!("a bug in a handler");
        }));
        assert!(unwound.is_err());
        assert_eq!(
            *seen.0.lock().unwrap(),
            [
                (Level::Info, REQUEST_CANCELLED.to_owned()),
                (Level::Error, "request handler panicked".to_owned()),
            ]
        );
    }
}
