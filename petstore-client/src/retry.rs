//! [`RetryPolicy`]: how the `*_once` helpers, the walks and the follower of
//! the feed retry, and how long they wait before each retry — what the
//! service asks for in `Retry-After`, else capped exponential backoff with
//! full jitter.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};

use crate::{Error, types};

/// How the `*_once` helpers ([`Client::create_pet_once`],
/// [`Client::place_order_once`]), the walks ([`Client::walk_pets`],
/// [`Client::walk_orders`]) and the follower of the feed
/// ([`Client::follow_events`], which counts the attempts of each of its
/// requests apart, and by default sets no limit on them) retry.
///
/// A `429` or `503` that carries `Retry-After` (delay-seconds, as the
/// service sends it) is retried after exactly that many seconds, unless it
/// asks for more than [`max_retry_after`](RetryPolicy::max_retry_after): then
/// waiting is not worth it, and the error is returned at once (its
/// `Retry-After` is in its headers). Any other retry waits a random time
/// between zero and a cap that doubles with each attempt (full jitter, so
/// that clients failed by the same outage do not retry in lockstep). Either
/// way there are at most [`max_attempts`](RetryPolicy::max_attempts)
/// attempts, after which the last error is returned.
///
/// [`Client::create_pet_once`]: crate::Client::create_pet_once
/// [`Client::place_order_once`]: crate::Client::place_order_once
/// [`Client::walk_pets`]: crate::Client::walk_pets
/// [`Client::walk_orders`]: crate::Client::walk_orders
/// [`Client::follow_events`]: crate::Client::follow_events
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// The most attempts, the first included (at least 1).
    pub max_attempts: u32,
    /// The cap of the wait before the second attempt; it doubles with each
    /// attempt after that.
    pub initial_backoff: Duration,
    /// The largest cap a wait can reach.
    pub max_backoff: Duration,
    /// The longest `Retry-After` waited for (since 1.5.0): a `429` or `503`
    /// asking for a longer wait ends the retries with that error.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 10 attempts, waits capped at 100 ms doubling up to 5 s (about half a
    /// minute of retrying at most), and a `Retry-After` of up to 30 s
    /// waited for.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The default policy with at most `max_attempts` attempts.
    pub fn with_max_attempts(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            ..RetryPolicy::default()
        }
    }

    /// The same policy with waits capped at `initial` doubling up to `max`.
    pub fn backoff(self, initial: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy {
            initial_backoff: initial,
            max_backoff: max,
            ..self
        }
    }

    /// The same policy waiting for a `Retry-After` of at most `max`
    /// (`Duration::ZERO`: never wait for one, return the `429` or `503`).
    pub fn max_retry_after(self, max: Duration) -> RetryPolicy {
        RetryPolicy {
            max_retry_after: max,
            ..self
        }
    }

    /// How long to wait after failed attempt number `attempt` (1-based),
    /// which ended in `error`, before the next; `None` when there is to be
    /// no next: the error is not `retryable`, the attempts are used up, or
    /// the service asks for a longer wait than the policy allows.
    pub(crate) fn wait_after(
        &self,
        error: &Error<types::Error>,
        attempt: u32,
        retryable: bool,
    ) -> Option<Duration> {
        if !retryable || attempt >= self.max_attempts {
            return None;
        }
        match retry_after(error) {
            Some(asked) if asked > self.max_retry_after => None,
            Some(asked) => Some(asked),
            None => Some(self.jittered(attempt)),
        }
    }

    /// The cap of the backoff after failed attempt `attempt` (1-based).
    fn cap(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.initial_backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff)
    }

    /// A random wait between zero and the cap after failed attempt `attempt`.
    fn jittered(&self, attempt: u32) -> Duration {
        let cap = self.cap(attempt);
        let fraction = getrandom::u64().unwrap_or(u64::MAX / 2) as f64 / u64::MAX as f64;
        cap.mul_f64(fraction)
    }
}

/// Whether `error` is the service saying "not now": `429` (over the rate
/// limit; nothing was done) or `503` (unavailable).
pub(crate) fn is_throttled(error: &Error<types::Error>) -> bool {
    let status = match error {
        Error::ErrorResponse(response) => response.status(),
        Error::UnexpectedResponse(response) => response.status(),
        _ => return false,
    };
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    )
}

/// The wait a `429` or `503` asks for in `Retry-After`. Only delay-seconds,
/// the form the contract declares, is read; an HTTP-date (which a proxy
/// might send) is left to the backoff.
pub fn retry_after(error: &Error<types::Error>) -> Option<Duration> {
    if !is_throttled(error) {
        return None;
    }
    let headers: &HeaderMap = match error {
        Error::ErrorResponse(response) => response.headers(),
        Error::UnexpectedResponse(response) => response.headers(),
        _ => return None,
    };
    let seconds = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_and_stay_below_it() {
        let policy = RetryPolicy::default();
        let caps: Vec<u64> = (1..=8).map(|a| policy.cap(a).as_millis() as u64).collect();
        assert_eq!(caps, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(policy.cap(u32::MAX), Duration::from_secs(5));
        for attempt in 1..=8 {
            assert!(policy.jittered(attempt) <= policy.cap(attempt));
        }
    }
}
