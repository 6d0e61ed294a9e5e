//! Contract 1.2.0: `POST /pets` with an `Idempotency-Key`. The first request
//! creates; a retry with the same key and body replays the first `201`
//! (same status, same body, same id, `Idempotent-Replayed: true`) and
//! creates nothing; the same key with another body is 422; keys are scoped
//! to the API key; only a 201 is remembered; records expire after the
//! retention and are purged. (409 and the faults: `petstore-server/tests/
//! idempotency.rs`, which can hold the database from another process.)

use std::time::Duration;

use petstore_support::eventually_async_within;
use petstore_tests::{
    Backend, KEY, OTHER_KEY, TestServer, assert_error, fresh_database, on_every_backend,
};
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};

/// How long the tests of expiry wait for a record kept 1 s to expire, and
/// for a purge (every second at that retention) to delete it: a wide margin.
const EXPIRY: std::time::Duration = std::time::Duration::from_secs(30);

/// `POST /pets` with `body` sent as it is and `Idempotency-Key: key`, with
/// the API key `api_key`.
async fn post_with(server: &TestServer, api_key: &str, key: &str, body: &str) -> Response {
    server
        .anonymous(Method::POST, "/pets")
        .bearer_auth(api_key)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("request sent")
}

async fn post(server: &TestServer, key: &str, body: &str) -> Response {
    post_with(server, KEY, key, body).await
}

fn replayed(response: &Response) -> Option<&str> {
    response
        .headers()
        .get("idempotent-replayed")
        .map(|value| value.to_str().unwrap())
}

/// The 201's marker and its body, as bytes.
async fn created(response: Response) -> (Option<String>, String) {
    assert_eq!(response.status(), StatusCode::CREATED);
    let marker = replayed(&response).map(str::to_owned);
    (marker, response.text().await.unwrap())
}

