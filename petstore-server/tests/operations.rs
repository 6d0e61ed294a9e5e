//! Operating the server as an operator would: API keys through the CLI
//! while instances serve, the management listener, TLS, and the
//! configuration file. Real processes, real databases, real HTTP.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use common::{
    KEY, KEY_CHANGE, OUTAGE, Served, certificate_authority, petstore, run, tool, trusting,
};
use petstore_support::{blocking, eventually, eventually_some, eventually_within, within};

/// `petstore-server keys ARGS --database URL`, in `dir`.
fn keys(dir: &Path, database: &str, args: &[&str]) -> (bool, String, String) {
    let (output, stdout, stderr) = run(petstore(dir)
        .arg("keys")
        .args(args)
        .args(["--database", database]));
    (output.status.success(), stdout, stderr)
}

/// `petstore-server migrate --database URL`: creates the database.
fn migrate(dir: &Path, database: &str) {
    let (output, _, stderr) = run(petstore(dir).args(["migrate", "--database", database]));
    assert!(output.status.success(), "{stderr}");
}

/// `petstore-server webhook-key create DIR/NAME`: a new key file.
fn webhook_key(dir: &Path, name: &str) -> std::path::PathBuf {
    let file = dir.join(name);
    let (output, _, stderr) = run(petstore(dir).args(["webhook-key", "create"]).arg(&file));
    assert!(output.status.success(), "{stderr}");
    file
}

/// A GET to `address`, with a key unless `None`: the status code and body.
fn get(address: &str, path: &str, key: Option<&str>) -> (u16, String) {
    let (status, body) = common::raw_request(address, "GET", path, key, "");
    let code = status
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (code, body)
}

fn start(dir: &Path, database: &str) -> Served {
    Served::start(dir, &["--database", database])
}

/// Serving instances and the database URL they share.
struct Instances {
    served: Vec<Served>,
    database: String,
    _dir: tempfile::TempDir,
    _postgres: Option<petstore_support::postgres::TestDatabase>,
}

async fn sqlite_instance() -> Instances {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("pets.db").display());
    let path = dir.path().to_owned();
    let url = database.clone();
    let served = blocking(move || start(&path, &url)).await;
    Instances {
        served: vec![served],
        database,
        _dir: dir,
        _postgres: None,
    }
}

async fn postgres_instances(count: usize) -> Option<Instances> {
    let postgres = petstore_support::postgres::fresh_database().await?;
    let dir = tempfile::tempdir().unwrap();
    let database = postgres.url().to_owned();
    let mut served = Vec::new();
    for _ in 0..count {
        let path = dir.path().to_owned();
        let url = database.clone();
        served.push(blocking(move || start(&path, &url)).await);
    }
    Some(Instances {
        served,
        database,
        _dir: dir,
        _postgres: Some(postgres),
    })
}

/// Waits until every instance answers `key` with `status`; returns how
/// long that took (reported, not asserted: these machines are noisy; the
/// keyring's unit test holds the refresh to its 2 s, in virtual time).
async fn every_instance_answers(instances: &[Instances], key: &str, status: u16) -> f64 {
    let started = Instant::now();
    let addresses: Vec<String> = instances
        .iter()
        .flat_map(|i| i.served.iter().map(|s| s.address.clone()))
        .collect();
    let what = format!("every instance answers {status}");
    eventually_within(&what, KEY_CHANGE, || {
        addresses
            .iter()
            .all(|address| get(address, "/v1/pets?limit=1", Some(key)).0 == status)
    })
    .await;
    started.elapsed().as_secs_f64()
}

/// Requests on a thread of their own, each with its timeout, until
/// stopped: by [`Traffic::stop`], or by the test's end whichever way it
/// ends (dropping this stops them too). So the traffic lasts no longer
/// than the test, whose every wait has its deadline.
struct Traffic<T> {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<T>>,
}

impl<T: Send + 'static> Traffic<T> {
    /// Runs `requests` on a thread; it returns once the flag it is given
    /// is set.
    fn start(requests: impl FnOnce(&AtomicBool) -> T + Send + 'static) -> Traffic<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || requests(&stop)
        });
        Traffic {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the traffic; what it returned once its last round is done.
    async fn stop(mut self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("running");
        let joined = blocking(move || thread.join().unwrap());
        within("the traffic's last round", Duration::from_secs(300), joined).await
    }
}

impl<T> Drop for Traffic<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_created_revoked_and_expired_through_the_cli_take_effect_on_every_instance() {
    // One SQLite instance always; two PostgreSQL instances unless the
    // developer opted out of PostgreSQL (never in CI), which is then said.
    let mut all = vec![sqlite_instance().await];
    all.extend(postgres_instances(2).await);
    // Requests in flight throughout, with the environment's key: none may
    // fail while keys change.
    let addresses: Vec<String> = all
        .iter()
        .flat_map(|i| i.served.iter().map(|s| s.address.clone()))
        .collect();
    let traffic = Traffic::start(move |stop| {
        let mut answered = 0;
        while !stop.load(Ordering::Relaxed) {
            for address in &addresses {
                let (status, body) = get(address, "/v1/pets?limit=1", Some(KEY));
                assert_eq!(status, 200, "{address}: {body}");
                answered += 1;
            }
        }
        answered
    });

    let mut created = Vec::new();
    for instances in &all {
        let dir = instances._dir.path();
        let (ok, key, stderr) = keys(dir, &instances.database, &["create", "--name", "ci"]);
        assert!(ok, "{stderr}");
        let key = key.trim().to_owned();
        assert!(key.starts_with("pst_") && key.len() == 40, "{key}");
        created.push(key);
    }
    for (instances, key) in all.iter().zip(&created) {
        let took = every_instance_answers(std::slice::from_ref(instances), key, 200).await;
        eprintln!("created key accepted everywhere after {took:.2} s");
    }
    for instances in &all {
        let (ok, _, stderr) = keys(
            instances._dir.path(),
            &instances.database,
            &["revoke", "ci"],
        );
        assert!(ok, "{stderr}");
    }
    for (instances, key) in all.iter().zip(&created) {
        let took = every_instance_answers(std::slice::from_ref(instances), key, 401).await;
        eprintln!("revoked key refused everywhere after {took:.2} s");
    }
    for instances in &all {
        let dir = instances._dir.path();
        let (ok, key, stderr) = keys(
            dir,
            &instances.database,
            &["create", "--name", "brief", "--expires-in", "2s"],
        );
        assert!(ok, "{stderr}");
        let key = key.trim().to_owned();
        // Once loaded and past its expiry, it is refused as expired.
        let addresses: Vec<String> = instances.served.iter().map(|s| s.address.clone()).collect();
        eventually_within(
            "every instance refuses the key as expired",
            KEY_CHANGE,
            || {
                addresses.iter().all(|address| {
                    let (status, body) = get(address, "/v1/pets", Some(&key));
                    status == 401 && body.contains("expired")
                })
            },
        )
        .await;
        let (ok, list, _) = keys(dir, &instances.database, &["list"]);
        assert!(ok);
        assert!(
            list.contains("revoked") && list.contains("expired"),
            "{list}"
        );
        // Last use is recorded (in batches) and shown; keys never are.
        assert!(!list.contains("pst_"), "{list}");
        let ci = list.lines().find(|line| line.starts_with("ci ")).unwrap();
        assert_eq!(
            ci.matches("Z").count(),
            3,
            "created, last used, revoked: {ci}"
        );
    }
    let answered = traffic.stop().await;
    assert!(answered > 0);
}

