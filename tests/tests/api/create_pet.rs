//! `createPet` (`POST /pets`): 201 with the stored pet and its assigned id; 400 for a
//! body that is missing fields or holds invalid values; 413 for a body over
//! 16384 bytes.

use std::collections::HashSet;

use petstore_tests::{KEY, assert_error, on_every_backend};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

on_every_backend! {
    async fn returns_201_with_the_stored_pet_and_a_new_id(server) {
        let body = json!({"name": "Rex", "categoryId": 3, "status": "available"});
        let response = server.post_pet(&body).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()["content-type"], "application/json");
        let pet: Value = response.json().await.unwrap();
        let id = pet["id"].as_i64().expect("an int64 id");
        assert_eq!(
            pet,
            json!({"id": id, "name": "Rex", "categoryId": 3, "status": "available"})
        );

        let second = server.create(body).await;
        assert_ne!(
            second["id"], pet["id"],
            "ids are unique even for identical pets"
        );
    }

    async fn an_omitted_status_stays_absent(server) {
        let pet = server
            .create(json!({"name": "Nameless", "categoryId": 1}))
            .await;
        assert_eq!(pet.as_object().unwrap().get("status"), None, "{pet}");
        let listed = server.list("").await;
        assert_eq!(listed, vec![pet.clone()]);
        let read = server.read(&pet["id"]).await;
        assert_eq!(read, pet);
    }

    async fn every_status_is_accepted(server) {
        for status in ["available", "pending", "sold"] {
            let pet = server
                .create(json!({"name": "Rex", "categoryId": 1, "status": status}))
                .await;
            assert_eq!(pet["status"], status);
        }
    }

    async fn odd_but_valid_values_round_trip_exactly(server) {
        let bodies = [
            json!({"name": "Ünïcødé 🐕‍🦺 犬", "categoryId": 1}),
            json!({"name": "😀".repeat(255), "categoryId": 1}),
            json!({"name": "x", "categoryId": i64::MAX}),
            json!({"name": "y", "categoryId": i64::MIN}),
            json!({"name": "z", "categoryId": 0}),
            json!({"name": " spaced  out ", "categoryId": -1}),
            json!({"name": "quote\" back\\slash </script>", "categoryId": 2}),
        ];
        for body in bodies {
            let pet = server.create(body.clone()).await;
            assert_eq!(pet["name"], body["name"]);
            assert_eq!(pet["categoryId"], body["categoryId"]);
            let read = server.read(&pet["id"]).await;
            assert_eq!(read, pet);
        }
    }

    async fn missing_or_invalid_fields_get_400(server) {
        let invalid = [
            json!({"categoryId": 1}),
            json!({"name": "Rex"}),
            json!({}),
            json!({"name": null, "categoryId": 1}),
            json!({"name": 5, "categoryId": 1}),
            json!({"name": "", "categoryId": 1}),
            json!({"name": "a".repeat(256), "categoryId": 1}),
            json!({"name": "tab\there", "categoryId": 1}),
            json!({"name": "nul\u{0}", "categoryId": 1}),
            json!({"name": "Rex", "categoryId": "1"}),
            json!({"name": "Rex", "categoryId": 1.5}),
            json!({"name": "Rex", "categoryId": null}),
            json!({"name": "Rex", "categoryId": 9_223_372_036_854_775_808u64}),
            json!({"name": "Rex", "categoryId": 1, "status": "reserved"}),
            json!({"name": "Rex", "categoryId": 1, "status": "Available"}),
            json!({"name": "Rex", "categoryId": 1, "status": null}),
            json!({"name": "Rex", "categoryId": 1, "status": 1}),
            json!({"name": "Rex", "categoryId": 1, "id": 7}),
            json!({"name": "Rex", "categoryId": 1, "colour": "brown"}),
            json!([{"name": "Rex", "categoryId": 1}]),
            json!(["Rex", 1]),
            json!(["Rex", 1, "available"]),
            json!("Rex"),
            json!(null),
        ];
        for body in invalid {
            let response = server.post_pet(&body).send().await.unwrap();
            let error = assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
            assert!(
                !error["message"].as_str().unwrap().is_empty(),
                "{body}: {error}"
            );
        }
        assert!(
            server.list("").await.is_empty(),
            "no invalid pet was stored"
        );
    }

    async fn malformed_json_and_wrong_content_types_get_400(server) {
        let raw = [
            ("application/json", "{\"name\": \"Rex\", \"categoryId\": 1"),
            ("application/json", "{\"name\": \"Rex\" \"categoryId\": 1}"),
            ("application/json", ""),
            ("application/json", "\u{feff}{}"),
            ("text/plain", "{\"name\": \"Rex\", \"categoryId\": 1}"),
            ("application/x-www-form-urlencoded", "name=Rex&categoryId=1"),
        ];
        for (content_type, body) in raw {
            let response = server
                .request(Method::POST, "/pets")
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .unwrap();
            assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        }
    }

    async fn a_duplicate_field_is_rejected(server) {
        let response = server.post_raw(r#"{"name": "Rex", "name": "Max", "categoryId": 1}"#).await;
        assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
    }

    async fn bodies_over_16_kib_get_413_and_16_kib_is_accepted_up_to_validation(server) {
        let oversized = json!({"name": "a".repeat(16 * 1024), "categoryId": 1});
        let response = server.post_pet(&oversized).send().await.unwrap();
        assert_error(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;

        // Exactly 16384 bytes is within the limit: the body is read and judged
        // on its content (here, a name that is too long).
        let padding = 16 * 1024 - json!({"name": "", "categoryId": 1}).to_string().len();
        let body = json!({"name": "a".repeat(padding), "categoryId": 1}).to_string();
        assert_eq!(body.len(), 16 * 1024);
        let response = server.post_raw(body).await;
        assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
    }

    async fn anything_after_the_json_body_is_rejected_and_nothing_is_stored(server) {
        for body in [
            r#"{"name":"a","categoryId":1}{"name":"b","categoryId":2}"#,
            r#"{"name":"a","categoryId":1} trailing"#,
            r#"{"name":"a","categoryId":1},"#,
        ] {
            let response = server.post_raw(body).await;
            let error = assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
            assert!(
                error["message"].as_str().unwrap().contains("trailing"),
                "{body}: {error}"
            );
        }
        let whitespace = server.post_raw("{\"name\":\"Rex\",\"categoryId\":1} \r\n").await;
        assert_eq!(whitespace.status(), StatusCode::CREATED);
        assert_eq!(server.list("").await.len(), 1, "only the valid body stored");
    }

    async fn a_declared_length_over_16_kib_gets_413_before_any_body_is_sent(server) {
        // The client sends the headers only and waits: the answer must come
        // without the body, and no `100 Continue` is promised for it.
        for expect in ["", "Expect: 100-continue\r\n"] {
            let head = format!(
                "POST /v1/pets HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {KEY}\r\n\
                 Content-Type: application/json\r\nContent-Length: 209715200\r\n{expect}\r\n"
            );
            let (status, body) = raw_exchange(server.addr(), head.as_bytes()).await;
            assert_eq!(status, 413, "{expect:?}: {body}");
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["code"], "payload_too_large");
        }
    }

    async fn fifty_concurrent_creates_get_fifty_distinct_ids(server) {
        let creates =
            (0..50).map(|i| server.create(json!({"name": format!("pet-{i}"), "categoryId": i})));
        let pets = futures::future::join_all(creates).await;
        let ids: HashSet<i64> = pets.iter().map(|pet| pet["id"].as_i64().unwrap()).collect();
        assert_eq!(ids.len(), 50);
        let listed = server.list("?limit=100").await;
        assert_eq!(listed.len(), 50);
        for pet in &pets {
            assert!(
                listed.contains(pet),
                "{pet} was acknowledged but is not listed"
            );
        }
    }
}

/// Sends `request` as raw bytes and returns the status of the first
/// response and its body (as long as its `Content-Length` says), without
/// waiting for the connection to close.
async fn raw_exchange(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    let exchange = raw_exchange_unbounded(addr, request);
    petstore_support::within("a raw exchange", petstore_tests::REQUEST_TIMEOUT, exchange).await
}

/// [`raw_exchange`], however long the server takes.
async fn raw_exchange_unbounded(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).await.unwrap();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {status_line:?}"));
    let mut length = 0;
    // To the blank line that ends the head, or the end of the stream (an
    // empty line too).
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.unwrap();
    (status, String::from_utf8(body).unwrap())
}
