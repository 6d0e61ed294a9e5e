//! The webhooks' half of the storage interface (since contract 1.7.0):
//! subscriptions, and one delivery per (subscription, event).
//!
//! What each backend promises ([`WebhookStorage`]):
//!
//! - **Each event once per subscription.** Deliveries are made from the
//!   feed, after commit, by [`WebhookStorage::fan_out`]: the deliveries and
//!   the subscription's cursor (`fanned_out`) commit together, and only if
//!   the cursor is still where the caller read it. Whichever instance fans
//!   out, an event becomes one delivery per subscription.
//! - **Claimed by one instance at a time.** [`WebhookStorage::claim`] takes
//!   due deliveries under a lease (on PostgreSQL with `FOR UPDATE SKIP
//!   LOCKED`, so instances take disjoint rows without waiting); a lease that
//!   runs out (its instance died mid-send) is taken again: at least once.
//!   [`WebhookStorage::finish_all`] only counts for the lease it was given.
//! - **In order per resource.** A delivery is not claimable while an
//!   earlier one of the same subscription and resource is still open
//!   (pending or being sent).
//! - **No secret in the clear.** Secrets are stored as the caller sealed
//!   them ([`SealedSecret`]); the storage never sees one.

use chrono::{DateTime, Utc};
use enumset::EnumSet;

use super::StorageError;
use super::events::EventKind;
use super::orders::OwnerId;

/// A signing secret as stored: sealed under a key the database does not
/// hold (see `webhooks::secrets`).
#[derive(Clone, PartialEq, Eq)]
pub struct SealedSecret(pub Vec<u8>);

impl std::fmt::Debug for SealedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealedSecret({} bytes)", self.0.len())
    }
}

/// A subscription to be stored.
#[derive(Clone, Debug)]
pub struct NewSubscription {
    /// Where deliveries are sent (already checked).
    pub url: String,
    /// The kinds of event it receives (what was asked for, within what the
    /// creating key may see).
    pub kinds: EnumSet<EventKind>,
    /// When given, order events only of this owner's orders (a customer's
    /// subscription).
    pub sees_owner: Option<OwnerId>,
    /// Whose subscription it is: the creating key's identity.
    pub creator: OwnerId,
    /// The creating key's name (for operators).
    pub creator_name: String,
    /// Its signing secret, sealed.
    pub secret: SealedSecret,
    /// The feed position it starts after (the head when it was made): its
    /// first delivery is the first event after it.
    pub start_after: i64,
}

/// Whether a subscription is delivered to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriptionState {
    /// Deliveries are sent.
    Active,
    /// Nothing is sent (events are still turned into deliveries once it is
    /// active again) until a replay re-enables it.
    Disabled(DisabledReason),
}

/// Why a subscription was disabled. Stored as its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
pub enum DisabledReason {
    /// The receiver answered `410 Gone`.
    Gone,
    /// A delivery failed on every attempt of the retry schedule.
    RetriesExhausted,
}

/// A subscription as stored.
#[derive(Clone, Debug)]
pub struct StoredSubscription {
    /// Its id.
    pub id: i64,
    /// Where deliveries are sent.
    pub url: String,
    /// The kinds of event it receives.
    pub kinds: EnumSet<EventKind>,
    /// When given, order events only of this owner's orders.
    pub sees_owner: Option<OwnerId>,
    /// Whose it is.
    pub creator: OwnerId,
    /// The creating key's name.
    pub creator_name: String,
    /// Whether it is delivered to.
    pub state: SubscriptionState,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// The last event turned into deliveries (or the start position).
    pub fanned_out: i64,
    /// Its current secret.
    pub secret: SealedSecret,
    /// The secret before the last rotation, and until when deliveries are
    /// also signed with it.
    pub previous_secret: Option<(SealedSecret, DateTime<Utc>)>,
    /// Deliveries not yet delivered nor failed for good (0 from
    /// [`WebhookStorage::active_subscriptions`], which does not count them).
    pub pending: u64,
    /// When a delivery last succeeded.
    pub last_success_at: Option<DateTime<Utc>>,
    /// When an attempt last failed.
    pub last_failure_at: Option<DateTime<Utc>>,
}

