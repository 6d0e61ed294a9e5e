//! What long polls parked at the head wait for, on either backend: each
//! kind's last id up to the head ([`KindMarks`]), found once a tick for all
//! of them by a scout task per instance, so that a poll is woken only when
//! its kinds may have an event after it. Where the scout finds the kinds is
//! the backend's ([`EventKinds`]): PostgreSQL reads them from the events
//! written since the last look (`postgres/parked.rs`), SQLite from memory,
//! which knows each kind's last id.
//!
//! Woken by every move of the head instead, 200 polls parked on a type
//! that is not being written read a page each per tick for nothing, and
//! cost the writes 7 to 14 % (BENCHMARKS.md, "Issue 28, fourth pass").
//!
//! The marks never understate: an id the scout has not looked at counts
//! as of every kind (it is marked as the head when the scout skipped it,
//! because no poll was parked, the range was too long, or the look
//! failed), so a poll may be woken for nothing but never sleeps through
//! its event. And a poll learns how far its kinds stayed quiet: its cursor
//! moves there, whether it is woken or its wait ends, so that it never has
//! the commits of other kinds to examine page after page.
//!
//! A look wakes only the polls of the kinds whose marks it moved (a
//! [`Notify`] per kind); the others read how far their kinds stayed quiet
//! from the last look when they are woken or their wait ends. Woken by
//! every look instead, 200 polls parked on a kind nobody wrote woke 10,000
//! times a second, each wake-up polling its connection's whole stack, and
//! cost PostgreSQL's `place_order` 13 to 16 % (BENCHMARKS.md, "Issue 28,
//! thirteenth pass"); SQLite's polls woke so, at every tick of a write,
//! until the fifteenth pass.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use enumset::EnumSet;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::storage::events::{KIND_CODES, kind_index};
use crate::storage::{EventKind, KindMarks, PARKED_READ_GAP, ParkedWait, StorageError};

/// The most ids one tick looks at; beyond (the head jumped, say after the
/// scout was idle), every kind is marked at the head instead: a bound on
/// what one of PostgreSQL's looks reads.
const SCOUTED_MAX: i64 = 50_000;

/// What the scout found: each kind's last id among those up to `up_to`,
/// and for each kind an id range in which it has no event, before the
/// look that last moved its mark.
#[derive(Clone, Copy, Debug)]
struct Scouted {
    marks: KindMarks,
    up_to: i64,
    /// By [`kind_index`]: `(before, from)`, the kind's mark before the look
    /// that last moved it and where that look started. The kind has no
    /// event in `(before, from]`: `before` was its mark up to `from`.
    quiet_spans: [(i64, i64); KIND_CODES],
}

impl Scouted {
    /// Every kind marked at `head`, and nothing known before it.
    fn at(head: i64) -> Scouted {
        Scouted {
            marks: KindMarks::all_at(head),
            up_to: head,
            quiet_spans: [(head, head); KIND_CODES],
        }
    }

    /// How far no event of `kinds` is known after `above`: the last look's
    /// end if none has a mark above it; else, for each that has, where the
    /// look that moved its mark started, if its mark before that look was
    /// not above `above` (otherwise `above` itself).
    fn quiet_after(&self, kinds: EnumSet<EventKind>, above: i64) -> i64 {
        kinds
            .iter()
            .filter(|&kind| self.marks.of(kind) > above)
            .map(|kind| match self.quiet_spans[kind_index(kind)] {
                (before, from) if before <= above => from.max(above),
                _ => above,
            })
            .fold(self.up_to.max(above), i64::min)
    }

    /// The kinds whose marks are above those of `earlier`.
    fn moved_since(&self, earlier: &Scouted) -> EnumSet<EventKind> {
        EventKind::ALL
            .into_iter()
            .filter(|&kind| self.marks.of(kind) > earlier.marks.of(kind))
            .collect()
    }

    /// What the polls know once a look at the events after `up_to` up to
    /// `head` found `found`: each kind's last id there, and that nothing
    /// else is up to `head`. Unless events of that range were purged
    /// before the look: what they were is unknown, so every kind is
    /// marked at `head`, and a poll reads (its cursor may have expired:
    /// it gets its `410` rather than a cursor moved past purged events).
    fn after_look(mut self, found: &Found, head: i64) -> Scouted {
        if found.floor > self.up_to {
            return Scouted::at(head);
        }
        for &(kind, id) in &found.kinds {
            let before = self.marks.of(kind);
            if id > before {
                self.quiet_spans[kind_index(kind)] = (before, self.up_to);
                self.marks.mark(kind, id);
            }
        }
        self.up_to = head;
        self
    }
}