/// `petstore-server webhooks ARGS --database URL`, in `dir`.
fn webhooks(dir: &Path, database: &str, args: &[&str]) -> (bool, String, String) {
    let (output, stdout, stderr) = run(petstore(dir)
        .arg("webhooks")
        .args(args)
        .args(["--database", database]));
    (output.status.success(), stdout, stderr)
}

/// Subscribes `url` to `pet.created` with `key` through the API: the
/// `201`'s body, with the subscription's `id` and its `secret`.
fn subscribe(address: &str, key: &str, url: &str) -> serde_json::Value {
    let body = format!(r#"{{"url": "{url}", "types": ["pet.created"]}}"#);
    let (status, answer) = common::raw_request(address, "POST", "/v1/webhooks", Some(key), &body);
    assert!(status.contains(" 201 "), "{status}: {answer}");
    serde_json::from_str(&answer).unwrap()
}

/// `serve` on `database` with a new webhook key file, both in a directory
/// of their own (kept as long as it is), private targets admitted.
async fn serve_with_new_key_file(database: &str) -> (tempfile::TempDir, Served) {
    let dir = tempfile::tempdir().unwrap();
    let key_file = webhook_key(dir.path(), "webhook.key");
    let served = serve_with_key_file(dir.path(), database, &key_file, &[]).await;
    (dir, served)
}

/// The databases a test of the binary runs on: a SQLite file (in the
/// directory returned, kept as long as it is) and a fresh PostgreSQL
/// database, each with its URL.
async fn sqlite_and_postgres() -> (
    tempfile::TempDir,
    Vec<(String, Option<petstore_support::postgres::TestDatabase>)>,
) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("pets.db").display());
    let mut databases = vec![(sqlite, None)];
    if let Some(postgres) = petstore_support::postgres::fresh_database().await {
        databases.push((postgres.url().to_owned(), Some(postgres)));
    }
    (dir, databases)
}

