//! The deliverer: claims due deliveries, sends each as a signed request,
//! and records what became of it.
//!
//! Claims are leased ([`WebhookStorage::claim`]): instances take disjoint
//! deliveries, and one that dies mid-send leaves its claims to be taken
//! again once their lease ends — at least once, with the same `webhook-id`.
//! A claim holds at most one delivery per subscription and resource (the
//! storage's order guard), so one resource's events arrive in order.
//!
//! Each subscription has a share of the requests in flight: a receiver
//! that hangs holds at most its share until the timeout, and the others'
//! deliveries go on beside it.
//!
//! Outcomes are recorded together: what finished while the last commit
//! was being made goes into the next one (one commit per delivery cost the
//! server more than the request itself).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use super::schedule::{RetrySchedule, retry_after};
use super::secrets::{SealingKeys, SecretError, SigningSecret};
use super::sign::signature_header;
use super::target::TargetPolicy;
use crate::durations::duration_text;
use crate::logging::panic_message;
use crate::metrics::{AttemptResult, Metrics};
use crate::storage::outage::Outage;
use crate::storage::webhooks::{
    AttemptOutcome, ClaimRoom, ClaimedDelivery, FinishedAttempt, NextStep, WebhookStorage,
};

/// Requests in flight at once, across subscriptions (each holds a
/// connection: the edge keeps descriptors for them).
pub const IN_FLIGHT: usize = 256;

/// Requests in flight at once for one subscription, at most: a lone
/// subscription's share (see [`share`]). What bounds how fast one
/// subscription is served: a request holds its slot from the claim until
/// its outcome is recorded, so a subscription gets at most this many
/// deliveries per such cycle. At 64, a receiver answering in tens of
/// milliseconds on a loaded machine held PostgreSQL's deliveries at about
/// 1,200 a second, p99 4.5-5.1 s behind 3,000 creates a second (BENCHMARKS.md,
/// "Issue 28, twelfth pass").
const PER_SUBSCRIPTION: usize = 128;

/// The fewest free slots the deliverer claims for (unless nothing is due):
/// a quarter of a subscription's most, so that a claim is shared by many
/// deliveries. A subscription with less room than this waits for a finish
/// that gives it this much, or for the idle tick.
const CLAIM_BATCH: usize = PER_SUBSCRIPTION / 4;

/// How long the deliverer sleeps at most with nothing due: what bounds the
/// delay of a delivery made due by another instance (a replay, a lease run
/// out) without a wake-up.
const IDLE_TICK: Duration = Duration::from_secs(1);

/// How long past the request's bound a claim stays leased: time to record
/// the outcome (in the recorder's next commit, after the one under way).
/// An instance killed mid-send holds its claims this much longer than the
/// request could take; then another instance sends again.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// The longest error text kept with a delivery.
const ERROR_MAX_CHARS: usize = 300;

/// What the deliverer needs.
pub struct Deliverer {
    /// This instance's name in the claims.
    pub instance: String,
    /// The subscriptions and deliveries.
    pub hooks: Arc<dyn WebhookStorage>,
    /// Opens the stored secrets.
    pub keys: Arc<SealingKeys>,
    /// Sends the requests (its resolver checks every name it resolves).
    pub client: reqwest::Client,
    /// Which targets are admitted: checked again before each request, for
    /// an address in the URL itself (no resolver sees it).
    pub policy: TargetPolicy,
    /// When failed attempts are tried again.
    pub schedule: RetrySchedule,
    /// The whole request's bound.
    pub timeout: Duration,
    /// Notified when deliveries were made due (fan-out, replay).
    pub due: Arc<Notify>,
    /// Counts the outcomes.
    pub metrics: Arc<Metrics>,
    /// Where failures of our own are logged.
    pub log: slog::Logger,
    /// Whether the database stopped answering (logged once an outage).
    pub outage: Outage,
}

/// A subscription's share of the requests in flight while `busy` other
/// subscriptions have requests in flight: an equal part with one more
/// subscription, so that a subscription that comes has room even when
/// those in flight keep theirs (until the timeout, if their receivers
/// hang), and at most [`PER_SUBSCRIPTION`].
fn share(busy: usize) -> usize {
    (IN_FLIGHT / (busy + 1)).min(PER_SUBSCRIPTION)
}

