//! The pet store service: a dropshot server implementing
//! `openapi/petstore.yaml`.
//!
//! - [`api`]: the interface, as a dropshot API trait.
//! - [`server`]: its implementation and the running server.
//! - [`model`], [`error`], [`auth`]: the contract's types, its error body,
//!   and bearer-key authentication.
//! - [`store`]: the storage interface and the SQLite implementation.

pub mod api;
pub mod auth;
pub mod error;
pub mod logging;
pub mod model;
pub mod server;
pub mod store;

pub use server::{RunningServer, ServerConfig, start};
