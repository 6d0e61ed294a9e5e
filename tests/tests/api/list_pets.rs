//! `listPets` (`GET /pets`): a plain array of at most `limit` pets (default 20,
//! bounds 1..100), filtered by `status`, in ascending id order; 400 for an
//! invalid `limit` or `status`.

use petstore_tests::{TestServer, assert_error, on_every_backend};
use reqwest::StatusCode;
use serde_json::{Value, json};

const STATUSES: [&str; 3] = ["available", "pending", "sold"];

/// Creates `count` pets cycling through the statuses and "no status".
async fn seed(server: &TestServer, count: usize) -> Vec<Value> {
    let mut pets = Vec::new();
    for i in 0..count {
        let mut body = json!({"name": format!("pet-{i}"), "categoryId": i});
        if let Some(status) = STATUSES.get(i % 4) {
            body["status"] = json!(status);
        }
        pets.push(server.create(body).await);
    }
    pets
}

fn ids(pets: &[Value]) -> Vec<i64> {
    pets.iter().map(|pet| pet["id"].as_i64().unwrap()).collect()
}

on_every_backend! {
    async fn an_empty_catalogue_lists_as_an_empty_array(server) {
        let response = server.get("/pets").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/json");
        assert_eq!(response.json::<Value>().await.unwrap(), json!([]));
    }

    async fn without_limit_at_most_20_are_returned_in_ascending_id_order(server) {
        let pets = seed(&server, 25).await;
        let listed = server.list("").await;
        assert_eq!(listed, pets[..20].to_vec());
        let listed_ids = ids(&listed);
        assert!(
            listed_ids.windows(2).all(|pair| pair[0] < pair[1]),
            "{listed_ids:?}"
        );
    }

    async fn limit_bounds_are_inclusive(server) {
        let pets = seed(&server, 105).await;
        assert_eq!(server.list("?limit=1").await, pets[..1].to_vec());
        assert_eq!(server.list("?limit=7").await, pets[..7].to_vec());
        assert_eq!(server.list("?limit=100").await, pets[..100].to_vec());
    }

    async fn limit_larger_than_the_catalogue_returns_everything(server) {
        let pets = seed(&server, 3).await;
        assert_eq!(server.list("?limit=100").await, pets);
    }

    async fn invalid_limits_get_400(server) {
        seed(&server, 2).await;
        for query in [
            "limit=0",
            "limit=101",
            "limit=-1",
            "limit=1000000",
            "limit=9223372036854775808",
            "limit=abc",
            "limit=1.5",
            "limit=",
            "limit=1e2",
            "limit=10&limit=20",
        ] {
            let response = server.get(&format!("/pets?{query}")).send().await.unwrap();
            assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        }
    }

    async fn the_status_filter_returns_only_that_status_in_id_order(server) {
        let pets = seed(&server, 40).await;
        for status in STATUSES {
            let expected: Vec<Value> = pets
                .iter()
                .filter(|pet| pet["status"] == status)
                .cloned()
                .collect();
            assert_eq!(expected.len(), 10);
            assert_eq!(server.list(&format!("?status={status}")).await, expected);
            assert_eq!(
                server.list(&format!("?status={status}&limit=3")).await,
                expected[..3].to_vec()
            );
        }
    }

    async fn the_status_filter_applies_before_the_limit(server) {
        let mut sold = Vec::new();
        for i in 0..30 {
            server
                .create(json!({"name": format!("a{i}"), "categoryId": 1, "status": "available"}))
                .await;
        }
        for i in 0..3 {
            sold.push(
                server
                    .create(json!({"name": format!("s{i}"), "categoryId": 1, "status": "sold"}))
                    .await,
            );
        }
        assert_eq!(server.list("?status=sold").await, sold);
    }

    async fn invalid_statuses_get_400(server) {
        for query in [
            "status=reserved",
            "status=Available",
            "status=",
            "status=sold,pending",
        ] {
            let response = server.get(&format!("/pets?{query}")).send().await.unwrap();
            assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        }
    }

    async fn unknown_query_parameters_are_ignored(server) {
        let pets = seed(&server, 2).await;
        assert_eq!(server.list("?offset=1&page=2").await, pets);
    }
}