/// An outcome to record, and who waits until it is.
type Recording = (FinishedAttempt, oneshot::Sender<()>);

/// Where the requests sent hand their outcomes to be recorded
/// ([`Deliverer::record`]).
#[derive(Clone)]
struct Outcomes(mpsc::UnboundedSender<Recording>);

impl Outcomes {
    /// Records `finished` with whatever else finished meanwhile; returns
    /// once the commit is made (or failed: the lease then runs out and the
    /// delivery is sent again).
    async fn record(&self, finished: FinishedAttempt) {
        let (done, recorded) = oneshot::channel();
        // Either fails only once the recorder is gone with the deliverer.
        if self.0.send((finished, done)).is_ok() {
            let _ = recorded.await;
        }
    }
}

/// This instance's requests in flight, by subscription, and the
/// subscriptions whose deliveries it cannot sign for a while.
#[derive(Default)]
struct InFlight {
    sending: Mutex<HashMap<i64, usize>>,
    /// Until when (see [`Deliverer::cannot_sign`]).
    unsignable: Mutex<HashMap<i64, Instant>>,
}

impl InFlight {
    /// What a claim for `free` slots may take: nothing of a subscription
    /// this instance cannot sign.
    fn room(&self, free: usize) -> ClaimRoom {
        let in_flight = self.sending.lock().unwrap_or_else(PoisonError::into_inner);
        let each = share(in_flight.len());
        let mut fuller: Vec<(i64, usize)> = in_flight
            .iter()
            .map(|(&id, &sending)| (id, each.saturating_sub(sending)))
            .collect();
        for id in self.unsignable_now() {
            match fuller.iter_mut().find(|(fuller, _)| *fuller == id) {
                Some((_, room)) => *room = 0,
                None => fuller.push((id, 0)),
            }
        }
        ClaimRoom {
            total: free,
            each,
            fuller,
        }
    }

    /// The subscriptions this instance cannot sign now.
    fn unsignable_now(&self) -> Vec<i64> {
        let mut unsignable = self
            .unsignable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        unsignable.retain(|_, until| *until > now);
        unsignable.keys().copied().collect()
    }

    /// Claims none of `webhook_id`'s deliveries until `until`; returns
    /// whether it was claimable before.
    fn hold(&self, webhook_id: i64, until: Instant) -> bool {
        let mut unsignable = self
            .unsignable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let before = unsignable.insert(webhook_id, until);
        before.is_none_or(|until| until <= now)
    }

    /// The subscriptions with less room than a claim batch.
    fn full(&self) -> Vec<i64> {
        let room = self.room(IN_FLIGHT);
        room.fuller
            .into_iter()
            .filter(|&(_, left)| left < CLAIM_BATCH)
            .map(|(id, _)| id)
            .collect()
    }

    /// Counts a request of `webhook_id` sent.
    fn sending(&self, webhook_id: i64) {
        let mut in_flight = self.sending.lock().unwrap_or_else(PoisonError::into_inner);
        *in_flight.entry(webhook_id).or_default() += 1;
    }

    /// Counts a request of `webhook_id` finished; returns whether its
    /// subscription now has room for a claim batch (when it has not, a
    /// claim would take less: the next finish or the idle tick will do).
    fn finished(&self, webhook_id: i64) -> bool {
        let mut in_flight = self.sending.lock().unwrap_or_else(PoisonError::into_inner);
        let sending = in_flight
            .get(&webhook_id)
            .map_or(0, |n| n.saturating_sub(1));
        if sending == 0 {
            in_flight.remove(&webhook_id);
        } else {
            in_flight.insert(webhook_id, sending);
        }
        sending + CLAIM_BATCH <= share(in_flight.len())
    }
}

