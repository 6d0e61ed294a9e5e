//! The server's settings, from four layers: a flag, else its environment
//! variable, else the configuration file (`--config`), else the default.
//!
//! The file is TOML; its keys are the long flags' names with `_` for `-`
//! (`bind`, `database`, `database_pool_size`, …). An unknown key is an
//! error naming the key and the file. API keys are refused there: they are
//! secrets, and belong in the database (`keys create`, stored hashed) or,
//! for development, in `PETSTORE_API_KEYS`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;
use clap::parser::{ArgMatches, ValueSource};
use petstore_server::logging::{LogFormat, LogSettings};
use petstore_server::store::{DatabaseUrl, PostgresUrl};
use petstore_server::{IDEMPOTENCY_RETENTION_MIN, TlsFiles};

/// The database flags every command that opens the database takes.
#[derive(clap::Args, Clone, Debug)]
pub struct DatabaseArgs {
    /// A TOML configuration file; flags and environment variables override it.
    #[arg(long, env = "PETSTORE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://FILE (relative to the working directory), sqlite:///ABSOLUTE/FILE,
    /// or postgres://USER:PASSWORD@HOST:PORT/DATABASE [default: sqlite://petstore.db]
    #[arg(long, env = "PETSTORE_DATABASE_URL", hide_env_values = true)]
    pub database: Option<DatabaseUrl>,
    /// Pooled PostgreSQL connections per server process, one per idempotent create in progress
    /// (reads share up to 4 more, plain creates 2); not used with SQLite [default: 16]
    #[arg(
        long,
        env = "PETSTORE_DATABASE_POOL_SIZE",
        value_parser = clap::value_parser!(u16).range(1..=1000)
    )]
    pub database_pool_size: Option<u16>,
}

/// The flags of `serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long, env = "PETSTORE_BIND")]
    pub bind: Option<SocketAddr>,
    /// The management listener (/healthz, /readyz, /metrics; no API key), or `off`
    /// [default: 127.0.0.1:9090]
    #[arg(long, env = "PETSTORE_ADMIN_BIND", value_parser = parse_admin_bind)]
    pub admin_bind: Option<AdminBind>,
    /// PEM certificate chain: serve HTTPS (with --tls-key). SIGHUP reloads it.
    #[arg(long, env = "PETSTORE_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "PETSTORE_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Log level [default: info]
    #[arg(long, env = "PETSTORE_LOG_LEVEL")]
    pub log_level: Option<LogLevel>,
    /// Log format, written to stderr [default: json]
    #[arg(long, env = "PETSTORE_LOG_FORMAT")]
    pub log_format: Option<LogFormatArg>,
    /// The access log: one record per request and per connection, at info [default: on]
    #[arg(long, env = "PETSTORE_ACCESS_LOG")]
    pub access_log: Option<Switch>,
    /// On SIGTERM or SIGINT, how long in-flight requests may take to finish (seconds)
    /// before their connections are dropped [default: 30]
    #[arg(
        long,
        env = "PETSTORE_SHUTDOWN_TIMEOUT",
        value_parser = clap::value_parser!(u64).range(0..=3600)
    )]
    pub shutdown_timeout: Option<u64>,
    /// How long the first 201 of each Idempotency-Key is kept and replayed, at least 24h
    /// (the contract's promise), e.g. 48h or 7d [default: 24h]
    #[arg(long, env = "PETSTORE_IDEMPOTENCY_RETENTION", value_parser = parse_retention)]
    pub idempotency_retention: Option<Duration>,
    /// The contract (/openapi.yaml, /openapi.json) and an interactive page (/docs/),
    /// no API key needed to read them [default: on]
    #[arg(long, env = "PETSTORE_DOCS")]
    pub docs: Option<Switch>,
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

