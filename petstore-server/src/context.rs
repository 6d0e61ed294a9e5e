//! What every request handler can reach: the keys, the store, the count of
//! requests in flight, and where what happened is noted and counted.
//!
//! It is its own module so that the interface's extractors (`auth.rs`) can
//! find the keys without depending on the implementation (`server.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::keyring::Keyring;
use crate::metrics::Metrics;
use crate::observe::RequestNotes;
use crate::store::{PetStore, Retention};

/// The server state handed to every endpoint.
pub struct ApiContext {
    /// The keys clients must present.
    pub keys: Arc<Keyring>,
    /// What the access log and the metrics learn of each request.
    pub notes: Arc<RequestNotes>,
    /// The metrics, unless the management listener is off.
    pub metrics: Option<Arc<Metrics>>,
    /// The catalogue.
    pub store: Arc<dyn PetStore>,
    /// Requests past authentication whose handler has not finished.
    pub requests: Requests,
    /// How long the first `201` of an idempotency key is kept.
    pub idempotency_retention: Retention,
}

/// Counts requests in flight.
#[derive(Clone, Default)]
pub struct Requests(Arc<AtomicUsize>);

impl Requests {
    /// Counts one request until the returned guard is dropped.
    pub fn start(&self) -> InFlight {
        self.0.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(&self.0))
    }

    /// How many requests are in flight now.
    pub fn in_flight(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One request in flight; uncounted when dropped.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_until_their_guard_drops() {
        let requests = Requests::default();
        let first = requests.start();
        let second = requests.start();
        assert_eq!(requests.in_flight(), 2);
        drop(first);
        assert_eq!(requests.in_flight(), 1);
        drop(second);
        assert_eq!(requests.in_flight(), 0);
    }
}