/// `serve` in `dir` on `database` with the webhook key file `key_file`,
/// private targets admitted (the receivers are on loopback), and `extra`
/// flags; started off the async workers.
async fn serve_with_key_file(
    dir: &Path,
    database: &str,
    key_file: &Path,
    extra: &[&'static str],
) -> Served {
    let (dir, database, key_file) = (dir.to_owned(), database.to_owned(), key_file.to_owned());
    let extra = extra.to_vec();
    blocking(move || {
        let key_file = key_file.to_str().unwrap();
        let flags = ["--database", &database, "--webhook-key-file", key_file];
        let private = ["--webhook-allow-private-targets", "on"];
        Served::start(&dir, &[&flags[..], &private, &extra].concat())
    })
    .await
}

/// Through the API a subscription is its maker's key's alone; the operator
/// lists every one, pages its deliveries and removes it through the CLI
/// while the server serves, one whose key was revoked too, and never sees
/// a secret.
#[tokio::test]
async fn every_webhook_subscription_is_listed_and_removed_through_the_cli_whoever_made_it() {
    let (_sqlite_dir, databases) = sqlite_and_postgres().await;
    for (database, _postgres) in &databases {
        let (dir, served) = serve_with_new_key_file(database).await;
        let (ok, maker, stderr) = keys(
            dir.path(),
            database,
            &[
                "create",
                "--name",
                "hook-maker",
                "--scopes",
                "pets:read,webhooks:manage",
            ],
        );
        assert!(ok, "{stderr}");
        let maker = maker.trim().to_owned();
        let instances = [Instances {
            served: vec![served],
            database: database.clone(),
            _dir: dir,
            _postgres: None,
        }];
        let (dir, address) = (instances[0]._dir.path(), &instances[0].served[0].address);
        let answers = |status| {
            let (address, maker) = (address.clone(), maker.clone());
            eventually_within("the maker's key taken or refused", KEY_CHANGE, move || {
                get(&address, "/v1/webhooks", Some(&maker)).0 == status
            })
        };
        answers(200).await;
        // A port nothing listens on: every delivery is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .unwrap()
            .port();
        let target = |path| format!("http://127.0.0.1:{port}/{path}");
        let theirs = subscribe(address, &maker, &target("theirs"))["id"]
            .as_i64()
            .unwrap();
        let ours = subscribe(address, KEY, &target("ours"))["id"]
            .as_i64()
            .unwrap();
        // An animal for both to receive.
        let pet = r#"{"name": "Rex", "categoryId": 1}"#;
        let (status, body) = common::raw_request(address, "POST", "/v1/pets", Some(KEY), pet);
        assert!(status.contains(" 201 "), "{status}: {body}");
        eventually_within("the delivery tried and failed", OUTAGE, || {
            let (ok, listed, _) = webhooks(dir, database, &["deliveries", &theirs.to_string()]);
            let line = listed.lines().nth(1).unwrap_or_default().to_owned();
            ok && line.contains("pet.created") && !line.ends_with(" -")
        })
        .await;
        // Paged as the API pages them: a full page says how to read on, and
        // `--before` its oldest event lists what is older (nothing here).
        let subscription = theirs.to_string();
        let (ok, page, stderr) = webhooks(
            dir,
            database,
            &["deliveries", &subscription, "--limit", "1"],
        );
        let event = page
            .lines()
            .nth(1)
            .and_then(|line| line.split_whitespace().next());
        let event = event
            .unwrap_or_else(|| panic!("a delivery listed: {page}"))
            .to_owned();
        let read_on = format!("add --before {event}");
        assert!(ok && stderr.contains(&read_on), "{read_on:?} in {stderr}");
        let (ok, page, stderr) = webhooks(
            dir,
            database,
            &["deliveries", &subscription, "--before", &event],
        );
        let said = format!("no deliveries of events before {event}");
        assert!(
            ok && page.lines().count() == 1 && stderr.contains(&said),
            "{page}{stderr}"
        );
        let (ok, _, stderr) = keys(dir, database, &["revoke", "hook-maker"]);
        assert!(ok, "{stderr}");
        answers(401).await;

        let (ok, list, stderr) = webhooks(dir, database, &["list"]);
        assert!(ok, "{stderr}");
        let line = |id: i64| {
            list.lines()
                .find(|line| line.starts_with(&format!("{id} ")))
                .unwrap_or_else(|| panic!("subscription {id} listed: {list}"))
                .to_owned()
        };
        let revoked = line(theirs);
        for shown in ["active", "hook-maker", "revoked", "pet.created", "/theirs"] {
            assert!(revoked.contains(shown), "{shown:?} in {revoked}");
        }
        assert!(line(ours).contains("not stored"), "{list}");
        assert!(!list.contains("whsec_"), "{list}");

        let (ok, _, stderr) = webhooks(dir, database, &["remove", &theirs.to_string()]);
        assert!(ok, "{stderr}");
        let (ok, list, _) = webhooks(dir, database, &["list"]);
        assert!(
            ok && !list.contains("/theirs") && list.contains("/ours"),
            "{list}"
        );
        for command in ["remove", "deliveries"] {
            let (ok, _, stderr) = webhooks(dir, database, &[command, &theirs.to_string()]);
            let said = format!("no webhook subscription has id {theirs}");
            assert!(!ok && stderr.contains(&said), "{command}: {stderr}");
        }
        // The server serves on, and the other key's subscription is still its own.
        let (status, body) = get(address, "/v1/webhooks", Some(KEY));
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains("/ours") && !body.contains("/theirs"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn the_access_log_names_the_key_and_the_operation_never_the_key_itself() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("pets.db").display());
    migrate(dir.path(), &database);
    let (ok, key, stderr) = keys(dir.path(), &database, &["create", "--name", "reporting"]);
    assert!(ok, "{stderr}");
    let key = key.trim().to_owned();
    let path = dir.path().to_owned();
    let url = database.clone();
    let mut served = blocking(move || start(&path, &url)).await;
    assert_eq!(get(&served.address, "/v1/pets", Some(&key)).0, 200);
    let line = served.wait_for("\"key\":\"reporting\"");
    assert!(line.contains("\"operation_id\":\"listPets\""), "{line}");
    assert_eq!(get(&served.address, "/v1/pets", Some(KEY)).0, 200);
    served.wait_for("\"key\":\"PETSTORE_API_KEYS[1]\"");
    let (_, log) = blocking(move || served.terminate()).await;
    assert!(
        !log.contains(&key) && !log.contains(KEY),
        "a key was logged"
    );
}

/// A key's scopes changed through the CLI while it sends requests: every
/// instance applies the change within seconds, each instance once and for
/// good, and no request gets anything but what the scopes of the moment say.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scopes_changed_under_traffic_take_effect_on_every_instance() {
    let mut all = vec![sqlite_instance().await];
    all.extend(postgres_instances(2).await);
    for instances in &all {
        let dir = instances._dir.path();
        let database = &instances.database;
        let (ok, key, stderr) = keys(
            dir,
            database,
            &["create", "--name", "till", "--scopes", "pets:read"],
        );
        assert!(ok, "{stderr}");
        let key = key.trim().to_owned();
        let addresses: Vec<String> = instances.served.iter().map(|s| s.address.clone()).collect();
        eventually_within("the key is accepted", KEY_CHANGE, || {
            addresses
                .iter()
                .all(|address| get(address, "/v1/pets?limit=1", Some(&key)).0 == 200)
        })
        .await;
        let traffic = {
            let (key, addresses) = (key.clone(), addresses.clone());
            Traffic::start(move |stop| {
                let mut allowed = vec![false; addresses.len()];
                // A last whole round once stopped: after the change.
                loop {
                    let stopping = stop.load(Ordering::Relaxed);
                    for (address, allowed) in addresses.iter().zip(&mut allowed) {
                        let (status, body) = get(address, "/v1/store/inventory", Some(&key));
                        match status {
                            200 => *allowed = true,
                            403 => assert!(!*allowed, "{address}: allowed, then refused again"),
                            _ => panic!("{address}: {status} {body}"),
                        }
                    }
                    if stopping {
                        return allowed;
                    }
                }
            })
        };
        let (ok, _, stderr) = keys(
            dir,
            database,
            &["scopes", "till", "pets:read,inventory:read"],
        );
        assert!(ok, "{stderr}");
        let started = Instant::now();
        eventually_within("every instance allows the inventory", KEY_CHANGE, || {
            addresses
                .iter()
                .all(|address| get(address, "/v1/store/inventory", Some(&key)).0 == 200)
        })
        .await;
        eprintln!(
            "scopes changed everywhere after {:.2} s",
            started.elapsed().as_secs_f64()
        );
        let allowed = traffic.stop().await;
        assert!(allowed.iter().all(|allowed| *allowed), "{allowed:?}");
    }
}

/// `keys create --scopes`, `keys list` and `keys scopes`, as an operator
/// uses them while a server runs: the server applies each within seconds.
#[tokio::test]
async fn scopes_are_chosen_shown_and_changed_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("pets.db").display());
    migrate(dir.path(), &database);
    let path = dir.path().to_owned();
    let url = database.clone();
    let served = blocking(move || start(&path, &url)).await;
    let (ok, key, stderr) = keys(
        dir.path(),
        &database,
        &["create", "--name", "shop-front", "--scopes", "pets:read"],
    );
    assert!(ok && stderr.contains("with scopes pets:read"), "{stderr}");
    let key = key.trim().to_owned();
    let (ok, _, stderr) = keys(dir.path(), &database, &["create", "--name", "admin"]);
    assert!(ok && stderr.contains("with scopes all"), "{stderr}");
    let address = served.address.clone();
    eventually_within("the new key is accepted", KEY_CHANGE, || {
        get(&address, "/v1/pets", Some(&key)).0 == 200
    })
    .await;
    let (status, body) = get(&address, "/v1/store/inventory", Some(&key));
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("insufficient_scope") && body.contains("inventory:read"),
        "{body}"
    );

    let (ok, list, _) = keys(dir.path(), &database, &["list"]);
    assert!(ok);
    let scopes_of = |name: &str| {
        let row = list.lines().find(|l| l.starts_with(name)).unwrap();
        row.split_whitespace().last().unwrap().to_owned()
    };
    assert!(list.lines().next().unwrap().ends_with("SCOPES"), "{list}");
    assert_eq!(scopes_of("shop-front"), "pets:read");
    assert_eq!(scopes_of("admin"), "all");

    let (ok, _, stderr) = keys(
        dir.path(),
        &database,
        &["scopes", "shop-front", "pets:read,inventory:read"],
    );
    assert!(ok && stderr.contains("before: pets:read"), "{stderr}");
    eventually_within("the new scopes are in force", KEY_CHANGE, || {
        get(&address, "/v1/store/inventory", Some(&key)).0 == 200
    })
    .await;
    for (args, expected) in [
        (
            &["create", "--name", "x", "--scopes", "pets:eat"][..],
            "\"pets:eat\" is not a scope",
        ),
        (&["create", "--name", "x", "--scopes", ""], "is not a scope"),
        (&["scopes", "nobody", "all"], "no key is named \"nobody\""),
    ] {
        let (ok, _, stderr) = keys(dir.path(), &database, args);
        assert!(!ok, "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let (ok, help, _) = keys(dir.path(), &database, &["create", "--help"]);
    assert!(ok && help.contains("Default: all"), "{help}");
    blocking(move || served.terminate()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_set_shown_and_changed_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("pets.db").display());
    migrate(dir.path(), &database);
    let (ok, key, stderr) = keys(
        dir.path(),
        &database,
        &[
            "create",
            "--name",
            "metered",
            "--rate",
            "1/h",
            "--burst",
            "3",
            "--in-flight",
            "5",
        ],
    );
    assert!(
        ok && stderr.contains("rate 1/h, burst 3, in-flight 5"),
        "{stderr}"
    );
    let key = key.trim().to_owned();
    let path = dir.path().to_owned();
    let url = database.clone();
    let served =
        blocking(move || Served::start(&path, &["--database", &url, "--rate-limits", "on"])).await;
    let address = served.address.clone();
    // A burst of 3 at 1/h: three answered, then refused.
    for _ in 0..3 {
        assert_eq!(get(&address, "/v1/pets", Some(&key)).0, 200);
    }
    let (status, body) = get(&address, "/v1/pets", Some(&key));
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("rate_limited") && body.contains("1/h"),
        "{body}"
    );

    let (ok, _, stderr) = keys(
        dir.path(),
        &database,
        &["limits", "metered", "--burst", "100"],
    );
    assert!(
        ok && stderr.contains("now has rate 1/h, burst 100, in-flight 5")
            && stderr.contains("before: rate 1/h, burst 3, in-flight 5"),
        "{stderr}"
    );
    eventually_within("the new budget is in force", KEY_CHANGE, || {
        get(&address, "/v1/pets", Some(&key)).0 == 200
    })
    .await;
    let (ok, _, stderr) = keys(
        dir.path(),
        &database,
        &["limits", "metered", "--rate", "default"],
    );
    assert!(
        ok && stderr.contains("now has rate default, burst 100"),
        "{stderr}"
    );

    let (ok, list, _) = keys(dir.path(), &database, &["list"]);
    assert!(ok);
    let header: Vec<&str> = list.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header[header.len() - 4..],
        ["RATE", "BURST", "IN-FLIGHT", "SCOPES"]
    );
    let row: Vec<&str> = list
        .lines()
        .find(|line| line.starts_with("metered"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        row[row.len() - 4..],
        ["default", "100", "5", "all"],
        "{list}"
    );
    for (args, expected) in [
        (
            &["create", "--name", "x", "--rate", "5/day"][..],
            "expected a rate such as 50/s",
        ),
        (&["create", "--name", "x", "--burst", "0"], "(or default)"),
        (
            &["limits", "nobody", "--burst", "1"],
            "no key is named \"nobody\"",
        ),
        (&["limits", "metered"], "nothing to change"),
    ] {
        let (ok, _, stderr) = keys(dir.path(), &database, args);
        assert!(!ok, "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    blocking(move || served.terminate()).await;
}

#[test]
fn keys_commands_refuse_bad_input_with_a_message_and_a_failure_exit() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("pets.db").display());
    // A file that does not exist is most likely the wrong database.
    let (ok, _, stderr) = keys(dir.path(), &database, &["create", "--name", "ops"]);
    assert!(!ok && stderr.contains("does not exist"), "{stderr}");
    assert!(!dir.path().join("pets.db").exists(), "nothing was created");
    migrate(dir.path(), &database);
    let (ok, _, stderr) = keys(dir.path(), &database, &["create", "--name", "ops"]);
    assert!(
        stderr.contains(&format!("database: {database}")),
        "{stderr}"
    );
    assert!(ok, "{stderr}");
    // 2: the command line refuses it; 1: only the database can tell.
    for (args, status, expected) in [
        (&["create", "--name", "ops"][..], 1, "already exists"),
        (&["create", "--name", "two words"], 2, "--name <NAME>"),
        (&["create", "--name", &"x".repeat(65)], 2, "1 to 64 letters"),
        (
            &["create", "--name", "x", "--expires-in", "soon"],
            2,
            "--expires-in",
        ),
        (
            &["create", "--name", "x", "--expires-in", "0s"],
            2,
            "at least one second",
        ),
        (&["revoke", "nobody"], 1, "no key is named \"nobody\""),
    ] {
        let (output, _, stderr) = run(petstore(dir.path())
            .arg("keys")
            .args(args)
            .args(["--database", &database]));
        assert_eq!(output.status.code(), Some(status), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let (ok, _, stderr) = keys(dir.path(), &database, &["revoke", "ops"]);
    assert!(ok && stderr.contains("revoked"), "{stderr}");
    let (ok, _, stderr) = keys(dir.path(), &database, &["revoke", "ops"]);
    assert!(ok && stderr.contains("already revoked"), "{stderr}");
}

#[test]
fn a_server_with_only_stored_keys_starts_and_one_with_none_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("pets.db").display());
    let serve = |dir: &Path| {
        let mut command = petstore(dir);
        command.args(["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"]);
        command.args(["--database", &database]);
        command
    };
    let (output, _, stderr) = run(&mut serve(dir.path()));
    assert!(!output.status.success());
    assert!(stderr.contains("no usable API key"), "{stderr}");
    assert!(!dir.path().join("pets.db").exists(), "nothing was created");
    migrate(dir.path(), &database);
    let (output, _, stderr) = run(&mut serve(dir.path()));
    assert!(!output.status.success(), "an empty database has no key");
    assert!(stderr.contains("no usable API key"), "{stderr}");
    let (ok, _, _) = keys(dir.path(), &database, &["create", "--name", "only"]);
    assert!(ok);
    let (ok, _, _) = keys(dir.path(), &database, &["revoke", "only"]);
    assert!(ok);
    let (output, _, stderr) = run(&mut serve(dir.path()));
    assert!(!output.status.success(), "revoked keys do not count");
    assert!(stderr.contains("no usable API key"), "{stderr}");
    let (ok, key, _) = keys(dir.path(), &database, &["create", "--name", "live"]);
    assert!(ok);
    let served = Served::spawn(&mut serve(dir.path()));
    assert_eq!(get(&served.address, "/v1/pets", Some(key.trim())).0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_a_database_outage_and_healthz_stays_up() {
    let Some(cluster) = petstore_support::postgres::own_cluster().await else {
        return;
    };
    let database = cluster.fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let url = database.url().to_owned();
    let served = blocking(move || start(&path, &url)).await;
    let admin = served
        .admin_address
        .clone()
        .expect("the admin listener is on");
    assert_eq!(get(&admin, "/readyz", None), (200, "ready\n".into()));
    let stopping = cluster.clone();
    blocking(move || stopping.stop()).await;
    eventually_within("readyz says 503", OUTAGE, || {
        get(&admin, "/readyz", None).0 == 503
    })
    .await;
    let (_, body) = get(&admin, "/readyz", None);
    assert!(body.starts_with("not ready: "), "{body}");
    assert_eq!(get(&admin, "/healthz", None).0, 200);
    let restarting = cluster.clone();
    blocking(move || restarting.restart()).await;
    eventually_within("readyz says 200 again", OUTAGE, || {
        get(&admin, "/readyz", None).0 == 200
    })
    .await;
    drop(served);
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_and_count_what_happened() {
    let instances = sqlite_instance().await;
    let served = &instances.served[0];
    let admin = served.admin_address.clone().unwrap();
    let (status, _) = served.request("POST", "/v1/pets", KEY, r#"{"name":"Rex","categoryId":1}"#);
    assert!(status.contains("201"), "{status}");
    for _ in 0..3 {
        assert_eq!(get(&served.address, "/v1/pets", Some(KEY)).0, 200);
    }
    assert_eq!(get(&served.address, "/v1/pets", Some("wrong")).0, 401);
    assert_eq!(
        get(&served.address, "/v1/pets?limit=zero", Some(KEY)).0,
        400
    );
    assert_eq!(get(&served.address, "/nowhere", Some(KEY)).0, 404);
    // The counts are made as each request completes; wait for the last.
    let scrape = || {
        let (status, body) = get(&admin, "/metrics", None);
        assert_eq!(status, 200);
        let lines = body.lines().map(|line| Ok(line.to_owned()));
        prometheus_parse::Scrape::parse(lines).expect("Prometheus text")
    };
    let value = |scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    eventually("the 404 is counted", || {
        value(
            &scrape(),
            "petstore_http_requests_total",
            &[("operation", "none"), ("status", "404")],
        ) == Some(1.0)
    })
    .await;
    let s = scrape();
    let count = |op, status| {
        value(
            &s,
            "petstore_http_requests_total",
            &[("operation", op), ("status", status)],
        )
    };
    assert_eq!(count("createPet", "201"), Some(1.0));
    assert_eq!(count("listPets", "200"), Some(3.0));
    assert_eq!(count("listPets", "401"), Some(1.0));
    assert_eq!(count("listPets", "400"), Some(1.0));
    assert_eq!(
        value(&s, "petstore_auth_rejected_total", &[("reason", "unknown")]),
        Some(1.0)
    );
    assert_eq!(value(&s, "petstore_pets", &[]), Some(1.0));
    assert_eq!(
        value(
            &s,
            "petstore_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    assert!(value(&s, "petstore_max_fds", &[]).unwrap() > 0.0);
    assert!(value(&s, "petstore_open_sockets", &[]).unwrap() >= 2.0);
    // The log is read as it is written: nothing dropped.
    assert_eq!(
        value(&s, "petstore_log_records_dropped_total", &[]),
        Some(0.0)
    );
    let histogram = s
        .samples
        .iter()
        .find(|s| {
            s.metric == "petstore_http_request_duration_seconds"
                && s.labels.get("operation") == Some("listPets")
        })
        .expect("a latency histogram");
    assert!(matches!(
        histogram.value,
        prometheus_parse::Value::Histogram(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_the_client_and_curl_and_a_renewed_certificate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (first_ca, first_cert, first_key) = certificate_authority(dir.path(), "first");
    let (second_ca, second_cert, second_key) = certificate_authority(dir.path(), "second");
    let live_cert = dir.path().join("live.crt");
    let live_key = dir.path().join("live.key");
    std::fs::copy(&first_cert, &live_cert).unwrap();
    std::fs::copy(&first_key, &live_key).unwrap();
    let path = dir.path().to_owned();
    let (cert_arg, key_arg) = (
        live_cert.display().to_string(),
        live_key.display().to_string(),
    );
    let served =
        blocking(move || Served::start(&path, &["--tls-cert", &cert_arg, "--tls-key", &key_arg]))
            .await;
    let base = format!("https://{}/v1", served.address);

    // The generated client, trusting the first CA; it keeps its connection.
    let client = petstore_client::Client::new_with_client(&base, trusting(&first_ca));
    let rex = client
        .create_pet()
        .body_map(|pet| pet.name("Rex".to_owned()).category_id(1))
        .send()
        .await
        .expect("a create over HTTPS");
    assert_eq!(rex.name.as_str(), "Rex");

    // curl, trusting the first CA.
    let auth = format!("Authorization: Bearer {KEY}");
    let curl = |ca: &str| {
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca).unwrap();
        Command::new("curl")
            .args([
                "--max-time",
                "60",
                "--silent",
                "--show-error",
                "--fail",
                "--cacert",
            ])
            .arg(&ca_file)
            .args(["-H", &auth])
            .arg(format!("{base}/pets"))
            .output()
            .expect("curl runs")
    };
    let output = curl(&first_ca);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("Rex"));

    // Renewal: new files, then SIGHUP. New connections get the new
    // certificate; the established one goes on.
    std::fs::copy(&second_cert, &live_cert).unwrap();
    std::fs::copy(&second_key, &live_key).unwrap();
    served.child.signal("HUP").unwrap();
    let served = served.log_line("reloaded the TLS certificate").await;
    let output = curl(&second_ca);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !curl(&first_ca).status.success(),
        "new connections get the new certificate"
    );
    let pets = client
        .list_pets()
        .send()
        .await
        .expect("the established connection survives the renewal");
    assert_eq!(pets.len(), 1);
    let renewed = petstore_client::Client::new_with_client(&base, trusting(&second_ca));
    assert_eq!(renewed.list_pets().send().await.unwrap().len(), 1);

    // A broken renewal keeps the certificate in use.
    std::fs::write(&live_cert, "garbage").unwrap();
    served.child.signal("HUP").unwrap();
    let served = served.log_line("was not reloaded").await;
    assert!(curl(&second_ca).status.success());
    drop(served);
}

/// The edge serves the rate limiter's layer over TLS as over plain HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_served_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificate_authority(dir.path(), "limited");
    let path = dir.path().to_owned();
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let served = blocking(move || {
        Served::start(
            &path,
            &[
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--rate-limits",
                "on",
                "--key-rate",
                "1/min",
                "--key-burst",
                "1",
            ],
        )
    })
    .await;
    let client = trusting(&ca);
    let url = format!("https://{}/v1/pets", served.address);
    let first = client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().contains_key("ratelimit"), "{first:?}");
    let second = client.get(&url).send().await.unwrap();
    assert_eq!(second.status(), 429);
    assert!(second.headers().contains_key("retry-after"), "{second:?}");
    let error: serde_json::Value = second.json().await.unwrap();
    assert_eq!(error["code"], "rate_limited", "{error}");
    drop(served);
}

#[test]
fn unusable_tls_files_are_clear_start_up_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, key) = certificate_authority(dir.path(), "ok");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let missing = dir.path().join("missing.pem");
    for (cert, key, expected) in [
        (&missing, &key, "cannot read the TLS certificate"),
        (&cert, &missing, "cannot read the TLS key"),
        (&garbage, &key, "holds no PEM certificate"),
        (&cert, &garbage, "not usable"),
        (&key, &cert, "holds no PEM certificate"),
    ] {
        let (output, _, stderr) = run(petstore(dir.path())
            .args(["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .env("PETSTORE_API_KEYS", KEY));
        assert!(!output.status.success());
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
    let (output, _, stderr) = run(petstore(dir.path())
        .args(["serve", "--bind", "127.0.0.1:0", "--tls-cert"])
        .arg(&cert)
        .env("PETSTORE_API_KEYS", KEY));
    assert!(!output.status.success());
    assert!(stderr.contains("both a certificate and a key"), "{stderr}");
    assert!(
        !dir.path().join("petstore.db").exists(),
        "nothing was created"
    );
}

#[test]
fn unusable_webhook_key_files_are_clear_start_up_errors_before_anything_is_written() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let made = webhook_key(dir.path(), "made.key");
    let open_to_others = dir.path().join("open.key");
    std::fs::copy(&made, &open_to_others).unwrap();
    std::fs::set_permissions(&open_to_others, std::fs::Permissions::from_mode(0o644)).unwrap();
    let private = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    };
    let malformed = private("malformed.key", "1:not base64\n");
    let empty = private("empty.key", "# no key yet\n");
    for (file, expected) in [
        (
            dir.path().join("missing.key"),
            "cannot read the webhook key file",
        ),
        (open_to_others, "open to its group or to others (mode 644)"),
        (malformed, "line 1"),
        (empty, "has no key"),
    ] {
        let flags = [OsStr::new("--webhook-key-file"), file.as_os_str()];
        let stderr = refused_start(dir.path(), &flags);
        assert!(stderr.contains(expected), "{expected}: {stderr}");
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(stderr.contains(name), "names the file: {stderr}");
        assert_eq!(stderr.matches("webhook key file").count(), 1, "{stderr}");
    }
}

/// `petstore-server serve` in `dir` with `flags`, refused at start: its
/// stderr, once it has exited 1 having made no database.
fn refused_start(dir: &Path, flags: &[&OsStr]) -> String {
    let (output, _, stderr) = run(petstore(dir)
        .args(["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"])
        .args(flags)
        .env("PETSTORE_API_KEYS", KEY));
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(!dir.join("petstore.db").exists(), "nothing was created");
    stderr
}

#[test]
fn sqlite_makes_its_webhook_key_file_beside_the_database_once_and_keeps_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let made = dir.path().join("petstore.db.webhook-key");
    let (status, _) = Served::start(dir.path(), &[]).terminate();
    assert!(status.success());
    let mode = std::fs::metadata(&made)
        .expect("made at start")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "readable by its owner only");
    let keys = std::fs::read(&made).unwrap();
    let (status, _) = Served::start(dir.path(), &[]).terminate();
    assert!(status.success());
    assert_eq!(std::fs::read(&made).unwrap(), keys, "kept, not made again");

    // One that others may read is refused, before a database is made.
    let fresh = tempfile::tempdir().unwrap();
    let open = fresh.path().join("petstore.db.webhook-key");
    std::fs::write(&open, &keys).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let stderr = refused_start(fresh.path(), &[]);
    assert!(
        stderr.contains("open to its group or to others"),
        "{stderr}"
    );
}

/// `serve` on `database` with `flags`, expected to refuse to start: its
/// stderr.
fn refused_serve(dir: &Path, database: &str, flags: &[&OsStr]) -> String {
    let (output, _, stderr) = run(petstore(dir)
        .args(["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"])
        .args(["--database", database])
        .args(flags)
        .env("PETSTORE_API_KEYS", KEY));
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    stderr
}

/// An instance whose key file does not open the signing secrets stored
/// (another file's, on either backend; or SQLite's default file lost) is
/// refused at start, naming the file and a subscription, rather than
/// serving and failing every delivery it claims. The right file still
/// starts.
#[tokio::test]
async fn a_key_file_that_does_not_open_the_stored_secrets_refuses_start() {
    let (_sqlite_dir, databases) = sqlite_and_postgres().await;
    for (database, _postgres) in &databases {
        let dir = tempfile::tempdir().unwrap();
        let sealing = webhook_key(dir.path(), "sealing.key");
        let other = webhook_key(dir.path(), "other.key");
        let served = serve_with_key_file(dir.path(), database, &sealing, &[]).await;
        let id = subscribe(&served.address, KEY, "http://127.0.0.1:9/hook")["id"]
            .as_i64()
            .unwrap();
        let (status, _) = served.terminate();
        assert!(status.success());

        let flags = [OsStr::new("--webhook-key-file"), other.as_os_str()];
        let stderr = refused_serve(dir.path(), database, &flags);
        let named = format!(
            "the webhook key file {} does not open the signing secret of webhook subscription {id}",
            other.display()
        );
        assert!(stderr.contains(&named), "{stderr}");
        assert!(stderr.contains("the same --webhook-key-file"), "{stderr}");
        let served = serve_with_key_file(dir.path(), database, &sealing, &[]).await;
        let (status, _) = served.terminate();
        assert!(status.success(), "the file that sealed them starts");
    }

    // SQLite's default file, lost: not made anew over the secrets it sealed.
    let dir = tempfile::tempdir().unwrap();
    let default_file = dir.path().join("petstore.db.webhook-key");
    let path = dir.path().to_owned();
    let served =
        blocking(move || Served::start(&path, &["--webhook-allow-private-targets", "on"])).await;
    subscribe(&served.address, KEY, "http://127.0.0.1:9/hook");
    let (status, _) = served.terminate();
    assert!(status.success());
    std::fs::remove_file(&default_file).unwrap();
    let stderr = refused_serve(dir.path(), "sqlite://petstore.db", &[]);
    // Named as the database is, relative to the working directory.
    let named = "the webhook key file petstore.db.webhook-key is missing";
    assert!(stderr.contains(named), "{stderr}");
    assert!(
        !default_file.exists(),
        "no new key file over the old secrets"
    );
}

/// A signing secret is stored sealed: with a subscription made and its
/// secret rotated (so that two are stored), the database holds neither
/// secret in any form (its base64, padded or not, standard or URL-safe; its
/// 32 bytes; those as hex), though it holds the subscription. Read as
/// someone with the database alone would: every file of SQLite's (its WAL
/// too), every row of every table of PostgreSQL's as text.
#[tokio::test]
async fn the_database_alone_holds_no_signing_secret() {
    let (sqlite_dir, databases) = sqlite_and_postgres().await;
    for (database, postgres) in &databases {
        let (_dir, served) = serve_with_new_key_file(database).await;
        let hook = "http://127.0.0.1:9/sealed-hook";
        let made = subscribe(&served.address, KEY, hook);
        let rotate = format!("/v1/webhooks/{}/rotate", made["id"]);
        let (status, answer) = common::raw_request(&served.address, "POST", &rotate, Some(KEY), "");
        assert!(status.contains(" 200 "), "{status}: {answer}");
        let rotated: serde_json::Value = serde_json::from_str(&answer).unwrap();
        // Stopped: SQLite's last writes are in its files.
        let (status, _) = served.terminate();
        assert!(status.success());

        let stored = match postgres {
            None => stored_files(sqlite_dir.path()),
            Some(postgres) => stored_rows(postgres.url()).await,
        };
        assert!(
            contains(&stored, hook.as_bytes()),
            "the subscription is stored"
        );
        for answer in [made, rotated] {
            let secret = answer["secret"].as_str().unwrap();
            let encoded = secret.strip_prefix("whsec_").unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap();
            assert_eq!(bytes.len(), 32);
            let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
            let unpadded = encoded.trim_end_matches('=');
            let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes);
            let upper_hex = hex.to_uppercase();
            let forms = [
                unpadded.as_bytes(),
                url_safe.as_bytes(),
                &bytes,
                hex.as_bytes(),
                upper_hex.as_bytes(),
            ];
            for form in forms {
                let backend = if postgres.is_some() {
                    "PostgreSQL"
                } else {
                    "SQLite"
                };
                assert!(!contains(&stored, form), "{backend} holds a secret");
            }
        }
    }
}

/// Every byte of every file in `dir`.
fn stored_files(dir: &Path) -> Vec<u8> {
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        stored.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    stored
}

/// Every row of every table of the schema at `url`, as PostgreSQL writes
/// it as text (`bytea` as hex).
async fn stored_rows(url: &str) -> Vec<u8> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let tables = client
        .query(
            "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = current_schema()",
            &[],
        )
        .await
        .unwrap();
    let mut stored = Vec::new();
    for table in tables {
        let sql = format!("SELECT t::text FROM {} AS t", table.get::<_, String>(0));
        for row in client.query(&sql, &[]).await.unwrap() {
            stored.extend(row.get::<_, String>(0).into_bytes());
        }
    }
    stored
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Deliveries go over https, checked against the system's roots (here the
/// test's own authority, in `SSL_CERT_FILE`, which the native roots that
/// rustls loads honour): a receiver whose certificate they trust gets the
/// event, signed; one whose certificate they do not trust gets no request,
/// and its delivery records why.
#[tokio::test]
async fn deliveries_go_over_https_to_receivers_whose_certificate_the_system_trusts() {
    use petstore_support::receiver::{Answer, Receiver};
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificate_authority(dir.path(), "receiver");
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, ca).unwrap();
    let (_, stranger_cert, stranger_key) = certificate_authority(dir.path(), "stranger");
    let tls = |cert, key| petstore_server::tls::TlsFiles { cert, key }.load().unwrap();
    let trusted = Receiver::start_tls(tls(cert, key), |_, _| Answer::Status(200)).await;
    let stranger =
        Receiver::start_tls(tls(stranger_cert, stranger_key), |_, _| Answer::Status(200)).await;
    let path = dir.path().to_owned();
    let served = blocking(move || {
        Served::spawn(
            petstore(&path)
                .args(["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"])
                .args(["--database", "sqlite://pets.db"])
                .args(["--webhook-allow-private-targets", "on"])
                .env("PETSTORE_API_KEYS", KEY)
                .env("SSL_CERT_FILE", &roots)
                // Only that file: with a directory too, both are read.
                .env_remove("SSL_CERT_DIR"),
        )
    })
    .await;
    let made = subscribe(&served.address, KEY, &trusted.url("/hook"));
    let refused = subscribe(&served.address, KEY, &stranger.url("/hook"));
    let pet = r#"{"name": "Rex", "categoryId": 1, "status": "available"}"#;
    let (status, answer) = common::raw_request(&served.address, "POST", "/v1/pets", Some(KEY), pet);
    assert!(status.contains(" 201 "), "{status}: {answer}");

    // Only a hang guard: each wait ends as soon as its condition holds.
    let deadline = Duration::from_secs(60);
    let delivered = eventually_some("the trusted receiver got the event", deadline, || async {
        trusted
            .received()
            .into_iter()
            .find(|got| got.answered == 200)
    })
    .await;
    assert_eq!(delivered.json()["type"], "pet.created");
    let secret = made["secret"].as_str().unwrap();
    petstore_client::verify_webhook(secret, &delivered.headers, &delivered.body)
        .expect("signed with the subscription's secret");
    let deliveries = format!("/v1/webhooks/{}/deliveries", refused["id"]);
    let last_error = eventually_some(
        "the other delivery's failure recorded",
        deadline,
        || async {
            let (_, body) = get(&served.address, &deliveries, Some(KEY));
            let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
            listed[0]["lastError"].as_str().map(str::to_owned)
        },
    )
    .await;
    assert!(stranger.received().is_empty(), "{last_error}");
    assert!(
        last_error.contains("invalid peer certificate: UnknownIssuer"),
        "{last_error}"
    );
}

