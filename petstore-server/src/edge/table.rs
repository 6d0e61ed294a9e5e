//! The open connections: how many, which are idle and since when, and the
//! choice of the one to evict at the cap.
//!
//! The victim is the connection idle the longest among those that have
//! sent nothing since they became idle (a silent peer; a keep-alive client
//! between requests). Only if there are none is one that has begun to send
//! (a TLS handshake or a request head under way) evicted, the one whose
//! last byte is the oldest: otherwise a flood of silent connections would
//! evict real clients in the middle of their handshakes, which take a few
//! round trips. A peer that begins and stalls is cut by its own timeout
//! (handshake, header read) instead. And a connection whose task has not
//! yet looked at its socket is never evicted: under a flood the accept loop
//! would otherwise outrun the new connections' tasks, and evict real
//! clients whose first bytes were waiting, unread. Nor is one idle for
//! less than [`EVICTION_GRACE`]: a new client has that long to send its
//! first bytes, and a keep-alive client its next request, before a flood
//! can take its place.
//!
//! The request path touches only its own connection's [`Slot`] (atomics,
//! no lock); the table's lock is taken when a connection opens or closes,
//! and when one is to be evicted, which scans the slots for the one idle
//! the longest: at the cap, under a flood, an accept costs that scan,
//! which is a few microseconds per thousand connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long a connection is safe from eviction once idle: longer than a
/// client takes to send its first bytes after connecting (a round trip),
/// short enough that a flood at the cap is still accepted (at most the cap
/// per grace).
pub(super) const EVICTION_GRACE: Duration = Duration::from_millis(500);

/// What [`Table::evict`] did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Eviction {
    /// Told the connection idle the longest to close.
    Evicted,
    /// The connection idle the longest may be evicted from then on.
    NotBefore(Instant),
    /// None is idle.
    NoneIdle,
}

/// One open connection, as the table and its requests see it.
#[derive(Debug)]
pub(super) struct Slot {
    id: u64,
    /// Requests in progress: from the service's call to the end of the
    /// response's body.
    busy: AtomicU32,
    /// When it last became idle, in milliseconds since the table's epoch.
    idle_since: AtomicU64,
    /// Whether it has sent a byte since it became idle.
    sent_since_idle: AtomicBool,
    /// When it last sent a byte, in milliseconds since the table's epoch.
    last_sent: AtomicU64,
    /// Whether its task has read from the socket yet.
    started: AtomicBool,
    /// Chosen for eviction (so that it is not chosen twice).
    evicted: AtomicBool,
    /// Wakes the connection's task to close it.
    pub(super) evict: Notify,
    table: Arc<Table>,
}

impl Slot {
    /// Whether no request is in progress.
    pub(super) fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }

    /// Whether the peer has sent anything since it became idle.
    pub(super) fn sent_since_idle(&self) -> bool {
        self.sent_since_idle.load(Ordering::Acquire)
    }

    /// When it last became idle (meaningful while [`Slot::is_idle`]).
    pub(super) fn idle_since(&self) -> Instant {
        let millis = self.idle_since.load(Ordering::Acquire);
        self.table.epoch + std::time::Duration::from_millis(millis)
    }

    /// Its task has begun to read from the socket.
    pub(super) fn started(&self) {
        if !self.started.swap(true, Ordering::AcqRel) && self.table.waiting() {
            // The accept loop waits at the cap with none to evict: this one
            // may now be.
            self.table.changed.notify_waiters();
        }
    }

    /// The peer sent bytes.
    pub(super) fn received(&self) {
        self.last_sent
            .store(self.table.now_millis(), Ordering::Release);
        self.sent_since_idle.store(true, Ordering::Release);
    }

    /// A request begins.
    pub(super) fn request_started(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
    }

    /// A request's response is done (or dropped).
    pub(super) fn request_done(&self) {
        self.idle_since
            .store(self.table.now_millis(), Ordering::Release);
        self.sent_since_idle.store(false, Ordering::Release);
        if self.busy.fetch_sub(1, Ordering::AcqRel) == 1 && self.table.waiting() {
            // The accept loop waits at the cap with none to evict: this
            // one now is.
            self.table.changed.notify_waiters();
        }
    }
}

/// The open connections.
#[derive(Debug)]
pub(super) struct Table {
    epoch: Instant,
    next_id: AtomicU64,
    open: AtomicUsize,
    /// Evicted connections not closed yet.
    evicting: AtomicUsize,
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    /// Set while the accept loop waits at the cap.
    waiting: AtomicBool,
    /// Notified when a connection closes, or becomes idle while the accept
    /// loop waits.
    pub(super) changed: Notify,
}

impl Table {
    pub(super) fn new() -> Arc<Table> {
        Arc::new(Table {
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            evicting: AtomicUsize::new(0),
            slots: Mutex::new(HashMap::new()),
            waiting: AtomicBool::new(false),
            changed: Notify::new(),
        })
    }

