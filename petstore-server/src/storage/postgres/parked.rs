//! What long polls parked at the head wait for on PostgreSQL: each kind's
//! last id up to the head ([`KindMarks`]), found by one statement a tick
//! for all of them, so that a poll is woken only when its kinds may have
//! an event after it.
//!
//! Woken by every move of the head instead, 200 polls parked on a type
//! that is not being written read a page each per tick for nothing, and
//! cost the writes 7 to 14 % (BENCHMARKS.md, "Issue 28, fourth pass").
//! Tracking the kinds in the database (an index on `(kind, id)`, or a row
//! per kind) would cost every write instead; here a tick reads the
//! primary key's range of the events written since the last one, once per
//! instance, and only while polls are parked.
//!
//! The marks never understate: an id the scout has not looked at counts
//! as of every kind (it is marked as the head when the scout skipped it,
//! because no poll was parked, the range was too long, or the statement
//! failed), so a poll may be woken for nothing but never sleeps through
//! its event. And a poll learns how far its kinds stayed quiet: its cursor
//! moves there, whether it is woken or its wait ends, so that it never has
//! the commits of other kinds to examine page after page.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::shared::SharedConnections;
use crate::storage::{EventKind, KindMarks, PARKED_READ_GAP, ParkedWait, StorageError};

/// The most ids one tick looks at; beyond (the head jumped, say after the
/// scout was idle), every kind is marked at the head instead.
const SCOUTED_MAX: i64 = 50_000;

/// What the scout found: each kind's last id among those up to `up_to`.
#[derive(Clone, Copy, Debug)]
struct Scouted {
    marks: KindMarks,
    up_to: i64,
}

impl Scouted {
    /// Every kind marked at `head`.
    fn at(head: i64) -> Scouted {
        Scouted {
            marks: KindMarks::all_at(head),
            up_to: head,
        }
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
            self.marks.mark(kind, id);
        }
        self.up_to = head;
        self
    }
}

/// The marks parked polls wait on, and the scout task that moves them.
pub(super) struct Parked {
    /// Held so that polls can subscribe; the scout counts it out of the
    /// polls parked.
    scouted: watch::Receiver<Scouted>,
    scout: JoinHandle<()>,
}

impl Parked {
    /// Starts the scout on the current runtime: it follows `head`, reads on
    /// `connections`, and logs its failures to `log`.
    pub fn start(
        connections: Arc<SharedConnections>,
        head: watch::Receiver<i64>,
        log: slog::Logger,
    ) -> Parked {
        let (sender, scouted) = watch::channel(Scouted::at(*head.borrow()));
        let scout = Scout {
            connections,
            head,
            scouted: sender,
            failing: false,
            log,
        };
        Parked {
            scouted,
            scout: tokio::spawn(scout.run()),
        }
    }

    /// Waits, until `deadline` at most, until an event of one of `kinds`
    /// may have an id above `above`, and says how far none has.
    pub async fn wait(
        &self,
        kinds: enumset::EnumSet<EventKind>,
        above: i64,
        deadline: tokio::time::Instant,
    ) -> ParkedWait {
        let mut scouted = self.scouted.clone();
        let mut quiet = above;
        loop {
            let now = *scouted.borrow_and_update();
            if now.marks.any_after(kinds, quiet) {
                return ParkedWait { read: true, quiet };
            }
            quiet = quiet.max(now.up_to);
            // Past the deadline, or with the scout gone (closed).
            if !matches!(
                tokio::time::timeout_at(deadline, scouted.changed()).await,
                Ok(Ok(()))
            ) {
                return ParkedWait { read: false, quiet };
            }
        }
    }

    /// Stops the scout: every poll parked on it is told.
    pub fn stop(&self) {
        self.scout.abort();
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.scout.abort();
    }
}

/// The scout task's state.
struct Scout {
    connections: Arc<SharedConnections>,
    head: watch::Receiver<i64>,
    scouted: watch::Sender<Scouted>,
    /// Whether the last statement failed (logged once until one succeeds).
    failing: bool,
    log: slog::Logger,
}

impl Scout {
    async fn run(mut self) {
        loop {
            let up_to = self.scouted.borrow().up_to;
            let head = match self.head.wait_for(|head| *head > up_to).await {
                Ok(head) => *head,
                Err(_) => return,
            };
            self.look(up_to, head).await;
            // One statement a tick at most, however often the head moves.
            tokio::time::sleep(PARKED_READ_GAP).await;
        }
    }

    /// Marks the kinds of the events after `up_to` up to `head`.
    async fn look(&mut self, up_to: i64, head: i64) {
        // Only the `Parked` itself holds a receiver: no poll is parked.
        let parked = self.scouted.receiver_count() > 1;
        if !parked || head - up_to > SCOUTED_MAX {
            self.scouted.send_replace(Scouted::at(head));
            return;
        }
        match self.kinds_between(up_to, head).await {
            Ok(found) => {
                if std::mem::take(&mut self.failing) {
                    slog::info!(
                        self.log,
                        "events: parked long polls are woken by kind again"
                    );
                }
                // Sent even when no mark moved: the polls learn how far
                // their kinds stayed quiet.
                self.scouted
                    .send_modify(|scouted| *scouted = scouted.after_look(&found, head));
            }
            Err(error) => {
                if !std::mem::replace(&mut self.failing, true) {
                    slog::warn!(self.log, "events: cannot read the kinds of new events; \
                        parked long polls are woken by every move of the head meanwhile";
                        "error" => %petstore_api::error::chain(&error));
                }
                self.scouted.send_replace(Scouted::at(head));
            }
        }
    }

    /// Each kind's last id after `from` up to `to`, and the floor.
    async fn kinds_between(&self, from: i64, to: i64) -> Result<Found, StorageError> {
        let doing = "reading the kinds of new events";
        let shared = self.connections.get().await?;
        let rows = shared
            .run(
                doing,
                shared
                    .client
                    .query(&shared.events.kinds_between, &[&from, &to]),
            )
            .await?;
        let mut found = Found {
            kinds: Vec::with_capacity(rows.len()),
            floor: 0,
        };
        for row in &rows {
            let code: i16 = row.try_get(0).map_err(super::postgres(doing))?;
            let id: i64 = row.try_get(1).map_err(super::postgres(doing))?;
            match code {
                0 => found.floor = id,
                code => found.kinds.push((
                    EventKind::from_code(code.into())
                        .ok_or(StorageError::Invariant("an event of an unknown kind"))?,
                    id,
                )),
            }
        }
        Ok(found)
    }
}

/// What one look found.
struct Found {
    /// Each kind's last id in the range looked at.
    kinds: Vec<(EventKind, i64)>,
    /// The feed's floor.
    floor: i64,
}

#[cfg(test)]
mod tests {
    use enumset::EnumSet;

    use super::*;

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