/// On PostgreSQL, an instance started with another key file before any
/// subscription existed (so start-up had nothing to check) cannot sign
/// the deliveries of one made since through an instance with the right
/// file. What it claims it leaves, unrecorded and not blamed on the
/// receiver, to an instance that can sign once the lease runs out; the
/// subscription stays active.
#[tokio::test]
async fn an_instance_that_cannot_sign_leaves_the_deliveries_to_one_that_can() {
    let Some(postgres) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let receiver = petstore_support::receiver::Receiver::healthy().await;
    // A lease of 6 s: the request's 1 s and the margin.
    let serve_with = |key_file: std::path::PathBuf| {
        let (dir, database) = (dir.path().to_owned(), postgres.url().to_owned());
        async move {
            serve_with_key_file(&dir, &database, &key_file, &["--webhook-timeout", "1s"]).await
        }
    };
    let other = serve_with(webhook_key(dir.path(), "other.key")).await;
    let sealing_key = webhook_key(dir.path(), "sealing.key");
    let sealing = serve_with(sealing_key.clone()).await;
    let id = subscribe(&sealing.address, KEY, &receiver.url("/hook"))["id"]
        .as_i64()
        .unwrap();
    let (status, _) = sealing.terminate();
    assert!(status.success());

    let pet = r#"{"name": "Rex", "categoryId": 1}"#;
    let (created, _) = common::raw_request(&other.address, "POST", "/v1/pets", Some(KEY), pet);
    assert!(created.contains(" 201 "), "{created}");
    let other = other
        .log_line("cannot open a webhook's signing secret")
        .await;
    let deliveries = format!("/v1/webhooks/{id}/deliveries");
    let (_, page) = get(&other.address, &deliveries, Some(KEY));
    let page: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(page[0]["state"], "sending", "left under its lease: {page}");
    assert_eq!(page[0]["attempts"], 0, "nothing was sent: {page}");
    assert!(page[0].get("lastError").is_none(), "{page}");

    let sealing = serve_with(sealing_key).await;
    let deadline = Duration::from_secs(60);
    let received = eventually_some("delivered by the one that can sign", deadline, || async {
        receiver.received().into_iter().find(|r| r.answered == 200)
    })
    .await;
    assert_eq!(
        received.headers["webhook-id"],
        page[0]["eventId"].as_str().unwrap()
    );
    let (_, subscription) = get(&sealing.address, &format!("/v1/webhooks/{id}"), Some(KEY));
    assert!(
        subscription.contains(r#""state":"active""#),
        "{subscription}"
    );
    assert!(other.terminate().0.success());
    assert!(sealing.terminate().0.success());
}

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");

#[test]
fn the_example_configuration_file_is_valid_and_says_what_it_sets() {
    let dir = tempfile::tempdir().unwrap();
    let file = format!("{DEPLOY}/petstore-server.toml");
    let (output, stdout, stderr) = run(petstore(dir.path()).args(["config", "check", &file]));
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("admin_bind = \"127.0.0.1:9090\"  # file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("database = \"sqlite:///var/lib/petstore/petstore.db\"  # file"),
        "{stdout}"
    );
}

