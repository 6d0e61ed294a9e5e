//! Keyset pagination of `GET /pets` (contract 1.1.0): `after` returns only
//! animals whose id is greater, in ascending id order, at most `limit`; a
//! `Link: <…>; rel="next"` header, keeping `limit` and `status`, while more
//! may follow and none on the last page; 400 for a cursor that is not an
//! int64, an empty array past the end.

use petstore_tests::{TestServer, assert_error, next_link, on_every_backend};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One page: its pets and its `next` link, if any.
async fn page(server: &TestServer, path_and_query: &str) -> (Vec<Value>, Option<String>) {
    let path = path_and_query.strip_prefix("/v1").unwrap_or(path_and_query);
    let response = server.get(path).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path_and_query}");
    let next = next_link(&response);
    (response.json().await.unwrap(), next)
}

/// Follows `next` links from `first` to the last page; every page holds at
/// most `limit` pets, every link keeps `limit` and `status`, and ids
/// ascend throughout (so that the walk moves on, and ends).
async fn follow(
    server: &TestServer,
    first: &str,
    limit: usize,
    status: Option<&str>,
) -> Vec<Value> {
    let mut seen = Vec::new();
    let mut next = Some(first.to_owned());
    while let Some(target) = next {
        let (pets, link) = page(server, &target).await;
        assert!(pets.len() <= limit, "{target}: {} pets", pets.len());
        if let Some(link) = &link {
            let last = pets.last().expect("a next link after an empty page")["id"].clone();
            let status = status.map_or(String::new(), |s| format!("&status={s}"));
            assert_eq!(
                link,
                &format!("/v1/pets?limit={limit}{status}&after={last}")
            );
        }
        let ids = seen
            .last()
            .into_iter()
            .chain(&pets)
            .map(|pet| pet["id"].as_i64());
        let ids: Vec<i64> = ids.map(Option::unwrap).collect();
        assert!(ids.is_sorted_by(|a, b| a < b), "{target}: ids {ids:?}");
        seen.extend(pets);
        next = link;
    }
    seen
}

fn of_status(pets: &[Value], status: &str) -> Vec<Value> {
    pets.iter()
        .filter(|p| p["status"] == status)
        .cloned()
        .collect()
}

on_every_backend! {
    async fn following_next_links_returns_every_animal_once_in_order(server) {
        let pets = server.create_many(230).await;
        for limit in [1, 7, 20, 100] {
            let seen = follow(&server, &format!("/pets?limit={limit}"), limit, None).await;
            assert_eq!(seen, pets, "limit {limit}");
        }
        // Without `limit`, pages are 20 and the links say so.
        let seen = follow(&server, "/pets", 20, None).await;
        assert_eq!(seen, pets);
        for status in ["available", "pending", "sold"] {
            for limit in [3, 100] {
                let first = format!("/pets?limit={limit}&status={status}");
                let seen = follow(&server, &first, limit, Some(status)).await;
                assert_eq!(seen, of_status(&pets, status), "{status}, limit {limit}");
            }
        }
    }

    async fn after_returns_only_greater_ids_and_the_last_page_has_no_next_link(server) {
        let pets = server.create_many(60).await;
        let id = |at: usize| pets[at]["id"].as_i64().unwrap();
        let (listed, next) = page(&server, &format!("/pets?limit=10&after={}", id(24))).await;
        assert_eq!(listed, pets[25..35].to_vec());
        assert_eq!(next, Some(format!("/v1/pets?limit=10&after={}", id(34))));
        // The last page: exactly the rest, and no link.
        let (listed, next) = page(&server, &format!("/pets?limit=10&after={}", id(49))).await;
        assert_eq!(listed, pets[50..].to_vec());
        assert_eq!(next, None);
        // A page that ends exactly at the last animal: no link either.
        let (listed, next) = page(&server, &format!("/pets?limit=100&after={}", id(0))).await;
        assert_eq!(listed, pets[1..].to_vec());
        assert_eq!(next, None);
        // A cursor between ids, before the first, and past the end.
        let (listed, _) = page(&server, "/pets?limit=1&after=-5").await;
        assert_eq!(listed, pets[..1].to_vec());
        let (listed, _) = page(&server, "/pets?limit=1&after=-9223372036854775808").await;
        assert_eq!(listed, pets[..1].to_vec());
        for past in [id(59).to_string(), i64::MAX.to_string()] {
            let (listed, next) = page(&server, &format!("/pets?after={past}")).await;
            assert_eq!((listed, next), (vec![], None), "after={past}");
        }
        let (listed, next) = page(&server, &format!("/pets?status=pending&after={}", id(59))).await;
        assert_eq!((listed, next), (vec![], None));
    }

    async fn a_cursor_that_is_not_an_int64_gets_400(server) {
        server.create(json!({"name": "Rex", "categoryId": 1})).await;
        for bad in ["abc", "1.5", "9223372036854775808", "-9223372036854775809", "", "0x10"] {
            let response = server.get(&format!("/pets?after={bad}")).send().await.unwrap();
            let body = assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
            assert!(body["message"].as_str().unwrap().contains("after"), "{bad}: {body}");
        }
    }
}
