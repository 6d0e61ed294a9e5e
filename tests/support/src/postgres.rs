//! Real PostgreSQL for the tests and the bench: a throwaway cluster started
//! from the machine's PostgreSQL server binaries, or the server named by
//! `PETSTORE_TEST_DATABASE_URL`.
//!
//! PostgreSQL is part of what the tests must cover, so its absence is an
//! error. A developer without it can opt out explicitly with
//! `PETSTORE_TEST_SKIP_POSTGRES=1`; under `CI=true` that opt-out is refused.
//!
//! Everything here that blocks (starting a cluster, stopping it) is a plain
//! blocking function; async callers run it with [`crate::blocking`], off
//! the async runtime's worker threads.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio_postgres::NoTls;

use crate::{ChildGuard, Deadline, blocking, free_loopback_addr, is_root, poll_until};

/// How long a cluster may take to accept sessions after it is started. Only
/// a hang guard: the wait ends as soon as the server is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the tests get their PostgreSQL databases from.
pub enum Postgres {
    /// A cluster this process started; removed when the process exits.
    Cluster(Cluster),
    /// An existing server: `PETSTORE_TEST_DATABASE_URL`, whose role may
    /// create databases.
    External {
        /// The URL given, naming a database to connect to for administration.
        admin_url: String,
    },
}

/// The PostgreSQL server shared by every test of this process, or `None`
/// when PostgreSQL is unavailable and the developer opted out; panics (fails
/// the test) when it is missing and no explicit opt-out was given. Blocks
/// the first time (it may start a cluster): async callers use
/// [`fresh_database`].
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

/// A new, empty database on the shared server (see [`shared`]).
pub async fn fresh_database() -> Option<TestDatabase> {
    let postgres = blocking(shared).await?;
    Some(postgres.fresh_database().await)
}

/// Fails loudly, unless the developer opted out (never under CI).
pub fn unavailable<T>(why: &str) -> Option<T> {
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

/// A database created for one test. On an external server it is dropped
/// when this is dropped; a throwaway cluster is removed whole at exit.
pub struct TestDatabase {
    url: String,
    /// The administration URL and the name, when the database must be
    /// dropped explicitly.
    drop_from: Option<(String, String)>,
}

impl TestDatabase {
    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.drop_from.take() else {
            return;
        };
        // Drop may run inside an async runtime, which cannot block on
        // another: the statement runs on a thread with a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let client = admin_client(&admin_url).await?;
                client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .map_err(|e| format!("dropping test database {name}: {e}"))
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(why)) => eprintln!("warning: {why}"),
            Err(_) => eprintln!("warning: dropping a test database panicked"),
        }
    }
}

async fn admin_client(admin_url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(admin_url, NoTls)
        .await
        .map_err(|e| format!("connecting to PostgreSQL: {e}"))?;
    tokio::spawn(connection);
    Ok(client)
}

impl Postgres {
    /// A new, empty database.
    pub async fn fresh_database(&self) -> TestDatabase {
        match self {
            Postgres::Cluster(cluster) => cluster.fresh_database().await,
            Postgres::External { admin_url } => create_database(admin_url, true).await,
        }
    }
}