/// The configuration file, as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    bind: Option<String>,
    admin_bind: Option<String>,
    database: Option<String>,
    database_pool_size: Option<u16>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    log_level: Option<String>,
    log_format: Option<String>,
    access_log: Option<String>,
    shutdown_timeout: Option<u64>,
    idempotency_retention: Option<String>,
    docs: Option<String>,
    /// Only to refuse it with a reason.
    api_keys: Option<toml::Value>,
}

impl FileSettings {
    fn read(path: &Path) -> anyhow::Result<FileSettings> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        let settings: FileSettings = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        if settings.api_keys.is_some() {
            bail!(
                "{}: `api_keys` is not a setting of the configuration file: API keys are \
                 secrets; create them with `petstore-server keys create` (stored hashed), or \
                 set PETSTORE_API_KEYS for development",
                path.display()
            );
        }
        Ok(settings)
    }
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

/// A setting's effective value and where it came from.
#[derive(Clone, Debug)]
pub struct Setting<T> {
    /// The value.
    pub value: T,
    /// Its source.
    pub source: Source,
}

/// Picks a setting from its layers. `matches` tells a flag from its
/// environment variable; `file` is parsed only when it is used, and its
/// errors name the key and the file.
fn layer<T>(
    id: &str,
    given: Option<T>,
    matches: Option<&ArgMatches>,
    file: Option<(&str, &Path)>,
    parse: impl Fn(&str) -> Result<T, String>,
    default: impl FnOnce() -> T,
) -> anyhow::Result<Setting<T>> {
    if let Some(value) = given {
        let source = match matches.and_then(|m| m.value_source(id)) {
            Some(ValueSource::EnvVariable) => Source::Environment,
            _ => Source::Flag,
        };
        return Ok(Setting { value, source });
    }
    if let Some((text, path)) = file {
        let value =
            parse(text).map_err(|e| anyhow::anyhow!("{}: key `{id}`: {e}", path.display()))?;
        return Ok(Setting {
            value,
            source: Source::File,
        });
    }
    Ok(Setting {
        value: default(),
        source: Source::Default,
    })
}

fn value_enum<T: ValueEnum>(text: &str) -> Result<T, String> {
    T::from_str(text, false).map_err(|_| {
        let allowed: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_owned()))
            .collect();
        format!("{text:?} is not one of {}", allowed.join(", "))
    })
}

/// The database settings in effect.
#[derive(Clone, Debug)]
pub struct DatabaseSettings {
    /// The URL.
    pub url: Setting<DatabaseUrl>,
    /// The PostgreSQL pool size.
    pub pool_size: Setting<u16>,
}

impl DatabaseSettings {
    /// The database to open.
    pub fn database(&self) -> DatabaseUrl {
        match &self.url.value {
            DatabaseUrl::Postgres(url) => {
                DatabaseUrl::Postgres(url.clone().with_pool_size(self.pool_size.value.into()))
            }
            sqlite => sqlite.clone(),
        }
    }

    /// Resolves the database settings of any command.
    pub fn resolve(args: DatabaseArgs, matches: Option<&ArgMatches>) -> anyhow::Result<Self> {
        let (file, path) = read_file(args.config.as_deref())?;
        DatabaseSettings::from_layers(args, matches, &file, &path)
    }

    fn from_layers(
        args: DatabaseArgs,
        matches: Option<&ArgMatches>,
        file: &FileSettings,
        path: &Path,
    ) -> anyhow::Result<Self> {
        let pool = file.database_pool_size.map(|n| n.to_string());
        Ok(DatabaseSettings {
            url: layer(
                "database",
                args.database,
                matches,
                at(&file.database, path),
                |text| text.parse::<DatabaseUrl>().map_err(|e| e.to_string()),
                || DatabaseUrl::Sqlite("petstore.db".into()),
            )?,
            pool_size: layer(
                "database_pool_size",
                args.database_pool_size,
                matches,
                at(&pool, path),
                |text| match text.parse::<u16>() {
                    Ok(n @ 1..=1000) => Ok(n),
                    _ => Err(format!("{text} is not in 1..=1000")),
                },
                || PostgresUrl::DEFAULT_POOL_SIZE as u16,
            )?,
        })
    }
}

