//! Running the built `petstore-server` binary as an operator would.

#![allow(dead_code)] // each test binary uses part of this module

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_petstore-server");
pub const KEY: &str = "cli-test-key-3b9e";

/// The binary with a clean environment: none of the operator's settings leak in.
pub fn petstore(dir: &Path) -> Command {
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

pub fn run(command: &mut Command) -> (Output, String, String) {
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
pub struct Served {
    pub child: Child,
    pub address: String,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Served {
    pub fn start(dir: &Path, extra: &[&str]) -> Served {
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
    pub fn wait_for(&mut self, needle: &str) -> String {
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
    pub fn request(&self, method: &str, path: &str, key: &str, body: &str) -> (String, String) {
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
    pub fn terminate(mut self) -> (std::process::ExitStatus, String) {
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
pub fn logged_address(record: &str) -> String {
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

/// A test that fails half-way must not leave its server running.
impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Served {
    /// `http://ADDRESS/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// Kills the process with SIGKILL: no shutdown, no flush, no goodbye.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }
}