impl Deliverer {
    /// Delivers until aborted: claims as many due deliveries as there are
    /// free slots, once at least [`CLAIM_BATCH`] are free, and of each
    /// subscription no more than its [`share`]. With the slots busy,
    /// neither a claim nor the next due time is asked: the backlog waits
    /// in the database. (A claim costs about the same for one row as for
    /// sixty-four: claiming each slot as it freed held PostgreSQL near 900
    /// deliveries a second behind a backlog.)
    pub async fn run(self) {
        let this = Arc::new(self);
        let (outcomes, recorded) = mpsc::unbounded_channel();
        tokio::join!(
            Deliverer::send(Arc::clone(&this), Outcomes(outcomes)),
            this.record(recorded)
        );
    }

    /// Claims and sends, each request's slot held until its outcome is
    /// recorded (the next delivery of its resource is claimable only then).
    async fn send(this: Arc<Self>, outcomes: Outcomes) {
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        let in_flight = Arc::new(InFlight::default());
        loop {
            let least = CLAIM_BATCH as u32;
            let Ok(mut batch) = Arc::clone(&slots).acquire_many_owned(least).await else {
                return;
            };
            // Every slot freed meanwhile is taken too.
            while let Ok(more) = Arc::clone(&slots).try_acquire_owned() {
                batch.merge(more);
            }
            let room = in_flight.room(batch.num_permits());
            let claimed = match this.hooks.claim(&this.instance, &room, this.lease()).await {
                Ok(claimed) => {
                    this.outage.answered();
                    claimed
                }
                Err(e) => {
                    this.outage.failed("claiming webhook deliveries", &e);
                    Vec::new()
                }
            };
            // A claim that took less than it might have took all that was
            // due (of the subscriptions with room): the loop waits for more
            // to be due, rather than claim again for nothing (on SQLite, a
            // claim takes the write lock). A finish that makes more due
            // wakes it.
            let took_all_due = claimed.len() < room.total;
            // The slots not used are freed with `batch`.
            for delivery in claimed {
                let Some(slot) = batch.split(1) else {
                    break;
                };
                let webhook_id = delivery.webhook_id;
                in_flight.sending(webhook_id);
                let (this, in_flight) = (Arc::clone(&this), Arc::clone(&in_flight));
                let outcomes = outcomes.clone();
                tokio::spawn(async move {
                    this.deliver(delivery, &outcomes, &in_flight).await;
                    drop(slot);
                    // The next delivery of the same resource may be
                    // claimable now.
                    if in_flight.finished(webhook_id) {
                        this.due.notify_one();
                    }
                });
            }
            drop(batch);
            if took_all_due {
                this.wait_for_due(&in_flight).await;
            }
        }
    }

