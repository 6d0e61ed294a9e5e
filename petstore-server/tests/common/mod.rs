//! Running the built `petstore-server` binary as an operator would.

#![allow(dead_code)] // each test binary uses part of this module

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use petstore_support::{ChildGuard, Deadline};

pub const BIN: &str = env!("CARGO_BIN_EXE_petstore-server");
pub const KEY: &str = "cli-test-key-3b9e";

/// How long a process may take to log an expected line (starting to
/// serve included), to exit once it should, or a command to run. Only a
/// hang guard: each wait ends as soon as its condition holds.
const LOG_TIMEOUT: Duration = Duration::from_secs(120);

/// How long every instance may take to honour a key or a change of its
/// scopes. They promise 2 s (the keyring's unit test holds them to it, in
/// virtual time); here, in real time on a shared machine, a wide margin.
pub const KEY_CHANGE: Duration = Duration::from_secs(30);

/// How long a server may take to notice a database outage, or to serve
/// again once the database is back.
pub const OUTAGE: Duration = Duration::from_secs(120);

/// How long clients may retry through a server killed and started again,
/// or a database restarted, until every one of them is answered.
pub const THROUGH_A_RESTART: Duration = Duration::from_secs(300);

/// How long one request may take: only a hang guard, these machines are
/// shared, so nothing here measures speed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The binary with a clean environment: none of the operator's `PETSTORE_*`
/// settings leak in.
pub fn petstore(dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    petstore_support::without_petstore_settings(command.current_dir(dir));
    command
}

/// Runs `command` to its end (within [`LOG_TIMEOUT`]); its output and
/// the text of its stdout and stderr.
pub fn run(command: &mut Command) -> (Output, String, String) {
    let output = petstore_support::output_within(command, LOG_TIMEOUT).expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "the binary panicked:\n{stderr}"
    );
    (output, stdout, stderr)
}

