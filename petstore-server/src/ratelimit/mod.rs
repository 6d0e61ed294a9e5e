//! Rate limits: each API key's budget (a sustained rate with a burst, GCRA,
//! and a cap on its requests in flight), and one for requests without a
//! valid key, per client address, so that guessing keys is throttled.
//!
//! - `layer.rs`: [`RateLimited`], a hyper `Service` around the server's,
//!   one per connection: it finds the bearer key in the keyring (as the
//!   gatekeeper does: a digest and a lookup, no await), asks the budgets,
//!   and either answers `429` itself or calls the inner service, holding
//!   the key's place in flight until the answer's head is ready, and adds
//!   the `RateLimit-Policy` and `RateLimit` fields to it.
//! - `budgets.rs`: the decision, and why N instances keep one budget per
//!   key: each enforces `1/N` of it.
//! - `instances.rs`: the heartbeat that counts N, and the pruning of idle
//!   addresses.
//! - `fields.rs`: the fields, as draft-ietf-httpapi-ratelimit-headers
//!   spells them. `refusal.rs`: the `429`, logged and counted like any
//!   other answer.
//!
//! Not limited: the contract and its page (`/openapi.*`, `/docs/`; static,
//! served from memory, needing no key, and a browser loading the page would
//! spend an address's small budget on its assets), and everything on the
//! management listener (health, readiness, metrics), which this layer
//! never wraps. With rate limits off the layer is not built at all.

mod budgets;
mod fields;
mod instances;
mod layer;
mod refusal;

use std::net::SocketAddr;
use std::sync::Arc;

use governor::clock::DefaultClock;
use http::Request;

pub use budgets::RateLimits;
pub use instances::{HEARTBEAT, keep_count};
pub use layer::{Answer, RateLimited};

use crate::keyring::Keyring;
use crate::metrics::Metrics;
use budgets::{Admitted, Budgets, Refused};

/// The budgets of one serving instance, and what refusing needs.
pub struct Limits {
    budgets: Budgets<DefaultClock>,
    keys: Arc<Keyring>,
    /// The API's logger (through `observe.rs`'s drain).
    log: slog::Logger,
    metrics: Arc<Metrics>,
    /// Whether the contract and its page are served (and so not limited).
    docs: bool,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Limits({:?})", self.budgets.limits())
    }
}

/// What becomes of one request.
enum Decision {
    /// Not limited (the contract, its page).
    Exempt,
    /// Admitted.
    Admitted(Admitted),
    /// Refused; `key` is the key's name, `None` when limited by address.
    Refused {
        refused: Refused,
        key: Option<Arc<str>>,
    },
}

impl Limits {
    /// `limits` for the keys of `keys`; refusals logged to `log` (the
    /// API's) and counted in `metrics`; `docs` as in the server's
    /// configuration.
    pub fn new(
        limits: RateLimits,
        keys: Arc<Keyring>,
        log: slog::Logger,
        metrics: Arc<Metrics>,
        docs: bool,
    ) -> Limits {
        metrics.rate_limit_instances(1);
        Limits {
            budgets: Budgets::new(limits, DefaultClock::default()),
            keys,
            log,
            metrics,
            docs,
        }
    }

    /// Enforces `1/instances` of every budget from now on.
    pub fn set_instances(&self, instances: u32) {
        self.budgets.set_instances(instances);
        self.metrics.rate_limit_instances(instances);
    }

    fn decide<B>(&self, request: &Request<B>, remote: SocketAddr) -> Decision {
        if self.docs && is_docs(request.uri().path()) {
            return Decision::Exempt;
        }
        let decided = match self.keys.budget_of(request.headers()) {
            Ok((digest, limits)) => self.budgets.for_key(digest, limits).map_err(|refused| {
                // The key's name, for the refusal's log and metric only.
                let name = self.keys.authenticate(request.headers()).ok();
                (refused, name.map(|caller| caller.name))
            }),
            // The gatekeeper answers 401 after this; until then the request
            // spends its address's budget.
            Err(_) => self
                .budgets
                .for_address(remote.ip())
                .map_err(|refused| (refused, None)),
        };
        match decided {
            Ok(admitted) => Decision::Admitted(admitted),
            Err((refused, key)) => Decision::Refused { refused, key },
        }
    }
}

/// The contract's and its page's paths (`docs.rs`).
fn is_docs(path: &str) -> bool {
    matches!(path, "/openapi.yaml" | "/openapi.json" | "/docs") || path.starts_with("/docs/")
}