    /// Waits until deliveries may be due: a wake-up (a fan-out, a replay,
    /// a finish), or the next due time of a subscription with room for a
    /// claim's batch, at most [`IDLE_TICK`].
    async fn wait_for_due(&self, in_flight: &InFlight) {
        let woken = self.due.notified();
        tokio::pin!(woken);
        // A wake-up that came during the claim needs no next due time: a
        // busy subscription's finishes come that fast, and asking cost a
        // query after nearly every claim.
        if woken.as_mut().enable() {
            return;
        }
        let idle = self.idle_for(&in_flight.full()).await;
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep(idle) => {}
        }
    }

    /// A claim's lease: the request's bound, and a margin for recording
    /// its outcome.
    fn lease(&self) -> Duration {
        self.timeout + LEASE_MARGIN
    }

    /// How long to sleep with nothing claimed: until the next delivery of
    /// a subscription not in `full` is due, at most [`IDLE_TICK`].
    async fn idle_for(&self, full: &[i64]) -> Duration {
        match self.hooks.next_due(full).await {
            Ok(Some(due)) => (due - Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .clamp(Duration::from_millis(5), IDLE_TICK),
            Ok(None) => IDLE_TICK,
            Err(e) => {
                self.outage
                    .failed("reading when webhook deliveries are due", &e);
                IDLE_TICK
            }
        }
    }

    /// Records the outcomes handed to `recorded`, as many as are waiting in
    /// each commit; at most [`IN_FLIGHT`] can be, each holding its slot.
    async fn record(&self, mut recorded: mpsc::UnboundedReceiver<Recording>) {
        let mut batch = Vec::with_capacity(IN_FLIGHT);
        while recorded.recv_many(&mut batch, IN_FLIGHT).await > 0 {
            let (finished, waiting): (Vec<_>, Vec<_>) = batch.drain(..).unzip();
            self.finish_all(&finished).await;
            for done in waiting {
                let _ = done.send(());
            }
        }
    }

    /// Records `finished`, trying once more after a failure (a lock
    /// conflict, a moment's outage): the leases are most likely still
    /// held, and a batch lost is sent again only once they run out. An
    /// outcome that did not count needs nothing: its lease ran out and
    /// another claim took the delivery, whose outcome is the one that
    /// counts. A panic (a bug in us) is logged and counts as a failure,
    /// so that the deliverer goes on.
    async fn finish_all(&self, finished: &[FinishedAttempt]) {
        for last_try in [false, true] {
            let recorded = AssertUnwindSafe(self.hooks.finish_all(&self.instance, finished))
                .catch_unwind()
                .await;
            match recorded {
                Ok(Ok(_)) => {
                    self.outage.answered();
                    return;
                }
                Ok(Err(e)) if last_try => self.outage.failed("recording webhook deliveries", &e),
                Ok(Err(_)) => {}
                Err(panic) => {
                    let message = panic_message(&*panic);
                    slog::error!(self.log, "recording webhook deliveries panicked";
                        "panic" => message);
                    return;
                }
            }
        }
    }

    /// Sends one delivery and records the outcome.
    async fn deliver(&self, delivery: ClaimedDelivery, outcomes: &Outcomes, in_flight: &InFlight) {
        let secrets: Result<Vec<_>, _> = delivery
            .secrets
            .iter()
            .map(|sealed| self.keys.open(sealed))
            .collect();
        let secrets = match secrets {
            Ok(secrets) => secrets,
            Err(e) => return self.cannot_sign(&delivery, in_flight, &e),
        };
        let outcome = self.attempt(&delivery, &secrets).await;
        let result = match outcome.next {
            NextStep::Delivered => AttemptResult::Delivered,
            NextStep::RetryAt(_) => AttemptResult::Retried,
            NextStep::Exhausted => AttemptResult::Exhausted,
            NextStep::Gone => AttemptResult::Gone,
        };
        let since_commit = (result == AttemptResult::Delivered)
            .then(|| committed_at(&delivery.body))
            .flatten()
            .and_then(|time| (Utc::now() - time).to_std().ok());
        self.metrics.webhook_attempt(result, since_commit);
        outcomes
            .record(FinishedAttempt::of(&delivery, outcome))
            .await;
    }

    /// A delivery this instance cannot sign: its secret does not open with
    /// this instance's key file (sealed since under another file; start-up
    /// checked those stored then), or a bug in us. Not the receiver's
    /// failure, so nothing is recorded: the lease runs out and another
    /// instance takes the delivery (its claim counts one more attempt).
    /// This one claims none of the subscription's deliveries for twice the
    /// lease, so as not to take them from instances that can sign, and logs
    /// it once for that while.
    fn cannot_sign(&self, delivery: &ClaimedDelivery, in_flight: &InFlight, e: &SecretError) {
        let until = Instant::now() + self.lease() * 2;
        if in_flight.hold(delivery.webhook_id, until) {
            slog::error!(self.log, "cannot open a webhook's signing secret: \
                leaving its deliveries to instances that can";
                "webhook" => delivery.webhook_id, "error" => %e);
        }
    }

    /// One attempt, signed with `secrets`: the request, and what its answer
    /// means.
    async fn attempt(
        &self,
        delivery: &ClaimedDelivery,
        secrets: &[SigningSecret],
    ) -> AttemptOutcome {
        let at = Utc::now();
        if let Err(refused) = self.policy.check_url(&delivery.url) {
            return self.failed(delivery, at, None, refused.to_string(), None);
        }
        let id = delivery.event_id.to_string();
        let timestamp = at.timestamp();
        let signature = signature_header(secrets, &id, timestamp, &delivery.body);
        let sent = self
            .client
            .post(&delivery.url)
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
            .body(delivery.body.clone())
            .send()
            .await;
        match sent {
            Ok(response) => self.answered(delivery, at, &response),
            Err(e) => {
                let error = self.sending_failed(e);
                self.failed(delivery, at, None, error, None)
            }
        }
    }

    /// What an answer means: 2xx delivered, 410 gone, anything else a
    /// failure tried again (no sooner than its `Retry-After`).
    fn answered(
        &self,
        delivery: &ClaimedDelivery,
        at: DateTime<Utc>,
        response: &reqwest::Response,
    ) -> AttemptOutcome {
        let status = response.status();
        if status.is_success() {
            return AttemptOutcome {
                status: Some(status.as_u16()),
                error: None,
                at,
                ended: Utc::now(),
                next: NextStep::Delivered,
            };
        }
        if status == http::StatusCode::GONE {
            return AttemptOutcome {
                status: Some(status.as_u16()),
                error: Some("the receiver answered 410 Gone: the subscription is disabled".into()),
                at,
                ended: Utc::now(),
                next: NextStep::Gone,
            };
        }
        let wait = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| retry_after(value, std::time::SystemTime::now()));
        let error = match wait {
            Some(wait) => format!(
                "the receiver answered {status} with Retry-After: {} s",
                wait.as_secs()
            ),
            None => format!("the receiver answered {status}"),
        };
        self.failed(delivery, at, Some(status.as_u16()), error, wait)
    }

    /// Why a request got no answer. A timeout names the limit that ran out
    /// (reqwest's text, "operation timed out", says neither which nor how
    /// long); anything else is reqwest's chain of errors, without the URL,
    /// which the delivery's record shows beside it.
    fn sending_failed(&self, e: reqwest::Error) -> String {
        match (e.is_timeout(), e.is_connect()) {
            (true, true) => format!(
                "could not connect within {}",
                duration_text(super::target::connect_timeout(self.timeout))
            ),
            (true, false) => format!(
                "no answer within {} (the delivery timeout)",
                duration_text(self.timeout)
            ),
            _ => petstore_api::error::chain(&e.without_url()),
        }
    }

    /// A failed attempt: tried again after the schedule's next delay (or
    /// the receiver's `Retry-After`, when longer), counted from the failure
    /// (a timeout ends long after the attempt began), or failed for good
    /// when the schedule is exhausted.
    fn failed(
        &self,
        delivery: &ClaimedDelivery,
        at: DateTime<Utc>,
        status: Option<u16>,
        error: String,
        retry_after: Option<Duration>,
    ) -> AttemptOutcome {
        let ended = Utc::now();
        let next = match self.schedule.after_attempt(delivery.attempt) {
            None => NextStep::Exhausted,
            Some(delay) => {
                let delay = retry_after.map_or(delay, |asked| asked.max(delay));
                let delay = chrono::TimeDelta::from_std(delay).unwrap_or(chrono::TimeDelta::MAX);
                NextStep::RetryAt(ended.checked_add_signed(delay).unwrap_or(ended))
            }
        };
        AttemptOutcome {
            status,
            error: Some(shortened(error)),
            at,
            ended,
            next,
        }
    }
}

