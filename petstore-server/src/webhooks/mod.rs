//! Webhooks (since contract 1.7.0): events of the feed sent to
//! subscribers' URLs, signed as the Standard Webhooks spec says.
//!
//! This is the subsystem's self-contained core; what it stores is behind
//! [`crate::storage::webhooks`]:
//!
//! - [`secrets`]: signing secrets, and the key file whose keys seal them
//!   at rest (the database holds ciphertexts only).
//! - [`sign`]: the `webhook-signature` header of a delivery.
//! - [`target`]: which URLs deliveries may go to (https, public addresses),
//!   checked where the connection is made, and the HTTP client they go
//!   through.
//! - [`schedule`]: when a failed delivery is tried again (the retry
//!   schedule, a receiver's `Retry-After`).

pub mod schedule;
pub mod secrets;
pub mod sign;
pub mod target;
