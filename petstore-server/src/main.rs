//! `petstore-server`: the pet store service for operators.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use petstore_server::keys::ApiKeys;
use petstore_server::logging::{self, LogFormat, LogSettings};
use petstore_server::store::{DatabaseUrl, FatalSender, PostgresUrl};
use petstore_server::{ServerConfig, api, store};

/// The pet store catalogue service (OpenAPI contract: openapi/petstore.yaml).
#[derive(Parser)]
#[command(version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API until SIGINT or SIGTERM.
    #[command(
        after_help = "API keys are read from the environment variable PETSTORE_API_KEYS \
        (comma-separated), never from a flag, so that they do not show in process listings. \
        The server refuses to start without one."
    )]
    Serve {
        /// Address to listen on.
        #[arg(long, env = "PETSTORE_BIND", default_value = "127.0.0.1:8080")]
        bind: SocketAddr,
        #[command(flatten)]
        database: DatabaseArg,
        /// Log level.
        #[arg(long, env = "PETSTORE_LOG_LEVEL", default_value = "info")]
        log_level: LogLevel,
        /// Log format, written to stderr.
        #[arg(long, env = "PETSTORE_LOG_FORMAT", default_value = "json")]
        log_format: LogFormatArg,
        /// The access log: one record per request and per connection, at info.
        #[arg(long, env = "PETSTORE_ACCESS_LOG", default_value = "on")]
        access_log: Switch,
        /// On SIGTERM or SIGINT, how long in-flight requests may take to
        /// finish (seconds) before their connections are dropped.
        #[arg(
            long,
            env = "PETSTORE_SHUTDOWN_TIMEOUT",
            default_value_t = 30,
            value_parser = clap::value_parser!(u64).range(0..=3600)
        )]
        shutdown_timeout: u64,
    },
    /// Create or upgrade the database schema, then exit.
    Migrate {
        #[command(flatten)]
        database: DatabaseArg,
    },
    /// Print the OpenAPI document this server implements (JSON, as emitted from code).
    Openapi,
}

#[derive(clap::Args)]
struct DatabaseArg {
    /// Database URL: sqlite://FILE (relative to the working directory), sqlite:///ABSOLUTE/FILE,
    /// or postgres://USER:PASSWORD@HOST:PORT/DATABASE.
    #[arg(
        long = "database",
        env = "PETSTORE_DATABASE_URL",
        default_value = "sqlite://petstore.db",
        hide_env_values = true
    )]
    url: DatabaseUrl,
    /// Connections to PostgreSQL per server process (not used with SQLite).
    #[arg(
        long,
        env = "PETSTORE_DATABASE_POOL_SIZE",
        default_value_t = PostgresUrl::DEFAULT_POOL_SIZE as u16,
        value_parser = clap::value_parser!(u16).range(1..=1000)
    )]
    database_pool_size: u16,
}

impl DatabaseArg {
    fn database(self) -> DatabaseUrl {
        match self.url {
            DatabaseUrl::Postgres(url) => {
                DatabaseUrl::Postgres(url.with_pool_size(self.database_pool_size.into()))
            }
            sqlite => sqlite,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormatArg {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines, for a terminal.
    Text,
}

impl From<LogFormatArg> for LogFormat {
    fn from(format: LogFormatArg) -> LogFormat {
        match format {
            LogFormatArg::Json => LogFormat::Json,
            LogFormatArg::Text => LogFormat::Text,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Switch {
    On,
    Off,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(format!("cannot start the async runtime: {e}")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve {
                bind,
                database,
                log_level,
                log_format,
                access_log,
                shutdown_timeout,
            } => {
                let settings = LogSettings {
                    format: log_format.into(),
                    level: log_level.into(),
                    access_log: access_log == Switch::On,
                };
                let log = logging::logger(settings, std::io::stderr());
                let deadline = Duration::from_secs(shutdown_timeout);
                serve(bind, database.database(), deadline, log).await
            }
            Command::Migrate { database } => migrate(database.database()).await,
            Command::Openapi => print_openapi(),
        }
    });
    // Connections cut at the shutdown deadline still have tasks on the
    // runtime; they are dropped here rather than waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format!("{e:#}")),
    }
}

fn fail(message: String) -> ExitCode {
    eprintln!("petstore-server: error: {message}");
    ExitCode::FAILURE
}

async fn serve(
    bind: SocketAddr,
    database: DatabaseUrl,
    deadline: Duration,
    log: slog::Logger,
) -> anyhow::Result<()> {
    let api_keys = ApiKeys::parse(&std::env::var("PETSTORE_API_KEYS").unwrap_or_default())?;
    let server = petstore_server::start(
        ServerConfig {
            bind,
            database,
            api_keys,
        },
        log.clone(),
    )
    .await?;
    let fatal = tokio::select! {
        signal = shutdown_signal() => {
            slog::info!(log, "shutting down"; "signal" => signal?);
            None
        }
        reason = server.fatal_failure() => {
            slog::crit!(log, "shutting down after a fatal failure"; "reason" => &reason);
            Some(reason)
        }
    };
    let report = server.shutdown(deadline).await?;
    if report.deadline_passed {
        slog::warn!(log, "shutdown deadline passed; open connections were dropped";
            "deadline_s" => deadline.as_secs(), "requests_cut" => report.requests_cut);
    }
    slog::info!(log, "stopped"; "requests_cut" => report.requests_cut);
    match fatal {
        None => Ok(()),
        Some(reason) => Err(anyhow::anyhow!("{reason}")),
    }
}

/// Waits for SIGINT or SIGTERM and names the one that came.
async fn shutdown_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    })
}

async fn migrate(database: DatabaseUrl) -> anyhow::Result<()> {
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let store = store::open(&database, &log, FatalSender::new(None)).await?;
    store.close().await;
    println!("the database is at the current schema version");
    Ok(())
}

fn print_openapi() -> anyhow::Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(&api::openapi_document())?
    );
    Ok(())
}
