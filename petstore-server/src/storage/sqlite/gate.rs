//! The serving process's write gate. Its two writing connections (the
//! writer thread's and the webhooks') take it around each of their writes,
//! so that they wait for the file's one write lock here, woken as soon as
//! it is free (a mutex: not first come, first served, but neither side
//! holds it for more than one transaction), rather than meet
//! `SQLITE_BUSY` and sleep in SQLite's busy handler (1 ms, then 2, 5,
//! 10…), polling. Behind a subscriber's deliveries, a group of API writes
//! slept so some 240 times a second.
//! Other processes (the `keys` and `webhooks` commands) and the keys'
//! connection, which writes rarely, still wait with the busy timeout.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Shared by the connections that write.
#[derive(Clone, Default)]
pub(super) struct WriteGate(Arc<Mutex<()>>);

impl WriteGate {
    /// Waits for the gate and holds it until the guard is dropped: for the
    /// whole of a write transaction, commit included.
    pub(super) fn enter(&self) -> MutexGuard<'_, ()> {
        // The gate guards no data: a panic while it was held left nothing
        // half-done that the next holder could see.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
