//! The pet store API: the interface alone, as a dropshot API trait.
//!
//! This crate says *what* the service offers — paths, parameters, bodies,
//! responses, the one error body — and nothing about how; it depends on
//! nothing of the implementation (`petstore-server`). The document dropshot
//! emits from [`PetstoreApi`] is compared with `openapi/petstore.yaml` by the
//! drift check, so the doc comments here are written as the contract's text.
//!
//! - [`model`]: the contract's resources (`Pet`, `NewPet`, `PetStatus`).
//! - [`params`], [`responses`]: the operations' parameters and response
//!   shapes beyond the model.
//! - [`error`]: `ApiError`, the one error body.
//! - [`auth`], [`body`], [`idempotency`]: the extractors the operations
//!   take — the bearer key (checked by the implementation's
//!   [`auth::Gatekeeper`]), the strict JSON body, the `Idempotency-Key`
//!   header.

pub mod auth;
pub mod body;
pub mod error;
pub mod idempotency;
pub mod model;
pub mod params;
pub mod responses;

use dropshot::{
    HttpResponseCreated, HttpResponseHeaders, HttpResponseOk, Path, Query, RequestContext,
};

use crate::auth::Authenticated;
use crate::body::StrictJson;
use crate::error::ApiError;
use crate::idempotency::{CreatedHeaders, IdempotencyKey};
use crate::model::{NewPet, Pet};
use crate::params::{ListPetsParams, PetPath};
use crate::responses::{DeprecationHeaders, PetsPage};

pub use petstore_api_mod::{api_description, stub_api_description};

/// The most animals one `GET /pets` returns.
pub const LIMIT_MAX: i32 = 100;
/// How many animals `GET /pets` returns when `limit` is omitted.
pub const LIMIT_DEFAULT: i32 = 20;
/// The largest request body accepted, in bytes; larger ones get 413.
pub const REQUEST_BODY_MAX_BYTES: usize = 16 * 1024;

/// The contract version this interface implements (`info.version`).
pub const CONTRACT_VERSION: semver::Version = semver::Version::new(1, 2, 0);

/// The pet store API.
#[dropshot::api_description]
pub trait PetstoreApi {
    /// The server state handed to every endpoint: always
    /// [`auth::ApiContext`], where the bearer check finds its gatekeeper.
    type Context: auth::IsApiContext;

    /// List animals
    ///
    /// Returns at most `limit` animals (20 when `limit` is omitted) in
    /// ascending `id` order, as a plain JSON array. When `status` is given,
    /// only animals with that status are returned. When `after` is given,
    /// only animals whose `id` is greater than `after` are returned: to read
    /// the next page, pass the last `id` of this one, or follow the `Link`
    /// header's `next` target.
    #[endpoint {
        method = GET,
        path = "/v1/pets",
        operation_id = "listPets",
        tags = ["Pets"],
    }]
    async fn list_pets(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        query: Query<ListPetsParams>,
    ) -> Result<PetsPage, ApiError>;

    /// Add an animal
    ///
    /// Adds an animal to the catalogue. The `201` response carries the stored
    /// animal with the `id` the service assigned. The animal is stored durably
    /// before the response is sent.
    ///
    /// With an `Idempotency-Key` header the create happens at most once per
    /// key: a retry with the same key and body gets the first `201` again
    /// (marked `Idempotent-Replayed: true`) instead of creating a second
    /// animal.
    #[endpoint {
        method = POST,
        path = "/v1/pets",
        operation_id = "createPet",
        tags = ["Pets"],
    }]
    async fn create_pet(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        idempotency_key: IdempotencyKey,
        body: StrictJson<NewPet>,
    ) -> Result<HttpResponseHeaders<HttpResponseCreated<Pet>, CreatedHeaders>, ApiError>;

    /// Get an animal (deprecated)
    ///
    /// Returns the animal with the given identifier.
    ///
    /// Deprecated: this operation will be removed on 5 December 2030. Use
    /// `GET /pets` with the `status` filter instead. Until then it keeps
    /// working, and every `200` response announces the deprecation with the
    /// `Deprecation` (RFC 9745), `Sunset` (RFC 8594) and `Link` headers.
    #[endpoint {
        method = GET,
        path = "/v1/pets/{petId}",
        operation_id = "getPet",
        tags = ["Pets"],
        deprecated = true,
    }]
    async fn get_pet(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<PetPath>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Pet>, DeprecationHeaders>, ApiError>;
}

/// The document the server emits, from the interface alone.
pub fn openapi_document() -> serde_json::Value {
    let description =
        petstore_api_mod::stub_api_description().expect("the API trait describes a valid API");
    description
        .openapi("Pet Store", CONTRACT_VERSION)
        .json()
        .expect("an OpenAPI document always serialises to JSON")
}
