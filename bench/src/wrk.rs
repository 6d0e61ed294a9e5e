//! wrk, the load generator: installing it, running it, reading its results.

use std::collections::HashMap;
use std::fs::File;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use petstore_support::{ChildGuard, is_root};

/// Connections wrk keeps open.
pub const CONNECTIONS: u32 = 64;
/// wrk's threads.
pub const THREADS: u32 = 2;

/// What one wrk run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct WrkRun {
    /// Complete responses.
    pub requests: u64,
    /// How long wrk drove the server.
    pub duration: Duration,
    /// Median latency.
    pub p50: Duration,
    /// 99th-percentile latency.
    pub p99: Duration,
    /// Responses with a status of 400 or more.
    pub non_2xx: u64,
    /// Connect, read and write errors and timeouts.
    pub socket_errors: u64,
}

impl WrkRun {
    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.duration.as_secs_f64().max(1e-9)
    }

    /// Why this run must not count as throughput, if it must not.
    pub fn error(&self) -> Option<String> {
        let mut problems = Vec::new();
        if self.non_2xx > 0 {
            problems.push(format!("{} non-2xx responses", self.non_2xx));
        }
        if self.socket_errors > 0 {
            problems.push(format!("{} socket errors/timeouts", self.socket_errors));
        }
        if self.requests == 0 {
            problems.push("no responses".to_owned());
        }
        (!problems.is_empty()).then(|| problems.join(", "))
    }
}

/// Makes sure `wrk` can be run: installs the Debian package when it is
/// missing and we are root, otherwise says how to get it.
pub fn ensure_installed() -> anyhow::Result<()> {
    if version().is_some() {
        return Ok(());
    }
    if !is_root() {
        bail!("wrk is not installed; install it (Debian: sudo apt-get install wrk) and rerun");
    }
    println!("bench: installing wrk (apt-get install -y wrk)");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "wrk"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    // A fresh machine may have no package lists yet.
    if !install() {
        let _ = Command::new("apt-get").args(["update", "-qq"]).status();
        if !install() {
            bail!("apt-get install -y wrk failed; install wrk by hand and rerun");
        }
    }
    if version().is_none() {
        bail!("wrk was installed but cannot be run");
    }
    Ok(())
}

/// wrk's version line, for the report; `None` when wrk cannot be run. (It
/// prints its version and exits non-zero for `-v`: that it started at all is
/// what counts.)
pub fn version() -> Option<String> {
    let out = Command::new("wrk").arg("-v").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or("wrk (unknown version)");
    Some(line.split(" Copyright").next().unwrap_or(line).to_owned())
}

/// Drives `addr` with `script` for `duration`; `out` is a scratch file for
/// wrk's output. wrk is killed if it runs far longer than asked.
pub fn run(
    script: &Path,
    addr: SocketAddr,
    duration: Duration,
    out: &Path,
) -> anyhow::Result<WrkRun> {
    let stdout = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut command = Command::new("wrk");
    command
        .args(["-t", &THREADS.to_string(), "-c", &CONNECTIONS.to_string()])
        .args(["-d", &format!("{}s", duration.as_secs())])
        .arg("-s")
        .arg(script)
        .arg(format!("http://{addr}"))
        // The scripts' `init(args)` learn how many threads share the work.
        .args(["--", &THREADS.to_string()])
        .stdin(Stdio::null())
        .stdout(stdout.try_clone()?)
        .stderr(stdout);
    let mut wrk = ChildGuard::spawn("wrk", &mut command)?;
    let status = wrk
        .wait_timeout(duration + Duration::from_secs(30))?
        .context("wrk did not finish in time; it was killed")?;
    let output = std::fs::read_to_string(out).unwrap_or_default();
    if !status.success() {
        bail!("wrk failed ({status}):\n{output}");
    }
    parse(&output).with_context(|| format!("reading wrk's output:\n{output}"))
}

/// Reads the line [`super::scenario::DONE_HOOK`] prints.
pub fn parse(output: &str) -> anyhow::Result<WrkRun> {
    let line = output
        .lines()
        .find_map(|line| line.strip_prefix("BENCH "))
        .context("no BENCH line (did the script's done() run?)")?;
    let fields: HashMap<&str, f64> = line
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
        .collect();
    let field = |name: &str| {
        fields
            .get(name)
            .copied()
            .with_context(|| format!("no {name} in {line:?}"))
    };
    let micros = |name: &str| field(name).map(|us| Duration::from_micros(us as u64));
    Ok(WrkRun {
        requests: field("requests")? as u64,
        duration: micros("duration_us")?,
        p50: micros("p50_us")?,
        p99: micros("p99_us")?,
        non_2xx: field("non2xx")? as u64,
        socket_errors: ["connect", "read", "write", "timeout"]
            .into_iter()
            .map(|name| field(name).map(|n| n as u64))
            .sum::<anyhow::Result<u64>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "Running 3s test @ http://127.0.0.1:4000
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     5.01ms    2.11ms  41.20ms   80.00%
  30000 requests in 3.00s, 9.00MB read
Requests/sec:  10000.00
Transfer/sec:      3.00MB
BENCH requests=30000 duration_us=3000500 bytes=9437184 p50_us=4500 p90_us=7000 p99_us=12345 max_us=41200 non2xx=0 connect=0 read=0 write=0 timeout=0
";

    #[test]
    fn the_bench_line_is_read() {
        let run = parse(OUTPUT).unwrap();
        assert_eq!(run.requests, 30000);
        assert_eq!(run.duration, Duration::from_micros(3_000_500));
        assert_eq!(run.p50, Duration::from_micros(4500));
        assert_eq!(run.p99, Duration::from_micros(12345));
        assert_eq!(run.non_2xx, 0);
        assert_eq!(run.socket_errors, 0);
        assert!((run.rate() - 9998.33).abs() < 0.01, "{}", run.rate());
        assert_eq!(run.error(), None);
    }

    #[test]
    fn errors_make_the_run_an_error() {
        let output = OUTPUT
            .replace("non2xx=0", "non2xx=17")
            .replace("timeout=0", "timeout=2");
        let run = parse(&output).unwrap();
        assert_eq!(run.non_2xx, 17);
        assert_eq!(run.socket_errors, 2);
        assert_eq!(
            run.error().as_deref(),
            Some("17 non-2xx responses, 2 socket errors/timeouts")
        );
    }

    #[test]
    fn output_without_the_line_or_a_field_is_refused() {
        assert!(parse("Requests/sec: 5\n").is_err());
        let output = OUTPUT.replace(" p99_us=12345", "");
        assert!(parse(&output).unwrap_err().to_string().contains("p99_us"));
    }
}
