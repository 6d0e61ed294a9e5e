//! Fan-out: turning the feed into deliveries, after commit and off the
//! write path. Each active subscription has a cursor in the feed; a round
//! reads the events after it (as its creator's key would see them) and
//! stores their deliveries together with the moved cursor, compare-and-set
//! ([`WebhookStorage::fan_out`]), so that whichever instance gets there
//! first makes each delivery once. The same compare-and-set insists that
//! the subscription is still active: from the moment one is disabled its
//! cursor waits, and the events after it become deliveries only once a
//! replay makes it active again (not in the second before fan-out reads
//! the subscriptions again).
//!
//! What a subscription receives follows its maker's key *now*: the kinds it
//! asked for that the key may still see, its own orders only once the key
//! lost `orders:manage`, and nothing while the key is revoked or expired
//! (its cursor then waits where it is).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use petstore_api::scopes::{Scope, Scopes};
use tokio::sync::Notify;

use crate::keyring::Keyring;
use crate::keys::KeyDigest;
use crate::storage::outage::Outage;
use crate::storage::webhooks::{NewDelivery, StoredSubscription, WebhookStorage};
use crate::storage::{EventKind, OwnerId};
use crate::storage::{EventQuery, EventsOutcome, LIST_MAX, Storage, StorageError, StoredEvent};

/// How often the subscriptions are read again without a wake-up (another
/// instance's new subscription, a replay there).
const REFRESH: Duration = Duration::from_secs(1);

/// The shortest gap between two rounds: under a stream of commits, rounds
/// batch their events instead of running once per commit (and, on SQLite,
/// leave the file's one write lock to the writer between them).
const ROUND_GAP: Duration = Duration::from_millis(50);

/// Fans out until aborted: a round after the feed's head moves, after a
/// wake-up (a subscription made or replayed here) and at least every
/// [`REFRESH`]. After a round that stored deliveries, `delivered` is
/// notified (the deliverer claims them at once).
///
/// A cursor that moves past events without storing a delivery (events the
/// subscription does not receive) moves in memory, and is stored at most
/// every [`REFRESH`]: a busy feed costs a subscription that receives little
/// one write a second, not one per round. Its next deliveries are stored
/// from the stored cursor, compare-and-set as ever, so nothing is skipped
/// whichever instance gets there.
pub async fn run(
    storage: Arc<dyn Storage>,
    hooks: Arc<dyn WebhookStorage>,
    keyring: Arc<Keyring>,
    wake: Arc<Notify>,
    delivered: Arc<Notify>,
    log: slog::Logger,
) {
    let mut head = storage.events_head();
    let mut subscriptions: Vec<StoredSubscription> = Vec::new();
    let mut read_to: HashMap<i64, i64> = HashMap::new();
    let mut refreshed = tokio::time::Instant::now() - REFRESH;
    let outage = Outage::new("webhook fan-out", log);
    loop {
        let seen = *head.borrow_and_update();
        let refresh_due = refreshed.elapsed() >= REFRESH;
        if refresh_due {
            match hooks.active_subscriptions().await {
                Ok(active) => {
                    outage.answered();
                    subscriptions = active;
                }
                Err(e) => outage.failed("reading the webhook subscriptions", &e),
            }
            refreshed = tokio::time::Instant::now();
        }
        let mut stale = false;
        for subscription in &mut subscriptions {
            let Ok(scopes) = keyring.scopes_now(KeyDigest(subscription.creator.0)) else {
                continue;
            };
            let read = read_to.entry(subscription.id).or_insert(0);
            let round = fan_out_one(&*storage, &*hooks, subscription, scopes, read).await;
            let round = match round {
                Ok(Round::Nothing) if refresh_due => {
                    store_cursor(&*hooks, subscription, *read).await
                }
                other => other,
            };
            if round.is_ok() {
                outage.answered();
            }
            match round {
                Ok(Round::Stored) => delivered.notify_one(),
                Ok(Round::Nothing) => {}
                Ok(Round::Stale) => stale = true,
                Err(e) => outage.failed("turning events into webhook deliveries", &e),
            }
        }
        if stale {
            // Another instance moved a cursor (or a subscription went, or
            // was disabled): read them again before the next round.
            refreshed = tokio::time::Instant::now() - REFRESH;
        }
        tokio::time::sleep(ROUND_GAP).await;
        tokio::select! {
            _ = head.wait_for(|now| *now != seen) => {}
            () = wake.notified() => refreshed = tokio::time::Instant::now() - REFRESH,
            () = tokio::time::sleep(REFRESH) => {}
        }
    }
}

