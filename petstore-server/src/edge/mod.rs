//! The API's edge: the binary faces the internet itself, so it accepts its
//! own connections instead of leaving that to dropshot's `start()`, which
//! has no cap on connections and no timeout before a peer's first byte or
//! on a TLS handshake (vendor patch 0003, dropshot#726).
//!
//! - `mod.rs` (here): the accept loop, the connection cap and eviction,
//!   and shutdown.
//! - [`limits`]: the settings and their sizing from the open-file limit.
//! - `connection`: one connection's life (TLS handshake, HTTP, timeouts).
//! - `table`: the open connections and which is idle the longest.
//! - `tracked`: the service wrapper that says whether a connection is idle.
//!
//! What each connection is served with comes from a function of its
//! remote address, so that whatever wraps dropshot's per-connection
//! service (a rate limiter, say) composes here without the edge knowing.

pub mod limits;

mod connection;
mod table;
mod tracked;

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use limits::{EdgeLimits, LimitsError};

use crate::metrics::Metrics;
use table::{Eviction, Table};

/// How long the accept loop pauses after `accept` fails (out of
/// descriptors, mostly): connections close meanwhile, instead of the loop
/// spinning on the same error.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Long enough never to pass while the accept loop waits for a change.
const FOREVER: Duration = Duration::from_secs(24 * 60 * 60);

/// Where the server is in its life, as every connection sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Accepting and serving.
    Serving,
    /// Not accepting; idle connections close, busy ones after their
    /// requests.
    Draining,
    /// Past the shutdown deadline: every connection closes now.
    Cut,
}

/// What the accept loop and every connection share.
struct Shared {
    limits: EdgeLimits,
    table: Arc<Table>,
    phase: watch::Receiver<Phase>,
    /// The TLS configuration for new connections, swapped on reload.
    tls: Option<ArcSwap<rustls::ServerConfig>>,
    builder: auto::Builder<TokioExecutor>,
    metrics: Arc<Metrics>,
    log: slog::Logger,
}

/// The API's listener, serving.
pub struct Edge {
    local_addr: SocketAddr,
    phase: watch::Sender<Phase>,
    accept: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

/// Starts accepting on `listener` (whose address is `local_addr`) and
/// serving each connection from `remote_addr` with `service(remote_addr)`,
/// over TLS when `tls` is set, within `limits`.
pub fn serve<F, S>(
    listener: TcpListener,
    local_addr: SocketAddr,
    limits: EdgeLimits,
    tls: Option<rustls::ServerConfig>,
    service: F,
    metrics: Arc<Metrics>,
    log: slog::Logger,
) -> Edge
where
    F: Fn(SocketAddr) -> S + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<dropshot::Body>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's timeouts need a timer. The header-read timeout runs once
    // hyper waits for a head: after the auto builder has read a new
    // connection's first bytes (before them, only the idle timeout
    // applies), and from each response on a kept-alive connection.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keep_alive_interval)
        .keep_alive_timeout(limits.http2_keep_alive_interval);
    metrics.connection_cap(limits.max_connections);
    let (phase, phase_receiver) = watch::channel(Phase::Serving);
    let shared = Arc::new(Shared {
        limits,
        table: Table::new(),
        phase: phase_receiver,
        tls: tls.map(ArcSwap::from_pointee),
        builder,
        metrics,
        log,
    });
    let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared), service));
    Edge {
        local_addr,
        phase,
        accept: Some(accept),
        shared,
    }
}

impl Edge {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Uses `config` for the TLS handshakes of new connections; false when
    /// the edge serves plain HTTP.
    pub fn reload_tls(&self, config: rustls::ServerConfig) -> bool {
        match &self.shared.tls {
            Some(tls) => {
                tls.store(Arc::new(config));
                true
            }
            None => false,
        }
    }

    /// Stops accepting, closes the idle connections, and resolves once the
    /// busy ones have finished their requests and closed.
    pub async fn drain(&mut self) {
        self.phase.send_replace(Phase::Draining);
        if let Some(accept) = self.accept.take() {
            // The loop only ends, it never fails; a panic is already logged.
            let _ = accept.await;
        }
        self.all_closed().await;
    }

    /// Closes every connection still open, in the middle of its requests,
    /// and resolves once all are gone.
    pub async fn cut(&mut self) {
        self.phase.send_replace(Phase::Cut);
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        self.all_closed().await;
    }

    async fn all_closed(&self) {
        let table = &self.shared.table;
        loop {
            let changed = table.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if table.open() == 0 {
                return;
            }
            changed.await;
        }
    }
}

/// Accepts connections until the server stops serving.
async fn accept_loop<F, S>(listener: TcpListener, shared: Arc<Shared>, service: F)
where
    F: Fn(SocketAddr) -> S + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<dropshot::Body>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let mut phase = shared.phase.clone();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = phase.wait_for(|phase| *phase != Phase::Serving) => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, remote) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                slog::warn!(shared.log, "accepting a connection failed"; "error" => %e);
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                    _ = phase.wait_for(|phase| *phase != Phase::Serving) => return,
                }
            }
        };
        if !make_room(&shared, &mut phase).await {
            return;
        }
        // As dropshot does: responses are written whole, Nagle only delays.
        let _ = stream.set_nodelay(true);
        let slot = shared.table.insert();
        shared.metrics.connection_opened();
        slog::info!(shared.log, "accepted connection"; "remote_addr" => %remote);
        tokio::spawn(connection::run(
            stream,
            remote,
            slot,
            Arc::clone(&shared),
            service(remote),
        ));
    }
}

/// Waits until there is room for one more connection under the cap: at the
/// cap, the connection idle the longest is evicted (once past its grace);
/// with none idle, the wait lasts until one closes or becomes idle (new
/// connections wait in the kernel's backlog meanwhile). False if the server
/// stops serving first.
async fn make_room(shared: &Shared, phase: &mut watch::Receiver<Phase>) -> bool {
    let table = &shared.table;
    let room = loop {
        // Registered before the check, so that no close is missed between.
        let changed = table.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if table.open() < shared.limits.max_connections {
            break true;
        }
        table.set_waiting(true);
        // One eviction at a time: the evicted connection closes at once,
        // and its close wakes this loop.
        let eligible = match table.evicting() {
            0 => table.evict(),
            _ => Eviction::Evicted,
        };
        let until = match eligible {
            Eviction::NotBefore(at) => tokio::time::Instant::from_std(at),
            // Woken by a close, or by a connection becoming idle.
            Eviction::Evicted | Eviction::NoneIdle => tokio::time::Instant::now() + FOREVER,
        };
        tokio::select! {
            () = changed => {}
            () = tokio::time::sleep_until(until) => {}
            _ = phase.wait_for(|phase| *phase != Phase::Serving) => break false,
        }
    };
    table.set_waiting(false);
    room
}
