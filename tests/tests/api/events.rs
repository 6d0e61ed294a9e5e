//! Contract 1.6.0, the feed: every acknowledged change is an event, in the
//! order it was committed, read from a cursor (`after`) page by page with a
//! `next` link on every page; a refused change writes none; `types` filters;
//! who sees what follows the key's scopes and its own orders; a long poll
//! (`wait`) is answered as soon as an event is committed; a cursor older
//! than the retention is `410 cursor_expired`.

use std::time::Duration;

use petstore_support::eventually_async_within;
use petstore_tests::{
    Backend, KEY, TestServer, assert_error, fresh_database, next_link, on_every_backend,
};
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

/// How long a test waits for an event purged at a retention of 1 s: only a
/// hang guard (the purge runs every second at that retention).
const PURGE: Duration = Duration::from_secs(60);

/// `GET /events` + `query` with `key`.
async fn feed_as(server: &TestServer, key: &str, query: &str) -> Response {
    server
        .anonymous(reqwest::Method::GET, &format!("/events{query}"))
        .bearer_auth(key)
        .send()
        .await
        .expect("request sent")
}

/// A page of the feed (insisting on 200), and the `after` of its `next`
/// link, which every page has.
async fn page_as(server: &TestServer, key: &str, query: &str) -> (Vec<Value>, String) {
    let response = feed_as(server, key, query).await;
    assert_eq!(response.status(), StatusCode::OK, "GET /events{query}");
    let next = next_link(&response).expect("every page of the feed links to the next");
    let after = next
        .rsplit_once("after=")
        .map(|(_, after)| after.to_owned())
        .unwrap_or_else(|| panic!("a next link without after: {next}"));
    (response.json().await.expect("a JSON array"), after)
}

/// Every event `key` may see, from the oldest, following the links.
async fn whole_feed_as(server: &TestServer, key: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut query = "?limit=7".to_owned();
    loop {
        let (page, after) = page_as(server, key, &query).await;
        if page.is_empty() {
            return events;
        }
        events.extend(page);
        query = format!("?limit=7&after={after}");
    }
}

async fn whole_feed(server: &TestServer) -> Vec<Value> {
    whole_feed_as(server, KEY).await
}

/// The `after` of the feed's head: past every event committed so far.
async fn head(server: &TestServer) -> String {
    let (mut page, mut after) = page_as(server, KEY, "?limit=100").await;
    while !page.is_empty() {
        (page, after) = page_as(server, KEY, &format!("?limit=100&after={after}")).await;
    }
    after
}

/// A long poll with `key` from the feed's head, once it waits there.
async fn parked_poll(
    server: &TestServer,
    key: &str,
) -> tokio::task::JoinHandle<reqwest::Result<Response>> {
    let after = head(server).await;
    let request = server
        .anonymous(
            reqwest::Method::GET,
            &format!("/events?wait=30&after={after}"),
        )
        .bearer_auth(key)
        .send();
    let poll = tokio::spawn(request);
    eventually_async_within(
        "the long poll is parked",
        Duration::from_secs(30),
        || async { server.metric("petstore_events_waiters ").await >= 1.0 },
    )
    .await;
    poll
}

/// What identifies an event's change: its type, subject and status after.
fn change(event: &Value) -> (String, String, Value) {
    (
        event["type"].as_str().unwrap().to_owned(),
        event["subject"].as_str().unwrap().to_owned(),
        event["data"]["status"].clone(),
    )
}

fn expected(kind: &str, subject: String, status: Value) -> (String, String, Value) {
    (kind.to_owned(), subject, status)
}

fn id_of(event: &Value) -> i64 {
    event["id"]
        .as_str()
        .unwrap()
        .parse()
        .expect("decimal digits")
}

