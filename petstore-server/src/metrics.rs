//! The metrics the management listener serves at `/metrics`, in the
//! OpenMetrics text format (which Prometheus scrapes natively).
//!
//! Counters and histograms are updated as things happen (atomics, no
//! locks held across requests); figures that belong to the database or the
//! process (pets stored, pool usage, open files) are read when scraped.

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use crate::keys::{AuthReason, KeyCounts};
use crate::storage::{Storage, StorageMetrics, WebhookStorage};
use petstore_api::error::Keyed;

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An operationId as a label value, shared rather than copied per request.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Operation(Arc<str>);

impl EncodeLabelValue for Operation {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&&*self.0, encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// The operationId, or `none` for a request no operation matched.
    operation: Operation,
    /// The response status; 499 for a request whose client hung up first.
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    /// The key's name, as the access log shows it; `-` for requests without
    /// a valid key (limited by address).
    key: KeyName,
}

/// A key's name as a label value, shared with the keyring's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct KeyName(Arc<str>);

impl EncodeLabelValue for KeyName {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&&*self.0, encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: Operation,
}

/// Label values that are an enum's variants, spelled in snake_case by
/// strum: a misspelt label is a compile error, not a new series.
macro_rules! label_values {
    ($($label:ty),*) => {$(
        impl EncodeLabelValue for $label {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                let name: &'static str = self.into();
                EncodeLabelValue::encode(&name, encoder)
            }
        }
    )*};
}

/// How a request with an `Idempotency-Key` came out.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum KeyedOutcome {
    /// The pet was created.
    Created,
    /// The order was placed.
    Placed,
    /// The first answer was replayed.
    Replayed,
    /// The key was used for another body: 422.
    Reused,
    /// Another request with the key is in progress: 409.
    InUse,
}

/// How the database failed a request.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
enum DatabaseFailure {
    /// 503.
    Unavailable,
    /// 500.
    Internal,
}

/// The state of a key, of a pooled connection, or of a webhook
/// subscription.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
enum State {
    Usable,
    Expired,
    Revoked,
    Idle,
    InUse,
    Active,
    Disabled,
}

/// Why the server closed an API connection, or saw it closed.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum CloseReason {
    /// The client closed it (or it ended after `Connection: close`).
    ClientClosed,
    /// It sent nothing for the idle timeout: no first request, or nothing
    /// between keep-alive requests.
    IdleTimeout,
    /// It did not finish sending a request head within the header-read
    /// timeout.
    HeaderTimeout,
    /// It did not finish its TLS handshake within the handshake timeout.
    TlsHandshakeTimeout,
    /// Its TLS handshake failed.
    TlsHandshakeFailed,
    /// The server was at its connection cap and this was the connection
    /// idle the longest, closed to make room for a new one.
    Evicted,
    /// The server shut down.
    Shutdown,
    /// A protocol or I/O error.
    Error,
}

/// What became of a webhook delivery attempt.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum AttemptResult {
    /// The receiver answered 2xx.
    Delivered,
    /// It failed, and will be tried again.
    Retried,
    /// It failed on the schedule's last attempt.
    Exhausted,
    /// The receiver answered 410: the subscription is disabled.
    Gone,
}

label_values!(
    KeyedOutcome,
    DatabaseFailure,
    State,
    AuthReason,
    CloseReason,
    AttemptResult
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    outcome: AttemptResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: AuthReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloseLabels {
    reason: CloseReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: DatabaseFailure,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: KeyedOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: State,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    contract: String,
}

/// Every metric the server keeps. Each is declared here, by its field, and
/// named and described once, where [`Metrics::new`] registers it.
pub struct Metrics {
    registry: Registry,
    /// The operation label of requests no operation matched.
    none: Arc<str>,
    requests: Family<RequestLabels, Counter>,
    latency: Family<OperationLabels, Histogram>,
    auth_rejected: Family<ReasonLabels, Counter>,
    rate_limited: Family<KeyLabels, Counter>,
    rate_limit_instances: Gauge,
    database_errors: Family<KindLabels, Counter>,
    key_refresh_failures: Counter,
    idempotent_creates: Family<OutcomeLabels, Counter>,
    idempotent_orders: Family<OutcomeLabels, Counter>,
    idempotency_purged: Counter,
    keys: Family<StateLabels, Gauge>,
    pets: Gauge,
    events: Gauge,
    events_waiters: Gauge,
    webhook_attempts: Family<AttemptLabels, Counter>,
    webhook_delivery_seconds: Histogram,
    webhook_subscriptions: Family<StateLabels, Gauge>,
    webhook_open_deliveries: Gauge,
    oldest_event_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    pool_max: Gauge,
    shared_max: Gauge,
    shared_open: Gauge,
    pool_connections: Family<StateLabels, Gauge>,
    pool_waiting: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    open_sockets: Gauge,
    connections_open: Gauge,
    connections_closed: Family<CloseLabels, Counter>,
    connection_lifetimes: Family<CloseLabels, Histogram>,
    connections_max: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// A connection's life from its acceptance, for each way it ends: around
/// the edge's timeouts (seconds to minutes), and up to an hour.
fn lifetime_histogram() -> Histogram {
    Histogram::new([
        0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0, 300.0, 3600.0,
    ])
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0, 10.0,
    ])
}

