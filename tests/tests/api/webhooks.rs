//! Contract 1.7.0, webhooks: a subscription receives every event it may
//! see, as the feed has it, signed the Standard Webhooks way with the
//! secret shown once; failures are retried with the same `webhook-id`, no
//! sooner than `Retry-After`; `410` disables, a replay re-enables; one
//! resource's events arrive in order; who sees which subscription and which
//! events follows the key's scopes and its own orders; only https targets
//! at public addresses unless the operator allows private ones.
//!
//! Receivers here listen on loopback over plain HTTP, which test servers
//! allow (`--webhook-allow-private-targets`), with the retry schedule
//! compressed to seconds and a 2 s request timeout.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use petstore_support::eventually_some;
use petstore_support::receiver::{Answer, Received, Receiver};
use petstore_tests::{
    Backend, KEY, TestServer, WEBHOOK_TIMEOUT, assert_error, fresh_database, next_link,
    on_every_backend,
};
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};

/// How long a test waits for deliveries: only a hang guard.
const DELIVERY: Duration = Duration::from_secs(60);

async fn webhooks_as(
    server: &TestServer,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Response {
    let request = server
        .anonymous(method, &format!("/webhooks{path}"))
        .bearer_auth(key);
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    request.send().await.expect("request sent")
}

/// Subscribes `url` with `key` (insisting on 201) and returns the answer.
async fn subscribe_as(server: &TestServer, key: &str, body: Value) -> Value {
    let response = webhooks_as(server, key, Method::POST, "", Some(body)).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.expect("a JSON webhook")
}

async fn subscribe(server: &TestServer, url: &str) -> Value {
    subscribe_as(server, KEY, json!({ "url": url })).await
}

async fn get_json(server: &TestServer, key: &str, path: &str) -> Value {
    let response = webhooks_as(server, key, Method::GET, path, None).await;
    assert_eq!(response.status(), StatusCode::OK, "GET /webhooks{path}");
    response.json().await.expect("JSON")
}

/// Waits until the receiver has answered `count` requests `200`, and
/// returns what it got.
async fn delivered(receiver: &Receiver, count: usize) -> Vec<Received> {
    eventually_some(
        &format!("the receiver answered {count} deliveries 200"),
        DELIVERY,
        || async {
            let ok = receiver
                .received()
                .into_iter()
                .filter(|r| r.answered == 200)
                .count();
            (ok >= count).then_some(())
        },
    )
    .await;
    receiver.received()
}

/// Verifies a request with `secret` as a receiver would, with the client's
/// verifier (the Standard Webhooks reference implementation underneath).
fn verifies(received: &Received, secret: &str) -> bool {
    petstore_client::verify_webhook(secret, &received.headers, &received.body).is_ok()
}

/// The feed's events after `after`, as the key `KEY` sees them.
async fn feed_after(server: &TestServer, after: &str) -> Vec<Value> {
    let response = server
        .anonymous(Method::GET, &format!("/events?limit=100&after={after}"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// The feed's head: the id of its last event ("0" when empty).
async fn feed_head(server: &TestServer) -> String {
    let mut after = "0".to_owned();
    loop {
        let page = feed_after(server, &after).await;
        match page.last() {
            Some(last) => after = last["id"].as_str().unwrap().to_owned(),
            None => return after,
        }
    }
}

/// Subscribes `url` to `pet.created` and creates an animal: its delivery,
/// once an attempt at it has failed.
async fn failed_delivery(server: &TestServer, url: &str) -> Value {
    let webhook = subscribe_as(server, KEY, json!({"url": url, "types": ["pet.created"]})).await;
    let id = webhook["id"].as_i64().unwrap();
    available(server, "Undelivered").await;
    eventually_some("a failed attempt recorded", DELIVERY, || async {
        let deliveries = get_json(server, KEY, &format!("/{id}/deliveries")).await;
        deliveries[0]
            .get("lastError")
            .is_some()
            .then(|| deliveries[0].clone())
    })
    .await
}

async fn available(server: &TestServer, name: &str) -> Value {
    server
        .create(json!({"name": name, "categoryId": 1, "status": "available"}))
        .await
}

on_every_backend! {
    async fn a_subscription_receives_each_event_as_the_feed_has_it_signed_with_its_secret(server) {
        let receiver = Receiver::healthy().await;
        let before = feed_head(&server).await;
        let webhook = subscribe(&server, &receiver.url("/hook")).await;
        let secret = webhook["secret"].as_str().expect("the secret, shown once");
        assert!(secret.starts_with("whsec_"), "{secret}");
        assert_eq!(webhook["state"], "active");
        assert_eq!(webhook["url"], receiver.url("/hook"));
        let animal = available(&server, "Hooked").await;
        let order = server.place_order(&animal["id"]).await;
        server.patch_order(&order["id"], "delivered").send().await.unwrap();
        let mut got = delivered(&receiver, 5).await;
        // Different resources' deliveries may arrive in any order (the
        // animal's and the order's here): each is compared with its event.
        got.sort_by_key(|received| received.id().parse::<i64>().expect("a decimal webhook-id"));
        let feed = feed_after(&server, &before).await;
        assert_eq!(feed.len(), 5, "{feed:?}");
        assert_eq!(got.len(), 5, "each event once, with a healthy receiver");
        for (received, event) in got.iter().zip(&feed) {
            assert_eq!(received.json(), *event, "the body is the event as the feed has it");
            assert_eq!(received.id(), event["id"].as_str().unwrap(), "webhook-id is the event's id");
            assert_eq!(received.header("content-type"), "application/cloudevents+json");
            let timestamp: i64 = received.header("webhook-timestamp").parse().expect("Unix seconds");
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
            assert!((now - timestamp).abs() < 60, "{timestamp} vs {now}");
            assert!(received.header("webhook-signature").starts_with("v1,"));
            assert!(verifies(received, secret), "the signature verifies with the secret");
            assert!(!verifies(received, "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"), "and with no other");
        }
        // The secret is never shown again.
        let id = webhook["id"].as_i64().unwrap();
        let read = get_json(&server, KEY, &format!("/{id}")).await;
        assert!(read.get("secret").is_none(), "{read}");
        let list = get_json(&server, KEY, "").await;
        assert!(list.as_array().unwrap().iter().all(|w| w.get("secret").is_none()));
        eventually_some("every delivery done and a success recorded", DELIVERY, || async {
            let read = get_json(&server, KEY, &format!("/{id}")).await;
            (read["pending"] == 0 && read.get("lastSuccessAt").is_some()).then_some(())
        }).await;
        // Operators see the deliveries, newest first.
        let deliveries = get_json(&server, KEY, &format!("/{id}/deliveries")).await;
        let ids: Vec<&str> = deliveries.as_array().unwrap().iter().map(|d| d["eventId"].as_str().unwrap()).collect();
        let mut expected: Vec<&str> = feed.iter().map(|e| e["id"].as_str().unwrap()).collect();
        expected.reverse();
        assert_eq!(ids, expected);
        for delivery in deliveries.as_array().unwrap() {
            assert_eq!(delivery["state"], "delivered", "{delivery}");
            assert_eq!(delivery["attempts"], 1, "{delivery}");
            assert_eq!(delivery["lastStatus"], 200, "{delivery}");
        }
    }

    async fn types_choose_what_a_subscription_receives(server) {
        let receiver = Receiver::healthy().await;
        subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["order.delivered"]})).await;
        let animal = available(&server, "Typed").await;
        let order = server.place_order(&animal["id"]).await;
        server.patch_order(&order["id"], "delivered").send().await.unwrap();
        let got = delivered(&receiver, 1).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].json()["type"], "order.delivered");
        assert_eq!(got[0].json()["data"]["id"], order["id"]);
    }

    async fn failures_are_retried_with_the_same_id_no_sooner_than_retry_after(server) {
        // First 500, then 429 asking for 2 s, then a hang past the timeout, then 200.
        let receiver = Receiver::start(|_, before| match before {
            0 => Answer::Status(500),
            1 => Answer::RetryAfter(429, 2),
            2 => Answer::Hang(Duration::from_secs(5)),
            _ => Answer::Status(200),
        }).await;
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["pet.created"]})).await;
        available(&server, "Flaky").await;
        let got = delivered(&receiver, 1).await;
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got.iter().all(|r| r.id() == got[0].id()), "one webhook-id on every attempt");
        assert!(got.iter().all(|r| r.body == got[0].body), "the same body on every attempt");
        let secret = webhook["secret"].as_str().unwrap();
        assert!(got.iter().all(|r| verifies(r, secret)));
        let waited = got[2].at.duration_since(got[1].at).unwrap();
        assert!(waited >= Duration::from_secs(2), "Retry-After: 2 was honoured ({waited:?})");
        // The schedule's delay counts from the failure: after the timeout.
        let waited = got[3].at.duration_since(got[2].at).unwrap();
        let after_the_timeout = petstore_tests::WEBHOOK_TIMEOUT + petstore_tests::WEBHOOK_RETRY_DELAYS[2];
        assert!(waited + Duration::from_millis(20) >= after_the_timeout, "retried {waited:?} after the attempt that hung");
        let id = webhook["id"].as_i64().unwrap();
        eventually_some("the delivery delivered", DELIVERY, || async {
            let deliveries = get_json(&server, KEY, &format!("/{id}/deliveries")).await;
            let delivery = deliveries[0].clone();
            (delivery["state"] == "delivered").then_some(delivery)
        }).await;
        let deliveries = get_json(&server, KEY, &format!("/{id}/deliveries")).await;
        assert_eq!(deliveries[0]["attempts"], 4, "{deliveries}");
        // The last failure is dated when it failed: the hang's timeout.
        let read = get_json(&server, KEY, &format!("/{id}")).await;
        let failed: chrono::DateTime<chrono::Utc> = read["lastFailureAt"].as_str().unwrap().parse().unwrap();
        let hung = chrono::DateTime::<chrono::Utc>::from(got[2].at);
        assert!(failed >= hung + petstore_tests::WEBHOOK_TIMEOUT - Duration::from_millis(20), "{failed} {hung}");
    }

    async fn a_410_disables_the_subscription_and_a_replay_sends_again(server) {
        // The very first request is answered 410; every later one 200.
        let gone = std::sync::atomic::AtomicBool::new(true);
        let receiver = Receiver::start(move |_, _| {
            if gone.swap(false, std::sync::atomic::Ordering::SeqCst) { Answer::Status(410) } else { Answer::Status(200) }
        }).await;
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["pet.created"]})).await;
        let id = webhook["id"].as_i64().unwrap();
        let first = available(&server, "Gone").await;
        let read = eventually_some("the subscription disabled by the 410", DELIVERY, || async {
            let read = get_json(&server, KEY, &format!("/{id}")).await;
            (read["state"] == "disabled").then_some(read)
        }).await;
        assert_eq!(read["disabledReason"], "gone", "{read}");
        assert_eq!(server.metric("petstore_webhook_subscriptions{state=\"disabled\"}").await, 1.0);
        // Disabled: nothing more is sent, and what is committed meanwhile
        // is not a delivery yet (neither counted nor listed).
        let second = available(&server, "Waiting").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(receiver.received().len(), 1);
        assert_eq!(get_json(&server, KEY, &format!("/{id}")).await["pending"], 0);
        let deliveries = get_json(&server, KEY, &format!("/{id}/deliveries")).await;
        assert_eq!(deliveries.as_array().unwrap().len(), 1, "only the first event's: {deliveries}");
        assert_eq!(deliveries[0]["state"], "failed", "{deliveries}");
        // A replay of the first event re-enables it; both arrive.
        let feed = feed_after(&server, "0").await;
        let first_id = feed.iter().find(|e| e["data"]["id"] == first["id"]).unwrap()["id"].as_str().unwrap().to_owned();
        let response = webhooks_as(&server, KEY, Method::POST, &format!("/{id}/replay"), Some(json!({"from": first_id, "to": first_id}))).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let accepted: Value = response.json().await.unwrap();
        assert_eq!(accepted["deliveries"], 1, "{accepted}");
        let got = delivered(&receiver, 2).await;
        // Two animals: no order between them is promised.
        let mut names: Vec<String> = got.iter().filter(|r| r.answered == 200).map(|r| r.json()["data"]["name"].as_str().unwrap().to_owned()).collect();
        names.sort();
        assert_eq!(names, [first["name"].as_str().unwrap(), second["name"].as_str().unwrap()]);
        assert_eq!(get_json(&server, KEY, &format!("/{id}")).await["state"], "active");
        assert_eq!(server.metric("petstore_webhook_subscriptions{state=\"disabled\"}").await, 0.0);
    }

    async fn a_replay_delivers_events_committed_before_the_subscription_was_made(server) {
        let earlier = available(&server, "Before").await;
        let feed = feed_after(&server, "0").await;
        let event = feed.iter().find(|e| e["data"]["id"] == earlier["id"]).unwrap()["id"].as_str().unwrap().to_owned();
        let receiver = Receiver::healthy().await;
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["pet.created"]})).await;
        let id = webhook["id"].as_i64().unwrap();
        let response = webhooks_as(&server, KEY, Method::POST, &format!("/{id}/replay"), Some(json!({"from": event, "to": event}))).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let accepted: Value = response.json().await.unwrap();
        assert_eq!(accepted["deliveries"], 1, "{accepted}");
        let got = delivered(&receiver, 1).await;
        assert_eq!(got[0].json()["id"].as_str(), Some(event.as_str()));
        assert_eq!(got[0].json()["data"], earlier);
        assert!(verifies(&got[0], webhook["secret"].as_str().unwrap()));
    }

    async fn a_replay_examines_at_most_1000_events_a_call_and_ends_at_to(server) {
        let receiver = Receiver::healthy().await;
        // No event of this type is ever written here: every replay examines
        // and delivers nothing, whatever the range.
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["order.placed"]})).await;
        let id = webhook["id"].as_i64().unwrap();
        let start: i64 = feed_head(&server).await.parse().unwrap();
        futures::stream::iter(0..1050)
            .for_each_concurrent(16, |n| {
                let server = &server;
                async move { available(server, &format!("Replayed {n}")).await; }
            })
            .await;
        let head: i64 = feed_head(&server).await.parse().unwrap();
        assert!(head >= start + 1050, "{start} {head}");
        let replay = async |from: i64, to: i64| {
            let body = json!({"from": from.to_string(), "to": to.to_string()});
            let response = webhooks_as(&server, KEY, Method::POST, &format!("/{id}/replay"), Some(body)).await;
            assert_eq!(response.status(), StatusCode::ACCEPTED);
            let accepted: Value = response.json().await.unwrap();
            assert_eq!(accepted["deliveries"], 0, "{accepted}");
            accepted["through"].as_str().unwrap().parse::<i64>().unwrap()
        };
        // From the subscription's start to far past the newest event: calls
        // of at most 1,000 ids each, the last at `to`.
        let to = head + 5000;
        let (mut from, mut calls) = (start + 1, 0);
        loop {
            let through = replay(from, to).await;
            assert!(through >= from - 1 && through < from + 1000 || through == to, "{from} → {through}");
            calls += 1;
            if through == to {
                break;
            }
            from = through + 1;
            assert!(calls < 10, "the replay does not reach `to`");
        }
        assert_eq!(calls, 2, "1,050 events, then the head");
        // A range wholly past the newest event is examined at once.
        assert_eq!(replay(head + 10, head + 20).await, head + 20);
    }

    async fn a_delivery_failing_every_attempt_fails_and_disables_the_subscription(server) {
        let receiver = Receiver::start(|_, _| Answer::Status(503)).await;
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["pet.created"]})).await;
        let id = webhook["id"].as_i64().unwrap();
        available(&server, "Doomed").await;
        let read = eventually_some("the subscription disabled once its retries ran out", DELIVERY, || async {
            let read = get_json(&server, KEY, &format!("/{id}")).await;
            (read["state"] == "disabled").then_some(read)
        }).await;
        assert_eq!(read["disabledReason"], "retries_exhausted", "{read}");
        let attempts = petstore_tests::WEBHOOK_RETRY_DELAYS.len() + 1;
        assert_eq!(receiver.received().len(), attempts, "the first attempt and one per delay");
        let deliveries = get_json(&server, KEY, &format!("/{id}/deliveries")).await;
        assert_eq!(deliveries[0]["state"], "failed", "{deliveries}");
        assert_eq!(deliveries[0]["attempts"], attempts);
        assert_eq!(deliveries[0]["lastStatus"], 503);
    }

    // The delivery's URL is beside it: its lastError says only why.
    async fn an_unreachable_receiver_is_a_failure_that_says_why(server) {
        let delivery = failed_delivery(&server, "http://127.0.0.1:9/hook").await;
        let error = delivery["lastError"].as_str().unwrap();
        assert!(error.to_lowercase().contains("connect"), "{error}");
        assert!(!error.contains("127.0.0.1:9"), "{error}");
        assert!(delivery.get("lastStatus").is_none(), "{delivery}");
    }

    async fn a_receiver_that_does_not_answer_in_time_is_a_failure_that_says_so(server) {
        let receiver = Receiver::start(|_, _| Answer::Hang(WEBHOOK_TIMEOUT * 3)).await;
        let delivery = failed_delivery(&server, &receiver.url("/")).await;
        let said = format!("no answer within {}s (the delivery timeout)", WEBHOOK_TIMEOUT.as_secs());
        assert_eq!(delivery["lastError"], said.as_str(), "{delivery}");
        assert!(delivery.get("lastStatus").is_none(), "{delivery}");
    }

    async fn one_resources_events_arrive_in_order_through_failures(server) {
        // Every first attempt fails: each event is retried once, and a
        // resource's next event waits for it.
        let receiver = Receiver::start(|_, before| if before == 0 { Answer::Status(500) } else { Answer::Status(200) }).await;
        subscribe(&server, &receiver.url("/")).await;
        let mut expected = 0;
        for i in 0..4 {
            let animal = available(&server, &format!("Ordered {i}")).await;
            let order = server.place_order(&animal["id"]).await;
            let to = if i % 2 == 0 { "delivered" } else { "cancelled" };
            server.patch_order(&order["id"], to).send().await.unwrap();
            expected += 5;
        }
        let got = delivered(&receiver, expected).await;
        let mut last_by_subject = std::collections::HashMap::new();
        for received in got.iter().filter(|r| r.answered == 200) {
            let event = received.json();
            let id: i64 = event["id"].as_str().unwrap().parse().unwrap();
            let subject = event["subject"].as_str().unwrap().to_owned();
            if let Some(last) = last_by_subject.insert(subject.clone(), id) {
                assert!(last < id, "{subject}: event {id} arrived after {last}");
            }
        }
    }

    async fn a_delivery_held_behind_a_retry_is_due_no_sooner_than_the_retry(server) {
        // The animal's first delivery hangs past the timeout, then is told
        // to come back in an hour; its later events wait behind it, and
        // their `nextAttemptAt` says so, whether they were stored while it
        // was being sent or after it was put off.
        let receiver = Receiver::start(|_, before| match before {
            0 => Answer::Hang(Duration::from_secs(5)),
            _ => Answer::RetryAfter(429, 3600),
        }).await;
        let types = json!(["pet.created", "pet.status_changed"]);
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": types})).await;
        let id = webhook["id"].as_i64().unwrap();
        let deliveries = async |count: usize| {
            eventually_some(&format!("{count} deliveries stored"), DELIVERY, || async {
                let listed = get_json(&server, KEY, &format!("/{id}/deliveries")).await;
                (listed.as_array().unwrap().len() == count).then_some(listed)
            }).await
        };
        let animal = available(&server, "Put off").await;
        eventually_some("the first attempt under way", DELIVERY, || async {
            (!receiver.received().is_empty()).then_some(())
        }).await;
        let order = server.place_order(&animal["id"]).await;
        deliveries(2).await;
        eventually_some("the first delivery put off", DELIVERY, || async {
            let listed = get_json(&server, KEY, &format!("/{id}/deliveries")).await;
            (listed[1]["lastStatus"] == 429).then_some(())
        }).await;
        server.patch_order(&order["id"], "cancelled").send().await.unwrap();
        let listed = deliveries(3).await;
        // Newest first: the cancellation's, the order's, the creation's.
        let at = |i: usize| -> chrono::DateTime<chrono::Utc> {
            listed[i]["nextAttemptAt"].as_str().unwrap_or_else(|| panic!("{listed}")).parse().unwrap()
        };
        let retry = at(2);
        assert!(retry > chrono::Utc::now() + Duration::from_secs(3000), "{listed}");
        assert!(at(1) >= retry, "held while it was sent: {listed}");
        assert!(at(0) >= retry, "held after it was put off: {listed}");
        let asked = "the receiver answered 429 Too Many Requests with Retry-After: 3600 s";
        assert_eq!(listed[2]["lastError"], asked, "{listed}");
        assert_eq!(receiver.received().len(), 2, "nothing else was sent");
    }

    async fn a_rotation_signs_with_both_secrets_until_the_previous_one_expires(server) {
        let receiver = Receiver::healthy().await;
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["pet.created"]})).await;
        let id = webhook["id"].as_i64().unwrap();
        let old = webhook["secret"].as_str().unwrap().to_owned();
        let response = webhooks_as(&server, KEY, Method::POST, &format!("/{id}/rotate?previousValidFor=3600"), None).await;
        assert_eq!(response.status(), StatusCode::OK);
        let rotated: Value = response.json().await.unwrap();
        let new = rotated["secret"].as_str().unwrap().to_owned();
        assert!(new.starts_with("whsec_") && new != old);
        assert!(rotated["previousValidUntil"].is_string(), "{rotated}");
        available(&server, "Both").await;
        let got = delivered(&receiver, 1).await;
        assert_eq!(got[0].header("webhook-signature").split(' ').count(), 2, "two signatures during the rotation");
        assert!(verifies(&got[0], &new) && verifies(&got[0], &old));
        // Ending the previous secret at once: one signature, the new one.
        let response = webhooks_as(&server, KEY, Method::POST, &format!("/{id}/rotate?previousValidFor=0"), None).await;
        let newest = response.json::<Value>().await.unwrap()["secret"].as_str().unwrap().to_owned();
        available(&server, "One").await;
        let got = delivered(&receiver, 2).await;
        assert_eq!(got[1].header("webhook-signature").split(' ').count(), 1);
        assert!(verifies(&got[1], &newest));
        assert!(!verifies(&got[1], &new) && !verifies(&got[1], &old));
    }

    async fn a_customers_subscription_carries_only_its_own_orders(server) {
        let customer = server.stored_key("hooked-customer", "orders:place,webhooks:manage").await;
        let receiver = Receiver::healthy().await;
        let mine = subscribe_as(&server, &customer, json!({"url": receiver.url("/")})).await;
        assert_eq!(mine["types"], json!(["order.placed", "order.delivered", "order.cancelled"]), "no pet.* without pets:read");
        let other_animal = available(&server, "Someone else's").await;
        server.place_order(&other_animal["id"]).await;
        let animal = available(&server, "Mine").await;
        let response = server.anonymous(Method::POST, "/store/orders").bearer_auth(&customer).json(&json!({"petId": animal["id"]})).send().await.unwrap();
        let order: Value = response.json().await.unwrap();
        let got = delivered(&receiver, 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let got_now = receiver.received();
        assert_eq!(got_now.len(), got.len());
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].json()["data"]["id"], order["id"]);
        // Asking for what the key may not see is refused, naming the scope,
        // with the challenge of every 403.
        let response = webhooks_as(&server, &customer, Method::POST, "", Some(json!({"url": receiver.url("/"), "types": ["pet.created"]}))).await;
        let challenge = response.headers()["www-authenticate"].to_str().unwrap().to_owned();
        assert_eq!(challenge, r#"Bearer realm="petstore", error="insufficient_scope", scope="pets:read""#);
        let error = assert_error(response, StatusCode::FORBIDDEN, "insufficient_scope").await;
        assert!(error["message"].as_str().unwrap().contains("pets:read"), "{error}");
        // Subscriptions are their maker's: another customer sees none of them.
        let other = server.stored_key("other-customer", "orders:place,webhooks:manage").await;
        let id = mine["id"].as_i64().unwrap();
        assert_eq!(get_json(&server, &other, "").await, json!([]));
        for (method, path) in [(Method::GET, format!("/{id}")), (Method::DELETE, format!("/{id}")), (Method::GET, format!("/{id}/deliveries")), (Method::POST, format!("/{id}/rotate"))] {
            let response = webhooks_as(&server, &other, method.clone(), &path, None).await;
            assert_error(response, StatusCode::NOT_FOUND, "webhook_not_found").await;
        }
        // Even staff (orders:manage) see only the subscriptions they made.
        let staff = server.stored_key("hook-staff", "orders:manage,webhooks:manage").await;
        assert_eq!(get_json(&server, &staff, "").await, json!([]));
        // Without webhooks:manage, no webhook operation.
        let reader = server.stored_key("no-hooks", "pets:read,orders:manage,events:read").await;
        let response = webhooks_as(&server, &reader, Method::GET, "", None).await;
        let error = assert_error(response, StatusCode::FORBIDDEN, "insufficient_scope").await;
        assert!(error["message"].as_str().unwrap().contains("webhooks:manage"), "{error}");
    }

    async fn a_subscription_follows_its_makers_key_revoked_it_receives_nothing_more(server) {
        let staff = server.stored_key("hook-maker", "orders:manage,webhooks:manage").await;
        let receiver = Receiver::healthy().await;
        subscribe_as(&server, &staff, json!({"url": receiver.url("/"), "types": ["order.placed"]})).await;
        server.place_order(&available(&server, "Before").await["id"]).await;
        delivered(&receiver, 1).await;
        server.revoke_key("hook-maker").await;
        server.key_answers(&staff, "/webhooks", |status| status == 401).await;
        server.place_order(&available(&server, "After").await["id"]).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(receiver.received().len(), 1, "nothing for a revoked key");
    }

    async fn a_replay_sends_only_what_the_key_may_see_now(server) {
        // Staff subscribe to every order's placements, then become a
        // customer: a replay of the whole range re-sends their own orders
        // only, as the fan-out would.
        let staff = server.stored_key("replaying-staff", "orders:manage,orders:place,webhooks:manage").await;
        let receiver = Receiver::healthy().await;
        let webhook = subscribe_as(&server, &staff, json!({"url": receiver.url("/"), "types": ["order.placed"]})).await;
        let id = webhook["id"].as_i64().unwrap();
        let from = feed_head(&server).await.parse::<i64>().unwrap() + 1;
        let others = server.place_order(&available(&server, "Another's").await["id"]).await;
        let response = server.anonymous(Method::POST, "/store/orders").bearer_auth(&staff).json(&json!({"petId": available(&server, "Own").await["id"]})).send().await.unwrap();
        let own: Value = response.json().await.unwrap();
        let got = delivered(&receiver, 2).await;
        let mut ids: Vec<Value> = got.iter().map(|r| r.json()["data"]["id"].clone()).collect();
        ids.sort_by_key(|id| id.as_i64());
        assert_eq!(ids, [others["id"].clone(), own["id"].clone()], "staff receive every order's");
        server.set_key_scopes("replaying-staff", "orders:place,webhooks:manage").await;
        // Once the server has the new scopes, the key may no longer deliver.
        server.key_answers(&staff, "/store/orders?include=placedBy", |status| status == 403).await;
        let body = json!({"from": from.to_string(), "to": (from + 100).to_string()});
        let response = webhooks_as(&server, &staff, Method::POST, &format!("/{id}/replay"), Some(body)).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let accepted: Value = response.json().await.unwrap();
        assert_eq!(accepted["deliveries"], 1, "its own order only: {accepted}");
        let again = delivered(&receiver, 3).await;
        assert_eq!(again[2].json()["data"]["id"], own["id"], "the replay re-sent its own order");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(receiver.received().len(), 3, "and nothing else");
    }

    async fn operators_count_every_subscription_and_the_open_deliveries_in_metrics(server) {
        // The first attempt is told to come back in an hour: its delivery
        // stays open until the subscription goes.
        let receiver = Receiver::start(|_, before| match before {
            0 => Answer::RetryAfter(429, 3600),
            _ => Answer::Status(200),
        }).await;
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["pet.created"]})).await;
        // A subscription whose key is revoked: no key can read it any more.
        let maker = server.stored_key("revoked-maker", "orders:manage,webhooks:manage").await;
        subscribe_as(&server, &maker, json!({"url": receiver.url("/orders"), "types": ["order.placed"]})).await;
        server.revoke_key("revoked-maker").await;
        server.key_answers(&maker, "/webhooks", |status| status == 401).await;
        available(&server, "Later").await;
        eventually_some("the first attempt", DELIVERY, || async {
            (!receiver.received().is_empty()).then_some(())
        }).await;
        let active = "petstore_webhook_subscriptions{state=\"active\"}";
        let disabled = "petstore_webhook_subscriptions{state=\"disabled\"}";
        let open = "petstore_webhook_open_deliveries ";
        assert_eq!(server.metric(active).await, 2.0, "the revoked key's is counted too");
        assert_eq!(server.metric(disabled).await, 0.0);
        assert_eq!(server.metric(open).await, 1.0, "the delivery waiting for its Retry-After");
        let id = webhook["id"].as_i64().unwrap();
        let response = webhooks_as(&server, KEY, Method::DELETE, &format!("/{id}"), None).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert_eq!(server.metric(active).await, 1.0);
        assert_eq!(server.metric(open).await, 0.0, "a subscription's deliveries go with it");
    }

    async fn subscriptions_are_listed_read_and_deleted(server) {
        let receiver = Receiver::healthy().await;
        let mut made = Vec::new();
        for i in 0..3 {
            made.push(subscribe(&server, &receiver.url(&format!("/{i}"))).await["id"].clone());
        }
        let response = webhooks_as(&server, KEY, Method::GET, "?limit=2", None).await;
        let next = next_link(&response).expect("a full page links to the next");
        let first: Vec<Value> = response.json::<Vec<Value>>().await.unwrap().iter().map(|w| w["id"].clone()).collect();
        assert_eq!(first, made[..2]);
        assert!(next.contains("after="), "{next}");
        let id = made[1].as_i64().unwrap();
        let response = webhooks_as(&server, KEY, Method::DELETE, &format!("/{id}"), None).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        let response = webhooks_as(&server, KEY, Method::GET, &format!("/{id}"), None).await;
        assert_error(response, StatusCode::NOT_FOUND, "webhook_not_found").await;
        let listed: Vec<Value> = get_json(&server, KEY, "").await.as_array().unwrap().iter().map(|w| w["id"].clone()).collect();
        assert_eq!(listed, [made[0].clone(), made[2].clone()]);
        // A deleted subscription receives nothing more.
        available(&server, "After the delete").await;
        delivered(&receiver, 2).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let paths: Vec<String> = receiver.received().iter().map(|r| r.json()["type"].to_string()).collect();
        assert_eq!(paths.len(), 2, "{paths:?}");
    }

    async fn bad_subscriptions_are_refused_with_the_contracts_errors(server) {
        for (body, status, code) in [
            (json!({}), StatusCode::BAD_REQUEST, "bad_request"),
            (json!({"url": "http://127.0.0.1:1/", "types": []}), StatusCode::BAD_REQUEST, "bad_request"),
            (json!({"url": "http://127.0.0.1:1/", "types": ["pet.adopted"]}), StatusCode::BAD_REQUEST, "bad_request"),
            (json!({"url": "not a url"}), StatusCode::BAD_REQUEST, "bad_request"),
            (json!({"url": "https://hooks.example.com/caf\u{e9}"}), StatusCode::BAD_REQUEST, "bad_request"),
            (json!({"url": "not-a-url"}), StatusCode::UNPROCESSABLE_ENTITY, "webhook_target_refused"),
            (json!({"url": "ftp://127.0.0.1/"}), StatusCode::UNPROCESSABLE_ENTITY, "webhook_target_refused"),
            (json!({"url": "http://user:pass@127.0.0.1/"}), StatusCode::UNPROCESSABLE_ENTITY, "webhook_target_refused"),
            (json!({"url": "http://127.0.0.1:0/"}), StatusCode::UNPROCESSABLE_ENTITY, "webhook_target_refused"),
            // The body is an object: an array's elements are not taken as
            // the fields in order.
            (json!(["http://127.0.0.1:1/", ["pet.created"]]), StatusCode::BAD_REQUEST, "bad_request"),
            (json!(["http://127.0.0.1:1/"]), StatusCode::BAD_REQUEST, "bad_request"),
        ] {
            let response = webhooks_as(&server, KEY, Method::POST, "", Some(body.clone())).await;
            let error = assert_error(response, status, code).await;
            assert!(!error["message"].as_str().unwrap().is_empty(), "{body}");
        }
        assert_eq!(get_json(&server, KEY, "").await, json!([]), "nothing refused was made");
        let id = subscribe(&server, "http://127.0.0.1:1/").await["id"].clone();
        let replay = format!("/{id}/replay");
        let response = webhooks_as(&server, KEY, Method::POST, &replay, Some(json!({"from": "9", "to": "3"}))).await;
        assert_error(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_replay_range").await;
        let response = webhooks_as(&server, KEY, Method::POST, &replay, Some(json!(["1", "2"]))).await;
        assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        let response = webhooks_as(&server, KEY, Method::GET, "/999999", None).await;
        assert_error(response, StatusCode::NOT_FOUND, "webhook_not_found").await;
        let response = webhooks_as(&server, KEY, Method::POST, "/999999/rotate?previousValidFor=604801", None).await;
        assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
    }
}

