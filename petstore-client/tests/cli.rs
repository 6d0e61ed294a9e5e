//! The `petstore` command (feature `cli`) run as a user runs it, against the
//! real server over real HTTP: what it prints on stdout and stderr, and its
//! exit status.
//!
//! (The end-to-end crate, `petstore-tests`, enables the `cli` feature, so
//! these tests run whenever the workspace's tests do.)

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use httpmock::{Method, Mock, MockServer};
use petstore_support::{ChildGuard, blocking, without_petstore_settings};
use petstore_tests::{KEY, TestServer};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

/// What one run of the command did.
#[derive(Debug)]
struct Run {
    /// The exit status (`None`: killed by a signal).
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Stdout as JSON, insisting on success.
    fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "{self:#?}");
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }

    /// Insists on failure with exit status `code`, nothing on stdout, and
    /// `needles` on stderr.
    fn fails(&self, code: i32, needles: &[&str]) {
        assert_eq!(self.code, Some(code), "{self:#?}");
        assert_eq!(self.stdout, "", "{self:#?}");
        for needle in needles {
            assert!(self.stderr.contains(needle), "no {needle:?} in {self:#?}");
        }
    }
}

/// Runs `petstore args…` with `PETSTORE_URL` set to `url` and
/// `PETSTORE_API_KEY` to `key`, and no other `PETSTORE_*` setting of ours.
async fn petstore_at(url: &str, key: Option<&str>, args: &[&str]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_petstore"));
    without_petstore_settings(&mut command)
        .env("PETSTORE_URL", url)
        .args(args);
    if let Some(key) = key {
        command.env("PETSTORE_API_KEY", key);
    }
    // Only a hang guard: the command ends as soon as it is answered.
    let deadline = std::time::Duration::from_secs(120);
    let output = blocking(move || petstore_support::output_within(&mut command, deadline))
        .await
        .expect("petstore runs");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

/// Runs `petstore args…` against `server` with the key it accepts.
async fn petstore(server: &TestServer, args: &[&str]) -> Run {
    petstore_at(&server.url(""), Some(KEY), args).await
}

/// The ids of a JSON array of animals.
fn ids(pets: &Value) -> Vec<i64> {
    pets.as_array()
        .expect("an array")
        .iter()
        .map(|pet| pet["id"].as_i64().expect("an id"))
        .collect()
}

#[tokio::test]
async fn create_prints_the_stored_animal() {
    let server = TestServer::start().await;
    let created = petstore(
        &server,
        &[
            "pets",
            "create",
            "--name",
            "Rex",
            "--category-id",
            "3",
            "--status",
            "sold",
        ],
    )
    .await
    .json();
    assert_eq!(created["name"], "Rex");
    assert_eq!(created["categoryId"], 3);
    assert_eq!(created["status"], "sold");
    assert_eq!(server.read(&created["id"]).await, created);
}

#[tokio::test]
async fn create_takes_the_body_from_a_file() {
    let server = TestServer::start().await;
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(file.path(), r#"{"name": "Tom", "categoryId": 2}"#).expect("written");
    let created = petstore(
        &server,
        &[
            "pets",
            "create",
            "--json-body",
            file.path().to_str().unwrap(),
        ],
    )
    .await
    .json();
    assert_eq!(created["name"], "Tom");
    assert_eq!(server.read(&created["id"]).await, created);
}

#[tokio::test]
async fn create_with_an_idempotency_key_happens_once() {
    let server = TestServer::start().await;
    let create = [
        "pets",
        "create",
        "--name",
        "Max",
        "--category-id",
        "1",
        "--idempotency-key",
        "cli-once-1",
    ];
    let first = petstore(&server, &create).await.json();
    let again = petstore(&server, &create).await.json();
    assert_eq!(again, first);
    assert_eq!(
        ids(&json!(server.list("?limit=100").await)),
        [first["id"].as_i64().unwrap()]
    );
}

#[tokio::test]
async fn list_applies_the_filters() {
    let server = TestServer::start().await;
    let pets = server.create_many(40).await;
    let sold: Vec<i64> = pets
        .iter()
        .filter(|pet| pet["status"] == "sold")
        .map(|pet| pet["id"].as_i64().unwrap())
        .collect();

    let listed = petstore(
        &server,
        &["pets", "list", "--status", "sold", "--limit", "3"],
    )
    .await
    .json();
    assert_eq!(ids(&listed), sold[..3]);

    let after = sold[2].to_string();
    let next = petstore(
        &server,
        &["pets", "list", "--status", "sold", "--after", &after],
    )
    .await
    .json();
    assert_eq!(ids(&next), sold[3..]);

    // Without a limit, the contract's default page (20).
    let first_page = petstore(&server, &["pets", "list"]).await.json();
    assert_eq!(first_page, json!(pets[..20]));
}

#[tokio::test]
async fn all_walks_every_page() {
    let server = TestServer::start().await;
    let pets = server.create_many(230).await;

    let all = petstore(&server, &["pets", "list", "--all"]).await;
    // One JSON array of every animal, pretty-printed as `list` prints one page.
    let listed = all.json();
    assert_eq!(listed, json!(pets));
    assert_eq!(
        all.stdout,
        format!("{}\n", serde_json::to_string_pretty(&listed).unwrap())
    );
    assert_eq!(all.stderr, "");

    // Small pages, one status: the same animals as one filter over all.
    let pending: Vec<&Value> = pets
        .iter()
        .filter(|pet| pet["status"] == "pending")
        .collect();
    let walked = petstore(
        &server,
        &[
            "pets", "list", "--all", "--status", "pending", "--limit", "7",
        ],
    )
    .await
    .json();
    assert!(pending.len() > 7);
    assert_eq!(walked, json!(pending));

    // An empty catalogue is an empty array.
    let empty = TestServer::start().await;
    assert_eq!(
        petstore(&empty, &["pets", "list", "--all"]).await.json(),
        json!([])
    );
}

#[tokio::test]
async fn get_works_and_warns_that_it_is_deprecated() {
    let server = TestServer::start().await;
    let rex = server.create(json!({"name": "Rex", "categoryId": 1})).await;
    let run = petstore(&server, &["pets", "get", &rex["id"].to_string()]).await;
    assert_eq!(run.json(), rex);
    assert!(
        run.stderr
            .starts_with("warning: `petstore pets get` is deprecated")
            && run.stderr.contains("5 December 2030")
            && run.stderr.contains("`petstore pets list`"),
        "{run:#?}"
    );
}

#[tokio::test]
async fn an_unknown_animal_is_the_services_404() {
    let server = TestServer::start().await;
    let answer: Value = server
        .get("/pets/424242")
        .send()
        .await
        .expect("request sent")
        .json()
        .await
        .expect("an Error body");
    let run = petstore(&server, &["pets", "get", "424242"]).await;
    run.fails(
        1,
        &[
            "error: not_found (HTTP 404): ",
            answer["message"].as_str().unwrap(),
        ],
    );
}

#[tokio::test]
async fn a_missing_or_wrong_key_is_the_services_401() {
    let server = TestServer::start().await;
    let url = server.url("");

    let wrong = petstore_at(&url, Some("not-a-key"), &["pets", "list"]).await;
    wrong.fails(
        4,
        &[
            "error: unauthorized (HTTP 401): ",
            "hint: the service does not accept the key in PETSTORE_API_KEY",
        ],
    );
    assert!(!wrong.stderr.contains("not-a-key"), "{wrong:#?}");

    let missing = petstore_at(
        &url,
        None,
        &["pets", "create", "--name", "Rex", "--category-id", "1"],
    )
    .await;
    missing.fails(
        4,
        &[
            "error: unauthorized (HTTP 401): ",
            "hint: set PETSTORE_API_KEY",
        ],
    );
    assert_eq!(server.list("").await, Vec::<Value>::new());
}

#[tokio::test]
async fn the_key_is_never_a_flag() {
    let server = TestServer::start().await;
    let run = petstore_at(&server.url(""), None, &["--api-key", KEY, "pets", "list"]).await;
    run.fails(2, &["unexpected argument '--api-key'"]);
    // No command takes a key as a flag (the idempotency key is not a secret).
    for command in ["list", "create", "get"] {
        let help = petstore(&server, &["pets", command, "--help"]).await;
        assert_eq!(help.code, Some(0), "{help:#?}");
        for line in help
            .stdout
            .lines()
            .filter(|line| line.trim_start().starts_with('-'))
        {
            let flag = line.split_whitespace().next().unwrap();
            assert!(
                flag == "--idempotency-key" || !flag.to_lowercase().contains("key"),
                "`pets {command}` takes {flag}"
            );
        }
    }
}

#[tokio::test]
async fn values_outside_the_contract_are_refused_before_sending() {
    let server = TestServer::start().await;
    let unreadable = "/nonexistent/rex.json";
    let invalid = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(invalid.path(), r#"{"name": "Rex"}"#).expect("written");
    let invalid = invalid.path().to_str().unwrap();
    for (args, message) in [
        (
            &["pets", "list", "--status", "lost"][..],
            "invalid value 'lost' for '--status",
        ),
        (
            &["pets", "list", "--limit", "0"],
            "expected a whole number from 1 to 100",
        ),
        (
            &["pets", "list", "--limit", "101"],
            "expected a whole number from 1 to 100",
        ),
        (
            &["pets", "list", "--all", "--limit", "500"],
            "from 1 to 100",
        ),
        (
            &["pets", "list", "--all", "--after", "3"],
            "cannot be used with",
        ),
        (
            &["pets", "create", "--name", "", "--category-id", "1"],
            "invalid value '' for '--name",
        ),
        (
            &["pets", "create", "--name", "Rex"],
            "--category-id <category-id>",
        ),
        (
            &["pets", "create", "--json-body", unreadable],
            "failed to read /nonexistent/rex.json",
        ),
        (
            &["pets", "create", "--json-body", invalid],
            "failed to parse",
        ),
        (
            &["pets", "create", "--json-body", invalid, "--name", "Max"],
            "'--json-body <JSON-FILE>' cannot be used with '--name <name>'",
        ),
        (&["pets", "get", "rex"], "invalid value 'rex' for '<ID>'"),
        (
            &["--url", "localhost:1", "pets", "list"],
            "e.g. http://localhost:1",
        ),
        (
            &["--url", "http://localhost:1/?a=b", "pets", "list"],
            "no query",
        ),
        (&["events", "list", "--wait", "31"], "from 0 to 30"),
        (&["events", "list", "--limit", "101"], "from 1 to 100"),
        // The feed has no end to walk to: `events tail` reads on.
        (&["events", "list", "--all"], "unexpected argument '--all'"),
        (
            &["events", "tail", "--types", "pet.created,pet.adopted"],
            "unknown event type \"pet.adopted\"",
        ),
        (
            &["events", "list", "--types", "pet.created,pet.adopted"],
            "unknown event type \"pet.adopted\"",
        ),
        // The endpoint is not the service's `--url <URL>`.
        (&["webhooks", "add"], "webhooks add --url <URL> <ENDPOINT>"),
        (
            &["events", "tail", "--after", "4x"],
            "invalid value '4x' for '--after <ID>'",
        ),
    ] {
        let run = petstore(&server, args).await;
        run.fails(2, &[message]);
    }
    assert_eq!(server.list("").await, Vec::<Value>::new());
}

#[tokio::test]
async fn negative_numbers_are_numbers() {
    let server = TestServer::start().await;
    let created = petstore(
        &server,
        &["pets", "create", "--name", "Rex", "--category-id", "-5"],
    )
    .await
    .json();
    assert_eq!(created["categoryId"], -5);
    let listed = petstore(&server, &["pets", "list", "--after", "-1"])
        .await
        .json();
    assert_eq!(listed, json!([created]));
    petstore(&server, &["pets", "get", "-1"])
        .await
        .fails(1, &["error: not_found (HTTP 404): "]);
}

/// The commands of the README's "From the command line", run as a
/// newcomer runs them (with the test server's key for the README's).
#[tokio::test]
async fn the_readme_commands_work() {
    let server = TestServer::start().await;
    let readme = include_str!("../../README.md");
    let section = readme
        .split("### From the command line")
        .nth(1)
        .expect("the README has the section");
    let block = section
        .split("```sh")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section has a shell block");
    let mut ran = 0;
    for line in block.lines() {
        let command = line.split(" #").next().unwrap().trim();
        let Some(args) = command.strip_prefix("petstore ") else {
            continue;
        };
        let args: Vec<&str> = args.split_whitespace().collect();
        let run = petstore(&server, &args).await;
        let answer = run.json();
        assert!(
            answer.as_array().is_none_or(|pets| !pets.is_empty()),
            "`{command}` printed an empty list: {run:#?}"
        );
        ran += 1;
    }
    assert!(ran >= 4, "the README shows the commands ({ran} found)");
}

#[tokio::test]
async fn the_url_may_omit_the_api_prefix() {
    let server = TestServer::start().await;
    let rex = server.create(json!({"name": "Rex", "categoryId": 1})).await;
    let root = format!("http://{}", server.addr());
    let via_flag = petstore_at(
        "http://unused.invalid",
        Some(KEY),
        &["--url", &root, "pets", "list"],
    )
    .await;
    assert_eq!(via_flag.json(), json!([rex]));
    let via_env = petstore_at(&root, Some(KEY), &["pets", "list"]).await;
    assert_eq!(via_env.json(), json!([rex]));
}

/// `--version` is the crate's version and, apart, the contract's (the
/// crate's build metadata, which it does not repeat).
#[tokio::test]
async fn the_version_names_the_crate_and_the_contract() {
    let run = petstore_at("http://127.0.0.1:1", None, &["--version"]).await;
    assert_eq!(run.code, Some(0), "{run:#?}");
    let (number, contract) = env!("CARGO_PKG_VERSION").split_once('+').unwrap();
    assert_eq!(
        run.stdout,
        format!("petstore {number} (contract {contract})\n")
    );
}

#[tokio::test]
async fn no_service_is_exit_status_3() {
    // Port 1: nothing listens there, and no test server can take it (they
    // bind port 0), as one could a port found free a moment before.
    let nothing = "http://127.0.0.1:1".to_owned();
    petstore_at(&nothing, Some(KEY), &["pets", "list"])
        .await
        .fails(3, &["error: no answer from ", "Connection refused"]);

    // A password in the URL is not repeated.
    let with_password = nothing.replace("http://", "http://user:hunter2@");
    let run = petstore_at(&with_password, Some(KEY), &["pets", "list"]).await;
    run.fails(3, &["error: no answer from http://user:***@"]);
    assert!(!run.stderr.contains("hunter2"), "{run:#?}");

    // Something that is not the API: dropshot's own 404 for an unknown path.
    let server = TestServer::start().await;
    let wrong_prefix = format!("http://{}/v2", server.addr());
    petstore_at(&wrong_prefix, Some(KEY), &["pets", "list"])
        .await
        .fails(3, &["is that the service's API"]);
}

/// `petstore orders …` and `petstore inventory`: an order makes the animal
/// pending; `deliver` sells it, `cancel` frees it; refusals are the
/// service's errors (exit status 1).
#[tokio::test]
async fn orders_are_placed_delivered_cancelled_and_counted() {
    let server = TestServer::start().await;
    let available = json!({"name": "Rex", "categoryId": 1, "status": "available"});
    let rex = server.create(available.clone()).await["id"].to_string();
    let tom = server.create(available).await["id"].to_string();

    let first = petstore(&server, &["orders", "place", "--pet-id", &rex])
        .await
        .json();
    assert_eq!(first["status"], "placed");
    assert_eq!(server.read(&first["petId"]).await["status"], "pending");
    petstore(&server, &["orders", "place", "--pet-id", &rex])
        .await
        .fails(1, &["pet_not_available"]);
    let first_id = first["id"].to_string();
    let delivered = petstore(&server, &["orders", "deliver", &first_id])
        .await
        .json();
    assert_eq!(delivered["status"], "delivered");
    assert_eq!(server.read(&first["petId"]).await["status"], "sold");
    petstore(&server, &["orders", "cancel", &first_id])
        .await
        .fails(1, &["invalid_transition"]);

    let second = petstore(
        &server,
        &[
            "orders",
            "place",
            "--pet-id",
            &tom,
            "--idempotency-key",
            "k-1",
        ],
    )
    .await
    .json();
    let cancelled = petstore(&server, &["orders", "cancel", &second["id"].to_string()])
        .await
        .json();
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(server.read(&second["petId"]).await["status"], "available");

    assert_eq!(
        petstore(&server, &["orders", "get", &first_id])
            .await
            .json(),
        delivered
    );
    let all = petstore(&server, &["orders", "list", "--all", "--limit", "1"])
        .await
        .json();
    assert_eq!(all, json!([delivered, cancelled]));
    let of_tom = petstore(&server, &["orders", "list", "--pet-id", &tom])
        .await
        .json();
    assert_eq!(of_tom, json!([cancelled]));
    let by_status = petstore(&server, &["orders", "list", "--status", "delivered"])
        .await
        .json();
    assert_eq!(by_status, json!([delivered]));
    let inventory = petstore(&server, &["inventory"]).await.json();
    assert_eq!(inventory, json!({"available": 1, "pending": 0, "sold": 1}));
    petstore(
        &server,
        &["orders", "deliver", &first_id, "--status", "cancelled"],
    )
    .await
    .fails(2, &["sets --status itself"]);
    petstore(&server, &["orders", "get", "999999"])
        .await
        .fails(1, &["not_found"]);
}

/// A customer's key (scopes `pets:read,orders:place`): its own orders work,
/// what it may not do is exit status 6 with the service's message and a
/// hint, and another key's orders are out of its sight.
#[tokio::test]
async fn a_scoped_key_does_what_it_may_and_is_told_plainly_what_it_may_not() {
    let server = TestServer::start().await;
    let customer = server
        .stored_key("customer", "pets:read,orders:place")
        .await;
    let url = server.url("");
    let animal = json!({"name": "Rex", "categoryId": 1, "status": "available"});
    let rex = server.create(animal.clone()).await["id"].to_string();
    let theirs = server.place_order(&server.create(animal).await["id"]).await;

    let as_customer = |args: &'static [&'static str]| petstore_at(&url, Some(&customer), args);
    let own = petstore_at(
        &url,
        Some(&customer),
        &["orders", "place", "--pet-id", &rex],
    )
    .await
    .json();
    let listed = as_customer(&["orders", "list", "--all"]).await.json();
    assert_eq!(listed, json!([own]), "only its own order");
    let deliver = petstore_at(
        &url,
        Some(&customer),
        &["orders", "deliver", &own["id"].to_string()],
    )
    .await;
    deliver.fails(
        6,
        &[
            "insufficient_scope (HTTP 403)",
            "orders:manage",
            "hint:",
            "keys scopes",
        ],
    );
    as_customer(&["inventory"])
        .await
        .fails(6, &["insufficient_scope", "inventory:read"]);
    petstore_at(
        &url,
        Some(&customer),
        &["orders", "get", &theirs["id"].to_string()],
    )
    .await
    .fails(1, &["not_found (HTTP 404)"]);
    let run = as_customer(&["pets", "create", "--name", "Tom", "--category-id", "1"]).await;
    run.fails(6, &["pets:write"]);
    assert!(!run.stderr.contains(&customer), "the key is never echoed");
}

/// `petstore webhooks …`: a subscription is added (its secret printed once,
/// and a delivery verifies with it), listed, read, rotated, its deliveries
/// listed, a range replayed, and removed.
#[tokio::test]
async fn webhooks_are_added_listed_rotated_replayed_and_removed() {
    let server = TestServer::start().await;
    let receiver = petstore_support::receiver::Receiver::healthy().await;
    let hook = receiver.url("/hook");
    let added = petstore(
        &server,
        &["webhooks", "add", &hook, "--types", "pet.created"],
    )
    .await;
    let added = added.json();
    let secret = added["secret"]
        .as_str()
        .expect("the secret, printed once")
        .to_owned();
    let id = added["id"].to_string();
    assert_eq!(added["types"], json!(["pet.created"]));
    let rex = server.create(json!({"name": "Rex", "categoryId": 1})).await;
    let delivery =
        petstore_support::eventually_some("the delivery", Duration::from_secs(60), || async {
            receiver.received().into_iter().find(|r| r.answered == 200)
        })
        .await;
    let event = petstore_client::verify_webhook(&secret, &delivery.headers, &delivery.body)
        .expect("signed with the secret printed");
    assert_eq!(event.pet().map(|pet| pet.id), rex["id"].as_i64());

    let listed = petstore(&server, &["webhooks", "list"]).await.json();
    assert_eq!(listed[0]["id"], added["id"]);
    assert!(listed[0].get("secret").is_none(), "{listed}");
    assert_eq!(
        petstore(&server, &["webhooks", "get", &id]).await.json()["url"],
        hook
    );
    let rotated = petstore(&server, &["webhooks", "rotate", &id]).await.json();
    assert!(
        rotated["secret"].as_str().unwrap().starts_with("whsec_"),
        "{rotated}"
    );
    let deliveries = petstore(&server, &["webhooks", "deliveries", &id])
        .await
        .json();
    let event_id = deliveries[0]["eventId"].as_str().unwrap().to_owned();
    let replayed = petstore(
        &server,
        &[
            "webhooks", "replay", &id, "--from", &event_id, "--to", &event_id,
        ],
    )
    .await;
    assert_eq!(replayed.json()["deliveries"], 1);
    let removed = petstore(&server, &["webhooks", "remove", &id]).await;
    assert_eq!(removed.code, Some(0), "{removed:#?}");
    petstore(&server, &["webhooks", "get", &id])
        .await
        .fails(1, &["webhook_not_found (HTTP 404)"]);
}

/// A replay of purged events ends as any refusal does (exit status 1), with
/// the hint that fits a replay: a later `--from` (not the feed's "without
/// --after", which `replay` does not take).
#[tokio::test]
async fn a_replay_of_purged_events_says_to_replay_from_later() {
    let service = MockServer::start_async().await;
    let body = json!({
        "code": "cursor_expired",
        "message": "the events up to 7 were purged; replay from an event after 7",
        "status": 410,
    });
    let replay = service
        .mock_async(|when, then| {
            when.method(Method::POST).path("/v1/webhooks/1/replay");
            then.status(410)
                .header("content-type", "application/json")
                .json_body(body);
        })
        .await;
    let args = ["webhooks", "replay", "1", "--from", "1", "--to", "10"];
    let refused = petstore_at(&service.base_url(), Some(KEY), &args).await;
    refused.fails(
        1,
        &[
            "error: cursor_expired (HTTP 410)",
            "hint: the service no longer keeps the events from --from on",
            "replay from a later --from",
        ],
    );
    assert!(!refused.stderr.contains("--after"), "{refused:#?}");
    replay.assert_calls_async(1).await;
}

/// `webhooks add --url https://…` without an endpoint: the body's field is
/// `url`, but `--url` is where the service is. Clap's usage error (exit
/// status 2) then says where the endpoint goes; without `--url` it does not.
#[tokio::test]
async fn an_endpoint_given_as_url_is_a_usage_error_that_says_where_it_goes() {
    let nowhere = "http://127.0.0.1:9/v1";
    let hint = "hint: --url is where the service is";
    let mistaken = ["webhooks", "add", "--url", "https://hooks.example/x"];
    let run = petstore_at(nowhere, Some(KEY), &mistaken).await;
    run.fails(2, &["<ENDPOINT>", hint, "petstore webhooks add https://"]);
    let run = petstore_at(nowhere, Some(KEY), &["webhooks", "add"]).await;
    run.fails(2, &["<ENDPOINT>"]);
    assert!(!run.stderr.contains(hint), "{run:#?}");
}

/// Serves every request on 127.0.0.1 with a `429` and `Retry-After: 30`, as
/// the service over its rate limit (which the test server cannot be driven
/// to); its base URL, and the task to abort.
async fn over_the_rate_limit() -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            // The request head (a GET has no body), then the refusal.
            let mut head = Vec::new();
            let mut chunk = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            let body = r#"{"code":"rate_limited","message":"over the quota","status":429}"#;
            let answer = format!(
                "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
                 retry-after: 30\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    (url, task)
}

#[tokio::test]
async fn over_the_rate_limit_is_exit_status_7_with_the_wait() {
    let (url, service) = over_the_rate_limit().await;
    petstore_at(&url, Some(KEY), &["inventory"]).await.fails(
        7,
        &[
            "error: rate_limited (HTTP 429): over the quota",
            "retry after: 30 s",
        ],
    );
    service.abort();
}

/// An event of the feed, as the service writes it.
fn event(id: u64, type_: &str, data: Value) -> Value {
    json!({
        "specversion": "1.0",
        "id": id.to_string(),
        "source": "/v1",
        "type": type_,
        "subject": format!("pets/{}", data["id"]),
        "time": "2026-11-24T09:30:00.123456Z",
        "datacontenttype": "application/json",
        "data": data,
    })
}

fn pet_created(id: u64, name: &str) -> Value {
    event(
        id,
        "pet.created",
        json!({"id": id, "name": name, "categoryId": 1, "status": "available"}),
    )
}

/// `GET /v1/events` after `after` (`None`: from the start) answered with
/// `events` and a `Link` to read on after `next`, `delay` later.
async fn feed_page<'a>(
    feed: &'a MockServer,
    after: Option<&str>,
    events: &[Value],
    next: &str,
    delay: Duration,
) -> Mock<'a> {
    let events = Value::from(events.to_vec());
    let link = format!("</v1/events?limit=100&wait=30&after={next}>; rel=\"next\"");
    feed.mock_async(|when, then| {
        let when = when.method(Method::GET).path("/v1/events");
        match after {
            Some(after) => when.query_param("after", after),
            None => when.query_param_missing("after"),
        };
        then.status(200)
            .header("content-type", "application/json")
            .header("link", link)
            .json_body(events)
            .delay(delay);
    })
    .await
}