/// The wake-ups of parked polls: one per kind, and one for all of them
/// when the scout is gone.
#[derive(Default)]
struct Wakes {
    kinds: [Notify; KIND_CODES],
    gone: Notify,
    closed: AtomicBool,
}

impl Wakes {
    /// Wakes the polls parked on any of `kinds`.
    fn wake(&self, kinds: EnumSet<EventKind>) {
        for kind in kinds {
            self.kinds[kind_index(kind)].notify_waiters();
        }
    }

    /// Wakes every poll for good: the scout is gone.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.gone.notify_waiters();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// Makes `looked` what polls read (even when no mark moved: they learn how
/// far their kinds stayed quiet), then wakes those of the kinds whose
/// marks it moved.
fn publish(scouted: &watch::Sender<Scouted>, wakes: &Wakes, looked: Scouted) {
    let earlier = scouted.send_replace(looked);
    wakes.wake(looked.moved_since(&earlier));
}

/// Waits, until `deadline` at most, until an event of one of `kinds` may
/// have an id above `above` by `scouted`, and says how far none has.
/// Woken by `wakes` only when one of its kinds moved, or when they close.
async fn wait_for_kinds(
    scouted: &watch::Receiver<Scouted>,
    wakes: &Wakes,
    kinds: EnumSet<EventKind>,
    above: i64,
    deadline: tokio::time::Instant,
) -> ParkedWait {
    let mut ends = pin!(tokio::time::sleep_until(deadline));
    loop {
        // Taken before the look is read: a look sent after the read wakes
        // them (`notify_waiters` reaches every `Notified` made before it).
        let woken = futures::future::select_all(
            kinds
                .iter()
                .map(|kind| &wakes.kinds[kind_index(kind)])
                .chain([&wakes.gone])
                .map(|wake| Box::pin(wake.notified())),
        );
        let now = *scouted.borrow();
        let quiet = now.quiet_after(kinds, above);
        if now.marks.any_after(kinds, above) {
            return ParkedWait { read: true, quiet };
        }
        if wakes.is_closed() {
            return ParkedWait { read: false, quiet };
        }
        tokio::select! {
            _ = woken => {}
            () = &mut ends => {
                let quiet = scouted.borrow().quiet_after(kinds, above);
                return ParkedWait { read: false, quiet };
            }
        }
    }
}

/// Where a backend's scout finds the kinds of new events.
pub(super) trait EventKinds: Send + 'static {
    /// Each kind's last id after `from` up to `to`, and the feed's floor.
    /// A kind may be marked at `to` when it is only known to have an event
    /// after `from` (a mark may overstate, never understate).
    fn last_of_each(
        &mut self,
        from: i64,
        to: i64,
    ) -> impl Future<Output = Result<Found, StorageError>> + Send;
}

/// The marks parked polls wait on, and the scout task that moves them.
pub(super) struct Parked {
    /// Cloned by each parked poll; the scout counts this one out of the
    /// polls parked.
    scouted: watch::Receiver<Scouted>,
    wakes: Arc<Wakes>,
    scout: JoinHandle<()>,
}

impl Parked {
    /// Starts the scout on the current runtime: it follows `head`, finds
    /// the kinds in `kinds`, and logs its failures to `log`.
    pub fn start(kinds: impl EventKinds, head: watch::Receiver<i64>, log: slog::Logger) -> Parked {
        let (sender, scouted) = watch::channel(Scouted::at(*head.borrow()));
        let wakes = Arc::new(Wakes::default());
        let scout = Scout {
            kinds,
            head,
            scouted: sender,
            wakes: Arc::clone(&wakes),
            failing: false,
            log,
        };
        Parked {
            scouted,
            wakes,
            scout: tokio::spawn(scout.run()),
        }
    }

    /// Waits, until `deadline` at most, until an event of one of `kinds`
    /// may have an id above `above`, and says how far none has.
    pub async fn wait(
        &self,
        kinds: EnumSet<EventKind>,
        above: i64,
        deadline: tokio::time::Instant,
    ) -> ParkedWait {
        // The clone counts this poll as parked while it waits.
        let scouted = self.scouted.clone();
        wait_for_kinds(&scouted, &self.wakes, kinds, above, deadline).await
    }

