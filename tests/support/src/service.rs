//! Servers started as child processes (by `cargo xtask conformance` and the
//! bench): built, started, waited for until they answer, stopped; and
//! animals created through their API.

use std::collections::VecDeque;
use std::io::{PipeReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};

use crate::{ChildGuard, Deadline, poll_until};

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
        let deadline = Deadline::after(STARTUP_TIMEOUT);
        let ready = poll_until(deadline, Duration::from_millis(50), || {
            match self.guard.try_wait() {
                Ok(None) => (status(self.addr, key) == Some(200)).then_some(Ok(())),
                Ok(Some(status)) => Some(Err(anyhow::anyhow!("exited during start-up ({status})"))),
                Err(e) => Some(Err(e.into())),
            }
        });
        match ready {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => bail!("{} {e:#}{}", self.guard.name(), self.log_tail()),
            None => bail!(
                "{} did not answer within {STARTUP_TIMEOUT:?}{}",
                self.guard.name(),
                self.log_tail()
            ),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.guard.pid()
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

/// Builds the binary `bin` of the workspace's `package` (`--release` or
/// not) and returns where cargo put it (so a custom target directory is no
/// problem). Should the build fail, the error holds the compiler's
/// diagnostics.
pub fn build(package: &str, bin: &str, release: bool) -> anyhow::Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let build = escargot::CargoBuild::new()
        .manifest_path(workspace)
        .package(package)
        .bin(bin)
        // Rendered on stderr too, which escargot keeps for its error.
        .arg("--message-format=json-render-diagnostics");
    let build = if release { build.release() } else { build };
    let built = build
        .run()
        .with_context(|| format!("cargo build -p {package} --bin {bin}"))?;
    Ok(built.path().to_owned())
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

/// Creates `count` available animals through `POST /v1/pets` of the
/// server at `addr`, many at once, and returns their ids: animals to
/// order (the bench's order scenarios, conformance's `placeOrder`).
pub async fn create_available(
    addr: SocketAddr,
    key: &str,
    count: usize,
) -> anyhow::Result<Vec<i64>> {
    let body = r#"{"name":"stock","categoryId":1,"status":"available"}"#;
    create_many(addr, key, "/v1/pets", body, count).await
}

/// Creates `count` webhook subscriptions of `target` (a URL the server
/// admits) through `POST /v1/webhooks` of the server at `addr`, and
/// returns their ids (conformance's webhook operations).
pub async fn create_webhooks(
    addr: SocketAddr,
    key: &str,
    target: &str,
    count: usize,
) -> anyhow::Result<Vec<i64>> {
    let body = serde_json::json!({ "url": target }).to_string();
    create_many(addr, key, "/v1/webhooks", &body, count).await
}

/// `count` times `POST path` of `body` to the server at `addr`, many at
/// once, each insisting on `201` and an `id`; the ids.
async fn create_many(
    addr: SocketAddr,
    key: &str,
    path: &str,
    body: &str,
    count: usize,
) -> anyhow::Result<Vec<i64>> {
    let client = reqwest::Client::new();
    let url = format!("http://{addr}{path}");
    let create = async |_| {
        let response = client
            .post(&url)
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .with_context(|| format!("POST {url}"))?;
        let status = response.status();
        let made: serde_json::Value = response
            .json()
            .await
            .with_context(|| format!("POST {url}: {status}, not a JSON body"))?;
        match made["id"].as_i64() {
            Some(id) if status == reqwest::StatusCode::CREATED => Ok(id),
            _ => bail!("POST {url}: {status} {made} (expected 201 and an id)"),
        }
    };
    futures::stream::iter(0..count)
        .map(create)
        .buffer_unordered(64)
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let mut tail = Tail::default();
        tail.push(&[b'a'; 5000]);
        tail.push(b"end");
        assert_eq!(tail.bytes.len(), Tail::KEEP);
        assert!(tail.bytes.iter().rev().take(3).eq(b"dne".iter()));
    }
}
