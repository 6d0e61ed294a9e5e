//! The `petstore-server` binary as an operator meets it: flags, help,
//! refusals with clear messages, logs, and a clean stop on SIGTERM.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

use common::{KEY, Served, petstore, run};
use petstore_support::Tmpfs;

#[test]
fn help_names_the_commands_and_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let (output, stdout, _) = run(petstore(dir.path()).arg("--help"));
    assert!(output.status.success());
    for word in ["serve", "migrate", "openapi"] {
        assert!(stdout.contains(word), "{stdout}");
    }
    let (output, stdout, _) = run(petstore(dir.path()).args(["serve", "--help"]));
    assert!(output.status.success());
    for word in [
        "--bind",
        "PETSTORE_BIND",
        "--database",
        "PETSTORE_DATABASE_URL",
        "PETSTORE_API_KEYS",
        "--log-level",
        "--access-log",
    ] {
        assert!(stdout.contains(word), "{word} missing from:\n{stdout}");
    }
}

#[test]
fn version_is_the_interface_version() {
    let dir = tempfile::tempdir().unwrap();
    let (output, stdout, _) = run(petstore(dir.path()).arg("--version"));
    assert!(output.status.success());
    let expected = format!("petstore-server {}", petstore_api::CONTRACT_VERSION);
    assert_eq!(stdout.trim(), expected);
}

#[test]
fn serve_refuses_to_start_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    for keys in [None, Some(""), Some(" , ")] {
        let mut command = petstore(dir.path());
        // The management listener off: tests run in parallel, and the
        // default port would be one that all of them try.
        command.args(["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"]);
        if let Some(keys) = keys {
            command.env("PETSTORE_API_KEYS", keys);
        }
        let (output, _, stderr) = run(&mut command);
        assert!(!output.status.success());
        assert!(stderr.contains("PETSTORE_API_KEYS"), "{stderr}");
    }
    assert!(
        !dir.path().join("petstore.db").exists(),
        "nothing was created"
    );
}

#[test]
fn invalid_settings_fail_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["serve", "--bind", "not-an-address"], "--bind"),
        (
            &["serve", "--database", "mysql://db/pets"],
            "unsupported database URL",
        ),
        (&["serve", "--log-level", "loud"], "--log-level"),
        (&["serve", "--no-such-flag"], "--no-such-flag"),
        (&["fly"], "fly"),
    ];
    for (args, expected) in cases {
        let (output, _, stderr) = run(petstore(dir.path())
            .args(args)
            .env("PETSTORE_API_KEYS", KEY));
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// Runs `serve` on `database`, insisting that it fails; returns its stderr.
fn serve_fails(dir: &std::path::Path, database: &str) -> String {
    let (output, _, stderr) = run(petstore(dir)
        .args(["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"])
        .args(["--database", database])
        .env("PETSTORE_API_KEYS", KEY));
    assert!(!output.status.success(), "serve on {database} started");
    stderr
}

#[test]
fn an_unusable_database_path_fails_fast_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = serve_fails(dir.path(), "sqlite:///nonexistent-dir/x/pets.db");
    assert!(stderr.contains("/nonexistent-dir/x/pets.db"), "{stderr}");
}

#[test]
fn a_sigterm_while_the_server_starts_stops_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut starting = Served::launch(
        petstore(dir.path())
            .args(["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"])
            .env("PETSTORE_API_KEYS", KEY),
    );
    // Its first line, before the database is opened or anything listens.
    starting.wait_for("open-file limit");
    let (exit, log) = starting.terminate();
    assert!(exit.success(), "exit status {exit:?}\n{log}");
    assert!(log.contains("\"signal\":\"SIGTERM\""), "{log}");
    assert!(log.contains("\"stopped\""), "{log}");
}

