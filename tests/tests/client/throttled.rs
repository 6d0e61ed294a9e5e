//! A `429` or `503` with `Retry-After` is waited for and retried by the
//! `*_once` helpers and the walks, within their `RetryPolicy`: the wait the
//! service asks for, never more than `max_retry_after`, never more attempts
//! than `max_attempts`. The real server cannot be driven to a `429` here, so
//! a stub answers.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use petstore_client::{Client, Error, NewPet, RetryPolicy};
use petstore_tests::KEY;

use crate::error_response;
use crate::stub::{Reply, Stub};

fn rate_limited(retry_after: &str) -> Reply {
    let body = r#"{"code":"rate_limited","message":"over the quota","status":429}"#;
    Reply::json(429, body).header("retry-after", retry_after)
}

fn unavailable(retry_after: &str) -> Reply {
    let body = r#"{"code":"service_unavailable","message":"retry later","status":503}"#;
    Reply::json(503, body).header("retry-after", retry_after)
}

fn rex() -> NewPet {
    NewPet::builder()
        .name("Rex")
        .category_id(1)
        .try_into()
        .unwrap()
}

const REX: &str = r#"{"id":7,"name":"Rex","categoryId":1}"#;

#[tokio::test]
async fn a_429_is_waited_for_as_long_as_retry_after_says_then_retried_with_the_same_key() {
    let stub = Stub::replying(vec![rate_limited("1"), Reply::json(201, REX)]).await;
    let client = Client::with_api_key(stub.url(), KEY);
    let started = Instant::now();
    let created = client.create_pet_once(rex()).send().await.unwrap();
    let waited = started.elapsed();
    assert_eq!((created.pet.id, created.attempts), (7, 2));
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}");
    let keys: Vec<_> = stub
        .received()
        .iter()
        .map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    let key = Some(created.idempotency_key);
    assert_eq!(keys, [key.clone(), key]);
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_ends_at_once_with_the_429() {
    let stub = Stub::replying(vec![rate_limited("120")]).await;
    let client = Client::with_api_key(stub.url(), KEY);
    let policy = RetryPolicy::default().max_retry_after(Duration::from_secs(5));
    let started = Instant::now();
    let result = client.place_order_once(1).retry(policy).send().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let asked = match &result {
        Err(error) => petstore_client::retry_after(error),
        Ok(_) => None,
    };
    assert_eq!(asked, Some(Duration::from_secs(120)));
    error_response(result, 429, "rate_limited");
    assert_eq!(stub.received().len(), 1);
}

#[tokio::test]
async fn attempts_are_bounded_however_short_the_wait() {
    let stub = Stub::replying(vec![rate_limited("0")]).await;
    let client = Client::with_api_key(stub.url(), KEY);
    let policy = RetryPolicy::with_max_attempts(3);
    let result = client.create_pet_once(rex()).retry(policy).send().await;
    error_response(result, 429, "rate_limited");
    assert_eq!(stub.received().len(), 3);
}

#[tokio::test]
async fn a_walk_fetches_a_throttled_page_again_after_retry_after() {
    let stub = Stub::replying(vec![
        unavailable("1"),
        rate_limited("0"),
        Reply::json(200, format!("[{REX}]")),
    ])
    .await;
    let client = Client::with_api_key(stub.url(), KEY);
    let started = Instant::now();
    let pets: Vec<_> = client.walk_pets().stream().try_collect().await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(pets.len(), 1);
    let lines: Vec<_> = stub
        .received()
        .into_iter()
        .map(|r| r.request_line)
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l == &lines[0]), "{lines:?}");
}

#[tokio::test]
async fn a_walk_ends_with_the_429_once_its_attempts_are_used_up() {
    let stub = Stub::replying(vec![rate_limited("0")]).await;
    let client = Client::with_api_key(stub.url(), KEY);
    let walk = client
        .walk_orders()
        .retry(RetryPolicy::with_max_attempts(2));
    let result: Result<Vec<_>, Error<_>> = walk.stream().try_collect().await;
    error_response(result, 429, "rate_limited");
    assert_eq!(stub.received().len(), 2);
}
