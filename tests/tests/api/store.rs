//! Contract 1.3.0, the Store: `placeOrder` sells only an `available` animal
//! and makes it `pending` with the order; `updateOrder` delivers (the animal
//! is `sold`) or cancels (it is `available` again), a repeated request is
//! 200 and unchanged, any other change 409; `listOrders` pages as
//! `listPets` does, with `status` and `petId` filters; the inventory counts
//! the animals of each status exactly; `Idempotency-Key` on `placeOrder`
//! works as on `createPet`, apart from its keys.

use std::collections::BTreeMap;

use petstore_support::eventually_async_within;
use petstore_tests::{
    Backend, KEY, OTHER_KEY, TestServer, assert_error, fresh_database, on_every_backend,
};
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};

/// How long the tests of expiry wait for a record kept 1 s to expire, and
/// for a purge (every second at that retention) to delete it: a wide margin.
const EXPIRY: std::time::Duration = std::time::Duration::from_secs(30);

/// Creates an animal with `status` (none when `None`); returns its id.
async fn animal(server: &TestServer, status: Option<&str>) -> Value {
    let mut body = json!({"name": "Rex", "categoryId": 3});
    if let Some(status) = status {
        body["status"] = json!(status);
    }
    server.create(body).await["id"].clone()
}

async fn status_of(server: &TestServer, pet_id: &Value) -> Value {
    server.read(pet_id).await["status"].clone()
}

/// `GET /store/orders/{id}`.
async fn get_order(server: &TestServer, id: &Value) -> Response {
    server
        .get(&format!("/store/orders/{id}"))
        .send()
        .await
        .unwrap()
}