/// `GET /v1/events` after `after` refused with `status` and `code`.
async fn feed_refusal<'a>(feed: &'a MockServer, after: &str, status: u16, code: &str) -> Mock<'a> {
    let body = json!({"code": code, "message": format!("{code}, says the mock"), "status": status});
    feed.mock_async(|when, then| {
        when.method(Method::GET)
            .path("/v1/events")
            .query_param("after", after);
        then.status(status)
            .header("content-type", "application/json")
            .json_body(body);
    })
    .await
}

/// `petstore events tail args…` against `url`, running: its stdout's
/// lines as they come, and the process. (The lines come through an async
/// channel: a test must not block its runtime, which may be the server's.)
fn tail(url: &str, args: &[&str]) -> (UnboundedReceiver<String>, ChildGuard) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_petstore"));
    without_petstore_settings(&mut command)
        .env("PETSTORE_URL", url)
        .env("PETSTORE_API_KEY", KEY)
        .args(["events", "tail"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn("petstore events tail", &mut command).expect("it starts");
    let stdout = child.child_mut().stdout.take().expect("piped stdout");
    let (lines, received) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (received, child)
}

/// The next line `tail` printed, as JSON; only a hang guard bounds the wait.
async fn next_line(lines: &mut UnboundedReceiver<String>) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(60), lines.recv())
        .await
        .expect("a line within the hang guard")
        .expect("a line before stdout closed");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"))
}

