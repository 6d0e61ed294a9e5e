//! The running server: started from its configuration (addresses, TLS,
//! database, keys, the management listener, background tasks) and shut
//! down within a deadline. What it serves is `handlers.rs`; how its
//! connections are accepted, capped and timed is `edge/`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dropshot::{ConfigDropshot, HandlerTaskMode, HttpServer, ServerBuilder, ServerService};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use petstore_api::REQUEST_BODY_MAX_BYTES;
use petstore_api::auth::ApiContext;
use petstore_api::error::ApiError;

use crate::admin::{self, AdminContext};
use crate::context::{Requests, Service};
use crate::edge::{self, Edge, EdgeLimits, LimitsError};
use crate::handlers::PetstoreImpl;
use crate::keyring::{Keyring, unix_now};
use crate::keys::ApiKeys;
use crate::metrics::Metrics;
use crate::observe::{ObservingDrain, RequestNotes};
use crate::ratelimit::{self, Limits, RateLimited, RateLimits};
use crate::storage::webhooks::WebhookStorage;
use crate::storage::{
    self, DatabaseUrl, KeyStorage, OpenError, PURGE_BATCH, Retention, Storage, StorageMetrics,
};
use crate::tls::{TlsError, TlsFiles};
use crate::webhooks::{self, WebhookSettings, WebhookTasks, WebhooksError};

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
    /// How long events are kept in the feed (since contract 1.6.0); older
    /// ones are purged, and a cursor before them is `410`.
    pub events_retention: Duration,
    /// How webhooks are delivered (since contract 1.7.0).
    pub webhooks: WebhookSettings,
    /// Serve the contract (`/openapi.yaml`, `/openapi.json`) and the
    /// interactive page (`/docs/`).
    pub docs: bool,
    /// The budgets of keys and of addresses (`ratelimit/`); `None` limits
    /// nothing and costs nothing.
    pub rate_limits: Option<RateLimits>,
    /// The API connections: how many, and how long each step may take.
    pub edge: EdgeLimits,
}

/// The shortest retention of idempotency keys the contract allows, and the
/// default: 24 hours.
pub const IDEMPOTENCY_RETENTION_MIN: Duration = Duration::from_secs(24 * 60 * 60);

