//! The pet store API: the interface alone, as a dropshot API trait.
//!
//! This crate says *what* the service offers — paths, parameters, bodies,
//! responses, the one error body — and nothing about how; it depends on
//! nothing of the implementation (`petstore-server`). The document dropshot
//! emits from [`PetstoreApi`] is compared with `openapi/petstore.yaml` by the
//! drift check, so the doc comments here are written as the contract's text.
//!
//! - [`model`]: the contract's resources (`Pet`, `NewPet`, `PetStatus`; the
//!   Store's `Order`, `NewOrder`, `OrderUpdate`, `OrderInclude`,
//!   `Inventory`; the feed's `Event`; the webhook subscriptions' `Webhook`
//!   and the rest).
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
    HttpResponseAccepted, HttpResponseCreated, HttpResponseDeleted, HttpResponseHeaders,
    HttpResponseOk, Path, Query, RequestContext,
};

use crate::auth::Authenticated;
use crate::body::StrictJson;
use crate::error::ApiError;
use crate::idempotency::{CreatedHeaders, IdempotencyKey};
use crate::model::{
    Inventory, NewOrder, NewPet, NewWebhook, Order, OrderUpdate, Pet, ReplayAccepted, ReplayRange,
    Webhook, WebhookCreated, WebhookDelivery, WebhookSecret,
};
use crate::params::{
    GetOrderParams, ListDeliveriesParams, ListEventsParams, ListOrdersParams, ListPetsParams,
    ListWebhooksParams, OrderPath, PetPath, RotateParams, WebhookPath,
};
use crate::responses::{
    DeliveriesPageHeaders, DeprecationHeaders, EventsPage, OrdersPageHeaders, PetsPage,
    WebhooksPageHeaders,
};

pub use petstore_api_mod::{api_description, stub_api_description};

/// The most animals (or orders) one page returns.
pub const LIMIT_MAX: i32 = 100;
/// How many animals (or orders) a page holds when `limit` is omitted.
pub const LIMIT_DEFAULT: i32 = 20;
/// The largest request body accepted, in bytes; larger ones get 413.
pub const REQUEST_BODY_MAX_BYTES: usize = 16 * 1024;

