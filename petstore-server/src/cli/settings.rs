//! The server's settings, from four layers: a flag, else its environment
//! variable, else the configuration file (`--config`), else the default.
//!
//! Each setting is declared once, as a field of [`ServeArgs`] or
//! [`DatabaseArgs`]: clap's attributes give its flag, environment variable,
//! parser, default and help; serde's, how `config check` prints it. The file
//! and `config check` follow from those fields.
//!
//! Why clap and serde rather than a layering crate: clap already layers
//! three of the four (flag, environment variable, default), parses each
//! value with the setting's own parser, puts the default in the help, and
//! says which layer gave a value ([`ArgMatches::value_source`]). The file is
//! the one layer it lacks, so it is slotted in under the environment: where
//! a value came from the default, the file's value for that key, if any, is
//! parsed by the same flag's parser and replaces it
//! ([`FromArgMatches::update_from_arg_matches`]). figment would have taken
//! the environment over from clap, with other parsing and other messages
//! than the flags', and its errors name providers rather than the key and
//! the file; what we need of it is [`Resolved::layer`].
//!
//! The file is TOML; its keys are the long flags' names with `_` for `-`
//! (`bind`, `database`, `database_pool_size`, …), each value of the type
//! `config check` prints for it (a string or an integer), read as its
//! flag's value would be. An unknown key is an error naming the key and the
//! file. API keys are refused there: they are secrets, and belong in the
//! database (`keys create`, stored hashed) or, for development, in
//! `PETSTORE_API_KEYS`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::{ArgMatches, ValueSource};
use clap::{Args, FromArgMatches, ValueEnum};
use petstore_server::budget::{Budget, Rate};
use petstore_server::durations::duration_text;
use petstore_server::logging::{LogFormat, LogSettings};
use petstore_server::ratelimit::RateLimits;
use petstore_server::storage::{DatabaseUrl, PostgresUrl};
use petstore_server::{EdgeLimits, IDEMPOTENCY_RETENTION_MIN, TlsFiles};
use serde::{Deserialize, Serialize, Serializer};

/// The database flags every command that opens the database takes.
#[derive(clap::Args, Clone, Debug, Serialize)]
pub struct DatabaseArgs {
    /// A TOML configuration file; flags and environment variables override it.
    #[arg(long, env = "PETSTORE_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://FILE (relative to the working directory), sqlite:///ABSOLUTE/FILE,
    /// or postgres://USER:PASSWORD@HOST:PORT/DATABASE
    #[arg(
        long,
        env = "PETSTORE_DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite://petstore.db"
    )]
    #[serde(serialize_with = "text")] // Its Display masks the password.
    pub database: DatabaseUrl,
    /// Pooled PostgreSQL connections per server process, one per idempotent create in progress
    /// (reads share up to 4 more, plain creates 2); not used with SQLite
    #[arg(
        long,
        env = "PETSTORE_DATABASE_POOL_SIZE",
        value_parser = clap::value_parser!(u16).range(1..=1000),
        default_value_t = PostgresUrl::DEFAULT_POOL_SIZE as u16
    )]
    pub database_pool_size: u16,
}

