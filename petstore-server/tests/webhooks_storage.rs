//! The webhooks' storage, specified on real databases — a SQLite file and a
//! throwaway PostgreSQL database, each opened as the server opens it
//! (`storage::open`). Every specification runs on both backends
//! (`sqlite::…`, `postgres::…`):
//!
//! - subscriptions are made active and seen, rotated and deleted only by
//!   their creator (or by a caller who sees every one);
//! - a fan-out moves a subscription's cursor only from where it was read,
//!   and stores its deliveries only then;
//! - a claim counts an attempt, a retry is due when it says, a delivery is
//!   delivered once, and a finish counts only once;
//! - an exhausted schedule or a `410` disables the subscription, whose
//!   deliveries then wait, until a replay makes them pending again;
//! - one resource's deliveries go in event order, other resources' (and
//!   other subscriptions') do not wait for them;
//! - a lease that runs out is claimed again, and the old claim's finish
//!   then counts for nothing; the next due time leaves leases out;
//! - outcomes recorded together each count as they would alone, and their
//!   subscriptions learn the latest success and failure among them;
//! - a claim takes no more of a subscription than its room, the earliest
//!   due first, and the next due time leaves out the subscriptions asked;
//! - a rotated secret signs beside the new one until it expires;
//! - a purge deletes only finished deliveries, older than asked.
//!
//! And on PostgreSQL, two instances at once: claiming, they never take the
//! same delivery and together take every one, in order per resource;
//! fanning out from the same cursor, one of them stores the events.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use enumset::EnumSet;
use petstore_server::storage::{
    self, AttemptOutcome, ClaimRoom, ClaimedDelivery, Database, DatabaseUrl, DeliveryState,
    DisabledReason, EventKind, FinishedAttempt, NewDelivery, NewSubscription, NextStep, OwnerId,
    PostgresUrl, SealedSecret, StorageMetrics, StoredDelivery, StoredSubscription,
    SubscriptionState, WebhookStorage,
};
use petstore_support::postgres::TestDatabase;
use petstore_support::{SOON, eventually_some};

/// A lease no test outlives, unless it waits for it on purpose.
const LEASE: Duration = Duration::from_secs(60);

/// An open database, and what must outlive it.
struct Opened {
    database: Database,
    url: DatabaseUrl,
    _dir: tempfile::TempDir,
    _postgres: Option<TestDatabase>,
}

impl Opened {
    fn webhooks(&self) -> &dyn WebhookStorage {
        &*self.database.webhooks
    }
}

async fn open(url: &DatabaseUrl) -> Database {
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let fatal = tokio::sync::watch::Sender::new(None);
    storage::open(url, &log, fatal, StorageMetrics::default())
        .await
        .expect("the database opens")
}

async fn on_sqlite() -> Opened {
    let dir = tempfile::tempdir().unwrap();
    let url = DatabaseUrl::Sqlite(dir.path().join("petstore.db"));
    Opened {
        database: open(&url).await,
        url,
        _dir: dir,
        _postgres: None,
    }
}

/// `None` only when PostgreSQL is unavailable and the developer opted out.
async fn on_postgres() -> Option<Opened> {
    let postgres = petstore_support::postgres::fresh_database().await?;
    let url = DatabaseUrl::Postgres(PostgresUrl::parse(postgres.url()).unwrap());
    Some(Opened {
        database: open(&url).await,
        url,
        _dir: tempfile::tempdir().unwrap(),
        _postgres: Some(postgres),
    })
}

