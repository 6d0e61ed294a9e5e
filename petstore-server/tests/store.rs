//! The Store's invariants with the built server: many clients racing to
//! order the same animals (one SQLite server; two PostgreSQL instances on
//! one database) — exactly one order wins each animal — and every instance
//! shows every acknowledged change at once: the animal's status, the
//! order, and the inventory.

mod common;

use std::collections::BTreeMap;

use common::{Backend, KEY, Served, client, fresh_database, serve, stop};
use serde_json::{Value, json};

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
    }
    let sold = ANIMALS.div_ceil(2);
    for served in instances {
        assert_eq!(
            get(served, "/store/inventory").await,
            json!({"available": ANIMALS - sold, "pending": 0, "sold": sold})
        );
    }
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