/// The flags of `serve`.
#[derive(clap::Args, Clone, Debug, Serialize)]
pub struct ServeArgs {
    /// Address to listen on
    #[arg(long, env = "PETSTORE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// The management listener (/healthz, /readyz, /metrics; no API key), or `off`
    #[arg(
        long,
        env = "PETSTORE_ADMIN_BIND",
        value_parser = parse_admin_bind,
        default_value = "127.0.0.1:9090"
    )]
    #[serde(serialize_with = "text")]
    pub admin_bind: AdminBind,
    #[command(flatten)]
    #[serde(flatten)]
    pub database: DatabaseArgs,
    /// PEM certificate chain: serve HTTPS (with --tls-key). SIGHUP reloads it.
    #[arg(long, env = "PETSTORE_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "PETSTORE_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Log level
    #[arg(long, env = "PETSTORE_LOG_LEVEL", default_value = "info")]
    #[serde(serialize_with = "value_name")]
    pub log_level: LogLevel,
    /// Log format, written to stderr
    #[arg(long, env = "PETSTORE_LOG_FORMAT", default_value = "json")]
    #[serde(serialize_with = "value_name")]
    pub log_format: LogFormatArg,
    /// The access log: one record per request and per connection, at info
    #[arg(long, env = "PETSTORE_ACCESS_LOG", default_value = "on")]
    #[serde(serialize_with = "value_name")]
    pub access_log: Switch,
    /// On SIGTERM or SIGINT, how long in-flight requests may take to finish (seconds)
    /// before their connections are dropped
    #[arg(
        long,
        env = "PETSTORE_SHUTDOWN_TIMEOUT",
        value_parser = clap::value_parser!(u64).range(0..=3600),
        default_value_t = 30
    )]
    pub shutdown_timeout: u64,
    /// How long the first 201 of each Idempotency-Key is kept and replayed, at least 24h
    /// (the contract's promise), e.g. 48h or 7d
    #[arg(
        long,
        env = "PETSTORE_IDEMPOTENCY_RETENTION",
        value_parser = parse_retention,
        default_value = "24h"
    )]
    #[serde(serialize_with = "duration")]
    pub idempotency_retention: Duration,
    /// How long events are kept in the feed (GET /v1/events), e.g. 30d or 12h; a client
    /// whose cursor is older gets 410 and starts again
    #[arg(
        long,
        env = "PETSTORE_EVENTS_RETENTION",
        value_parser = parse_events_retention,
        default_value = "30d"
    )]
    #[serde(serialize_with = "duration")]
    pub events_retention: Duration,
    /// The key file that seals webhook signing secrets, kept outside the database (a read of
    /// the database alone cannot sign); PostgreSQL: the same file on every instance, or
    /// webhooks are off. SQLite default: FILE.webhook-key beside the database, made at start
    #[arg(long, env = "PETSTORE_WEBHOOK_KEY_FILE", value_name = "FILE")]
    pub webhook_key_file: Option<PathBuf>,
    /// Let webhooks target loopback and private addresses (and plain http): for tests and
    /// private networks. Off: only https URLs that resolve to public addresses
    #[arg(
        long,
        env = "PETSTORE_WEBHOOK_ALLOW_PRIVATE_TARGETS",
        default_value = "off"
    )]
    #[serde(serialize_with = "value_name")]
    pub webhook_allow_private_targets: Switch,
    /// After a failed webhook delivery, the delays before each next attempt, comma-separated;
    /// once they are used up, the delivery has failed and its subscription is disabled
    #[arg(
        long,
        env = "PETSTORE_WEBHOOK_RETRY_SCHEDULE",
        value_parser = parse_retry_schedule,
        default_value = "5s,5m,30m,2h,5h,10h,14h,20h,24h"
    )]
    #[serde(serialize_with = "text")]
    pub webhook_retry_schedule: RetryDelays,
    /// How long a webhook delivery may take, from connecting to the receiver's answer
    #[arg(
        long,
        env = "PETSTORE_WEBHOOK_TIMEOUT",
        value_parser = parse_webhook_timeout,
        default_value = "15s"
    )]
    #[serde(serialize_with = "duration")]
    pub webhook_timeout: Duration,
    /// The contract (/openapi.yaml, /openapi.json) and an interactive page (/docs/),
    /// no API key needed to read them
    #[arg(long, env = "PETSTORE_DOCS", default_value = "on")]
    #[serde(serialize_with = "value_name")]
    pub docs: Switch,
    /// Rate limits: every API key's budget (the --key-* defaults, or its own from `keys
    /// limits`) and a budget per client address for requests without a valid key; over
    /// budget, 429
    #[arg(long, env = "PETSTORE_RATE_LIMITS", default_value = "off")]
    #[serde(serialize_with = "value_name")]
    pub rate_limits: Switch,
    /// A key's sustained rate, unless it sets its own: e.g. 100/s, 6000/min
    #[arg(long, env = "PETSTORE_KEY_RATE", value_parser = parse_rate, default_value = "100/s")]
    #[serde(serialize_with = "text")]
    pub key_rate: Rate,
    /// How many requests a key may send at once above its rate (its burst), unless it sets
    /// its own
    #[arg(
        long,
        env = "PETSTORE_KEY_BURST",
        value_parser = clap::value_parser!(u32).range(1..=1_000_000),
        default_value_t = 200
    )]
    pub key_burst: u32,
    /// How many of a key's requests may be in progress at once, unless it sets its own
    #[arg(
        long,
        env = "PETSTORE_KEY_IN_FLIGHT",
        value_parser = clap::value_parser!(u32).range(1..=1_000_000),
        default_value_t = 32
    )]
    pub key_in_flight: u32,
    /// The rate of requests without a valid API key, per client address (IPv6: per /64)
    #[arg(long, env = "PETSTORE_ADDRESS_RATE", value_parser = parse_rate, default_value = "5/s")]
    #[serde(serialize_with = "text")]
    pub address_rate: Rate,
    /// Their burst, per client address
    #[arg(
        long,
        env = "PETSTORE_ADDRESS_BURST",
        value_parser = clap::value_parser!(u32).range(1..=1_000_000),
        default_value_t = 20
    )]
    pub address_burst: u32,
    #[command(flatten)]
    #[serde(flatten)]
    pub edge: EdgeArgs,
}