/// `POST /store/orders` with `body` sent as it is.
async fn post_order_raw(server: &TestServer, body: &str) -> Response {
    server
        .request(Method::POST, "/store/orders")
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// `POST /store/orders` for `pet_id` with `Idempotency-Key: key`, sent with
/// the API key `api_key`.
async fn post_order_once(
    server: &TestServer,
    api_key: &str,
    key: &str,
    pet_id: &Value,
) -> Response {
    server
        .anonymous(Method::POST, "/store/orders")
        .bearer_auth(api_key)
        .header("idempotency-key", key)
        .json(&json!({ "petId": pet_id }))
        .send()
        .await
        .unwrap()
}

/// Counts of the animals of each status, by walking `GET /pets?status=…`.
async fn counted_by_listing(server: &TestServer) -> Value {
    let mut counts = serde_json::Map::new();
    for status in ["available", "pending", "sold"] {
        let pets = server
            .walk(&format!("/pets?limit=100&status={status}"), 100)
            .await;
        counts.insert(status.into(), json!(pets.len()));
    }
    Value::Object(counts)
}

fn is_placed_at(text: &str) -> bool {
    // 2026-11-24T10:00:00.123456Z: UTC, six fractional digits.
    let bytes = text.as_bytes();
    bytes.len() == 27
        && text.ends_with('Z')
        && bytes[10] == b'T'
        && bytes[19] == b'.'
        && bytes[20..26].iter().all(u8::is_ascii_digit)
}

on_every_backend! {
    async fn an_order_sells_an_available_animal_and_makes_it_pending(server) {
        let pet_id = animal(&server, Some("available")).await;
        let response = server.post_order(&pet_id).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()["content-type"], "application/json");
        let order: Value = response.json().await.unwrap();
        let fields: Vec<&str> = order.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(fields.len(), 4, "{order}");
        assert!(order["id"].is_i64(), "{order}");
        assert_eq!(order["petId"], pet_id);
        assert_eq!(order["status"], "placed");
        assert!(is_placed_at(order["placedAt"].as_str().unwrap()), "{order}");

        assert_eq!(status_of(&server, &pet_id).await, "pending");
        let response = get_order(&server, &order["id"]).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.json::<Value>().await.unwrap(), order);
        let pending = server.list("?status=pending").await;
        assert!(pending.iter().any(|pet| pet["id"] == pet_id));
        assert_eq!(server.inventory().await, json!({"available": 0, "pending": 1, "sold": 0}));
    }

    async fn only_an_available_animal_can_be_ordered(server) {
        for status in [Some("pending"), Some("sold"), None] {
            let pet_id = animal(&server, status).await;
            let response = server.post_order(&pet_id).send().await.unwrap();
            let error = assert_error(response, StatusCode::CONFLICT, "pet_not_available").await;
            let message = error["message"].as_str().unwrap();
            assert!(message.contains(&pet_id.to_string()), "{message}");
            assert_eq!(status_of(&server, &pet_id).await, json!(status));
        }
        let sold_out = animal(&server, Some("available")).await;
        server.place_order(&sold_out).await;
        let again = server.post_order(&sold_out).send().await.unwrap();
        assert_error(again, StatusCode::CONFLICT, "pet_not_available").await;

        let unknown = json!(sold_out.as_i64().unwrap() + 1000);
        for pet_id in [unknown, json!(0), json!(-1), json!(i64::MAX)] {
            let response = server.post_order(&pet_id).send().await.unwrap();
            assert_error(response, StatusCode::UNPROCESSABLE_ENTITY, "pet_not_found").await;
        }
        assert_eq!(server.walk("/store/orders?limit=100", 100).await.len(), 1);
    }

    async fn delivering_sells_the_animal_and_cancelling_frees_it(server) {
        let pet_id = animal(&server, Some("available")).await;
        let order = server.place_order(&pet_id).await;
        let response = server.patch_order(&order["id"], "delivered").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let delivered: Value = response.json().await.unwrap();
        assert_eq!(delivered["status"], "delivered");
        assert_eq!(delivered["placedAt"], order["placedAt"]);
        assert_eq!(status_of(&server, &pet_id).await, "sold");

        // A retry is 200 and changes nothing; another change is 409.
        let retry = server.patch_order(&order["id"], "delivered").send().await.unwrap();
        assert_eq!(retry.status(), StatusCode::OK);
        assert_eq!(retry.json::<Value>().await.unwrap(), delivered);
        let cancel = server.patch_order(&order["id"], "cancelled").send().await.unwrap();
        let error = assert_error(cancel, StatusCode::CONFLICT, "invalid_transition").await;
        assert!(error["message"].as_str().unwrap().contains("delivered"), "{error}");
        assert_eq!(status_of(&server, &pet_id).await, "sold");

        let other = animal(&server, Some("available")).await;
        let first = server.place_order(&other).await;
        let response = server.patch_order(&first["id"], "cancelled").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.json::<Value>().await.unwrap()["status"], "cancelled");
        assert_eq!(status_of(&server, &other).await, "available");
        let deliver = server.patch_order(&first["id"], "delivered").send().await.unwrap();
        assert_error(deliver, StatusCode::CONFLICT, "invalid_transition").await;
        let retry = server.patch_order(&first["id"], "cancelled").send().await.unwrap();
        assert_eq!(retry.status(), StatusCode::OK);

        // Cancelled, the animal can be ordered anew.
        let second = server.place_order(&other).await;
        assert!(second["id"].as_i64() > first["id"].as_i64());
        assert_eq!(status_of(&server, &other).await, "pending");
        assert_eq!(server.inventory().await, json!({"available": 0, "pending": 1, "sold": 1}));
    }

    async fn unknown_orders_are_404_and_ids_that_are_not_int64_400(server) {
        let pet_id = animal(&server, Some("available")).await;
        let order = server.place_order(&pet_id).await;
        let unknown = json!(order["id"].as_i64().unwrap() + 1);
        for id in [unknown, json!(0), json!(-1), json!(i64::MAX)] {
            let error = assert_error(get_order(&server, &id).await, StatusCode::NOT_FOUND, "not_found").await;
            assert!(error["message"].as_str().unwrap().contains(&id.to_string()), "{error}");
            let patch = server.patch_order(&id, "delivered").send().await.unwrap();
            assert_error(patch, StatusCode::NOT_FOUND, "not_found").await;
        }
        for id in ["abc", "1.5", "9223372036854775808", "%20"] {
            let response = server.get(&format!("/store/orders/{id}")).send().await.unwrap();
            assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        }
    }

    async fn order_bodies_are_as_strict_as_new_pets(server) {
        let pet_id = animal(&server, Some("available")).await;
        for body in [
            "{}".to_owned(),
            format!(r#"{{"petId": {pet_id}, "quantity": 1}}"#),
            format!(r#"{{"petId": "{pet_id}"}}"#),
            r#"{"petId": 1.5}"#.to_owned(),
            r#"{"petId": null}"#.to_owned(),
            format!(r#"{{"petId": {pet_id}}} {{}}"#),
            "[]".to_owned(),
            format!("[{pet_id}]"),
            "not json".to_owned(),
        ] {
            let response = post_order_raw(&server, &body).await;
            assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        }
        let huge = format!(r#"{{"petId": {pet_id}, "x": "{}"}}"#, "a".repeat(70_000));
        let response = post_order_raw(&server, &huge).await;
        assert_error(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
        // Whitespace after the value is not trailing data.
        let response = post_order_raw(&server, &format!("{{\"petId\": {pet_id}}}\n ")).await;
        assert_eq!(response.status(), StatusCode::CREATED);

        let order = response.json::<Value>().await.unwrap();
        let path = format!("/store/orders/{}", order["id"]);
        for body in [
            json!({"status": "placed"}),
            json!({"status": "shipped"}),
            json!({}),
            json!({"status": "delivered", "note": "x"}),
            json!(["cancelled"]),
        ] {
            let response = server.request(Method::PATCH, &path).json(&body).send().await.unwrap();
            assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        }
        assert_eq!(status_of(&server, &pet_id).await, "pending");
    }

    async fn orders_page_in_id_order_by_status_and_animal(server) {
        let mut orders = Vec::new();
        for i in 0..9 {
            let pet_id = animal(&server, Some("available")).await;
            let order = server.place_order(&pet_id).await;
            let status = ["placed", "delivered", "cancelled"][i % 3];
            if status != "placed" {
                server.patch_order(&order["id"], status).send().await.unwrap();
            }
            orders.push(json!({"id": order["id"], "petId": pet_id, "status": status}));
        }
        // The cancelled animal's second order.
        let again = server.place_order(&orders[2]["petId"]).await;
        orders.push(json!({"id": again["id"], "petId": again["petId"], "status": "placed"}));

        let shape = |all: Vec<Value>| -> Vec<Value> {
            all.into_iter()
                .map(|o| json!({"id": o["id"], "petId": o["petId"], "status": o["status"]}))
                .collect()
        };
        assert_eq!(shape(server.walk("/store/orders?limit=2", 2).await), orders);
        assert_eq!(server.walk("/store/orders", 20).await.len(), orders.len());
        for status in ["placed", "delivered", "cancelled"] {
            let expected: Vec<Value> =
                orders.iter().filter(|o| o["status"] == status).cloned().collect();
            let walked = server.walk(&format!("/store/orders?limit=2&status={status}"), 2).await;
            assert_eq!(shape(walked), expected, "{status}");
        }
        let pet_id = &orders[2]["petId"];
        let of_pet = server.walk(&format!("/store/orders?limit=1&petId={pet_id}"), 1).await;
        assert_eq!(shape(of_pet), vec![orders[2].clone(), orders[9].clone()]);
        let placed = server
            .walk(&format!("/store/orders?limit=1&status=placed&petId={pet_id}"), 1)
            .await;
        assert_eq!(shape(placed), vec![orders[9].clone()]);

        let response = server.get("/store/orders?limit=2&status=placed").send().await.unwrap();
        let link = petstore_tests::next_link(&response).unwrap();
        assert!(link.starts_with("/v1/store/orders?limit=2&status=placed&after="), "{link}");
        let last = orders.last().unwrap()["id"].as_i64().unwrap();
        let past = server.get(&format!("/store/orders?after={last}")).send().await.unwrap();
        assert!(petstore_tests::next_link(&past).is_none());
        assert_eq!(past.json::<Value>().await.unwrap(), json!([]));
        for query in ["limit=0", "limit=101", "status=shipped", "petId=x", "after=1.5"] {
            let response = server.get(&format!("/store/orders?{query}")).send().await.unwrap();
            assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        }
    }

    async fn the_inventory_is_what_listing_by_status_counts(server) {
        assert_eq!(server.inventory().await, json!({"available": 0, "pending": 0, "sold": 0}));
        let pets = server.create_many(40).await;
        let available: Vec<&Value> = pets.iter().filter(|p| p["status"] == "available").collect();
        for (i, pet) in available.iter().enumerate() {
            let order = server.place_order(&pet["id"]).await;
            match i % 3 {
                0 => {}
                1 => { server.patch_order(&order["id"], "delivered").send().await.unwrap(); }
                _ => { server.patch_order(&order["id"], "cancelled").send().await.unwrap(); }
            }
        }
        let inventory = server.inventory().await;
        assert_eq!(inventory, counted_by_listing(&server).await);
        // Animals without a status are in no count.
        let total: i64 = ["available", "pending", "sold"]
            .iter()
            .map(|s| inventory[s].as_i64().unwrap())
            .sum();
        let without = pets.iter().filter(|p| p.get("status").is_none()).count();
        assert_eq!(total as usize + without, pets.len());
    }

    async fn concurrent_orders_for_one_animal_have_exactly_one_winner(server) {
        for _ in 0..3 {
            let pet_id = animal(&server, Some("available")).await;
            let answers = futures::future::join_all((0..24).map(|i| {
                let api_key = if i % 2 == 0 { KEY } else { OTHER_KEY };
                let request = server.anonymous(Method::POST, "/store/orders").bearer_auth(api_key);
                // Some with idempotency keys of their own, some without.
                let request = if i % 3 == 0 {
                    request.header("idempotency-key", format!("race-{pet_id}-{i}"))
                } else {
                    request
                };
                request.json(&json!({ "petId": pet_id })).send()
            }))
            .await;
            let mut statuses = BTreeMap::new();
            for answer in answers {
                *statuses.entry(answer.unwrap().status().as_u16()).or_insert(0) += 1;
            }
            assert_eq!(statuses, BTreeMap::from([(201, 1), (409, 23)]));
            let orders = server.walk(&format!("/store/orders?petId={pet_id}"), 20).await;
            assert_eq!(orders.len(), 1);
            assert_eq!(status_of(&server, &pet_id).await, "pending");
        }
    }

    // Many changes of one order at once, and retries of one already made:
    // each answered as if they came one after another (the first change
    // wins, a retry of the status it has is 200, anything else 409), never
    // a 5xx however many there are.
    async fn concurrent_changes_of_one_order_are_answered_as_if_in_turn(server) {
        for round in 0..3 {
            let pet_id = animal(&server, Some("available")).await;
            let order = server.place_order(&pet_id).await;
            let settle = |i: usize| {
                let to = if (i + round).is_multiple_of(3) { "cancelled" } else { "delivered" };
                server.patch_order(&order["id"], to).send()
            };
            let answers = futures::future::join_all((0..24).map(settle)).await;
            let mut settled_as = Vec::new();
            for answer in answers {
                let answer = answer.unwrap();
                match answer.status() {
                    StatusCode::OK => settled_as.push(answer.json::<Value>().await.unwrap()["status"].clone()),
                    _ => drop(assert_error(answer, StatusCode::CONFLICT, "invalid_transition").await),
                }
            }
            let status = settled_as.first().expect("one change wins").clone();
            assert!(settled_as.iter().all(|s| *s == status), "{settled_as:?}");
            let sold_or_not = if status == "delivered" { "sold" } else { "available" };
            assert_eq!(status_of(&server, &pet_id).await, sold_or_not);

            // Retries of the change made, all at once: each 200.
            let to = status.as_str().unwrap();
            let retries = (0..16).map(|_| server.patch_order(&order["id"], to).send());
            for answer in futures::future::join_all(retries).await {
                assert_eq!(answer.unwrap().status(), StatusCode::OK);
            }
        }
    }

    async fn an_idempotency_key_places_an_order_once(server) {
        let pet_id = animal(&server, Some("available")).await;
        let first = post_order_once(&server, KEY, "order-1", &pet_id).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        assert!(first.headers().get("idempotent-replayed").is_none());
        let first = first.text().await.unwrap();
        // The retry replays the 201, even after the order changed.
        let order: Value = serde_json::from_str(&first).unwrap();
        server.patch_order(&order["id"], "delivered").send().await.unwrap();
        let retry = post_order_once(&server, KEY, "order-1", &pet_id).await;
        assert_eq!(retry.status(), StatusCode::CREATED);
        assert_eq!(retry.headers()["idempotent-replayed"], "true");
        assert_eq!(retry.text().await.unwrap(), first);

        // The same key for another animal: 422, nothing ordered.
        let other = animal(&server, Some("available")).await;
        let reused = post_order_once(&server, KEY, "order-1", &other).await;
        assert_error(reused, StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused").await;
        assert_eq!(status_of(&server, &other).await, "available");
        // Another API key's "order-1" is its own.
        let theirs = post_order_once(&server, OTHER_KEY, "order-1", &other).await;
        assert_eq!(theirs.status(), StatusCode::CREATED);
        assert!(theirs.headers().get("idempotent-replayed").is_none());

        // createPet's keys are apart from placeOrder's.
        let created = server
            .request(Method::POST, "/pets")
            .header("idempotency-key", "order-1")
            .json(&json!({"name": "Tom", "categoryId": 1, "status": "available"}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
        assert!(created.headers().get("idempotent-replayed").is_none());

        // A refusal is not remembered: the key stays free.
        let taken = animal(&server, Some("sold")).await;
        let refused = post_order_once(&server, KEY, "order-2", &taken).await;
        assert_error(refused, StatusCode::CONFLICT, "pet_not_available").await;
        let fresh = animal(&server, Some("available")).await;
        let placed = post_order_once(&server, KEY, "order-2", &fresh).await;
        assert_eq!(placed.status(), StatusCode::CREATED);
        let orders = server.walk("/store/orders", 20).await;
        assert_eq!(orders.len(), 3);
    }
}

#[tokio::test]
async fn order_key_outcomes_are_counted_in_the_metrics() {
    let server = TestServer::start().await;
    let metric =
        |outcome: &str| format!("petstore_idempotent_orders_total{{outcome=\"{outcome}\"}}");
    let pet_id = animal(&server, Some("available")).await;
    for _ in 0..2 {
        let response = post_order_once(&server, KEY, "counted", &pet_id).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let other = animal(&server, Some("available")).await;
    let reused = post_order_once(&server, KEY, "counted", &other).await;
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // A refusal of the animal is the animal's, not the key's: not counted.
    let refused = post_order_once(&server, KEY, "refused", &pet_id).await;
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    // Nor is an order without a key.
    let plain = server
        .request(Method::POST, "/store/orders")
        .json(&json!({ "petId": other }))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), StatusCode::CREATED);
    assert_eq!(server.metric(&metric("placed")).await, 1.0);
    assert_eq!(server.metric(&metric("replayed")).await, 1.0);
    assert_eq!(server.metric(&metric("reused")).await, 1.0);
    assert_eq!(server.metric("petstore_idempotent_orders_total").await, 3.0);
    // Creates are counted apart.
    assert_eq!(
        server.metric("petstore_idempotent_creates_total").await,
        0.0
    );
}

/// An order's key holds for the retention, then is free again, and its
/// record is purged: as a create's (the server keeps keys for 1 s here).
async fn an_expired_order_key_is_free_again_and_its_record_is_purged(backend: Backend) {
    let Some(database) = fresh_database(backend).await else {
        return;
    };
    let retention = std::time::Duration::from_secs(1);
    let server = TestServer::start_keeping_idempotency_keys(database, retention).await;
    let first = animal(&server, Some("available")).await;
    let placed = post_order_once(&server, KEY, "short-lived", &first).await;
    assert_eq!(placed.status(), StatusCode::CREATED);

    // Until the record expires, another animal is a reuse; then it orders.
    let second = animal(&server, Some("available")).await;
    eventually_async_within("the expired order key is free", EXPIRY, || async {
        let response = post_order_once(&server, KEY, "short-lived", &second).await;
        match response.status() {
            StatusCode::UNPROCESSABLE_ENTITY => false,
            StatusCode::CREATED => {
                assert!(response.headers().get("idempotent-replayed").is_none());
                true
            }
            other => panic!("{other}: {}", response.text().await.unwrap()),
        }
    })
    .await;
    assert_eq!(status_of(&server, &second).await, "pending");

    // Only order keys were used: a purged record is one of theirs.
    eventually_async_within("an expired order record is purged", EXPIRY, || async {
        server
            .metric("petstore_idempotency_records_purged_total")
            .await
            >= 1.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_order_key_is_free_again_and_its_record_is_purged_on_sqlite() {
    an_expired_order_key_is_free_again_and_its_record_is_purged(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_order_key_is_free_again_and_its_record_is_purged_on_postgres() {
    an_expired_order_key_is_free_again_and_its_record_is_purged(Backend::Postgres).await;
}