    /// Stops the scout: every poll parked on it is told.
    pub fn stop(&self) {
        self.scout.abort();
        self.wakes.close();
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The scout task's state.
struct Scout<K> {
    kinds: K,
    head: watch::Receiver<i64>,
    scouted: watch::Sender<Scouted>,
    wakes: Arc<Wakes>,
    /// Whether the last look failed (logged once until one succeeds).
    failing: bool,
    log: slog::Logger,
}

impl<K> Drop for Scout<K> {
    /// However the scout ends, no poll waits on it any longer.
    fn drop(&mut self) {
        self.wakes.close();
    }
}

impl<K: EventKinds> Scout<K> {
    async fn run(mut self) {
        loop {
            let up_to = self.scouted.borrow().up_to;
            let head = match self.head.wait_for(|head| *head > up_to).await {
                Ok(head) => *head,
                Err(_) => return,
            };
            self.look(up_to, head).await;
            // One look a tick at most, however often the head moves.
            tokio::time::sleep(PARKED_READ_GAP).await;
        }
    }

    /// Marks the kinds of the events after `up_to` up to `head`.
    async fn look(&mut self, up_to: i64, head: i64) {
        // Only the `Parked` itself holds a receiver: no poll is parked.
        let parked = self.scouted.receiver_count() > 1;
        if !parked || head - up_to > SCOUTED_MAX {
            self.publish(Scouted::at(head));
            return;
        }
        match self.kinds.last_of_each(up_to, head).await {
            Ok(found) => {
                if std::mem::take(&mut self.failing) {
                    slog::info!(
                        self.log,
                        "events: parked long polls are woken by kind again"
                    );
                }
                let looked = self.scouted.borrow().after_look(&found, head);
                self.publish(looked);
            }
            Err(error) => {
                if !std::mem::replace(&mut self.failing, true) {
                    slog::warn!(self.log, "events: cannot read the kinds of new events; \
                        parked long polls are woken by every move of the head meanwhile";
                        "error" => %petstore_api::error::chain(&error));
                }
                self.publish(Scouted::at(head));
            }
        }
    }

    fn publish(&self, looked: Scouted) {
        publish(&self.scouted, &self.wakes, looked);
    }
}

/// What one look found.
pub(super) struct Found {
    /// Each kind's last id in the range looked at.
    pub kinds: Vec<(EventKind, i64)>,
    /// The feed's floor.
    pub floor: i64,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use enumset::EnumSet;
    use tokio_test::task;

    use super::*;

    /// A look after `scouted` up to `head` that found `kinds`.
    fn look(scouted: &watch::Sender<Scouted>, kinds: &[(EventKind, i64)], head: i64) -> Scouted {
        let found = Found {
            kinds: kinds.to_vec(),
            floor: 0,
        };
        scouted.borrow().after_look(&found, head)
    }

    /// Looks as a scout at `up_to` sends them, and the polls' wake-ups.
    fn scout_at(up_to: i64) -> (watch::Sender<Scouted>, watch::Receiver<Scouted>, Wakes) {
        let (sender, scouted) = watch::channel(Scouted::at(up_to));
        (sender, scouted, Wakes::default())
    }

    /// Beyond every test: only a wake-up ends these waits.
    fn far() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(3600)
    }

    #[tokio::test]
    async fn a_poll_is_woken_only_by_a_look_that_moves_its_kinds() {
        let (sender, scouted, wakes) = scout_at(10);
        let delivered = EnumSet::only(EventKind::OrderDelivered);
        let mut poll = task::spawn(wait_for_kinds(&scouted, &wakes, delivered, 10, far()));
        assert!(poll.poll().is_pending());

        let orders = [(EventKind::OrderPlaced, 14), (EventKind::PetOrdered, 15)];
        publish(&sender, &wakes, look(&sender, &orders, 20));
        let placed = [(EventKind::OrderPlaced, 24)];
        publish(&sender, &wakes, look(&sender, &placed, 30));
        assert!(!poll.is_woken(), "woken by other kinds");
        assert!(poll.poll().is_pending());

        // Its kind in the look over (30, 40]: nothing of it up to 30.
        let delivery = [
            (EventKind::OrderDelivered, 35),
            (EventKind::OrderPlaced, 38),
        ];
        publish(&sender, &wakes, look(&sender, &delivery, 40));
        assert!(poll.is_woken());
        let answer = ParkedWait {
            read: true,
            quiet: 30,
        };
        assert_eq!(poll.poll(), std::task::Poll::Ready(answer));
    }

    #[tokio::test]
    async fn a_poll_whose_wait_ends_learns_how_far_its_kinds_stayed_quiet() {
        let (sender, scouted, wakes) = scout_at(10);
        let created = [(EventKind::PetCreated, 17)];
        publish(&sender, &wakes, look(&sender, &created, 20));
        let ended = tokio::time::Instant::now();
        let delivered = EnumSet::only(EventKind::OrderDelivered);
        let answer = wait_for_kinds(&scouted, &wakes, delivered, 10, ended).await;
        assert_eq!(
            answer,
            ParkedWait {
                read: false,
                quiet: 20
            }
        );
    }

    #[tokio::test]
    async fn a_poll_is_told_when_the_scout_is_gone() {
        let (_sender, scouted, wakes) = scout_at(10);
        let created = EnumSet::only(EventKind::PetCreated);
        let mut poll = task::spawn(wait_for_kinds(&scouted, &wakes, created, 10, far()));
        assert!(poll.poll().is_pending());
        wakes.close();
        assert!(poll.is_woken());
        let answer = ParkedWait {
            read: false,
            quiet: 10,
        };
        assert_eq!(poll.poll(), std::task::Poll::Ready(answer));
    }

    #[test]
    fn a_poll_starts_where_the_look_that_moved_its_kind_started_if_it_saw_the_mark_before() {
        let found = |kind, id| Found {
            kinds: vec![(kind, id)],
            floor: 0,
        };
        let delivered = EnumSet::only(EventKind::OrderDelivered);
        let scouted = Scouted::at(10)
            .after_look(&found(EventKind::OrderDelivered, 15), 20)
            .after_look(&found(EventKind::PetCreated, 22), 30)
            .after_look(&found(EventKind::OrderDelivered, 35), 40);
        // No delivery in (15, 30]: a poll at 15 or above reads from 30.
        assert_eq!(scouted.quiet_after(delivered, 15), 30);
        assert_eq!(scouted.quiet_after(delivered, 33), 33);
        // At 12 it has not seen 15, which may be the only one after it.
        assert_eq!(scouted.quiet_after(delivered, 12), 12);
        // A kind with nothing after the cursor is quiet to the last look.
        let created = EnumSet::only(EventKind::PetCreated);
        assert_eq!(scouted.quiet_after(created, 22), 40);
        // With both, the earlier of the two.
        assert_eq!(scouted.quiet_after(created | delivered, 22), 30);
        // After a skipped look nothing is known before its head.
        let skipped = Scouted::at(50);
        assert_eq!(skipped.quiet_after(delivered, 45), 45);
    }

    #[test]
    fn a_look_marks_each_kind_it_found_and_tells_how_far_the_others_stayed_quiet() {
        let found = Found {
            kinds: vec![(EventKind::PetCreated, 14), (EventKind::OrderPlaced, 12)],
            floor: 3,
        };
        let scouted = Scouted::at(10).after_look(&found, 20);
        assert_eq!(scouted.up_to, 20);
        assert!(
            scouted
                .marks
                .any_after(EnumSet::only(EventKind::PetCreated), 13)
        );
        assert!(
            !scouted
                .marks
                .any_after(EnumSet::only(EventKind::PetCreated), 14)
        );
        assert!(
            scouted
                .marks
                .any_after(EnumSet::only(EventKind::OrderPlaced), 11)
        );
        assert!(
            !scouted
                .marks
                .any_after(EnumSet::only(EventKind::OrderDelivered), 10)
        );
    }

    #[test]
    fn a_look_at_a_range_purged_before_it_marks_every_kind_at_the_head() {
        // The range after 10 lost its first events to a purge (floor 12)
        // before the look: an `order.delivered` may have been among them.
        let found = Found {
            kinds: vec![(EventKind::PetCreated, 14)],
            floor: 12,
        };
        let scouted = Scouted::at(10).after_look(&found, 20);
        assert_eq!(scouted.up_to, 20);
        for kind in EventKind::ALL {
            assert!(scouted.marks.any_after(EnumSet::only(kind), 19), "{kind:?}");
        }
    }
}