/// Creates a database through `admin_url`; `drop` says whether it must be
/// dropped explicitly when the returned guard is.
async fn create_database(admin_url: &str, drop: bool) -> TestDatabase {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "petstore_test_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let client = admin_client(admin_url)
        .await
        .expect("connect to PostgreSQL");
    client
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
        .await
        .expect("create a test database");
    TestDatabase {
        url: with_database(admin_url, &name),
        drop_from: drop.then(|| (admin_url.to_owned(), name)),
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
/// The server runs under a small shell supervisor that takes commands
/// (`stop`, `start`) on its standard input and answers each on its standard
/// output once done. When this process exits, the pipe closes and the
/// supervisor stops the server and deletes the data directory, so no
/// cluster outlives its owner — even a static one that is never dropped.
pub struct Cluster {
    port: u16,
    dir: PathBuf,
    bin: PathBuf,
    control: Mutex<Control>,
    supervisor: Mutex<ChildGuard>,
}

/// The supervisor's two pipes.
struct Control {
    commands: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
}

/// Closing the supervisor's input stops the server and deletes its data;
/// wait for that to finish (the guard kills the supervisor if it hangs).
impl Drop for Cluster {
    fn drop(&mut self) {
        let control = self.control.get_mut().unwrap_or_else(|e| e.into_inner());
        drop(control.commands.take());
        let supervisor = self.supervisor.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = supervisor.wait_timeout(Duration::from_secs(60));
    }
}

// "$4" is `on` or `off` for PostgreSQL's `fsync`. Each command is answered
// on stdout once it has taken effect: `stopped` after the postmaster (and
// with it every backend) has exited.
const SUPERVISOR: &str = r#"
dir="$1"; port="$2"; bin="$3"; fsync="$4"
start() { "$bin/postgres" -D "$dir" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
              -c max_connections=300 -c fsync="$fsync" >>"$dir/server.log" 2>&1 & pid=$!; }
start
while read -r command; do
  case "$command" in
    stop) kill -INT "$pid"; wait "$pid"; echo stopped ;;
    start) start; echo started ;;
    freeze) children=$(cat /proc/"$pid"/task/*/children); kill -STOP $children "$pid"; echo frozen ;;
    kill) children=$(cat /proc/"$pid"/task/*/children); kill -KILL "$pid" $children; wait "$pid"; echo killed ;;
    thaw) children=$(cat /proc/"$pid"/task/*/children); kill -CONT "$pid" $children; echo thawed ;;
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

    /// Initialises and starts a new cluster; waits until it accepts sessions.
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
        Cluster::launch(bin, dir, fsync, None)
    }

    /// A standby of `primary` named `name`: a base backup of it, started
    /// streaming from it (`pg_basebackup -R`), `name` its
    /// `application_name` on the primary (see [`Cluster::make_synchronous`]).
    /// Returns once it accepts (read-only) sessions; on `port` if given,
    /// else on a free one.
    pub fn standby_of(primary: &Cluster, name: &str, port: Option<u16>) -> Result<Cluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("petstore-pg-standby-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?
            .keep();
        // PostgreSQL refuses a data directory others may read; initdb sees
        // to that, pg_basebackup leaves an existing directory as it is.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let as_root = is_root();
        if as_root {
            run(Command::new("chown").arg("postgres:postgres").arg(&dir))?;
        }
        let data = dir.to_string_lossy().into_owned();
        let basebackup = primary.bin.join("pg_basebackup");
        let source = format!(
            "host=127.0.0.1 port={} user=postgres application_name={name}",
            primary.port
        );
        run(&mut as_postgres(
            as_root,
            &[
                &basebackup.to_string_lossy(),
                "-D",
                &data,
                "-d",
                &source,
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
                "--no-sync",
            ],
        ))?;
        // `-R` writes the connection it was given, but not every setting of
        // it in every version: say the standby's name here, last, to win.
        let auto_conf = dir.join("postgresql.auto.conf");
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(&auto_conf)
            .map_err(|e| format!("{}: {e}", auto_conf.display()))?;
        writeln!(conf, "primary_conninfo = '{source}'")
            .map_err(|e| format!("{}: {e}", auto_conf.display()))?;
        Cluster::launch(primary.bin.clone(), dir, false, port)
    }

    /// Starts the server of the data directory `dir` under a supervisor, on
    /// `port` or a free one; waits until it accepts sessions.
    fn launch(
        bin: PathBuf,
        dir: PathBuf,
        fsync: bool,
        port: Option<u16>,
    ) -> Result<Cluster, String> {
        let as_root = is_root();
        let data = dir.to_string_lossy().into_owned();
        let port = match port {
            Some(port) => port,
            None => free_loopback_addr()
                .map_err(|e| format!("finding a free port: {e}"))?
                .port(),
        };
        let bin_dir = bin.to_string_lossy().into_owned();
        let mut supervisor = ChildGuard::spawn(
            "the PostgreSQL supervisor",
            as_postgres(
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
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        )
        .map_err(|e| e.to_string())?;
        let commands = supervisor.child_mut().stdin.take();
        let answers = supervisor.child_mut().stdout.take().expect("piped stdout");
        let cluster = Cluster {
            port,
            dir,
            bin,
            control: Mutex::new(Control {
                commands,
                answers: BufReader::new(answers),
            }),
            supervisor: Mutex::new(supervisor),
        };
        cluster.wait_until_ready()?;
        Ok(cluster)
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Makes the standby `name` synchronous: once it streams, every commit
    /// on this primary waits until the standby has flushed it. (Asked for
    /// before the standby streams, every commit would wait for ever.)
    pub async fn make_synchronous(&self, name: &str) -> Result<(), String> {
        let client = admin_client(&self.url("postgres")).await?;
        let sql = |e: tokio_postgres::Error| {
            let reason = e
                .as_db_error()
                .map_or(e.to_string(), |db| db.message().to_owned());
            format!("making {name} synchronous: {reason}")
        };
        let state = "SELECT sync_state FROM pg_stat_replication
                     WHERE application_name = $1 AND state = 'streaming'";
        let deadline = Deadline::after(READY_TIMEOUT);
        while client
            .query_opt(state, &[&name])
            .await
            .map_err(sql)?
            .is_none()
        {
            deadline.check(&format!("the standby {name} streams"));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Two statements: ALTER SYSTEM refuses to run in a transaction.
        client
            .batch_execute(&format!(
                "ALTER SYSTEM SET synchronous_standby_names = '{name}'"
            ))
            .await
            .map_err(sql)?;
        client
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .map_err(sql)?;
        loop {
            let row = client.query_opt(state, &[&name]).await.map_err(sql)?;
            if row.is_some_and(|row| row.get::<_, &str>(0) == "sync") {
                return Ok(());
            }
            deadline.check(&format!("the standby {name} is synchronous"));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Has the WAL writer run only every 10 s (PostgreSQL's default: every
    /// 200 ms), so that a commit that does not wait for the disk stays
    /// unflushed unless something else flushes it; returns once the server
    /// runs with it (a reload is taken up asynchronously).
    pub async fn slow_wal_writer(&self) -> Result<(), String> {
        let client = admin_client(&self.url("postgres")).await?;
        let sql = |e: tokio_postgres::Error| format!("slowing the WAL writer: {e}");
        // Each its own statement: ALTER SYSTEM runs in no transaction.
        for statement in [
            "ALTER SYSTEM SET wal_writer_delay = '10s'",
            "SELECT pg_reload_conf()",
        ] {
            client.batch_execute(statement).await.map_err(sql)?;
        }
        let deadline = Deadline::after(READY_TIMEOUT);
        loop {
            let row = client.query_one("SHOW wal_writer_delay", &[]).await;
            if row.map_err(sql)?.get::<_, &str>(0) == "10s" {
                return Ok(());
            }
            deadline.check("the WAL writer runs every 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Promotes this standby to primary; returns once it accepts writes.
    pub async fn promote(&self) -> Result<(), String> {
        let client = admin_client(&self.url("postgres")).await?;
        let promoted: bool = client
            .query_one("SELECT pg_promote(true, 60)", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| format!("promoting the standby: {e}"))?;
        match promoted {
            true => Ok(()),
            false => Err("the standby was not promoted within 60 s".to_owned()),
        }
    }

    /// A new, empty database on this cluster (removed with the cluster).
    pub async fn fresh_database(&self) -> TestDatabase {
        create_database(&self.url("postgres"), false).await
    }

    /// Stops the server (a fast shutdown); the data stays. Returns once the
    /// server and all its backends have exited.
    pub fn stop(&self) {
        self.command("stop", "stopped");
    }

    /// Freezes the server and every backend (SIGSTOP): connections stay
    /// open and accept bytes, but nothing answers — a hung database, as a
    /// network partition or a stalled disk makes one.
    pub fn freeze(&self) {
        self.command("freeze", "frozen");
    }

    /// Kills the server and every backend at once (SIGKILL), as a crash of
    /// its machine would; frozen or not.
    pub fn kill(&self) {
        self.command("kill", "killed");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        self.command("thaw", "thawed");
    }

    /// Starts the server again on the same port and data; returns once it
    /// accepts sessions.
    pub fn restart(&self) {
        self.command("start", "started");
        self.wait_until_ready().expect("PostgreSQL comes back");
    }

    /// Sends `command` to the supervisor and waits for its `answer`.
    fn command(&self, command: &str, answer: &str) {
        let mut control = self.control.lock().expect("control lock");
        let commands = control.commands.as_mut().expect("the cluster is running");
        writeln!(commands, "{command}").expect("the supervisor is running");
        commands.flush().expect("the supervisor is running");
        let mut line = String::new();
        control
            .answers
            .read_line(&mut line)
            .expect("the supervisor answers");
        assert_eq!(line.trim(), answer, "the supervisor's answer to {command}");
    }

    /// Waits until the server accepts sessions (`pg_isready`), not only TCP
    /// connections: a starting server refuses sessions for a while.
    fn wait_until_ready(&self) -> Result<(), String> {
        let ready = poll_until(
            Deadline::after(READY_TIMEOUT),
            Duration::from_millis(50),
            || {
                let ready = Command::new(self.bin.join("pg_isready"))
                    .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                    .status()
                    .is_ok_and(|status| status.success());
                if ready {
                    return Some(Ok(()));
                }
                let exited = self.supervisor.lock().expect("lock").try_wait();
                let Ok(Some(status)) = exited else {
                    return None;
                };
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                Some(Err(format!("postgres exited ({status}):\n{log}")))
            },
        );
        ready.unwrap_or_else(|| {
            Err(format!(
                "postgres did not accept sessions within {READY_TIMEOUT:?}"
            ))
        })
    }
}

/// A cluster of one's own (e.g. to stop it), shared with blocking tasks.
pub async fn own_cluster() -> Option<Arc<Cluster>> {
    match blocking(Cluster::start).await {
        Ok(cluster) => Some(Arc::new(cluster)),
        Err(why) => unavailable(&why),
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
        .find(|dir| has_server(dir))
        .ok_or_else(|| "no PostgreSQL server binaries (initdb, postgres) found".to_owned())
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").exists() && dir.join("postgres").exists()
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
