//! The webhook operations' decisions, for the handlers: who sees which
//! subscription, what a new one receives, what a replay re-sends. Each
//! answers the contract's types or its errors.

use chrono::Utc;
use enumset::EnumSet;

use petstore_api::auth::Authenticated;
use petstore_api::error::ApiError;
use petstore_api::model::{
    self, EventType, NewWebhook, ReplayAccepted, ReplayRange, Webhook, WebhookCreated,
    WebhookDelivery, WebhookDeliveryState, WebhookDisabledReason, WebhookSecret, WebhookState,
};
use petstore_api::scopes::Scope;
use strum::VariantArray;

use super::Webhooks;
use super::fanout::{delivery_of, receivable};
use super::secrets::{SealingKeys, SigningSecret};
use super::target::TargetRefused;
use crate::storage::webhooks::{
    DeliveryState, DisabledReason, NewSubscription, SealedSecret, StoredDelivery,
    StoredSubscription, SubscriptionOwner, SubscriptionState,
};
use crate::storage::{EventKind, EventsOutcome, OwnerId, Storage, StorageError};

/// Whose subscriptions a key sees: its own, those it made (another key's
/// is no subscription at all: `404`).
pub fn owner_filter(auth: &Authenticated) -> SubscriptionOwner {
    Some(OwnerId::of(auth.identity()))
}

/// Whose orders' events a key's subscription carries: every order's for
/// `orders:manage`, else only its own.
fn orders_seen(auth: &Authenticated) -> Option<OwnerId> {
    (!auth.may(Scope::OrdersManage)).then(|| OwnerId::of(auth.identity()))
}

/// Whether a key may see events of `event_type`.
fn may_see(auth: &Authenticated, event_type: EventType) -> Option<&'static [Scope]> {
    if event_type.is_order() {
        let admitting: &'static [Scope] = &[Scope::OrdersPlace, Scope::OrdersManage];
        (!admitting.iter().any(|scope| auth.may(*scope))).then_some(admitting)
    } else {
        (!auth.may(Scope::PetsRead)).then_some(&[Scope::PetsRead])
    }
}

/// The kinds a new subscription receives: the types asked for, each of
/// which the key must be allowed to see (`403` names the scope missing);
/// without `types`, every type the key may see (`403` if none).
fn subscribed_kinds(
    auth: &Authenticated,
    types: Option<&[EventType]>,
) -> Result<EnumSet<EventKind>, ApiError> {
    let asked = types.unwrap_or(EventType::VARIANTS);
    let mut kinds = EnumSet::empty();
    for event_type in asked {
        match may_see(auth, *event_type) {
            None => kinds |= EventKind::of_type(*event_type),
            Some(needed) if types.is_some() => {
                let what = format!("a webhook for {} events", event_type.as_str());
                return Err(ApiError::insufficient_scope(&what, needed));
            }
            Some(_) => {}
        }
    }
    if kinds.is_empty() {
        return Err(ApiError::insufficient_scope(
            "a webhook (it would receive no event this key may see)",
            &[Scope::PetsRead, Scope::OrdersPlace, Scope::OrdersManage],
        ));
    }
    Ok(kinds)
}

impl Webhooks {
    /// The keys, or `503` when webhooks are off.
    fn keys(&self) -> Result<&SealingKeys, ApiError> {
        self.keys.as_deref().ok_or_else(|| {
            ApiError::unavailable(
                "webhooks are not configured on this server: every instance needs the same \
                     --webhook-key-file",
            )
        })
    }

    /// `createWebhook`: checks the target, makes the secret, stores the
    /// subscription starting at the feed's head.
    pub async fn create(
        &self,
        auth: &Authenticated,
        storage: &dyn Storage,
        new: NewWebhook,
    ) -> Result<Result<WebhookCreated, ApiError>, StorageError> {
        let checked = async {
            let keys = self.keys()?;
            let kinds = subscribed_kinds(auth, new.types.as_deref())?;
            let refused =
                |refused: TargetRefused| ApiError::webhook_target_refused(&refused.to_string());
            let url = self.policy.check_url(&new.url).map_err(refused)?;
            self.policy.resolve_and_check(&url).await.map_err(refused)?;
            let (secret, sealed) = new_secret(keys)?;
            Ok((kinds, url, sealed, secret))
        };
        let (kinds, url, sealed, secret) = match checked.await {
            Ok(checked) => checked,
            Err(refused) => return Ok(Err(refused)),
        };
        let start_after = *storage.events_head().borrow();
        let stored = self
            .store
            .create_subscription(NewSubscription {
                url: url.to_string(),
                kinds,
                sees_owner: orders_seen(auth),
                creator: OwnerId::of(auth.identity()),
                creator_name: auth.name().to_string(),
                secret: sealed,
                start_after,
            })
            .await?;
        self.changed.notify_one();
        Ok(Ok(WebhookCreated {
            webhook: webhook_of(stored),
            secret: model::SigningSecret::new(secret.to_whsec()),
        }))
    }

