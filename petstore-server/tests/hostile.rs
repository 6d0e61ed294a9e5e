//! The server facing the internet alone, with no proxy in front: a child
//! process held to 768 descriptors, under hostile load — 2,000 connections
//! that never send a byte, 200 that send a request head a byte at a time,
//! 200 that stall their body, over HTTP and over TLS, and (over TLS) 200
//! that stall their handshake — while a normal client goes on being
//! answered. Every hostile
//! connection must be closed within its timeout (2 s here) and a slack,
//! and the server must never hold more connections than its cap.

mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::TlsConnector;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use common::{KEY, Served, certificate_authority, trusting};
use petstore_support::{SOON, blocking, eventually_async_within, within};

/// The server's open-file limit.
const SERVER_FILES: u64 = 768;
/// What that limit leaves for API connections (the reserve is 384).
const CAP: f64 = 384.0;
/// Every timeout of the edge, for these tests.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long a normal request may take under the load: the server has
/// thousands of connections to accept on two busy cores.
const SLACK: Duration = Duration::from_secs(10);
/// How much later than its timeout the server may close a connection it
/// accepted: a timer's firing and a task's turn. Measured by the server
/// (`petstore_http_connection_lifetime_seconds`), from the acceptance: the
/// time a connection waits in the kernel's backlog first grows with the
/// machine's load, and is no timeout's business.
const TIMER_SLACK: Duration = Duration::from_secs(1);
/// A hang guard for the whole load, not a timing: on a quiet machine a flood
/// is over in seconds, on a busy one it takes a minute or more (with fresh
/// connections never evicted, the flood drains a cap's worth per timeout).
/// How soon each connection is closed is measured by the server.
const LOAD: Duration = Duration::from_secs(300);

const SILENT: usize = 2_000;
/// Silent connections of the TLS flood: fewer, so that the flood (about
/// 1,200 connections, three times the cap) fits the kernel's backlog and the
/// cap. Beyond them connections wait in SYN retransmission (1, 3, 7, 15 s…),
/// whose backoff grew with the machine's load past [`LOAD`] once every
/// handshake of a debug build was on busy cores; the HTTP flood shows the
/// overflowing backlog.
const SILENT_OVER_TLS: usize = 600;
const SLOW_HEADERS: usize = 200;
const STALLED_BODIES: usize = 200;
const STALLED_HANDSHAKES: usize = 200;

/// Starts the server under `prlimit`, with every edge timeout `extra` does
/// not set at [`TIMEOUT`], and `extra` flags.
async fn start(dir: &std::path::Path, extra: Vec<String>) -> Served {
    let dir = dir.to_owned();
    let timeout = format!("{}s", TIMEOUT.as_secs());
    blocking(move || {
        let mut command = Command::new("prlimit");
        petstore_support::without_petstore_settings(&mut command);
        command
            .arg(format!("--nofile={SERVER_FILES}:{SERVER_FILES}"))
            .arg("--")
            .arg(common::BIN)
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--admin-bind",
                "127.0.0.1:0",
            ])
            .args(["--access-log", "off"]);
        for flag in [
            "--idle-timeout",
            "--header-read-timeout",
            "--body-read-timeout",
            "--tls-handshake-timeout",
        ] {
            if !extra.iter().any(|arg| arg == flag) {
                command.args([flag, &timeout]);
            }
        }
        command
            .args(extra)
            .current_dir(&dir)
            .env("PETSTORE_API_KEYS", KEY);
        Served::spawn(&mut command)
    })
    .await
}

/// The management listener's metrics.
struct Metrics(String);

impl Metrics {
    async fn scrape(admin: &str) -> Metrics {
        let url = format!("http://{admin}/metrics");
        let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        Metrics(text)
    }

