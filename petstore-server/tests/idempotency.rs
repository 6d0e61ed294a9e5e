//! Exactly-once creates under faults, with the built server and the
//! generated client's `create_pet_once`: a response lost on the way back, a
//! client that hangs up, a server killed with SIGKILL under 16 retrying
//! clients, PostgreSQL restarted under them, and two PostgreSQL instances
//! given the same key at once. In every case each animal a client asked
//! for is stored exactly once, with the id the client was told. And the
//! `409` for a key whose request is still in progress, on both backends.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    Backend, Database, KEY, Served, THROUGH_A_RESTART, fresh_database, patient, post_keyed,
    restart_postgres_under, serve, stop, stored_pets,
};
use petstore_client::{Client, types};
use petstore_support::{FaultProxy, blocking, eventually_some, eventually_within, within};
use serde_json::{Value, json};
use sha2::Digest;
use tokio::io::AsyncWriteExt;

/// Concurrent clients while the server is killed or its database restarts.
const WRITERS: usize = 16;
/// Animals each of them creates.
const PETS_PER_WRITER: usize = 20;

fn pet(name: &str, category: usize) -> types::NewPet {
    types::NewPet::builder()
        .name(name)
        .category_id(category as i64)
        .status(types::PetStatus::Available)
        .try_into()
        .unwrap()
}

fn api_client(address: &str) -> Client {
    Client::with_api_key(&format!("http://{address}/v1"), KEY)
}

/// Asserts that the store holds each of `told` (name, id) exactly once,
/// under the id its client was told, and nothing else.
async fn assert_stored_exactly_once(database: &Database, told: &[(String, i64)]) {
    let stored = stored_pets(&database.url).await;
    for (name, id) in told {
        assert_eq!(stored.get(name), Some(&vec![*id]), "{name}");
    }
    assert_eq!(stored.len(), told.len(), "animals nobody asked for");
}

/// Stops `served` cleanly, then checks the store against `told`.
async fn stop_and_check(served: Served, database: &Database, told: &[(String, i64)]) {
    let (status, log) = stop(served).await;
    assert!(status.success(), "{log}");
    assert_stored_exactly_once(database, told).await;
}

/// `POST /pets` of `body` with an idempotency key through `base_url`.
async fn post_once(base_url: &str, key: &str, body: &Value) -> (u16, Option<String>, Value) {
    post_keyed(base_url, "/pets", key, body).await
}

/// Sends a create with `key` and hangs up at once, before any answer.
async fn send_and_hang_up(address: &str, key: &str, body: &str) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST /v1/pets HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {KEY}\r\n\
         Idempotency-Key: {key}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
}

