//! When PostgreSQL goes away under traffic, the server answers 503 with the
//! Error body, keeps running, and serves normally again once the database is
//! back — without a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use petstore_tests::postgres::{Cluster, Postgres, unavailable};
use petstore_tests::{KEY, TestServer, assert_error};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_gives_503_and_the_server_recovers_by_itself() {
    // A cluster of its own: this test stops it.
    let cluster = match Cluster::start() {
        Ok(cluster) => Postgres::Cluster(cluster),
        Err(why) => {
            unavailable(&why);
            return;
        }
    };
    let url = cluster.fresh_database().await.parse().unwrap();
    let server = TestServer::start_on(url, tempfile::tempdir().unwrap()).await;
    let before = server
        .create(json!({"name": "Before", "categoryId": 1}))
        .await;

    // Traffic that runs across the whole outage.
    let running = Arc::new(AtomicBool::new(true));
    let traffic = tokio::spawn(create_while(server.url("/pets"), Arc::clone(&running)));

    let Postgres::Cluster(pg) = &cluster else {
        unreachable!()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    pg.stop();

    // Every kind of request now fails cleanly, quickly enough, with 503.
    let create = server
        .post_pet(&json!({"name": "During", "categoryId": 2}))
        .send();
    assert_error(
        create.await.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
    )
    .await;
    let list = server.get("/pets").send();
    assert_error(
        list.await.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
    )
    .await;
    let get = server.get(&format!("/pets/{}", before["id"])).send();
    assert_error(
        get.await.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
    )
    .await;
    // Client errors are still client errors: they never touch the database.
    let bad = server.get("/pets?limit=0").send();
    assert_error(bad.await.unwrap(), StatusCode::BAD_REQUEST, "bad_request").await;

    pg.restart();

    // The same server process recovers on its own.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = server.get("/pets").send().await.unwrap();
        if response.status() == StatusCode::OK {
            break;
        }
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(Instant::now() < deadline, "the server did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.store(false, Ordering::Relaxed);
    let (acknowledged, refused) = traffic.await.unwrap();
    assert!(refused > 0, "the traffic saw the outage");
    let after = server
        .create(json!({"name": "After", "categoryId": 3}))
        .await;
    let listed = server.list("?limit=100").await;
    assert_eq!(listed.first(), Some(&before));
    assert_eq!(listed.last(), Some(&after));
    for pet in &acknowledged {
        assert!(listed.contains(pet), "acknowledged {pet} is missing");
    }
}

/// Creates pets until told to stop; returns the acknowledged pets and how
/// many creates got 503. Any other answer fails the test.
async fn create_while(url: String, running: Arc<AtomicBool>) -> (Vec<Value>, usize) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let (mut acknowledged, mut refused) = (Vec::new(), 0);
    let mut i = 0;
    while running.load(Ordering::Relaxed) && acknowledged.len() < 90 {
        i += 1;
        let body = json!({"name": format!("traffic-{i}"), "categoryId": i});
        let response = client
            .post(&url)
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        match response.status() {
            StatusCode::CREATED => acknowledged.push(response.json().await.unwrap()),
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_error(
                    response,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "service_unavailable",
                )
                .await;
                refused += 1;
            }
            other => panic!("create during the outage answered {other}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (acknowledged, refused)
}