    /// The value of the sample `series` (name and labels), 0 if absent.
    fn get(&self, series: &str) -> f64 {
        self.0
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |value| value.parse().unwrap())
    }

    /// Every connection closed by the timeout of a request head or of a
    /// TLS handshake, both counted from the acceptance, lived no longer
    /// than the timeout and [`TIMER_SLACK`].
    fn assert_timeouts_kept(&self) {
        let bound = format!("{:.1}", (TIMEOUT + TIMER_SLACK).as_secs_f64());
        for reason in ["header_timeout", "tls_handshake_timeout"] {
            let series = |suffix: &str, le: Option<&str>| {
                let labels = format!("reason=\"{reason}\"");
                self.0
                    .lines()
                    .filter(|line| {
                        line.starts_with(&format!(
                            "petstore_http_connection_lifetime_seconds_{suffix}"
                        ))
                    })
                    .filter(|line| line.contains(&labels))
                    .filter(|line| le.is_none_or(|le| line.contains(&format!("le=\"{le}\""))))
                    .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>()
            };
            let closed = series("count", None);
            let in_time = series("bucket", Some(&bound));
            assert_eq!(
                in_time, closed,
                "{reason}: {closed} closed, {in_time} within {bound} s of their acceptance\n{}",
                self.0
            );
        }
    }

    /// The `silent` connections were closed by the server, each for one
    /// of `reasons` (a timeout, or evicted for a newer one), not by the
    /// client giving up.
    fn assert_closed_by_the_server(&self, silent: usize, reasons: &[&str]) {
        let by_server: f64 = reasons.iter().map(|reason| self.closed(reason)).sum();
        assert!(by_server >= silent as f64, "{by_server} closed\n{}", self.0);
    }

    fn closed(&self, reason: &str) -> f64 {
        self.get(&format!(
            "petstore_http_connections_closed_total{{reason=\"{reason}\"}}"
        ))
    }
}

/// How a hostile connection ended: what the server sent before closing it.
struct Ended {
    received: Vec<u8>,
}

/// Connects to `addr` (with TLS when `tls` is given), sends `opening`,
/// then `drip` a byte at a time until the server closes the connection;
/// fails if it is never closed ([`LOAD`], a hang guard: how soon is the
/// server's to say, [`Metrics::assert_timeouts_kept`]). A TLS
/// handshake the server ends (evicting the connection) is a close too.
async fn hostile(
    addr: SocketAddr,
    tls: Option<TlsConnector>,
    opening: &'static [u8],
    drip: &'static [u8],
) -> Ended {
    let mut stream = TcpStream::connect(addr).await.expect("the kernel accepts");
    let received = within("a hostile connection to be closed", LOAD, async {
        match tls {
            None => until_closed(&mut stream, opening, drip).await,
            Some(tls) => match tls.connect(ServerName::from(addr.ip()), stream).await {
                Ok(mut stream) => until_closed(&mut stream, opening, drip).await,
                Err(_) => Vec::new(),
            },
        }
    })
    .await;
    Ended { received }
}

/// A TLS client trusting only `ca`.
fn tls_client(ca: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn until_closed(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    opening: &[u8],
    drip: &[u8],
) -> Vec<u8> {
    let mut received = Vec::new();
    // A write may fail once the server has closed: the read says so.
    let _ = stream.write_all(opening).await;
    let mut drip = drip.iter().cycle();
    let mut buffer = [0u8; 4096];
    loop {
        let read = match drip.next() {
            // The pace of the drip, not a wait for anything.
            Some(byte) => {
                let _ = stream.write_all(&[*byte]).await;
                tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buffer)).await
            }
            None => Ok(stream.read(&mut buffer).await),
        };
        match read {
            Ok(Ok(0) | Err(_)) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
            Err(_) => {}
        }
    }
}

fn spawn_hostile(
    count: usize,
    addr: SocketAddr,
    tls: Option<&TlsConnector>,
    opening: &'static [u8],
    drip: &'static [u8],
) -> Vec<JoinHandle<Ended>> {
    (0..count)
        .map(|_| tokio::spawn(hostile(addr, tls.cloned(), opening, drip)))
        .collect()
}