#[test]
fn serve_uses_sqlite_in_the_working_directory_logs_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = Served::start(dir.path(), &[]);
    let (status, body) =
        served.request("POST", "/v1/pets", KEY, r#"{"name":"Rex","categoryId":1}"#);
    assert!(status.contains("201"), "{status} {body}");
    let (status, _) = served.request("GET", "/v1/pets", "wrong-key-for-the-log", "");
    assert!(status.contains("401"), "{status}");
    served.wait_for("\"response_code\":401");
    let (exit, log) = served.terminate();
    assert!(exit.success(), "exit status {exit:?}\n{log}");
    assert!(log.contains("\"signal\":\"SIGTERM\""), "{log}");
    assert!(
        !log.contains(KEY) && !log.contains("wrong-key-for-the-log"),
        "a key was logged:\n{log}"
    );
    assert!(
        dir.path().join("petstore.db").exists(),
        "the default database is ./petstore.db"
    );

    // The pet is still there for the next process.
    // ... and the access log can be switched off without losing the rest.
    let served = Served::start(dir.path(), &["--log-format", "text", "--access-log", "off"]);
    let (status, body) = served.request("GET", "/v1/pets", KEY, "");
    assert!(
        status.contains("200") && body.contains("\"Rex\""),
        "{status} {body}"
    );
    let (exit, log) = served.terminate();
    assert!(exit.success());
    assert!(log.contains("serving") && log.contains("stopped"), "{log}");
    assert!(!log.contains("request completed"), "{log}");
    assert!(!log.contains("accepted connection"), "{log}");
}

#[test]
fn migrate_creates_the_schema_and_serve_refuses_a_newer_one() {
    let dir = tempfile::tempdir().unwrap();
    let (output, stdout, stderr) =
        run(petstore(dir.path()).args(["migrate", "--database", "sqlite://m.db"]));
    assert!(output.status.success());
    assert!(stdout.contains("current schema version"), "{stdout}");
    assert!(stderr.contains("database: sqlite://m.db"), "{stderr}");

    let conn = rusqlite::Connection::open(dir.path().join("m.db")).unwrap();
    conn.pragma_update(None, "user_version", 42).unwrap();
    drop(conn);
    let stderr = serve_fails(dir.path(), "sqlite://m.db");
    assert!(stderr.contains("schema version 42"), "{stderr}");
}

#[test]
fn openapi_prints_the_emitted_document() {
    let dir = tempfile::tempdir().unwrap();
    let (output, stdout, _) = run(petstore(dir.path()).arg("openapi"));
    assert!(output.status.success());
    let document: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    // The version of the contract the server implements: openapi/petstore.yaml's.
    let yaml: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../openapi/petstore.yaml"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        document["info"]["version"].as_str(),
        yaml["info"]["version"].as_str()
    );
    let mut operation_ids: Vec<&str> = document["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .map(|operation| operation["operationId"].as_str().unwrap())
        .collect();
    operation_ids.sort_unstable();
    let expected = [
        "createPet",
        "createWebhook",
        "deleteWebhook",
        "getInventory",
        "getOrder",
        "getPet",
        "getWebhook",
        "listEvents",
        "listOrders",
        "listPets",
        "listWebhookDeliveries",
        "listWebhooks",
        "placeOrder",
        "replayWebhook",
        "rotateWebhookSecret",
        "updateOrder",
    ];
    assert_eq!(operation_ids, expected);
}

#[test]
fn an_unreachable_postgres_fails_start_up_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = serve_fails(dir.path(), "postgres://pets:hunter2@127.0.0.1:1/pets");
    assert!(
        stderr.contains("postgres://pets:***@127.0.0.1:1/pets"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("hunter2"),
        "the password was printed: {stderr}"
    );
    assert!(stderr.contains("Connection refused"), "{stderr}");
}

