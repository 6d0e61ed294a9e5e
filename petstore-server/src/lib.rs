//! The pet store service: a dropshot server implementing
//! `openapi/petstore.yaml`.
//!
//! The interface — the API trait, the contract's types, its error body and
//! the extractors its operations take — is the `petstore-api` crate; this
//! crate implements it.
//!
//! - [`handlers`]: the implementation of the API trait.
//! - [`server`], [`tls`]: the running server, and its certificate.
//! - [`edge`]: the API's connections, accepted, capped and timed.
//! - [`keys`], [`keyring`]: API keys and the live set of accepted keys.
//! - [`context`]: what every handler can reach; the interface's bearer
//!   check (`petstore_api::auth::Gatekeeper`), answered from the keyring.
//! - [`admin`], [`metrics`], [`observe`]: the management listener (health,
//!   readiness, metrics) and what feeds the metrics and the access log.
//! - [`storage`]: the storage interface and its SQLite and PostgreSQL
//!   implementations; it knows nothing of HTTP.
//! - [`docs`]: the committed contract and an interactive page, served.
//! - [`logging`]: structured logs.
//! - [`webhooks`]: the webhooks' core: signing secrets sealed at rest,
//!   signatures, the targets deliveries may go to, the retry schedule.

pub mod admin;
pub mod budget;
pub mod context;
pub mod docs;
pub mod durations;
pub mod edge;
pub mod handlers;
pub mod keyring;
pub mod keys;
pub mod logging;
pub mod metrics;
pub mod observe;
pub mod ratelimit;
pub mod server;
pub mod storage;
pub mod tls;
pub mod webhooks;

pub use edge::EdgeLimits;
pub use server::{
    EVENTS_RETENTION_DEFAULT, IDEMPOTENCY_RETENTION_MIN, RunningServer, ServerConfig,
    ShutdownError, ShutdownReport, StartError, start,
};
pub use tls::{TlsError, TlsFiles};
pub use webhooks::WebhookSettings;