/// Awaits the hostile connections while `normal` requests go on, each of
/// which must succeed; checks all the while that the server holds no more
/// than its cap. Returns how each ended, and how many normal requests were
/// answered.
async fn under_load<F: Future<Output = ()>>(
    admin: &str,
    hostile: Vec<JoinHandle<Ended>>,
    mut normal: impl FnMut() -> F,
) -> (Vec<Ended>, usize) {
    let began = Instant::now();
    let mut answered = 0;
    let mut most_open: f64 = 0.0;
    while !hostile.iter().all(JoinHandle::is_finished) {
        assert!(
            began.elapsed() < LOAD,
            "the load did not end within {LOAD:?}"
        );
        within("a normal request under load", SLACK, normal()).await;
        answered += 1;
        let metrics = Metrics::scrape(admin).await;
        let open = metrics.get("petstore_http_connections");
        assert!(
            open <= CAP,
            "{open} connections open, over the cap of {CAP}"
        );
        most_open = most_open.max(open);
    }
    let mut ended = Vec::with_capacity(hostile.len());
    for task in hostile {
        ended.push(task.await.expect("a hostile connection's task"));
    }
    assert!(most_open > 0.0);
    (ended, answered)
}

/// Runs the `hostile` connections while a client keeping its connection
/// and one opening a connection per request take turns (see
/// [`under_load`]); then waits for the stalled `bodies`, each of which must
/// have got its `408` in time. Returns how the hostile connections ended.
async fn beside_normal_clients(
    admin: &str,
    base: &str,
    hostile: Vec<JoinHandle<Ended>>,
    bodies: Vec<JoinHandle<Ended>>,
    keeping: &reqwest::Client,
    fresh: &reqwest::Client,
) -> Vec<Ended> {
    let mut turn = 0;
    let (ended, answered) = under_load(admin, hostile, move || {
        turn += 1;
        match turn % 2 {
            0 => list(keeping, base, Normal::Keeping),
            _ => list(fresh, base, Normal::Fresh),
        }
    })
    .await;
    let bodies = within("the stalled bodies closed", TIMEOUT + SLACK, async {
        let mut ended = Vec::new();
        for task in bodies {
            ended.push(task.await.unwrap());
        }
        ended
    })
    .await;
    assert!(answered > 0);
    assert_408s(&bodies);
    ended
}

/// How a normal client connects.
#[derive(Clone, Copy, Debug)]
enum Normal {
    /// A new connection per request: it must always be answered.
    Fresh,
    /// One connection kept between requests. Idle between them, it may be
    /// evicted or timed out just as the next request is sent: that request
    /// fails on a closed connection, and is tried again (an idempotent GET,
    /// as browsers and HTTP libraries do) on a new one, which must answer.
    Keeping,
}

/// `GET /v1/pets` through `client`: 200 and a JSON array.
async fn list(client: &reqwest::Client, base: &str, normal: Normal) {
    let url = format!("{base}/v1/pets");
    let mut sent = client.get(&url).bearer_auth(KEY).send().await;
    if let (Normal::Keeping, Err(e)) = (normal, &sent) {
        eprintln!("the kept connection was closed under a request, which is sent again: {e}");
        sent = client.get(&url).bearer_auth(KEY).send().await;
    }
    let response = sent.unwrap_or_else(|e| panic!("a normal request ({normal:?}) failed: {e:?}"));
    assert_eq!(response.status(), 200);
    let pets: serde_json::Value = response.json().await.unwrap();
    assert!(pets.is_array(), "{pets}");
}

/// A request head, sent a byte at a time and never finished.
const SLOW_HEAD: &[u8] = b"GET /v1/pets HTTP/1.1\r\nHost: hostile\r\nX-Slow: ";
/// A create whose body stops after its first bytes (made once per test).
fn stalled_body() -> &'static [u8] {
    let request = format!(
        "POST /v1/pets HTTP/1.1\r\nHost: hostile\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 64\r\n\r\n{{\"name\":"
    );
    Box::leak(request.into_bytes().into_boxed_slice())
}

/// Asserts that every stalled body the server read got the contract's
/// `408`, and that most were read (the rest were evicted before their
/// head was; none of them may get anything else).
fn assert_408s(ended: &[Ended]) {
    let mut timed_out = 0;
    for end in ended {
        if end.received.is_empty() {
            continue;
        }
        let text = String::from_utf8_lossy(&end.received);
        assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
        let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        let error: serde_json::Value = serde_json::from_str(body).expect(&text);
        assert_eq!(error["code"], "request_timeout", "{error}");
        assert_eq!(error["status"], 408, "{error}");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
        timed_out += 1;
    }
    assert!(
        timed_out >= ended.len() / 2,
        "only {timed_out} of {} stalled bodies got 408",
        ended.len()
    );
}