on_every_backend! {
    async fn every_acknowledged_change_is_one_event_in_commit_order_and_refusals_none(server) {
        let rex = server.create(json!({"name": "Rex", "categoryId": 3, "status": "available"})).await;
        let plain = server.create(json!({"name": "Plain", "categoryId": 4})).await;
        let keyed = server
            .post_pet(&json!({"name": "Once", "categoryId": 5, "status": "available"}))
            .header("idempotency-key", "once-1")
            .send()
            .await
            .unwrap();
        assert_eq!(keyed.status(), StatusCode::CREATED);
        let once: Value = keyed.json().await.unwrap();
        let order = server.place_order(&rex["id"]).await;
        // Refused: the animal is pending now, and one without a status.
        assert_eq!(server.post_order(&rex["id"]).send().await.unwrap().status(), StatusCode::CONFLICT);
        assert_eq!(server.post_order(&plain["id"]).send().await.unwrap().status(), StatusCode::CONFLICT);
        let delivered = server.patch_order(&order["id"], "delivered").send().await.unwrap();
        assert_eq!(delivered.status(), StatusCode::OK);
        // The same status again changes nothing; any other change is refused.
        assert_eq!(server.patch_order(&order["id"], "delivered").send().await.unwrap().status(), StatusCode::OK);
        assert_eq!(server.patch_order(&order["id"], "cancelled").send().await.unwrap().status(), StatusCode::CONFLICT);
        let keyed_order = server
            .post_order(&once["id"])
            .header("idempotency-key", "order-once-1")
            .send()
            .await
            .unwrap();
        assert_eq!(keyed_order.status(), StatusCode::CREATED);
        let second: Value = keyed_order.json().await.unwrap();
        assert_eq!(server.patch_order(&second["id"], "cancelled").send().await.unwrap().status(), StatusCode::OK);

        let events = whole_feed(&server).await;
        let pet = |pet: &Value| format!("pets/{}", pet["id"]);
        let order_subject = |order: &Value| format!("store/orders/{}", order["id"]);
        assert_eq!(
            events.iter().map(change).collect::<Vec<_>>(),
            vec![
                expected("pet.created", pet(&rex), json!("available")),
                expected("pet.created", pet(&plain), Value::Null),
                expected("pet.created", pet(&once), json!("available")),
                expected("order.placed", order_subject(&order), json!("placed")),
                expected("pet.status_changed", pet(&rex), json!("pending")),
                expected("order.delivered", order_subject(&order), json!("delivered")),
                expected("pet.status_changed", pet(&rex), json!("sold")),
                expected("order.placed", order_subject(&second), json!("placed")),
                expected("pet.status_changed", pet(&once), json!("pending")),
                expected("order.cancelled", order_subject(&second), json!("cancelled")),
                expected("pet.status_changed", pet(&once), json!("available")),
            ],
        );
        let ids: Vec<i64> = events.iter().map(id_of).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase: {ids:?}");
        let previous: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "pet.status_changed")
            .map(|e| &e["previousstatus"])
            .collect();
        assert_eq!(previous, [&json!("available"), &json!("pending"), &json!("available"), &json!("pending")]);
        assert!(events.iter().filter(|e| e["type"] != "pet.status_changed").all(|e| e.get("previousstatus").is_none()));
    }

    async fn events_are_cloudevents_carrying_the_resource_after_the_change(server) {
        let rex = server.create(json!({"name": "Rex", "categoryId": 3, "status": "available"})).await;
        let order = server.place_order(&rex["id"]).await;
        let events = whole_feed(&server).await;
        let [created, placed, pending] = &events[..] else { panic!("three events: {events:?}") };
        for event in &events {
            assert_eq!(event["specversion"], "1.0");
            assert_eq!(event["source"], "/v1");
            assert_eq!(event["datacontenttype"], "application/json");
            let time = event["time"].as_str().unwrap();
            assert!(time.ends_with('Z') && time.len() == "2026-11-24T09:30:00.123456Z".len(), "{time}");
            assert!(chrono::DateTime::parse_from_rfc3339(time).is_ok(), "{time}");
        }
        assert_eq!(created["data"], rex);
        assert_eq!(placed["data"], order, "the order as placed, without placedBy");
        assert_eq!(placed["time"], order["placedAt"]);
        assert_eq!(pending["data"], json!({"id": rex["id"], "name": "Rex", "categoryId": 3, "status": "pending"}));
        assert_eq!(pending["previousstatus"], "available");
    }

    async fn the_feed_pages_from_a_cursor_with_a_next_link_on_every_page(server) {
        server.create_many(25).await;
        let (first, after) = page_as(&server, KEY, "").await;
        assert_eq!(first.len(), 20, "20 events when limit is omitted");
        assert_eq!(after, first[19]["id"].as_str().unwrap());
        let (rest, end) = page_as(&server, KEY, &format!("?after={after}")).await;
        assert_eq!(rest.len(), 5);
        assert!(id_of(&rest[0]) > id_of(&first[19]));
        // Past the end: empty, and the link stays where the feed is.
        let (empty, still) = page_as(&server, KEY, &format!("?after={end}")).await;
        assert!(empty.is_empty());
        assert_eq!(still, end);
        let response = feed_as(&server, KEY, &format!("?limit=3&types=pet.created&wait=0&after={after}")).await;
        let link = next_link(&response).unwrap();
        assert!(link.starts_with("/v1/events?limit=3&types=pet.created&after="), "{link}");
        // A cursor beyond the feed is no error: nothing follows it yet.
        let (ahead, _) = page_as(&server, KEY, "?after=999999999999").await;
        assert!(ahead.is_empty());
    }

    async fn bad_parameters_are_400_naming_what_is_wrong(server) {
        for (query, named) in [
            ("?limit=0", "limit"),
            ("?limit=101", "limit"),
            ("?after=-1", "after"),
            ("?after=x", "after"),
            // The contract's ids have at most 18 digits.
            ("?after=1000000000000000000", "after"),
            ("?after=0000000000000000001", "after"),
            ("?types=order.shipped", "order.shipped"),
            ("?types=", "types"),
            ("?wait=31", "wait"),
            ("?wait=-1", "wait"),
        ] {
            let error = assert_error(feed_as(&server, KEY, query).await, StatusCode::BAD_REQUEST, "bad_request").await;
            assert!(error["message"].as_str().unwrap().contains(named), "{query}: {error}");
        }
        // A huge value is named, not sent back whole.
        let query = format!("?types={}", "x".repeat(60_000));
        let error = assert_error(feed_as(&server, KEY, &query).await, StatusCode::BAD_REQUEST, "bad_request").await;
        let message = error["message"].as_str().unwrap();
        assert!(message.starts_with("unable to parse query string: types must be"), "{message}");
        assert!(message.chars().count() < 1_100, "{} characters", message.len());
        assert!(message.contains("(cut: the message has"), "{message}");
    }

    async fn types_filter_and_the_cursor_moves_past_what_it_skips(server) {
        let animals = [
            server.create(json!({"name": "A", "categoryId": 1, "status": "available"})).await,
            server.create(json!({"name": "B", "categoryId": 1, "status": "available"})).await,
        ];
        let orders = [server.place_order(&animals[0]["id"]).await, server.place_order(&animals[1]["id"]).await];
        server.patch_order(&orders[0]["id"], "delivered").send().await.unwrap();
        let (placed, after) = page_as(&server, KEY, "?types=order.placed,order.delivered").await;
        let kinds: Vec<(&str, &Value)> = placed.iter().map(|e| (e["type"].as_str().unwrap(), &e["data"]["id"])).collect();
        assert_eq!(kinds, [("order.placed", &orders[0]["id"]), ("order.placed", &orders[1]["id"]), ("order.delivered", &orders[0]["id"])]);
        // Nothing more of those types: the cursor is where the feed is.
        let all = whole_feed(&server).await;
        assert_eq!(after, all.last().unwrap()["id"].as_str().unwrap());
        let (none, _) = page_as(&server, KEY, &format!("?types=order.cancelled&after={after}")).await;
        assert!(none.is_empty());
    }

    async fn who_sees_what_follows_the_scopes_and_a_customer_sees_only_its_own_orders(server) {
        let customer = server.stored_key("customer", "orders:place,events:read").await;
        let browsing = server.stored_key("browsing", "pets:read,orders:place,events:read").await;
        let staff = server.stored_key("staff", "orders:manage,events:read").await;
        let blind = server.stored_key("blind", "events:read").await;
        let no_feed = server.stored_key("no-feed", "pets:read,orders:manage").await;
        let mut own = Vec::new();
        for key in [&customer, &browsing] {
            let animal = server.create(json!({"name": "Own", "categoryId": 1, "status": "available"})).await;
            own.push(server.place_order_as(key, &animal["id"]).await);
        }
        let others = server.create(json!({"name": "Other", "categoryId": 1, "status": "available"})).await;
        let other = server.place_order(&others["id"]).await;
        let everything = whole_feed(&server).await;
        let order_events = |events: &[Value]| -> Vec<Value> {
            events.iter().filter(|e| e["type"].as_str().unwrap().starts_with("order.")).map(|e| e["data"]["id"].clone()).collect()
        };
        let pet_events = |events: &[Value]| events.iter().filter(|e| e["type"].as_str().unwrap().starts_with("pet.")).count();

        let seen = whole_feed_as(&server, &customer).await;
        assert_eq!(order_events(&seen), [own[0]["id"].clone()], "only its own order");
        assert_eq!(pet_events(&seen), 0, "no pet.* without pets:read");
        let seen = whole_feed_as(&server, &browsing).await;
        assert_eq!(order_events(&seen), [own[1]["id"].clone()]);
        assert_eq!(pet_events(&seen), pet_events(&everything));
        let seen = whole_feed_as(&server, &staff).await;
        assert_eq!(order_events(&seen), [own[0]["id"].clone(), own[1]["id"].clone(), other["id"].clone()]);
        assert_eq!(pet_events(&seen), 0);
        assert!(whole_feed_as(&server, &blind).await.is_empty());
        // A key made with every scope has the scopes added since, this one too.
        let all = server.stored_key("all", "all").await;
        assert_eq!(whole_feed_as(&server, &all).await, everything);
        // Asking for a type it may not see shows nothing, and no error.
        let (page, _) = page_as(&server, &customer, "?types=pet.created").await;
        assert!(page.is_empty());
        let error = assert_error(feed_as(&server, &no_feed, "").await, StatusCode::FORBIDDEN, "insufficient_scope").await;
        assert!(error["message"].as_str().unwrap().contains("events:read"), "{error}");
    }

    async fn a_long_poll_is_answered_by_the_next_commit(server) {
        server.create(json!({"name": "First", "categoryId": 1})).await;
        let (_, after) = page_as(&server, KEY, "").await;
        // Many followers wait at the head; one commit answers all of them.
        let followers: Vec<_> = (0..50)
            .map(|_| {
                let query = format!("?wait=30&after={after}");
                let server = &server;
                async move { page_as(server, KEY, &query).await }
            })
            .collect();
        let followers = futures::future::join_all(followers);
        let create = async {
            // Each follower's request is parked before the commit, or it
            // reads the event at once: both are answered with it.
            server.create(json!({"name": "Second", "categoryId": 2})).await
        };
        let (pages, second) = tokio::join!(followers, create);
        for (page, next) in pages {
            assert_eq!(page.len(), 1, "{page:?}");
            assert_eq!(page[0]["data"], second);
            assert_eq!(next, page[0]["id"].as_str().unwrap());
        }
        // With nothing committed, the wait ends with an empty page.
        let (page, next) = page_as(&server, KEY, &format!("?wait=1&after={after}&types=order.placed")).await;
        assert!(page.is_empty());
        assert!(next.parse::<i64>().unwrap() >= after.parse::<i64>().unwrap());
    }

    // Keys change on every instance within 2 s; a long poll that began
    // before a change answers as its key is when it answers, never with an
    // event the key may no longer see.
    async fn a_long_poll_answers_as_its_key_is_when_it_answers(server) {
        let answer = |poll: tokio::task::JoinHandle<reqwest::Result<Response>>| async move {
            poll.await.expect("the poll's task").expect("an answer")
        };
        let revoked = server.stored_key("revoked", "pets:read,events:read").await;
        let poll = parked_poll(&server, &revoked).await;
        server.revoke_key("revoked").await;
        server.key_answers(&revoked, "/events", |status| status == 401).await;
        let refused = r#"petstore_auth_rejected_total{reason="unknown"}"#;
        let refused_before = server.metric(refused).await;
        server.create(json!({"name": "Unseen", "categoryId": 1})).await;
        let response = answer(poll).await;
        assert_eq!(server.metric(refused).await, refused_before + 1.0, "counted as a 401");
        let challenge = response.headers()["www-authenticate"].to_str().unwrap().to_owned();
        assert!(challenge.contains("invalid_token"), "{challenge}");
        assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;

        let unfed = server.stored_key("unfed", "pets:read,events:read").await;
        let poll = parked_poll(&server, &unfed).await;
        server.set_key_scopes("unfed", "pets:read").await;
        server.key_answers(&unfed, "/events", |status| status == 403).await;
        server.create(json!({"name": "Unseen", "categoryId": 1})).await;
        let error = assert_error(answer(poll).await, StatusCode::FORBIDDEN, "insufficient_scope").await;
        assert!(error["message"].as_str().unwrap().contains("events:read"), "{error}");

        // Still allowed to follow, it sees what its scopes allow now.
        let narrowed = server.stored_key("narrowed", "pets:read,orders:manage,events:read").await;
        let poll = parked_poll(&server, &narrowed).await;
        server.set_key_scopes("narrowed", "orders:manage,events:read").await;
        server.key_answers(&narrowed, "/pets", |status| status == 403).await;
        let animal = server.create(json!({"name": "Unseen", "categoryId": 1, "status": "available"})).await;
        let order = server.place_order(&animal["id"]).await;
        let response = answer(poll).await;
        assert_eq!(response.status(), StatusCode::OK);
        let page: Vec<Value> = response.json().await.unwrap();
        let types: Vec<&str> = page.iter().map(|event| event["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["order.placed"], "{page:?}");
        assert_eq!(page[0]["data"], order);

        // Staff no longer, it sees its own orders only.
        let demoted = server.stored_key("demoted", "orders:manage,orders:place,events:read").await;
        let poll = parked_poll(&server, &demoted).await;
        server.set_key_scopes("demoted", "orders:place,events:read").await;
        server.key_answers(&demoted, "/store/orders?include=placedBy", |status| status == 403).await;
        let animal = server.create(json!({"name": "Theirs", "categoryId": 1, "status": "available"})).await;
        server.place_order(&animal["id"]).await;
        let animal = server.create(json!({"name": "Mine", "categoryId": 1, "status": "available"})).await;
        let own = server.place_order_as(&demoted, &animal["id"]).await;
        let page: Vec<Value> = answer(poll).await.json().await.unwrap();
        let seen: Vec<&Value> = page.iter().map(|event| &event["data"]).collect();
        assert_eq!(seen, [&own], "{page:?}");

        // Given pets:read while it waits for its orders, it reads the
        // animals' events committed meanwhile too, none skipped.
        let promoted = server.stored_key("promoted", "orders:place,events:read").await;
        let poll = parked_poll(&server, &promoted).await;
        server.set_key_scopes("promoted", "orders:place,pets:read,events:read").await;
        server.key_answers(&promoted, "/pets", |status| status == 200).await;
        let animal = server.create(json!({"name": "Seen", "categoryId": 1, "status": "available"})).await;
        server.place_order_as(&promoted, &animal["id"]).await;
        let page: Vec<Value> = answer(poll).await.json().await.unwrap();
        let types: Vec<&str> = page.iter().map(|event| event["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["pet.created", "order.placed", "pet.status_changed"], "{page:?}");
        assert_eq!(page[0]["data"]["id"], animal["id"]);
    }

    async fn a_shutdown_answers_long_polls_at_once(server) {
        let (_, after) = page_as(&server, KEY, "").await;
        // The request owns what it needs: the shutdown borrows the server.
        let request = server
            .anonymous(reqwest::Method::GET, &format!("/events?wait=30&after={after}"))
            .bearer_auth(KEY)
            .send();
        let stop = async {
            // Until the poll is parked, the shutdown has nothing to cut.
            eventually_async_within("the long poll is in flight", Duration::from_secs(30), || async {
                server.metric("petstore_events_waiters ").await >= 1.0
            })
            .await;
            server.stop_within(Duration::from_secs(10)).await
        };
        let (response, report) = tokio::join!(request, stop);
        assert_eq!(response.expect("an answer").status(), StatusCode::OK);
        assert!(!report.deadline_passed, "the long poll held the shutdown up: {report:?}");
    }

    // A follower that stops following hangs up on its parked poll: that is
    // the client's doing, so it is an access record at `info` (status 499
    // in the metrics), naming the operation and the key, not a warning.
    async fn a_follower_that_hangs_up_is_an_access_record_not_a_warning(server) {
        let (_, after) = page_as(&server, KEY, "").await;
        let query = format!("?wait=30&after={after}");
        let poll = feed_as(&server, KEY, &query);
        let parked = eventually_async_within("the long poll is parked", Duration::from_secs(30), || async {
            server.metric("petstore_events_waiters ").await >= 1.0
        });
        // Dropping the request closes its connection.
        tokio::select! {
            response = poll => panic!("answered with nothing committed: {response:?}"),
            () = parked => {}
        }
        let log = server.log_eventually_contains("request handling cancelled").await;
        let record: Value = log
            .lines()
            .find(|line| line.contains("request handling cancelled"))
            .and_then(|line| serde_json::from_str(line).ok())
            .expect("a JSON record");
        assert_eq!(record["level"], "INFO", "{record}");
        assert_eq!(record["operation_id"], "listEvents", "{record}");
        assert_eq!(record["key"], "PETSTORE_API_KEYS[1]", "{record}");
        let hung_up = r#"petstore_http_requests_total{operation="listEvents",status="499"}"#;
        assert_eq!(server.metric(hung_up).await, 1.0);
    }
}

/// Retention: once the oldest events are purged, a cursor before them is
/// `410 cursor_expired`; one at or after the floor reads on; without a
/// cursor the feed starts at the oldest event kept.
async fn a_cursor_older_than_the_retention_is_410(backend: Backend) {
    let Some(database) = fresh_database(backend).await else {
        return;
    };
    let server = TestServer::start_keeping_events(database, Duration::from_secs(1)).await;
    let first = server.create(json!({"name": "Old", "categoryId": 1})).await;
    // Purged, not merely not shown yet: a page may be read up to a head
    // that has not reached the event (on PostgreSQL, on a busy machine,
    // past `SETTLE_WAIT`), but only a purge moves the feed's start, which
    // an empty page's next link names.
    eventually_async_within("the first event is purged", PURGE, || async {
        let (page, start) = page_as(&server, KEY, "").await;
        page.iter().all(|event| event["data"]["id"] != first["id"]) && start != "0"
    })
    .await;
    let error = assert_error(
        feed_as(&server, KEY, "?after=0").await,
        StatusCode::GONE,
        "cursor_expired",
    )
    .await;
    assert!(
        error["message"].as_str().unwrap().contains("without after"),
        "{error}"
    );
    let (_, floor) = page_as(&server, KEY, "").await;
    let second = server.create(json!({"name": "New", "categoryId": 1})).await;
    let (page, _) = page_as(&server, KEY, &format!("?after={floor}")).await;
    assert!(page.iter().any(|event| event["data"] == second), "{page:?}");
    assert!(server.metric("petstore_events ").await >= 1.0);
    let age = server.metric("petstore_events_oldest_age_seconds").await;
    assert!((0.0..PURGE.as_secs_f64()).contains(&age), "{age}");
}

#[tokio::test]
async fn sqlite_a_cursor_older_than_the_retention_is_410() {
    a_cursor_older_than_the_retention_is_410(Backend::Sqlite).await;
}

#[tokio::test]
async fn postgres_a_cursor_older_than_the_retention_is_410() {
    a_cursor_older_than_the_retention_is_410(Backend::Postgres).await;
}

/// Two instances on one PostgreSQL database serve one feed: the same ids in
/// the same order, whichever instance wrote each event, and a long poll on
/// one is answered by a commit on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_instances_serve_one_feed() {
    let Some(one) = TestServer::start_with(Backend::Postgres).await else {
        return;
    };
    let two = one.beside().await;
    for i in 0..10 {
        let writer = if i % 2 == 0 { &one } else { &two };
        let animal = writer
            .create(json!({"name": format!("pet-{i}"), "categoryId": i, "status": "available"}))
            .await;
        writer.place_order(&animal["id"]).await;
    }
    // Long polls on one, from where it has read to, until the event the
    // other writes meanwhile arrives (other events of two's may come first:
    // one learns of them within its poll interval).
    let start = whole_feed(&one).await;
    let waiting = async {
        let mut after = start.last().unwrap()["id"].as_str().unwrap().to_owned();
        loop {
            let query = format!("?wait=30&after={after}&limit=100");
            let (page, next) = page_as(&one, KEY, &query).await;
            if let Some(late) = page.iter().find(|event| event["data"]["name"] == "late") {
                return late.clone();
            }
            after = next;
        }
    };
    let written = two.create(json!({"name": "late", "categoryId": 1}));
    let (received, late) = tokio::time::timeout(PURGE, async { tokio::join!(waiting, written) })
        .await
        .expect("the long poll on one gets the event written on two");
    assert_eq!(received["data"], late);
    eventually_async_within(
        "both instances show the same feed",
        Duration::from_secs(30),
        || async {
            let feed = whole_feed(&one).await;
            feed.len() == 31 && feed == whole_feed(&two).await
        },
    )
    .await;
}
