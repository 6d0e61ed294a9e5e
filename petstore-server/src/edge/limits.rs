//! The edge's limits: how many API connections the server holds, and how
//! long a peer may take over each step, sized from the process's
//! open-file limit.
//!
//! Every connection costs a descriptor, and so does everything else the
//! process opens: when the descriptors run out, `accept` fails and the
//! database cannot open a file or a socket. So the cap is what the limit
//! leaves once a reserve is set aside for the rest, and a cap the limit
//! cannot hold is refused at start rather than discovered under load.

use std::time::Duration;

/// Descriptors kept for everything but API connections: standard streams
/// and the log, the SQLite files (database, WAL, shared memory, one set
/// per connection) or the default PostgreSQL pool and shared connections,
/// the two listeners, the management listener's connections, the runtime's
/// own (epoll, eventfd), and one connection accepted while the server waits
/// at the cap for another to close (128 for all of those); and a
/// connection for each webhook request the deliverer may have in flight.
pub const RESERVED_DESCRIPTORS: u64 = 128 + crate::webhooks::deliverer::IN_FLIGHT as u64;

/// The smallest cap [`EdgeLimits::sized_for`] gives: below it the server
/// could not serve a handful of clients and a scraper, whatever the limit.
pub const MIN_CONNECTIONS: usize = 64;

/// The timeouts' defaults: a legitimate client sends its request head and
/// body in far less; a peer that takes longer holds a descriptor for
/// nothing. (nginx's site in `deploy/` uses the same 10 s.)
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an HTTP/2 connection is pinged by default; one whose peer
/// does not answer within as long again is closed.
pub const DEFAULT_HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The edge's limits on API connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeLimits {
    /// The most API connections open at once. At the cap, a new connection
    /// evicts the one idle the longest; with none idle, it waits in the
    /// kernel's backlog until one closes.
    pub max_connections: usize,
    /// How long a connection may send nothing: before its first request,
    /// between keep-alive requests, or (HTTP/2) with no stream open.
    pub idle_timeout: Duration,
    /// How long an HTTP/1 request head may take to arrive: hyper's timer,
    /// from a connection's first bytes or, on a kept-alive connection, from
    /// the previous response (between requests, the shorter of this and
    /// the idle timeout applies).
    pub header_read_timeout: Duration,
    /// How long a TLS handshake may take.
    pub tls_handshake_timeout: Duration,
    /// How long a request body may take to arrive; past it, `408`.
    pub body_read_timeout: Duration,
    /// How often an HTTP/2 connection is pinged; one that does not answer
    /// within as long again is closed.
    pub http2_keep_alive_interval: Duration,
}

impl EdgeLimits {
    /// The defaults for a process whose soft open-file limit is `nofile`:
    /// the cap is what is left after [`RESERVED_DESCRIPTORS`], at least
    /// [`MIN_CONNECTIONS`] (which [`EdgeLimits::check`] then refuses if the
    /// limit cannot hold it).
    pub fn sized_for(nofile: u64) -> EdgeLimits {
        let left = nofile.saturating_sub(RESERVED_DESCRIPTORS);
        EdgeLimits {
            max_connections: usize::try_from(left)
                .unwrap_or(usize::MAX)
                .max(MIN_CONNECTIONS),
            idle_timeout: DEFAULT_TIMEOUT,
            header_read_timeout: DEFAULT_TIMEOUT,
            tls_handshake_timeout: DEFAULT_TIMEOUT,
            body_read_timeout: DEFAULT_TIMEOUT,
            http2_keep_alive_interval: DEFAULT_HTTP2_KEEP_ALIVE,
        }
    }

    /// The most connections a soft open-file limit of `nofile` holds.
    pub fn most_connections(nofile: u64) -> u64 {
        nofile.saturating_sub(RESERVED_DESCRIPTORS)
    }

    /// Refuses a cap the open-file limit `nofile` cannot hold.
    pub fn check(&self, nofile: u64) -> Result<(), LimitsError> {
        let most = EdgeLimits::most_connections(nofile);
        if self.max_connections == 0 || self.max_connections as u64 > most {
            return Err(LimitsError {
                max_connections: self.max_connections,
                nofile,
                most,
            });
        }
        Ok(())
    }
}

impl Default for EdgeLimits {
    /// [`EdgeLimits::sized_for`] the process's soft open-file limit now
    /// (1024, the usual default, if it cannot be read).
    fn default() -> EdgeLimits {
        EdgeLimits::sized_for(soft_nofile())
    }
}

/// The process's soft open-file limit (1024 if it cannot be read).
pub fn soft_nofile() -> u64 {
    rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
}

/// A connection cap the open-file limit cannot hold.
#[derive(Debug, thiserror::Error)]
#[error(
    "--max-connections {max_connections} does not fit the open-file limit (RLIMIT_NOFILE) of \
     {nofile}: with {RESERVED_DESCRIPTORS} descriptors kept for the database, the logs, the \
     management listener and webhook deliveries, it holds at most {most} connections; lower \
     --max-connections or raise the limit (LimitNOFILE= in the systemd unit, ulimit -n)"
)]
pub struct LimitsError {
    max_connections: usize,
    nofile: u64,
    most: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_the_limit_less_the_reserve() {
        assert_eq!(EdgeLimits::sized_for(768).max_connections, 384);
        assert_eq!(EdgeLimits::sized_for(65_536).max_connections, 65_152);
        for nofile in [512, 768, 1024, 65_536, 1 << 20] {
            EdgeLimits::sized_for(nofile).check(nofile).unwrap();
        }
    }

    #[test]
    fn a_tiny_limit_gets_the_floor_which_it_then_refuses() {
        let limits = EdgeLimits::sized_for(100);
        assert_eq!(limits.max_connections, MIN_CONNECTIONS);
        let error = limits.check(100).unwrap_err().to_string();
        assert!(
            error.contains("open-file limit (RLIMIT_NOFILE) of 100"),
            "{error}"
        );
        assert!(error.contains("at most 0 connections"), "{error}");
    }

    #[test]
    fn a_cap_above_the_limit_is_refused_naming_it() {
        let limits = EdgeLimits {
            max_connections: 1000,
            ..EdgeLimits::sized_for(768)
        };
        let error = limits.check(768).unwrap_err().to_string();
        assert!(
            error.starts_with("--max-connections 1000 does not fit the open-file limit"),
            "{error}"
        );
        assert!(error.contains("at most 384 connections"), "{error}");
        let zero = EdgeLimits {
            max_connections: 0,
            ..limits
        };
        assert!(zero.check(768).is_err());
    }

    #[test]
    fn the_default_fits_this_process() {
        EdgeLimits::default().check(soft_nofile()).unwrap();
    }
}
