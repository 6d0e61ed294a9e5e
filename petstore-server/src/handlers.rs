//! The implementation of [`PetstoreApi`]: each operation's rules, over the
//! storage. The server that runs it is in `server.rs`.

use dropshot::{
    HttpResponseAccepted, HttpResponseCreated, HttpResponseDeleted, HttpResponseHeaders,
    HttpResponseOk, Path, Query, RequestContext,
};

use petstore_api::auth::{ApiContext, Authenticated, Identity};
use petstore_api::body::StrictJson;
use petstore_api::error::{ApiError, Keyed};
use petstore_api::idempotency::{CreatedHeaders, IdempotencyKey};
use petstore_api::model::{
    EncodedEvents, Inventory, NewOrder, NewPet, NewWebhook, Order, OrderInclude, OrderStatus,
    OrderUpdate, OrderUpdateStatus, Pet, PetStatus, ReplayAccepted, ReplayRange, Webhook,
    WebhookCreated, WebhookDelivery, WebhookSecret,
};
use petstore_api::params::{
    EventTypes, GetOrderParams, ListDeliveriesParams, ListEventsParams, ListOrdersParams,
    ListPetsParams, ListWebhooksParams, OrderPath, PetPath, RotateParams, WebhookPath,
};
use petstore_api::responses::{
    DeliveriesPageHeaders, DeprecationHeaders, EventsPage, EventsPageHeaders, OrdersPageHeaders,
    PageHeaders, PetsPage, WebhooksPageHeaders,
};
use petstore_api::scopes::{Scope, Scopes};
use petstore_api::{LIMIT_MAX, PetstoreApi};

use crate::context::Service;
use crate::keyring::unix_now;
use crate::keys::KeyDigest;
use crate::metrics::KeyedOutcome;
use crate::storage::idempotency::{fingerprint, order_fingerprint};
use crate::storage::{
    self, CreateOutcome, EventKind, EventPage, EventQuery, EventsOutcome, Idempotency, ListQuery,
    OrderQuery, Owner, OwnerId, PlaceOutcome, PlacedBy, ReadTo, StorageError, StoredOrder,
    UpdateOutcome,
};
use crate::webhooks::api::{delivery_view, owner_filter, webhook_of};

use std::time::Duration;

use enumset::EnumSet;

// Every page the contract allows, the storage can serve.
const _: () = assert!(LIMIT_MAX as u32 <= storage::LIST_MAX);

/// The implementation of the API trait; never constructed.
pub enum PetstoreImpl {}

/// The owner whose orders alone the caller may see: its own key, unless it
/// may manage every order.
fn only_own(auth: &Authenticated) -> Option<OwnerId> {
    own_orders_only(auth.scopes(), auth.identity())
}

/// The owner whose orders alone a key with `scopes` may see: itself,
/// unless it holds `orders:manage`.
fn own_orders_only(scopes: Scopes, identity: Identity) -> Option<OwnerId> {
    (!scopes.contains(Scope::OrdersManage)).then(|| OwnerId::of(identity))
}

/// Whether the answer shows who placed each order: when asked for
/// (`include=placedBy`), which only a key with `orders:manage` may do.
fn placed_by_shown_to(
    auth: &Authenticated,
    include: Option<OrderInclude>,
) -> Result<PlacedBy, ApiError> {
    match include {
        None => Ok(PlacedBy::Hidden),
        Some(_) if auth.may(Scope::OrdersManage) => Ok(PlacedBy::Shown),
        Some(_) => Err(ApiError::insufficient_scope(
            "include=placedBy",
            &[Scope::OrdersManage],
        )),
    }
}