/// Raises this process's own limit: it opens thousands of connections.
fn raise_own_limit() {
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_flood_of_silent_slow_and_stalled_connections_does_not_stop_a_normal_client() {
    let _alone = one_flood_at_a_time().await;
    flood_over_http(Vec::new()).await;
}

/// The same on PostgreSQL, whose pool's connections share the server's
/// 768 descriptors with the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_the_flood_does_not_stop_a_normal_client_either() {
    // Before the database: starting a cluster is a flood of work too.
    let _alone = one_flood_at_a_time().await;
    let Some(database) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    flood_over_http(vec!["--database".to_owned(), database.url().to_owned()]).await;
}

/// The floods run one after another: each throws thousands of connections
/// from this process at a server, on two cores, and its bounds (every
/// hostile connection closed within its timeout and a slack) are for a
/// flood alone, not three at once (nor beside a PostgreSQL cluster
/// starting) queueing in each other's backlogs.
async fn one_flood_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    // tokio's Mutex needs no runtime of its own: each test has its own.
    static FLOODS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    FLOODS.lock().await
}

/// Stalled bodies, slow heads and a silent flood over plain HTTP against a
/// server started with `extra` flags, while a normal client is answered.
async fn flood_over_http(extra: Vec<String>) {
    raise_own_limit();
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path(), extra).await;
    let admin = served.admin_address.clone().unwrap();
    let addr: SocketAddr = served.address.parse().unwrap();
    let base = format!("http://{addr}");
    let metrics = Metrics::scrape(&admin).await;
    assert_eq!(metrics.get("petstore_http_max_connections"), CAP);

    // The stalled bodies first, all admitted: their requests are in
    // progress, and at the cap the flood evicts idle connections, never
    // them.
    let bodies = spawn_hostile(STALLED_BODIES, addr, None, stalled_body(), b"");
    let admin_addr = admin.as_str();
    eventually_async_within("the stalled bodies admitted", LOAD, || async move {
        let open = Metrics::scrape(admin_addr)
            .await
            .get("petstore_http_connections");
        open >= STALLED_BODIES as f64
    })
    .await;
    let mut others = spawn_hostile(SLOW_HEADERS, addr, None, b"", SLOW_HEAD);
    let slow = others.len();
    others.extend(spawn_hostile(SILENT, addr, None, b"", b""));

    // One client keeps its connection, another opens one per request.
    let keeping = &reqwest::Client::new();
    let fresh = &reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut ended = beside_normal_clients(&admin, &base, others, bodies, keeping, fresh).await;
    let silent = ended.split_off(slow);
    assert!(
        silent.iter().all(|end| end.received.is_empty()),
        "a silent connection was sent something"
    );

    let metrics = Metrics::scrape(&admin).await;
    assert!(metrics.closed("evicted") > 0.0, "{}", metrics.0);
    assert!(
        metrics.closed("idle_timeout") + metrics.closed("header_timeout") > 0.0,
        "{}",
        metrics.0
    );
    metrics.assert_closed_by_the_server(SILENT, &["idle_timeout", "evicted"]);
    metrics.assert_timeouts_kept();
    let (status, log) = blocking(move || served.terminate()).await;
    assert!(status.success(), "{log}");
    assert!(!log.contains("accepting a connection failed"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_flood_of_silent_slow_and_stalled_connections_does_not_stop_a_normal_client() {
    let _alone = one_flood_at_a_time().await;
    raise_own_limit();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificate_authority(dir.path(), "hostile");
    let tls = vec![
        "--tls-cert".to_owned(),
        cert.display().to_string(),
        "--tls-key".to_owned(),
        key.display().to_string(),
    ];
    let served = start(dir.path(), tls).await;
    let admin = served.admin_address.clone().unwrap();
    let addr: SocketAddr = served.address.parse().unwrap();
    let base = format!("https://{addr}");

    let tls = tls_client(&ca);
    let bodies = spawn_hostile(STALLED_BODIES, addr, Some(&tls), stalled_body(), b"");
    let admin_addr = admin.as_str();
    eventually_async_within("the stalled bodies admitted", LOAD, || async move {
        let open = Metrics::scrape(admin_addr)
            .await
            .get("petstore_http_connections");
        open >= STALLED_BODIES as f64
    })
    .await;
    // A TLS record header announcing a ClientHello that never comes.
    let mut hostile = spawn_hostile(
        STALLED_HANDSHAKES,
        addr,
        None,
        &[0x16, 0x03, 0x01, 0x02, 0x00],
        b"",
    );
    hostile.extend(spawn_hostile(
        SLOW_HEADERS,
        addr,
        Some(&tls),
        b"",
        SLOW_HEAD,
    ));
    let slow = hostile.len();
    hostile.extend(spawn_hostile(SILENT_OVER_TLS, addr, None, b"", b""));

    let keeping = &trusting(&ca);
    let fresh = &reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut ended = beside_normal_clients(&admin, &base, hostile, bodies, keeping, fresh).await;
    let silent = ended.split_off(slow);
    assert!(
        silent.iter().all(|end| end.received.is_empty()),
        "a silent connection was sent something"
    );

    let metrics = Metrics::scrape(&admin).await;
    assert!(metrics.closed("evicted") > 0.0, "{}", metrics.0);
    assert!(
        metrics.closed("tls_handshake_timeout") > 0.0,
        "{}",
        metrics.0
    );
    // Silent peers of a TLS server, like the stalled handshakes, end in
    // the handshake's timeout when they are not evicted.
    metrics.assert_closed_by_the_server(
        SILENT_OVER_TLS + STALLED_HANDSHAKES,
        &["tls_handshake_timeout", "idle_timeout", "evicted"],
    );
    metrics.assert_timeouts_kept();
    let (status, log) = blocking(move || served.terminate()).await;
    assert!(status.success(), "{log}");
    assert!(!log.contains("accepting a connection failed"), "{log}");
}

/// An HTTP/2 client's preface and its (empty) SETTINGS frame: a connection
/// that speaks HTTP/2 and opens no stream.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// A complete request on a connection kept alive, then nothing.
fn kept_alive() -> &'static [u8] {
    let request =
        format!("GET /v1/pets HTTP/1.1\r\nHost: hostile\r\nAuthorization: Bearer {KEY}\r\n\r\n");
    Box::leak(request.into_bytes().into_boxed_slice())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_timeout_closes_its_connection_and_counts_it_by_reason() {
    let dir = tempfile::tempdir().unwrap();
    // The header-read timeout shorter than the idle one, so that each is
    // seen to be the one that closed its connection.
    let extra = vec!["--header-read-timeout".to_owned(), "1s".to_owned()];
    let served = start(dir.path(), extra).await;
    let admin = served.admin_address.clone().unwrap();
    let addr: SocketAddr = served.address.parse().unwrap();
    for (what, opening, reason, answered) in [
        (
            "a connection that never sends",
            &b""[..],
            "idle_timeout",
            false,
        ),
        (
            "a request head never finished",
            b"GET /v1/pets HTTP/1.1\r\nHost: hostile\r\n",
            "header_timeout",
            false,
        ),
        // hyper's header-read timer runs between kept-alive requests too;
        // with nothing sent, that is an idle connection.
        (
            "a kept-alive connection after its request",
            kept_alive(),
            "idle_timeout",
            true,
        ),
        (
            "an HTTP/2 connection with no stream open",
            H2_PREFACE,
            "idle_timeout",
            true,
        ),
    ] {
        let before = Metrics::scrape(&admin).await.closed(reason);
        let ended = hostile(addr, None, opening, b"").await;
        assert_eq!(!ended.received.is_empty(), answered, "{what}");
        let admin = admin.as_str();
        eventually_async_within(
            &format!("{what} counted as {reason}"),
            SOON,
            || async move { Metrics::scrape(admin).await.closed(reason) == before + 1.0 },
        )
        .await;
    }
    let metrics = Metrics::scrape(&admin).await;
    assert_eq!(
        metrics.get("petstore_http_connections"),
        0.0,
        "{}",
        metrics.0
    );
    for reason in ["evicted", "error", "tls_handshake_failed"] {
        assert_eq!(metrics.closed(reason), 0.0, "{}", metrics.0);
    }
    metrics.assert_timeouts_kept();
    let (status, log) = blocking(move || served.terminate()).await;
    assert!(status.success(), "{log}");
}