/// The API connections' limits (`EdgeLimits`). The cap's default is sized
/// from the open-file limit when the command line is read, which `main`
/// has raised to the hard limit by then.
#[derive(clap::Args, Clone, Debug, Serialize)]
pub struct EdgeArgs {
    /// The most API connections open at once; at the cap, a new one closes the connection idle
    /// the longest. Default: the open-file limit less 384 descriptors kept for the database,
    /// logs, the management listener and webhook deliveries; more than that is refused at start
    #[arg(
        long,
        env = "PETSTORE_MAX_CONNECTIONS",
        value_parser = clap::value_parser!(u64).range(1..),
        default_value_t = EdgeLimits::default().max_connections as u64
    )]
    pub max_connections: u64,
    /// How long a connection may send nothing (before its first request, between keep-alive
    /// requests, HTTP/2 with no stream open) before it is closed, e.g. 10s (1s to 1h)
    #[arg(
        long,
        env = "PETSTORE_IDLE_TIMEOUT",
        value_parser = parse_timeout,
        default_value = "10s"
    )]
    #[serde(serialize_with = "duration")]
    pub idle_timeout: Duration,
    /// How long an HTTP/1 request head may take to arrive, from a connection's first bytes or
    /// from the previous response on a kept-alive one (1s to 1h)
    #[arg(
        long,
        env = "PETSTORE_HEADER_READ_TIMEOUT",
        value_parser = parse_timeout,
        default_value = "10s"
    )]
    #[serde(serialize_with = "duration")]
    pub header_read_timeout: Duration,
    /// How long a TLS handshake may take (1s to 1h)
    #[arg(
        long,
        env = "PETSTORE_TLS_HANDSHAKE_TIMEOUT",
        value_parser = parse_timeout,
        default_value = "10s"
    )]
    #[serde(serialize_with = "duration")]
    pub tls_handshake_timeout: Duration,
    /// How long a request body may take to arrive; past it, 408 request_timeout (1s to 1h)
    #[arg(
        long,
        env = "PETSTORE_BODY_READ_TIMEOUT",
        value_parser = parse_timeout,
        default_value = "10s"
    )]
    #[serde(serialize_with = "duration")]
    pub body_read_timeout: Duration,
    /// How often an HTTP/2 connection is pinged; one that does not answer within as long again
    /// is closed (1s to 1h)
    #[arg(
        long,
        env = "PETSTORE_HTTP2_KEEP_ALIVE_INTERVAL",
        value_parser = parse_timeout,
        default_value = "20s"
    )]
    #[serde(serialize_with = "duration")]
    pub http2_keep_alive_interval: Duration,
}

impl EdgeArgs {
    /// The limits, for `ServerConfig`.
    pub fn limits(&self) -> EdgeLimits {
        EdgeLimits {
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            idle_timeout: self.idle_timeout,
            header_read_timeout: self.header_read_timeout,
            tls_handshake_timeout: self.tls_handshake_timeout,
            body_read_timeout: self.body_read_timeout,
            http2_keep_alive_interval: self.http2_keep_alive_interval,
        }
    }
}

/// A timeout of the edge: under a second would cut legitimate clients on a
/// slow link; over an hour holds a descriptor for nothing.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text)
        .map_err(|e| format!("{e}; expected a duration such as 10s or 1m"))?;
    if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&timeout) {
        return Err(format!("{text} is not between 1s and 1h"));
    }
    Ok(timeout)
}