/// Each specification, as a test on each backend.
macro_rules! on_both_backends {
    ($($spec:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $spec() {
                    let opened = super::on_sqlite().await;
                    super::$spec(opened.webhooks()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $spec() {
                    let Some(opened) = super::on_postgres().await else { return };
                    super::$spec(opened.webhooks()).await;
                }
            )*
        }
    };
}

on_both_backends!(
    subscriptions_are_made_active_and_seen_only_by_their_creator,
    a_fan_out_moves_the_cursor_only_from_where_it_was_read,
    a_claim_counts_an_attempt_and_a_retry_is_due_when_it_says,
    an_exhausted_schedule_or_a_410_disables_the_subscription_until_a_replay,
    one_resource_is_delivered_in_event_order,
    an_expired_lease_is_claimed_again_and_the_old_claim_counts_for_nothing,
    outcomes_recorded_together_each_count_as_they_would_alone,
    an_outcome_counts_only_for_the_attempt_it_was_claimed_for,
    the_next_due_time_leaves_leases_to_the_deliverers_tick,
    a_claim_takes_no_more_of_a_subscription_than_its_room,
    a_rotated_secret_signs_beside_the_new_one_until_it_expires,
    a_purge_deletes_only_finished_deliveries_older_than_asked,
);

fn owner(byte: u8) -> OwnerId {
    OwnerId([byte; 32])
}

fn secret(byte: u8) -> SealedSecret {
    SealedSecret(vec![byte; 44])
}

/// A subscription of the key `creator` to every kind, from event 0.
fn subscription(creator: u8) -> NewSubscription {
    NewSubscription {
        url: format!("https://hooks.example/{creator}"),
        kinds: EnumSet::all(),
        sees_owner: None,
        creator: owner(creator),
        creator_name: format!("key-{creator}"),
        secret: secret(creator),
        start_after: 0,
    }
}

/// The delivery of event `event_id`, about `resource`.
fn delivery(event_id: i64, resource: i64) -> NewDelivery {
    NewDelivery {
        event_id,
        kind: EventKind::PetCreated,
        resource,
        body: format!(r#"{{"id":"{event_id}"}}"#),
    }
}

/// A time `ms` milliseconds from now, as precise as the databases keep it.
fn in_ms(ms: i64) -> DateTime<Utc> {
    let at = Utc::now() + TimeDelta::milliseconds(ms);
    DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap()
}

/// An attempt made now, the receiver answering as `next` implies.
fn outcome(next: NextStep) -> AttemptOutcome {
    outcome_at(next, in_ms(0))
}

fn outcome_at(next: NextStep, at: DateTime<Utc>) -> AttemptOutcome {
    let (status, error) = match next {
        NextStep::Delivered => (Some(204), None),
        NextStep::Gone => (Some(410), Some("gone".to_owned())),
        NextStep::RetryAt(_) | NextStep::Exhausted => (Some(500), Some("oops".to_owned())),
    };
    AttemptOutcome {
        status,
        error,
        at,
        ended: at,
        next,
    }
}

async fn subscribe(store: &dyn WebhookStorage, creator: u8) -> StoredSubscription {
    store
        .create_subscription(subscription(creator))
        .await
        .unwrap()
}

/// Stores `deliveries` for subscription `id`, from its cursor to their last.
async fn fan_out(store: &dyn WebhookStorage, id: i64, deliveries: Vec<NewDelivery>) {
    let from = get(store, id).await.fanned_out;
    let to = deliveries.iter().map(|d| d.event_id).max().unwrap_or(from);
    assert!(store.fan_out(id, from, to, deliveries).await.unwrap());
}

async fn get(store: &dyn WebhookStorage, id: i64) -> StoredSubscription {
    store.get_subscription(id, None).await.unwrap().unwrap()
}

/// Room for `total` deliveries, of any subscription.
fn room(total: usize) -> ClaimRoom {
    ClaimRoom {
        total,
        each: total,
        fuller: Vec::new(),
    }
}

/// Claims what is due for `instance`, in (subscription, event) order.
async fn claim(store: &dyn WebhookStorage, instance: &str) -> Vec<ClaimedDelivery> {
    let mut claimed = store.claim(instance, &room(100), LEASE).await.unwrap();
    claimed.sort_by_key(|c| (c.webhook_id, c.event_id));
    claimed
}

/// Records one attempt's outcome as the deliverer does, in a batch of its
/// own; whether it counted.
async fn finish(
    store: &dyn WebhookStorage,
    instance: &str,
    delivery: &ClaimedDelivery,
    outcome: AttemptOutcome,
) -> bool {
    let finished = [FinishedAttempt::of(delivery, outcome)];
    let counted = store.finish_all(instance, &finished).await.unwrap();
    assert_eq!(counted.len(), 1, "one answer per outcome");
    counted[0]
}

/// Claims the only delivery due for `instance`, under a lease that runs
/// out soon.
async fn claim_briefly(store: &dyn WebhookStorage, instance: &str) -> ClaimedDelivery {
    let lease = Duration::from_millis(300);
    only(store.claim(instance, &room(10), lease).await.unwrap())
}

/// Waits for a claim by `instance` that finds something.
async fn claim_eventually(store: &dyn WebhookStorage, instance: &str) -> Vec<ClaimedDelivery> {
    eventually_some("a claim finds a delivery", SOON, || async {
        Some(claim(store, instance).await).filter(|claimed| !claimed.is_empty())
    })
    .await
}

/// The claimed deliveries as (subscription, event), in order.
fn claimed_events(claimed: &[ClaimedDelivery]) -> BTreeSet<(i64, i64)> {
    claimed.iter().map(|c| (c.webhook_id, c.event_id)).collect()
}

fn only(mut claimed: Vec<ClaimedDelivery>) -> ClaimedDelivery {
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    claimed.pop().unwrap()
}

async fn deliveries(store: &dyn WebhookStorage, id: i64) -> Vec<StoredDelivery> {
    store.list_deliveries(id, None, 100).await.unwrap()
}

/// The only stored delivery of subscription `id`'s event `event_id`.
async fn stored(store: &dyn WebhookStorage, id: i64, event_id: i64) -> StoredDelivery {
    let found = store
        .list_deliveries(id, Some(event_id + 1), 1)
        .await
        .unwrap();
    found.into_iter().find(|d| d.event_id == event_id).unwrap()
}

fn ids(subscriptions: &[StoredSubscription]) -> Vec<i64> {
    subscriptions.iter().map(|s| s.id).collect()
}

async fn subscriptions_are_made_active_and_seen_only_by_their_creator(store: &dyn WebhookStorage) {
    let mut new = subscription(1);
    new.kinds = EventKind::PetCreated | EventKind::OrderPlaced;
    new.sees_owner = Some(owner(7));
    new.start_after = 42;
    let mine = store.create_subscription(new).await.unwrap();
    assert_eq!(mine.state, SubscriptionState::Active);
    assert_eq!((mine.fanned_out, mine.pending), (42, 0));
    assert!(mine.previous_secret.is_none() && mine.last_success_at.is_none());
    let read = get(store, mine.id).await;
    assert_eq!(read.url, "https://hooks.example/1");
    assert_eq!(read.kinds, EventKind::PetCreated | EventKind::OrderPlaced);
    assert_eq!(read.sees_owner, Some(owner(7)));
    assert_eq!(
        (read.creator, read.creator_name.as_str()),
        (owner(1), "key-1")
    );
    assert_eq!((read.secret, read.created_at), (secret(1), mine.created_at));
    assert_eq!((read.state, read.fanned_out), (mine.state, 42));
    let theirs = subscribe(store, 2).await;

    let list = |owner, after, limit| store.list_subscriptions(owner, after, limit);
    assert_eq!(
        ids(&list(None, None, 10).await.unwrap()),
        [mine.id, theirs.id]
    );
    assert_eq!(ids(&list(None, None, 1).await.unwrap()), [mine.id]);
    assert_eq!(
        ids(&list(None, Some(mine.id), 10).await.unwrap()),
        [theirs.id]
    );
    assert_eq!(
        ids(&list(Some(owner(1)), None, 10).await.unwrap()),
        [mine.id]
    );
    assert!(list(Some(owner(3)), None, 10).await.unwrap().is_empty());
    assert!(
        store
            .get_subscription(mine.id, Some(owner(2)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .get_subscription(mine.id, Some(owner(1)))
            .await
            .unwrap()
            .is_some()
    );

    fan_out(store, mine.id, vec![delivery(50, 1)]).await;
    assert!(
        !store
            .delete_subscription(mine.id, Some(owner(2)))
            .await
            .unwrap()
    );
    assert!(
        store
            .delete_subscription(mine.id, Some(owner(1)))
            .await
            .unwrap()
    );
    assert!(
        store
            .get_subscription(mine.id, None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        deliveries(store, mine.id).await.is_empty(),
        "its deliveries went with it"
    );
    assert!(!store.delete_subscription(mine.id, None).await.unwrap());
    assert!(store.delete_subscription(theirs.id, None).await.unwrap());
    let next = subscribe(store, 1).await;
    assert!(
        next.id > theirs.id,
        "a deleted subscription's id never comes back"
    );
}

async fn a_fan_out_moves_the_cursor_only_from_where_it_was_read(store: &dyn WebhookStorage) {
    let mut new = subscription(1);
    new.start_after = 10;
    let id = store.create_subscription(new).await.unwrap().id;
    let mut order = delivery(14, -3);
    order.kind = EventKind::OrderPlaced;
    let first = vec![delivery(12, 1), order];
    assert!(store.fan_out(id, 10, 20, first).await.unwrap());
    // Another instance read the cursor at 10 too, and comes second.
    assert!(
        !store
            .fan_out(id, 10, 30, vec![delivery(25, 3)])
            .await
            .unwrap()
    );
    let stored = deliveries(store, id).await;
    let events: Vec<_> = stored.iter().map(|d| (d.event_id, d.kind)).collect();
    assert_eq!(
        events,
        [(14, EventKind::OrderPlaced), (12, EventKind::PetCreated)]
    );
    for delivery in &stored {
        assert_eq!(
            (delivery.state, delivery.attempts),
            (DeliveryState::Pending, 0)
        );
        assert!(delivery.next_attempt_at.is_some() && delivery.last_attempt_at.is_none());
    }
    let read = get(store, id).await;
    assert_eq!((read.fanned_out, read.pending), (20, 2));

    // Events none of which is for it still move the cursor.
    assert!(store.fan_out(id, 20, 30, Vec::new()).await.unwrap());
    assert_eq!(get(store, id).await.fanned_out, 30);
    assert!(
        !store
            .fan_out(id + 1, 0, 5, vec![delivery(3, 1)])
            .await
            .unwrap()
    );
}

async fn a_claim_counts_an_attempt_and_a_retry_is_due_when_it_says(store: &dyn WebhookStorage) {
    let subscription = subscribe(store, 1).await;
    let id = subscription.id;
    fan_out(store, id, vec![delivery(2, 1)]).await;
    assert!(store.next_due(&[]).await.unwrap().unwrap() <= Utc::now());

    let first = only(claim(store, "a").await);
    assert_eq!(
        (first.webhook_id, first.event_id, first.attempt),
        (id, 2, 1)
    );
    assert_eq!(
        (first.url.as_str(), first.body.as_str()),
        (subscription.url.as_str(), r#"{"id":"2"}"#)
    );
    assert_eq!(first.secrets, [secret(1)]);
    let sending = stored(store, id, 2).await;
    assert_eq!(
        (sending.state, sending.attempts),
        (DeliveryState::Sending, 1)
    );
    // Operators and the API count the attempts that ended.
    assert_eq!(
        (sending.attempts_made(), sending.last_attempt_at),
        (0, None)
    );
    assert!(claim(store, "b").await.is_empty(), "leased to a");

    let retry_at = in_ms(300);
    assert!(finish(store, "a", &first, outcome(NextStep::RetryAt(retry_at))).await);
    let waiting = stored(store, id, 2).await;
    assert_eq!(
        (waiting.state, waiting.attempts),
        (DeliveryState::Pending, 1)
    );
    assert_eq!(
        (waiting.last_status, waiting.last_error.as_deref()),
        (Some(500), Some("oops"))
    );
    assert_eq!(waiting.next_attempt_at, Some(retry_at));
    let read = get(store, id).await;
    assert!(read.last_failure_at.is_some() && read.last_success_at.is_none());
    assert_eq!((read.state, read.pending), (SubscriptionState::Active, 1));
    assert_eq!(store.next_due(&[]).await.unwrap(), Some(retry_at));
    assert!(claim(store, "a").await.is_empty(), "not due yet");

    let second = only(claim_eventually(store, "a").await);
    assert!(Utc::now() >= retry_at);
    assert_eq!((second.event_id, second.attempt), (2, 2));
    let resending = stored(store, id, 2).await;
    assert_eq!(resending.attempts_made(), 1, "the first, which ended");
    assert!(waiting.last_attempt_at.is_some());
    assert_eq!(resending.last_attempt_at, waiting.last_attempt_at);
    assert!(finish(store, "a", &second, outcome(NextStep::Delivered)).await);
    let delivered = stored(store, id, 2).await;
    assert_eq!(
        (delivered.state, delivered.attempts),
        (DeliveryState::Delivered, 2)
    );
    assert!(delivered.delivered_at.is_some() && delivered.next_attempt_at.is_none());
    let read = get(store, id).await;
    assert_eq!(
        (read.pending, read.last_success_at),
        (0, delivered.delivered_at)
    );
    assert!(claim(store, "a").await.is_empty());
    assert_eq!(store.next_due(&[]).await.unwrap(), None);
    assert!(
        !finish(store, "a", &second, outcome(NextStep::Delivered)).await,
        "a finish counts once"
    );
}

async fn an_exhausted_schedule_or_a_410_disables_the_subscription_until_a_replay(
    store: &dyn WebhookStorage,
) {
    let cases = [
        (NextStep::Exhausted, DisabledReason::RetriesExhausted, 500),
        (NextStep::Gone, DisabledReason::Gone, 410),
    ];
    for (creator, (last, reason, status)) in (1..).zip(cases) {
        let id = subscribe(store, creator).await.id;
        fan_out(store, id, vec![delivery(2, 1), delivery(4, 2)]).await;
        let claimed = claim(store, "a").await;
        assert_eq!(claimed_events(&claimed), BTreeSet::from([(id, 2), (id, 4)]));
        assert!(finish(store, "a", &claimed[0], outcome(last)).await);
        let retry = outcome(NextStep::RetryAt(in_ms(0)));
        assert!(finish(store, "a", &claimed[1], retry).await);

        let read = get(store, id).await;
        assert_eq!(
            (read.state, read.pending),
            (SubscriptionState::Disabled(reason), 1)
        );
        let failed = stored(store, id, claimed[0].event_id).await;
        assert_eq!(
            (failed.state, failed.last_status),
            (DeliveryState::Failed, Some(status))
        );
        assert!(
            claim(store, "a").await.is_empty(),
            "a disabled subscription waits"
        );
        assert_eq!(store.next_due(&[]).await.unwrap(), None);
        assert!(!ids(&store.active_subscriptions().await.unwrap()).contains(&id));

        let replay = vec![delivery(claimed[0].event_id, 9), delivery(6, 3)];
        assert_eq!(store.replay(id, replay).await.unwrap(), 2);
        let read = get(store, id).await;
        assert_eq!((read.state, read.pending), (SubscriptionState::Active, 3));
        assert!(ids(&store.active_subscriptions().await.unwrap()).contains(&id));
        let replayed = stored(store, id, claimed[0].event_id).await;
        assert_eq!(
            (replayed.state, replayed.attempts),
            (DeliveryState::Pending, 0)
        );
        let claimed = claim(store, "a").await;
        let attempts: BTreeMap<_, _> = claimed.iter().map(|c| (c.event_id, c.attempt)).collect();
        assert_eq!(attempts, BTreeMap::from([(2, 1), (4, 2), (6, 1)]));
        for claimed in &claimed {
            let delivered = outcome(NextStep::Delivered);
            assert!(finish(store, "a", claimed, delivered).await);
        }
    }
    assert_eq!(store.replay(1_000, vec![delivery(2, 1)]).await.unwrap(), 0);
}

async fn one_resource_is_delivered_in_event_order(store: &dyn WebhookStorage) {
    let id = subscribe(store, 1).await.id;
    let other = subscribe(store, 2).await.id;
    fan_out(
        store,
        id,
        vec![delivery(2, 7), delivery(4, 7), delivery(6, 8)],
    )
    .await;
    fan_out(store, other, vec![delivery(4, 7)]).await;

    let claimed = claim(store, "a").await;
    let expected = [(id, 2), (id, 6), (other, 4)];
    assert_eq!(
        claimed_events(&claimed),
        BTreeSet::from(expected),
        "4 waits for 2"
    );
    let first = claimed
        .iter()
        .find(|c| (c.webhook_id, c.event_id) == (id, 2))
        .unwrap();
    let retry = outcome(NextStep::RetryAt(in_ms(0)));
    assert!(finish(store, "a", first, retry).await);
    let again = only(claim(store, "a").await);
    assert_eq!((again.event_id, again.attempt), (2, 2), "still 2 before 4");
    assert!(finish(store, "a", &again, outcome(NextStep::Delivered)).await);
    let next = only(claim(store, "a").await);
    assert_eq!((next.webhook_id, next.event_id), (id, 4));
}

async fn an_expired_lease_is_claimed_again_and_the_old_claim_counts_for_nothing(
    store: &dyn WebhookStorage,
) {
    let id = subscribe(store, 1).await.id;
    fan_out(store, id, vec![delivery(2, 1)]).await;
    let lost = claim_briefly(store, "a").await;
    assert!(claim(store, "b").await.is_empty(), "leased to a");

    let taken = only(claim_eventually(store, "b").await);
    assert_eq!((taken.event_id, taken.attempt), (2, 2));
    assert!(!finish(store, "a", &lost, outcome(NextStep::Delivered)).await);
    assert!(!finish(store, "c", &taken, outcome(NextStep::Delivered)).await);
    let sending = stored(store, id, 2).await;
    assert_eq!(
        (sending.state, sending.attempts),
        (DeliveryState::Sending, 2)
    );
    assert!(get(store, id).await.last_success_at.is_none());
    assert!(finish(store, "b", &taken, outcome(NextStep::Delivered)).await);
    assert_eq!(stored(store, id, 2).await.state, DeliveryState::Delivered);
}

/// The deliverer records what finished meanwhile in one commit: each
/// outcome counts only for its own claim, the subscription learns the
/// latest success and failure among them, and an outcome that disables a
/// subscription disables it.
async fn outcomes_recorded_together_each_count_as_they_would_alone(store: &dyn WebhookStorage) {
    let (id, other) = (subscribe(store, 1).await.id, subscribe(store, 2).await.id);
    let ours = vec![
        delivery(2, 1),
        delivery(4, 2),
        delivery(6, 3),
        delivery(8, 4),
    ];
    fan_out(store, id, ours).await;
    fan_out(store, other, vec![delivery(2, 1)]).await;
    let claimed = claim(store, "a").await;
    assert_eq!(claimed.len(), 5, "{claimed:?}");
    let mut never_made = claimed[2].clone();
    never_made.attempt += 1;
    let (earlier, later, retry_at) = (in_ms(-5_000), in_ms(-2_000), in_ms(60_000));
    let finished = [
        FinishedAttempt::of(&claimed[3], outcome_at(NextStep::Delivered, later)),
        FinishedAttempt::of(&claimed[0], outcome_at(NextStep::Delivered, earlier)),
        FinishedAttempt::of(&claimed[1], outcome(NextStep::RetryAt(retry_at))),
        FinishedAttempt::of(&never_made, outcome(NextStep::Delivered)),
        FinishedAttempt::of(&claimed[4], outcome(NextStep::Gone)),
    ];
    assert_eq!(
        store.finish_all("a", &finished).await.unwrap(),
        [true, true, true, false, true]
    );

    let state = |d: StoredDelivery| (d.state, d.attempts, d.next_attempt_at);
    assert_eq!(
        state(stored(store, id, 2).await),
        (DeliveryState::Delivered, 1, None)
    );
    assert_eq!(
        state(stored(store, id, 4).await),
        (DeliveryState::Pending, 1, Some(retry_at))
    );
    assert_eq!(stored(store, id, 6).await.state, DeliveryState::Sending);
    assert_eq!(stored(store, id, 8).await.state, DeliveryState::Delivered);
    let read = get(store, id).await;
    assert_eq!(read.state, SubscriptionState::Active);
    assert_eq!(read.last_success_at, Some(later));
    assert!(read.last_failure_at.is_some());
    assert_eq!(
        get(store, other).await.state,
        SubscriptionState::Disabled(DisabledReason::Gone)
    );
    assert!(store.finish_all("a", &[]).await.unwrap().is_empty());
}

/// One instance may hold two attempts of a delivery in one batch: its
/// first lease ran out and it claimed the delivery again. Only the attempt
/// of the claim it now holds counts.
async fn an_outcome_counts_only_for_the_attempt_it_was_claimed_for(store: &dyn WebhookStorage) {
    let id = subscribe(store, 1).await.id;
    fan_out(store, id, vec![delivery(2, 1)]).await;
    let first = claim_briefly(store, "a").await;
    let second = only(claim_eventually(store, "a").await);
    assert_eq!((first.attempt, second.attempt), (1, 2));
    let finished = [
        FinishedAttempt::of(&first, outcome(NextStep::Delivered)),
        FinishedAttempt::of(&second, outcome(NextStep::Delivered)),
    ];
    assert_eq!(
        store.finish_all("a", &finished).await.unwrap(),
        [false, true]
    );
    let stored = stored(store, id, 2).await;
    assert_eq!(
        (stored.state, stored.attempts),
        (DeliveryState::Delivered, 2)
    );
}

/// `next_due` leaves leases out (finding the few deliveries being sent
/// would read every open one): with only a leased delivery, nothing is
/// due, and the deliverer's one-second tick takes it again after its
/// lease. A delivery that comes after it is due at once.
async fn the_next_due_time_leaves_leases_to_the_deliverers_tick(store: &dyn WebhookStorage) {
    let id = subscribe(store, 1).await.id;
    fan_out(store, id, vec![delivery(2, 1)]).await;
    claim_briefly(store, "a").await;
    assert_eq!(store.next_due(&[]).await.unwrap(), None);
    fan_out(store, id, vec![delivery(4, 3)]).await;
    assert!(store.next_due(&[]).await.unwrap().unwrap() <= Utc::now());
}

/// A claim takes the earliest due deliveries, but of each subscription no
/// more than its room; `next_due` leaves out the subscriptions it is asked
/// to (those the deliverer has no room for).
async fn a_claim_takes_no_more_of_a_subscription_than_its_room(store: &dyn WebhookStorage) {
    let (full, other) = (subscribe(store, 1).await.id, subscribe(store, 2).await.id);
    // The full one's deliveries are due first.
    fan_out(store, full, (1..=5).map(|e| delivery(2 * e, e)).collect()).await;
    fan_out(store, other, (6..=10).map(|e| delivery(2 * e, e)).collect()).await;
    let room = ClaimRoom {
        total: 5,
        each: 3,
        fuller: vec![(full, 1)],
    };
    let claimed = claimed_events(&store.claim("a", &room, LEASE).await.unwrap());
    assert_eq!(
        claimed,
        BTreeSet::from([(full, 2), (other, 12), (other, 14), (other, 16)])
    );
    let none_of_full = ClaimRoom {
        total: 1,
        each: 3,
        fuller: vec![(full, 0)],
    };
    let claimed = claimed_events(&store.claim("a", &none_of_full, LEASE).await.unwrap());
    assert_eq!(claimed, BTreeSet::from([(other, 18)]));

    assert!(store.next_due(&[full]).await.unwrap().unwrap() <= Utc::now());
    assert!(claimed_events(&store.claim("a", &none_of_full, LEASE).await.unwrap()).len() == 1);
    assert_eq!(
        store.next_due(&[full]).await.unwrap(),
        None,
        "only the full one's are due"
    );
    assert!(store.next_due(&[]).await.unwrap().unwrap() <= Utc::now());
    assert!(store.next_due(&[full, other]).await.unwrap().is_none());
}

async fn a_rotated_secret_signs_beside_the_new_one_until_it_expires(store: &dyn WebhookStorage) {
    let id = subscribe(store, 1).await.id;
    let until = in_ms(400);
    let rotate = |owner, until| store.rotate_secret(id, owner, secret(9), until);
    assert!(
        rotate(Some(owner(2)), until).await.unwrap().is_none(),
        "not theirs"
    );
    let rotated = rotate(Some(owner(1)), until).await.unwrap().unwrap();
    assert_eq!(rotated.secret, secret(9));
    assert_eq!(rotated.previous_secret, Some((secret(1), until)));
    assert_eq!(
        get(store, id).await.previous_secret,
        Some((secret(1), until))
    );
    let missing = store.rotate_secret(id + 1, None, secret(9), until).await;
    assert!(missing.unwrap().is_none());

    fan_out(store, id, vec![delivery(2, 1)]).await;
    let during = only(claim(store, "a").await);
    assert_eq!(during.secrets, [secret(9), secret(1)]);
    let retry = outcome(NextStep::RetryAt(until + TimeDelta::milliseconds(1)));
    assert!(finish(store, "a", &during, retry).await);
    let after = only(claim_eventually(store, "a").await);
    assert_eq!(after.secrets, [secret(9)]);
}

async fn a_purge_deletes_only_finished_deliveries_older_than_asked(store: &dyn WebhookStorage) {
    let id = subscribe(store, 1).await.id;
    let events = [(2, 1), (4, 2), (6, 3), (8, 4)];
    fan_out(store, id, events.map(|(e, r)| delivery(e, r)).to_vec()).await;
    let claimed = claim(store, "a").await;
    let long_ago = in_ms(-2 * 3_600_000);
    for claimed in &claimed {
        let outcome = match claimed.event_id {
            2 => outcome_at(NextStep::Delivered, long_ago),
            4 => outcome_at(NextStep::Gone, long_ago),
            6 => outcome(NextStep::Delivered),
            _ => outcome_at(NextStep::RetryAt(in_ms(0)), long_ago),
        };
        assert!(finish(store, "a", claimed, outcome).await);
    }
    let an_hour_ago = in_ms(-3_600_000);
    assert_eq!(store.purge_deliveries(an_hour_ago, 1).await.unwrap(), 1);
    assert_eq!(store.purge_deliveries(an_hour_ago, 10).await.unwrap(), 1);
    assert_eq!(store.purge_deliveries(an_hour_ago, 10).await.unwrap(), 0);
    let left: Vec<_> = deliveries(store, id)
        .await
        .iter()
        .map(|d| d.event_id)
        .collect();
    assert_eq!(left, [8, 6], "pending, and delivered within the hour");
}

/// Checks that every earlier event of `event`'s resource was delivered,
/// and marks `event` delivered.
fn mark_in_order(delivered: &Mutex<HashSet<i64>>, event: i64, resource_of: &dyn Fn(i64) -> i64) {
    let mut delivered = delivered.lock().unwrap();
    let mut earlier = (2..event)
        .step_by(2)
        .filter(|e| resource_of(*e) == resource_of(event));
    assert!(earlier.all(|e| delivered.contains(&e)), "{event} too early");
    delivered.insert(event);
}

/// Each of `instances` claims and delivers, a few at a time, until all
/// `total` deliveries are delivered; returns what each claimed. Each claims
/// once before either delivers, so both take part (the first holds some
/// resources' next deliveries, the second finds others'); then both go on
/// at once. Checks, at each claim, that every earlier event of the same
/// resource was delivered first.
async fn deliver_everything(
    instances: [Arc<dyn WebhookStorage>; 2],
    total: usize,
    resource_of: impl Fn(i64) -> i64 + Send + Sync + 'static,
) -> [Vec<i64>; 2] {
    let delivered = Arc::new(Mutex::new(HashSet::new()));
    let resource_of = Arc::new(resource_of);
    let mut first_claims = Vec::new();
    for (store, instance) in instances.iter().zip(["a", "b"]) {
        let claimed = store.claim(instance, &room(5), LEASE).await.unwrap();
        assert!(!claimed.is_empty(), "{instance} finds deliveries to claim");
        first_claims.push(claimed);
    }
    let loops = instances.into_iter().zip(["a", "b"]).zip(first_claims).map(
        |((store, instance), mut claimed)| {
            let (delivered, resource_of) = (Arc::clone(&delivered), Arc::clone(&resource_of));
            tokio::spawn(async move {
                let mut claimed_here = Vec::new();
                loop {
                    for claim in claimed {
                        let event = claim.event_id;
                        // Marked before its finish commits, so before any
                        // claim of the next event of its resource.
                        mark_in_order(&delivered, event, &*resource_of);
                        let outcome = outcome(NextStep::Delivered);
                        assert!(finish(&*store, instance, &claim, outcome).await);
                        claimed_here.push(event);
                    }
                    if delivered.lock().unwrap().len() == total {
                        return claimed_here;
                    }
                    claimed = store.claim(instance, &room(5), LEASE).await.unwrap();
                    if claimed.is_empty() {
                        // The other holds every delivery due: its finishes
                        // make the next ones due.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            })
        },
    );
    let [first, second]: [_; 2] = loops.collect::<Vec<_>>().try_into().unwrap();
    let (first, second) = tokio::join!(first, second);
    [first.unwrap(), second.unwrap()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_claiming_at_once_never_share_a_delivery_and_keep_each_resource_in_order() {
    let Some(opened) = on_postgres().await else {
        return;
    };
    let other = open(&opened.url).await;
    let id = subscribe(opened.webhooks(), 1).await.id;
    let resource_of = |event: i64| event % 20;
    let events: Vec<i64> = (1..=200).map(|n| 2 * n).collect();
    let all = events
        .iter()
        .map(|&e| delivery(e, resource_of(e)))
        .collect();
    fan_out(opened.webhooks(), id, all).await;

    let instances = [Arc::clone(&opened.database.webhooks), other.webhooks];
    let [first, second] = deliver_everything(instances, events.len(), resource_of).await;
    let (first, second): (HashSet<_>, HashSet<_>) =
        (first.into_iter().collect(), second.into_iter().collect());
    assert!(
        first.is_disjoint(&second),
        "{:?}",
        first.intersection(&second)
    );
    let union: BTreeSet<_> = first.union(&second).copied().collect();
    assert_eq!(union, events.into_iter().collect());
    assert!(!first.is_empty() && !second.is_empty(), "both took part");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_fanning_out_from_one_cursor_store_the_events_once() {
    let Some(opened) = on_postgres().await else {
        return;
    };
    let other = open(&opened.url).await;
    for round in 0..20 {
        let id = subscribe(opened.webhooks(), 1).await.id;
        let events = |offset: i64| vec![delivery(2, 1), delivery(4 + offset, 2)];
        let (one, two) = tokio::join!(
            opened.webhooks().fan_out(id, 0, 10, events(0)),
            other.webhooks.fan_out(id, 0, 10, events(2)),
        );
        let (one, two) = (one.unwrap(), two.unwrap());
        assert!(one != two, "round {round}: exactly one moves the cursor");
        let stored: Vec<_> = deliveries(opened.webhooks(), id)
            .await
            .iter()
            .map(|d| d.event_id)
            .collect();
        assert_eq!(stored, if one { [4, 2] } else { [6, 2] });
    }
}
