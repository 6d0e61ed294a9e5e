//! The pet store API: the interface alone, as a dropshot API trait.
//!
//! This crate says *what* the service offers — paths, parameters, bodies,
//! responses, the one error body — and nothing about how; it depends on
//! nothing of the implementation (`petstore-server`). The document dropshot
//! emits from [`PetstoreApi`] is compared with `openapi/petstore.yaml` by the
//! drift check, so the doc comments here are written as the contract's text.
//!
//! - [`model`]: the contract's resources (`Pet`, `NewPet`, `PetStatus`, and
//!   the Store's `Order`, `NewOrder`, `OrderUpdate`, `OrderInclude`, `Inventory`).
//! - [`params`], [`responses`]: the operations' parameters and response
//!   shapes beyond the model.
//! - [`error`]: `ApiError`, the one error body.
//! - [`auth`], [`body`], [`idempotency`]: the extractors the operations
//!   take — the bearer key (checked by the implementation's
//!   [`auth::Gatekeeper`]), the strict JSON body, the `Idempotency-Key`
//!   header.
//! - [`scopes`]: what a key may do, and which scopes admit each operation.

pub mod auth;
pub mod body;
pub mod error;
pub mod idempotency;
pub mod model;
pub mod params;
pub mod responses;
pub mod scopes;

use dropshot::{
    HttpResponseCreated, HttpResponseHeaders, HttpResponseOk, Path, Query, RequestContext,
};

use crate::auth::Authenticated;
use crate::body::StrictJson;
use crate::error::ApiError;
use crate::idempotency::{CreatedHeaders, IdempotencyKey};
use crate::model::{Event, Inventory, NewOrder, NewPet, Order, OrderUpdate, Pet};
use crate::params::{
    GetOrderParams, ListEventsParams, ListOrdersParams, ListPetsParams, OrderPath, PetPath,
};
use crate::responses::{DeprecationHeaders, EventsPageHeaders, OrdersPageHeaders, PetsPage};

pub use petstore_api_mod::{api_description, stub_api_description};

/// The most animals (or orders) one page returns.
pub const LIMIT_MAX: i32 = 100;
/// How many animals (or orders) a page holds when `limit` is omitted.
pub const LIMIT_DEFAULT: i32 = 20;
/// The largest request body accepted, in bytes; larger ones get 413.
pub const REQUEST_BODY_MAX_BYTES: usize = 16 * 1024;

/// The contract version this interface implements (`info.version`).
pub const CONTRACT_VERSION: semver::Version = semver::Version::new(1, 6, 0);

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

    /// List orders
    ///
    /// Returns at most `limit` orders (20 when `limit` is omitted) in
    /// ascending `id` order, as a plain JSON array. When `status` is given,
    /// only orders with that status are returned; when `petId` is given, only
    /// orders for that animal. When `after` is given, only orders whose `id`
    /// is greater than `after` are returned: to read the next page, pass the
    /// last `id` of this one, or follow the `Link` header's `next` target.
    #[endpoint {
        method = GET,
        path = "/v1/store/orders",
        operation_id = "listOrders",
        tags = ["Store"],
    }]
    async fn list_orders(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        query: Query<ListOrdersParams>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Vec<Order>>, OrdersPageHeaders>, ApiError>;

    /// Order an animal
    ///
    /// Orders an `available` animal. The order is stored as `placed` and the
    /// animal becomes `pending` in the same transaction, durably, before the
    /// `201` is sent. Among concurrent orders for one animal exactly one
    /// succeeds; the others get `409` (`pet_not_available`), as does an order
    /// for an animal that is `pending`, `sold` or has no status. An order for
    /// an `id` with no animal is `422` (`pet_not_found`).
    ///
    /// With an `Idempotency-Key` header the order is placed at most once per
    /// key: a retry with the same key and body gets the first `201` again
    /// (marked `Idempotent-Replayed: true`, the order as it was placed, even
    /// if it has changed since) instead of a `409`.
    #[endpoint {
        method = POST,
        path = "/v1/store/orders",
        operation_id = "placeOrder",
        tags = ["Store"],
    }]
    async fn place_order(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        idempotency_key: IdempotencyKey,
        body: StrictJson<NewOrder>,
    ) -> Result<HttpResponseHeaders<HttpResponseCreated<Order>, CreatedHeaders>, ApiError>;

    /// Get an order
    ///
    /// Returns the order with the given identifier.
    #[endpoint {
        method = GET,
        path = "/v1/store/orders/{orderId}",
        operation_id = "getOrder",
        tags = ["Store"],
    }]
    async fn get_order(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<OrderPath>,
        query: Query<GetOrderParams>,
    ) -> Result<HttpResponseOk<Order>, ApiError>;

    /// Deliver or cancel an order
    ///
    /// Delivers a `placed` order (its animal becomes `sold`) or cancels it
    /// (its animal becomes `available` again), in one transaction, durably,
    /// before the `200` is sent. Asking for the status the order already has
    /// changes nothing and is answered `200` with the order, so a retry is
    /// always safe. Any other change (a `delivered` order cancelled, a
    /// `cancelled` one delivered) is `409` (`invalid_transition`).
    #[endpoint {
        method = PATCH,
        path = "/v1/store/orders/{orderId}",
        operation_id = "updateOrder",
        tags = ["Store"],
    }]
    async fn update_order(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<OrderPath>,
        body: StrictJson<OrderUpdate>,
    ) -> Result<HttpResponseOk<Order>, ApiError>;

    /// Count animals by status
    ///
    /// Returns how many animals have each status now: exact counts, taken at
    /// one moment, reflecting every change acknowledged before the request.
    /// Animals created without a status are in no count.
    #[endpoint {
        method = GET,
        path = "/v1/store/inventory",
        operation_id = "getInventory",
        tags = ["Store"],
    }]
    async fn get_inventory(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
    ) -> Result<HttpResponseOk<Inventory>, ApiError>;

    /// Read the feed of events
    ///
    /// Returns at most `limit` events (20 when `limit` is omitted) in the
    /// feed's order, as a plain JSON array of CloudEvents: the changes
    /// committed after the event `after` (from the oldest retained event
    /// when `after` is omitted), of the `types` asked for, that the API key
    /// may see. To read on, pass the `id` of the last event read as `after`,
    /// or follow the `Link` header's `next` target, which every `200`
    /// carries: the feed has no end.
    ///
    /// With `wait`, a request that finds nothing newer than `after` waits up
    /// to that many seconds and is answered as soon as an event it may see
    /// is committed, or with an empty array when the wait ends.
    ///
    /// A cursor older than the retention (its events were purged) is `410`
    /// (`cursor_expired`): start again without `after`.
    #[endpoint {
        method = GET,
        path = "/v1/events",
        operation_id = "listEvents",
        tags = ["Events"],
    }]
    async fn list_events(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        query: Query<ListEventsParams>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Vec<Event>>, EventsPageHeaders>, ApiError>;
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