/// The contract version this interface implements (`info.version`).
pub const CONTRACT_VERSION: semver::Version = semver::Version::new(1, 7, 4);

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
    ) -> Result<EventsPage, ApiError>;

    /// List webhook subscriptions
    ///
    /// Returns at most `limit` of the API key's webhook subscriptions (20
    /// when `limit` is omitted) in ascending `id` order, as a plain JSON
    /// array. When `after` is given, only subscriptions whose `id` is
    /// greater than `after` are returned: to read the next page, pass the
    /// last `id` of this one, or follow the `Link` header's `next` target.
    /// No secret is ever shown here.
    #[endpoint {
        method = GET,
        path = "/v1/webhooks",
        operation_id = "listWebhooks",
        tags = ["Webhooks"],
    }]
    async fn list_webhooks(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        query: Query<ListWebhooksParams>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Vec<Webhook>>, WebhooksPageHeaders>, ApiError>;

    /// Subscribe an endpoint to events
    ///
    /// Subscribes `url` to the events of `types` (when `types` is omitted,
    /// of every type the API key may see): from now on each such event is
    /// delivered to it, signed, as the tag `Webhooks` describes, starting
    /// with the first event committed after the subscription was made. The
    /// `201` carries the subscription and its signing `secret`, which is
    /// shown only here (and by `rotateWebhookSecret`): keep it, since it
    /// cannot be read again.
    ///
    /// The `url` must be an absolute `https` URL whose host resolves only
    /// to public addresses (unless the operator admits private ones, and
    /// with them plain `http`); any other is `422`
    /// (`webhook_target_refused`), and the message says why.
    /// Asking for a type of event the key may not see is `403`
    /// (`insufficient_scope`), and so is omitting `types` with a key that
    /// may see none. This operation is not idempotent: a retry after a lost
    /// answer may subscribe the `url` twice (`listWebhooks` shows it).
    #[endpoint {
        method = POST,
        path = "/v1/webhooks",
        operation_id = "createWebhook",
        tags = ["Webhooks"],
    }]
    async fn create_webhook(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        body: StrictJson<NewWebhook>,
    ) -> Result<HttpResponseCreated<WebhookCreated>, ApiError>;

    /// Get a webhook subscription
    ///
    /// Returns the subscription with the given identifier, with how its
    /// deliveries stand: its `state` (and why it is `disabled`), how many
    /// deliveries are `pending`, and when a delivery last succeeded and an
    /// attempt last failed. Its secret is never shown here.
    #[endpoint {
        method = GET,
        path = "/v1/webhooks/{webhookId}",
        operation_id = "getWebhook",
        tags = ["Webhooks"],
    }]
    async fn get_webhook(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<WebhookPath>,
    ) -> Result<HttpResponseOk<Webhook>, ApiError>;

    /// Delete a webhook subscription
    ///
    /// Deletes the subscription and its deliveries: nothing more is sent to
    /// its `url`, except an attempt that was already under way. Deleting is
    /// final, and a retried delete of the same subscription is `404`.
    #[endpoint {
        method = DELETE,
        path = "/v1/webhooks/{webhookId}",
        operation_id = "deleteWebhook",
        tags = ["Webhooks"],
    }]
    async fn delete_webhook(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<WebhookPath>,
    ) -> Result<HttpResponseDeleted, ApiError>;

    /// Rotate a webhook subscription's secret
    ///
    /// Gives the subscription a new signing secret, returned in the `200`
    /// and never shown again. The secret it replaces stays valid for
    /// `previousValidFor` seconds (24 hours when omitted, at most 7 days):
    /// until `previousValidUntil`, every delivery is signed with both, so
    /// the endpoint can move to the new secret at any moment meanwhile.
    /// With `previousValidFor=0` the replaced secret is dropped at once:
    /// that is how to retire a secret that may have leaked. A secret
    /// replaced by an earlier rotation and still valid is dropped: at most
    /// two secrets are ever valid.
    #[endpoint {
        method = POST,
        path = "/v1/webhooks/{webhookId}/rotate",
        operation_id = "rotateWebhookSecret",
        tags = ["Webhooks"],
    }]
    async fn rotate_webhook_secret(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<WebhookPath>,
        query: Query<RotateParams>,
    ) -> Result<HttpResponseOk<WebhookSecret>, ApiError>;

    /// List a webhook subscription's deliveries
    ///
    /// Returns at most `limit` of the subscription's deliveries (20 when
    /// `limit` is omitted), newest event first, as a plain JSON array: for
    /// each event it is to receive, where its delivery stands, how many
    /// attempts were made and how the last one ended. When `before` is
    /// given, only deliveries of events before that one are returned: to
    /// read the next page, pass the last `eventId` of this one, or follow
    /// the `Link` header's `next` target. Deliveries that ended (delivered
    /// or failed) are kept for a while, as the operator sets, and then
    /// purged.
    #[endpoint {
        method = GET,
        path = "/v1/webhooks/{webhookId}/deliveries",
        operation_id = "listWebhookDeliveries",
        tags = ["Webhooks"],
    }]
    async fn list_webhook_deliveries(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<WebhookPath>,
        query: Query<ListDeliveriesParams>,
    ) -> Result<
        HttpResponseHeaders<HttpResponseOk<Vec<WebhookDelivery>>, DeliveriesPageHeaders>,
        ApiError,
    >;

    /// Deliver a range of events again
    ///
    /// Delivers again the events from `from` to `to` (event `id`s, both
    /// included) that the subscription is to receive: each becomes a
    /// pending delivery, due now, its attempts counted afresh, whether it
    /// had been delivered, had failed or had never been made (an event
    /// committed before the subscription was made too: a replay may
    /// deliver any event the feed still keeps, of the subscription's
    /// `types` and that its API key may see). A `disabled`
    /// subscription becomes `active` again, and its waiting deliveries are
    /// sent too. The deliveries are sent in the background, each
    /// resource's in the feed's order as ever; the `202` says how many.
    ///
    /// One call examines at most 1,000 events, in the feed's order.
    /// `through` is the last event `id` it examined, or `to` when it
    /// examined the whole range (every event up to the newest, when `to`
    /// is beyond it): while `through` is less than `to`, call again with
    /// `from` after `through`. A `from` greater than `to` is `422`
    /// (`invalid_replay_range`); a `from` older than the feed's retention
    /// (its events were purged) is `410` (`cursor_expired`).
    #[endpoint {
        method = POST,
        path = "/v1/webhooks/{webhookId}/replay",
        operation_id = "replayWebhook",
        tags = ["Webhooks"],
    }]
    async fn replay_webhook(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<WebhookPath>,
        body: StrictJson<ReplayRange>,
    ) -> Result<HttpResponseAccepted<ReplayAccepted>, ApiError>;
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
