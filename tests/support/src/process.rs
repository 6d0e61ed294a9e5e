//! Child processes that are killed and reaped when their guard is dropped,
//! so that no early return or failed assertion leaves one running.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{Deadline, poll_until};

/// A child process that is killed and reaped when dropped.
pub struct ChildGuard {
    child: Child,
    name: String,
}

impl ChildGuard {
    /// Spawns `command`, calling it `name` in messages.
    pub fn spawn(name: &str, command: &mut Command) -> std::io::Result<ChildGuard> {
        let child = command.spawn().map_err(|e| {
            std::io::Error::new(e.kind(), format!("starting {name} ({command:?}): {e}"))
        })?;
        Ok(ChildGuard {
            child,
            name: name.to_owned(),
        })
    }

    /// What the process is called in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child itself, e.g. to take its pipes.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The exit status, if the process has exited.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Waits up to `timeout` for the process to exit; `None` if it has not.
    /// The timeout only turns a hang into an error: it orders nothing.
    pub fn wait_timeout(&mut self, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
        let exited = poll_until(Deadline::after(timeout), Duration::from_millis(20), || {
            self.child.try_wait().transpose()
        });
        exited.transpose()
    }

    /// Sends `signal` (a name such as `TERM`, `INT`, `KILL`).
    pub fn signal(&self, signal: &str) -> std::io::Result<()> {
        // std has no portable way to send a signal; the kill command does it.
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "kill -{signal} {} ({}) failed: {status}",
                self.pid(),
                self.name
            )))
        }
    }

    /// Stops the process the way an operator would, with SIGTERM, and kills
    /// it if it has not exited within `timeout`. Returns its exit status, or
    /// `None` when it had to be killed.
    pub fn terminate(&mut self, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
        if self.signal("TERM").is_ok()
            && let Some(status) = self.wait_timeout(timeout)?
        {
            return Ok(Some(status));
        }
        self.kill()?;
        Ok(None)
    }

    /// Kills the process with SIGKILL and reaps it.
    pub fn kill(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        self.child.kill()?;
        self.child.wait()
    }
}

/// Runs `command` as [`Command::output`] does (no stdin; stdout and stderr
/// captured), but fails, killing it, if it has not exited and closed its
/// output within `deadline`: a command that should end never hangs a test.
pub fn output_within(command: &mut Command, deadline: Duration) -> std::io::Result<Output> {
    let until = Deadline::after(deadline);
    let mut child = ChildGuard::spawn(
        &format!("{command:?}"),
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )?;
    let stdout = read_all(child.child.stdout.take().expect("piped stdout"));
    let stderr = read_all(child.child.stderr.take().expect("piped stderr"));
    let Some(status) = child.wait_timeout(until.remaining())? else {
        child.kill()?;
        panic!("{} still running after {deadline:?}", child.name);
    };
    let collect = |pipe: mpsc::Receiver<Vec<u8>>, which: &str| {
        pipe.recv_timeout(until.remaining()).unwrap_or_else(|_| {
            panic!(
                "{}: its {which} still open after {deadline:?} (a process it started holds it?)",
                child.name
            )
        })
    };
    Ok(Output {
        status,
        stdout: collect(stdout, "stdout"),
        stderr: collect(stderr, "stderr"),
    })
}

/// Everything `pipe` gives until it closes, read on a thread of its own.
fn read_all(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        let _ = sender.send(bytes);
    });
    receiver
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_guard_kills_its_child() {
        let guard = ChildGuard::spawn("sleep", Command::new("sleep").arg("600")).unwrap();
        let pid = guard.pid();
        drop(guard);
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived its guard"
        );
    }

    #[test]
    fn terminate_reports_the_exit_status() {
        let mut guard = ChildGuard::spawn("sleep", Command::new("sleep").arg("600")).unwrap();
        let status = guard.terminate(Duration::from_secs(60)).unwrap();
        assert!(status.is_some_and(|status| !status.success()), "{status:?}");
    }

    #[test]
    fn output_within_captures_what_a_command_prints() {
        let output = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(output.status.code(), Some(3));
        assert_eq!(
            (&*output.stdout, &*output.stderr),
            (&b"out\n"[..], &b"err\n"[..])
        );
    }

    #[test]
    #[should_panic(expected = "still running after 100ms")]
    fn output_within_fails_a_command_that_does_not_end() {
        let _ = output_within(Command::new("sleep").arg("600"), Duration::from_millis(100));
    }
}