fn parse_webhook_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text)
        .map_err(|e| format!("{e}; expected a duration such as 15s"))?;
    if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&timeout) {
        return Err(format!("{text} is not between 100ms and 60s"));
    }
    Ok(timeout)
}

/// `--webhook-retry-schedule`: the delays between a delivery's attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryDelays(pub Vec<Duration>);

impl std::fmt::Display for RetryDelays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, delay) in self.0.iter().enumerate() {
            let separator = if i == 0 { "" } else { "," };
            write!(f, "{separator}{}", duration_text(*delay))?;
        }
        Ok(())
    }
}

fn parse_retry_schedule(text: &str) -> Result<RetryDelays, String> {
    let delays = text
        .split(',')
        .map(|delay| {
            let delay = delay.trim();
            let parsed = humantime::parse_duration(delay)
                .map_err(|e| format!("{delay:?}: {e}; expected delays such as 5s,5m,30m"))?;
            if parsed > Duration::from_secs(7 * 24 * 60 * 60) {
                return Err(format!("{delay} is longer than 7 days"));
            }
            Ok(parsed)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if delays.len() > 20 {
        return Err("at most 20 retries".into());
    }
    Ok(RetryDelays(delays))
}

fn parse_rate(text: &str) -> Result<Rate, String> {
    text.parse()
}

fn parse_retention(text: &str) -> Result<Duration, String> {
    let retention = humantime::parse_duration(text)
        .map_err(|e| format!("{e}; expected a duration such as 24h, 48h or 7d"))?;
    if retention < IDEMPOTENCY_RETENTION_MIN {
        return Err(format!(
            "{text} is shorter than 24h: the contract promises clients that an idempotency key \
             is kept for at least 24 hours"
        ));
    }
    Ok(retention)
}

fn parse_events_retention(text: &str) -> Result<Duration, String> {
    let retention = humantime::parse_duration(text)
        .map_err(|e| format!("{e}; expected a duration such as 30d or 12h"))?;
    if retention < Duration::from_secs(1) {
        return Err(format!("{text} is shorter than a second"));
    }
    Ok(retention)
}

/// `--admin-bind`: an address, or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminBind {
    /// Listen here.
    On(SocketAddr),
    /// No management listener, no metrics.
    Off,
}

fn parse_admin_bind(value: &str) -> Result<AdminBind, String> {
    if value == "off" {
        return Ok(AdminBind::Off);
    }
    value
        .parse()
        .map(AdminBind::On)
        .map_err(|e| format!("{e}; expected an address such as 127.0.0.1:9090, or off"))
}

impl std::fmt::Display for AdminBind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminBind::On(address) => address.fmt(f),
            AdminBind::Off => f.write_str("off"),
        }
    }
}

/// Log format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormatArg {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines, for a terminal.
    Text,
}

/// On or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

/// Log level.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Debugging detail.
    Debug,
    /// Start-up, shutdown and the access log.
    Info,
    /// Problems worth a look.
    Warn,
    /// Failures.
    Error,
    /// Failures that stop the server.
    Critical,
}

impl From<LogLevel> for slog::Level {
    fn from(level: LogLevel) -> slog::Level {
        match level {
            LogLevel::Trace => slog::Level::Trace,
            LogLevel::Debug => slog::Level::Debug,
            LogLevel::Info => slog::Level::Info,
            LogLevel::Warn => slog::Level::Warning,
            LogLevel::Error => slog::Level::Error,
            LogLevel::Critical => slog::Level::Critical,
        }
    }
}

/// How `config check` prints a value: its `Display`.
fn text<S: Serializer>(value: &impl std::fmt::Display, out: S) -> Result<S::Ok, S::Error> {
    out.collect_str(value)
}

/// How `config check` prints a choice: its flag's name for it.
fn value_name<S: Serializer>(value: &impl ValueEnum, out: S) -> Result<S::Ok, S::Error> {
    let name = value.to_possible_value().expect("no value is skipped");
    out.serialize_str(name.get_name())
}

/// How `config check` prints a duration: `duration_text`'s.
fn duration<S: Serializer>(value: &Duration, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(&duration_text(*value))
}