/// Waits for `tail` to end: its exit status and its stderr.
async fn ended(child: ChildGuard) -> (Option<i32>, String) {
    blocking(move || wait_for_end(child)).await
}

fn wait_for_end(mut child: ChildGuard) -> (Option<i32>, String) {
    let status = child
        .wait_timeout(Duration::from_secs(60))
        .expect("waited")
        .expect("it ends within the hang guard");
    let mut stderr = String::new();
    child
        .child_mut()
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("UTF-8 stderr");
    (status.code(), stderr)
}

/// `events tail` prints each event as one line of JSON as soon as it is
/// read (while the next request is still waiting), goes on from an empty
/// page where its `Link` says, and ends on `410` with the way to restart.
#[tokio::test]
async fn events_tail_prints_each_event_as_a_line_as_it_comes_and_a_410_ends_it() {
    let feed = MockServer::start_async().await;
    let first = [pet_created(1, "Rex"), pet_created(2, "Max")];
    let now = Duration::ZERO;
    feed_page(&feed, None, &first, "2", now).await;
    // Held a while, as a long poll is: the lines before it are out already.
    let held = Duration::from_secs(3);
    let empty = feed_page(&feed, Some("2"), &[], "9", held).await;
    let later = pet_created(10, "Tom");
    feed_page(&feed, Some("9"), std::slice::from_ref(&later), "10", now).await;
    feed_refusal(&feed, "10", 410, "cursor_expired").await;

    let (mut lines, mut child) = tail(&feed.base_url(), &[]);
    assert_eq!(next_line(&mut lines).await, first[0]);
    assert_eq!(next_line(&mut lines).await, first[1]);
    assert!(
        child.try_wait().unwrap().is_none(),
        "the lines are printed while the next page is awaited"
    );
    assert_eq!(next_line(&mut lines).await, later);
    let (code, stderr) = ended(child).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("error: cursor_expired (HTTP 410)") && stderr.contains("without --after"),
        "{stderr}"
    );
    assert!(lines.try_recv().is_err(), "nothing after the error");
    empty.assert_calls_async(1).await;
}

