//! The running server: started from its configuration (addresses, TLS,
//! database, keys, the management listener, background tasks) and shut
//! down within a deadline. What it serves is `handlers.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dropshot::{ConfigDropshot, HandlerTaskMode, HttpServer, ServerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use petstore_api::REQUEST_BODY_MAX_BYTES;
use petstore_api::auth::ApiContext;
use petstore_api::error::ApiError;

use crate::admin::{self, AdminContext};
use crate::context::{Requests, Service};
use crate::handlers::PetstoreImpl;
use crate::keyring::{Keyring, unix_now};
use crate::keys::ApiKeys;
use crate::metrics::Metrics;
use crate::observe::{ObservingDrain, RequestNotes};
use crate::ratelimit::{self, Limits, RateLimited, RateLimits};
use crate::storage::{
    self, DatabaseUrl, KeyStorage, OpenError, PURGE_BATCH, Retention, Storage, StorageMetrics,
};
use crate::tls::{TlsError, TlsFiles};

/// Everything needed to start a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// The database to serve.
    pub database: DatabaseUrl,
    /// Keys accepted besides the stored ones (`PETSTORE_API_KEYS`).
    pub api_keys: ApiKeys,
    /// The management listener's address (health, readiness, metrics);
    /// `None` turns it off, and the metrics are then kept but not served.
    pub admin_bind: Option<SocketAddr>,
    /// Serve HTTPS with this certificate and key instead of HTTP.
    pub tls: Option<TlsFiles>,
    /// How long the first `201` of an idempotency key is kept (and so
    /// replayed); the contract promises at least
    /// [`IDEMPOTENCY_RETENTION_MIN`].
    pub idempotency_retention: Duration,
    /// Serve the contract (`/openapi.yaml`, `/openapi.json`) and the
    /// interactive page (`/docs/`).
    pub docs: bool,
    /// The budgets of keys and of addresses (`ratelimit/`); `None` limits
    /// nothing and costs nothing.
    pub rate_limits: Option<RateLimits>,
}

/// The shortest retention of idempotency keys the contract allows, and the
/// default: 24 hours.
pub const IDEMPOTENCY_RETENTION_MIN: Duration = Duration::from_secs(24 * 60 * 60);

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address cannot be listened on (e.g. the port is in use).
    #[error("cannot listen on {address} ({listener}): {source}")]
    Listen {
        /// Which listener: the API's, or the management one.
        listener: &'static str,
        /// The address asked for.
        address: SocketAddr,
        /// Why not.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The database cannot be opened.
    #[error(transparent)]
    Database(#[from] OpenError),
    /// The stored keys cannot be read.
    #[error("cannot read the stored API keys: {0}")]
    Keys(String),
    /// No key would be accepted: every request would be refused.
    #[error(
        "no usable API key: create one with `petstore-server keys create --name NAME` \
         (with the same --database), or set PETSTORE_API_KEYS to a comma-separated list of keys"
    )]
    NoKeys,
    /// The certificate or key is not usable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Rate limits are served by our own accept loop, which does not
    /// terminate TLS yet.
    #[error(
        "rate limits cannot be on with HTTPS yet: set --rate-limits off, or serve plain HTTP \
         behind a proxy that terminates TLS"
    )]
    RateLimitsWithTls,
    /// The API trait does not describe a valid API (a bug in us).
    #[error("invalid API description: {0}")]
    Api(String),
}

/// Why a shutdown was not clean.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    /// The HTTP server reported an error while stopping.
    #[error("the HTTP server did not stop cleanly: {0}")]
    Http(String),
}

/// How a shutdown went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether the deadline passed with connections still open (which were
    /// then dropped).
    pub deadline_passed: bool,
    /// Requests past authentication still in flight when the deadline
    /// passed, cut with their connections.
    pub requests_cut: usize,
}

