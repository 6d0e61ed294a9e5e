//! Servers xtask starts as child processes (for `conformance` and `bench`):
//! started, waited for until they answer, stopped, and what `/proc` says
//! about them.

use std::collections::VecDeque;
use std::io::{PipeReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use petstore_support::ChildGuard;

use crate::workspace_root;

/// How long a server may take to answer after it is spawned (a 1M-pet
/// SQLite file or a PostgreSQL pool takes a moment).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to stop after SIGTERM.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

/// A server (the pet store, the bench's ceiling or peer), started as a child
/// process on the loopback interface.
pub struct Service {
    guard: ChildGuard,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The end of its output.
    output: Arc<Mutex<Tail>>,
}

impl Service {
    /// Spawns `command` (which must listen on `addr`) and waits until an
    /// authenticated `GET /v1/pets?limit=20` gets 200.
    ///
    /// Its stdout and stderr go to a pipe that a thread drains, keeping the
    /// end for error messages, and copying everything to `log` if given: the
    /// server logs every request, and a pipe to a log collector is what it
    /// writes to in production (systemd, containers), without filling a disk
    /// with gigabytes of logs under load.
    pub fn start(
        name: &str,
        command: &mut Command,
        (addr, key): (SocketAddr, &str),
        log: Option<std::fs::File>,
    ) -> anyhow::Result<Service> {
        let (reader, writer) = std::io::pipe().context("creating a pipe")?;
        command
            .stdin(Stdio::null())
            .stdout(writer.try_clone()?)
            .stderr(writer);
        let guard = ChildGuard::spawn(name, command);
        // The command holds the pipe's write end until told otherwise; without
        // this the drain would never see end-of-file.
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let output = Arc::new(Mutex::new(Tail::default()));
        drain(reader, Arc::clone(&output), log);
        let mut service = Service {
            guard: guard?,
            addr,
            output,
        };
        service.wait_until_ready(key)?;
        Ok(service)
    }

    fn wait_until_ready(&mut self, key: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.guard.try_wait()? {
                bail!(
                    "{} exited during start-up ({status}){}",
                    self.guard.name(),
                    self.log_tail()
                );
            }
            if status(self.addr, key) == Some(200) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not answer within {STARTUP_TIMEOUT:?}{}",
                    self.guard.name(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// CPU time the process has used so far (user + system, all threads).
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        let pid = self.guard.pid();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        let ticks = cpu_ticks(&stat).with_context(|| format!("/proc/{pid}/stat: {stat:?}"))?;
        Ok(Duration::from_secs_f64(
            ticks as f64 / clock_ticks_per_second(),
        ))
    }

    /// The most resident memory the process has had (`VmHWM`), in KiB.
    pub fn peak_rss_kib(&self) -> anyhow::Result<u64> {
        let pid = self.guard.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        peak_rss(&status).with_context(|| format!("no VmHWM in /proc/{pid}/status"))
    }

    /// Stops it with SIGTERM; fails when it does not exit cleanly.
    pub fn stop(self) -> anyhow::Result<()> {
        self.stop_accepting(ExitStatus::success)
    }

    /// Stops it with SIGTERM, as [`Service::stop`], but a server that does
    /// not handle the signal (a peer, say) may die of it.
    pub fn terminate(self) -> anyhow::Result<()> {
        use std::os::unix::process::ExitStatusExt;
        self.stop_accepting(|status| status.success() || status.signal() == Some(15))
    }

    /// Sends SIGTERM; fails unless it exits with a status `clean` accepts.
    fn stop_accepting(mut self, clean: impl Fn(&ExitStatus) -> bool) -> anyhow::Result<()> {
        match self.guard.terminate(SHUTDOWN_TIMEOUT)? {
            Some(status) if clean(&status) => Ok(()),
            Some(status) => bail!(
                "{} exited with {status} on SIGTERM{}",
                self.guard.name(),
                self.log_tail()
            ),
            None => bail!(
                "{} did not stop on SIGTERM; it was killed",
                self.guard.name()
            ),
        }
    }

    /// The end of its output, for error messages.
    pub fn log_tail(&self) -> String {
        let tail = self.output.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(tail.bytes.as_slices().0).into_owned()
            + &String::from_utf8_lossy(tail.bytes.as_slices().1);
        if text.trim().is_empty() {
            "; it printed nothing".to_owned()
        } else {
            format!("; the end of its output:\n{}", text.trim_end())
        }
    }
}

/// Builds the binaries `bins` (`(package, binary)`) with `cargo build` and
/// `flags`, and returns their paths as cargo reports them (so a custom target
/// directory is no problem), in the same order.
pub fn build(flags: &[&str], bins: &[(&str, &str)]) -> anyhow::Result<Vec<PathBuf>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace_root())
        .args(["build", "--message-format=json-render-diagnostics"]);
    for (package, bin) in bins {
        command.args(["-p", package, "--bin", bin]);
    }
    let output = command
        .args(flags)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !output.status.success() {
        bail!("cargo build {} failed: {}", flags.join(" "), output.status);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let messages: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let executable = |(_, name): &(&str, &str)| {
        let built = messages
            .iter()
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == *name);
        let path = built
            .filter_map(|m| m["executable"].as_str())
            .next()
            .map(PathBuf::from);
        path.with_context(|| format!("cargo build reported no {name} executable"))
    };
    bins.iter().map(executable).collect()
}