/// `--after` and `--types` are sent as the contract's parameters; a key
/// refused (`401`) or without the scope (`403`) ends it as every command
/// ends, exit status 4 or 6 with a hint, and nothing on stdout.
#[tokio::test]
async fn events_tail_sends_its_position_and_types_and_ends_on_401_and_403() {
    let types = "order.placed,order.delivered";
    for (status, code, exit) in [(401, "unauthorized", 4), (403, "insufficient_scope", 6)] {
        let feed = MockServer::start_async().await;
        let refused = feed
            .mock_async(|when, then| {
                when.method(Method::GET)
                    .path("/v1/events")
                    .query_param("after", "5")
                    .query_param("types", types)
                    .query_param("limit", "100")
                    .query_param("wait", "30");
                then.status(status)
                    .header("content-type", "application/json")
                    .json_body(json!({"code": code, "message": "no", "status": status}));
            })
            .await;
        let args = ["events", "tail", "--after", "5", "--types", types];
        let run = petstore_at(&feed.base_url(), Some(KEY), &args).await;
        run.fails(exit, &[&format!("error: {code} (HTTP {status})"), "hint:"]);
        refused.assert_calls_async(1).await;
    }
}

/// `events list --wait N` waits as long as it asks: longer than the
/// client's usual timeout (15 s) for an answer held 16 s.
#[tokio::test]
async fn events_list_waits_as_long_as_it_asks() {
    let feed = MockServer::start_async().await;
    let rex = pet_created(1, "Rex");
    feed.mock_async(|when, then| {
        when.method(Method::GET)
            .path("/v1/events")
            .query_param("wait", "20");
        then.status(200)
            .header("content-type", "application/json")
            .header("link", "</v1/events?wait=20&after=1>; rel=\"next\"")
            .json_body(json!([rex]))
            .delay(Duration::from_secs(16));
    })
    .await;
    let run = petstore_at(
        &feed.base_url(),
        Some(KEY),
        &["events", "list", "--wait", "20"],
    )
    .await;
    assert_eq!(run.json(), json!([rex]));
}