#[test]
fn configuration_precedence_is_flag_then_environment_then_file_then_default() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("petstore.toml");
    std::fs::write(
        &file,
        "bind = \"127.0.0.1:7001\"\nadmin_bind = \"off\"\nlog_level = \"warn\"\n\
         database = \"postgres://pets:hunter2@db.internal/pets\"\n",
    )
    .unwrap();
    let (output, stdout, stderr) = run(petstore(dir.path())
        .args(["config", "check"])
        .arg(&file)
        .env("PETSTORE_LOG_LEVEL", "error"));
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("bind = \"127.0.0.1:7001\"  # file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("log_level = \"error\"  # environment"),
        "{stdout}"
    );
    assert!(
        stdout.contains("shutdown_timeout = 30  # default"),
        "{stdout}"
    );
    assert!(stdout.contains("pets:***@db.internal"), "{stdout}");
    assert!(
        !stdout.contains("hunter2"),
        "the password is masked: {stdout}"
    );
    // A flag wins over both: the server really binds where the flag says.
    let served = Served::start(
        dir.path(),
        &[
            "--config",
            file.to_str().unwrap(),
            "--database",
            "sqlite://pets.db",
            "--log-level",
            "info",
        ],
    );
    assert_ne!(served.address, "127.0.0.1:7001");
    assert!(
        served.admin_address.is_some(),
        "the flag's admin listener is on"
    );
    let mut with_env = Served::spawn(
        petstore(dir.path())
            .args(["serve", "--config", file.to_str().unwrap()])
            .args(["--database", "sqlite://pets2.db"])
            .env("PETSTORE_BIND", "127.0.0.1:0")
            .env("PETSTORE_LOG_LEVEL", "info")
            .env("PETSTORE_API_KEYS", KEY),
    );
    assert_ne!(
        with_env.address, "127.0.0.1:7001",
        "the environment beats the file"
    );
    assert!(
        with_env.admin_address.is_none(),
        "the file turned the admin listener off"
    );
    drop(with_env.child.signal("TERM"));
    with_env.wait_for("stopped");
}