/// A value from the file, with the file's path for error messages.
fn at<'a>(value: &'a Option<String>, path: &'a Path) -> Option<(&'a str, &'a Path)> {
    value.as_deref().map(|text| (text, path))
}

fn read_file(path: Option<&Path>) -> anyhow::Result<(FileSettings, PathBuf)> {
    match path {
        Some(path) => Ok((FileSettings::read(path)?, path.to_owned())),
        None => Ok((FileSettings::default(), PathBuf::new())),
    }
}

/// Everything `serve` uses.
#[derive(Clone, Debug)]
pub struct ServeSettings {
    /// The database.
    pub database: DatabaseSettings,
    /// The API address.
    pub bind: Setting<SocketAddr>,
    /// The management address.
    pub admin_bind: Setting<AdminBind>,
    /// The certificate, when serving HTTPS.
    pub tls_cert: Option<Setting<PathBuf>>,
    /// Its key.
    pub tls_key: Option<Setting<PathBuf>>,
    /// The log level.
    pub log_level: Setting<LogLevel>,
    /// The log format.
    pub log_format: Setting<LogFormatArg>,
    /// Whether the access log is written.
    pub access_log: Setting<Switch>,
    /// The shutdown deadline, seconds.
    pub shutdown_timeout: Setting<u64>,
    /// How long idempotency keys are kept.
    pub idempotency_retention: Setting<Duration>,
    /// Whether the contract and the docs page are served.
    pub docs: Setting<Switch>,
    /// The configuration file, if one was read.
    pub file: Option<PathBuf>,
}

impl ServeSettings {
    /// Resolves the settings of `serve` (or of `config check`, with no flags).
    pub fn resolve(args: ServeArgs, matches: Option<&ArgMatches>) -> anyhow::Result<Self> {
        let config_file = args.database.config.clone();
        let (file, path) = read_file(args.database.config.as_deref())?;
        let database = DatabaseSettings::from_layers(args.database, matches, &file, &path)?;
        let shutdown = file.shutdown_timeout.map(|n| n.to_string());
        let path_setting = |id: &str, given: Option<PathBuf>, in_file: &Option<PathBuf>| {
            let in_file = in_file.as_ref().map(|p| p.display().to_string());
            match (given.is_some(), in_file.is_some()) {
                (false, false) => Ok(None),
                _ => layer(
                    id,
                    given,
                    matches,
                    in_file.as_deref().map(|text| (text, path.as_path())),
                    |text| Ok(PathBuf::from(text)),
                    PathBuf::new,
                )
                .map(Some),
            }
        };
        let settings = ServeSettings {
            database,
            bind: layer(
                "bind",
                args.bind,
                matches,
                at(&file.bind, &path),
                |text| text.parse().map_err(|e| format!("{e}")),
                || SocketAddr::from(([127, 0, 0, 1], 8080)),
            )?,
            admin_bind: layer(
                "admin_bind",
                args.admin_bind,
                matches,
                at(&file.admin_bind, &path),
                parse_admin_bind,
                || AdminBind::On(SocketAddr::from(([127, 0, 0, 1], 9090))),
            )?,
            tls_cert: path_setting("tls_cert", args.tls_cert, &file.tls_cert)?,
            tls_key: path_setting("tls_key", args.tls_key, &file.tls_key)?,
            log_level: layer(
                "log_level",
                args.log_level,
                matches,
                at(&file.log_level, &path),
                value_enum,
                || LogLevel::Info,
            )?,
            log_format: layer(
                "log_format",
                args.log_format,
                matches,
                at(&file.log_format, &path),
                value_enum,
                || LogFormatArg::Json,
            )?,
            access_log: layer(
                "access_log",
                args.access_log,
                matches,
                at(&file.access_log, &path),
                value_enum,
                || Switch::On,
            )?,
            shutdown_timeout: layer(
                "shutdown_timeout",
                args.shutdown_timeout,
                matches,
                at(&shutdown, &path),
                |text| match text.parse::<u64>() {
                    Ok(n @ 0..=3600) => Ok(n),
                    _ => Err(format!("{text} is not in 0..=3600")),
                },
                || 30,
            )?,
            idempotency_retention: layer(
                "idempotency_retention",
                args.idempotency_retention,
                matches,
                at(&file.idempotency_retention, &path),
                parse_retention,
                || IDEMPOTENCY_RETENTION_MIN,
            )?,
            docs: layer(
                "docs",
                args.docs,
                matches,
                at(&file.docs, &path),
                value_enum,
                || Switch::On,
            )?,
            file: config_file,
        };
        settings.tls()?;
        Ok(settings)
    }