/// A `serve` process on a free port, with its stderr lines streamed back.
/// Killed if dropped while running, so a failed test leaves nothing behind.
pub struct Served {
    pub child: ChildGuard,
    pub address: String,
    /// The management listener's address, when it is on.
    pub admin_address: Option<String>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Served {
    pub fn start(dir: &Path, extra: &[&str]) -> Served {
        let admin: &[&str] = if extra.contains(&"--admin-bind") {
            &[]
        } else {
            &["--admin-bind", "127.0.0.1:0"]
        };
        Served::spawn(
            petstore(dir)
                .args(["serve", "--bind", "127.0.0.1:0"])
                .args(admin)
                .args(extra)
                .env("PETSTORE_API_KEYS", KEY),
        )
    }

    /// Runs `command` (which starts a server) and waits until it serves.
    pub fn spawn(command: &mut Command) -> Served {
        let mut served = Served::launch(command);
        let serving = served.wait_for("serving");
        served.address = logged_address(&serving);
        served.admin_address = logged_field(&serving, "admin_address");
        served
    }

    /// Runs `command` (which starts a server), its address not known yet.
    pub fn launch(command: &mut Command) -> Served {
        let mut child = ChildGuard::spawn(
            "petstore-server",
            command.stderr(Stdio::piped()).stdout(Stdio::null()),
        )
        .expect("serve starts");
        let stderr = child.child_mut().stderr.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Served {
            child,
            address: String::new(),
            admin_address: None,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first stderr line containing `needle`; fails if the process
    /// closes stderr (exits) first, or logs no such line within
    /// [`LOG_TIMEOUT`].
    pub fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Deadline::after(LOG_TIMEOUT);
        let what = format!("{needle:?} in the log");
        while let Some(line) = self.next_line(deadline, &what) {
            if line.contains(needle) {
                return line;
            }
        }
        panic!("no {what} before it closed:\n{}", self.seen.join("\n"))
    }

    /// The next stderr line, kept in `seen`; `None` once stderr is closed.
    /// Fails at `deadline`, saying it waited for `what`.
    fn next_line(&mut self, deadline: Deadline, what: &str) -> Option<String> {
        match self.lines.recv_timeout(deadline.remaining()) {
            Ok(line) => {
                self.seen.push(line.clone());
                Some(line)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "no {what} within {LOG_TIMEOUT:?}; the log:\n{}",
                self.seen.join("\n")
            ),
        }
    }

    /// Waits for the process to exit on its own (within [`LOG_TIMEOUT`]);
    /// returns its status and everything it logged.
    pub fn wait_for_exit(mut self) -> (std::process::ExitStatus, String) {
        let deadline = Deadline::after(LOG_TIMEOUT);
        let exited = self.child.wait_timeout(deadline.remaining());
        let Some(status) = exited.expect("waiting for the server") else {
            panic!(
                "the server did not exit within {LOG_TIMEOUT:?}; the log:\n{}",
                self.seen.join("\n")
            );
        };
        while self.next_line(deadline, "the end of the log").is_some() {}
        (status, self.seen.join("\n"))
    }

    /// A raw HTTP/1.1 request; returns the status line and the body.
    pub fn request(&self, method: &str, path: &str, key: &str, body: &str) -> (String, String) {
        raw_request(&self.address, method, path, Some(key), body)
    }

    /// Waits, off the async workers, for a stderr line containing `needle`.
    pub async fn log_line(mut self, needle: &'static str) -> Served {
        petstore_support::blocking(move || {
            self.wait_for(needle);
            self
        })
        .await
    }

    /// Sends SIGTERM and returns the exit status and the rest of the log.
    pub fn terminate(self) -> (std::process::ExitStatus, String) {
        self.child.signal("TERM").expect("SIGTERM sent");
        self.wait_for_exit()
    }
}

/// A raw HTTP/1.1 request to `address`, with a bearer key unless `None`;
/// returns the status line and the body.
pub fn raw_request(
    address: &str,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> (String, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(REQUEST_TIMEOUT)).unwrap();
    let auth = key.map_or(String::new(), |key| {
        format!("Authorization: Bearer {key}\r\n")
    });
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.lines().next().unwrap_or_default().to_owned();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The `address` of a "serving" record, in the JSON or the text format.
pub fn logged_address(record: &str) -> String {
    logged_field(record, "address").expect("the address is logged")
}

/// An address field of a record, in the JSON or the text format.
pub fn logged_field(record: &str, key: &str) -> Option<String> {
    let json = format!("\"{key}\":");
    let text = format!(" {key}: ");
    let after = record
        .split_once(&json)
        .or_else(|| record.split_once(&text))
        .map(|(_, after)| after)?;
    // A JSON string or a bare text value; anything else (null) is no address.
    let value = after.trim_start_matches('"');
    if !value.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some(
        value
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
            .collect(),
    )
}

impl Served {
    /// `http://ADDRESS/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// Kills the process with SIGKILL: no shutdown, no flush, no goodbye.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
    }
}

/// A client whose timeout ([`REQUEST_TIMEOUT`]) only guards against hangs.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap()
}

/// A database for one test: a SQLite file in `dir`, or a fresh PostgreSQL
/// database.
pub struct Database {
    /// The `--database` argument.
    pub url: String,
    pub dir: tempfile::TempDir,
    _postgres: Option<petstore_support::postgres::TestDatabase>,
}

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh database of `backend`; `None` only when PostgreSQL is
/// unavailable and the developer opted out.
pub async fn fresh_database(backend: Backend) -> Option<Database> {
    let dir = tempfile::tempdir().unwrap();
    Some(match backend {
        Backend::Sqlite => Database {
            url: format!("sqlite://{}", dir.path().join("petstore.db").display()),
            dir,
            _postgres: None,
        },
        Backend::Postgres => {
            let pg = petstore_support::postgres::fresh_database().await?;
            Database::on_postgres(pg)
        }
    })
}

impl Database {
    /// `database`, on PostgreSQL.
    pub fn on_postgres(database: petstore_support::postgres::TestDatabase) -> Database {
        Database {
            url: database.url().to_owned(),
            dir: tempfile::tempdir().unwrap(),
            _postgres: Some(database),
        }
    }
}

/// The ids stored under each name, read straight from the database (from
/// another process than the server's, for SQLite).
pub async fn stored_pets(url: &str) -> HashMap<String, Vec<i64>> {
    let rows: Vec<(String, i64)> = match url.strip_prefix("sqlite://") {
        Some(path) => {
            let conn = rusqlite::Connection::open(path).unwrap();
            let mut stmt = conn.prepare("SELECT name, id FROM pets").unwrap();
            stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        }
        None => {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let rows = client
                .query("SELECT name, id FROM pets", &[])
                .await
                .unwrap();
            rows.iter().map(|row| (row.get(0), row.get(1))).collect()
        }
    };
    let mut pets: HashMap<String, Vec<i64>> = HashMap::new();
    for (name, id) in rows {
        pets.entry(name).or_default().push(id);
    }
    pets
}

/// How many rows carry each name, read straight from the database.
pub async fn names_in_database(url: &str) -> HashMap<String, usize> {
    stored_pets(url)
        .await
        .into_iter()
        .map(|(name, ids)| (name, ids.len()))
        .collect()
}

/// `Served::start`, off the async workers: it waits for the process.
pub async fn serve(dir: &Path, args: &[&str]) -> Served {
    let dir = dir.to_owned();
    let args: Vec<String> = args.iter().map(ToString::to_string).collect();
    petstore_support::blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Served::start(&dir, &args)
    })
    .await
}

