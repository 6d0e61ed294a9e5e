//! Waiting for a condition, never for a length of time — and never for
//! ever: every wait here has a condition that ends it as soon as it holds
//! and a deadline that turns a hang into a failure naming what never
//! happened. These are the only places in the tests that pause between
//! attempts.
//!
//! A deadline orders nothing: it only bounds a wait. It is generous (CI
//! shares a busy 2-core machine, and a flaky test is worse than a slow
//! one), since a wait that succeeds ends at once whatever its deadline.

use std::future::Future;
use std::time::{Duration, Instant};

/// The deadline of [`eventually`] and [`eventually_async`]: for what this
/// process has already set going and takes a moment — a log record on its
/// way through the asynchronous drain, a request being counted, a task
/// reaching a queue.
pub const SOON: Duration = Duration::from_secs(30);

/// The pause between two checks of a condition.
const POLL: Duration = Duration::from_millis(10);

/// Waits until `condition` holds, checking it every few milliseconds;
/// fails if it does not within [`SOON`].
pub async fn eventually(what: &str, condition: impl FnMut() -> bool) {
    eventually_within(what, SOON, condition).await;
}

/// [`eventually`] for a condition that must await (a request, a query).
pub async fn eventually_async<F: Future<Output = bool>>(what: &str, condition: impl FnMut() -> F) {
    eventually_async_within(what, SOON, condition).await;
}

/// Waits until `condition` holds; fails if it does not within `deadline`.
pub async fn eventually_within(
    what: &str,
    deadline: Duration,
    mut condition: impl FnMut() -> bool,
) {
    eventually_async_within(what, deadline, || std::future::ready(condition())).await;
}

/// [`eventually_within`] for a condition that must await. A check that
/// does not finish by the deadline fails the wait too.
pub async fn eventually_async_within<F: Future<Output = bool>>(
    what: &str,
    deadline: Duration,
    mut condition: impl FnMut() -> F,
) {
    eventually_some(what, deadline, || {
        let check = condition();
        async move { check.await.then_some(()) }
    })
    .await;
}

/// Calls `attempt` until it gives a value, and returns it; fails if none
/// comes within `deadline` (an attempt that does not finish by then fails
/// the wait too). Runs on tokio's clock: under `start_paused`, in virtual
/// time.
pub async fn eventually_some<T, F: Future<Output = Option<T>>>(
    what: &str,
    deadline: Duration,
    mut attempt: impl FnMut() -> F,
) -> T {
    let until = tokio::time::Instant::now() + deadline;
    loop {
        match tokio::time::timeout_at(until, attempt()).await {
            Ok(Some(value)) => return value,
            Ok(None) => {}
            Err(_) => panic!("{what}: still not so after {deadline:?} (the last check hung)"),
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{what}: still not so after {deadline:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Awaits `future`; fails if it is not done within `deadline`. For one
/// wait that must end (tasks that retry until they are answered, a
/// request, a process), whose condition is the future's own.
pub async fn within<T>(what: &str, deadline: Duration, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(deadline, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done after {deadline:?}"))
}

/// A moment a blocking wait (on a thread, off the async runtime) must not
/// pass.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    after: Duration,
}

impl Deadline {
    /// `after` from now.
    pub fn after(after: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + after,
            after,
        }
    }

    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// What is left of it (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Fails, naming `what` was waited for, once it has passed.
    pub fn check(&self, what: &str) {
        assert!(
            !self.passed(),
            "{what}: still not so after {:?}",
            self.after
        );
    }
}

/// The blocking sibling of [`eventually_some`]: calls `attempt` until it
/// gives a value, pausing `pause` between attempts; `None` once `deadline`
/// has passed (the caller says what that means).
pub fn poll_until<T>(
    deadline: Deadline,
    pause: Duration,
    mut attempt: impl FnMut() -> Option<T>,
) -> Option<T> {
    loop {
        if let Some(value) = attempt() {
            return Some(value);
        }
        if deadline.passed() {
            return None;
        }
        std::thread::sleep(pause.min(deadline.remaining()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_as_soon_as_its_condition_holds() {
        let mut checks = 0;
        let value = eventually_some("the third check", SOON, || {
            checks += 1;
            std::future::ready((checks == 3).then_some(checks))
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "never: still not so after 50ms")]
    async fn a_condition_that_never_holds_fails_at_its_deadline() {
        eventually_within("never", Duration::from_millis(50), || false).await;
    }

    #[tokio::test]
    #[should_panic(expected = "hung: still not so after 50ms (the last check hung)")]
    async fn a_check_that_hangs_fails_at_the_deadline() {
        eventually_async_within(
            "hung",
            Duration::from_millis(50),
            std::future::pending::<bool>,
        )
        .await;
    }

    #[test]
    fn a_blocking_poll_gives_up_at_its_deadline() {
        let deadline = Deadline::after(Duration::from_millis(50));
        assert_eq!(poll_until(deadline, POLL, || None::<()>), None);
        assert!(deadline.passed());
        assert_eq!(poll_until(deadline, POLL, || Some(1)), Some(1));
    }
}
