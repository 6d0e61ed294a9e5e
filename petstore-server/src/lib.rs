//! The pet store service: a dropshot server implementing
//! `openapi/petstore.yaml`.
//!
//! - [`api`]: the interface, as a dropshot API trait.
//! - [`server`]: its implementation and the running server.
//! - [`model`], [`error`]: the contract's types and its error body.
//! - [`keys`], [`keyring`], [`auth`], [`body`], [`idempotency`]: API keys
//!   and the live set of accepted keys, the bearer-key extractor, the strict
//!   JSON body extractor and the `Idempotency-Key` header the interface uses.
//! - [`context`]: what every handler can reach.
//! - [`admin`], [`metrics`], [`observe`]: the management listener (health,
//!   readiness, metrics) and what feeds the metrics and the access log.
//! - [`store`]: the storage interface and its SQLite and PostgreSQL
//!   implementations; it knows nothing of HTTP.
//! - [`docs`]: the committed contract and an interactive page, served.
//! - [`logging`]: structured logs.

pub mod admin;
pub mod api;
pub mod auth;
pub mod body;
pub mod context;
pub mod docs;
pub mod error;
pub mod idempotency;
pub mod keyring;
pub mod keys;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod observe;
pub mod server;
pub mod store;

pub use server::{
    IDEMPOTENCY_RETENTION_MIN, RunningServer, ServerConfig, ShutdownError, ShutdownReport,
    StartError, TlsError, TlsFiles, start,
};
