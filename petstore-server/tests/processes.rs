//! Whole server processes on real databases: nothing acknowledged is lost
//! when a server is killed, and several instances on one PostgreSQL
//! database serve one consistent catalogue.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Backend, KEY, client, fresh_database, names_in_database, serve, stop};
use petstore_support::Tmpfs;
use petstore_support::{blocking, eventually_within, within};
use serde_json::{Value, json};

/// Concurrent writers while the server is killed.
const WRITERS: usize = 16;

/// Creates pets through `base_url` until a request fails; returns every pet
/// acknowledged with 201, counting them in `count` as they come. Names are
/// unique per writer and attempt. A request fails once the test kills the
/// server, which it does within its deadline for the writers' progress
/// (or the test fails, and its runtime cancels the writers).
async fn create_until_failure(
    base_url: String,
    writer: usize,
    count: Arc<AtomicUsize>,
) -> Vec<Value> {
    let client = client();
    let statuses = [Some("available"), Some("pending"), Some("sold"), None];
    let mut acknowledged = Vec::new();
    for attempt in 0.. {
        let mut body = json!({"name": format!("w{writer}-{attempt}"), "categoryId": attempt});
        if let Some(status) = statuses[attempt % 4] {
            body["status"] = json!(status);
        }
        let sent = client
            .post(format!("{base_url}/pets"))
            .bearer_auth(KEY)
            .json(&body)
            .send();
        match sent.await {
            Ok(response) if response.status() == 201 => match response.json::<Value>().await {
                Ok(pet) => {
                    acknowledged.push(pet);
                    count.fetch_add(1, Ordering::SeqCst);
                }
                Err(_) => break,
            },
            _ => break,
        }
    }
    acknowledged
}