/// A server accepting requests.
pub struct RunningServer {
    http: ApiListener,
    admin: Option<HttpServer<AdminContext>>,
    storage: Arc<dyn Storage>,
    requests: Requests,
    fatal: watch::Receiver<Option<String>>,
    keys: Arc<Keyring>,
    key_store: Arc<dyn KeyStorage>,
    key_refresh: JoinHandle<()>,
    purge: JoinHandle<()>,
    tls: Option<TlsFiles>,
    /// With rate limits on: this instance's name in the heartbeats, and
    /// the task that beats.
    heartbeat: Option<(String, JoinHandle<()>)>,
}

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// The management listener's address, when it is on.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(HttpServer::local_addr)
    }

    /// Reads the certificate and key files again and uses them for new
    /// connections; established connections keep theirs. On an error the
    /// certificate in use stays. Does nothing without TLS.
    pub async fn reload_tls(&self) -> Result<bool, TlsError> {
        let Some(files) = &self.tls else {
            return Ok(false);
        };
        let config = files.load()?;
        self.http
            .refresh_tls(&config)
            .await
            .map_err(|reason| TlsError::Invalid {
                cert: files.cert.clone(),
                key: files.key.clone(),
                reason,
            })?;
        Ok(true)
    }

    /// Resolves when the server can no longer work at all (e.g. the SQLite
    /// writer thread panicked), with the reason; the process should then
    /// shut down and exit non-zero, so that a supervisor restarts it.
    /// Pending forever otherwise.
    pub async fn fatal_failure(&self) -> String {
        let mut fatal = self.fatal.clone();
        if let Ok(reason) = fatal.wait_for(Option::is_some).await
            && let Some(reason) = reason.clone()
        {
            return reason;
        }
        std::future::pending().await
    }

    /// Stops accepting connections and lets in-flight requests finish for
    /// up to `deadline`; then drops the connections still open, closes the
    /// database and reports how many requests were cut.
    pub async fn shutdown(self, deadline: Duration) -> Result<ShutdownReport, ShutdownError> {
        let closed = tokio::time::timeout(deadline, self.http.close()).await;
        // Past the deadline, dropping the close future leaves the remaining
        // connections' tasks to be dropped with the runtime: their requests
        // are cut.
        let report = ShutdownReport {
            deadline_passed: closed.is_err(),
            requests_cut: if closed.is_err() {
                self.requests.in_flight()
            } else {
                0
            },
        };
        if let Some(admin) = self.admin {
            let _ = tokio::time::timeout(Duration::from_secs(1), admin.close()).await;
        }
        self.key_refresh.abort();
        self.purge.abort();
        if let Some((instance, beating)) = self.heartbeat {
            beating.abort();
            // The other instances take this one's share at once, not once
            // its heartbeat is stale.
            let forgotten = self.key_store.forget_instance(&instance);
            let _ = tokio::time::timeout(Duration::from_secs(2), forgotten).await;
        }
        let recorded = tokio::time::timeout(
            Duration::from_secs(2),
            self.keys.record_all_uses(&*self.key_store),
        );
        let _ = recorded.await;
        self.storage.close().await;
        match closed {
            Ok(Err(e)) => Err(ShutdownError::Http(e)),
            _ => Ok(report),
        }
    }
}

const API_LISTENER: &str = "the API, --bind";
const ADMIN_LISTENER: &str = "the management listener, --admin-bind; `off` disables it";