    /// `rotateWebhookSecret`.
    pub async fn rotate(
        &self,
        auth: &Authenticated,
        id: i64,
        previous_valid_for: std::time::Duration,
    ) -> Result<Result<WebhookSecret, ApiError>, StorageError> {
        let keys = match self.keys() {
            Ok(keys) => keys,
            Err(off) => return Ok(Err(off)),
        };
        let (secret, sealed) = match new_secret(keys) {
            Ok(made) => made,
            Err(failed) => return Ok(Err(failed)),
        };
        let until = Utc::now()
            + chrono::TimeDelta::from_std(previous_valid_for).unwrap_or(chrono::TimeDelta::zero());
        let rotated = self
            .store
            .rotate_secret(id, owner_filter(auth), sealed, until)
            .await?;
        Ok(match rotated {
            Some(_) => Ok(WebhookSecret {
                secret: model::SigningSecret::new(secret.to_whsec()),
                previous_valid_until: until,
            }),
            None => Err(ApiError::webhook_not_found(id)),
        })
    }

    /// `replayWebhook`: the range's events, as the subscription sees them,
    /// become pending deliveries again (at most [`model::REPLAY_EVENTS_MAX`] ids examined).
    pub async fn replay(
        &self,
        auth: &Authenticated,
        storage: &dyn Storage,
        id: i64,
        range: ReplayRange,
    ) -> Result<Result<ReplayAccepted, ApiError>, StorageError> {
        let (from, to) = (range.from, range.to);
        if from > to {
            return Ok(Err(ApiError::invalid_replay_range(from, to)));
        }
        let Some(subscription) = self.store.get_subscription(id, owner_filter(auth)).await? else {
            return Ok(Err(ApiError::webhook_not_found(id)));
        };
        let mut deliveries = Vec::new();
        // Ids start at 1: a range from 0 starts at the first event.
        let mut through = (from - 1).max(0);
        // Ids are never used twice, so a span of this many holds at most as
        // many events.
        let last = to.min(through.saturating_add(model::REPLAY_EVENTS_MAX as i64));
        while through < last {
            let query = receivable(&subscription, auth.scopes(), through);
            let page = match storage.events(query).await? {
                EventsOutcome::Page(page) => page,
                EventsOutcome::Expired { floor } => {
                    return Ok(Err(ApiError::replay_range_expired(from, floor)));
                }
            };
            let moved = page.next_after > through;
            deliveries.extend(
                page.events
                    .into_iter()
                    .filter(|event| event.id <= last)
                    .map(delivery_of),
            );
            // Nothing it may see follows yet: the rest of the range is
            // examined too, since what is committed later is delivered as
            // ever — unless the subscription was fanned out beyond this
            // instance's head (another instance's head was ahead): those
            // events are examined on a later call, once this head passes
            // them.
            let past_fanned_out = page.next_after >= subscription.fanned_out;
            if page.at_head && page.next_after <= last && past_fanned_out {
                through = to;
                break;
            }
            through = page.next_after.min(last);
            if !moved {
                break;
            }
        }
        let replayed = self.store.replay(id, deliveries).await?;
        self.due.notify_one();
        self.changed.notify_one();
        Ok(Ok(ReplayAccepted {
            deliveries: replayed,
            through,
        }))
    }
}

/// A new signing secret, and how it is stored. Failing to draw random
/// bytes or to seal them is a fault of ours (500).
fn new_secret(keys: &SealingKeys) -> Result<(SigningSecret, SealedSecret), ApiError> {
    let secret = SigningSecret::generate().map_err(|e| ApiError::internal(&e))?;
    let sealed = keys.seal(&secret).map_err(|e| ApiError::internal(&e))?;
    Ok((secret, sealed))
}

/// A subscription as the contract shows it (never its secret).
pub fn webhook_of(stored: StoredSubscription) -> Webhook {
    let (state, disabled_reason) = match stored.state {
        SubscriptionState::Active => (WebhookState::Active, None),
        SubscriptionState::Disabled(reason) => (
            WebhookState::Disabled,
            Some(match reason {
                DisabledReason::Gone => WebhookDisabledReason::Gone,
                DisabledReason::RetriesExhausted => WebhookDisabledReason::RetriesExhausted,
            }),
        ),
    };
    Webhook {
        id: stored.id,
        url: stored.url,
        types: subscribed_types(stored.kinds),
        state,
        disabled_reason,
        created_at: stored.created_at,
        pending: stored.pending,
        last_success_at: stored.last_success_at,
        last_failure_at: stored.last_failure_at,
    }
}

/// The contract's event types of the kinds a subscription receives, in
/// the contract's order (an animal's three status changes are one type).
pub fn subscribed_types(kinds: EnumSet<EventKind>) -> Vec<EventType> {
    let mut types: Vec<EventType> = kinds.iter().map(EventKind::event_type).collect();
    types.sort_unstable();
    types.dedup();
    types
}

/// A delivery as the contract shows it.
pub fn delivery_view(stored: StoredDelivery) -> WebhookDelivery {
    WebhookDelivery {
        attempts: stored.attempts_made(),
        event_id: stored.event_id,
        event_type: stored.kind.event_type(),
        state: match stored.state {
            DeliveryState::Pending => WebhookDeliveryState::Pending,
            DeliveryState::Sending => WebhookDeliveryState::Sending,
            DeliveryState::Delivered => WebhookDeliveryState::Delivered,
            DeliveryState::Failed => WebhookDeliveryState::Failed,
        },
        last_status: stored.last_status,
        last_error: stored.last_error,
        last_attempt_at: stored.last_attempt_at,
        next_attempt_at: stored.next_attempt_at,
        delivered_at: stored.delivered_at,
    }
}