    /// The TLS files, when both are set; an error when only one is.
    pub fn tls(&self) -> anyhow::Result<Option<TlsFiles>> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(TlsFiles {
                cert: cert.value.clone(),
                key: key.value.clone(),
            })),
            (cert, key) => {
                let (set, unset, source) = match (cert, key) {
                    (Some(cert), _) => ("tls_cert", "tls_key", cert.source),
                    (_, Some(key)) => ("tls_key", "tls_cert", key.source),
                    _ => unreachable!("one of the two is set"),
                };
                let from = match (source, &self.file) {
                    (Source::File, Some(file)) => format!(" (in {})", file.display()),
                    _ => String::new(),
                };
                bail!(
                    "TLS needs both a certificate and a key: {set} is set{from} but {unset} \
                     is not (--tls-cert and --tls-key go together)"
                )
            }
        }
    }

    /// How to log.
    pub fn log(&self) -> LogSettings {
        LogSettings {
            format: match self.log_format.value {
                LogFormatArg::Json => LogFormat::Json,
                LogFormatArg::Text => LogFormat::Text,
            },
            level: self.log_level.value.into(),
            access_log: self.access_log.value == Switch::On,
        }
    }

    /// The effective configuration as TOML, each line saying where its
    /// value came from; the database password is masked.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let mut line = |key: &str, value: String, source: Source| {
            let _ = writeln!(out, "{key} = {value}  # {}", source.name());
        };
        let quoted = |value: &dyn std::fmt::Display| format!("\"{value}\"");
        line("bind", quoted(&self.bind.value), self.bind.source);
        line(
            "admin_bind",
            quoted(&self.admin_bind.value),
            self.admin_bind.source,
        );
        line(
            "database",
            quoted(&self.database.url.value),
            self.database.url.source,
        );
        line(
            "database_pool_size",
            self.database.pool_size.value.to_string(),
            self.database.pool_size.source,
        );
        for (key, setting) in [("tls_cert", &self.tls_cert), ("tls_key", &self.tls_key)] {
            if let Some(setting) = setting {
                line(key, quoted(&setting.value.display()), setting.source);
            }
        }
        let name = |v: &dyn Fn() -> Option<clap::builder::PossibleValue>| {
            v().map(|p| format!("\"{}\"", p.get_name()))
                .unwrap_or_default()
        };
        line(
            "log_level",
            name(&|| self.log_level.value.to_possible_value()),
            self.log_level.source,
        );
        line(
            "log_format",
            name(&|| self.log_format.value.to_possible_value()),
            self.log_format.source,
        );
        line(
            "access_log",
            name(&|| self.access_log.value.to_possible_value()),
            self.access_log.source,
        );
        line(
            "shutdown_timeout",
            self.shutdown_timeout.value.to_string(),
            self.shutdown_timeout.source,
        );
        line(
            "idempotency_retention",
            quoted(&humantime::format_duration(
                self.idempotency_retention.value,
            )),
            self.idempotency_retention.source,
        );
        line(
            "docs",
            name(&|| self.docs.value.to_possible_value()),
            self.docs.source,
        );
        out
    }
}
