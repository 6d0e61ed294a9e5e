//! Opening a connection to the primary, whichever of the URL's hosts it is
//! now.
//!
//! The driver's own multi-host connect tries the hosts in turn, and bounds
//! only each TCP connect: a host whose kernel accepts the connection while
//! PostgreSQL itself hangs (a stopped process, a stalled disk) holds the
//! attempt forever, and the hosts after it are never tried. That is how a
//! hung primary kept a whole service away from its promoted standby.
//!
//! So each host is tried on its own, its whole handshake (TCP, startup,
//! authentication, the read-write check) bounded by the URL's
//! `connect_timeout` (by default [`HANDSHAKE_TIMEOUT`]), and the hosts
//! are raced the way Happy Eyeballs (RFC 8305) races addresses: the host
//! that was the primary last time first, the next one [`STAGGER`] later or
//! as soon as the one before fails. The first host to accept writes wins,
//! and is tried first next time. A host that is read-only or in recovery
//! (a standby; also a primary an operator fenced with
//! `default_transaction_read_only`) is refused by the read-write check,
//! whatever the URL's `target_session_attrs` says: everything the server
//! does may write.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::tls::TlsStream;
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Notification};

/// How long one host's handshake may take when the URL sets no
/// `connect_timeout`.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the next host waits for the one before to answer.
const STAGGER: Duration = Duration::from_millis(250);

/// The URL's hosts, each as a configuration of its own.
pub(super) struct Primary {
    hosts: Box<[Config]>,
    handshake_timeout: Duration,
    /// The host that accepted writes last (an index into `hosts`).
    last: AtomicUsize,
}

impl Primary {
    /// The hosts of `config`, in its order.
    pub fn new(config: &Config) -> Arc<Primary> {
        let count = config.get_hosts().len().max(config.get_hostaddrs().len());
        let hosts: Box<[Config]> = if count <= 1 {
            let mut one = config.clone();
            one.target_session_attrs(TargetSessionAttrs::ReadWrite);
            Box::new([one])
        } else {
            (0..count).map(|i| one_host(config, i)).collect()
        };
        Arc::new(Primary {
            hosts,
            handshake_timeout: config
                .get_connect_timeout()
                .copied()
                .unwrap_or(HANDSHAKE_TIMEOUT),
            last: AtomicUsize::new(0),
        })
    }

    /// A connection to a host that accepts writes, its task running on the
    /// current runtime until the connection ends (or the returned handle is
    /// aborted). When every host failed, the last failure; when every host
    /// that has not failed hung, this waits: the caller's deadline ends it.
    pub async fn connect(&self) -> Connected {
        self.connect_telling(None).await
    }

    /// [`Primary::connect`], for a connection that `LISTEN`s: each
    /// notification it receives is given to `received`. (Other
    /// connections drop what they would receive.)
    pub async fn connect_listening(&self, received: OnNotification) -> Connected {
        self.connect_telling(Some(received)).await
    }

    async fn connect_telling(&self, received: Option<OnNotification>) -> Connected {
        let first = self.last.load(Ordering::Relaxed);
        let count = self.hosts.len();
        let mut waiting = (0..count).map(|i| (first + i) % count);
        let mut attempts = FuturesUnordered::new();
        let attempt = |host| self.attempt(host, received.clone());
        attempts.extend(waiting.next().map(attempt));
        let mut last_failure = None;
        while !attempts.is_empty() {
            // Whichever comes first, a host's answer or the stagger, the
            // next host is tried then.
            tokio::select! {
                Some((host, outcome)) = attempts.next() => match outcome {
                    Some(Ok(connected)) => {
                        self.last.store(host, Ordering::Relaxed);
                        return Ok(connected);
                    }
                    Some(Err(failure)) => last_failure = Some(failure),
                    // It hung past the handshake timeout.
                    None => {}
                },
                () = tokio::time::sleep(STAGGER), if waiting.len() > 0 => {}
            }
            attempts.extend(waiting.next().map(attempt));
        }
        match last_failure {
            Some(failure) => Err(failure),
            None => futures::future::pending().await,
        }
    }

    /// One host's handshake within the timeout: `None` when it hung.
    fn attempt(
        &self,
        host: usize,
        received: Option<OnNotification>,
    ) -> BoxFuture<'_, (usize, Option<Connected>)> {
        let config = &self.hosts[host];
        async move {
            let handshake = config.connect(NoTls);
            let outcome = match tokio::time::timeout(self.handshake_timeout, handshake).await {
                Ok(Ok((client, connection))) => {
                    Some(Ok((client, tokio::spawn(drive(connection, received)))))
                }
                Ok(Err(error)) => Some(Err(error)),
                Err(_) => None,
            };
            (host, outcome)
        }
        .boxed()
    }
}

