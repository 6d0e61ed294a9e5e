//! Contract 1.4.0, scoped keys: every operation is admitted by the scopes
//! its `x-petstore-scopes` names; a key holding none of them gets `403
//! insufficient_scope`, naming what is missing, and changes nothing; `401`
//! still comes first and `403` before any body error; a change of a key's
//! scopes reaches the running server within seconds. Orders belong to the
//! key that placed them: a customer's key reaches only its own, by every
//! route (lists, pages, filters, reads, cancels, replays); staff see all,
//! and who placed each when they ask (`include=placedBy`).

use petstore_api::scopes::{Scope, Scopes, admitting};
use petstore_server::storage;
use petstore_tests::{TestServer, assert_error, on_every_backend};
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};

/// A request of one operation, and its answer when the key may send it.
struct Attempt {
    operation: &'static str,
    method: Method,
    path: String,
    body: Option<Value>,
    allowed: StatusCode,
}

/// One valid request of each operation; `own_order` is an order the key
/// may touch (placed by it, or by the administrator's key).
async fn attempts(server: &TestServer, own_order: &Value) -> Vec<Attempt> {
    let pet = server.create(json!({"name": "Rex", "categoryId": 1})).await;
    let for_sale = server
        .create(json!({"name": "Max", "categoryId": 1, "status": "available"}))
        .await;
    let attempt = |operation, method, path: String, body, allowed| Attempt {
        operation,
        method,
        path,
        body,
        allowed,
    };
    vec![
        attempt(
            "listPets",
            Method::GET,
            "/pets".into(),
            None,
            StatusCode::OK,
        ),
        attempt(
            "createPet",
            Method::POST,
            "/pets".into(),
            Some(json!({"name": "Tom", "categoryId": 2})),
            StatusCode::CREATED,
        ),
        attempt(
            "getPet",
            Method::GET,
            format!("/pets/{}", pet["id"]),
            None,
            StatusCode::OK,
        ),
        attempt(
            "listOrders",
            Method::GET,
            "/store/orders".into(),
            None,
            StatusCode::OK,
        ),
        attempt(
            "placeOrder",
            Method::POST,
            "/store/orders".into(),
            Some(json!({"petId": for_sale["id"]})),
            StatusCode::CREATED,
        ),
        attempt(
            "getOrder",
            Method::GET,
            format!("/store/orders/{}", own_order["id"]),
            None,
            StatusCode::OK,
        ),
        attempt(
            "updateOrder",
            Method::PATCH,
            format!("/store/orders/{}", own_order["id"]),
            Some(json!({"status": "cancelled"})),
            StatusCode::OK,
        ),
        attempt(
            "getInventory",
            Method::GET,
            "/store/inventory".into(),
            None,
            StatusCode::OK,
        ),
        attempt(
            "listEvents",
            Method::GET,
            "/events".into(),
            None,
            StatusCode::OK,
        ),
        // The webhook operations past the scope check, on a subscription
        // that is not the key's: 404 (createWebhook also needs a scope that
        // sees events: webhooks.rs).
        attempt(
            "listWebhooks",
            Method::GET,
            "/webhooks".into(),
            None,
            StatusCode::OK,
        ),
        attempt(
            "getWebhook",
            Method::GET,
            "/webhooks/999999".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        attempt(
            "listWebhookDeliveries",
            Method::GET,
            "/webhooks/999999/deliveries".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        attempt(
            "rotateWebhookSecret",
            Method::POST,
            "/webhooks/999999/rotate".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        attempt(
            "replayWebhook",
            Method::POST,
            "/webhooks/999999/replay".into(),
            Some(json!({"from": "1", "to": "2"})),
            StatusCode::NOT_FOUND,
        ),
        attempt(
            "deleteWebhook",
            Method::DELETE,
            "/webhooks/999999".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
    ]
}

/// What the administrator's key sees of everything a request could change.
async fn everything(server: &TestServer) -> Value {
    json!({
        "pets": server.walk("/pets?limit=100", 100).await,
        "orders": server.walk("/store/orders?limit=100", 100).await,
        "inventory": server.inventory().await,
    })
}

/// `method path` with `key` (and `body` as JSON, if any).
async fn send(
    server: &TestServer,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Response {
    let mut request = server.anonymous(method, path).bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

/// Orders an animal of its own with `key` (with `Idempotency-Key: once`,
/// if given); returns the order.
async fn order_as(server: &TestServer, key: &str, once: Option<&str>) -> Value {
    let animal = server
        .create(json!({"name": "Bun", "categoryId": 1, "status": "available"}))
        .await;
    let mut request = server
        .anonymous(Method::POST, "/store/orders")
        .bearer_auth(key)
        .json(&json!({"petId": animal["id"]}));
    if let Some(once) = once {
        request = request.header("idempotency-key", once);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.unwrap()
}

on_every_backend! {
    async fn each_operation_admits_exactly_the_keys_with_one_of_its_scopes(server) {
        for scope in Scope::ALL {
            let scopes = Scopes::NONE.with(scope);
            let key = server.stored_key(&format!("only-{}", scope.as_str().replace(':', "-")), scope.as_str()).await;
            // An order the key may touch: its own if it can place one.
            let animal = server
                .create(json!({"name": "Own", "categoryId": 1, "status": "available"}))
                .await;
            let own_order = if scopes.contains(Scope::OrdersPlace) {
                server.place_order_as(&key, &animal["id"]).await
            } else {
                server.place_order(&animal["id"]).await
            };
            for attempt in attempts(&server, &own_order).await {
                let needed = admitting(attempt.operation);
                let allowed = needed.iter().any(|s| scopes.contains(*s));
                let before = everything(&server).await;
                let mut request = server.anonymous(attempt.method.clone(), &attempt.path).bearer_auth(&key);
                if let Some(body) = &attempt.body {
                    request = request.json(body);
                }
                let response = request.send().await.unwrap();
                let what = format!("{} with {scope}", attempt.operation);
                if allowed {
                    assert_eq!(response.status(), attempt.allowed, "{what}");
                    continue;
                }
                let error = assert_error(response, StatusCode::FORBIDDEN, "insufficient_scope").await;
                let message = error["message"].as_str().unwrap();
                for scope in needed {
                    assert!(message.contains(scope.as_str()), "{what}: {message}");
                }
                assert!(!message.contains(&key), "{what}: the key is never echoed");
                assert_eq!(everything(&server).await, before, "{what}: nothing changed");
            }
        }
    }

    async fn a_key_without_orders_manage_may_cancel_but_never_deliver(server) {
        let customer = server.stored_key("customer", "pets:read,orders:place").await;
        for to in ["delivered", "cancelled"] {
            let order = order_as(&server, &customer, None).await;
            let path = format!("/store/orders/{}", order["id"]);
            let response = send(&server, &customer, Method::PATCH, &path, Some(json!({"status": to}))).await;
            let animal = server.read(&order["petId"]).await;
            if to == "cancelled" {
                assert_eq!(response.status(), StatusCode::OK);
                assert_eq!(animal["status"], "available");
            } else {
                let error = assert_error(response, StatusCode::FORBIDDEN, "insufficient_scope").await;
                assert!(error["message"].as_str().unwrap().contains("orders:manage"), "{error}");
                assert_eq!(animal["status"], "pending");
            }
        }
    }

    async fn a_missing_or_wrong_key_is_401_and_a_scope_403_comes_before_any_body_error(server) {
        let reader = server.stored_key("reader", "pets:read").await;
        let no_key = server.anonymous(Method::POST, "/pets").body("{not json").send().await.unwrap();
        assert_error(no_key, StatusCode::UNAUTHORIZED, "unauthorized").await;
        let wrong = server
            .anonymous(Method::POST, "/pets")
            .bearer_auth("wrong-key")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_error(wrong, StatusCode::UNAUTHORIZED, "unauthorized").await;
        let refused = server
            .anonymous(Method::POST, "/pets")
            .bearer_auth(&reader)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_error(refused, StatusCode::FORBIDDEN, "insufficient_scope").await;
        let refused = server
            .anonymous(Method::GET, "/store/orders?limit=0")
            .bearer_auth(&reader)
            .send()
            .await
            .unwrap();
        assert_error(refused, StatusCode::FORBIDDEN, "insufficient_scope").await;
    }

    async fn customers_reach_only_their_own_orders_by_every_route_and_staff_all(server) {
        let customer = "pets:read,orders:place";
        let alice = server.stored_key("alice", customer).await;
        let bob = server.stored_key("bob", customer).await;
        let staff = server.stored_key("staff", "orders:manage").await;
        let mut mine = Vec::new();
        let mut theirs = Vec::new();
        for i in 0..3 {
            // The same idempotency key for both: each key's own.
            let once = (i == 0).then_some("same-key");
            mine.push(order_as(&server, &alice, once).await);
            theirs.push(order_as(&server, &bob, once).await);
        }
        for order in mine.iter().chain(&theirs) {
            assert!(order.get("placedBy").is_none(), "a customer is not told: {order}");
        }
        // Lists, pages (one order a page, through Link), filters.
        assert_eq!(server.walk_as(&alice, "/store/orders?limit=1", 1).await, mine);
        assert_eq!(server.walk_as(&bob, "/store/orders?limit=1&status=placed", 1).await, theirs);
        let of_theirs = format!("/store/orders?petId={}", theirs[1]["petId"]);
        assert_eq!(server.walk_as(&alice, &of_theirs, 20).await, Vec::<Value>::new());
        let after = format!("/store/orders?after={}&limit=1", mine[0]["id"]);
        assert_eq!(server.walk_as(&alice, &after, 20).await, mine[1..].to_vec());
        // Reading or cancelling another's order: 404, as for no order.
        for order in &theirs {
            let path = format!("/store/orders/{}", order["id"]);
            let read = send(&server, &alice, Method::GET, &path, None).await;
            let body = assert_error(read, StatusCode::NOT_FOUND, "not_found").await;
            assert_eq!(body["message"], format!("no order has id {}", order["id"]));
            let cancel = send(&server, &alice, Method::PATCH, &path, Some(json!({"status": "cancelled"}))).await;
            assert_error(cancel, StatusCode::NOT_FOUND, "not_found").await;
            let own = send(&server, &bob, Method::GET, &path, None).await;
            assert_eq!(own.json::<Value>().await.unwrap(), *order, "unchanged");
        }
        // A replay of the shared idempotency key answers each its own.
        let again = server
            .anonymous(Method::POST, "/store/orders")
            .bearer_auth(&alice)
            .header("idempotency-key", "same-key")
            .json(&json!({"petId": mine[0]["petId"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.json::<Value>().await.unwrap(), mine[0]);
        // Owners are stored: a restarted server (which reloads what it
        // keeps in memory) tells the orders apart as before.
        server.restart().await;
        assert_eq!(server.walk_as(&bob, "/store/orders?limit=2", 2).await, theirs);
        // Staff see every order and who placed it, even once a key is revoked.
        let keys = storage::open_keys(&server.database().url).await.unwrap();
        keys.revoke_key("alice", petstore_server::keyring::unix_now()).await.unwrap();
        server.key_answers(&alice, "/pets?limit=1", |status| status == 401).await;
        let all = server.walk_as(&staff, "/store/orders?limit=2&include=placedBy", 2).await;
        let placed_by: Vec<&str> = all.iter().map(|o| o["placedBy"].as_str().unwrap()).collect();
        assert_eq!(placed_by, ["alice", "bob", "alice", "bob", "alice", "bob"]);
        let path = format!("/store/orders/{}", mine[2]["id"]);
        let one = send(&server, &staff, Method::GET, &format!("{path}?include=placedBy"), None).await;
        assert_eq!(one.json::<Value>().await.unwrap()["placedBy"], "alice");
        // Without asking, an order has exactly its 1.3.0 fields.
        let plain = send(&server, &staff, Method::GET, &path, None).await;
        assert_eq!(plain.json::<Value>().await.unwrap(), mine[2]);
        // Only staff may ask.
        let asked = send(&server, &bob, Method::GET, "/store/orders?include=placedBy", None).await;
        let error = assert_error(asked, StatusCode::FORBIDDEN, "insufficient_scope").await;
        assert!(error["message"].as_str().unwrap().contains("orders:manage"), "{error}");
        let own = format!("/store/orders/{}?include=placedBy", theirs[0]["id"]);
        let asked = send(&server, &bob, Method::GET, &own, None).await;
        assert_error(asked, StatusCode::FORBIDDEN, "insufficient_scope").await;
    }

    async fn a_change_of_scopes_reaches_the_running_server(server) {
        let key = server.stored_key("shop-front", "pets:read").await;
        let create = || {
            server
                .anonymous(Method::POST, "/pets")
                .bearer_auth(&key)
                .json(&json!({"name": "Rex", "categoryId": 1}))
                .send()
        };
        assert_eq!(create().await.unwrap().status(), StatusCode::FORBIDDEN);
        let keys = storage::open_keys(&server.database().url).await.unwrap();
        let before = keys
            .set_key_scopes("shop-front", "pets:read,pets:write".parse().unwrap())
            .await
            .unwrap();
        assert_eq!(before, "pets:read".parse().unwrap());
        server.key_answers(&key, "/store/inventory", |status| status == 403).await;
        let in_force = || async { create().await.unwrap().status() == StatusCode::CREATED };
        let what = "the new scope is in force";
        petstore_support::eventually_async_within(what, petstore_tests::KEY_CHANGE, in_force).await;
        // And taken away again.
        keys.set_key_scopes("shop-front", "inventory:read".parse().unwrap()).await.unwrap();
        server.key_answers(&key, "/store/inventory", |status| status == 200).await;
        assert_eq!(create().await.unwrap().status(), StatusCode::FORBIDDEN);
    }
}

#[tokio::test]
async fn refusals_are_counted_per_operation() {
    let server = TestServer::start().await;
    let reader = server.stored_key("reader", "pets:read").await;
    for _ in 0..2 {
        let response = server
            .anonymous(Method::GET, "/store/inventory")
            .bearer_auth(&reader)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
    }
    let metric = r#"petstore_http_requests_total{operation="getInventory",status="403"}"#;
    assert_eq!(server.metric(metric).await, 2.0);
    // The access log names the key, never shows it. (Its first line with
    // the key may be of the request that saw the key accepted.)
    let refusal = |line: &&str| line.contains(r#""key":"reader""#) && line.contains("getInventory");
    petstore_tests::eventually("the access log shows a refusal", || {
        server.log_text().lines().any(|line| refusal(&line))
    })
    .await;
    let log = server.log_text();
    let line = log
        .lines()
        .find(refusal)
        .expect("an access log line of the refusal");
    assert!(line.contains("403"), "{line}");
    assert!(!log.contains(&reader), "the key was logged");
    // The administrator's key, from PETSTORE_API_KEYS, has every scope.
    let response = server
        .request(Method::GET, "/store/inventory")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// A database from before 1.4.0: a stored key without scopes and an order
/// without an owner (written here as 1.3.0 wrote them). The key keeps every
/// scope; the order is staff's to see, and no customer's.
#[tokio::test]
async fn a_key_and_an_order_from_before_scopes_keep_what_they_had() {
    let mut server = TestServer::start().await;
    let customer = server.stored_key("customer", "orders:place").await;
    let animal = server
        .create(json!({"name": "Old", "categoryId": 1, "status": "available"}))
        .await;
    server.stop().await;
    let petstore_server::storage::DatabaseUrl::Sqlite(path) = &server.database().url else {
        unreachable!("a SQLite server");
    };
    let old_key = "pre-1-4-key";
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute(
        "INSERT INTO api_keys (name, digest, created_at) VALUES ('old', ?1, 0)",
        [&petstore_server::keys::KeyDigest::of(old_key).0[..]],
    )
    .unwrap();
    conn.execute(
        "UPDATE pets SET status = 'pending' WHERE id = ?1",
        [animal["id"].as_i64()],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO orders (pet_id, status, placed_at) VALUES (?1, 'placed', 0)",
        [animal["id"].as_i64()],
    )
    .unwrap();
    drop(conn);
    server.restart().await;
    server
        .key_answers(old_key, "/pets?limit=1", |status| status == 200)
        .await;

    let orders = send(&server, old_key, Method::GET, "/store/orders", None).await;
    let orders: Vec<Value> = orders.json().await.unwrap();
    assert_eq!(orders.len(), 1);
    assert!(orders[0].get("placedBy").is_none(), "{orders:?}");
    let path = format!("/store/orders/{}", orders[0]["id"]);
    let theirs = send(&server, &customer, Method::GET, &path, None).await;
    assert_error(theirs, StatusCode::NOT_FOUND, "not_found").await;
    // Every operation, as before.
    for attempt in attempts(&server, &orders[0]).await {
        let response = send(
            &server,
            old_key,
            attempt.method,
            &attempt.path,
            attempt.body,
        )
        .await;
        assert_eq!(response.status(), attempt.allowed, "{}", attempt.operation);
    }
}

/// The scopes the contract names for each operation (`x-petstore-scopes`)
/// are the ones the server checks, and every operation names some.
#[test]
fn the_contract_names_the_scopes_the_server_checks() {
    let contract: serde_norway::Value =
        serde_norway::from_str(include_str!("../../../openapi/petstore.yaml")).unwrap();
    let mut operations = 0;
    for (_, path) in contract["paths"].as_mapping().unwrap() {
        for (_, operation) in path.as_mapping().unwrap() {
            let id = operation["operationId"].as_str().unwrap();
            let named: Vec<&str> = operation["x-petstore-scopes"]
                .as_sequence()
                .unwrap_or_else(|| panic!("{id} names no scopes"))
                .iter()
                .map(|scope| scope.as_str().unwrap())
                .collect();
            let checked: Vec<&str> = admitting(id).iter().map(|s| s.as_str()).collect();
            assert_eq!(named, checked, "{id}");
            assert!(!checked.is_empty(), "{id}");
            let description = operation["description"].as_str().unwrap();
            for scope in checked {
                assert!(description.contains(&format!("`{scope}`")), "{id}: {scope}");
            }
            operations += 1;
        }
    }
    assert_eq!(operations, 16);
}