/// How long events are kept when not configured: 30 days.
pub const EVENTS_RETENTION_DEFAULT: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How many events one purge transaction deletes at most.
const EVENTS_PURGE_BATCH: usize = 1000;

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
    /// The connection cap does not fit the open-file limit.
    #[error(transparent)]
    Limits(#[from] LimitsError),
    /// Webhooks cannot start (their key file).
    #[error(transparent)]
    Webhooks(#[from] WebhooksError),
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
    api: Edge,
    /// dropshot's request handling; the edge's connections hold its
    /// per-connection services.
    service: Arc<ServerService<ApiContext>>,
    admin: Option<HttpServer<AdminContext>>,
    storage: Arc<dyn Storage>,
    requests: Requests,
    fatal: watch::Receiver<Option<String>>,
    keys: Arc<Keyring>,
    key_store: Arc<dyn KeyStorage>,
    key_refresh: JoinHandle<()>,
    purge: JoinHandle<()>,
    events_purge: JoinHandle<()>,
    webhook_tasks: WebhookTasks,
    /// Told when the shutdown begins (long polls answer at once).
    stopping: watch::Sender<bool>,
    tls: Option<TlsFiles>,
    /// With rate limits on: this instance's name in the heartbeats, and
    /// the task that beats.
    heartbeat: Option<(String, JoinHandle<()>)>,
}

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.api.local_addr()
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
        Ok(self.api.reload_tls(files.load()?))
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
    pub async fn shutdown(mut self, deadline: Duration) -> Result<ShutdownReport, ShutdownError> {
        self.stopping.send_replace(true);
        let drained = tokio::time::timeout(deadline, self.api.drain()).await;
        let report = ShutdownReport {
            deadline_passed: drained.is_err(),
            requests_cut: if drained.is_err() {
                self.requests.in_flight()
            } else {
                0
            },
        };
        if drained.is_err() {
            self.api.cut().await;
        }
        // Every connection is gone, and the accept loop with the last other
        // holder of the service: what is left are handlers that outlive
        // their connection (none, as configured: they run on it), waited
        // for as dropshot's `close()` did.
        let closed = match Arc::try_unwrap(self.service) {
            Ok(service) => {
                service.wait_for_handlers().await;
                Ok(())
            }
            Err(_) => Err("the request handling is still held after every connection closed"),
        };
        if let Some(admin) = self.admin {
            let _ = tokio::time::timeout(Duration::from_secs(1), admin.close()).await;
        }
        self.key_refresh.abort();
        self.purge.abort();
        self.events_purge.abort();
        self.webhook_tasks.abort();
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
            Err(e) => Err(ShutdownError::Http(e.to_owned())),
            Ok(()) => Ok(report),
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
    config.edge.check(edge::limits::soft_nofile())?;
    let socket = bind(config.bind).map_err(listen_error(API_LISTENER, config.bind))?;
    if let Some(admin) = config.admin_bind {
        std::net::TcpListener::bind(admin).map_err(listen_error(ADMIN_LISTENER, admin))?;
    }
    let tls = config.tls.as_ref().map(TlsFiles::load).transpose()?;
    let webhook_keys = webhooks::read_keys(&config.webhooks, &config.database)?;
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
    if let Err(e) = webhooks::check_stored_secrets(&webhook_keys, database.webhooks.as_ref()).await
    {
        return fail(e.into()).await;
    }
    let metrics = Arc::new(Metrics::new(storage_metrics));
    let (webhooks, webhook_tasks) = match webhooks::start(
        &config.webhooks,
        webhook_keys,
        Arc::clone(&storage),
        Arc::clone(&database.webhooks),
        Arc::clone(&keys),
        Arc::clone(&metrics),
        &log,
    ) {
        Ok(started) => started,
        Err(e) => return fail(e.into()).await,
    };
    let notes = Arc::new(RequestNotes::default());
    let api_log = slog::Logger::root(
        ObservingDrain::new(log.clone(), Arc::clone(&notes), Arc::clone(&metrics)),
        slog::o!(),
    );
    let dropshot_config = ConfigDropshot {
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
    let stopping = watch::Sender::new(false);
    let service = Service {
        keys: Arc::clone(&keys),
        notes,
        metrics: Arc::clone(&metrics),
        storage: Arc::clone(&storage),
        requests: requests.clone(),
        idempotency_retention: Retention::new(config.idempotency_retention),
        stopping: stopping.subscribe(),
        webhooks,
    };
    let context =
        ApiContext::new(Arc::new(service)).with_body_read_timeout(config.edge.body_read_timeout);
    let local_addr = match socket.local_addr() {
        Ok(address) => address,
        Err(e) => return fail(listen_error(API_LISTENER, config.bind)(e)).await,
    };
    let service = match ServerBuilder::new(api, context, api_log.clone())
        .config(dropshot_config)
        .unrouted_errors_as::<ApiError>()
        .build_service(local_addr)
    {
        Ok(service) => Arc::new(service),
        Err(e) => return fail(StartError::Api(e.to_string())).await,
    };
    // The admin listener first: should it fail, nothing has been served.
    let admin = match config.admin_bind {
        Some(address) => {
            match start_admin(address, &storage, &database.webhooks, &keys, &metrics, &log) {
                Ok(admin) => Some(admin),
                Err(e) => return fail(e).await,
            }
        }
        None => None,
    };
    let listener = match socket.listen(LISTEN_BACKLOG) {
        Ok(listener) => listener,
        Err(e) => {
            if let Some(admin) = admin {
                let _ = admin.close().await;
            }
            return fail(listen_error(API_LISTENER, config.bind)(e)).await;
        }
    };
    let limits = config.rate_limits.map(|limits| {
        Arc::new(Limits::new(
            limits,
            Arc::clone(&keys),
            api_log,
            Arc::clone(&metrics),
            config.docs,
        ))
    });
    let connections = Arc::clone(&service);
    let edge_log = log.new(slog::o!("local_addr" => local_addr));
    let edge_metrics = Arc::clone(&metrics);
    // Each connection's service is dropshot's, wrapped in the rate limiter
    // when it is on: the edge takes either.
    let api = match &limits {
        None => edge::serve(
            listener,
            local_addr,
            config.edge,
            tls,
            move |remote| connections.connection(remote),
            edge_metrics,
            edge_log,
        ),
        Some(limits) => {
            let limits = Arc::clone(limits);
            edge::serve(
                listener,
                local_addr,
                config.edge,
                tls,
                move |remote| {
                    RateLimited::new(connections.connection(remote), remote, Arc::clone(&limits))
                },
                edge_metrics,
                edge_log,
            )
        }
    };
    let purge = tokio::spawn(purge_expired_idempotency(
        Arc::clone(&storage),
        Retention::new(config.idempotency_retention),
        log.clone(),
        Arc::clone(&metrics),
    ));
    let events_purge = tokio::spawn(purge_old_events(
        Arc::clone(&storage),
        Arc::clone(&database.webhooks),
        config.events_retention,
        log.clone(),
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
        "address" => %api.local_addr(),
        "max_connections" => config.edge.max_connections,
        "scheme" => if config.tls.is_some() { "https" } else { "http" },
        "admin_address" => admin.as_ref().map(|admin| admin.local_addr().to_string()),
        "database" => %config.database,
        "api_keys" => ?keys.counts());
    Ok(RunningServer {
        api,
        service,
        admin,
        storage,
        requests,
        fatal,
        keys,
        key_store: database.keys,
        key_refresh,
        purge,
        events_purge,
        webhook_tasks,
        stopping,
        tls: config.tls,
        heartbeat,
    })
}

/// The API's socket, bound (so that a port in use is reported before the
/// database is opened) but not yet listening: until the server serves,
/// clients are refused at once rather than left waiting in the backlog.
fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = match address {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As std's bind does: a restarted server rebinds at once.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    Ok(socket)
}

/// Deep enough for the connections that wait in the kernel while the
/// server is at its cap (the kernel clamps it to `net.core.somaxconn`).
const LISTEN_BACKLOG: u32 = 1024;

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

/// How often old events are looked for: a tenth of the retention, between
/// 1 second and 1 minute (so that a short retention, in tests, is kept to
/// closely, and a long one costs a statement a minute).
fn events_purge_interval(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// Deletes events older than `retention`, oldest first, and finished
/// webhook deliveries as old, in short batches (each a transaction of its
/// own); runs until aborted. A failure is logged and tried again next round.
async fn purge_old_events(
    storage: Arc<dyn Storage>,
    hooks: Arc<dyn WebhookStorage>,
    retention: Duration,
    log: slog::Logger,
) {
    loop {
        tokio::time::sleep(events_purge_interval(retention)).await;
        let Some(before) = chrono::TimeDelta::from_std(retention)
            .ok()
            .and_then(|retention| chrono::Utc::now().checked_sub_signed(retention))
        else {
            continue;
        };
        let mut purged = 0;
        loop {
            match storage.purge_events(before, EVENTS_PURGE_BATCH).await {
                Ok(deleted) => {
                    purged += deleted;
                    if deleted < EVENTS_PURGE_BATCH {
                        break;
                    }
                }
                Err(e) => {
                    slog::warn!(log, "purging old events failed; trying again later";
                        "error" => petstore_api::error::chain(&e));
                    break;
                }
            }
        }
        if purged > 0 {
            slog::info!(log, "purged events past the retention"; "events" => purged);
        }
        loop {
            match hooks.purge_deliveries(before, EVENTS_PURGE_BATCH).await {
                Ok(deleted) if deleted == EVENTS_PURGE_BATCH => {}
                Ok(_) => break,
                Err(e) => {
                    slog::warn!(log, "purging old webhook deliveries failed; trying again later";
                        "error" => petstore_api::error::chain(&e));
                    break;
                }
            }
        }
    }
}

fn start_admin(
    address: SocketAddr,
    storage: &Arc<dyn Storage>,
    webhooks: &Arc<dyn WebhookStorage>,
    keys: &Arc<Keyring>,
    metrics: &Arc<Metrics>,
    log: &slog::Logger,
) -> Result<HttpServer<AdminContext>, StartError> {
    let context = AdminContext {
        storage: Arc::clone(storage),
        webhooks: Arc::clone(webhooks),
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