type Connected = Result<(Client, JoinHandle<()>), tokio_postgres::Error>;

/// What a listening connection does with each notification it receives.
pub(super) type OnNotification = Arc<dyn Fn(&Notification) + Send + Sync>;

/// Runs `connection` until it ends, giving each notification it receives
/// to `received`.
async fn drive<S, T>(mut connection: Connection<S, T>, received: Option<OnNotification>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: TlsStream + Unpin,
{
    let Some(received) = received else {
        let _ = connection.await;
        return;
    };
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(Ok(message)) = messages.next().await {
        if let AsyncMessage::Notification(notification) = message {
            received(&notification);
        }
    }
}

/// The pool's connections, made the same way.
pub(super) struct PoolConnect(pub Arc<Primary>);

impl deadpool_postgres::Connect for PoolConnect {
    fn connect(&self, _: &Config) -> BoxFuture<'_, Connected> {
        self.0.connect().boxed()
    }
}

/// The `index`th host of `config`, with every other setting of it.
fn one_host(config: &Config, index: usize) -> Config {
    let mut one = Config::new();
    if let Some(user) = config.get_user() {
        one.user(user);
    }
    if let Some(password) = config.get_password() {
        one.password(password);
    }
    if let Some(dbname) = config.get_dbname() {
        one.dbname(dbname);
    }
    if let Some(options) = config.get_options() {
        one.options(options);
    }
    if let Some(name) = config.get_application_name() {
        one.application_name(name);
    }
    one.ssl_mode(config.get_ssl_mode())
        .ssl_negotiation(config.get_ssl_negotiation())
        .channel_binding(config.get_channel_binding())
        .keepalives(config.get_keepalives())
        .keepalives_idle(config.get_keepalives_idle())
        .target_session_attrs(TargetSessionAttrs::ReadWrite);
    if let Some(interval) = config.get_keepalives_interval() {
        one.keepalives_interval(interval);
    }
    if let Some(retries) = config.get_keepalives_retries() {
        one.keepalives_retries(retries);
    }
    if let Some(timeout) = config.get_connect_timeout() {
        one.connect_timeout(*timeout);
    }
    if let Some(timeout) = config.get_tcp_user_timeout() {
        one.tcp_user_timeout(*timeout);
    }
    match config.get_hosts().get(index) {
        Some(Host::Tcp(host)) => {
            one.host(host);
        }
        Some(Host::Unix(path)) => {
            one.host_path(path);
        }
        None => {}
    }
    if let Some(address) = config.get_hostaddrs().get(index) {
        one.hostaddr(*address);
    }
    // One port for every host, or one each.
    match config.get_ports() {
        [] => {}
        [port] => {
            one.port(*port);
        }
        ports => {
            if let Some(port) = ports.get(index) {
                one.port(*port);
            }
        }
    }
    one
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_keeps_every_setting_of_the_url() {
        let config: Config = "postgres://pets:secret@db1:5433,db2/petstore?connect_timeout=3\
            &application_name=petstore&options=-c%20statement_timeout%3D5s"
            .parse()
            .unwrap();
        let primary = Primary::new(&config);
        assert_eq!(primary.hosts.len(), 2);
        assert_eq!(primary.handshake_timeout, Duration::from_secs(3));
        for (host, (name, port)) in primary.hosts.iter().zip([("db1", 5433), ("db2", 5432)]) {
            assert_eq!(host.get_hosts(), [Host::Tcp(name.to_owned())]);
            assert_eq!(host.get_ports().first().copied().unwrap_or(5432), port);
            assert_eq!(host.get_user(), Some("pets"));
            assert_eq!(host.get_password(), Some(&b"secret"[..]));
            assert_eq!(host.get_dbname(), Some("petstore"));
            assert_eq!(host.get_application_name(), Some("petstore"));
            assert_eq!(host.get_options(), Some("-c statement_timeout=5s"));
            assert_eq!(host.get_connect_timeout(), Some(&Duration::from_secs(3)));
            assert_eq!(
                host.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite
            );
        }
    }

    #[test]
    fn one_host_is_checked_for_writes_too() {
        let config: Config = "postgres://pets@db/petstore".parse().unwrap();
        let primary = Primary::new(&config);
        assert_eq!(primary.hosts.len(), 1);
        assert_eq!(
            primary.hosts[0].get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        assert_eq!(primary.handshake_timeout, HANDSHAKE_TIMEOUT);
    }
}
