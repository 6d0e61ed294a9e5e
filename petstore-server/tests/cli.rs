//! The `petstore-server` binary as an operator meets it: flags, help,
//! refusals with clear messages, logs, and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_petstore-server");
const KEY: &str = "cli-test-key-3b9e";

/// The binary with a clean environment: none of the operator's settings leak in.
fn petstore(dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .current_dir(dir)
        .env_remove("PETSTORE_API_KEYS")
        .env_remove("PETSTORE_BIND")
        .env_remove("PETSTORE_DATABASE_URL")
        .env_remove("PETSTORE_LOG_LEVEL")
        .env_remove("PETSTORE_LOG_FORMAT");
    command
}

fn run(command: &mut Command) -> (Output, String, String) {
    let output = command.output().expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "the binary panicked:\n{stderr}"
    );
    (output, stdout, stderr)
}

/// A `serve` process on a free port, with its stderr lines streamed back.
struct Served {
    child: Child,
    address: String,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Served {
    fn start(dir: &Path, extra: &[&str]) -> Served {
        let mut child = petstore(dir)
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(extra)
            .env("PETSTORE_API_KEYS", KEY)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("serve starts");
        let stderr = child.stderr.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut served = Served {
            child,
            address: String::new(),
            lines,
            seen: Vec::new(),
        };
        let serving = served.wait_for("serving");
        served.address = logged_address(&serving);
        served
    }

    /// The first stderr line containing `needle` (within 10 s).
    fn wait_for(&mut self, needle: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(10)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no {needle:?} in the log:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// A raw HTTP/1.1 request; returns the status line and the body.
    fn request(&self, method: &str, path: &str, key: &str, body: &str) -> (String, String) {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.address,
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.lines().next().unwrap_or_default().to_owned();
        let body = response
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        (status, body)
    }

    /// Sends SIGTERM and returns the exit status and the rest of the log.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        assert!(killed.unwrap().success());
        let status = self.child.wait().unwrap();
        self.seen.extend(self.lines.try_iter());
        (status, self.seen.join("\n"))
    }
}

/// The `address` of a "serving" record, in the JSON or the text format.
fn logged_address(record: &str) -> String {
    let after = record
        .split("address")
        .nth(1)
        .expect("the address is logged");
    let start = after.find(|c: char| c.is_ascii_digit()).unwrap();
    after[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect()
}

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
    ] {
        assert!(stdout.contains(word), "{word} missing from:\n{stdout}");
    }
}

#[test]
fn version_is_the_interface_version() {
    let dir = tempfile::tempdir().unwrap();
    let (output, stdout, _) = run(petstore(dir.path()).arg("--version"));
    assert!(output.status.success());
    assert_eq!(stdout.trim(), "petstore-server 1.0.0");
}

#[test]
fn serve_refuses_to_start_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    for keys in [None, Some(""), Some(" , ")] {
        let mut command = petstore(dir.path());
        command.args(["serve", "--bind", "127.0.0.1:0"]);
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

#[test]
fn an_unusable_database_path_fails_fast_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let (output, _, stderr) = run(petstore(dir.path())
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database",
            "sqlite:///nonexistent-dir/x/pets.db",
        ])
        .env("PETSTORE_API_KEYS", KEY));
    assert!(!output.status.success());
    assert!(stderr.contains("/nonexistent-dir/x/pets.db"), "{stderr}");
}

#[test]
fn serve_uses_sqlite_in_the_working_directory_and_stops_cleanly_on_sigterm() {
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
    let served = Served::start(dir.path(), &["--log-format", "text"]);
    let (status, body) = served.request("GET", "/v1/pets", KEY, "");
    assert!(
        status.contains("200") && body.contains("\"Rex\""),
        "{status} {body}"
    );
    let (exit, _) = served.terminate();
    assert!(exit.success());
}

#[test]
fn migrate_creates_the_schema_and_serve_refuses_a_newer_one() {
    let dir = tempfile::tempdir().unwrap();
    let (output, stdout, _) =
        run(petstore(dir.path()).args(["migrate", "--database", "sqlite://m.db"]));
    assert!(output.status.success());
    assert!(stdout.contains("current schema version"), "{stdout}");

    let conn = rusqlite::Connection::open(dir.path().join("m.db")).unwrap();
    conn.pragma_update(None, "user_version", 42).unwrap();
    drop(conn);
    let (output, _, stderr) = run(petstore(dir.path())
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database",
            "sqlite://m.db",
        ])
        .env("PETSTORE_API_KEYS", KEY));
    assert!(!output.status.success());
    assert!(stderr.contains("schema version 42"), "{stderr}");
}

#[test]
fn openapi_prints_the_emitted_document() {
    let dir = tempfile::tempdir().unwrap();
    let (output, stdout, _) = run(petstore(dir.path()).arg("openapi"));
    assert!(output.status.success());
    let document: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(document["info"]["version"], "1.0.0");
    let operation_ids: Vec<&str> = ["/v1/pets", "/v1/pets/{petId}"]
        .iter()
        .flat_map(|path| document["paths"][path].as_object().unwrap().values())
        .map(|operation| operation["operationId"].as_str().unwrap())
        .collect();
    assert_eq!(operation_ids.len(), 3);
    for id in ["listPets", "createPet", "getPet"] {
        assert!(operation_ids.contains(&id), "{operation_ids:?}");
    }
}