async fn get_pet(base_url: &str, id: &Value) -> Value {
    let response = client()
        .get(format!("{base_url}/pets/{id}"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "pet {id} through {base_url}");
    response.json().await.unwrap()
}

async fn acknowledged_pets_survive_sigkill(backend: Backend) {
    let Some(database) = fresh_database(backend).await else {
        return;
    };
    let args = ["--database", &database.url];
    let served = serve(database.dir.path(), &args).await;
    let base_url = served.base_url();
    let count = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            tokio::spawn(create_until_failure(
                base_url.clone(),
                writer,
                Arc::clone(&count),
            ))
        })
        .collect();

    // Pull the plug in the middle of the writing: once 300 creates have
    // been acknowledged, with 16 more in flight.
    eventually_within("300 creates acknowledged", Duration::from_secs(120), || {
        count.load(Ordering::SeqCst) >= 300
    })
    .await;
    blocking(move || served.kill()).await;
    let acknowledged = within(
        "the writers see the kill",
        common::REQUEST_TIMEOUT * 2,
        async {
            let mut acknowledged = Vec::new();
            for writer in writers {
                acknowledged.extend(writer.await.unwrap());
            }
            acknowledged
        },
    )
    .await;

    let served = serve(database.dir.path(), &args).await;
    for pet in &acknowledged {
        assert_eq!(
            &get_pet(&served.base_url(), &pet["id"]).await,
            pet,
            "lost or changed"
        );
    }
    let ids: HashSet<&Value> = acknowledged.iter().map(|pet| &pet["id"]).collect();
    assert_eq!(
        ids.len(),
        acknowledged.len(),
        "an id was acknowledged twice"
    );
    let names = names_in_database(&database.url).await;
    assert!(
        names.values().all(|&count| count == 1),
        "a pet was stored twice"
    );
    for pet in &acknowledged {
        assert_eq!(names.get(pet["name"].as_str().unwrap()), Some(&1));
    }
    let (status, _) = stop(served).await;
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_loses_no_acknowledged_pet_when_killed() {
    acknowledged_pets_survive_sigkill(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_loses_no_acknowledged_pet_when_killed() {
    acknowledged_pets_survive_sigkill(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_postgres_serve_one_catalogue() {
    let Some(database) = fresh_database(Backend::Postgres).await else {
        return;
    };
    let args = ["--database", &database.url];
    let first = serve(database.dir.path(), &args).await;
    let second = serve(database.dir.path(), &args).await;
    let urls = [first.base_url(), second.base_url()];

    // 16 concurrent writers, each alternating between the two instances.
    let writers = (0..16).map(|writer| {
        let urls = urls.clone();
        async move {
            let client = client();
            let mut pets = Vec::new();
            for i in 0..13 {
                let url = &urls[(writer + i) % 2];
                let body = json!({"name": format!("shared-{writer}-{i}"), "categoryId": i, "status": "available"});
                let response =
                    client.post(format!("{url}/pets")).bearer_auth(KEY).json(&body).send().await.unwrap();
                assert_eq!(response.status(), 201);
                pets.push(response.json::<Value>().await.unwrap());
            }
            pets
        }
    });
    let pets: Vec<Value> = futures::future::join_all(writers)
        .await
        .into_iter()
        .flatten()
        .collect();
    let ids: HashSet<i64> = pets.iter().map(|pet| pet["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), 16 * 13, "ids collided across instances");

    for pet in &pets {
        for url in &urls {
            assert_eq!(&get_pet(url, &pet["id"]).await, pet);
        }
    }
    let lists: Vec<Value> = futures::future::join_all(urls.iter().map(|url| async move {
        let response = client()
            .get(format!("{url}/pets?limit=100&status=available"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        response.json::<Value>().await.unwrap()
    }))
    .await;
    assert_eq!(lists[0], lists[1], "both instances list the same catalogue");
    assert_eq!(lists[0].as_array().unwrap().len(), 100);

    for served in [first, second] {
        let (status, _) = stop(served).await;
        assert!(status.success());
    }
}

/// The PostgreSQL store keeps no pet in memory: a pet another instance has
/// just acknowledged is read and listed at once, even by an instance that
/// was asked for that id before it existed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pet_acknowledged_by_one_instance_is_read_at_once_by_another() {
    let Some(database) = fresh_database(Backend::Postgres).await else {
        return;
    };
    let args = ["--database", &database.url];
    let writer = serve(database.dir.path(), &args).await;
    let reader = serve(database.dir.path(), &args).await;
    let (writer_url, reader_url) = (writer.base_url(), reader.base_url());
    let client = client();
    for round in 0..20 {
        // Ids come from one sequence, one after the other: the next pet
        // gets the id after the last.
        let (status, last) = post(
            &writer_url,
            &json!({"name": format!("before-{round}"), "categoryId": 1}),
        )
        .await;
        assert_eq!(status, 201);
        let next = last["id"].as_i64().unwrap() + 1;
        let early = client
            .get(format!("{reader_url}/pets/{next}"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(early.status(), 404, "pet {next} does not exist yet");

        let (status, pet) = post(
            &writer_url,
            &json!({"name": format!("after-{round}"), "categoryId": 2}),
        )
        .await;
        assert_eq!((status, pet["id"].as_i64()), (201, Some(next)));
        assert_eq!(get_pet(&reader_url, &pet["id"]).await, pet);
        let listed: Value = client
            .get(format!("{reader_url}/pets?limit=1&after={}", next - 1))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed, json!([pet]));
    }
    for served in [writer, reader] {
        assert!(stop(served).await.0.success());
    }
}

/// Plain creates are stored many per statement on PostgreSQL; a row the
/// database refuses fails only its own create, not the others stored with
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_the_database_refuses_fails_alone() {
    let Some(database) = fresh_database(Backend::Postgres).await else {
        return;
    };
    let args = ["--database", &database.url];
    let served = serve(database.dir.path(), &args).await;
    let base_url = served.base_url();
    // A rule of the database the server does not know: no pet named "Poison".
    let (admin, connection) = tokio_postgres::connect(&database.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute("ALTER TABLE pets ADD CONSTRAINT no_poison CHECK (name <> 'Poison')")
        .await
        .unwrap();

    // 64 creates at once, every eighth of them refused.
    let creates = (0..64).map(|i| {
        let name = if i % 8 == 0 {
            "Poison".to_owned()
        } else {
            format!("good-{i}")
        };
        let base_url = base_url.clone();
        async move {
            (
                name.clone(),
                post(&base_url, &json!({"name": name, "categoryId": i})).await,
            )
        }
    });
    let results = futures::future::join_all(creates).await;
    for (name, (status, body)) in &results {
        match name.as_str() {
            "Poison" => {
                assert_eq!(*status, 500, "{body}");
                assert_eq!(body["code"], "internal_error", "{body}");
            }
            _ => assert_eq!(*status, 201, "{name}: {body}"),
        }
    }
    let stored = names_in_database(&database.url).await;
    assert_eq!(stored.len(), 56, "{stored:?}");
    assert!(stored.values().all(|&count| count == 1), "{stored:?}");
    assert!(stop(served).await.0.success());
}

/// `POST /pets` with `body` through `base_url`: the status and the JSON body.
async fn post(base_url: &str, body: &Value) -> (u16, Value) {
    let response = client()
        .post(format!("{base_url}/pets"))
        .bearer_auth(KEY)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_sqlite_writer_stops_the_process_with_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), &[]).await;
    let base_url = served.base_url();
    let (status, _) = post(&base_url, &json!({"name": "Rex", "categoryId": 1})).await;
    assert_eq!(status, 201);
    // Another program rewinds the id sequence behind the server's back; the
    // next id breaks the in-memory catalogue's invariant and the writer
    // thread panics.
    let conn = rusqlite::Connection::open(dir.path().join("petstore.db")).unwrap();
    conn.execute_batch("DELETE FROM pets; UPDATE sqlite_sequence SET seq = 0;")
        .unwrap();
    drop(conn);

    let (status, body) = post(&base_url, &json!({"name": "Tom", "categoryId": 2})).await;
    assert_eq!(
        (status, &body["code"]),
        (500, &json!("internal_error")),
        "{body}"
    );
    // The process does not live on answering 503 forever: it exits, non-zero,
    // for its supervisor to restart it.
    let (exit, log) = blocking(move || served.wait_for_exit()).await;
    assert!(!exit.success(), "exit status {exit:?}\n{log}");
    assert!(
        log.contains("the SQLite writer thread panicked") && log.contains("ids must ascend"),
        "{log}"
    );
}

/// Fills `disk` to the last byte with a file of its own, then frees
/// `room` bytes of it; returns the file.
fn fill(disk: &Tmpfs, room: u64) -> std::path::PathBuf {
    use std::io::Write;
    let path = disk.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    // More chunks than the disk holds (the last one written in part).
    let full = (0..disk.size() / chunk.len() as u64 + 2).any(|_| match file.write(&chunk) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.raw_os_error() == Some(28) => true, // ENOSPC
        Err(e) => panic!("filling the disk: {e}"),
    });
    assert!(full, "the disk never filled");
    let written = file.metadata().unwrap().len();
    file.set_len(written.saturating_sub(room)).unwrap();
    file.sync_all().unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_creates_with_503_and_they_recover_once_space_is_freed() {
    let disk = Tmpfs::mount(8 * 1024);
    let args = ["--database", "sqlite://petstore.db"];
    let served = serve(disk.path(), &args).await;
    let base_url = served.base_url();
    let mut acknowledged = Vec::new();
    let filler = fill(&disk, 64 * 1024);

    // Creates until the disk is full: 201s, then a 503.
    let mut refused = None;
    for i in 0..10_000 {
        let (status, body) = post(
            &base_url,
            &json!({"name": format!("pet-{i}"), "categoryId": i}),
        )
        .await;
        match status {
            201 => acknowledged.push(body),
            503 => {
                refused = Some(body);
                break;
            }
            other => panic!("a create on a full disk answered {other}: {body}"),
        }
    }
    let refused = refused.expect("the disk never filled");
    assert_eq!(refused["code"], "service_unavailable", "{refused}");

    // Reads still work.
    let response = client()
        .get(format!("{base_url}/pets?limit=100"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // Space is freed: creates work again, with nothing lost.
    std::fs::remove_file(filler).unwrap();
    let (status, body) = post(&base_url, &json!({"name": "after", "categoryId": 1})).await;
    assert_eq!(status, 201, "{body}");
    acknowledged.push(body);
    let (exit, log) = stop(served).await;
    assert!(exit.success(), "{log}");

    let served = serve(disk.path(), &args).await;
    for pet in &acknowledged {
        assert_eq!(&get_pet(&served.base_url(), &pet["id"]).await, pet, "lost");
    }
    let (exit, log) = stop(served).await;
    assert!(exit.success(), "{log}");
}