/// What a read of the feed asks for, the key holding `scopes`: of the
/// `types` asked for (all without the filter), the kinds the key may see,
/// and every order's events or only its own.
fn feed_query(
    scopes: Scopes,
    identity: Identity,
    types: Option<&EventTypes>,
    after: Option<i64>,
    limit: u32,
) -> EventQuery {
    let wanted: EnumSet<EventKind> = match types {
        None => EnumSet::all(),
        Some(types) => types.iter().map(EventKind::of_type).collect(),
    };
    EventQuery {
        after,
        limit,
        kinds: wanted & EventKind::visible_to(scopes),
        owner: own_orders_only(scopes, identity),
    }
}

/// A long poll's key as it is now, after the wait: keys change on every
/// instance within 2 seconds, and a poll that began before a change answers
/// as the key is when it answers. Revoked or expired, it is refused as a
/// new request would be (401, counted as one); without `events:read`, 403;
/// otherwise the scopes it holds now (more or fewer kinds, every order or
/// only its own).
fn scopes_after_wait(context: &Service, auth: &Authenticated) -> Result<Scopes, ApiError> {
    match context.keys.scopes_now(KeyDigest(auth.identity().0)) {
        Err(refused) => {
            context.metrics.auth_rejected(refused.reason());
            Err(ApiError::key_withdrawn_while_waiting())
        }
        Ok(scopes) if !scopes.contains(Scope::EventsRead) => Err(ApiError::insufficient_scope(
            "listEvents",
            &[Scope::EventsRead],
        )),
        Ok(scopes) => Ok(scopes),
    }
}

/// Reads pages of the feed until one has an event, or one that is empty
/// although the head was not reached (a filter skipped every row it
/// examined: the client reads on at once), or the wait ends, or the server
/// stops. An empty page at the head waits, with no query meanwhile, until
/// an event of its kinds may have come after it
/// ([`Storage::events_after`](crate::storage::Storage::events_after)); then
/// it asks for the key as it is now ([`scopes_after_wait`]: 401 or 403
/// end it) and reads with what the key may see by then.
async fn feed_page(
    context: &Service,
    auth: &Authenticated,
    types: Option<&EventTypes>,
    mut query: EventQuery,
    wait: Duration,
) -> Result<EventPage<EncodedEvents>, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut stopping = context.stopping.clone();
    // Whether the page is a read again after the head moved.
    let mut parked = false;
    loop {
        let to = match parked {
            false => ReadTo::Head,
            true => ReadTo::KnownHead,
        };
        let outcome = context.storage.encoded_events(query, to).await;
        let outcome = outcome.map_err(storage_failure(context))?;
        let page = match outcome {
            EventsOutcome::Page(page) => page,
            EventsOutcome::Expired { floor } => {
                return Err(ApiError::cursor_expired(query.after.unwrap_or(0), floor));
            }
        };
        // (A page that moved no further would read the same again.)
        let skipped_all =
            page.events.is_empty() && !page.at_head && Some(page.next_after) > query.after;
        if parked && skipped_all && tokio::time::Instant::now() < deadline {
            // Commits of the gap that it does not want, more than a page
            // examines: read on here, rather than answer and be asked again.
            query.after = Some(page.next_after);
            continue;
        }
        if !page.events.is_empty() || !page.at_head || tokio::time::Instant::now() >= deadline {
            return Ok(page);
        }
        let _waiting = context.metrics.event_waiter();
        let waited = context
            .storage
            .events_after(query.kinds, page.head, deadline);
        let waited = tokio::select! {
            waited = waited => waited,
            _ = stopping.wait_for(|stopping| *stopping) => return Ok(page),
        };
        let scopes = scopes_after_wait(context, auth)?;
        let now = feed_query(scopes, auth.identity(), types, None, query.limit);
        // `quiet` is of the kinds and orders the poll waited for: a key
        // that may see more now reads those from where its page ended.
        let widened =
            !query.kinds.is_superset(now.kinds) || (query.owner.is_some() && now.owner.is_none());
        // Nothing of its kinds up to `quiet`: the cursor moves there, so a
        // poll parked through many commits of other events is not left to
        // examine them all, page after page, once it is answered.
        let after = match widened {
            false => page.next_after.max(waited.quiet),
            true => page.next_after,
        };
        if !waited.read && !widened {
            return Ok(EventPage {
                next_after: after,
                head: page.head.max(after),
                ..page
            });
        }
        query = EventQuery {
            after: Some(after),
            ..now
        };
        parked = true;
    }
}

