//! The `RateLimit-Policy` and `RateLimit` response fields of
//! draft-ietf-httpapi-ratelimit-headers-09 (the latest draft, -10, keeps
//! its syntax): each a Structured Fields List of a quoted policy name with
//! parameters, e.g.
//!
//! ```text
//! RateLimit-Policy: "key";q=200;w=2, "key-in-flight";q=32;qu="concurrent-requests"
//! RateLimit: "key";r=199;t=1, "key-in-flight";r=31
//! ```
//!
//! - `"key"`: the key's rate as its burst `q` over the `w` seconds in which
//!   an emptied burst refills (`q`/`w` is the sustained rate, never above
//!   it: `w` is rounded up); `r` the requests it may still send at once,
//!   `t` the seconds until the burst is whole again (on a `429`, until the
//!   next request is admitted: the same moment as `Retry-After`, as the
//!   draft asks).
//! - `"key-in-flight"`: the cap on the key's requests in progress
//!   (`qu="concurrent-requests"`, the draft's unit for it), `r` the free
//!   places; it has no window.
//! - `"address"`: the budget of requests without a valid key, per client
//!   address, as `"key"`.
//!
//! With several instances each enforces a share of a budget (`budgets.rs`);
//! the policy states the whole budget, and `r` what this instance still
//! admits times the instances: exact when a key's requests are spread
//! evenly, as a load balancer spreads them.

use std::time::Duration;

use http::HeaderValue;
use http::header::{HeaderMap, HeaderName};

/// `RateLimit-Policy`.
pub static POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub static STATE: HeaderName = HeaderName::from_static("ratelimit");

/// Whole seconds, rounded up: a client waiting this long is never early.
pub fn seconds_up(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// The window of a `burst` refilled one request per `interval`: whole
/// seconds, rounded up, at least 1 (the draft forbids `w=0`).
fn window(burst: u32, interval: Duration) -> u64 {
    seconds_up(interval * burst).max(1)
}

/// `RateLimit-Policy` of a key's budget.
pub fn key_policy(burst: u32, interval: Duration, in_flight: u32) -> HeaderValue {
    let text = format!(
        "\"key\";q={burst};w={}, \"key-in-flight\";q={in_flight};qu=\"concurrent-requests\"",
        window(burst, interval)
    );
    HeaderValue::try_from(text).expect("digits and ASCII")
}

/// `RateLimit` of a key: `remaining` requests now, whole in `reset`;
/// `free` places for requests in flight.
pub fn key_state(remaining: u32, reset: Duration, free: u32) -> HeaderValue {
    let t = seconds_up(reset);
    state(&[
        b"\"key\";r=",
        itoa::Buffer::new().format(remaining).as_bytes(),
        b";t=",
        itoa::Buffer::new().format(t).as_bytes(),
        b", \"key-in-flight\";r=",
        itoa::Buffer::new().format(free).as_bytes(),
    ])
}

/// A `RateLimit` value from its pieces. Written on every answer, so
/// without `format!` (a tenth of what the rate limiter cost per request,
/// BENCHMARKS.md).
fn state(pieces: &[&[u8]]) -> HeaderValue {
    // Three u32s and a u64 with their names: well under 128 bytes.
    let mut text = [0u8; 128];
    let mut length = 0;
    for piece in pieces {
        text[length..length + piece.len()].copy_from_slice(piece);
        length += piece.len();
    }
    HeaderValue::from_bytes(&text[..length]).expect("digits and ASCII")
}

/// `RateLimit-Policy` of the budget of requests without a valid key.
pub fn address_policy(burst: u32, interval: Duration) -> HeaderValue {
    let text = format!("\"address\";q={burst};w={}", window(burst, interval));
    HeaderValue::try_from(text).expect("digits and ASCII")
}

/// `RateLimit` of a client address.
pub fn address_state(remaining: u32, reset: Duration) -> HeaderValue {
    let t = seconds_up(reset);
    state(&[
        b"\"address\";r=",
        itoa::Buffer::new().format(remaining).as_bytes(),
        b";t=",
        itoa::Buffer::new().format(t).as_bytes(),
    ])
}

/// A copy of `value` of its own: cloning a `HeaderValue` shares its bytes
/// through a reference count, which every thread's requests of one key
/// would bounce between cores (BENCHMARKS.md, issue 26).
pub fn copied(value: &HeaderValue) -> HeaderValue {
    HeaderValue::from_bytes(value.as_bytes()).expect("a valid value stays valid")
}

/// Both fields of one answer.
#[derive(Clone, Debug)]
pub struct Fields {
    /// `RateLimit-Policy`.
    pub policy: HeaderValue,
    /// `RateLimit`.
    pub state: HeaderValue,
}

impl Fields {
    /// Adds both to `headers`, replacing any (the handlers set none).
    pub fn write(self, headers: &mut HeaderMap) {
        headers.insert(POLICY.clone(), self.policy);
        headers.insert(STATE.clone(), self.state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_the_drafts_lists_of_quoted_policies() {
        let interval = Duration::from_millis(10);
        assert_eq!(
            key_policy(200, interval, 32),
            "\"key\";q=200;w=2, \"key-in-flight\";q=32;qu=\"concurrent-requests\""
        );
        assert_eq!(
            key_state(0, Duration::from_millis(1), 31),
            "\"key\";r=0;t=1, \"key-in-flight\";r=31"
        );
        // A burst refilled in less than a second still has a window of 1.
        assert_eq!(address_policy(1, interval), "\"address\";q=1;w=1");
        assert_eq!(address_state(3, Duration::ZERO), "\"address\";r=3;t=0");
        // 150 at 100/s refill in 1.5 s: w=2 keeps q/w under the rate.
        assert_eq!(address_policy(150, interval), "\"address\";q=150;w=2");
    }
}
