//! When a failed delivery is tried again: the retry schedule, and a
//! receiver's `Retry-After`.

use std::time::{Duration, SystemTime};

use http::HeaderValue;

/// The longest wait a receiver's `Retry-After` is honoured for; a longer
/// one is cut to it.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(24 * 3600);

/// How far a wait of the schedule is moved at random either way, so that
/// deliveries failed by one outage are not tried again all at once.
const JITTER: f64 = 0.1;

/// The waits between the attempts of a delivery: after the first attempt
/// fails, the first wait; after the last wait's attempt fails, the
/// delivery has failed for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetrySchedule {
    /// Never empty.
    waits: Vec<Duration>,
}

/// A retry schedule without a wait: every failed delivery would disable
/// its subscription at once.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the webhook retry schedule has no wait: give at least one, such as 5s")]
pub struct EmptySchedule;

impl Default for RetrySchedule {
    /// The Standard Webhooks spec's example: 5 s, 5 min, 30 min, 2 h, 5 h,
    /// 10 h, 14 h, 20 h, 24 h (some three days in all).
    fn default() -> RetrySchedule {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        let hours = |h: u64| minutes(h * 60);
        RetrySchedule {
            waits: vec![
                Duration::from_secs(5),
                minutes(5),
                minutes(30),
                hours(2),
                hours(5),
                hours(10),
                hours(14),
                hours(20),
                hours(24),
            ],
        }
    }
}

impl RetrySchedule {
    /// A schedule of these waits, in order.
    pub fn new(waits: Vec<Duration>) -> Result<RetrySchedule, EmptySchedule> {
        if waits.is_empty() {
            return Err(EmptySchedule);
        }
        Ok(RetrySchedule { waits })
    }

    /// The waits, as given (without jitter).
    pub fn waits(&self) -> &[Duration] {
        &self.waits
    }

    /// How long to wait after failed attempt number `attempt` (from 1)
    /// before the next, within ±10 % of the schedule's wait; `None` when
    /// the schedule is exhausted.
    pub fn after_attempt(&self, attempt: u32) -> Option<Duration> {
        let index = usize::try_from(attempt.checked_sub(1)?).ok()?;
        let wait = *self.waits.get(index)?;
        Some(jittered(wait, random_unit()))
    }
}

/// `wait` moved by up to [`JITTER`] of itself: `unit` (in 0..1) picks
/// where, from −10 % to +10 %.
fn jittered(wait: Duration, unit: f64) -> Duration {
    wait.mul_f64(1.0 - JITTER + 2.0 * JITTER * unit)
}

/// A random number in 0..1; the middle if the system has no randomness
/// (the jitter is spreading, not security).
fn random_unit() -> f64 {
    getrandom::u64().map_or(0.5, |r| r as f64 / (u64::MAX as f64 + 1.0))
}

/// The wait a receiver's `Retry-After` asks for (RFC 9110 §10.2.3): either
/// delay-seconds or an HTTP-date (a date already past asks for none), at
/// most [`RETRY_AFTER_MAX`]. `None` when the value is neither.
pub fn retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    let wait = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is still a very long wait.
        Duration::from_secs(text.parse().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(text).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(RETRY_AFTER_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_default_is_the_spec_s_example() {
        let hours: Vec<u64> = RetrySchedule::default().waits()[3..]
            .iter()
            .map(|w| w.as_secs() / 3600)
            .collect();
        assert_eq!(hours, [2, 5, 10, 14, 20, 24]);
        assert_eq!(
            RetrySchedule::default().waits()[..3],
            [secs(5), secs(300), secs(1800)]
        );
    }

    #[test]
    fn each_failed_attempt_waits_its_step_then_the_schedule_is_exhausted() {
        let schedule = RetrySchedule::new(vec![secs(10), secs(100), secs(1000)]).unwrap();
        for (attempt, wait) in [(1, 10.0), (2, 100.0), (3, 1000.0)] {
            for _ in 0..100 {
                let got = schedule.after_attempt(attempt).unwrap().as_secs_f64();
                assert!((wait * 0.9..=wait * 1.1).contains(&got), "{attempt}: {got}");
            }
        }
        assert_eq!(schedule.after_attempt(4), None);
        assert_eq!(schedule.after_attempt(u32::MAX), None);
        // There is no attempt 0: nothing failed yet.
        assert_eq!(schedule.after_attempt(0), None);
        assert_eq!(RetrySchedule::new(vec![]), Err(EmptySchedule));
    }

    #[test]
    fn jitter_spans_ten_percent_either_way() {
        assert_eq!(jittered(secs(100), 0.0), secs(90));
        assert_eq!(jittered(secs(100), 0.5), secs(100));
        assert!(jittered(secs(100), 0.999_999) < secs(110));
        let unit = random_unit();
        assert!((0.0..1.0).contains(&unit));
    }

    #[test]
    fn retry_after_reads_delay_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + secs(1_700_000_000);
        let read = |text: &'static str| retry_after(&HeaderValue::from_static(text), now);
        assert_eq!(read("120"), Some(secs(120)));
        assert_eq!(read(" 0 "), Some(Duration::ZERO));
        // Capped at 24 h, however far.
        assert_eq!(read("172800"), Some(RETRY_AFTER_MAX));
        assert_eq!(read("99999999999999999999999"), Some(RETRY_AFTER_MAX));

        let in_an_hour = httpdate::fmt_http_date(now + secs(3600));
        let value = HeaderValue::from_str(&in_an_hour).unwrap();
        assert_eq!(retry_after(&value, now), Some(secs(3600)));
        let past = HeaderValue::from_str(&httpdate::fmt_http_date(now - secs(60))).unwrap();
        assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
        let far = HeaderValue::from_str(&httpdate::fmt_http_date(now + secs(3 * 86400))).unwrap();
        assert_eq!(retry_after(&far, now), Some(RETRY_AFTER_MAX));

        for nonsense in ["", "-5", "1.5", "soon", "Tue, 32 Nov 2026 10:00:00 GMT"] {
            assert_eq!(read(nonsense), None, "{nonsense:?}");
        }
    }
}
