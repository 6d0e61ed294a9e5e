//! Real PostgreSQL for the tests: a throwaway cluster started from the
//! machine's PostgreSQL server binaries, or the server named by
//! `PETSTORE_TEST_DATABASE_URL`.
//!
//! PostgreSQL is part of what the tests must cover, so its absence is an
//! error. A developer without it can opt out explicitly with
//! `PETSTORE_TEST_SKIP_POSTGRES=1`; under `CI=true` that opt-out is refused.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

/// Where the tests get their PostgreSQL databases from.
pub enum Postgres {
    /// A cluster this process started; stopped when the process exits.
    Cluster(Cluster),
    /// An existing server: `PETSTORE_TEST_DATABASE_URL`, whose role may
    /// create databases.
    External {
        /// The URL given, naming a database to connect to for administration.
        admin_url: String,
    },
}

/// Why PostgreSQL tests cannot run, or `None` when they can; panics (fails
/// the test) when PostgreSQL is missing and no explicit opt-out was given.
pub fn shared() -> Option<&'static Postgres> {
    static SHARED: OnceLock<Result<Postgres, String>> = OnceLock::new();
    let postgres = SHARED.get_or_init(|| match std::env::var("PETSTORE_TEST_DATABASE_URL") {
        Ok(admin_url) => Ok(Postgres::External { admin_url }),
        Err(_) => Cluster::start().map(Postgres::Cluster),
    });
    match postgres {
        Ok(postgres) => Some(postgres),
        Err(why) => unavailable(why),
    }
}

/// Fails loudly, unless the developer opted out (never under CI).
pub fn unavailable(why: &str) -> Option<&'static Postgres> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let opted_out = std::env::var("PETSTORE_TEST_SKIP_POSTGRES").is_ok_and(|v| v == "1");
    if opted_out && !ci {
        eprintln!(
            "\n!!! PostgreSQL UNAVAILABLE ({why}): PostgreSQL tests NOT RUN \
             (PETSTORE_TEST_SKIP_POSTGRES=1)\n"
        );
        return None;
    }
    panic!(
        "PostgreSQL is unavailable: {why}\n\
         Install the PostgreSQL server (Debian: apt-get install postgresql), or set \
         PETSTORE_TEST_DATABASE_URL=postgres://USER:PASSWORD@HOST:PORT/DATABASE (a role that may \
         create databases), or, outside CI only, skip these tests with \
         PETSTORE_TEST_SKIP_POSTGRES=1."
    );
}

impl Postgres {
    /// A new, empty database; returns its URL.
    pub async fn fresh_database(&self) -> String {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "petstore_test_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let admin_url = self.admin_url();
        let (client, connection) = tokio_postgres::connect(&admin_url, NoTls)
            .await
            .expect("connect to PostgreSQL");
        let connection = tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
            .await
            .expect("create a test database");
        drop(client);
        let _ = connection.await;
        with_database(&admin_url, &name)
    }