/// Where a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag.
    Flag,
    /// An environment variable.
    Environment,
    /// The configuration file.
    File,
    /// The built-in default.
    Default,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Environment => "environment",
            Source::File => "file",
            Source::Default => "default",
        }
    }
}

/// Settings in effect (`A`, through `Deref`), and where each came from.
#[derive(Clone, Debug)]
pub struct Resolved<A> {
    args: A,
    /// Each setting's source, by its key, in the flags' order.
    sources: Vec<(String, Source)>,
    /// The configuration file, if one was read.
    file: Option<PathBuf>,
}

/// Everything `serve` uses.
pub type ServeSettings = Resolved<ServeArgs>;
/// What the commands that only open the database use.
pub type DatabaseSettings = Resolved<DatabaseArgs>;

impl<A> Deref for Resolved<A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.args
    }
}

impl<A: Args + FromArgMatches + Serialize> Resolved<A> {
    /// Lays the file (if any) under `args`, as parsed into `matches`: its
    /// value replaces each that came from the default.
    fn layer(mut args: A, matches: &ArgMatches, file: Option<&Path>) -> anyhow::Result<Self> {
        let values = file.map(read_file).transpose()?.unwrap_or_default();
        // A value in the file has the type `config check` prints for it.
        let printed = toml::Table::try_from(&args)?;
        // The file's values parsed as flags, with no environment and no defaults.
        let mut as_flags = A::augment_args(clap::Command::new("file"))
            .no_binary_name(true)
            .mut_args(|arg| arg.env(None).default_value(None));
        let flags: Vec<_> = as_flags.get_arguments().cloned().collect();
        let mut sources = Vec::with_capacity(flags.len());
        for flag in flags {
            let key = flag.get_id().as_str();
            let source = match (matches.value_source(key), values.get(key), file) {
                (Some(ValueSource::CommandLine), ..) => Source::Flag,
                (Some(ValueSource::EnvVariable), ..) => Source::Environment,
                (_, Some(value), Some(path)) => {
                    let in_error =
                        |reason| anyhow::anyhow!("{}: key `{key}`: {reason}", path.display());
                    let printed = printed.get(key).map_or("string", toml::Value::type_str);
                    let value = flag_text(value, printed).map_err(in_error)?;
                    let long = flag.get_long().expect("every setting is a long flag");
                    let from_file = as_flags
                        .try_get_matches_from_mut([format!("--{long}={value}")])
                        .map_err(|e| in_error(parse_error(&value, &e)))?;
                    args.update_from_arg_matches(&from_file)?;
                    Source::File
                }
                _ => Source::Default,
            };
            sources.push((key.to_owned(), source));
        }
        Ok(Resolved {
            args,
            sources,
            file: file.map(Path::to_owned),
        })
    }

    /// Where `key`'s value came from.
    fn source(&self, key: &str) -> Source {
        self.sources
            .iter()
            .find_map(|(id, source)| (id == key).then_some(*source))
            .unwrap_or(Source::Default)
    }
}

impl DatabaseArgs {
    /// The database to open.
    pub fn url(&self) -> DatabaseUrl {
        match &self.database {
            DatabaseUrl::Postgres(url) => {
                DatabaseUrl::Postgres(url.clone().with_pool_size(self.database_pool_size.into()))
            }
            sqlite => sqlite.clone(),
        }
    }

    /// Resolves the database settings of any command from its parsed flags.
    pub fn resolve(self, matches: &ArgMatches) -> anyhow::Result<DatabaseSettings> {
        let file = self.config.clone();
        Resolved::layer(self, matches, file.as_deref())
    }
}

impl ServeArgs {
    /// Resolves the settings of `serve` (or of `config check`, with no
    /// flags but `--config`) from its parsed flags.
    pub fn resolve(self, matches: &ArgMatches) -> anyhow::Result<ServeSettings> {
        let file = self.database.config.clone();
        let settings = Resolved::layer(self, matches, file.as_deref())?;
        settings.tls()?;
        Ok(settings)
    }
}