/// The 404 of an order that does not exist, or is another customer's.
fn no_such_order(id: i64) -> ApiError {
    ApiError::not_found(format!("no order has id {id}"))
}

/// The server's state in a request's context. It is always there (the
/// server makes the context from it); if it were not, that is a bug: 500.
fn service(rqctx: &RequestContext<ApiContext>) -> Result<&Service, ApiError> {
    rqctx.context().implementation().ok_or_else(|| {
        ApiError::internal(&std::io::Error::other(
            "the API context does not hold the server's state",
        ))
    })
}

/// A storage failure as the client sees it: 503 when retrying later is
/// right, 500 when it is a bug or corrupt data (the cause is logged either
/// way, in the access log's `error_message_internal`, and counted).
fn storage_failure(context: &Service) -> impl Fn(StorageError) -> ApiError + '_ {
    move |error| {
        let unavailable = error.is_unavailable();
        context.metrics.database_error(unavailable);
        if unavailable {
            ApiError::service_unavailable(&error)
        } else {
            ApiError::internal(&error)
        }
    }
}

impl PetstoreApi for PetstoreImpl {
    type Context = ApiContext;

    async fn list_pets(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
        query: Query<ListPetsParams>,
    ) -> Result<PetsPage, ApiError> {
        let params = query.into_inner();
        let limit = params.limit.get();
        let context = service(&rqctx)?;
        let page = context
            .storage
            .list(ListQuery {
                limit,
                status: params.status,
                after: params.after,
            })
            .await
            .map_err(storage_failure(context))?;
        let headers = match page.pets.last_id() {
            Some(last_id) if page.more => PageHeaders::next(limit, params.status, last_id),
            _ => PageHeaders::default(),
        };
        Ok(PetsPage {
            pets: page.pets,
            headers,
        })
    }

    async fn create_pet(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        idempotency_key: IdempotencyKey,
        body: StrictJson<NewPet>,
    ) -> Result<HttpResponseHeaders<HttpResponseCreated<Pet>, CreatedHeaders>, ApiError> {
        let context = service(&rqctx)?;
        let pet = body.into_inner();
        let created =
            |pet, headers| Ok(HttpResponseHeaders::new(HttpResponseCreated(pet), headers));
        let Some(key) = idempotency_key.into_inner() else {
            let pet = context
                .storage
                .create(pet)
                .await
                .map_err(storage_failure(context))?;
            return created(pet, CreatedHeaders::default());
        };
        let once = Idempotency::new(
            auth.identity(),
            key,
            fingerprint(&pet),
            unix_now(),
            context.idempotency_retention,
        );
        let outcome = context
            .storage
            .create_idempotent(pet, once)
            .await
            .map_err(storage_failure(context))?;
        let count = |outcome| context.count_idempotent(Keyed::CreatePet, outcome);
        match outcome {
            CreateOutcome::Created(pet) => {
                count(KeyedOutcome::Created);
                created(pet, CreatedHeaders::default())
            }
            CreateOutcome::Replayed(pet) => {
                count(KeyedOutcome::Replayed);
                created(pet, CreatedHeaders::replayed())
            }
            CreateOutcome::KeyReused => {
                count(KeyedOutcome::Reused);
                Err(ApiError::idempotency_key_reused(Keyed::CreatePet))
            }
            CreateOutcome::KeyInUse => {
                count(KeyedOutcome::InUse);
                Err(ApiError::idempotency_key_in_use(Keyed::CreatePet))
            }
        }
    }