/// `error` in at most [`ERROR_MAX_CHARS`] characters, an ellipsis saying
/// where it was cut.
fn shortened(error: String) -> String {
    if error.chars().count() <= ERROR_MAX_CHARS {
        return error;
    }
    let mut short: String = error.chars().take(ERROR_MAX_CHARS - 1).collect();
    short.push('…');
    short
}

/// When the event in `body` was committed (its `time`).
fn committed_at(body: &str) -> Option<DateTime<Utc>> {
    #[derive(serde::Deserialize)]
    struct Committed {
        time: DateTime<Utc>,
    }
    serde_json::from_str::<Committed>(body)
        .ok()
        .map(|event| event.time)
}

/// The media type of a delivery's body: one CloudEvent in the structured
/// mode of CloudEvents' HTTP binding.
pub const CONTENT_TYPE: &str = "application/cloudevents+json";

#[cfg(test)]
mod tests {
    use super::*;

    fn sending(in_flight: &InFlight, webhook_id: i64, times: usize) {
        (0..times).for_each(|_| in_flight.sending(webhook_id));
    }

    #[test]
    fn a_long_error_is_cut_with_an_ellipsis_and_a_short_one_kept() {
        assert_eq!(
            shortened("the receiver answered 500".into()),
            "the receiver answered 500"
        );
        let exact = "é".repeat(ERROR_MAX_CHARS);
        assert_eq!(shortened(exact.clone()), exact);
        let cut = shortened("é".repeat(ERROR_MAX_CHARS + 1));
        assert_eq!(cut.chars().count(), ERROR_MAX_CHARS);
        assert!(cut.ends_with("é…"), "{cut}");
    }