#[tokio::test]
async fn by_default_only_https_targets_at_public_addresses_are_accepted() {
    let database = fresh_database(Backend::Sqlite)
        .await
        .expect("SQLite is always there");
    let server = TestServer::start_with_public_webhooks_only(database).await;
    for url in [
        "http://example.com/hook",
        "https://127.0.0.1/hook",
        "https://localhost/hook",
        "https://10.1.2.3/hook",
        "https://192.168.1.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://[fc00::1]/hook",
    ] {
        let response =
            webhooks_as(&server, KEY, Method::POST, "", Some(json!({ "url": url }))).await;
        let error = assert_error(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "webhook_target_refused",
        )
        .await;
        assert!(
            !error["message"].as_str().unwrap().is_empty(),
            "{url}: {error}"
        );
    }
}

/// Two instances on one PostgreSQL database deliver each event once
/// between them: with a healthy receiver and no fault, every `webhook-id`
/// arrives exactly once, whichever instance sent it.
#[tokio::test]
async fn two_instances_deliver_each_event_once_between_them() {
    let Some(server) = TestServer::start_with(Backend::Postgres).await else {
        return;
    };
    let other = server.beside().await;
    let receiver = Receiver::healthy().await;
    subscribe_as(
        &server,
        KEY,
        json!({"url": receiver.url("/"), "types": ["pet.created"]}),
    )
    .await;
    let mut created = Vec::new();
    for i in 0..30 {
        let on = if i % 2 == 0 { &server } else { &other };
        created.push(available(on, &format!("Twice {i}")).await);
    }
    let got = delivered(&receiver, created.len()).await;
    // Anything sent twice would have arrived by the time a later event did;
    // a short wait more catches a straggler.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got_now = receiver.received();
    assert_eq!(got_now.len(), got.len());
    let mut ids: Vec<&str> = got.iter().map(Received::id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        created.len(),
        "each event once: {} requests",
        got.len()
    );
}

