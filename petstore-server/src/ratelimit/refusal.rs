//! The `429` the rate limiter answers itself, before dropshot sees the
//! request: the contract's error body, `Retry-After`, the RateLimit
//! fields and an `x-request-id`, logged as dropshot logs every answer (a
//! `request completed` record, which `observe.rs` counts into the
//! metrics like any other) and counted by key name.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use dropshot::Body;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use petstore_api::error::ApiError;

use super::Limits;
use super::budgets::{Over, Refused};
use super::fields::seconds_up;

/// What the client is told.
fn message(refused: &Refused, retry_after: u64) -> String {
    let budget = &refused.budget;
    match refused.over {
        Over::Rate => format!(
            "rate limited: this API key may send {} (bursts of {}); nothing was done: retry \
             after {retry_after} s",
            budget.rate, budget.burst
        ),
        Over::InFlight => format!(
            "rate limited: this API key already has {} requests in progress, its most; \
             nothing was done: retry once one has been answered",
            budget.in_flight
        ),
        Over::Address => format!(
            "rate limited: too many requests without a valid API key from this address \
             ({} in bursts of {}); nothing was done: retry after {retry_after} s",
            budget.rate, budget.burst
        ),
    }
}

/// The `429` for `request`, refused for `refused`; `key` is its key's name
/// (`None`: limited by address). Logged and counted.
pub(super) fn answer<B>(
    limits: &Limits,
    request: &Request<B>,
    remote: SocketAddr,
    started: Instant,
    refused: Refused,
    key: Option<Arc<str>>,
) -> Response<Body> {
    // At least 1: a `Retry-After: 0` invites an immediate retry, which the
    // remainder of the interval would refuse again.
    let retry_after = seconds_up(refused.retry_after).max(1);
    let error = ApiError::rate_limited(message(&refused, retry_after));
    let body = serde_json::to_vec(&error).expect("the error body serialises");
    let request_id = uuid::Uuid::new_v4().to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(RETRY_AFTER, HeaderValue::from(retry_after));
    headers.insert(
        "x-request-id",
        HeaderValue::try_from(request_id.as_str()).expect("a UUID is ASCII"),
    );
    refused.fields.write(headers);
    // The shape of dropshot's record, so that the access log and the
    // metrics (`observe.rs`) take it as they take every other.
    let record = limits.log.new(slog::o!(
        "remote_addr" => remote,
        "req_id" => request_id,
        "method" => request.method().as_str().to_owned(),
        "uri" => request.uri().to_string(),
    ));
    slog::info!(record, "request completed";
        "response_code" => StatusCode::TOO_MANY_REQUESTS.as_u16(),
        "latency_us" => started.elapsed().as_micros(),
        "key" => key.as_deref().unwrap_or("-"),
        "rate_limited" => over_name(refused.over),
    );
    limits.metrics.rate_limited(key.as_ref());
    response
}

fn over_name(over: Over) -> &'static str {
    match over {
        Over::Rate => "rate",
        Over::InFlight => "in_flight",
        Over::Address => "address",
    }
}