/// `Served::terminate`, off the async workers.
pub async fn stop(served: Served) -> (std::process::ExitStatus, String) {
    petstore_support::blocking(move || served.terminate()).await
}

/// A tool the CI installs: missing is a failure under `CI=true`, and
/// outside CI a skip that says so.
pub fn tool(path: &str) -> Option<&str> {
    if Path::new(path).exists() {
        return Some(path);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(!ci, "{path} is missing; .ci/run installs it");
    eprintln!("SKIPPED: {path} is not installed (CI installs it)");
    None
}

/// Retrying through a server killed and restarted, or a database restarted:
/// short waits, and attempts enough to outlast any restart (a bound all the
/// same, so that a real failure ends the test). Attempts are no deadline
/// (each may wait for a client's timeout): whoever awaits retrying clients
/// does it [`petstore_support::within`] [`THROUGH_A_RESTART`].
pub fn patient() -> petstore_client::RetryPolicy {
    petstore_client::RetryPolicy::with_max_attempts(20_000)
        .backoff(Duration::from_millis(5), Duration::from_millis(200))
}

/// `POST {base_url}{path}` of `body` with `Idempotency-Key: key`: the
/// status, the `Idempotent-Replayed` marker and the JSON body.
pub async fn post_keyed(
    base_url: &str,
    path: &str,
    key: &str,
    body: &serde_json::Value,
) -> (u16, Option<String>, serde_json::Value) {
    let response = client()
        .post(format!("{base_url}{path}"))
        .bearer_auth(KEY)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, replayed, response.json().await.unwrap())
}

/// Stops `cluster`, waits until `served` reports the outage (`/readyz`
/// answers 503), and starts the cluster again.
pub async fn restart_postgres_under(
    cluster: &std::sync::Arc<petstore_support::postgres::Cluster>,
    served: &Served,
) {
    let stopping = std::sync::Arc::clone(cluster);
    petstore_support::blocking(move || stopping.stop()).await;
    let readyz = format!("http://{}/readyz", served.admin_address.as_ref().unwrap());
    petstore_support::eventually_async_within("the server reports the outage", OUTAGE, || async {
        client().get(&readyz).send().await.unwrap().status() == 503
    })
    .await;
    let restarting = std::sync::Arc::clone(cluster);
    petstore_support::blocking(move || restarting.restart()).await;
}

/// Waits until another session waits for a lock `pg`'s session holds
/// (other tests share the cluster, so any other waiting lock says nothing):
/// a request sent just before, on its way to the database.
pub async fn until_a_session_waits_on(pg: &tokio_postgres::Client, what: &str) {
    let deadline = Duration::from_secs(60);
    petstore_support::eventually_async_within(what, deadline, || async {
        let row = pg
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0) >= 1
    })
    .await;
}

/// A CA and a server certificate for 127.0.0.1 signed by it, as PEM.
pub fn certificate_authority(
    dir: &Path,
    name: &str,
) -> (String, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("petstore test CA {name}"));
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, format!("petstore test server {name}"));
    let leaf = leaf.signed_by(&key, &ca).unwrap();
    let cert_file = dir.join(format!("{name}.crt"));
    let key_file = dir.join(format!("{name}.key"));
    std::fs::write(&cert_file, leaf.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (ca.pem(), cert_file, key_file)
}

/// A reqwest client trusting only `ca`, sending the test key, keeping its
/// connections open.
pub fn trusting(ca: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {KEY}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .default_headers(headers)
        .pool_idle_timeout(None)
        .build()
        .unwrap()
}