/// The status an authenticated `GET /v1/pets?limit=20` gets from `addr`, if
/// it answers at all. Plain HTTP/1.1 over a socket, so readiness needs no
/// HTTP client. (The bench's ceiling answers only the scenarios' requests,
/// `list20` among them.)
fn status(addr: SocketAddr, key: &str) -> Option<u16> {
    let response = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let request = format!("GET /v1/pets?limit=20 HTTP/1.1\r\nHost: {addr}\r\n");
        let request = format!("{request}Authorization: Bearer {key}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes())?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    };
    response()
        .ok()?
        .strip_prefix("HTTP/1.1 ")?
        .get(..3)?
        .parse()
        .ok()
}

/// The last bytes a process wrote.
#[derive(Default)]
struct Tail {
    bytes: VecDeque<u8>,
}

impl Tail {
    const KEEP: usize = 4096;

    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        let excess = self.bytes.len().saturating_sub(Tail::KEEP);
        self.bytes.drain(..excess);
    }
}

/// Reads `pipe` until end-of-file on a thread of its own, keeping the tail
/// and copying it all to `log`.
fn drain(mut pipe: PipeReader, tail: Arc<Mutex<Tail>>, mut log: Option<std::fs::File>) {
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = pipe.read(&mut buffer) {
            tail.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buffer[..n]);
            // A log that cannot be written loses lines, not the run.
            log.as_mut().map(|log| log.write_all(&buffer[..n]));
        }
    });
}

/// utime + stime, in clock ticks, from the text of `/proc/PID/stat`. The
/// command name (field 2) may hold spaces and parentheses, so the fields are
/// counted from the last `)`.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name come field 3 (state) onwards; utime is 14, stime 15.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// `VmHWM` in KiB from the text of `/proc/PID/status`.
pub fn peak_rss(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime() {
        // A real line, with a command name that has a space and a parenthesis.
        let stat = "4242 (tokio-rt (w) S 1 4242 4242 0 -1 4194560 3514 0 0 0 \
                    731 269 0 0 20 0 5 0 12345 1000000 800 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(731 + 269));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn peak_rss_is_vmhwm() {
        let status = "Name:\tpetstore-server\nVmPeak:\t  900000 kB\nVmHWM:\t   31337 kB\nVmRSS:\t   30000 kB\n";
        assert_eq!(peak_rss(status), Some(31337));
        assert_eq!(peak_rss("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_can_be_measured() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(cpu_ticks(&stat).is_some());
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(peak_rss(&status).unwrap() > 0);
    }

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let mut tail = Tail::default();
        tail.push(&[b'a'; 5000]);
        tail.push(b"end");
        assert_eq!(tail.bytes.len(), Tail::KEEP);
        assert!(tail.bytes.iter().rev().take(3).eq(b"dne".iter()));
    }
}
