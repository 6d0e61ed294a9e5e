//! The pet store service: a dropshot server implementing
//! `openapi/petstore.yaml`.
//!
//! - [`api`]: the interface, as a dropshot API trait.
//! - [`server`]: its implementation and the running server.
//! - [`model`], [`error`]: the contract's types and its error body.
//! - [`keys`], [`auth`], [`body`]: API keys, the bearer-key extractor and
//!   the strict JSON body extractor the interface uses.
//! - [`context`]: what every handler can reach.
//! - [`store`]: the storage interface and its SQLite and PostgreSQL
//!   implementations; it knows nothing of HTTP.
//! - [`logging`]: structured logs.

pub mod api;
pub mod auth;
pub mod body;
pub mod context;
pub mod error;
pub mod keys;
pub mod logging;
pub mod model;
pub mod server;
pub mod store;

pub use server::{RunningServer, ServerConfig, ShutdownError, ShutdownReport, StartError, start};