impl ServeSettings {
    /// The TLS files, when both are set; an error when only one is.
    pub fn tls(&self) -> anyhow::Result<Option<TlsFiles>> {
        let (set, unset) = match (&self.tls_cert, &self.tls_key) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => {
                return Ok(Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }));
            }
            (Some(_), None) => ("tls_cert", "tls_key"),
            (None, Some(_)) => ("tls_key", "tls_cert"),
        };
        let from = match (self.source(set), &self.file) {
            (Source::File, Some(file)) => format!(" (in {})", file.display()),
            _ => String::new(),
        };
        bail!(
            "TLS needs both a certificate and a key: {set} is set{from} but {unset} \
             is not (--tls-cert and --tls-key go together)"
        )
    }

    /// The budgets, when rate limits are on.
    pub fn rate_limits(&self) -> Option<RateLimits> {
        let positive = |n: u32| std::num::NonZeroU32::new(n).expect("the parser refuses 0");
        (self.rate_limits == Switch::On).then(|| RateLimits {
            key: Budget {
                rate: self.key_rate,
                burst: positive(self.key_burst),
                in_flight: positive(self.key_in_flight),
            },
            address_rate: self.address_rate,
            address_burst: positive(self.address_burst),
        })
    }

    /// How to log.
    pub fn log(&self) -> LogSettings {
        LogSettings {
            format: match self.log_format {
                LogFormatArg::Json => LogFormat::Json,
                LogFormatArg::Text => LogFormat::Text,
            },
            level: self.log_level.into(),
            access_log: self.access_log == Switch::On,
        }
    }

    /// The effective configuration as TOML, each line saying where its
    /// value came from; the database password is masked.
    pub fn describe(&self) -> anyhow::Result<String> {
        let values = toml::Table::try_from(&self.args)?;
        let mut out = String::new();
        for (key, source) in &self.sources {
            if let Some(value) = values.get(key) {
                let _ = writeln!(out, "{key} = {value}  # {}", source.name());
            }
        }
        Ok(out)
    }
}

/// Why the flag's parser refused `value`, without clap's framing.
fn parse_error(value: &str, error: &clap::Error) -> String {
    match (error.kind(), error.get(ContextKind::ValidValue)) {
        (ErrorKind::InvalidValue, Some(ContextValue::Strings(allowed))) => {
            format!("{value:?} is not one of {}", allowed.join(", "))
        }
        _ => std::error::Error::source(error).map_or_else(|| error.to_string(), |e| e.to_string()),
    }
}

/// The settings a configuration file may hold: those of `serve`.
static FILE_KEYS: LazyLock<&'static [&'static str]> = LazyLock::new(|| {
    let serve = ServeArgs::augment_args(clap::Command::new("serve"));
    let settings = serve.get_arguments().map(|flag| flag.get_id().as_str());
    let keys: Vec<&'static str> = settings
        .filter(|&key| key != "config")
        .map(|key| &*Box::leak(key.into()))
        .collect();
    keys.leak()
});

/// A key a file may not hold, read only to be refused with a reason: API
/// keys are secrets.
const API_KEYS: &str = "api_keys";

/// Reads a configuration file: each setting's value, by its key.
fn read_file(path: &Path) -> anyhow::Result<HashMap<String, toml::Value>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let values: HashMap<FileKey, toml::Value> = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
    if values.contains_key(API_KEYS) {
        bail!(
            "{}: `api_keys` is not a setting of the configuration file: API keys are \
             secrets; create them with `petstore-server keys create` (stored hashed), or \
             set PETSTORE_API_KEYS for development",
            path.display()
        );
    }
    Ok(values
        .into_iter()
        .map(|(FileKey(key), value)| (key, value))
        .collect())
}

/// A key of the file, checked as it is read so that toml's error points at
/// it in the file: one of [`FILE_KEYS`], or [`API_KEYS`]. An unknown key's
/// error lists only the settings.
#[derive(PartialEq, Eq, Hash)]
struct FileKey(String);

impl std::borrow::Borrow<str> for FileKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for FileKey {
    fn deserialize<D: serde::Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
        let key = String::deserialize(input)?;
        match key == API_KEYS || FILE_KEYS.contains(&key.as_str()) {
            true => Ok(FileKey(key)),
            false => Err(serde::de::Error::unknown_field(&key, *FILE_KEYS)),
        }
    }
}