/// Opens the database (creating or migrating its schema), loads the keys
/// and starts serving, with the management listener if asked for.
///
/// The addresses are tried first, so that a port in use is reported before
/// any database file is created.
pub async fn start(config: ServerConfig, log: slog::Logger) -> Result<RunningServer, StartError> {
    let listen_error = |listener, address| {
        move |source| StartError::Listen {
            listener,
            address,
            source: Box::new(source),
        }
    };
    std::net::TcpListener::bind(config.bind).map_err(listen_error(API_LISTENER, config.bind))?;
    if let Some(admin) = config.admin_bind {
        std::net::TcpListener::bind(admin).map_err(listen_error(ADMIN_LISTENER, admin))?;
    }
    if config.rate_limits.is_some() && config.tls.is_some() {
        return Err(StartError::RateLimitsWithTls);
    }
    let tls = config.tls.as_ref().map(TlsFiles::load).transpose()?;
    // A database yet to be created holds no keys: refuse before creating it.
    if let DatabaseUrl::Sqlite(path) = &config.database
        && config.api_keys.is_empty()
        && !path.exists()
    {
        return Err(StartError::NoKeys);
    }
    let (fatal_sender, fatal) = watch::channel(None);
    let storage_metrics = StorageMetrics::default();
    let database = storage::open(
        &config.database,
        &log,
        fatal_sender,
        storage_metrics.clone(),
    )
    .await?;
    let storage = Arc::clone(&database.pets);
    let fail = async |error: StartError| {
        storage.close().await;
        Err(error)
    };
    let stored = match database.keys.list_keys().await {
        Ok(stored) => stored,
        Err(e) => return fail(StartError::Keys(petstore_api::error::chain(&e))).await,
    };
    let keys = Arc::new(Keyring::new(config.api_keys, &stored));
    if keys.counts().usable == 0 {
        return fail(StartError::NoKeys).await;
    }
    let mut api = match petstore_api::api_description::<PetstoreImpl>() {
        Ok(api) => api,
        Err(e) => return fail(StartError::Api(e.to_string())).await,
    };
    if config.docs
        && let Err(e) = crate::docs::register(&mut api)
    {
        return fail(StartError::Api(e)).await;
    }
    let metrics = Arc::new(Metrics::new(storage_metrics));
    let notes = Arc::new(RequestNotes::default());
    let api_log = slog::Logger::root(
        ObservingDrain::new(log.clone(), Arc::clone(&notes), Arc::clone(&metrics)),
        slog::o!(),
    );
    let dropshot_config = ConfigDropshot {
        bind_address: config.bind,
        default_request_body_max_bytes: REQUEST_BODY_MAX_BYTES,
        // Handlers run on the connection's task instead of a task of their
        // own (a spawn per request costs about 10 % of throughput). If a
        // client hangs up, its handler is dropped: a create already handed
        // to the storage is still committed, just never acknowledged, which is
        // what that client saw anyway. Graceful shutdown still waits for
        // every request in flight.
        default_handler_task_mode: HandlerTaskMode::CancelOnDisconnect,
        ..Default::default()
    };
    let requests = Requests::default();
    let service = Service {
        keys: Arc::clone(&keys),
        notes,
        metrics: Arc::clone(&metrics),
        storage: Arc::clone(&storage),
        requests: requests.clone(),
        idempotency_retention: Retention::new(config.idempotency_retention),
    };
    let context = ApiContext::new(Arc::new(service));
    let builder = ServerBuilder::new(api, context, api_log.clone())
        .config(dropshot_config)
        .unrouted_errors_as::<ApiError>();
    let limits = config.rate_limits.map(|limits| {
        Arc::new(Limits::new(
            limits,
            Arc::clone(&keys),
            api_log,
            Arc::clone(&metrics),
            config.docs,
        ))
    });
    let started = match &limits {
        None => builder.tls(tls).start().map(ApiListener::Dropshot),
        Some(limits) => serve_limited(builder, config.bind, Arc::clone(limits)).await,
    };
    let http = match started {
        Ok(http) => http,
        Err(e) => {
            let error = StartError::Listen {
                listener: API_LISTENER,
                address: config.bind,
                source: Box::new(e),
            };
            return fail(error).await;
        }
    };
    let admin = match config.admin_bind {
        Some(address) => match start_admin(address, &storage, &keys, &metrics, &log) {
            Ok(admin) => Some(admin),
            Err(e) => {
                let _ = http.close().await;
                return fail(e).await;
            }
        },
        None => None,
    };
    let purge = tokio::spawn(purge_expired_idempotency(
        Arc::clone(&storage),
        Retention::new(config.idempotency_retention),
        log.clone(),
        Arc::clone(&metrics),
    ));
    let heartbeat = match limits {
        Some(limits) => {
            let instance = uuid::Uuid::new_v4().to_string();
            // Counted before the first request, so that a new instance never
            // starts out with the whole of every budget beside the others.
            if let Ok(instances) = database.keys.heartbeat(&instance).await {
                limits.set_instances(instances);
            }
            let beating = tokio::spawn(ratelimit::keep_count(
                limits,
                Arc::clone(&database.keys),
                instance.clone(),
                log.clone(),
            ));
            Some((instance, beating))
        }
        None => None,
    };
    let key_refresh =
        tokio::spawn(Arc::clone(&keys).refresh(Arc::clone(&database.keys), log.clone(), metrics));
    slog::info!(log, "serving";
        "address" => %http.local_addr(),
        "scheme" => if config.tls.is_some() { "https" } else { "http" },
        "admin_address" => admin.as_ref().map(|admin| admin.local_addr().to_string()),
        "database" => %config.database,
        "api_keys" => ?keys.counts());
    Ok(RunningServer {
        http,
        admin,
        storage,
        requests,
        fatal,
        keys,
        key_store: database.keys,
        key_refresh,
        purge,
        tls: config.tls,
        heartbeat,
    })
}

/// Where the API is served: dropshot's own accept loop, or (with rate
/// limits on) ours, each connection's service wrapped in the rate limiter.
// TEMPORARY: the edge's accept loop (`edge/`) replaces `Limited` and
// `serve_limited` below; it builds each connection's service as
// `RateLimited::new(service.connection(remote), remote, limits)`, as here.
enum ApiListener {
    Dropshot(HttpServer<ApiContext>),
    Limited {
        local_addr: SocketAddr,
        stop: watch::Sender<bool>,
        serving: JoinHandle<()>,
    },
}

