//! The contract, operation by operation, against a real server over HTTP.
//! Each module follows a section of the interface specification and the
//! decisions recorded in `openapi/petstore.yaml`.

mod authentication;
mod create_pet;
mod docs;
mod events;
mod get_pet;
mod idempotency;
mod list_pets;
mod outside_the_contract;
mod pagination;
mod persistence;
mod rate_limits;
mod scopes;
mod store;
mod webhooks;
