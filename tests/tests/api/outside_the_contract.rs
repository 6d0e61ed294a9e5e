//! §7 "all error responses carry `{code, message, status}`" holds for the
//! requests no operation takes too (the overview of 1.5.0): a path of no
//! operation is `404 not_found`, a method its path does not allow is
//! `405 method_not_allowed` with `Allow`, a path that cannot be decoded is
//! `400 bad_request`. And RFC 6750 §3: a `401` challenges with
//! `WWW-Authenticate: Bearer realm="petstore"` (plus
//! `error="invalid_token"` when a bearer credential was sent), a
//! `403 insufficient_scope` names the scopes that would admit the request.

use petstore_tests::{KEY, TestServer, assert_error};
use reqwest::header::{ALLOW, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode};

fn header(response: &Response, name: impl reqwest::header::AsHeaderName) -> Vec<String> {
    response
        .headers()
        .get_all(name)
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .collect()
}

/// A request to `path` (with the leading `/`, outside `/v1` too).
async fn send(server: &TestServer, method: Method, path: &str, key: Option<&str>) -> Response {
    let url = format!("http://{}{path}", server.addr());
    let mut request = reqwest::Client::new().request(method, url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.expect("an answer")
}

#[tokio::test]
async fn a_path_of_no_operation_is_404_not_found_in_the_error_body_with_or_without_a_key() {
    let server = TestServer::start().await;
    for path in [
        "/v1/nothing",
        "/v2/pets",
        "/",
        "/v1/pets/1/owner",
        "/v1/store",
    ] {
        for key in [None, Some(KEY)] {
            let response = send(&server, Method::GET, path, key).await;
            assert!(
                response.headers().contains_key("x-request-id"),
                "{path}: every answer names its request"
            );
            let body = assert_error(response, StatusCode::NOT_FOUND, "not_found").await;
            assert!(
                !body["message"].as_str().unwrap().contains("Not Found"),
                "{body}"
            );
        }
    }
}

/// Method names are case-sensitive (RFC 9110 §9.1): `post` is a method
/// of its own, which no path allows, not `POST`.
#[tokio::test]
async fn a_method_the_path_does_not_allow_is_405_method_not_allowed_with_allow() {
    let server = TestServer::start().await;
    let lower_case = |name: &str| Method::from_bytes(name.as_bytes()).unwrap();
    let cases = [
        (Method::DELETE, "/v1/pets", vec!["GET", "POST"]),
        (lower_case("post"), "/v1/pets", vec!["GET", "POST"]),
        (lower_case("get"), "/v1/pets/1", vec!["GET"]),
        (
            lower_case("Patch"),
            "/v1/store/orders/1",
            vec!["GET", "PATCH"],
        ),
        (Method::PUT, "/v1/pets/1", vec!["GET"]),
        (Method::DELETE, "/v1/store/orders/1", vec!["GET", "PATCH"]),
        (Method::POST, "/v1/store/inventory", vec!["GET"]),
    ];
    for (method, path, allowed) in cases {
        let response = send(&server, method.clone(), path, Some(KEY)).await;
        let mut allow: Vec<String> = header(&response, ALLOW)
            .iter()
            .flat_map(|value| value.split(',').map(|m| m.trim().to_owned()))
            .collect();
        allow.sort();
        assert_eq!(allow, allowed, "{method} {path}: Allow");
        let body = assert_error(
            response,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        )
        .await;
        for method in allowed {
            assert!(body["message"].as_str().unwrap().contains(method), "{body}");
        }
    }
}

/// The contract has no `HEAD` operation: `HEAD` is a `405` with `Allow`,
/// and, as every answer to `HEAD`, without content (RFC 9110 §9.3.2), over
/// HTTP/1.1 and HTTP/2 alike (where content would break the stream).
#[tokio::test]
async fn head_is_405_with_allow_and_no_content_over_http_1_and_2() {
    let server = TestServer::start().await;
    let response = send(&server, Method::HEAD, "/v1/pets", Some(KEY)).await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(header(&response, ALLOW), ["GET", "POST"]);
    assert!(response.bytes().await.unwrap().is_empty());

    let url = format!("http://{}/v1/pets", server.addr());
    let curl = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "--head",
            "--max-time",
            "30",
        ])
        .args(["-H", &format!("Authorization: Bearer {KEY}"), &url])
        .output()
        .await
        .expect("curl runs");
    let head = String::from_utf8_lossy(&curl.stdout);
    let stderr = String::from_utf8_lossy(&curl.stderr);
    assert!(curl.status.success(), "{stderr}");
    assert!(head.starts_with("HTTP/2 405"), "{head}");
    assert!(head.contains("allow: GET"), "{head}");
}