    fn admin_url(&self) -> String {
        match self {
            Postgres::Cluster(cluster) => cluster.url("postgres"),
            Postgres::External { admin_url } => admin_url.clone(),
        }
    }
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (without_query, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let after_scheme = without_query.find("://").map_or(0, |i| i + 3);
    let base = match without_query[after_scheme..].find('/') {
        Some(slash) => &without_query[..after_scheme + slash],
        None => without_query,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

/// A PostgreSQL cluster in a temporary directory, on a free loopback port.
///
/// The server runs under a small shell supervisor that reads commands
/// (`stop`, `start`) on its standard input; when this process exits, the
/// pipe closes and the supervisor stops the server and deletes the data
/// directory, so no cluster outlives the tests — even when a static one is
/// never dropped.
pub struct Cluster {
    port: u16,
    dir: PathBuf,
    bin: PathBuf,
    control: Mutex<Option<ChildStdin>>,
    supervisor: Mutex<Child>,
}

/// Closing the supervisor's input stops the server and deletes its data;
/// wait (a bounded time) for that to finish.
impl Drop for Cluster {
    fn drop(&mut self) {
        drop(
            self.control
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        let supervisor = self.supervisor.get_mut().unwrap_or_else(|e| e.into_inner());
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(supervisor.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

// "$4" is `on` or `off` for PostgreSQL's `fsync`.
const SUPERVISOR: &str = r#"
dir="$1"; port="$2"; bin="$3"; fsync="$4"
start() { "$bin/postgres" -D "$dir" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
              -c max_connections=300 -c fsync="$fsync" >>"$dir/server.log" 2>&1 & pid=$!; }
start
while read -r command; do
  case "$command" in
    stop) kill -INT "$pid"; wait "$pid" ;;
    start) start ;;
  esac
done
kill -INT "$pid" 2>/dev/null; wait "$pid"
rm -rf "$dir"
"#;

impl Cluster {
    /// A cluster for tests: `fsync=off` only spares the disk flushes — the
    /// tests kill petstore processes, never the machine, so PostgreSQL's own
    /// durability is not what they measure.
    pub fn start() -> Result<Cluster, String> {
        Cluster::start_with_fsync(false)
    }

    /// A cluster with PostgreSQL's default durability (`fsync=on`), for
    /// measurements.
    pub fn start_durable() -> Result<Cluster, String> {
        Cluster::start_with_fsync(true)
    }

    /// Initialises and starts a new cluster; waits until it accepts connections.
    fn start_with_fsync(fsync: bool) -> Result<Cluster, String> {
        let bin = server_binaries()?;
        let dir = tempfile::Builder::new()
            .prefix("petstore-pg-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?
            .keep();
        let as_root = is_root();
        if as_root {
            // initdb and postgres refuse to run as root.
            run(Command::new("chown").arg("postgres:postgres").arg(&dir))?;
        }
        let data = dir.to_string_lossy().into_owned();
        let initdb = bin.join("initdb").to_string_lossy().into_owned();
        run(&mut as_postgres(
            as_root,
            &[
                &initdb,
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ],
        ))?;
        let port = free_port()?;
        let bin_dir = bin.to_string_lossy().into_owned();
        let mut supervisor = as_postgres(
            as_root,
            &[
                "sh",
                "-c",
                SUPERVISOR,
                "supervisor",
                &data,
                &port.to_string(),
                &bin_dir,
                if fsync { "on" } else { "off" },
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting postgres: {e}"))?;
        let control = supervisor.stdin.take().expect("piped stdin");
        let cluster = Cluster {
            port,
            dir: dir.clone(),
            bin: bin.clone(),
            control: Mutex::new(Some(control)),
            supervisor: Mutex::new(supervisor),
        };
        cluster.wait_until_ready(&dir, &bin)?;
        Ok(cluster)
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops the server (a fast shutdown); the data stays.
    pub fn stop(&self) {
        self.command("stop");
    }

    /// Starts the server again on the same port and data; waits until ready.
    pub fn restart(&self) {
        self.command("start");
        self.wait_until_ready(&self.dir, &self.bin)
            .expect("PostgreSQL comes back");
    }

    fn command(&self, command: &str) {
        let mut control = self.control.lock().expect("control lock");
        let control = control.as_mut().expect("the cluster is running");
        writeln!(control, "{command}").expect("the supervisor is running");
        control.flush().expect("the supervisor is running");
    }

    /// Waits until the server accepts sessions (`pg_isready`), not only TCP
    /// connections: a starting server refuses sessions for a while.
    fn wait_until_ready(&self, dir: &Path, bin: &Path) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return Ok(());
            }
            if let Ok(Some(status)) = self.supervisor.lock().expect("lock").try_wait() {
                let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                return Err(format!("postgres exited ({status}):\n{log}"));
            }
            if Instant::now() > deadline {
                return Err("postgres did not accept connections within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The directory with `initdb` and `postgres`: `PETSTORE_TEST_PG_BINDIR`, the
/// newest `/usr/lib/postgresql/*/bin`, or the directory of `initdb` on PATH.
fn server_binaries() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("PETSTORE_TEST_PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|dir| dir.join("initdb").exists() && dir.join("postgres").exists())
        .ok_or_else(|| "no PostgreSQL server binaries (initdb, postgres) found".to_owned())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// `args` as a command, run as the `postgres` user when we are root.
fn as_postgres(as_root: bool, args: &[&str]) -> Command {
    if as_root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).args(args);
        command
    } else {
        let mut command = Command::new(args[0]);
        command.args(&args[1..]);
        command
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_names_are_swapped_in_urls() {
        assert_eq!(
            with_database("postgres://u:p@h:5/admin", "t1"),
            "postgres://u:p@h:5/t1"
        );
        assert_eq!(with_database("postgres://u@h", "t1"), "postgres://u@h/t1");
        assert_eq!(
            with_database("postgres://u@h/admin?sslmode=disable", "t1"),
            "postgres://u@h/t1?sslmode=disable"
        );
    }
}
