//! Development support, one helper in one place: used by the end-to-end
//! tests, the server's process tests, `cargo xtask` and the bench.
//!
//! - [`free_loopback_addr`]: a port to listen on.
//! - [`generate_key`]: a fresh API key for one run.
//! - [`ChildGuard`]: a child process that never outlives its owner.
//! - [`Service`]: a server started as a child process (built with
//!   [`build`]), waited for until it answers, and [`create_available`]
//!   animals to order from it.
//! - [`eventually`], [`eventually_async`] and their kin: waiting for a
//!   condition instead of for time, each wait with a deadline.
//! - [`Tmpfs`]: a small file system to fill up or make read-only.
//! - [`FaultProxy`]: a TCP proxy that loses responses and follows a
//!   restarted server.
//! - [`postgres`]: throwaway PostgreSQL clusters and test databases.
//!
//! It depends on nothing of the project, so every crate can use it.

mod mount;
pub mod postgres;
mod process;
mod proxy;
pub mod receiver;
mod service;
mod wait;

pub use mount::Tmpfs;
pub use process::{ChildGuard, output_within};
pub use proxy::FaultProxy;
pub use service::{Service, build, create_available, create_webhooks};
pub use wait::{
    Deadline, SOON, eventually, eventually_async, eventually_async_within, eventually_some,
    eventually_within, poll_until, within,
};

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};

/// A free port on 127.0.0.1, for a server the caller starts.
///
/// Two things could take the port before the caller binds it:
/// - another connection of the machine, a database client's say: so the
///   port is taken below the range the OS hands out by itself (to outgoing
///   connections, and to listeners on port 0);
/// - the probe itself: a child that another thread is starting holds a copy
///   of every descriptor until its `exec`, so a probe that listened would
///   keep listening there for a moment. So the probe only binds, with
///   `SO_REUSEADDR`, which a listener that also sets it (std's, tokio's,
///   PostgreSQL's, nginx's) is not refused beside ([`probe`]).
///
/// Should another process still take it, the caller's server fails to start
/// saying so.
pub fn free_loopback_addr() -> std::io::Result<SocketAddr> {
    let below = ephemeral_ports_start().unwrap_or(32768);
    if below > OWN_PORTS_START {
        for _ in 0..64 {
            let port = OWN_PORTS_START + random_u16()? % (below - OWN_PORTS_START);
            if let Ok(probe) = probe(port) {
                return probe.local_addr();
            }
        }
    }
    // No room below the ephemeral range, or all tries taken: the OS picks.
    probe(0)?.local_addr()
}

/// A socket bound to 127.0.0.1:`port` that does not listen: refused where a
/// listener already is, and no obstacle to one that comes after.
fn probe(port: u16) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind((Ipv4Addr::LOCALHOST, port).into())?;
    Ok(socket)
}

/// Where [`free_loopback_addr`] starts looking: above the ports services
/// are commonly configured on.
const OWN_PORTS_START: u16 = 20000;

/// The first port of the OS's ephemeral range (Linux), if it says.
fn ephemeral_ports_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

fn random_u16() -> std::io::Result<u16> {
    let mut bytes = [0u8; 2];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(u16::from_ne_bytes(bytes))
}

/// A single-use API key: `prefix-` and 192 random bits, hex-encoded (a valid
/// bearer token).
pub fn generate_key(prefix: &str) -> std::io::Result<String> {
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{prefix}-{hex}"))
}

/// Runs blocking `f` (waiting for a process, starting a cluster) on tokio's
/// blocking pool, off the async runtime's workers; a panic in `f` goes on
/// in the caller.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => value,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// `command` without any of the caller's `PETSTORE_*` settings: only what
/// the caller sets on it counts.
pub fn without_petstore_settings(
    command: &mut std::process::Command,
) -> &mut std::process::Command {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PETSTORE_") {
            command.env_remove(name);
        }
    }
    command
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn keys_are_fresh_bearer_tokens() {
        let (a, b) = (generate_key("t").unwrap(), generate_key("t").unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with("t-") && a.len() == 2 + 48, "{a}");
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn free_ports_are_outside_the_ranges_the_os_hands_out_and_can_be_bound() {
        let below = ephemeral_ports_start().unwrap();
        for _ in 0..20 {
            let addr = free_loopback_addr().unwrap();
            assert!((OWN_PORTS_START..below).contains(&addr.port()), "{addr}");
            TcpListener::bind(addr).unwrap();
        }
    }

    /// What a child being started by another thread holds between its
    /// `fork` and its `exec`: a copy of the probe's socket.
    #[test]
    fn a_probe_still_open_does_not_keep_a_server_from_the_port() {
        let copy = probe(0).unwrap();
        let addr = copy.local_addr().unwrap();
        let server = TcpListener::bind(addr).expect("the port is free for a server");
        assert!(
            probe(addr.port()).is_err(),
            "a probe finds the server there"
        );
        drop((copy, server));
    }
}