#[tokio::test]
async fn a_path_that_cannot_be_decoded_is_400_bad_request() {
    let server = TestServer::start().await;
    for path in ["/v1/pets/%ff", "/v1/store/orders/%c3%28"] {
        let response = send(&server, Method::GET, path, Some(KEY)).await;
        assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
    }
}

#[tokio::test]
async fn answers_outside_the_contract_are_logged_and_counted_like_any_other() {
    let server = TestServer::start().await;
    let before = server
        .metric(r#"petstore_http_requests_total{operation="none",status="405"}"#)
        .await;
    let response = send(&server, Method::DELETE, "/v1/pets", Some(KEY)).await;
    let request_id = header(&response, "x-request-id").remove(0);
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let counted = server
        .metric(r#"petstore_http_requests_total{operation="none",status="405"}"#)
        .await;
    assert_eq!(counted, before + 1.0);
    server.log_eventually_contains(&request_id).await;
}

#[tokio::test]
async fn a_401_without_a_credential_challenges_with_the_realm_alone() {
    let server = TestServer::start().await;
    let response = send(&server, Method::GET, "/v1/pets", None).await;
    assert_eq!(
        header(&response, WWW_AUTHENTICATE),
        [r#"Bearer realm="petstore""#]
    );
    assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    // Another scheme sends no bearer key either (RFC 6750 §3.1).
    let response = server
        .anonymous(Method::GET, "/pets")
        .header("Authorization", format!("Basic {KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(&response, WWW_AUTHENTICATE),
        [r#"Bearer realm="petstore""#]
    );
    let error = assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(error["message"], "the Authorization scheme must be Bearer");
}

#[tokio::test]
async fn a_401_for_a_wrong_or_revoked_credential_says_invalid_token() {
    let server = TestServer::start().await;
    let revoked = server.stored_key("soon-revoked", "pets:read").await;
    server.revoke_key("soon-revoked").await;
    server
        .key_answers(&revoked, "/pets", |status| status == 401)
        .await;
    for key in ["wrong-key", &format!("{KEY}x"), &revoked] {
        let response = send(&server, Method::GET, "/v1/pets", Some(key)).await;
        assert_eq!(
            header(&response, WWW_AUTHENTICATE),
            [r#"Bearer realm="petstore", error="invalid_token""#]
        );
        assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
}

#[tokio::test]
async fn a_403_names_the_scopes_that_would_admit_the_request() {
    let server = TestServer::start().await;
    let reader = server.stored_key("reader", "pets:read").await;
    let response = send(&server, Method::GET, "/v1/store/inventory", Some(&reader)).await;
    assert_eq!(
        header(&response, WWW_AUTHENTICATE),
        [r#"Bearer realm="petstore", error="insufficient_scope", scope="inventory:read""#]
    );
    assert_error(response, StatusCode::FORBIDDEN, "insufficient_scope").await;
}

#[tokio::test]
async fn a_compressed_body_is_refused_not_read_as_json() {
    let server = TestServer::start().await;
    let response = server
        .request(Method::POST, "/pets")
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(r#"{"name":"Rex","categoryId":1}"#)
        .send()
        .await
        .unwrap();
    let body = assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
    assert!(body["message"].as_str().unwrap().contains("gzip"), "{body}");
    assert!(server.list("").await.is_empty(), "nothing was created");
}