/// A delivery to be made: one event for one subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewDelivery {
    /// The event's id (its `webhook-id`).
    pub event_id: i64,
    /// What happened.
    pub kind: EventKind,
    /// The resource the event is about: a pet's id, or minus an order's id
    /// (deliveries of one resource go in event order).
    pub resource: i64,
    /// The request body: the event as the feed answers it, fixed once.
    pub body: String,
}

/// Where a delivery stands. Stored as its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting for its next attempt.
    Pending,
    /// Claimed by an instance, which is sending it.
    Sending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed, or the receiver answered 410.
    Failed,
}

/// A delivery as stored (what operators read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDelivery {
    /// The event's id.
    pub event_id: i64,
    /// What happened.
    pub kind: EventKind,
    /// Where it stands.
    pub state: DeliveryState,
    /// Attempts so far, counting one under way (`Sending`): its number is
    /// its lease's token. See [`StoredDelivery::attempts_made`].
    pub attempts: u32,
    /// The last attempt's HTTP status, if it got one.
    pub last_status: Option<u16>,
    /// The last attempt's failure, if it failed.
    pub last_error: Option<String>,
    /// When the last attempt was made.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// When the next attempt is due (pending only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the receiver took it.
    pub delivered_at: Option<DateTime<Utc>>,
}

impl StoredDelivery {
    /// The attempts made, as the contract and operators count them: those
    /// begun, less one still under way (`sending` with 1 would say an
    /// attempt was made that has no `lastAttemptAt` yet). An attempt whose
    /// instance died counts once another claim takes the delivery again;
    /// it has no `last_*` fields of its own.
    pub fn attempts_made(&self) -> u32 {
        match self.state {
            DeliveryState::Sending => self.attempts.saturating_sub(1),
            _ => self.attempts,
        }
    }
}

/// A delivery claimed for sending.
#[derive(Clone, Debug)]
pub struct ClaimedDelivery {
    /// The subscription.
    pub webhook_id: i64,
    /// The event's id.
    pub event_id: i64,
    /// This attempt's number, from 1 (the lease's token: a finish for
    /// another attempt changes nothing).
    pub attempt: u32,
    /// Where to send it.
    pub url: String,
    /// The request body.
    pub body: String,
    /// The secrets to sign with: the current one, and the previous one
    /// while it is still valid.
    pub secrets: Vec<SealedSecret>,
}

/// How many deliveries a claim may take: in all, and of each subscription
/// (so that one subscription, whose receiver hangs, cannot take every
/// request the deliverer may have in flight).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRoom {
    /// In all.
    pub total: usize,
    /// Of a subscription that `fuller` does not name.
    pub each: usize,
    /// Subscriptions with less room than `each`, and their room.
    pub fuller: Vec<(i64, usize)>,
}

impl ClaimRoom {
    /// How many deliveries of subscription `id` the claim may take.
    pub fn of(&self, id: i64) -> usize {
        let room = self
            .fuller
            .iter()
            .find(|(fuller, _)| *fuller == id)
            .map_or(self.each, |(_, room)| *room);
        room.min(self.total)
    }
}

/// What became of an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptOutcome {
    /// The HTTP status, if the receiver answered.
    pub status: Option<u16>,
    /// What failed, if it did (at most a few hundred characters).
    pub error: Option<String>,
    /// When the attempt was made (its `webhook-timestamp`).
    pub at: DateTime<Utc>,
    /// When it ended: the answer came, or it failed (a timeout, say).
    /// Deliveries and failures are dated by it, and the next attempt waits
    /// from it.
    pub ended: DateTime<Utc>,
    /// What happens next.
    pub next: NextStep,
}

/// An attempt's outcome, for the claim it was made under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedAttempt {
    /// The subscription.
    pub webhook_id: i64,
    /// The event's id.
    pub event_id: i64,
    /// The attempt's number: its claim.
    pub attempt: u32,
    /// What became of it.
    pub outcome: AttemptOutcome,
}