    fn now_millis(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// Whether the accept loop waits at the cap.
    pub(super) fn set_waiting(&self, waiting: bool) {
        self.waiting.store(waiting, Ordering::Release);
    }

    /// Connections open.
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Registers a new connection, idle from now.
    pub(super) fn insert(self: &Arc<Table>) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            busy: AtomicU32::new(0),
            idle_since: AtomicU64::new(self.now_millis()),
            sent_since_idle: AtomicBool::new(false),
            last_sent: AtomicU64::new(0),
            started: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            evict: Notify::new(),
            table: Arc::clone(self),
        });
        self.lock().insert(slot.id, Arc::clone(&slot));
        self.open.fetch_add(1, Ordering::AcqRel);
        slot
    }

    /// Evicted connections not closed yet: while one is closing, the accept
    /// loop waits for it rather than evicting another.
    pub(super) fn evicting(&self) -> usize {
        self.evicting.load(Ordering::Acquire)
    }

    /// Forgets a closed connection.
    pub(super) fn remove(&self, slot: &Slot) {
        self.lock().remove(&slot.id);
        if slot.evicted.load(Ordering::Acquire) {
            self.evicting.fetch_sub(1, Ordering::AcqRel);
        }
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Tells the connection idle the longest (not already told) to close,
    /// silent ones first (see the module's comment).
    pub(super) fn evict(&self) -> Eviction {
        self.evict_at(self.now_millis())
    }

    fn evict_at(&self, now: u64) -> Eviction {
        let grace = u64::try_from(EVICTION_GRACE.as_millis()).unwrap_or(u64::MAX);
        let slots = self.lock();
        let oldest = slots
            .values()
            .filter(|slot| {
                slot.is_idle()
                    && slot.started.load(Ordering::Acquire)
                    && !slot.evicted.load(Ordering::Acquire)
            })
            .map(|slot| {
                let sent = slot.sent_since_idle.load(Ordering::Acquire);
                let since = if sent {
                    slot.last_sent.load(Ordering::Acquire)
                } else {
                    slot.idle_since.load(Ordering::Acquire)
                };
                ((sent, since, slot.id), slot)
            })
            .min_by_key(|(key, _)| *key)
            .map(|((_, since, _), slot)| (slot, since));
        match oldest {
            Some((_, since)) if since.saturating_add(grace) > now => {
                Eviction::NotBefore(self.epoch + Duration::from_millis(since + grace))
            }
            Some((slot, _)) => {
                slot.evicted.store(true, Ordering::Release);
                self.evicting.fetch_add(1, Ordering::AcqRel);
                // A permit: the task closes even if it is not waiting yet.
                slot.evict.notify_one();
                Eviction::Evicted
            }
            None => Eviction::NoneIdle,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Slot>>> {
        // The map stays consistent whatever panicked while holding it.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A moment past every test connection's grace.
    const LATER: u64 = 60_000;

    #[test]
    fn a_connection_idle_for_less_than_the_grace_is_not_evicted_yet() {
        let table = Table::new();
        let slot = table.insert();
        slot.started();
        let since = slot.idle_since.load(Ordering::Acquire);
        let grace = EVICTION_GRACE.as_millis() as u64;
        assert_eq!(
            table.evict_at(since + grace - 1),
            Eviction::NotBefore(slot.idle_since() + EVICTION_GRACE)
        );
        assert_eq!(table.evict_at(since + grace), Eviction::Evicted);
    }

    #[test]
    fn the_connection_idle_the_longest_is_evicted_and_never_a_busy_one() {
        let table = Table::new();
        let first = table.insert();
        let second = table.insert();
        let third = table.insert();
        // Not one has been read from yet: none may go.
        assert_eq!(table.evict_at(LATER), Eviction::NoneIdle);
        for slot in [&first, &second, &third] {
            slot.started();
        }
        first.request_started();
        assert_eq!(table.open(), 3);
        // `first` is busy: `second`, idle since `third` was opened or
        // before (ties go to the older connection), goes.
        assert!(table.evict_at(LATER) == Eviction::Evicted);
        assert!(second.evicted.load(Ordering::Acquire));
        assert!(table.evict_at(LATER) == Eviction::Evicted);
        assert!(third.evicted.load(Ordering::Acquire));
        assert_eq!(table.evicting(), 2);
        // Only the busy one is left, and it is not evicted.
        assert_eq!(table.evict_at(LATER), Eviction::NoneIdle);
        first.request_done();
        assert!(table.evict_at(LATER) == Eviction::Evicted);
        assert!(first.evicted.load(Ordering::Acquire));
        for slot in [&first, &second, &third] {
            table.remove(slot);
        }
        assert_eq!((table.open(), table.evicting()), (0, 0));
    }

    #[test]
    fn a_connection_that_has_begun_to_send_goes_after_every_silent_one() {
        let table = Table::new();
        let handshaking = table.insert();
        let silent = table.insert();
        handshaking.started();
        silent.started();
        handshaking.received();
        assert!(table.evict_at(LATER) == Eviction::Evicted);
        assert!(silent.evicted.load(Ordering::Acquire));
        assert!(!handshaking.evicted.load(Ordering::Acquire));
        // With no silent one left, it goes too.
        assert!(table.evict_at(LATER) == Eviction::Evicted);
        assert!(handshaking.evicted.load(Ordering::Acquire));
        // A request's end makes it silent again until it sends.
        handshaking.request_started();
        handshaking.request_done();
        assert!(!handshaking.sent_since_idle.load(Ordering::Acquire));
    }
}
