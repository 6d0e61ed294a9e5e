//! What every request handler can reach: the keys, the storage, the count of
//! requests in flight, and where what happened is noted and counted; and
//! the interface's bearer check, answered from the keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use petstore_api::auth::{Caller, Gatekeeper, Knock, Refusal};
use petstore_api::error::Keyed;

use crate::keyring::Keyring;
use crate::metrics::{KeyedOutcome, Metrics};
use crate::observe::RequestNotes;
use crate::storage::{Retention, Storage};

/// The server's state, handed to every endpoint inside the API's context
/// (`petstore_api::auth::ApiContext`).
pub struct Service {
    /// The keys clients must present.
    pub keys: Arc<Keyring>,
    /// What the access log and the metrics learn of each request.
    pub notes: Arc<RequestNotes>,
    /// The metrics (served only when the management listener is on).
    pub metrics: Arc<Metrics>,
    /// The catalogue.
    pub storage: Arc<dyn Storage>,
    /// Requests past authentication whose handler has not finished.
    pub requests: Requests,
    /// How long the first `201` of an idempotency key is kept.
    pub idempotency_retention: Retention,
    /// Becomes `true` when the server begins to shut down: long polls of
    /// the feed answer at once rather than hold the shutdown up.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Webhook subscriptions (since contract 1.7.0).
    pub webhooks: Arc<crate::webhooks::Webhooks>,
}

impl Service {
    /// Counts a request of `operation` whose idempotency key decided
    /// `outcome`.
    pub fn count_idempotent(&self, operation: Keyed, outcome: KeyedOutcome) {
        self.metrics.idempotent(operation, outcome);
    }
}

impl Gatekeeper for Service {
    /// Looks the key up in the keyring (no await, no lock), notes the
    /// operation and the key's name for the access log, counts refusals,
    /// and counts the request as in flight until its handler is done with
    /// it (or it is dropped), so that a shutdown can say how many requests
    /// it had to cut.
    fn admit(&self, request: &Knock<'_>) -> Result<Caller, Refusal> {
        match self.keys.authenticate(request.headers) {
            Ok(caller) => {
                let (request_id, operation) = (request.request_id, request.operation_id);
                self.notes
                    .note(request_id, operation, Some(Arc::clone(&caller.name)));
                Ok(Caller {
                    identity: caller.digest.identity(),
                    name: caller.name,
                    scopes: caller.scopes,
                    guard: Box::new(self.requests.start()),
                })
            }
            Err(failure) => {
                self.notes
                    .note(request.request_id, request.operation_id, None);
                self.metrics.auth_rejected(failure.reason());
                Err(Refusal {
                    message: failure.message(),
                    reason: failure.reason().into(),
                    credential_sent: failure.credential_sent(),
                })
            }
        }
    }
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