    async fn get_pet(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
        path: Path<PetPath>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Pet>, DeprecationHeaders>, ApiError> {
        let id = path.into_inner().pet_id;
        let context = service(&rqctx)?;
        match context
            .storage
            .get(id)
            .await
            .map_err(storage_failure(context))?
        {
            Some(pet) => Ok(HttpResponseHeaders::new(
                HttpResponseOk(pet),
                DeprecationHeaders::get_pet(),
            )),
            None => Err(ApiError::not_found(format!("no pet has id {id}"))),
        }
    }

    async fn list_orders(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        query: Query<ListOrdersParams>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Vec<Order>>, OrdersPageHeaders>, ApiError> {
        let params = query.into_inner();
        let limit = params.limit.get();
        let placed_by = placed_by_shown_to(&auth, params.include)?;
        let context = service(&rqctx)?;
        let page = context
            .storage
            .list_orders(OrderQuery {
                limit,
                status: params.status,
                pet_id: params.pet_id,
                after: params.after,
                owner: only_own(&auth),
            })
            .await
            .map_err(storage_failure(context))?;
        let headers = match page.orders.last() {
            Some(last) if page.more => OrdersPageHeaders::next(
                limit,
                params.status,
                params.pet_id,
                params.include,
                last.id,
            ),
            _ => OrdersPageHeaders::default(),
        };
        let orders = page
            .orders
            .into_iter()
            .map(|order| order.answered(placed_by))
            .collect();
        Ok(HttpResponseHeaders::new(HttpResponseOk(orders), headers))
    }

    async fn place_order(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        idempotency_key: IdempotencyKey,
        body: StrictJson<NewOrder>,
    ) -> Result<HttpResponseHeaders<HttpResponseCreated<Order>, CreatedHeaders>, ApiError> {
        let context = service(&rqctx)?;
        let pet_id = body.into_inner().pet_id;
        let once = idempotency_key.into_inner().map(|key| {
            Idempotency::new(
                auth.identity(),
                key,
                order_fingerprint(pet_id),
                unix_now(),
                context.idempotency_retention,
            )
        });
        let keyed = once.is_some();
        let owner = Owner {
            id: OwnerId::of(auth.identity()),
            name: auth.name().to_string(),
        };
        let outcome = context
            .storage
            .place_order(pet_id, owner, once)
            .await
            .map_err(storage_failure(context))?;
        // Who placed it is the key asking: nothing to show.
        let as_placed = |order: StoredOrder| order.answered(PlacedBy::Hidden);
        // Only what a key decided is counted: a refusal of the animal is not.
        let count = |outcome| {
            if keyed {
                context.count_idempotent(Keyed::PlaceOrder, outcome);
            }
        };
        let placed = |order, headers| {
            Ok(HttpResponseHeaders::new(
                HttpResponseCreated(order),
                headers,
            ))
        };
        match outcome {
            PlaceOutcome::Placed(order) => {
                count(KeyedOutcome::Placed);
                placed(as_placed(order), CreatedHeaders::default())
            }
            PlaceOutcome::Replayed(order) => {
                count(KeyedOutcome::Replayed);
                placed(as_placed(order), CreatedHeaders::replayed())
            }
            PlaceOutcome::NotAvailable(status) => Err(ApiError::pet_not_available(
                pet_id,
                status.map(PetStatus::as_str),
            )),
            PlaceOutcome::NoSuchPet => Err(ApiError::pet_not_found(pet_id)),
            PlaceOutcome::KeyReused => {
                count(KeyedOutcome::Reused);
                Err(ApiError::idempotency_key_reused(Keyed::PlaceOrder))
            }
            PlaceOutcome::KeyInUse => {
                count(KeyedOutcome::InUse);
                Err(ApiError::idempotency_key_in_use(Keyed::PlaceOrder))
            }
        }
    }

    async fn get_order(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        path: Path<OrderPath>,
        query: Query<GetOrderParams>,
    ) -> Result<HttpResponseOk<Order>, ApiError> {
        let id = path.into_inner().order_id;
        let placed_by = placed_by_shown_to(&auth, query.into_inner().include)?;
        let context = service(&rqctx)?;
        match context
            .storage
            .get_order(id, only_own(&auth))
            .await
            .map_err(storage_failure(context))?
        {
            Some(order) => Ok(HttpResponseOk(order.answered(placed_by))),
            None => Err(no_such_order(id)),
        }
    }

    async fn update_order(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        path: Path<OrderPath>,
        body: StrictJson<OrderUpdate>,
    ) -> Result<HttpResponseOk<Order>, ApiError> {
        let id = path.into_inner().order_id;
        let to = body.into_inner().status;
        // A customer may cancel, never deliver; refused whatever the order,
        // so the 403 says nothing of whether it exists.
        if to == OrderUpdateStatus::Delivered && !auth.may(Scope::OrdersManage) {
            return Err(ApiError::insufficient_scope(
                "delivering an order",
                &[Scope::OrdersManage],
            ));
        }
        let context = service(&rqctx)?;
        // Another key's order is, to a customer, no order at all. Owners
        // never change, so what this read finds holds for the update.
        if let Some(owner) = only_own(&auth) {
            let own = context
                .storage
                .get_order(id, Some(owner))
                .await
                .map_err(storage_failure(context))?;
            if own.is_none() {
                return Err(no_such_order(id));
            }
        }
        match context
            .storage
            .update_order(id, to)
            .await
            .map_err(storage_failure(context))?
        {
            UpdateOutcome::Done(order) => Ok(HttpResponseOk(order.answered(PlacedBy::Hidden))),
            UpdateOutcome::NoSuchOrder => Err(no_such_order(id)),
            UpdateOutcome::Invalid(from) => Err(ApiError::invalid_transition(
                id,
                from.as_str(),
                OrderStatus::from(to).as_str(),
            )),
        }
    }

    async fn get_inventory(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
    ) -> Result<HttpResponseOk<Inventory>, ApiError> {
        let context = service(&rqctx)?;
        let inventory = context
            .storage
            .inventory()
            .await
            .map_err(storage_failure(context))?;
        Ok(HttpResponseOk(inventory))
    }

    async fn list_events(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        query: Query<ListEventsParams>,
    ) -> Result<EventsPage, ApiError> {
        let params = query.into_inner();
        let limit = params.limit.get();
        let context = service(&rqctx)?;
        let types = params.types.as_ref();
        let query = feed_query(auth.scopes(), auth.identity(), types, params.after, limit);
        let wait = Duration::from_secs(u64::from(params.wait));
        let page = feed_page(context, &auth, types, query, wait).await?;
        let types_param = types.map(EventTypes::to_param);
        let headers =
            EventsPageHeaders::next(limit, types_param.as_deref(), params.wait, page.next_after);
        Ok(EventsPage {
            events: page.events,
            headers,
        })
    }

    // Webhooks (contract 1.7.0): the decisions are `webhooks::api`'s; the
    // scope `webhooks:manage` is checked before them, by `Authenticated`.

    async fn list_webhooks(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        query: Query<ListWebhooksParams>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Vec<Webhook>>, WebhooksPageHeaders>, ApiError>
    {
        let params = query.into_inner();
        let limit = params.limit.get();
        let context = service(&rqctx)?;
        let stored = context
            .webhooks
            .store
            .list_subscriptions(owner_filter(&auth), params.after, limit)
            .await
            .map_err(storage_failure(context))?;
        let headers = match stored.last() {
            Some(last) if stored.len() == limit as usize => {
                WebhooksPageHeaders::next(limit, last.id)
            }
            _ => WebhooksPageHeaders::default(),
        };
        let webhooks = stored.into_iter().map(webhook_of).collect();
        Ok(HttpResponseHeaders::new(HttpResponseOk(webhooks), headers))
    }

    async fn create_webhook(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        body: StrictJson<NewWebhook>,
    ) -> Result<HttpResponseCreated<WebhookCreated>, ApiError> {
        let context = service(&rqctx)?;
        let created = context
            .webhooks
            .create(&auth, &*context.storage, body.into_inner())
            .await
            .map_err(storage_failure(context))??;
        Ok(HttpResponseCreated(created))
    }

    async fn get_webhook(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        path: Path<WebhookPath>,
    ) -> Result<HttpResponseOk<Webhook>, ApiError> {
        let id = path.into_inner().webhook_id;
        let context = service(&rqctx)?;
        match context
            .webhooks
            .store
            .get_subscription(id, owner_filter(&auth))
            .await
            .map_err(storage_failure(context))?
        {
            Some(stored) => Ok(HttpResponseOk(webhook_of(stored))),
            None => Err(ApiError::webhook_not_found(id)),
        }
    }

    async fn delete_webhook(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        path: Path<WebhookPath>,
    ) -> Result<HttpResponseDeleted, ApiError> {
        let id = path.into_inner().webhook_id;
        let context = service(&rqctx)?;
        let deleted = context
            .webhooks
            .store
            .delete_subscription(id, owner_filter(&auth))
            .await
            .map_err(storage_failure(context))?;
        if deleted {
            Ok(HttpResponseDeleted())
        } else {
            Err(ApiError::webhook_not_found(id))
        }
    }

    async fn rotate_webhook_secret(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        path: Path<WebhookPath>,
        query: Query<RotateParams>,
    ) -> Result<HttpResponseOk<WebhookSecret>, ApiError> {
        let id = path.into_inner().webhook_id;
        let keep = query.into_inner().previous_valid_for;
        let context = service(&rqctx)?;
        let rotated = context
            .webhooks
            .rotate(&auth, id, keep)
            .await
            .map_err(storage_failure(context))??;
        Ok(HttpResponseOk(rotated))
    }

    async fn list_webhook_deliveries(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        path: Path<WebhookPath>,
        query: Query<ListDeliveriesParams>,
    ) -> Result<
        HttpResponseHeaders<HttpResponseOk<Vec<WebhookDelivery>>, DeliveriesPageHeaders>,
        ApiError,
    > {
        let id = path.into_inner().webhook_id;
        let params = query.into_inner();
        let limit = params.limit.get();
        let context = service(&rqctx)?;
        let store = &context.webhooks.store;
        let failure = storage_failure(context);
        if store
            .get_subscription(id, owner_filter(&auth))
            .await
            .map_err(&failure)?
            .is_none()
        {
            return Err(ApiError::webhook_not_found(id));
        }
        let stored = store
            .list_deliveries(id, params.before, limit)
            .await
            .map_err(failure)?;
        let headers = match stored.last() {
            Some(last) if stored.len() == limit as usize => {
                DeliveriesPageHeaders::next(id, limit, last.event_id)
            }
            _ => DeliveriesPageHeaders::default(),
        };
        let deliveries = stored.into_iter().map(delivery_view).collect();
        Ok(HttpResponseHeaders::new(
            HttpResponseOk(deliveries),
            headers,
        ))
    }

    async fn replay_webhook(
        rqctx: RequestContext<ApiContext>,
        auth: Authenticated,
        path: Path<WebhookPath>,
        body: StrictJson<ReplayRange>,
    ) -> Result<HttpResponseAccepted<ReplayAccepted>, ApiError> {
        let id = path.into_inner().webhook_id;
        let context = service(&rqctx)?;
        let accepted = context
            .webhooks
            .replay(&auth, &*context.storage, id, body.into_inner())
            .await
            .map_err(storage_failure(context))??;
        Ok(HttpResponseAccepted(accepted))
    }
}