    #[test]
    fn a_subscription_this_instance_cannot_sign_gets_no_room_while_it_is_held() {
        let in_flight = InFlight::default();
        sending(&in_flight, 2, 3);
        let later = Instant::now() + Duration::from_secs(60);
        assert!(in_flight.hold(1, later), "newly held: logged");
        assert!(!in_flight.hold(1, later), "held already: not logged again");
        assert!(in_flight.hold(2, later));
        let room = in_flight.room(IN_FLIGHT);
        assert_eq!((room.of(1), room.of(2)), (0, 0), "{room:?}");
        assert_eq!(room.of(3), room.each, "the others keep theirs");
        let mut full = in_flight.full();
        full.sort_unstable();
        assert_eq!(full, [1, 2], "no due time is asked of them either");
        // A hold that has ended gives the subscription its room again.
        in_flight.hold(1, Instant::now());
        assert_eq!(in_flight.room(IN_FLIGHT).of(1), room.each);
    }

    #[test]
    fn a_lone_subscription_has_as_many_requests_in_flight_as_before_shares() {
        let in_flight = InFlight::default();
        assert_eq!(in_flight.room(IN_FLIGHT).of(1), PER_SUBSCRIPTION);
        sending(&in_flight, 1, PER_SUBSCRIPTION - 1);
        assert_eq!(in_flight.room(IN_FLIGHT).of(1), 1);
    }

    #[test]
    fn a_subscription_that_holds_its_share_leaves_room_for_others() {
        let in_flight = InFlight::default();
        sending(&in_flight, 1, PER_SUBSCRIPTION);
        let room = in_flight.room(IN_FLIGHT - PER_SUBSCRIPTION);
        assert_eq!((room.of(1), room.of(2)), (0, PER_SUBSCRIPTION));
        assert_eq!(in_flight.full(), [1]);
        // With two holding requests, each share shrinks, so that a third
        // still finds room.
        sending(&in_flight, 2, 1);
        let room = in_flight.room(IN_FLIGHT - PER_SUBSCRIPTION - 1);
        assert_eq!(room.each, IN_FLIGHT / 3);
        assert_eq!(
            (room.of(1), room.of(2), room.of(3)),
            (0, IN_FLIGHT / 3 - 1, IN_FLIGHT / 3)
        );
    }

    #[test]
    fn a_finish_wakes_the_claims_only_once_its_subscription_has_room_for_a_batch() {
        let in_flight = InFlight::default();
        sending(&in_flight, 1, PER_SUBSCRIPTION);
        let wakes: Vec<bool> = (0..CLAIM_BATCH).map(|_| in_flight.finished(1)).collect();
        assert!(
            wakes[..CLAIM_BATCH - 1].iter().all(|wakes| !wakes),
            "{wakes:?}"
        );
        assert!(wakes[CLAIM_BATCH - 1], "room for a batch");
        // A subscription with few in flight wakes them at every finish (the
        // next event of the same resource may be due).
        sending(&in_flight, 2, 2);
        assert!(in_flight.finished(2) && in_flight.finished(2));
        assert_eq!(
            in_flight.room(IN_FLIGHT).fuller.len(),
            1,
            "2 is no longer counted"
        );
    }
}