/// `metric`, registered in `registry` as `name` with `help`.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// A fresh set of metrics; `storage` is what the storage records into.
    pub fn new(storage: StorageMetrics) -> Metrics {
        let mut registry = Registry::with_prefix("petstore");
        let r = &mut registry;
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                contract: petstore_api::CONTRACT_VERSION.to_string(),
            })
            .set(1);
        r.register(
            "build_info",
            "The server's version and the contract version it implements",
            build_info,
        );
        r.register(
            "sqlite_commit_group_size",
            "Writes committed per SQLite transaction (group commit: creates, orders placed and \
             orders updated)",
            storage.commit_group_size,
        );
        r.register(
            "log_records_dropped",
            "Log records dropped because the log's output fell behind (each drop is also \
             reported in the log once it catches up)",
            crate::logging::dropped_records(),
        );
        Metrics {
            requests: registered(
                r,
                "http_requests",
                "Requests answered, by operationId (none: no operation matched) and status \
                 (499: the client hung up first)",
                Family::default(),
            ),
            latency: registered(
                r,
                "http_request_duration_seconds",
                "Time from a request's arrival to its response, by operationId",
                Family::new_with_constructor(latency_histogram),
            ),
            auth_rejected: registered(
                r,
                "auth_rejected",
                "Requests refused with 401, by reason (missing, malformed, checksum, unknown, \
                 expired)",
                Family::default(),
            ),
            rate_limited: registered(
                r,
                "rate_limited",
                "Requests refused with 429, by key name (-: requests without a valid key, \
                 limited by address)",
                Family::default(),
            ),
            rate_limit_instances: registered(
                r,
                "rate_limit_instances",
                "Instances sharing every rate limit budget, as this one counts them (each \
                 enforces its share: 1/N)",
                Gauge::default(),
            ),
            database_errors: registered(
                r,
                "database_errors",
                "Requests failed by the database: unavailable (503) or internal (500)",
                Family::default(),
            ),
            key_refresh_failures: registered(
                r,
                "api_key_refresh_failures",
                "Failed reloads of the stored API keys (the last loaded set stays in force)",
                Counter::default(),
            ),
            idempotent_creates: registered(
                r,
                "idempotent_creates",
                "Creates with an Idempotency-Key, by outcome (created, replayed, reused: 422, \
                 in_use: 409)",
                Family::default(),
            ),
            idempotent_orders: registered(
                r,
                "idempotent_orders",
                "Orders placed with an Idempotency-Key, by outcome (placed, replayed, reused: \
                 422, in_use: 409)",
                Family::default(),
            ),
            idempotency_purged: registered(
                r,
                "idempotency_records_purged",
                "Idempotency records deleted once past their retention",
                Counter::default(),
            ),
            keys: registered(
                r,
                "api_keys",
                "API keys this instance holds, by state (usable, expired, revoked)",
                Family::default(),
            ),
            pets: registered(
                r,
                "pets",
                "Pets stored (on PostgreSQL above 100,000: the planner's estimate)",
                Gauge::default(),
            ),
            events: registered(
                r,
                "events",
                "Events kept in the feed (on PostgreSQL above 100,000: the planner's estimate)",
                Gauge::default(),
            ),
            events_waiters: registered(
                r,
                "events_waiters",
                "Requests of the feed waiting for an event (long polls with wait)",
                Gauge::default(),
            ),
            webhook_attempts: registered(
                r,
                "webhook_attempts",
                "Webhook delivery attempts by outcome (delivered, retried, exhausted, gone)",
                Family::default(),
            ),
            webhook_delivery_seconds: registered(
                r,
                "webhook_delivery_seconds",
                "From an event's commit to its delivery's 2xx, per delivery",
                latency_histogram(),
            ),
            webhook_subscriptions: registered(
                r,
                "webhook_subscriptions",
                "Webhook subscriptions by state (active, disabled), whoever made them",
                Family::default(),
            ),
            webhook_open_deliveries: registered(
                r,
                "webhook_open_deliveries",
                "Webhook deliveries not yet delivered nor failed for good, of every subscription",
                Gauge::default(),
            ),
            oldest_event_age: registered(
                r,
                "events_oldest_age_seconds",
                "How long ago the oldest event kept in the feed was committed (0 when none is)",
                Gauge::default(),
            ),
            shared_max: registered(
                r,
                "postgres_shared_max_connections",
                "The most PostgreSQL connections this instance shares between requests \
                 (reads and plain creates, pipelined)",
                Gauge::default(),
            ),
            shared_open: registered(
                r,
                "postgres_shared_connections",
                "Open PostgreSQL connections shared between requests",
                Gauge::default(),
            ),
            pool_max: registered(
                r,
                "postgres_pool_max_connections",
                "The most pooled PostgreSQL connections this instance opens (one per \
                 idempotent create in progress)",
                Gauge::default(),
            ),
            pool_connections: registered(
                r,
                "postgres_pool_connections",
                "Open pooled PostgreSQL connections, by state (idle, in_use)",
                Family::default(),
            ),
            pool_waiting: registered(
                r,
                "postgres_pool_waiting",
                "Idempotent creates waiting for a pooled PostgreSQL connection",
                Gauge::default(),
            ),
            open_fds: registered(
                r,
                "open_fds",
                "File descriptors the process has open",
                Gauge::default(),
            ),
            max_fds: registered(
                r,
                "max_fds",
                "The process's open-file limit (soft RLIMIT_NOFILE)",
                Gauge::default(),
            ),
            open_sockets: registered(
                r,
                "open_sockets",
                "Sockets the process has open: client connections, listeners and database \
                 connections",
                Gauge::default(),
            ),
            connections_open: registered(
                r,
                "http_connections",
                "Open API connections (TLS handshakes in progress included)",
                Gauge::default(),
            ),
            connections_closed: registered(
                r,
                "http_connections_closed",
                "API connections closed, by reason (client_closed, idle_timeout, header_timeout, \
                 tls_handshake_timeout, tls_handshake_failed, evicted: idle the longest when a \
                 new connection came at the cap, shutdown, error)",
                Family::default(),
            ),
            connection_lifetimes: registered(
                r,
                "http_connection_lifetime_seconds",
                "How long API connections lived, from their acceptance to their close, by \
                 the reason they closed (a timeout's connections close within it)",
                Family::new_with_constructor(lifetime_histogram),
            ),
            connections_max: registered(
                r,
                "http_max_connections",
                "The most API connections the server holds open at once (--max-connections)",
                Gauge::default(),
            ),
            none: Arc::from("none"),
            registry,
        }
    }

    /// Counts a request refused with 429; `key` is its key's name, `None`
    /// for a request limited by its address.
    pub fn rate_limited(&self, key: Option<&Arc<str>>) {
        let key = KeyName(key.map_or_else(|| Arc::from("-"), Arc::clone));
        self.rate_limited.get_or_create(&KeyLabels { key }).inc();
    }

    /// Records how many instances share every budget.
    pub fn rate_limit_instances(&self, instances: u32) {
        self.rate_limit_instances.set(i64::from(instances));
    }

    /// Counts a request answered with `status` after `seconds`.
    pub fn request_done(&self, operation: Option<&Arc<str>>, status: u16, seconds: f64) {
        let operation = Operation(operation.map_or_else(|| Arc::clone(&self.none), Arc::clone));
        self.latency
            .get_or_create(&OperationLabels {
                operation: operation.clone(),
            })
            .observe(seconds);
        self.requests
            .get_or_create(&RequestLabels { operation, status })
            .inc();
    }

    /// Counts a request refused by authentication.
    pub fn auth_rejected(&self, reason: AuthReason) {
        self.auth_rejected
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Counts a request failed by the database.
    pub fn database_error(&self, unavailable: bool) {
        let kind = if unavailable {
            DatabaseFailure::Unavailable
        } else {
            DatabaseFailure::Internal
        };
        self.database_errors
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// Counts a request of `operation` with an idempotency key that came to
    /// `outcome`.
    pub fn idempotent(&self, operation: Keyed, outcome: KeyedOutcome) {
        let family = match operation {
            Keyed::CreatePet => &self.idempotent_creates,
            Keyed::PlaceOrder => &self.idempotent_orders,
        };
        family.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Counts idempotency records purged.
    pub fn idempotency_purged(&self, records: usize) {
        self.idempotency_purged.inc_by(records as u64);
    }

    /// Sets the connection cap, as configured.
    pub fn connection_cap(&self, cap: usize) {
        self.connections_max
            .set(i64::try_from(cap).unwrap_or(i64::MAX));
    }

    /// Counts an API connection accepted.
    pub fn connection_opened(&self) {
        self.connections_open.inc();
    }

    /// Counts an API connection closed after `lived`, and why.
    pub fn connection_closed(&self, reason: CloseReason, lived: std::time::Duration) {
        self.connections_open.dec();
        let labels = CloseLabels { reason };
        self.connections_closed.get_or_create(&labels).inc();
        self.connection_lifetimes
            .get_or_create(&labels)
            .observe(lived.as_secs_f64());
    }

    /// Counts a long poll of the feed as waiting until the guard is
    /// dropped.
    pub fn event_waiter(&self) -> EventWaiter {
        self.events_waiters.inc();
        EventWaiter(self.events_waiters.clone())
    }

    /// Counts a webhook delivery attempt that came to `outcome`; one
    /// delivered `since` after its event's commit is also timed.
    pub fn webhook_attempt(&self, outcome: AttemptResult, since: Option<std::time::Duration>) {
        self.webhook_attempts
            .get_or_create(&AttemptLabels { outcome })
            .inc();
        if let Some(since) = since {
            self.webhook_delivery_seconds.observe(since.as_secs_f64());
        }
    }

    /// Counts a failed reload of the stored keys.
    pub fn key_refresh_failed(&self) {
        self.key_refresh_failures.inc();
    }

    /// The metrics as text, after reading the figures read at scrape time.
    /// A backend that cannot answer within a second leaves its figures as
    /// they were: a scrape never waits for a database outage.
    pub async fn render(
        &self,
        storage: &Arc<dyn Storage>,
        webhooks: &Arc<dyn WebhookStorage>,
        keys: KeyCounts,
    ) -> String {
        let second = std::time::Duration::from_secs(1);
        let (stats, hooks) = tokio::join!(
            tokio::time::timeout(second, storage.stats()),
            tokio::time::timeout(second, webhooks.counts()),
        );
        if let Ok(Ok(hooks)) = hooks {
            for (state, count) in [
                (State::Active, hooks.active),
                (State::Disabled, hooks.disabled),
            ] {
                self.webhook_subscriptions
                    .get_or_create(&StateLabels { state })
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            self.webhook_open_deliveries
                .set(i64::try_from(hooks.open_deliveries).unwrap_or(i64::MAX));
        }
        if let Ok(Ok(stats)) = stats {
            self.pets.set(i64::try_from(stats.pets).unwrap_or(i64::MAX));
            self.events
                .set(i64::try_from(stats.events).unwrap_or(i64::MAX));
            let oldest_age = stats.oldest_event.map_or(0.0, |oldest| {
                (chrono::Utc::now() - oldest)
                    .num_microseconds()
                    .unwrap_or(0) as f64
                    / 1e6
            });
            self.oldest_event_age.set(oldest_age.max(0.0));
            if let Some(pool) = stats.pool {
                self.pool_max.set(pool.max as i64);
                let idle = pool.idle as i64;
                let open = pool.open as i64;
                self.pool_connections
                    .get_or_create(&StateLabels { state: State::Idle })
                    .set(idle);
                self.pool_connections
                    .get_or_create(&StateLabels {
                        state: State::InUse,
                    })
                    .set(open - idle);
                self.pool_waiting.set(pool.waiting as i64);
            }
            if let Some(shared) = stats.shared {
                self.shared_max.set(shared.max as i64);
                self.shared_open.set(shared.open as i64);
            }
        }
        for (state, count) in [
            (State::Usable, keys.usable),
            (State::Expired, keys.expired),
            (State::Revoked, keys.revoked),
        ] {
            self.keys
                .get_or_create(&StateLabels { state })
                .set(count as i64);
        }
        // One system call per descriptor: off the async workers.
        let (fds, sockets) = tokio::task::spawn_blocking(open_files)
            .await
            .unwrap_or((0, 0));
        self.open_fds.set(fds);
        self.open_sockets.set(sockets);
        if let Ok((soft, _hard)) = rlimit::getrlimit(rlimit::Resource::NOFILE) {
            self.max_fds.set(i64::try_from(soft).unwrap_or(i64::MAX));
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// How many file descriptors, and how many of them sockets, the process
/// has open (from `/proc/self/fd`; zero where there is no such directory).
fn open_files() -> (i64, i64) {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return (0, 0);
    };
    let (mut fds, mut sockets) = (0, 0);
    for entry in entries.flatten() {
        fds += 1;
        if std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        {
            sockets += 1;
        }
    }
    (fds, sockets)
}

/// A long poll of the feed, counted in `petstore_events_waiters` while it
/// lives.
pub struct EventWaiter(Gauge);

impl Drop for EventWaiter {
    fn drop(&mut self) {
        self.0.dec();
    }
}