/// What one subscription's round came to.
enum Round {
    /// Deliveries were stored.
    Stored,
    /// No delivery was stored.
    Nothing,
    /// Its stored cursor had moved elsewhere (or it is gone).
    Stale,
}

/// Reads the feed from where `read` (or the stored cursor, if further)
/// says up to the head, a page at a time; stores the deliveries of each
/// page that has any, with the stored cursor moved over every page read.
async fn fan_out_one(
    storage: &dyn Storage,
    hooks: &dyn WebhookStorage,
    subscription: &mut StoredSubscription,
    scopes: Scopes,
    read: &mut i64,
) -> Result<Round, StorageError> {
    let mut round = Round::Nothing;
    *read = (*read).max(subscription.fanned_out);
    loop {
        let query = receivable(subscription, scopes, *read);
        let (to, deliveries, at_head) = match storage.events(query).await? {
            EventsOutcome::Page(page) => (
                page.next_after,
                page.events.into_iter().map(delivery_of).collect::<Vec<_>>(),
                page.at_head,
            ),
            // Purged before it was fanned out (the subscription was
            // disabled longer than the retention): nothing left to send.
            EventsOutcome::Expired { floor } => (floor, Vec::new(), false),
        };
        if to <= *read {
            return Ok(round);
        }
        // `read` runs ahead of the stored cursor only over events that made
        // no delivery: a page's deliveries are stored, or it is read again.
        if !deliveries.is_empty() {
            if !hooks
                .fan_out(subscription.id, subscription.fanned_out, to, deliveries)
                .await?
            {
                // Another instance stored from there first (or the
                // subscription was disabled): start again from the stored
                // cursor, once it is read again.
                *read = subscription.fanned_out;
                return Ok(Round::Stale);
            }
            subscription.fanned_out = to;
            round = Round::Stored;
        }
        *read = to;
        if at_head {
            return Ok(round);
        }
    }
}

/// Stores a cursor moved in memory only (past events without deliveries).
async fn store_cursor(
    hooks: &dyn WebhookStorage,
    subscription: &mut StoredSubscription,
    read: i64,
) -> Result<Round, StorageError> {
    if read <= subscription.fanned_out {
        return Ok(Round::Nothing);
    }
    if !hooks
        .fan_out(subscription.id, subscription.fanned_out, read, Vec::new())
        .await?
    {
        return Ok(Round::Stale);
    }
    subscription.fanned_out = read;
    Ok(Round::Nothing)
}

/// The page of the events after `after` that `subscription` receives now,
/// its maker's key holding `scopes`: the kinds it asked for that the key
/// may still see, and every order's only while the key holds
/// `orders:manage`. (What a subscription receives follows its key's
/// scopes of the moment, for fan-out and replay alike.)
pub fn receivable(subscription: &StoredSubscription, scopes: Scopes, after: i64) -> EventQuery {
    EventQuery {
        after: Some(after),
        limit: LIST_MAX,
        kinds: subscription.kinds & EventKind::visible_to(scopes),
        owner: if scopes.contains(Scope::OrdersManage) {
            subscription.sees_owner
        } else {
            Some(OwnerId(subscription.creator.0))
        },
    }
}

/// The delivery of `event`: its body is the event exactly as the feed
/// answers it.
pub fn delivery_of(event: StoredEvent) -> NewDelivery {
    let event_id = event.id;
    let kind = event.kind;
    let resource = event.resource();
    let body = event.to_json();
    NewDelivery {
        event_id,
        kind,
        resource,
        body,
    }
}
