//! One connection's life, on its own task: the TLS handshake (bounded, and
//! never in the accept loop, where one stalled peer would stop every other
//! from being accepted), then HTTP/1 or HTTP/2 until the peer closes, it
//! stays idle too long, it is evicted, or the server shuts down. Whatever
//! ends it is counted once, by reason.

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::table::Slot;
use super::tracked::{Tracked, Watched};
use super::{Phase, Shared};
use crate::metrics::CloseReason;

/// Counts the connection closed (by its reason) and frees its place in the
/// table when dropped: also when its task is dropped with the runtime.
struct Closing {
    slot: Arc<Slot>,
    shared: Arc<Shared>,
    reason: CloseReason,
    remote: SocketAddr,
    accepted: Instant,
}

impl Drop for Closing {
    fn drop(&mut self) {
        self.shared
            .metrics
            .connection_closed(self.reason, self.accepted.elapsed());
        self.shared.table.remove(&self.slot);
        let reason: &'static str = self.reason.into();
        slog::debug!(self.shared.log, "connection closed";
            "remote_addr" => %self.remote, "reason" => reason);
    }
}

/// Serves one accepted connection, whose place in the table is `slot`,
/// with `service`, to its end.
pub(super) async fn run<S>(
    stream: TcpStream,
    remote: SocketAddr,
    slot: Arc<Slot>,
    shared: Arc<Shared>,
    service: S,
) where
    S: Service<Request<Incoming>, Response = Response<dropshot::Body>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let mut closing = Closing {
        slot: Arc::clone(&slot),
        shared: Arc::clone(&shared),
        reason: CloseReason::Shutdown,
        remote,
        accepted: Instant::now(),
    };
    closing.reason = lifecycle(stream, &slot, &shared, service).await;
}

async fn lifecycle<S>(
    stream: TcpStream,
    slot: &Arc<Slot>,
    shared: &Shared,
    service: S,
) -> CloseReason
where
    S: Service<Request<Incoming>, Response = Response<dropshot::Body>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let mut phase = shared.phase.clone();
    let stream = Watched::new(stream, Arc::clone(slot));
    let Some(tls) = &shared.tls else {
        return serve(TokioIo::new(stream), slot, shared, service, phase).await;
    };
    // The configuration in force now: a reload applies to the next
    // handshake, never to an established connection.
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.load_full());
    let handshake =
        tokio::time::timeout(shared.limits.tls_handshake_timeout, acceptor.accept(stream));
    // A handshake is no request: the connection is idle, and may be
    // evicted at the cap (after every silent one).
    let stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            Ok(Err(_)) => return CloseReason::TlsHandshakeFailed,
            Err(_) => return CloseReason::TlsHandshakeTimeout,
        },
        () = slot.evict.notified() => return CloseReason::Evicted,
        _ = phase.wait_for(|phase| *phase != Phase::Serving) => return CloseReason::Shutdown,
    };
    serve(TokioIo::new(stream), slot, shared, service, phase).await
}

/// HTTP over `io` until the connection ends.
///
/// Closing an idle connection (idle timeout, eviction, shutdown) drops it
/// at once: nothing is in progress, and hyper's graceful close of an
/// HTTP/2 connection would wait for a silent peer to answer a ping. A busy
/// one is closed gracefully: its requests finish, then it closes.
async fn serve<I, S>(
    io: I,
    slot: &Arc<Slot>,
    shared: &Shared,
    service: S,
    mut phase: watch::Receiver<Phase>,
) -> CloseReason
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<dropshot::Body>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let idle_timeout = shared.limits.idle_timeout;
    let connection = shared
        .builder
        .serve_connection(io, Tracked::new(service, Arc::clone(slot)));
    tokio::pin!(connection);
    // Wakes when the connection would have been idle for the timeout; if a
    // request came meanwhile, it is set again from when that one ended.
    let idle = tokio::time::sleep(idle_timeout);
    tokio::pin!(idle);
    let mut closing = None;
    loop {
        tokio::select! {
            ended = connection.as_mut() => {
                return closing.unwrap_or(match ended {
                    Ok(()) => CloseReason::ClientClosed,
                    Err(e) => reason(&*e, slot),
                });
            }
            () = slot.evict.notified(), if closing.is_none() => {
                if slot.is_idle() {
                    return CloseReason::Evicted;
                }
                closing = Some(CloseReason::Evicted);
                connection.as_mut().graceful_shutdown();
            }
            Ok(()) = phase.changed() => match *phase.borrow_and_update() {
                Phase::Cut => return CloseReason::Shutdown,
                Phase::Draining if slot.is_idle() => return CloseReason::Shutdown,
                Phase::Draining => {
                    closing = Some(CloseReason::Shutdown);
                    connection.as_mut().graceful_shutdown();
                }
                Phase::Serving => {}
            },
            () = &mut idle, if closing.is_none() => {
                let now = tokio::time::Instant::now();
                if !slot.is_idle() {
                    idle.as_mut().reset(now + idle_timeout);
                    continue;
                }
                let deadline = tokio::time::Instant::from_std(slot.idle_since()) + idle_timeout;
                if deadline <= now {
                    return CloseReason::IdleTimeout;
                }
                idle.as_mut().reset(deadline);
            }
        }
    }
}

/// Why hyper ended a connection with an error. Its header-read timeout
/// runs from when it starts waiting for a head, which on a kept-alive
/// connection is the end of the previous response: if nothing came since,
/// the connection was idle, not slow.
fn reason(error: &(dyn StdError + Send + Sync + 'static), slot: &Slot) -> CloseReason {
    match error.downcast_ref::<hyper::Error>() {
        Some(error) if error.is_timeout() && slot.sent_since_idle() => CloseReason::HeaderTimeout,
        Some(error) if error.is_timeout() => CloseReason::IdleTimeout,
        _ => CloseReason::Error,
    }
}