#[test]
fn configuration_mistakes_name_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        ("bnid = \"127.0.0.1:1\"\n", "unknown field `bnid`"),
        ("bind = \"nowhere\"\n", "key `bind`"),
        ("log_level = \"loud\"\n", "key `log_level`"),
        ("database_pool_size = 0\n", "key `database_pool_size`"),
        ("database = \"mysql://x/y\"\n", "key `database`"),
        ("api_keys = [\"secret\"]\n", "`api_keys` is not a setting"),
        ("tls_cert = \"/x.pem\"\n", "both a certificate and a key"),
        ("bind = [\n", "petstore.toml"),
        // The contract promises clients 24 hours.
        ("idempotency_retention = \"1h\"\n", "shorter than 24h"),
        (
            "idempotency_retention = \"soon\"\n",
            "key `idempotency_retention`",
        ),
    ] {
        let file = dir.path().join("petstore.toml");
        std::fs::write(&file, text).unwrap();
        for command in [&["config", "check"][..], &["serve", "--config"]] {
            let (output, _, stderr) = run(petstore(dir.path())
                .args(command)
                .arg(&file)
                .env("PETSTORE_API_KEYS", KEY));
            assert!(!output.status.success(), "{text}");
            assert!(stderr.contains(expected), "{text}: {stderr}");
            assert!(stderr.contains("petstore.toml"), "names the file: {stderr}");
            // What it expects instead lists settings, never a refused key.
            let lists_api_keys =
                stderr.contains("expected one of") && stderr.contains("`api_keys`");
            assert!(!lists_api_keys, "{stderr}");
        }
    }
    let (output, _, stderr) = run(petstore(dir.path()).args(["config", "check", "missing.toml"]));
    assert!(!output.status.success());
    assert!(
        stderr.contains("cannot read the configuration file missing.toml"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("petstore.db").exists(),
        "nothing was created"
    );
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let Some(analyze) = tool("/usr/bin/systemd-analyze") else {
        return;
    };
    let unit = std::fs::read_to_string(format!("{DEPLOY}/petstore-server.service")).unwrap();
    for directive in [
        "User=petstore",
        "ProtectSystem=strict",
        "StateDirectory=petstore",
        "Restart=on-failure",
        "KillSignal=SIGTERM",
    ] {
        assert!(unit.contains(directive), "{directive}");
    }
    // Only the binary's path changes: verify checks that it exists.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("petstore-server.service");
    std::fs::write(
        &local,
        unit.replace("/usr/local/bin/petstore-server", common::BIN),
    )
    .unwrap();
    let mut verify = Command::new(analyze);
    verify.arg("verify").arg(&local);
    let output = petstore_support::output_within(&mut verify, Duration::from_secs(120)).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_nginx_two_thousand_idle_connections_do_not_stop_a_normal_client() {
    let Some(nginx) = tool("/usr/sbin/nginx") else {
        return;
    };
    const IDLE: usize = 2_000;
    // The server may hold far fewer descriptors than there are idle
    // connections: straight to it, they would exhaust its limit.
    const SERVER_FILES: u64 = 768;
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let served = {
        let path = dir.path().to_owned();
        blocking(move || {
            Served::spawn(
                Command::new("prlimit")
                    .arg(format!("--nofile={SERVER_FILES}:{SERVER_FILES}"))
                    .arg("--")
                    .arg(common::BIN)
                    .args([
                        "serve",
                        "--bind",
                        "127.0.0.1:0",
                        "--admin-bind",
                        "127.0.0.1:0",
                    ])
                    .current_dir(&path)
                    .env("PETSTORE_API_KEYS", KEY),
            )
        })
        .await
    };
    let (ca, cert, key) = certificate_authority(dir.path(), "proxy");
    let proxy = petstore_support::free_loopback_addr().unwrap();
    let site = std::fs::read_to_string(format!("{DEPLOY}/nginx-petstore.conf")).unwrap();
    let mut local_site = site.clone();
    for (from, to) in [
        (
            "server 127.0.0.1:8080 max_conns=256;",
            format!("server {} max_conns=256;", served.address),
        ),
        ("listen 443 ssl;", format!("listen {proxy} ssl;")),
        (
            "/etc/petstore/tls/fullchain.pem",
            cert.display().to_string(),
        ),
        ("/etc/petstore/tls/privkey.pem", key.display().to_string()),
    ] {
        assert!(local_site.contains(from), "the shipped file has {from}");
        local_site = local_site.replace(from, &to);
    }
    let prefix = dir.path();
    std::fs::write(prefix.join("petstore.conf"), local_site).unwrap();
    let temp = |name: &str| format!("{name}_temp_path {};", prefix.join(name).display());
    std::fs::write(
        prefix.join("nginx.conf"),
        format!(
            // One process, so that stopping it leaves nothing behind.
            "daemon off;\nmaster_process off;\n\
             pid {pid};\nerror_log stderr crit;\nworker_rlimit_nofile 16384;\n\
             events {{ worker_connections 8192; }}\n\
             http {{\n  access_log off;\n  {} {} {} {} {}\n  include {site};\n}}\n",
            temp("client_body"),
            temp("proxy"),
            temp("fastcgi"),
            temp("uwsgi"),
            temp("scgi"),
            pid = prefix.join("nginx.pid").display(),
            site = prefix.join("petstore.conf").display(),
        ),
    )
    .unwrap();
    let _nginx = petstore_support::ChildGuard::spawn(
        "nginx",
        Command::new(nginx)
            .arg("-p")
            .arg(prefix)
            .arg("-c")
            .arg(prefix.join("nginx.conf")),
    )
    .unwrap();
    let client = trusting(&ca);
    let url = format!("https://{proxy}/v1/pets");
    eventually_within("nginx answers", Duration::from_secs(60), || {
        std::net::TcpStream::connect(proxy).is_ok()
    })
    .await;
    let ok = |client: reqwest::Client, url: String| async move {
        client.get(&url).send().await.map(|r| r.status().as_u16())
    };
    assert_eq!(ok(client.clone(), url.clone()).await.unwrap(), 200);

    let idle: Vec<std::net::TcpStream> = blocking(move || {
        (0..IDLE)
            .map(|_| std::net::TcpStream::connect(proxy).expect("nginx accepts"))
            .collect()
    })
    .await;
    // A new client, on new connections, is still served, and the server
    // itself holds far fewer sockets than the idle peers.
    let fresh = trusting(&ca);
    assert_eq!(ok(fresh, url.clone()).await.unwrap(), 200);
    let admin = served.admin_address.clone().unwrap();
    let (_, metrics) = get(&admin, "/metrics", None);
    let gauge = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|value| value.parse().ok())
            .unwrap()
    };
    assert_eq!(gauge("petstore_max_fds"), SERVER_FILES as f64);
    assert!(gauge("petstore_open_sockets") < SERVER_FILES as f64 / 2.0);
    // nginx's own refusals keep the contract's error shape.
    let big = client
        .post(&url)
        .body(vec![b'x'; 100 * 1024])
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 413);
    let body: serde_json::Value = big.json().await.unwrap();
    assert_eq!(body["code"], "payload_too_large");

    // An idle connection is closed by nginx after its 10 s header timeout
    // (nginx's default would be 60 s; 45 s is only a guard).
    let mut first = idle.into_iter().next().unwrap();
    let closed = blocking(move || {
        use std::io::Read;
        first
            .set_read_timeout(Some(std::time::Duration::from_secs(45)))
            .unwrap();
        first.read(&mut [0u8; 16])
    })
    .await;
    assert!(
        matches!(closed, Ok(0))
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the idle connection was not closed by nginx: {closed:?}"
    );
}

#[test]
fn the_contract_and_the_docs_page_are_served_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expected) in [(&[][..], "200"), (&["--docs", "off"][..], "404")] {
        let served = Served::start(dir.path(), args);
        for path in ["/openapi.yaml", "/openapi.json", "/docs/"] {
            let (status, body) = common::raw_request(&served.address, "GET", path, None, "");
            assert!(
                status.contains(expected),
                "{args:?} {path}: {status} {body}"
            );
        }
        // The pet API is there either way.
        let (status, _) = served.request("GET", "/v1/pets", KEY, "");
        assert!(status.contains("200"), "{status}");
        let (exit, log) = served.terminate();
        assert!(exit.success(), "{log}");
    }
}
