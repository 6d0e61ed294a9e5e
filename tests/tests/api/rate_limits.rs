//! Rate limits (`petstore-server/src/ratelimit/`) over real HTTP: a key
//! over its budget gets `429 rate_limited` and nothing is done; every
//! answer carries the RateLimit fields; the cap in flight; requests without
//! a valid key limited per address; a budget changed while running; limits
//! off; and two PostgreSQL instances keeping one budget per key.
//!
//! Budgets are spent by counting requests, not by timing them: a rate of
//! 1/h refills nothing within a test, so a burst of `n` admits exactly `n`.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use petstore_server::budget::{Budget, KeyLimits, LimitsChange, Rate};
use petstore_server::ratelimit::RateLimits;
use petstore_server::storage;
use petstore_tests::{Backend, KEY_CHANGE, TestServer, assert_error, fresh_database};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn n(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// Generous defaults, so that only what a test tightens limits it; the
/// address budget as given.
fn limits(address_burst: u32) -> RateLimits {
    RateLimits {
        key: Budget {
            rate: "1000/s".parse().unwrap(),
            burst: n(1000),
            in_flight: n(100),
        },
        address_rate: "1/h".parse().unwrap(),
        address_burst: n(address_burst),
    }
}

/// A key's own budget: `burst` requests, then (practically) none.
fn burst_only(burst: u32) -> KeyLimits {
    KeyLimits {
        rate: Some("1/h".parse().unwrap()),
        burst: Some(n(burst)),
        in_flight: None,
    }
}

async fn limited(backend: Backend, address_burst: u32) -> Option<TestServer> {
    let database = fresh_database(backend).await?;
    Some(TestServer::start_limited(database, limits(address_burst)).await)
}

macro_rules! limited_on_every_backend {
    ($(async fn $name:ident($server:ident) $body:block)*) => {$(
        mod $name {
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                let $server = limited(Backend::Sqlite, 1000).await.expect("SQLite");
                $body
            }

            #[tokio::test]
            async fn postgres() {
                let Some($server) = limited(Backend::Postgres, 1000).await else {
                    return;
                };
                $body
            }
        }
    )*};
}

fn field<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .map(|value| value.to_str().expect("ASCII"))
}

/// Both fields, as the draft spells them, for the policy `policy`.
fn assert_fields(headers: &HeaderMap, policy: &str, what: &str) {
    let declared = field(headers, "ratelimit-policy").unwrap_or_else(|| panic!("{what}"));
    let state = field(headers, "ratelimit").unwrap_or_else(|| panic!("{what}"));
    assert!(
        declared.starts_with(&format!("\"{policy}\";q=")),
        "{what}: {declared}"
    );
    assert!(
        state.starts_with(&format!("\"{policy}\";r=")),
        "{what}: {state}"
    );
    assert!(state.contains(";t="), "{what}: {state}");
}