impl FinishedAttempt {
    /// The outcome of `delivery`'s attempt.
    pub fn of(delivery: &ClaimedDelivery, outcome: AttemptOutcome) -> FinishedAttempt {
        FinishedAttempt {
            webhook_id: delivery.webhook_id,
            event_id: delivery.event_id,
            attempt: delivery.attempt,
            outcome,
        }
    }
}

/// What happens after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextStep {
    /// Delivered (2xx).
    Delivered,
    /// Tried again at this time.
    RetryAt(DateTime<Utc>),
    /// Failed for good: the schedule is exhausted. The subscription is
    /// disabled (`retries_exhausted`).
    Exhausted,
    /// The receiver answered 410: the delivery failed and the subscription
    /// is disabled (`gone`).
    Gone,
}

/// What operators watch of every subscription (`/metrics`), whoever made
/// it: a revoked key's too, which no key can read through the API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WebhookCounts {
    /// Subscriptions delivered to.
    pub active: u64,
    /// Subscriptions disabled (`410`, or a delivery's retries exhausted),
    /// waiting for a replay.
    pub disabled: u64,
    /// Deliveries of every subscription not yet delivered nor failed for
    /// good: the backlog, whether it waits for a retry, a slow receiver or
    /// a replay.
    pub open_deliveries: u64,
}

/// Which subscriptions a caller may see: its own, or (`None`) every one.
pub type SubscriptionOwner = Option<OwnerId>;