/// A file's value as its flag would be given it (a string's text, an
/// integer's digits), if it is of the type `expected`.
fn flag_text(value: &toml::Value, expected: &str) -> Result<String, String> {
    match value {
        _ if value.type_str() != expected => Err(format!(
            "invalid type: {} `{value}`, expected {}",
            value.type_str(),
            if expected == "integer" {
                "an integer"
            } else {
                "a string"
            }
        )),
        toml::Value::String(text) => Ok(text.clone()),
        other => Ok(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    #[command(no_binary_name = true)]
    struct Serve {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// `config check`'s lines for these flags.
    fn described(flags: &[&str]) -> anyhow::Result<String> {
        let matches = Serve::command().try_get_matches_from(flags)?;
        let args = Serve::from_arg_matches(&matches)?.serve;
        args.resolve(&matches)?.describe()
    }

    #[test]
    fn every_setting_is_read_from_the_file_below_its_flag() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("petstore.toml");
        // Every setting of `serve`, none at its default, as `config check`
        // prints them.
        let settings = "bind = \"0.0.0.0:8443\"\n\
            admin_bind = \"off\"\n\
            database = \"postgres://pets:***@db.internal/pets\"\n\
            database_pool_size = 9\n\
            tls_cert = \"/etc/tls/cert.pem\"\n\
            tls_key = \"/etc/tls/key.pem\"\n\
            log_level = \"debug\"\n\
            log_format = \"text\"\n\
            access_log = \"off\"\n\
            shutdown_timeout = 0\n\
            idempotency_retention = \"171h\"\n\
            events_retention = \"12h\"\n\
            webhook_key_file = \"/etc/petstore/webhook.key\"\n\
            webhook_allow_private_targets = \"on\"\n\
            webhook_retry_schedule = \"1s,2s,1m\"\n\
            webhook_timeout = \"3s\"\n\
            docs = \"off\"\n\
            rate_limits = \"on\"\n\
            key_rate = \"6000/min\"\n\
            key_burst = 50\n\
            key_in_flight = 4\n\
            address_rate = \"2/s\"\n\
            address_burst = 3\n\
            max_connections = 100\n\
            idle_timeout = \"2s\"\n\
            header_read_timeout = \"3s\"\n\
            tls_handshake_timeout = \"4s\"\n\
            body_read_timeout = \"5s\"\n\
            http2_keep_alive_interval = \"1m\"\n";
        std::fs::write(&file, settings).unwrap();
        let file = file.to_str().unwrap();
        let from_file: String = settings.lines().map(|l| format!("{l}  # file\n")).collect();
        assert_eq!(described(&["--config", file]).unwrap(), from_file);
        let with_flag = described(&["--config", file, "--log-level", "warn"]).unwrap();
        assert_eq!(
            with_flag,
            from_file.replace(
                "log_level = \"debug\"  # file",
                "log_level = \"warn\"  # flag"
            )
        );
    }

    #[test]
    fn with_no_file_every_setting_is_its_default() {
        let described = described(&[]).unwrap();
        assert_eq!(described.lines().count(), 26, "{described}");
        assert!(
            described.lines().all(|line| line.ends_with("  # default")),
            "{described}"
        );
        // As the README's table gives them.
        assert!(described.contains("idempotency_retention = \"24h\""));
        assert!(described.contains("events_retention = \"30d\""));
        assert!(described.contains("webhook_retry_schedule = \"5s,5m,30m,2h,5h,10h,14h,20h,24h\""));
        assert!(described.contains("idle_timeout = \"10s\""));
        let cap = EdgeLimits::default().max_connections;
        assert!(described.contains(&format!("max_connections = {cap}  #")));
        // The flags' defaults are the library's, sized for this process.
        let matches = Serve::command()
            .try_get_matches_from::<_, &str>([])
            .unwrap();
        let args = Serve::from_arg_matches(&matches).unwrap().serve;
        assert_eq!(args.edge.limits(), EdgeLimits::default());
    }

    #[test]
    fn timeouts_out_of_bounds_are_refused() {
        for (text, expected) in [
            ("500ms", "500ms is not between 1s and 1h"),
            ("2h", "2h is not between 1s and 1h"),
            ("soon", "expected a duration such as 10s or 1m"),
        ] {
            let error = parse_timeout(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
        assert_eq!(parse_timeout("1m"), Ok(Duration::from_secs(60)));
    }
}