impl ApiListener {
    fn local_addr(&self) -> SocketAddr {
        match self {
            ApiListener::Dropshot(http) => http.local_addr(),
            ApiListener::Limited { local_addr, .. } => *local_addr,
        }
    }

    async fn refresh_tls(&self, config: &dropshot::ConfigTls) -> Result<(), String> {
        match self {
            ApiListener::Dropshot(http) => http.refresh_tls(config).await,
            ApiListener::Limited { .. } => Err("rate limits serve no TLS".into()),
        }
    }

    /// Stops accepting, then waits for every connection to finish its
    /// requests in flight.
    async fn close(self) -> Result<(), String> {
        match self {
            ApiListener::Dropshot(http) => http.close().await,
            ApiListener::Limited { stop, serving, .. } => {
                let _ = stop.send(true);
                serving.await.map_err(|e| e.to_string())
            }
        }
    }
}

/// Serves `builder`'s API on `bind` through the rate limiter.
// TEMPORARY: see `ApiListener`.
async fn serve_limited(
    builder: ServerBuilder<ApiContext>,
    bind: SocketAddr,
    limits: Arc<Limits>,
) -> Result<ApiListener, dropshot::BuildError> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    use hyper_util::server::graceful::GracefulShutdown;

    let bind_error = |error| dropshot::BuildError::BindError {
        address: bind,
        error,
    };
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(bind_error)?;
    let local_addr = listener.local_addr().map_err(bind_error)?;
    let service = builder.build_service(local_addr)?;
    let (stop, mut stopped) = watch::channel(false);
    let serving = tokio::spawn(async move {
        let hyper = auto::Builder::new(TokioExecutor::new());
        let graceful = GracefulShutdown::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, remote)) = accepted else {
                        // Out of descriptors, most likely: let some close.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let limited = RateLimited::new(
                        service.connection(remote),
                        remote,
                        Arc::clone(&limits),
                    );
                    let connection = hyper
                        .serve_connection(TokioIo::new(stream), limited)
                        .into_owned();
                    tokio::spawn(graceful.watch(connection));
                }
                _ = stopped.changed() => break,
            }
        }
        drop(listener);
        graceful.shutdown().await;
        service.wait_for_handlers().await;
    });
    Ok(ApiListener::Limited {
        local_addr,
        stop,
        serving,
    })
}

/// Deletes idempotency records past `retention`, in short batches (each a
/// transaction of its own) so that creates are never held up for long;
/// runs until aborted. A failure is logged and tried again next round.
async fn purge_expired_idempotency(
    storage: Arc<dyn Storage>,
    retention: Retention,
    log: slog::Logger,
    metrics: Arc<Metrics>,
) {
    loop {
        tokio::time::sleep(retention.purge_interval()).await;
        let before = retention.purge_before(unix_now());
        let mut purged = 0;
        loop {
            match storage.purge_idempotency(before, PURGE_BATCH).await {
                Ok(deleted) => {
                    purged += deleted;
                    metrics.idempotency_purged(deleted);
                    if deleted < PURGE_BATCH {
                        break;
                    }
                }
                Err(e) => {
                    slog::warn!(log, "purging expired idempotency records failed; \
                        trying again later"; "error" => petstore_api::error::chain(&e));
                    break;
                }
            }
        }
        if purged > 0 {
            slog::info!(log, "purged expired idempotency records"; "records" => purged);
        }
    }
}

fn start_admin(
    address: SocketAddr,
    storage: &Arc<dyn Storage>,
    keys: &Arc<Keyring>,
    metrics: &Arc<Metrics>,
    log: &slog::Logger,
) -> Result<HttpServer<AdminContext>, StartError> {
    let context = AdminContext {
        storage: Arc::clone(storage),
        keys: Arc::clone(keys),
        metrics: Arc::clone(metrics),
    };
    let config = ConfigDropshot {
        bind_address: address,
        ..Default::default()
    };
    ServerBuilder::new(
        admin::api().map_err(StartError::Api)?,
        context,
        log.new(slog::o!("listener" => "admin")),
    )
    .config(config)
    .start()
    .map_err(|source| StartError::Listen {
        listener: ADMIN_LISTENER,
        address,
        source: Box::new(source),
    })
}
