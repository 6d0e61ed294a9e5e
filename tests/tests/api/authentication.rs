//! `security`: every operation requires `Authorization: Bearer <API_KEY>`; a missing
//! or invalid key gets 401 with the Error body — before anything else about
//! the request is looked at.

use petstore_tests::{KEY, OTHER_KEY, assert_error, on_every_backend};
use reqwest::{Method, StatusCode};
use serde_json::json;

/// Every operation of the contract, as (method, path) with a valid pet id
/// (used as an order id too: the key is refused before anything is read).
fn operations(pet_id: i64) -> Vec<(Method, String)> {
    vec![
        (Method::GET, "/pets".to_owned()),
        (Method::POST, "/pets".to_owned()),
        (Method::GET, format!("/pets/{pet_id}")),
        (Method::GET, "/store/orders".to_owned()),
        (Method::POST, "/store/orders".to_owned()),
        (Method::GET, format!("/store/orders/{pet_id}")),
        (Method::PATCH, format!("/store/orders/{pet_id}")),
        (Method::GET, "/store/inventory".to_owned()),
    ]
}

on_every_backend! {
    async fn every_operation_rejects_a_missing_key(server) {
        let pet = server.create(json!({"name": "Rex", "categoryId": 1})).await;
        for (method, path) in operations(pet["id"].as_i64().unwrap()) {
            let response = server
                .anonymous(method.clone(), &path)
                .json(&json!({"name": "Rex", "categoryId": 1}))
                .send()
                .await
                .unwrap();
            assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
        }
        assert_eq!(
            server.list("").await.len(),
            1,
            "the anonymous create stored nothing"
        );
    }

    async fn every_operation_rejects_a_wrong_or_malformed_credential(server) {
        let pet = server.create(json!({"name": "Rex", "categoryId": 1})).await;
        let bad_headers = [
            "Bearer wrong-key".to_owned(),
            format!("Basic {KEY}"),
            KEY.to_owned(),
            format!("Bearer {KEY}x"),
            format!("Bearer {}", &KEY[..KEY.len() - 1]),
            "Bearer".to_owned(),
            "Bearer ".to_owned(),
            format!("Bearer {KEY} {KEY}"),
        ];
        for (method, path) in operations(pet["id"].as_i64().unwrap()) {
            for header in &bad_headers {
                let response = server
                    .anonymous(method.clone(), &path)
                    .header("Authorization", header)
                    .json(&json!({"name": "Rex", "categoryId": 1}))
                    .send()
                    .await
                    .unwrap();
                assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
            }
        }
    }

    async fn two_authorization_headers_are_rejected_even_if_one_is_valid(server) {
        let response = server
            .anonymous(Method::GET, "/pets")
            .header("Authorization", format!("Bearer {KEY}"))
            .header("Authorization", "Bearer wrong")
            .send()
            .await
            .unwrap();
        assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }

    async fn the_scheme_word_is_case_insensitive_and_every_configured_key_works(server) {
        for header in [
            format!("Bearer {KEY}"),
            format!("bearer {KEY}"),
            format!("BEARER {KEY}"),
            format!("Bearer {OTHER_KEY}"),
        ] {
            let response = server
                .anonymous(Method::GET, "/pets")
                .header("Authorization", &header)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{header}");
        }
    }

    async fn authentication_is_checked_before_the_body_and_parameters(server) {
        let requests = [
            server
                .anonymous(Method::POST, "/pets")
                .header("content-type", "application/json")
                .body("{not json"),
            server
                .anonymous(Method::POST, "/pets")
                .json(&json!({"categoryId": "x"})),
            server
                .anonymous(Method::POST, "/pets")
                .json(&json!({"name": "a".repeat(20_000), "categoryId": 1})),
            server
                .anonymous(Method::POST, "/pets")
                .header("content-type", "text/plain")
                .body("hello"),
            server.anonymous(Method::GET, "/pets?limit=0"),
            server.anonymous(Method::GET, "/pets?limit=abc&status=extinct"),
            server.anonymous(Method::GET, "/pets/not-a-number"),
            server.anonymous(Method::GET, "/pets/99999999999999999999"),
            server
                .anonymous(Method::GET, "/pets/12345")
                .bearer_auth("wrong"),
        ];
        for request in requests {
            let response = request.send().await.unwrap();
            assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
        }
    }

    async fn keys_never_reach_the_logs(server) {
        server.create(json!({"name": "Rex", "categoryId": 1})).await;
        let wrong = "wrong-key-that-must-not-be-logged";
        let response = server
            .anonymous(Method::GET, "/pets")
            .bearer_auth(wrong)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let log = server
            .log_eventually_contains("\"response_code\":401")
            .await;
        assert!(
            log.contains("request completed"),
            "one record per request:\n{log}"
        );
        assert!(!log.contains(KEY), "the valid key was logged:\n{log}");
        assert!(
            !log.contains(OTHER_KEY),
            "a configured key was logged:\n{log}"
        );
        assert!(!log.contains(wrong), "a presented key was logged:\n{log}");
    }
}
