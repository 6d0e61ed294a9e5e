//! When PostgreSQL goes away under traffic, the server answers 503 with the
//! Error body, keeps running, and serves normally again once the database is
//! back — without a restart. Every step waits for a condition, never for a
//! length of time, and every wait has its deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use petstore_support::{eventually_some, eventually_within, within};
use petstore_tests::blocking;
use petstore_tests::postgres::{Cluster, own_cluster};
use petstore_tests::{KEY, OUTAGE, REQUEST_TIMEOUT, TestDatabase, TestServer, assert_error};

/// How long the traffic may take to get going on a server just started,
/// or to meet the outage once the database is stopped.
const TRAFFIC: Duration = Duration::from_secs(60);
use reqwest::StatusCode;
use serde_json::{Value, json};

/// How the keys' reload and the feed's head log the start of an outage.
const OUTAGE_STARTED: [&str; 2] = [
    "reloading the API keys (the keys loaded last stay in force) failed",
    "finding the feed's head (it stays at",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_gives_503_and_the_server_recovers_by_itself() {
    let Some((cluster, server, before)) = server_on_a_cluster_of_its_own().await else {
        return;
    };

    // Traffic that runs across the whole outage.
    let traffic = Traffic::default();
    let creating = tokio::spawn(traffic.clone().create_until_stopped(server.url("/pets")));
    eventually_within("the traffic gets going", TRAFFIC, || {
        traffic.acknowledged() >= 5
    })
    .await;

    // Returns once PostgreSQL and all its backends have exited.
    blocking({
        let cluster = Arc::clone(&cluster);
        move || cluster.stop()
    })
    .await;

    // Every kind of request now fails cleanly with 503.
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
    eventually_within("the traffic sees the outage", TRAFFIC, || {
        traffic.refused() >= 1
    })
    .await;
    let acknowledged_during_outage = traffic.acknowledged();
    // The background tasks that read the database each say so, once.
    for failed in OUTAGE_STARTED {
        server.log_eventually_contains(failed).await;
    }

    // Returns once PostgreSQL accepts sessions again.
    blocking({
        let cluster = Arc::clone(&cluster);
        move || cluster.restart()
    })
    .await;

    // The same server process recovers on its own: broken connections are
    // replaced when next needed.
    until_served_again(&server).await;
    eventually_within("the traffic gets through again", OUTAGE, || {
        traffic.acknowledged() > acknowledged_during_outage
    })
    .await;
    for task in ["API keys", "events (the feed's head)"] {
        let answers = format!("{task}: the database answers again");
        server.log_eventually_contains(&answers).await;
    }
    // Not once per try: the tries in between are not logged at `info`.
    let log = server.log_text();
    for failed in OUTAGE_STARTED {
        assert_eq!(log.matches(failed).count(), 1, "{failed:?} in\n{log}");
    }
    traffic.stop();
    // Its last request, then it returns.
    let stopped = within("the traffic stops", REQUEST_TIMEOUT * 2, creating).await;
    let acknowledged = stopped.unwrap();

    let after = server
        .create(json!({"name": "After", "categoryId": 3}))
        .await;
    assert!(after["id"].as_i64() > before["id"].as_i64());
    assert_eq!(server.read(&before["id"]).await, before);
    for pet in &acknowledged {
        assert_eq!(
            &server.read(&pet["id"]).await,
            pet,
            "acknowledged, then lost"
        );
    }
}

/// A database that stops answering without closing its connections (a
/// network partition, a stalled disk: here every PostgreSQL process is
/// stopped with SIGSTOP) gives 503s, not requests that hang; once it
/// answers again, the server serves again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_stops_answering_gives_503_and_the_server_recovers() {
    let Some((cluster, server, before)) = server_on_a_cluster_of_its_own().await else {
        return;
    };
    assert_eq!(server.list("").await, vec![before.clone()]);

    blocking({
        let cluster = Arc::clone(&cluster);
        move || cluster.freeze()
    })
    .await;
    // Thawed whatever happens below, so that the cluster can be stopped.
    struct Thaw(Arc<Cluster>);
    impl Drop for Thaw {
        fn drop(&mut self) {
            self.0.thaw();
        }
    }
    let thaw = Thaw(Arc::clone(&cluster));

    // Several at once: reads and creates pipelined on the shared
    // connections, and the connections made again after them. (The client's
    // timeout only keeps a hung request from hanging the test.)
    let requests = (0..8).map(|i| {
        let request = if i % 2 == 0 {
            server.get("/pets")
        } else {
            server.post_pet(&json!({"name": format!("During {i}"), "categoryId": 2}))
        };
        async move { request.timeout(Duration::from_secs(120)).send().await }
    });
    for response in futures::future::join_all(requests).await {
        let response = response.expect("an answer, not a hang");
        assert_error(
            response,
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
        )
        .await;
    }

    blocking(move || drop(thaw)).await;
    assert_eq!(until_served_again(&server).await[0], before);
    let after = server
        .create(json!({"name": "After", "categoryId": 3}))
        .await;
    assert_eq!(server.read(&after["id"]).await, after);
}

/// A server on a fresh database of a cluster of its own (which the test
/// stops or freezes), and a pet created before anything happens to it.
async fn server_on_a_cluster_of_its_own() -> Option<(Arc<Cluster>, TestServer, Value)> {
    let cluster = own_cluster().await?;
    let database = cluster.fresh_database().await;
    let server = TestServer::start_on(TestDatabase::postgres(database)).await;
    let before = server
        .create(json!({"name": "Before", "categoryId": 1}))
        .await;
    Some((cluster, server, before))
}

/// Lists until the server answers 200 again (each 503 on the way in the
/// contract's Error body), within [`OUTAGE`]; the first page.
async fn until_served_again(server: &TestServer) -> Vec<Value> {
    eventually_some("the server serves again", OUTAGE, || async {
        let response = server.get("/pets").send().await.unwrap();
        if response.status() == StatusCode::OK {
            return Some(response.json().await.unwrap());
        }
        assert_error(
            response,
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
        )
        .await;
        None
    })
    .await
}

/// Creates pets until stopped, counting what was acknowledged and refused.
/// The test stops it after its last wait, each with its deadline (or ends
/// first, failed, and its runtime cancels the task); each request has the
/// client's timeout.
#[derive(Clone, Default)]
struct Traffic {
    stopped: Arc<AtomicBool>,
    acknowledged: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

impl Traffic {
    fn acknowledged(&self) -> usize {
        self.acknowledged.load(Ordering::SeqCst)
    }

    fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Returns the acknowledged pets. Any answer but 201 or 503 fails.
    async fn create_until_stopped(self, url: String) -> Vec<Value> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .unwrap();
        let mut acknowledged = Vec::new();
        for i in 0.. {
            if self.stopped.load(Ordering::SeqCst) {
                break;
            }
            let body = json!({"name": format!("traffic-{i}"), "categoryId": i});
            let response = client
                .post(&url)
                .bearer_auth(KEY)
                .json(&body)
                .send()
                .await
                .unwrap();
            match response.status() {
                StatusCode::CREATED => {
                    acknowledged.push(response.json().await.unwrap());
                    self.acknowledged.fetch_add(1, Ordering::SeqCst);
                }
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert_error(
                        response,
                        StatusCode::SERVICE_UNAVAILABLE,
                        "service_unavailable",
                    )
                    .await;
                    self.refused.fetch_add(1, Ordering::SeqCst);
                }
                other => panic!("create during the outage answered {other}"),
            }
        }
        acknowledged
    }
}