/// Against the real server: `events list` is one page of the feed, as JSON
/// like every list, and `events tail` prints what happens as it happens.
/// The server runs in this test's runtime: its workers must keep serving
/// while the test waits for `tail`'s lines, so the runtime has two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_list_and_tail_read_the_real_feed() {
    let server = TestServer::start().await;
    let rex = server.create(json!({"name": "Rex", "categoryId": 1})).await;
    let listed = petstore(&server, &["events", "list"]).await.json();
    let [created] = listed.as_array().expect("an array").as_slice() else {
        panic!("one event: {listed:#}");
    };
    assert_eq!(created["type"], "pet.created");
    assert_eq!(created["data"], rex);
    // `--types` is the service's filter, as given.
    for (types, expected) in [
        ("order.placed", json!([])),
        ("order.placed,pet.created", json!([created])),
    ] {
        let run = petstore(&server, &["events", "list", "--types", types]).await;
        assert_eq!(run.json(), expected, "--types {types}");
    }

    let (mut lines, _tail) = tail(&server.url(""), &["--types", "pet.created"]);
    assert_eq!(&next_line(&mut lines).await, created);
    let tom = server.create(json!({"name": "Tom", "categoryId": 2})).await;
    let next = next_line(&mut lines).await;
    assert_eq!(
        (&next["type"], &next["data"]),
        (&json!("pet.created"), &tom)
    );
}