/// The bytes of every file of the database: what "untouched" means. The
/// WAL index (`-shm`) is left out: it is shared memory, not data, and the
/// running server's own reads (its key refresh every 2 s) move the read
/// marks in it at any moment.
fn database_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with("petstore.db") && !name.ends_with(".lock") && !name.ends_with("-shm")
        })
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_second_server_on_the_same_sqlite_file_refuses_to_start_and_the_first_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let first = Served::start(dir.path(), &[]);
    let (status, body) = first.request("POST", "/v1/pets", KEY, r#"{"name":"Rex","categoryId":1}"#);
    assert!(status.contains("201"), "{status} {body}");
    let before = database_files(dir.path());

    let holder = format!("pid {}", first.child.pid());
    let serve = ["serve", "--bind", "127.0.0.1:0", "--admin-bind", "off"];
    for command in [&serve[..], &["migrate"]] {
        let (output, _, stderr) = run(petstore(dir.path())
            .args(command)
            .env("PETSTORE_API_KEYS", KEY));
        assert!(!output.status.success(), "{command:?} started");
        assert!(
            stderr.contains("petstore.db is in use by another petstore-server"),
            "{command:?}: {stderr}"
        );
        assert!(stderr.contains(&holder), "{command:?}: {stderr}");
    }
    assert_eq!(database_files(dir.path()), before, "the data was touched");

    let (status, body) = first.request("GET", "/v1/pets", KEY, "");
    assert!(
        status.contains("200") && body.contains("Rex"),
        "{status} {body}"
    );
    let (exit, log) = first.terminate();
    assert!(exit.success(), "{log}");

    // Once the first has stopped, the file is free again.
    let second = Served::start(dir.path(), &[]);
    let (exit, log) = second.terminate();
    assert!(exit.success(), "{log}");
}

#[test]
fn a_port_in_use_is_reported_before_any_file_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let (output, _, stderr) = run(petstore(dir.path())
        .args(["serve", "--bind", &address])
        .env("PETSTORE_API_KEYS", KEY));
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("cannot listen on {address}")) && stderr.contains("in use"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a file was created"
    );
}

#[test]
fn a_read_only_database_is_a_clear_start_up_error() {
    let disk = Tmpfs::mount(4096);
    let (output, _, _) = run(petstore(disk.path()).args(["migrate"]));
    assert!(output.status.success());
    disk.make_read_only();
    let stderr = serve_fails(disk.path(), "sqlite://petstore.db");
    assert!(stderr.contains("petstore.db cannot be written"), "{stderr}");
}

#[test]
fn a_row_that_does_not_decode_is_reported_with_its_id_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let (output, _, _) = run(petstore(dir.path()).args(["migrate"]));
    assert!(output.status.success());
    // Another tool writes a status the contract does not know.
    let conn = rusqlite::Connection::open(dir.path().join("petstore.db")).unwrap();
    conn.execute_batch(
        "PRAGMA ignore_check_constraints = ON;
         INSERT INTO pets (name, category_id, status) VALUES ('Rex', 1, 'weird');",
    )
    .unwrap();
    drop(conn);
    let stderr = serve_fails(dir.path(), "sqlite://petstore.db");
    assert!(
        stderr.contains("pet 1: column status holds the text \"weird\""),
        "{stderr}"
    );
}

#[test]
fn sigterm_cuts_a_request_that_never_finishes_once_the_deadline_passes() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &["--shutdown-timeout", "1"]);
    // A client that promises a body and never sends it.
    let mut stalled = TcpStream::connect(&served.address).unwrap();
    stalled
        .set_read_timeout(Some(common::REQUEST_TIMEOUT))
        .unwrap();
    write!(
        stalled,
        "POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
    )
    .unwrap();
    // The `100 Continue` comes once the handler has started reading the
    // body: the request is in flight.
    let mut continued = [0u8; 25];
    stalled.read_exact(&mut continued).unwrap();
    assert_eq!(&continued, b"HTTP/1.1 100 Continue\r\n\r\n");
    let (exit, log) = served.terminate();
    assert!(exit.success(), "exit status {exit:?}\n{log}");
    assert!(log.contains("shutdown deadline passed"), "{log}");
    assert!(log.contains("\"requests_cut\":1"), "{log}");
    assert!(log.contains("stopped"), "{log}");
}