async fn lost_answers_are_replayed_to_the_retry(backend: Backend) {
    let Some(database) = fresh_database(backend).await else {
        return;
    };
    let served = serve(database.dir.path(), &["--database", &database.url]).await;
    let proxy = FaultProxy::start(served.address.parse().unwrap())
        .await
        .unwrap();
    let client = api_client(&proxy.addr().to_string());
    let mut told = Vec::new();

    // The server stores the animal and answers; the answer is lost.
    proxy.swallow_responses(1);
    let once = client.create_pet_once(pet("lost", 1)).retry(patient());
    let created = within("the lost create retried", THROUGH_A_RESTART, once.send())
        .await
        .unwrap();
    assert_eq!(proxy.swallowed(), 1);
    assert!(
        created.replayed,
        "the retry is answered with the stored 201"
    );
    assert_eq!(created.attempts, 2);
    told.push(("lost".to_owned(), created.pet.id));

    // The client hangs up right after sending: the server may have dropped
    // the request or stored the animal, and the retry may come while it is
    // still at it (409, retried). Either way: once.
    for i in 0..20 {
        let (name, key) = (format!("hung-up-{i}"), format!("hang-up-key-{i}"));
        let body = json!({"name": name, "categoryId": i, "status": "available"}).to_string();
        send_and_hang_up(&served.address, &key, &body).await;
        let once = client
            .create_pet_once(pet(&name, i))
            .idempotency_key(key)
            .retry(patient());
        let created = within(&format!("{name} retried"), THROUGH_A_RESTART, once.send())
            .await
            .unwrap();
        told.push((name, created.pet.id));
    }
    stop_and_check(served, &database, &told).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_replays_a_lost_answer_and_creates_once_for_a_client_that_hung_up() {
    lost_answers_are_replayed_to_the_retry(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replays_a_lost_answer_and_creates_once_for_a_client_that_hung_up() {
    lost_answers_are_replayed_to_the_retry(Backend::Postgres).await;
}

/// 16 clients, each creating its animals one after the other with
/// `create_pet_once` through `base_url`; returns what each was told, and
/// counts the animals acknowledged in `acknowledged` as they come.
fn retrying_writers(
    base_url: &str,
    acknowledged: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Vec<(String, i64)>>> {
    (0..WRITERS)
        .map(|writer| {
            let client = Client::with_api_key(base_url, KEY);
            let acknowledged = Arc::clone(acknowledged);
            tokio::spawn(async move {
                let mut told = Vec::new();
                for i in 0..PETS_PER_WRITER {
                    let name = format!("w{writer}-{i}");
                    let created = client
                        .create_pet_once(pet(&name, i))
                        .retry(patient())
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("{name}: gave up: {e}"));
                    told.push((name, created.pet.id));
                    acknowledged.fetch_add(1, Ordering::SeqCst);
                }
                told
            })
        })
        .collect()
}

/// What every writer was told, once each is done (retrying through the
/// fault, within [`THROUGH_A_RESTART`]).
async fn told(writers: Vec<tokio::task::JoinHandle<Vec<(String, i64)>>>) -> Vec<(String, i64)> {
    within("every writer done", THROUGH_A_RESTART, async {
        let mut told = Vec::new();
        for writer in writers {
            told.extend(writer.await.unwrap());
        }
        told
    })
    .await
}

async fn sigkill_under_retrying_clients_stores_each_animal_once(backend: Backend) {
    let Some(database) = fresh_database(backend).await else {
        return;
    };
    let args = ["--database", &database.url];
    let served = serve(database.dir.path(), &args).await;
    // The clients keep one address across the restart.
    let proxy = FaultProxy::start(served.address.parse().unwrap())
        .await
        .unwrap();
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let writers = retrying_writers(&format!("http://{}/v1", proxy.addr()), &acknowledged);

    eventually_within("100 creates acknowledged", Duration::from_secs(120), || {
        acknowledged.load(Ordering::SeqCst) >= 100
    })
    .await;
    blocking(move || served.kill()).await;
    let served = serve(database.dir.path(), &args).await;
    proxy.set_target(served.address.parse().unwrap());

    let told = told(writers).await;
    assert_eq!(told.len(), WRITERS * PETS_PER_WRITER);
    stop_and_check(served, &database, &told).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_killed_under_16_retrying_clients_stores_each_animal_once() {
    sigkill_under_retrying_clients_stores_each_animal_once(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_killed_under_16_retrying_clients_stores_each_animal_once() {
    sigkill_under_retrying_clients_stores_each_animal_once(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_16_retrying_clients_stores_each_animal_once() {
    // A cluster of its own: this test stops it.
    let Some(cluster) = petstore_support::postgres::own_cluster().await else {
        return;
    };
    let database = Database::on_postgres(cluster.fresh_database().await);
    let served = serve(database.dir.path(), &["--database", &database.url]).await;
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let writers = retrying_writers(&served.base_url(), &acknowledged);

    eventually_within("100 creates acknowledged", Duration::from_secs(120), || {
        acknowledged.load(Ordering::SeqCst) >= 100
    })
    .await;
    restart_postgres_under(&cluster, &served).await;

    let told = told(writers).await;
    assert_eq!(told.len(), WRITERS * PETS_PER_WRITER);
    stop_and_check(served, &database, &told).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_postgres_instances_given_the_same_key_at_once_create_once() {
    let Some(database) = fresh_database(Backend::Postgres).await else {
        return;
    };
    let args = ["--database", &database.url];
    let instances = [
        serve(database.dir.path(), &args).await,
        serve(database.dir.path(), &args).await,
    ];
    let clients = [
        api_client(&instances[0].address),
        api_client(&instances[1].address),
    ];
    let mut told = Vec::new();
    let mut attempts = 0;
    for round in 0..30 {
        let (name, key) = (format!("twin-{round}"), format!("twin-key-{round}"));
        // Four clients, two through each instance, all at once.
        let senders = (0..4).map(|sender| {
            clients[sender % 2]
                .create_pet_once(pet(&name, round))
                .idempotency_key(key.as_str())
                .retry(patient())
                .send()
        });
        let answers: Vec<_> = within(&name, THROUGH_A_RESTART, futures::future::join_all(senders))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let ids: Vec<i64> = answers.iter().map(|created| created.pet.id).collect();
        assert!(ids.iter().all(|id| *id == ids[0]), "{name}: {ids:?}");
        let creators = answers.iter().filter(|created| !created.replayed).count();
        assert_eq!(creators, 1, "{name}: one create, three replays");
        attempts += answers.iter().map(|created| created.attempts).sum::<u32>();
        told.push((name, ids[0]));
    }
    println!("120 creates took {attempts} attempts (the others were told 409 and retried)");
    for served in instances {
        let (status, log) = stop(served).await;
        assert!(status.success(), "{log}");
    }
    assert_stored_exactly_once(&database, &told).await;
}

/// A request whose key another request holds gets 409 and creates nothing;
/// once the first is through, a retry replays its 201.
async fn assert_in_use_then_replayed(
    served: &Served,
    first: tokio::task::JoinHandle<(u16, Option<String>, Value)>,
    refused: (u16, Option<String>, Value),
    release: impl AsyncFnOnce(),
) -> Vec<(String, i64)> {
    let (status, _, error) = refused;
    assert_eq!(status, 409, "{error}");
    assert_eq!(error["code"], "idempotency_key_in_use", "{error}");
    assert_eq!(error["status"], 409, "{error}");
    release().await;
    let (status, replayed, pet) = first.await.unwrap();
    // The first may have given up meanwhile (SQLite's busy timeout); then
    // the key was left free and the retry creates.
    assert!(status == 201 || status == 503, "{status}: {pet}");
    let client = api_client(&served.address);
    let once = client
        .create_pet_once(pet_named("in-use"))
        .idempotency_key("in-use-key")
        .retry(patient());
    let retry = within("the create retried", THROUGH_A_RESTART, once.send())
        .await
        .unwrap();
    if status == 201 {
        assert_eq!(replayed, None);
        assert!(retry.replayed);
        assert_eq!(retry.pet.id, pet["id"].as_i64().unwrap());
    }
    vec![("in-use".to_owned(), retry.pet.id)]
}

fn pet_named(name: &str) -> types::NewPet {
    pet(name, 1)
}

fn in_use_body() -> Value {
    json!({"name": "in-use", "categoryId": 1, "status": "available"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_409_while_the_key_is_in_use_on_any_instance() {
    let Some(database) = fresh_database(Backend::Postgres).await else {
        return;
    };
    let args = ["--database", &database.url];
    let served = serve(database.dir.path(), &args).await;
    let other = serve(database.dir.path(), &args).await;
    // The test writes, and does not commit, a record of the key: the first
    // request's own record has to wait for the test's transaction, and it
    // holds the key meanwhile. (Scopes are the SHA-256 of the API key.)
    let (pg, connection) = tokio_postgres::connect(&database.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let scope: &[u8] = &sha2::Sha256::digest(KEY.as_bytes())[..];
    pg.batch_execute("BEGIN").await.unwrap();
    pg.execute(
        "INSERT INTO idempotency_keys
             (scope, key, fingerprint, created_at, pet_id, name, category_id)
         VALUES ($1, 'in-use-key', '', 0, 0, 'placeholder', 0)",
        &[&scope],
    )
    .await
    .unwrap();
    let first = tokio::spawn({
        let base_url = served.base_url();
        async move { post_once(&base_url, "in-use-key", &in_use_body()).await }
    });
    common::until_a_session_waits_on(&pg, "the first create waits for the test's record").await;
    // Through the other instance too.
    let refused = post_once(&other.base_url(), "in-use-key", &in_use_body()).await;
    let told = assert_in_use_then_replayed(&served, first, refused, async || {
        pg.batch_execute("ROLLBACK").await.unwrap();
    })
    .await;
    let (status, log) = stop(other).await;
    assert!(status.success(), "{log}");
    stop_and_check(served, &database, &told).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_answers_409_while_the_key_is_in_use() {
    let Some(database) = fresh_database(Backend::Sqlite).await else {
        return;
    };
    let served = serve(database.dir.path(), &["--database", &database.url]).await;
    // Another process holds the write lock: the server's commit waits (for
    // up to its busy timeout) with the first request's key held.
    let path = database.url.strip_prefix("sqlite://").unwrap();
    let holder = rusqlite::Connection::open(path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let base_url = served.base_url();
    let what = "a create refused 409 while the first holds the key";
    let (first, refused) = eventually_some(what, Duration::from_secs(120), || async {
        let first = tokio::spawn({
            let base_url = base_url.clone();
            async move { post_once(&base_url, "in-use-key", &in_use_body()).await }
        });
        let answer = post_once(&base_url, "in-use-key", &in_use_body()).await;
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
    let told = assert_in_use_then_replayed(&served, first, refused, async || {
        holder.execute_batch("COMMIT").unwrap();
    })
    .await;
    drop(holder);
    stop_and_check(served, &database, &told).await;
}