on_every_backend! {
    async fn many_subscriptions_never_hold_writes_up(server) {
        // Fifty subscriptions to a receiver that fails every delivery: the
        // deliverer's rounds, claims and retries run beside the writes.
        let receiver = Receiver::start(|_, _| Answer::Status(500)).await;
        for _ in 0..50 {
            subscribe(&server, &receiver.url("/")).await;
        }
        let writes = (0..40).map(|i| {
            let server = &server;
            async move {
                let animal = available(server, &format!("Busy {i}")).await;
                let response = server.post_order(&animal["id"]).send().await.unwrap();
                assert_eq!(response.status(), StatusCode::CREATED, "order {i}");
            }
        });
        futures::stream::iter(writes).buffer_unordered(8).collect::<Vec<()>>().await;
        // And the deliveries are tried all the same.
        eventually_some("deliveries tried", DELIVERY, || async { (!receiver.received().is_empty()).then_some(()) }).await;
    }
}

on_every_backend! {
    async fn deliveries_are_paged_from_the_newest_and_counted_in_the_metrics(server) {
        let receiver = Receiver::healthy().await;
        let webhook = subscribe_as(&server, KEY, json!({"url": receiver.url("/"), "types": ["pet.created"]})).await;
        let id = webhook["id"].as_i64().unwrap();
        for i in 0..5 {
            available(&server, &format!("Paged {i}")).await;
        }
        let got = delivered(&receiver, 5).await;
        let mut sent: Vec<i64> = got.iter().map(|r| r.id().parse().unwrap()).collect();
        sent.sort_unstable();
        sent.dedup();
        // Every delivery recorded as delivered before the pages are read.
        eventually_some("five deliveries recorded as delivered", DELIVERY, || async {
            let all = get_json(&server, KEY, &format!("/{id}/deliveries?limit=100")).await;
            let done = all.as_array().unwrap().iter().filter(|d| d["state"] == "delivered").count();
            (done == 5).then_some(())
        }).await;
        // Pages of two: 2, 2, then 1 without a link; each link goes back
        // from its page's last (oldest) event.
        let mut next = Some(format!("/v1/webhooks/{id}/deliveries?limit=2"));
        let mut pages = Vec::new();
        while let Some(target) = next {
            let path = target.strip_prefix("/v1/webhooks").expect("a link under /v1/webhooks");
            let response = webhooks_as(&server, KEY, Method::GET, path, None).await;
            assert_eq!(response.status(), StatusCode::OK, "{target}");
            next = next_link(&response);
            let page: Vec<Value> = response.json().await.unwrap();
            let ids: Vec<i64> = page.iter().map(|d| d["eventId"].as_str().unwrap().parse().unwrap()).collect();
            if let Some(link) = &next {
                assert_eq!(page.len(), 2, "a link only after a full page");
                assert!(link.ends_with(&format!("&before={}", ids[1])), "{link}");
            }
            pages.push(ids);
        }
        assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1], "{pages:?}");
        let listed: Vec<i64> = pages.concat();
        assert!(listed.is_sorted_by(|a, b| a > b), "newest first: {listed:?}");
        let mut oldest_first = listed.clone();
        oldest_first.reverse();
        assert_eq!(oldest_first, sent, "the pages list exactly what was delivered");
        // The metrics count the five attempts and time each delivery.
        assert_eq!(server.metric("petstore_webhook_attempts_total{outcome=\"delivered\"}").await, 5.0);
        assert_eq!(server.metric("petstore_webhook_delivery_seconds_count").await, 5.0);
    }
}

/// On PostgreSQL without `--webhook-key-file` there is no key to seal a
/// secret with: creating and rotating answer 503 and say what is missing;
/// the server's other operations are unaffected.
#[tokio::test]
async fn without_a_key_file_on_postgres_webhooks_that_need_a_secret_answer_503() {
    let Some(database) = fresh_database(Backend::Postgres).await else {
        return;
    };
    let server = TestServer::start_without_webhook_key_file(database).await;
    let body = json!({ "url": "http://127.0.0.1:9/hook" });
    let response = webhooks_as(&server, KEY, Method::POST, "", Some(body)).await;
    assert!(response.headers().contains_key("retry-after"));
    let error = assert_error(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
    )
    .await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("--webhook-key-file"),
        "{error}"
    );
    let response = webhooks_as(&server, KEY, Method::POST, "/1/rotate", None).await;
    assert_error(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
    )
    .await;
    assert_eq!(get_json(&server, KEY, "").await, json!([]));
    available(&server, "Unaffected").await;
    server.log_eventually_contains("webhooks are off").await;
}