limited_on_every_backend! {
    async fn over_budget_is_429_and_nothing_is_done(server) {
        // Waiting for the key spends one request of its burst of 3.
        let key = server.stored_key_limited("tight", "all", burst_only(3)).await;
        let pet = json!({"name": "Rex", "categoryId": 1});
        let post = || {
            server.anonymous(Method::POST, "/pets").bearer_auth(&key).json(&pet).send()
        };
        for _ in 0..2 {
            let created = post().await.unwrap();
            assert_eq!(created.status(), StatusCode::CREATED);
            assert_fields(created.headers(), "key", "a 201");
        }
        let refused = post().await.unwrap();
        let headers = refused.headers().clone();
        let body = assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
        assert!(body["message"].as_str().unwrap().contains("1/h"), "{body}");
        // 1/h: the next request in an hour, in whole seconds.
        let retry_after: u64 = field(&headers, "retry-after").unwrap().parse().unwrap();
        assert!((3590..=3600).contains(&retry_after), "{retry_after}");
        assert_fields(&headers, "key", "the 429");
        assert_eq!(
            field(&headers, "ratelimit").unwrap(),
            format!("\"key\";r=0;t={retry_after}, \"key-in-flight\";r=100")
        );
        let request_id = field(&headers, "x-request-id").expect("a request id").to_owned();

        // Nothing was done: two pets, not three.
        assert_eq!(server.list("?limit=100").await.len(), 2);

        // Logged as every answer is, with the key's name; counted.
        let log = server.log_eventually_contains(&request_id).await;
        let record: Value = log
            .lines()
            .find(|line| line.contains(&request_id))
            .map(|line| serde_json::from_str(line).unwrap())
            .unwrap();
        assert_eq!(record["msg"], "request completed", "{record}");
        assert_eq!(record["response_code"], 429, "{record}");
        assert_eq!(record["key"], "tight", "{record}");
        assert_eq!(record["method"], "POST", "{record}");
        assert_eq!(record["uri"], "/v1/pets", "{record}");
        assert!(record["latency_us"].is_u64(), "{record}");
        assert_eq!(server.metric("petstore_rate_limited_total{key=\"tight\"}").await, 1.0);
        assert_eq!(
            server
                .metric("petstore_http_requests_total{operation=\"none\",status=\"429\"}")
                .await,
            1.0
        );
    }

    async fn every_answer_carries_the_fields(server) {
        let reader = server.stored_key("reader", "pets:read").await;
        let created = server.post_pet(&json!({"name": "Rex", "categoryId": 1})).send().await;
        let answers = [
            ("201", created.unwrap()),
            ("200", server.get("/pets").send().await.unwrap()),
            ("404", server.get("/pets/999999").send().await.unwrap()),
            ("400", server.get("/pets?limit=0").send().await.unwrap()),
            ("unrouted 404", server.get("/nowhere").send().await.unwrap()),
            (
                "403",
                server
                    .anonymous(Method::POST, "/pets")
                    .bearer_auth(&reader)
                    .json(&json!({"name": "Rex", "categoryId": 1}))
                    .send()
                    .await
                    .unwrap(),
            ),
        ];
        for (what, answer) in &answers {
            assert_eq!(&answer.status().as_u16().to_string(), &what[what.len() - 3..]);
            assert_fields(answer.headers(), "key", what);
            let policy = field(answer.headers(), "ratelimit-policy").unwrap();
            assert_eq!(
                policy,
                "\"key\";q=1000;w=1, \"key-in-flight\";q=100;qu=\"concurrent-requests\""
            );
        }
        // Without a key: the address's budget.
        let unauthorized = server.anonymous(Method::GET, "/pets").send().await.unwrap();
        assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert_fields(unauthorized.headers(), "address", "a 401");
        // The contract is not limited.
        let contract = server
            .client_get_root("/openapi.json")
            .await;
        assert_eq!(contract.status(), StatusCode::OK);
        assert_eq!(field(contract.headers(), "ratelimit"), None);
    }

    async fn the_cap_in_flight_refuses_the_extra(server) {
        let own = KeyLimits { in_flight: Some(n(1)), ..KeyLimits::default() };
        let key = server.stored_key_limited("one-at-a-time", "all", own).await;
        // A create whose body has not all arrived is in flight until it has.
        let body = r#"{"name":"Rex","categoryId":1}"#;
        let mut held = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let head = format!(
            "POST /v1/pets HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        held.write_all(head.as_bytes()).await.unwrap();
        held.write_all(&body.as_bytes()[..8]).await.unwrap();
        let get = || server.anonymous(Method::GET, "/pets").bearer_auth(&key).send();
        // Once the held request is in, the next is refused.
        let deadline = Instant::now() + petstore_support::SOON;
        let refused = loop {
            let answer = get().await.unwrap();
            if answer.status() == StatusCode::TOO_MANY_REQUESTS {
                break answer;
            }
            assert!(Instant::now() < deadline, "no request refused while one was held");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let state = field(refused.headers(), "ratelimit").unwrap().to_owned();
        assert!(state.ends_with("\"key-in-flight\";r=0"), "{state}");
        assert_eq!(field(refused.headers(), "retry-after"), Some("1"));
        assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
        // The held request completes; its place is free again.
        held.write_all(&body.as_bytes()[8..]).await.unwrap();
        let mut answer = vec![0; 12];
        held.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 201");
        assert_eq!(get().await.unwrap().status(), StatusCode::OK);
    }

    async fn a_budget_changed_while_running_applies_within_seconds(server) {
        let key = server.stored_key_limited("changing", "all", burst_only(1000)).await;
        let keys = storage::open_keys(&server.database().url).await.unwrap();
        let change = LimitsChange { burst: Some(Some(n(1))), ..LimitsChange::default() };
        let changed = Instant::now();
        keys.set_key_limits("changing", change).await.unwrap();
        let get = || server.anonymous(Method::GET, "/pets").bearer_auth(&key).send();
        petstore_support::eventually_async_within("the new budget applies", KEY_CHANGE, || {
            let answer = get();
            async move {
                let answer = answer.await.unwrap();
                field(answer.headers(), "ratelimit-policy")
                    .is_some_and(|policy| policy.starts_with("\"key\";q=1;"))
            }
        })
        .await;
        eprintln!("a budget changed applied after {:?}", changed.elapsed());
        // The request that showed it spent the whole new burst.
        assert_eq!(get().await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    }
}

#[tokio::test]
async fn requests_without_a_valid_key_are_limited_per_address() {
    let server = limited(Backend::Sqlite, 3).await.unwrap();
    for _ in 0..3 {
        let refused = server.anonymous(Method::GET, "/pets").send().await.unwrap();
        assert_fields(refused.headers(), "address", "a 401");
        assert_error(refused, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    let anonymous = server.anonymous(Method::GET, "/pets").send().await.unwrap();
    assert_fields(anonymous.headers(), "address", "the 429");
    assert!(field(anonymous.headers(), "retry-after").is_some());
    assert_error(anonymous, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // Guessing keys is throttled the same way.
    let guess = server
        .anonymous(Method::GET, "/pets")
        .bearer_auth("pst_guess")
        .send()
        .await
        .unwrap();
    assert_error(guess, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // A valid key from the same address has its own budget.
    assert_eq!(
        server.get("/pets").send().await.unwrap().status(),
        StatusCode::OK
    );
    // The contract, and the management listener, are never limited.
    assert_eq!(
        server.client_get_root("/openapi.yaml").await.status(),
        StatusCode::OK
    );
    let admin = server.admin_addr().unwrap();
    for path in ["/healthz", "/readyz"] {
        let answer = reqwest::get(format!("http://{admin}{path}")).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{path}");
        assert_eq!(field(answer.headers(), "ratelimit"), None, "{path}");
    }
    assert_eq!(
        server
            .metric("petstore_rate_limited_total{key=\"-\"}")
            .await,
        2.0
    );
}

#[tokio::test]
async fn with_rate_limits_off_there_are_no_fields_and_no_429() {
    let server = TestServer::start().await;
    for _ in 0..50 {
        let answer = server.get("/pets").send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(field(answer.headers(), "ratelimit"), None);
        assert_eq!(field(answer.headers(), "ratelimit-policy"), None);
    }
    let anonymous = server.anonymous(Method::GET, "/pets").send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(field(anonymous.headers(), "ratelimit"), None);
}

/// Requests of `key` sent round-robin to `servers` by `workers` tasks, as
/// fast as they are answered, for `period`; when each admitted one was
/// answered (since the start), and how many were refused.
async fn hammer(
    servers: &[&TestServer],
    key: &str,
    workers: usize,
    period: Duration,
) -> (Vec<Duration>, usize) {
    let start = Instant::now();
    let sent = std::sync::atomic::AtomicUsize::new(0);
    let results = futures::future::join_all((0..workers).map(|_| async {
        let (mut admitted, mut refused) = (Vec::new(), 0);
        while start.elapsed() < period {
            let turn = sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let server = servers[turn % servers.len()];
            let answer = server
                .anonymous(Method::GET, "/pets?limit=1")
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            match answer.status() {
                StatusCode::OK => admitted.push(start.elapsed()),
                StatusCode::TOO_MANY_REQUESTS => refused += 1,
                other => panic!("{other}"),
            }
        }
        (admitted, refused)
    }))
    .await;
    let mut admitted: Vec<Duration> = results.iter().flat_map(|(a, _)| a.clone()).collect();
    admitted.sort_unstable();
    (admitted, results.iter().map(|(_, r)| r).sum())
}

/// The most in any window of `window`.
fn worst_window(admitted: &[Duration], window: Duration) -> usize {
    admitted
        .iter()
        .enumerate()
        .map(|(first, &at)| admitted[first..].partition_point(|&t| t < at + window))
        .max()
        .unwrap_or(0)
}

/// Requests of `key` at `rate` per second, round-robin to `servers`, for
/// `period`; how many were refused.
async fn paced(servers: &[&TestServer], key: &str, rate: u32, period: Duration) -> usize {
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / rate);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut answers = Vec::new();
    let start = Instant::now();
    let mut turn = 0;
    while start.elapsed() < period {
        ticks.tick().await;
        let server = servers[turn % servers.len()];
        turn += 1;
        let request = server
            .anonymous(Method::GET, "/pets?limit=1")
            .bearer_auth(key)
            .send();
        answers.push(tokio::spawn(async move { request.await.unwrap().status() }));
    }
    let mut refused = 0;
    for answer in answers {
        refused += usize::from(answer.await.unwrap() == StatusCode::TOO_MANY_REQUESTS);
    }
    refused
}

/// Two instances on one PostgreSQL database, a key's requests split
/// between them round-robin: together they admit at most the budget's
/// rate over any window plus its burst, and a key at 80 % of its budget is
/// never refused.
#[tokio::test]
async fn two_postgres_instances_keep_one_budget_per_key() {
    let Some(first) = limited(Backend::Postgres, 1000).await else {
        return;
    };
    let mut second = first.beside().await;
    for server in [&first, &second] {
        petstore_support::eventually_async("both instances count two", || async {
            server.metric("petstore_rate_limit_instances").await == 2.0
        })
        .await;
    }
    let rate: u32 = 50;
    let burst: u32 = 20;
    let own = KeyLimits {
        rate: Some(Rate::per_second(n(rate))),
        burst: Some(n(burst)),
        in_flight: None,
    };
    let key = first.stored_key_limited("shared", "all", own).await;
    second
        .key_answers(&key, "/pets?limit=1", |status| status == 200)
        .await;

    // 80 %: no 429 at all.
    let refused = paced(
        &[&first, &second],
        &key,
        rate * 8 / 10,
        Duration::from_secs(4),
    )
    .await;
    assert_eq!(refused, 0, "429s at 80 % of the budget");

    // Far over it, after the burst has refilled.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let period = Duration::from_secs(4);
    let (admitted, refused) = hammer(&[&first, &second], &key, 8, period).await;
    assert!(
        refused > admitted.len(),
        "not over budget: {refused} refused"
    );
    for window in [0.25, 0.5, 1.0, 2.0, 4.0] {
        let window = Duration::from_secs_f64(window);
        let worst = worst_window(&admitted, window);
        let bound = (f64::from(rate) * window.as_secs_f64()) as usize + burst as usize;
        eprintln!(
            "window {window:?}: worst {worst} admitted, rate·t + burst = {bound}, \
             overshoot {}",
            worst as i64 - bound as i64
        );
        // Times are the answers', seen by the client: a few milliseconds
        // after the instance decided, more when the machine is busy. A
        // tenth of the rate covers 100 ms of that (the worst windows
        // printed above are what was measured).
        let slack = (f64::from(rate) * 0.1).ceil() as usize;
        assert!(worst <= bound + slack, "{worst} admitted in {window:?}");
    }
    second.stop().await;
}
