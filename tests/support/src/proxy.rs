//! A TCP proxy on loopback that injects the faults a client meets on a real
//! network: a server that went away (the proxy's target can be switched to
//! its successor while clients keep one address), and responses lost on
//! the way back after the server did the work.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy from a port of its own to a target address. Must be started on
/// a tokio runtime, which runs it until it is dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

struct State {
    target: Mutex<SocketAddr>,
    /// How many of the next connections lose their response.
    to_swallow: AtomicUsize,
    /// How many responses were lost so far.
    swallowed: AtomicUsize,
}

impl FaultProxy {
    /// A proxy on a free loopback port, forwarding to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            target: Mutex::new(target),
            to_swallow: AtomicUsize::new(0),
            swallowed: AtomicUsize::new(0),
        });
        let task = tokio::spawn(accept(listener, Arc::clone(&state)));
        Ok(FaultProxy { addr, state, task })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Forwards new connections to `target` from now on.
    pub fn set_target(&self, target: SocketAddr) {
        *self.state.target.lock().expect("target lock") = target;
    }

    /// The next `connections` connections lose their response: the request
    /// reaches the server, which answers it, and the client's connection is
    /// closed as the answer starts to come back, so the client never sees it.
    pub fn swallow_responses(&self, connections: usize) {
        self.state.to_swallow.store(connections, Ordering::SeqCst);
    }

    /// How many responses were lost so far.
    pub fn swallowed(&self) -> usize {
        self.state.swallowed.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves until the proxy is dropped, which aborts it: it waits for no
/// condition of a test's (each client's request has its own deadline).
async fn accept(listener: TcpListener, state: Arc<State>) {
    while let Ok((client, _)) = listener.accept().await {
        let swallow = state
            .to_swallow
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let target = *state.target.lock().expect("target lock");
        tokio::spawn(relay(client, target, swallow, Arc::clone(&state)));
    }
}

/// Relays one connection; a target that cannot be reached closes the
/// client's connection, as a server that is down would.
async fn relay(mut client: TcpStream, target: SocketAddr, swallow: bool, state: Arc<State>) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    if !swallow {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        return;
    }
    let (mut from_client, _to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let forward = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
        let _ = to_server.shutdown().await;
    });
    // The first byte of the answer means the server has done the work;
    // then both connections are dropped and the client sees it closed.
    let mut first = [0u8; 1];
    if from_server.read(&mut first).await.is_ok_and(|n| n > 0) {
        state.swallowed.fetch_add(1, Ordering::SeqCst);
    }
    forward.abort();
}