on_every_backend! {
    async fn a_retry_with_the_same_key_and_body_replays_the_first_201(server) {
        let body = r#"{"name": "Rex", "categoryId": 3, "status": "available"}"#;
        let (marker, first) = created(post(&server, "order-17", body).await).await;
        assert_eq!(marker, None, "the first 201 is no replay");
        let pet: Value = serde_json::from_str(&first).unwrap();

        let (marker, again) = created(post(&server, "order-17", body).await).await;
        assert_eq!(marker.as_deref(), Some("true"));
        assert_eq!(again, first, "the same body, byte for byte");

        // The same pet written otherwise is the same body.
        let reordered = r#"{ "status":"available","categoryId":3,
                              "name":"Rex" }"#;
        let (marker, again) = created(post(&server, "order-17", reordered).await).await;
        assert_eq!((marker.as_deref(), again), (Some("true"), first));

        assert_eq!(server.list("").await, vec![pet], "created once");
    }

    async fn the_same_key_with_another_body_is_422_and_creates_nothing(server) {
        let rex = r#"{"name": "Rex", "categoryId": 3}"#;
        let (_, first) = created(post(&server, "k-422", rex).await).await;
        for other in [
            r#"{"name": "Max", "categoryId": 3}"#,
            r#"{"name": "Rex", "categoryId": 4}"#,
            r#"{"name": "Rex", "categoryId": 3, "status": "sold"}"#,
        ] {
            let response = post(&server, "k-422", other).await;
            let error = assert_error(
                response,
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
            )
            .await;
            assert!(
                error["message"].as_str().unwrap().contains("different body"),
                "{error}"
            );
        }
        let pets = server.list("").await;
        assert_eq!(pets.len(), 1);
        assert_eq!(pets[0], serde_json::from_str::<Value>(&first).unwrap());
        // The first body still replays.
        let (marker, again) = created(post(&server, "k-422", rex).await).await;
        assert_eq!((marker.as_deref(), again), (Some("true"), first));
    }

    async fn keys_are_scoped_to_the_api_key(server) {
        let body = r#"{"name": "Twin", "categoryId": 1}"#;
        let (_, mine) = created(post_with(&server, KEY, "shared", body).await).await;
        let (marker, theirs) = created(post_with(&server, OTHER_KEY, "shared", body).await).await;
        assert_eq!(marker, None, "another client's key is not replayed");
        assert_ne!(mine, theirs, "two pets, two ids");
        // Another body under the other API key is no reuse of mine either.
        let other = r#"{"name": "Other", "categoryId": 2}"#;
        let response = post_with(&server, OTHER_KEY, "mine-only", other).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let response = post_with(&server, KEY, "mine-only", body).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(replayed(&response), None);
        // Each replays its own.
        let (_, again) = created(post_with(&server, KEY, "shared", body).await).await;
        assert_eq!(again, mine);
        let (_, again) = created(post_with(&server, OTHER_KEY, "shared", body).await).await;
        assert_eq!(again, theirs);
        assert_eq!(server.list("").await.len(), 4);
    }

    async fn malformed_keys_are_400_and_authentication_still_comes_first(server) {
        let body = r#"{"name": "Rex", "categoryId": 1}"#;
        let too_long = "k".repeat(256);
        for (key, why) in [
            ("", "an empty value"),
            (too_long.as_str(), "got 256 bytes"),
            ("two words", "0x20"),
        ] {
            let error = assert_error(
                post(&server, key, body).await,
                StatusCode::BAD_REQUEST,
                "bad_request",
            )
            .await;
            let message = error["message"].as_str().unwrap();
            assert!(message.contains("Idempotency-Key") && message.contains(why), "{message}");
        }
        // Bytes beyond ASCII, and the header twice.
        let non_ascii = server
            .request(Method::POST, "/pets")
            .header("idempotency-key", reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap())
            .json(&json!({"name": "Rex", "categoryId": 1}))
            .send()
            .await
            .unwrap();
        assert_error(non_ascii, StatusCode::BAD_REQUEST, "bad_request").await;
        let twice = server
            .request(Method::POST, "/pets")
            .header("idempotency-key", "a")
            .header("idempotency-key", "b")
            .json(&json!({"name": "Rex", "categoryId": 1}))
            .send()
            .await
            .unwrap();
        let error = assert_error(twice, StatusCode::BAD_REQUEST, "bad_request").await;
        assert!(error["message"].as_str().unwrap().contains("sent once"), "{error}");
        // A wrong API key is 401 even with a malformed Idempotency-Key.
        let response = post_with(&server, "not-a-key", "", body).await;
        assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
        assert!(server.list("").await.is_empty(), "nothing was created");

        // The longest key, and every visible ASCII character, are fine.
        let longest = "k".repeat(255);
        assert_eq!(post(&server, &longest, body).await.status(), StatusCode::CREATED);
        let visible: String = ('!'..='~').collect();
        assert_eq!(post(&server, &visible, body).await.status(), StatusCode::CREATED);
    }

    async fn only_a_201_is_remembered(server) {
        // A 400 and a 413 leave the key free: the corrected retry creates.
        let response = post(&server, "fix-me", r#"{"name": "", "categoryId": 1}"#).await;
        assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        let huge = format!(r#"{{"name": "{}", "categoryId": 1}}"#, "x".repeat(20_000));
        let response = post(&server, "fix-me", &huge).await;
        assert_error(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
        let (marker, _) = created(post(&server, "fix-me", r#"{"name": "Fixed", "categoryId": 1}"#).await).await;
        assert_eq!(marker, None);
        assert_eq!(server.list("").await.len(), 1);
    }

    async fn creates_without_a_key_are_never_deduplicated(server) {
        let body = json!({"name": "Same", "categoryId": 1});
        let first = server.create(body.clone()).await;
        let second = server.create(body).await;
        assert_ne!(first["id"], second["id"]);
    }
}

async fn an_expired_key_is_free_again_and_its_record_is_purged(backend: Backend) {
    let Some(database) = fresh_database(backend).await else {
        return;
    };
    let retention = Duration::from_secs(1);
    let server = TestServer::start_keeping_idempotency_keys(database, retention).await;
    let rex = r#"{"name": "Rex", "categoryId": 1}"#;
    let (_, first) = created(post(&server, "short-lived", rex).await).await;
    let (_, _) = created(post(&server, "left-alone", rex).await).await;

    // Until the record expires, another body is a reuse; then it creates.
    let max = r#"{"name": "Max", "categoryId": 1}"#;
    let second = std::cell::RefCell::new(None);
    eventually_async_within("the expired key is free", EXPIRY, || async {
        let response = post(&server, "short-lived", max).await;
        match response.status() {
            StatusCode::UNPROCESSABLE_ENTITY => false,
            StatusCode::CREATED => {
                let body = created(response).await;
                *second.borrow_mut() = Some(body);
                true
            }
            other => panic!("{other}: {}", response.text().await.unwrap()),
        }
    })
    .await;
    let (marker, second) = second.into_inner().unwrap();
    assert_eq!(marker, None, "a new create, no replay");
    assert_ne!(second, first);

    // The purge deletes the record nobody renewed.
    eventually_async_within("an expired record is purged", EXPIRY, || async {
        server
            .metric("petstore_idempotency_records_purged_total")
            .await
            >= 1.0
    })
    .await;
    assert_eq!(server.list("").await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_is_free_again_and_its_record_is_purged_on_sqlite() {
    an_expired_key_is_free_again_and_its_record_is_purged(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_is_free_again_and_its_record_is_purged_on_postgres() {
    an_expired_key_is_free_again_and_its_record_is_purged(Backend::Postgres).await;
}

#[tokio::test]
async fn outcomes_are_counted_in_the_metrics() {
    let server = TestServer::start().await;
    let body = r#"{"name": "Rex", "categoryId": 1}"#;
    created(post(&server, "m", body).await).await;
    created(post(&server, "m", body).await).await;
    let response = post(&server, "m", r#"{"name": "Max", "categoryId": 1}"#).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let metric =
        |outcome: &str| format!("petstore_idempotent_creates_total{{outcome=\"{outcome}\"}}");
    assert_eq!(server.metric(&metric("created")).await, 1.0);
    assert_eq!(server.metric(&metric("replayed")).await, 1.0);
    assert_eq!(server.metric(&metric("reused")).await, 1.0);
}
