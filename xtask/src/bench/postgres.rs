//! A throwaway PostgreSQL cluster for `--postgres`: `initdb` in a temporary
//! directory, `postgres` on a free loopback port (as the `postgres` user when
//! we are root, since both refuse to run as root), removed afterwards.

use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::process::{Guard, free_loopback_addr, is_root};

/// Runs `postgres` and cleans up after it. It waits on its standard input,
/// which is a pipe from the bench: when the pipe closes — the cluster is
/// dropped, or the bench exits or dies — it stops the server (fast shutdown)
/// and deletes the data directory, so no cluster outlives the bench.
/// PostgreSQL keeps its defaults (fsync on), as the SQLite store syncs too.
const KEEPER: &str = r#"
dir="$1"; port="$2"; bin="$3"
trap '' INT
"$bin/postgres" -D "$dir" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
  >"$dir/server.log" 2>&1 &
pid=$!
cat >/dev/null
kill -INT "$pid" 2>/dev/null; wait "$pid"
rm -rf "$dir"
"#;

/// A running throwaway cluster.
pub struct Cluster {
    port: u16,
    dir: PathBuf,
    keeper: Guard,
    control: Option<ChildStdin>,
}

impl Cluster {
    /// Initialises and starts a cluster; returns once it accepts sessions.
    pub fn start() -> anyhow::Result<Cluster> {
        let bin = server_binaries()?;
        let dir = tempfile::Builder::new()
            .prefix("petstore-bench-pg-")
            .tempdir()
            .context("creating a directory for the cluster")?
            .keep();
        let as_root = is_root();
        if as_root {
            run(Command::new("chown").arg("postgres:postgres").arg(&dir))?;
        }
        let data = dir.to_string_lossy().into_owned();
        let initdb = bin.join("initdb").to_string_lossy().into_owned();
        let init_args = [
            initdb.as_str(),
            "-D",
            &data,
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ];
        if let Err(e) = run(&mut as_postgres(as_root, &init_args)) {
            std::fs::remove_dir_all(&dir).ok();
            return Err(e);
        }
        let port = free_loopback_addr()?.port();
        let bin_dir = bin.to_string_lossy().into_owned();
        let keeper_args = [
            "sh",
            "-c",
            KEEPER,
            "keeper",
            &data,
            &port.to_string(),
            &bin_dir,
        ];
        let mut command = as_postgres(as_root, &keeper_args);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut keeper = Guard::spawn("postgres", &mut command)?;
        let control = keeper.take_stdin();
        let mut cluster = Cluster {
            port,
            dir,
            keeper,
            control,
        };
        cluster.wait_until_ready(&bin)?;
        Ok(cluster)
    }

    /// The URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Waits until the server accepts sessions, not only TCP connections.
    fn wait_until_ready(&mut self, bin: &std::path::Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return Ok(());
            }
            if self.keeper.try_wait()?.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                bail!("PostgreSQL did not start:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    /// Closing the pipe tells the keeper to stop the server and delete the
    /// data; the directory is removed here too in case the keeper could not.
    fn drop(&mut self) {
        drop(self.control.take());
        let _ = self.keeper.wait_timeout(Duration::from_secs(30));
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir).ok();
        }
    }
}

/// The directory with `initdb` and `postgres`: the newest
/// `/usr/lib/postgresql/*/bin`, or the directory of `initdb` on PATH.
fn server_binaries() -> anyhow::Result<PathBuf> {
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
        .context(
            "--postgres needs the PostgreSQL server binaries (initdb, postgres); \
             Debian: apt-get install postgresql",
        )
}

/// `args` as a command, run as the `postgres` user when we are root.
fn as_postgres(as_root: bool, args: &[&str]) -> Command {
    let mut command = if as_root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(args[0]);
        command
    } else {
        Command::new(args[0])
    };
    command.args(&args[1..]);
    command
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
