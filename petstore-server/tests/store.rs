//! The Store's invariants with the built server: many clients racing to
//! order the same animals (one SQLite server; two PostgreSQL instances on
//! one database) — exactly one order wins each animal — and every instance
//! shows every acknowledged change at once: the animal's status, the
//! order, and the inventory. Then the same under faults: the server killed
//! with SIGKILL, and PostgreSQL restarted, under 16 clients that order,
//! deliver and cancel, retrying until answered; afterwards an invariant
//! checker compares the store with what every client was told, the feed
//! of events with the store, and what a flaky webhook receiver got with
//! the feed.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    Backend, Database, KEY, Served, THROUGH_A_RESTART, client, fresh_database, patient, post_keyed,
    restart_postgres_under, serve, stop,
};
use petstore_client::{Client, Error, types};
use petstore_server::webhooks::secrets::SealingKeys;
use petstore_support::receiver::{Answer, Receiver};
use petstore_support::{
    FaultProxy, blocking, eventually_async_within, eventually_some, eventually_within, within,
};
use serde_json::{Value, json};
use sha2::Digest;

/// Animals raced for, and clients racing for each.
const ANIMALS: usize = 12;
const RACERS: usize = 8;

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.bearer_auth(KEY).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn get(served: &Served, path: &str) -> Value {
    let (status, body) = send(client().get(format!("{}{path}", served.base_url()))).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Every racer orders every animal at once, through the instances in
/// turn; returns, per animal, the statuses answered and the winning order.
async fn race(instances: &[Served], animals: &[i64]) -> Vec<(BTreeMap<u16, usize>, Value)> {
    let mut results = Vec::new();
    for &pet_id in animals {
        let orders = (0..RACERS).map(|racer| {
            let served = &instances[racer % instances.len()];
            let request = client()
                .post(format!("{}/store/orders", served.base_url()))
                .json(&json!({ "petId": pet_id }));
            // Half with idempotency keys of their own, which take the
            // transaction path on PostgreSQL.
            let request = match racer % 2 {
                0 => request.header("idempotency-key", format!("race-{pet_id}-{racer}")),
                _ => request,
            };
            send(request)
        });
        let answers = futures::future::join_all(orders).await;
        let mut statuses = BTreeMap::new();
        let mut winner = Value::Null;
        for (status, body) in answers {
            *statuses.entry(status).or_insert(0) += 1;
            match status {
                201 => winner = body,
                409 => assert_eq!(body["code"], "pet_not_available", "{body}"),
                _ => panic!("{status}: {body}"),
            }
        }
        results.push((statuses, winner));
    }
    results
}

async fn exactly_one_order_wins_each_animal(instances: &[Served]) {
    let mut animals = Vec::new();
    for i in 0..ANIMALS {
        let (status, pet) = send(
            client()
                .post(format!(
                    "{}/pets",
                    instances[i % instances.len()].base_url()
                ))
                .json(
                    &json!({"name": format!("raced-{i}"), "categoryId": 1, "status": "available"}),
                ),
        )
        .await;
        assert_eq!(status, 201, "{pet}");
        animals.push(pet["id"].as_i64().unwrap());
    }
    let results = race(instances, &animals).await;
    for (&pet_id, (statuses, winner)) in animals.iter().zip(&results) {
        assert_eq!(
            statuses,
            &BTreeMap::from([(201, 1), (409, RACERS - 1)]),
            "pet {pet_id}"
        );
        assert_eq!(winner["petId"], pet_id);
        // Every instance shows the order and the animal it made pending.
        for served in instances {
            assert_eq!(
                get(served, &format!("/pets/{pet_id}")).await["status"],
                "pending"
            );
            assert_eq!(listed_with_status(served, pet_id, "pending").await, pet_id);
            let orders = get(served, &format!("/store/orders?petId={pet_id}")).await;
            assert_eq!(orders, json!([winner]));
            assert_eq!(
                get(served, &format!("/store/orders/{}", winner["id"])).await,
                *winner
            );
        }
    }
    // Deliver half through one instance, cancel the rest through another:
    // every instance sees the results and the same exact inventory.
    for (i, (_, winner)) in results.iter().enumerate() {
        let served = &instances[i % instances.len()];
        let to = if i % 2 == 0 { "delivered" } else { "cancelled" };
        let (status, order) = send(
            client()
                .patch(format!(
                    "{}/store/orders/{}",
                    served.base_url(),
                    winner["id"]
                ))
                .json(&json!({ "status": to })),
        )
        .await;
        assert_eq!((status, &order["status"]), (200, &json!(to)), "{order}");
        let other = &instances[(i + 1) % instances.len()];
        let pet = get(other, &format!("/pets/{}", winner["petId"])).await;
        let expected = if to == "delivered" {
            "sold"
        } else {
            "available"
        };
        assert_eq!(pet["status"], expected);
        let pet_id = winner["petId"].as_i64().unwrap();
        assert_eq!(listed_with_status(other, pet_id, expected).await, pet_id);
    }
    let sold = ANIMALS.div_ceil(2);
    for served in instances {
        assert_eq!(
            get(served, "/store/inventory").await,
            json!({"available": ANIMALS - sold, "pending": 0, "sold": sold})
        );
    }
}

/// The first animal from `pet_id` on that `listPets?status=…` shows.
async fn listed_with_status(served: &Served, pet_id: i64, status: &str) -> i64 {
    let page = get(
        served,
        &format!("/pets?status={status}&limit=1&after={}", pet_id - 1),
    )
    .await;
    page[0]["id"].as_i64().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_sqlite_exactly_one_order_wins_each_animal() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let served = serve(database.dir.path(), &["--database", &database.url]).await;
    let instances = [served];
    exactly_one_order_wins_each_animal(&instances).await;
    for served in instances {
        let (status, log) = stop(served).await;
        assert!(status.success(), "{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_two_postgres_instances_exactly_one_order_wins_each_animal() {
    let Some(database) = fresh_database(Backend::Postgres).await else {
        return;
    };
    let args = ["--database", database.url.as_str()];
    let instances = [
        serve(database.dir.path(), &args).await,
        serve(database.dir.path(), &args).await,
    ];
    exactly_one_order_wins_each_animal(&instances).await;
    for served in instances {
        let (status, log) = stop(served).await;
        assert!(status.success(), "{log}");
    }
}

/// Clients ordering, delivering and cancelling while a fault strikes.
const CLIENTS: usize = 16;
/// Orders each client tries to place.
const ROUNDS: usize = 10;
/// Animals they share (fewer than the orders: many are refused, or ordered
/// again once cancelled).
const SHARED_ANIMALS: usize = 48;

/// What a client was last told of an order it placed.
#[derive(Clone, Debug, PartialEq)]
struct Told {
    order: i64,
    pet: i64,
    status: String,
}

/// Whether `error` may have left the request's effect undecided, so that
/// the client retries it.
fn undecided(error: &Error<types::Error>) -> bool {
    match error {
        Error::CommunicationError(_) | Error::ResponseBodyError(_) => true,
        Error::ErrorResponse(response) => response.status() == 503,
        Error::UnexpectedResponse(response) => matches!(response.status().as_u16(), 502..=504),
        _ => false,
    }
}

/// Delivers or cancels `order` until the service answers (a repeated
/// request is answered 200 with the order unchanged, so retrying is safe).
async fn settle_order(client: &Client, order: i64, to: types::OrderUpdateStatus) -> types::Order {
    let what = format!("order {order} -> {to} answered");
    eventually_some(&what, THROUGH_A_RESTART, || async {
        let body = types::OrderUpdate::builder().status(to);
        match client
            .update_order()
            .order_id(order)
            .body(body)
            .send()
            .await
        {
            Ok(answer) => Some(answer.into_inner()),
            Err(error) if undecided(&error) => None,
            Err(error) => panic!("order {order} -> {to}: {error}"),
        }
    })
    .await
}

/// One client: each round orders a shared animal once (with a key of its
/// own), and delivers or cancels what it got; returns what it was last
/// told of each order, counting placed orders in `placed`.
async fn shopper(base_url: String, shopper: usize, placed: Arc<AtomicUsize>) -> Shopped {
    let client = Client::with_api_key(&base_url, KEY);
    let mut told = Vec::new();
    let mut created = Vec::new();
    for round in 0..ROUNDS {
        // An animal of its own, created exactly once through the fault.
        let pet = types::NewPet::builder()
            .name(format!("shopper-{shopper}-{round}"))
            .category_id(2)
            .status(types::PetStatus::Available)
            .try_into()
            .unwrap();
        let once = client
            .create_pet_once(pet)
            .idempotency_key(format!("create-{shopper}-{round}"))
            .retry(patient())
            .send()
            .await;
        match once {
            Ok(once) => created.push(once.pet.id),
            Err(error) => panic!("shopper {shopper}, round {round}, creating: {error}"),
        }
        let pet = ((shopper * 7 + round * 5) % SHARED_ANIMALS) as i64 + 1;
        let once = client
            .place_order_once(pet)
            .idempotency_key(format!("shopper-{shopper}-{round}"))
            .retry(patient())
            .send()
            .await;
        let order = match once {
            Ok(placed) => placed.order,
            Err(Error::ErrorResponse(refused)) if refused.code == "pet_not_available" => continue,
            Err(error) => panic!("shopper {shopper}, round {round}: {error}"),
        };
        assert_eq!(order.pet_id, pet);
        placed.fetch_add(1, Ordering::SeqCst);
        // Two thirds delivered, one third cancelled (the animal is sold
        // again later).
        let to = match round % 3 {
            0 => types::OrderUpdateStatus::Cancelled,
            _ => types::OrderUpdateStatus::Delivered,
        };
        let settled = settle_order(&client, order.id, to).await;
        told.push(Told {
            order: order.id,
            pet,
            status: settled.status.to_string(),
        });
    }
    Shopped {
        orders: told,
        created,
    }
}

/// What the shoppers were told: of each order they placed, and the
/// animals they created.
#[derive(Debug, Default)]
struct Shopped {
    orders: Vec<Told>,
    created: Vec<i64>,
}

fn shoppers(base_url: &str, placed: &Arc<AtomicUsize>) -> Vec<tokio::task::JoinHandle<Shopped>> {
    shoppers_at(&[base_url.to_owned()], placed)
}

/// The shoppers, each through one of `base_urls` in turn.
fn shoppers_at(
    base_urls: &[String],
    placed: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Shopped>> {
    (0..CLIENTS)
        .map(|i| {
            let base_url = base_urls[i % base_urls.len()].clone();
            tokio::spawn(shopper(base_url, i, Arc::clone(placed)))
        })
        .collect()
}

/// Creates the shared animals (ids 1 to SHARED_ANIMALS on a fresh
/// database), all available.
async fn stock(base_url: &str) {
    let client = Client::with_api_key(base_url, KEY);
    for i in 0..SHARED_ANIMALS {
        let pet = types::NewPet::builder()
            .name(format!("stock-{i}"))
            .category_id(1)
            .status(types::PetStatus::Available);
        let created = client.create_pet().body(pet).send().await.unwrap();
        assert_eq!(created.id, i as i64 + 1);
    }
}

/// Every item of a list, page by page, until an empty page. Ids ascend
/// throughout, so that each page moves on and the walk ends.
async fn walk(served: &Served, path: &str) -> Vec<Value> {
    let mut all: Vec<Value> = Vec::new();
    loop {
        let last = all.last().map(|last| last["id"].as_i64().unwrap());
        let after = last.map_or(String::new(), |last| format!("&after={last}"));
        let page = get(served, &format!("{path}limit=100{after}")).await;
        let page = page.as_array().unwrap().clone();
        if page.is_empty() {
            return all;
        }
        for item in &page {
            let id = item["id"].as_i64().unwrap();
            assert!(
                last.is_none_or(|last| id > last),
                "{path}: {id} after {last:?}"
            );
        }
        all.extend(page);
    }
}

/// The invariants of the Store, against what the clients were told.
async fn check_invariants(served: &Served, told: &[Told]) {
    let orders = walk(served, "/store/orders?").await;
    // No order lost, none duplicated, none nobody was told of; each as its
    // client was last told.
    let stored: HashMap<i64, &Value> = orders
        .iter()
        .map(|o| (o["id"].as_i64().unwrap(), o))
        .collect();
    assert_eq!(stored.len(), orders.len());
    assert_eq!(orders.len(), told.len(), "orders stored vs. orders told");
    for t in told {
        let order = stored
            .get(&t.order)
            .unwrap_or_else(|| panic!("order {} lost", t.order));
        assert_eq!(
            (order["petId"].as_i64(), order["status"].as_str()),
            (Some(t.pet), Some(t.status.as_str()))
        );
    }
    // At most one live order per animal, and each animal's status follows
    // from its orders; no animal sold twice.
    let pets = walk(served, "/pets?").await;
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for pet in &pets {
        let id = pet["id"].as_i64().unwrap();
        let live: Vec<&str> = orders
            .iter()
            .filter(|o| o["petId"] == id && o["status"] != "cancelled")
            .map(|o| o["status"].as_str().unwrap())
            .collect();
        let expected = match live[..] {
            [] => "available",
            ["placed"] => "pending",
            ["delivered"] => "sold",
            _ => panic!("pet {id} has orders {live:?}"),
        };
        assert_eq!(pet["status"], expected, "pet {id}");
        *counts.entry(expected).or_default() += 1;
    }
    // The inventory is exact.
    let inventory = get(served, "/store/inventory").await;
    for status in ["available", "pending", "sold"] {
        let count = counts.get(status).copied().unwrap_or(0);
        assert_eq!(inventory[status], count, "{status}: {inventory}");
        let listed = walk(served, &format!("/pets?status={status}&")).await;
        assert_eq!(listed.len() as i64, count, "listing {status}");
    }
}

/// Every event of the feed, from the oldest, page by page until an empty
/// page (each page's cursor the last event's id).
async fn whole_feed(served: &Served) -> Vec<Value> {
    let mut events: Vec<Value> = Vec::new();
    loop {
        let after = events.last().map_or(String::new(), |last| {
            format!("&after={}", last["id"].as_str().unwrap())
        });
        let page = get(served, &format!("/events?limit=100{after}")).await;
        let page = page.as_array().unwrap().clone();
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

/// Waits until the feed of each of `instances` has caught up with every
/// change acknowledged so far: an animal created now, on the first, shows
/// in each. Its event's id is above theirs, and a feed shows an id only
/// once no smaller one can still appear; but an instance learns of other
/// instances' writes on its next poll, and under load even of its own only
/// after a while, so a feed read at once may stop short of them.
async fn feeds_caught_up(instances: &[&Served]) {
    let marker = format!("pets/{}", available_animal(instances[0]).await);
    for served in instances {
        eventually_async_within(
            "the feed shows an animal created after every acknowledged change",
            THROUGH_A_RESTART,
            || async {
                let events = whole_feed(served).await;
                events.iter().any(|event| event["subject"] == marker)
            },
        )
        .await;
    }
}

/// The feed against the store: every acknowledged change is in it exactly
/// once, nothing else is, and each animal's and order's events come in the
/// order they were committed (each status change follows from the last).
async fn check_feed(served: &Served, told: &Shopped) {
    let events = whole_feed(served).await;
    let ids: Vec<i64> = events
        .iter()
        .map(|e| e["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "each event once, in order"
    );
    let pets = walk(served, "/pets?").await;
    let orders = walk(served, "/store/orders?").await;
    assert_eq!(orders.len(), told.orders.len());
    for created in &told.created {
        assert!(
            pets.iter().any(|pet| pet["id"] == *created),
            "pet {created} was acknowledged but is not stored"
        );
        let events = events
            .iter()
            .filter(|e| e["subject"] == format!("pets/{created}"));
        assert_eq!(
            events.filter(|e| e["type"] == "pet.created").count(),
            1,
            "pet {created}"
        );
    }
    let id = |event: &Value| event["data"]["id"].as_i64().unwrap();
    // Each animal: created once, as stored, then statuses that follow one
    // another to the status it has now.
    for pet in &pets {
        let of_pet: Vec<&Value> = events
            .iter()
            .filter(|e| e["subject"] == format!("pets/{}", pet["id"]))
            .collect();
        let (created, changes) = of_pet.split_first().expect("a pet.created");
        assert_eq!(created["type"], "pet.created", "{pet}");
        assert_eq!(created["data"]["name"], pet["name"]);
        let mut status = created["data"]["status"].clone();
        for change in changes {
            assert_eq!(change["type"], "pet.status_changed", "{change}");
            assert_eq!(
                change["previousstatus"], status,
                "pet {}: {change}",
                pet["id"]
            );
            status = change["data"]["status"].clone();
        }
        assert_eq!(
            status, pet["status"],
            "pet {}: its last event is its status",
            pet["id"]
        );
    }
    // Each order: placed once, then its final status once (if it has one);
    // its animal's change right after each, among that animal's events.
    for order in &orders {
        let of_order: Vec<&str> = events
            .iter()
            .filter(|e| e["subject"] == format!("store/orders/{}", order["id"]))
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        let expected: &[&str] = match order["status"].as_str().unwrap() {
            "placed" => &["order.placed"],
            "delivered" => &["order.placed", "order.delivered"],
            _ => &["order.placed", "order.cancelled"],
        };
        assert_eq!(of_order, expected, "order {}", order["id"]);
    }
    let kinds = |prefix: &str| {
        events
            .iter()
            .filter(|e| e["type"].as_str().unwrap().starts_with(prefix))
            .count()
    };
    assert_eq!(
        kinds("pet.created"),
        pets.len(),
        "no event of a pet not stored"
    );
    assert_eq!(
        kinds("order."),
        kinds("pet.status_changed"),
        "each order event with its animal's"
    );
    for event in events
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("order."))
    {
        assert!(
            orders.iter().any(|o| o["id"] == id(event)),
            "no event of an order not stored: {event}"
        );
    }
}

/// Flags that let served instances deliver webhooks to a receiver on
/// loopback, with retries compressed to seconds and a 1 s timeout, sealing
/// secrets with the key file `key_file` (made here when missing; every
/// instance of a database shares it).
fn webhook_flags(key_file: &std::path::Path) -> Vec<String> {
    if !key_file.exists() {
        SealingKeys::generate()
            .and_then(|keys| keys.write_new(key_file))
            .unwrap();
    }
    [
        "--webhook-key-file",
        key_file.to_str().unwrap(),
        "--webhook-allow-private-targets",
        "on",
        "--webhook-retry-schedule",
        "100ms,200ms,400ms,800ms,1s,2s,2s,5s,5s,5s,5s,5s,5s,5s,5s",
        "--webhook-timeout",
        "1s",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A receiver that fails some first attempts: `500` for every fifth event,
/// `429` with `Retry-After: 1` for every seventh, a hang past the sender's
/// timeout for every eleventh; `200` otherwise and on every retry.
async fn flaky_receiver() -> Receiver {
    Receiver::start(|received, before| {
        let id: u64 = received.id().parse().unwrap_or(0);
        match (before, id) {
            (0, id) if id % 5 == 0 => Answer::Status(500),
            (0, id) if id % 7 == 0 => Answer::RetryAfter(429, 1),
            (0, id) if id % 11 == 0 => Answer::Hang(Duration::from_millis(1500)),
            _ => Answer::Status(200),
        }
    })
    .await
}

/// Subscribes `receiver` to every event on `served`; returns the secret.
async fn subscribe(served: &Served, receiver: &Receiver) -> String {
    let response = reqwest::Client::new()
        .post(format!("{}/webhooks", served.base_url()))
        .bearer_auth(KEY)
        .json(&json!({ "url": receiver.url("/hook") }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let webhook: Value = response.json().await.unwrap();
    webhook["secret"].as_str().unwrap().to_owned()
}

/// The receiver against the feed: every event (the subscription was made
/// before the first) has been answered `200` at least once; every request
/// is signed with the secret and carries exactly the feed's event under
/// its id (so a duplicate only ever repeats a `webhook-id` and its body);
/// and each resource's events were first delivered in the feed's order.
async fn check_webhooks(served: &Served, receiver: &Receiver, secret: &str) {
    let events = whole_feed(served).await;
    let by_id: HashMap<&str, &Value> = events
        .iter()
        .map(|event| (event["id"].as_str().unwrap(), event))
        .collect();
    let got = eventually_some(
        "every event delivered to the receiver",
        THROUGH_A_RESTART,
        || async {
            let got = receiver.received();
            let delivered: std::collections::HashSet<&str> = got
                .iter()
                .filter(|r| r.answered == 200)
                .map(|r| r.id())
                .collect();
            let all = by_id.keys().all(|id| delivered.contains(id));
            drop(delivered);
            all.then_some(got)
        },
    )
    .await;
    let mut first_by_subject: HashMap<String, i64> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for received in &got {
        let event = petstore_client::verify_webhook(secret, &received.headers, &received.body)
            .unwrap_or_else(|e| panic!("a delivery that does not verify: {e}"));
        let id = received.id();
        let expected = by_id
            .get(id)
            .unwrap_or_else(|| panic!("a delivery of no event in the feed: {id}"));
        assert_eq!(
            received.json(),
            **expected,
            "webhook-id {id} carries its event"
        );
        assert_eq!(event.id, id);
        if received.answered == 200 && seen.insert(id.to_owned()) {
            let number: i64 = id.parse().unwrap();
            let subject = expected["subject"].as_str().unwrap().to_owned();
            if let Some(last) = first_by_subject.insert(subject.clone(), number) {
                assert!(
                    last < number,
                    "{subject}: event {number} delivered after {last}"
                );
            }
        }
    }
}

/// What every shopper was told, once each is done (retrying through the
/// fault, within [`THROUGH_A_RESTART`]).
async fn all_told(shoppers: Vec<tokio::task::JoinHandle<Shopped>>) -> Shopped {
    let told = within("every shopper done", THROUGH_A_RESTART, async {
        let mut told = Shopped::default();
        for shopper in shoppers {
            let shopped = shopper.await.unwrap();
            told.orders.extend(shopped.orders);
            told.created.extend(shopped.created);
        }
        told
    })
    .await;
    assert!(
        told.orders.len() >= SHARED_ANIMALS / 2,
        "too few orders to mean anything: {}",
        told.orders.len()
    );
    told
}

async fn killed_under_shoppers_keeps_the_invariants(backend: Backend) {
    let Some(database) = fresh_database(backend).await else {
        return;
    };
    let mut args = vec!["--database".to_owned(), database.url.clone()];
    args.extend(webhook_flags(&database.dir.path().join("webhook.key")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let served = serve(database.dir.path(), &args).await;
    let receiver = flaky_receiver().await;
    let secret = subscribe(&served, &receiver).await;
    stock(&served.base_url()).await;
    // The clients keep one address across the restart.
    let proxy = FaultProxy::start(served.address.parse().unwrap())
        .await
        .unwrap();
    let placed = Arc::new(AtomicUsize::new(0));
    let shoppers = shoppers(&format!("http://{}/v1", proxy.addr()), &placed);
    eventually_within("30 orders placed", Duration::from_secs(120), || {
        placed.load(Ordering::SeqCst) >= 30
    })
    .await;
    blocking(move || served.kill()).await;
    let served = serve(database.dir.path(), &args).await;
    proxy.set_target(served.address.parse().unwrap());

    let told = all_told(shoppers).await;
    check_invariants(&served, &told.orders).await;
    feeds_caught_up(&[&served]).await;
    check_feed(&served, &told).await;
    check_webhooks(&served, &receiver, &secret).await;
    // And after a clean restart, from what was stored.
    let (status, log) = stop(served).await;
    assert!(status.success(), "{log}");
    let served = serve(database.dir.path(), &args).await;
    check_invariants(&served, &told.orders).await;
    feeds_caught_up(&[&served]).await;
    check_feed(&served, &told).await;
    let (status, log) = stop(served).await;
    assert!(status.success(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_killed_under_16_shoppers_keeps_every_invariant() {
    killed_under_shoppers_keeps_the_invariants(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_killed_under_16_shoppers_keeps_every_invariant() {
    killed_under_shoppers_keeps_the_invariants(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_16_shoppers_keeps_every_invariant() {
    // A cluster of its own: this test stops it.
    let Some(cluster) = petstore_support::postgres::own_cluster().await else {
        return;
    };
    let database = Database::on_postgres(cluster.fresh_database().await);
    let mut args = vec!["--database".to_owned(), database.url.clone()];
    args.extend(webhook_flags(&database.dir.path().join("webhook.key")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let served = serve(database.dir.path(), &args).await;
    let receiver = flaky_receiver().await;
    let secret = subscribe(&served, &receiver).await;
    stock(&served.base_url()).await;
    let placed = Arc::new(AtomicUsize::new(0));
    let shoppers = shoppers(&served.base_url(), &placed);
    eventually_within("30 orders placed", Duration::from_secs(120), || {
        placed.load(Ordering::SeqCst) >= 30
    })
    .await;
    restart_postgres_under(&cluster, &served).await;
    let told = all_told(shoppers).await;
    check_invariants(&served, &told.orders).await;
    feeds_caught_up(&[&served]).await;
    check_feed(&served, &told).await;
    check_webhooks(&served, &receiver, &secret).await;
    let (status, log) = stop(served).await;
    assert!(status.success(), "{log}");
}

/// Two instances on one PostgreSQL database, half the shoppers on each:
/// one instance is killed with SIGKILL and started again, then the database
/// restarts. Both instances then serve the same store and the same feed,
/// which has every acknowledged change once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_two_instances_one_killed_then_the_database_restarted_keep_every_invariant() {
    let Some(cluster) = petstore_support::postgres::own_cluster().await else {
        return;
    };
    let database = Database::on_postgres(cluster.fresh_database().await);
    let mut args = vec!["--database".to_owned(), database.url.clone()];
    args.extend(webhook_flags(&database.dir.path().join("webhook.key")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let other_dir = tempfile::tempdir().unwrap();
    let one = serve(database.dir.path(), &args).await;
    let two = serve(other_dir.path(), &args).await;
    let receiver = flaky_receiver().await;
    let secret = subscribe(&one, &receiver).await;
    stock(&one.base_url()).await;
    let proxy = FaultProxy::start(one.address.parse().unwrap())
        .await
        .unwrap();
    let placed = Arc::new(AtomicUsize::new(0));
    let base_urls = [format!("http://{}/v1", proxy.addr()), two.base_url()];
    let shoppers = shoppers_at(&base_urls, &placed);
    eventually_within("30 orders placed", Duration::from_secs(120), || {
        placed.load(Ordering::SeqCst) >= 30
    })
    .await;
    blocking(move || one.kill()).await;
    let one = serve(database.dir.path(), &args).await;
    proxy.set_target(one.address.parse().unwrap());
    // At once, while the shoppers are still at it.
    restart_postgres_under(&cluster, &two).await;
    let told = all_told(shoppers).await;
    check_invariants(&one, &told.orders).await;
    feeds_caught_up(&[&one, &two]).await;
    check_feed(&one, &told).await;
    check_feed(&two, &told).await;
    check_webhooks(&two, &receiver, &secret).await;
    assert_eq!(
        whole_feed(&one).await,
        whole_feed(&two).await,
        "one feed on both"
    );
    for served in [one, two] {
        let (status, log) = stop(served).await;
        assert!(status.success(), "{log}");
    }
}

/// `POST /store/orders` for `pet_id` with `Idempotency-Key: key` to
/// `base_url`.
async fn order_once(base_url: &str, key: &str, pet_id: i64) -> (u16, Option<String>, Value) {
    post_keyed(base_url, "/store/orders", key, &json!({ "petId": pet_id })).await
}

/// Creates one available animal through `served`; returns its id.
async fn available_animal(served: &Served) -> i64 {
    let (status, pet) = send(
        client()
            .post(format!("{}/pets", served.base_url()))
            .json(&json!({"name": "in-use", "categoryId": 1, "status": "available"})),
    )
    .await;
    assert_eq!(status, 201, "{pet}");
    pet["id"].as_i64().unwrap()
}

/// While the first order with a key is still being processed, another with
/// the key is `409 idempotency_key_in_use` and orders nothing; once the
/// first is through, a retry replays its `201`.
async fn assert_order_in_use_then_replayed(
    served: &Served,
    pet_id: i64,
    first: tokio::task::JoinHandle<(u16, Option<String>, Value)>,
    refused: (u16, Option<String>, Value),
    release: impl AsyncFnOnce(),
) {
    let (status, _, error) = refused;
    assert_eq!(
        (status, &error["code"]),
        (409, &json!("idempotency_key_in_use")),
        "{error}"
    );
    release().await;
    let (status, replayed, order) = first.await.unwrap();
    // The first may have given up meanwhile (SQLite's busy timeout): then
    // it ordered nothing and left the key free.
    assert!(status == 201 || status == 503, "{status}: {order}");
    let (again, marker, retried) = order_once(&served.base_url(), "in-use-key", pet_id).await;
    assert_eq!(again, 201, "{retried}");
    if status == 201 {
        assert_eq!((replayed, marker.as_deref()), (None, Some("true")));
        assert_eq!(retried, order);
    }
    let orders = get(served, &format!("/store/orders?petId={pet_id}")).await;
    assert_eq!(orders.as_array().unwrap().len(), 1, "{orders}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_answers_409_while_an_order_key_is_in_use() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let served = serve(database.dir.path(), &["--database", &database.url]).await;
    let pet_id = available_animal(&served).await;
    // Another process holds the write lock: the server's commit waits (for
    // up to its busy timeout) with the first order's key held.
    let path = database.url.strip_prefix("sqlite://").unwrap().to_owned();
    let holder = rusqlite::Connection::open(path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let what = "an order refused 409 while the first holds the key";
    let (first, refused) = eventually_some(what, Duration::from_secs(120), || async {
        let first = tokio::spawn({
            let base_url = served.base_url();
            async move { order_once(&base_url, "in-use-key", pet_id).await }
        });
        let answer = order_once(&served.base_url(), "in-use-key", pet_id).await;
        if answer.0 == 409 {
            return Some((first, answer));
        }
        // The first had given up already (503 after the busy timeout) and
        // this one held the key instead; both were refused: again.
        assert_eq!(answer.0, 503, "{answer:?}");
        first.await.unwrap();
        None
    })
    .await;
    assert_order_in_use_then_replayed(&served, pet_id, first, refused, async || {
        holder.execute_batch("COMMIT").unwrap();
    })
    .await;
    drop(holder);
    let (status, log) = stop(served).await;
    assert!(status.success(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_409_while_an_order_key_is_in_use_on_any_instance_and_creates_are_apart() {
    let Some(database) = fresh_database(Backend::Postgres).await else {
        return;
    };
    let args = ["--database", database.url.as_str()];
    let served = serve(database.dir.path(), &args).await;
    let other = serve(database.dir.path(), &args).await;
    let pet_id = available_animal(&served).await;
    // The test writes, and does not commit, a record of the key: the first
    // order's own record has to wait for the test's transaction, and it
    // holds the key meanwhile. (Scopes are the SHA-256 of the API key.)
    let (pg, connection) = tokio_postgres::connect(&database.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let scope: &[u8] = &sha2::Sha256::digest(KEY.as_bytes())[..];
    pg.batch_execute("BEGIN").await.unwrap();
    pg.execute(
        "INSERT INTO order_idempotency_keys
             (scope, key, fingerprint, created_at, order_id, pet_id, placed_at)
         VALUES ($1, 'in-use-key', '', 0, 0, 0, now())",
        &[&scope],
    )
    .await
    .unwrap();
    let base_url = served.base_url();
    let first = tokio::spawn(async move { order_once(&base_url, "in-use-key", pet_id).await });
    common::until_a_session_waits_on(&pg, "the first order waits for the test's record").await;
    // The same key, meanwhile: an order through the other instance is 409;
    // a create is another operation, whose keys are apart, and goes through.
    let refused = order_once(&other.base_url(), "in-use-key", pet_id).await;
    let (created, _) = send(
        client()
            .post(format!("{}/pets", other.base_url()))
            .header("idempotency-key", "in-use-key")
            .json(&json!({"name": "apart", "categoryId": 1})),
    )
    .await;
    assert_eq!(created, 201);
    assert_order_in_use_then_replayed(&served, pet_id, first, refused, async || {
        pg.batch_execute("ROLLBACK").await.unwrap();
    })
    .await;
    for served in [served, other] {
        let (status, log) = stop(served).await;
        assert!(status.success(), "{log}");
    }
}