/// Subscriptions and their deliveries.
#[async_trait::async_trait]
pub trait WebhookStorage: Send + Sync + 'static {
    /// Stores a new subscription, active.
    async fn create_subscription(
        &self,
        new: NewSubscription,
    ) -> Result<StoredSubscription, StorageError>;

    /// At most `limit` subscriptions whose id is greater than `after`, in
    /// id order (only `owner`'s when given).
    async fn list_subscriptions(
        &self,
        owner: SubscriptionOwner,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StoredSubscription>, StorageError>;

    /// The subscription `id` (when `owner` is given, only if it is theirs).
    async fn get_subscription(
        &self,
        id: i64,
        owner: SubscriptionOwner,
    ) -> Result<Option<StoredSubscription>, StorageError>;

    /// Deletes the subscription `id` and its deliveries; `false` if there
    /// is none (of `owner`'s).
    async fn delete_subscription(
        &self,
        id: i64,
        owner: SubscriptionOwner,
    ) -> Result<bool, StorageError>;

    /// Replaces the secret of subscription `id` by `secret`; the current one
    /// stays valid beside it until `previous_until`. `None` if there is no
    /// such subscription (of `owner`'s).
    async fn rotate_secret(
        &self,
        id: i64,
        owner: SubscriptionOwner,
        secret: SealedSecret,
        previous_until: DateTime<Utc>,
    ) -> Result<Option<StoredSubscription>, StorageError>;

    /// Every active subscription (what fan-out reads the feed for), with
    /// `pending` not counted: 0.
    async fn active_subscriptions(&self) -> Result<Vec<StoredSubscription>, StorageError>;

    /// Stores `deliveries` (due now) for subscription `id` and moves its
    /// cursor from `from` to `to`, in one transaction, only if the cursor is
    /// still at `from` and the subscription still exists and is active.
    /// Returns whether it did (`false`: another instance fanned out first,
    /// or the subscription was disabled or deleted meanwhile; nothing
    /// stored). A disabled subscription's events are not deliveries until
    /// a replay makes it active again, even those committed in the moment
    /// before fan-out learns it was disabled.
    async fn fan_out(
        &self,
        id: i64,
        from: i64,
        to: i64,
        deliveries: Vec<NewDelivery>,
    ) -> Result<bool, StorageError>;

    /// Claims due deliveries of active subscriptions for `lease`, as
    /// `instance`, the earliest due first, as many as `room` lets it: each
    /// becomes `sending`, its attempt count grows by one, and no other
    /// claim takes it until the lease ends. A delivery is due when its next
    /// attempt's time has come (or its lease ran out) and no earlier
    /// delivery of the same subscription and resource is open.
    async fn claim(
        &self,
        instance: &str,
        room: &ClaimRoom,
        lease: std::time::Duration,
    ) -> Result<Vec<ClaimedDelivery>, StorageError>;

    /// Records the outcomes of attempts in one commit, each only if
    /// `instance` still holds the claim for that attempt (a lease that ran
    /// out still counts until another claim takes the delivery). Returns,
    /// for each, whether it did. (The deliverer records what finished
    /// while the last commit was being made: one commit per delivery cost
    /// more than the request itself.)
    async fn finish_all(
        &self,
        instance: &str,
        finished: &[FinishedAttempt],
    ) -> Result<Vec<bool>, StorageError>;

    /// When a claim would next find a pending delivery if nothing else
    /// changed, if ever (the deliverer sleeps until then, at most a
    /// second): the earliest due time of a pending delivery of an active
    /// subscription that no earlier delivery of its resource holds back. A
    /// delivery held back is not counted: it becomes due when the one
    /// before it is finished. Nor is the end of a lease (a delivery being
    /// sent is claimed again when its lease runs out): finding the few
    /// deliveries being sent would read every open one, and the
    /// deliverer's one-second tick takes them again, a lease lasting the
    /// request's timeout and more. Subscriptions in `excluding` (those a
    /// claim has no room for) are left out.
    async fn next_due(&self, excluding: &[i64]) -> Result<Option<DateTime<Utc>>, StorageError>;

    /// At most `limit` deliveries of subscription `id`, newest event first,
    /// whose event id is smaller than `before` when given.
    async fn list_deliveries(
        &self,
        id: i64,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StoredDelivery>, StorageError>;

    /// Makes `deliveries` of subscription `id` pending again, due now, with
    /// no attempt counted (stored anew where missing), and makes the
    /// subscription active. Returns how many were replayed (none when there
    /// is no such subscription).
    async fn replay(&self, id: i64, deliveries: Vec<NewDelivery>) -> Result<u64, StorageError>;

    /// Every subscription counted by state, and their open deliveries, from
    /// one snapshot.
    async fn counts(&self) -> Result<WebhookCounts, StorageError>;

    /// Deletes at most `limit` deliveries that are delivered or failed and
    /// whose last attempt was before `before`; returns how many.
    async fn purge_deliveries(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<usize, StorageError>;
}

// What both backends share: how the outcome of an attempt is stored, and
// how stored columns decode (a row another program wrote, or a newer
// server, is reported with its subscription's id).

impl NewSubscription {
    /// The subscription as stored under `id` at `created_at`: active, no
    /// delivery yet.
    pub(super) fn stored(self, id: i64, created_at: DateTime<Utc>) -> StoredSubscription {
        StoredSubscription {
            id,
            url: self.url,
            kinds: self.kinds,
            sees_owner: self.sees_owner,
            creator: self.creator,
            creator_name: self.creator_name,
            state: SubscriptionState::Active,
            created_at,
            fanned_out: self.start_after,
            secret: self.secret,
            previous_secret: None,
            pending: 0,
            last_success_at: None,
            last_failure_at: None,
        }
    }
}

impl NextStep {
    /// The state the attempt leaves its delivery in.
    pub(super) fn delivery_state(self) -> DeliveryState {
        match self {
            NextStep::Delivered => DeliveryState::Delivered,
            NextStep::RetryAt(_) => DeliveryState::Pending,
            NextStep::Exhausted | NextStep::Gone => DeliveryState::Failed,
        }
    }

    /// When the next attempt is due, if there is one.
    pub(super) fn retry_at(self) -> Option<DateTime<Utc>> {
        match self {
            NextStep::RetryAt(at) => Some(at),
            _ => None,
        }
    }

    /// Why the attempt disables its subscription, if it does.
    pub(super) fn disables(self) -> Option<DisabledReason> {
        match self {
            NextStep::Exhausted => Some(DisabledReason::RetriesExhausted),
            NextStep::Gone => Some(DisabledReason::Gone),
            NextStep::Delivered | NextStep::RetryAt(_) => None,
        }
    }
}

/// Replayed deliveries once each, in event order: an upsert may change a
/// row only once per statement, and locks taken in one order cannot
/// deadlock.
pub(super) fn distinct(mut deliveries: Vec<NewDelivery>) -> Vec<NewDelivery> {
    deliveries.sort_by_key(|delivery| delivery.event_id);
    deliveries.dedup_by_key(|delivery| delivery.event_id);
    deliveries
}

fn bad(id: i64, reason: String) -> StorageError {
    StorageError::BadWebhook { id, reason }
}

/// A subscription's stored state and reason (`disabled` always has one).
pub(super) fn stored_state(
    id: i64,
    state: &str,
    reason: Option<&str>,
) -> Result<SubscriptionState, StorageError> {
    match (state, reason) {
        ("active", None) => Ok(SubscriptionState::Active),
        ("disabled", Some(reason)) => reason
            .parse()
            .map(SubscriptionState::Disabled)
            .map_err(|_| bad(id, format!("its disabled reason {reason:?} is unknown"))),
        _ => Err(bad(
            id,
            format!("its state {state:?} (reason {reason:?}) is unknown"),
        )),
    }
}

/// A subscription's stored kinds: the bits of its event kinds (a kind this
/// server does not know, stored by a newer one, is left out).
pub(super) fn stored_kinds(id: i64, bits: i64) -> Result<EnumSet<EventKind>, StorageError> {
    u8::try_from(bits)
        .map(EnumSet::from_repr_truncated)
        .map_err(|_| bad(id, format!("its kinds {bits} are not a set of event kinds")))
}

/// How a subscription's kinds are stored.
pub(super) fn kinds_column(kinds: EnumSet<EventKind>) -> i16 {
    i16::from(kinds.as_repr())
}

/// An owner as stored: 32 bytes.
pub(super) fn stored_owner(id: i64, column: &str, bytes: &[u8]) -> Result<OwnerId, StorageError> {
    <[u8; 32]>::try_from(bytes).map(OwnerId).map_err(|_| {
        bad(
            id,
            format!("its {column} has {} bytes instead of 32", bytes.len()),
        )
    })
}

/// A delivery's stored state.
pub(super) fn stored_delivery_state(id: i64, state: &str) -> Result<DeliveryState, StorageError> {
    state
        .parse()
        .map_err(|_| bad(id, format!("a delivery's state {state:?} is unknown")))
}

/// A delivery's stored event kind.
pub(super) fn stored_kind(id: i64, code: i64) -> Result<EventKind, StorageError> {
    EventKind::from_code(code)
        .ok_or_else(|| bad(id, format!("a delivery's kind {code} is unknown")))
}

/// SQL, both backends: when the latest open delivery of subscription
/// `$webhook`'s resource `$resource` is next due, if it has one (NULL:
/// none); the earlier ones are due no later, each having been stored or
/// put off no sooner than the one before. A delivery stored or put off
/// behind them waits at least that long. Keeping a held delivery's
/// `next_at` no earlier than the one it waits for keeps it out of the
/// claim's way: the claim walks `(next_at, event_id)` and passes over
/// every held delivery due before it finds one it may take (after a
/// receiver's outage, 50,000 held deliveries cost each claim 117 ms
/// instead of 20 on PostgreSQL: BENCHMARKS.md, issue 28, eighteenth and
/// nineteenth passes).
///
/// Written as the last row of `webhook_deliveries_open`, in its order,
/// not as `max(next_at)`: SQLite answered a `max` from the index on
/// `(webhook_id, next_at)`, reading every open delivery of the
/// subscription for each one stored (`EXPLAIN QUERY PLAN`; at 5,000
/// creates a second, 110 deliveries a second instead of 5,000), and
/// PostgreSQL may take the same index for it.
macro_rules! held_until {
    ($webhook:literal, $resource:literal) => {
        concat!(
            "(SELECT e.next_at FROM webhook_deliveries e
              WHERE e.webhook_id = ",
            $webhook,
            " AND e.resource = ",
            $resource,
            " AND e.state IN ('pending', 'sending')
              ORDER BY e.webhook_id DESC, e.resource DESC, e.event_id DESC LIMIT 1)"
        )
    };
}
pub(super) use held_until;
