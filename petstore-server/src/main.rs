//! `petstore-server`: the pet store service for operators.

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use petstore_server::keys::ApiKeys;
use petstore_server::logging;
use petstore_server::storage::{DatabaseUrl, FatalSender, StorageMetrics};
use petstore_server::webhooks::secrets::SealingKeys;
use petstore_server::{ServerConfig, WebhookSettings, storage};

mod cli;

use cli::keys::KeysCommand;
use cli::settings::{AdminBind, DatabaseArgs, DatabaseSettings, ServeArgs, ServeSettings, Switch};
use cli::webhooks::WebhooksCommand;

/// The pet store catalogue service (OpenAPI contract: openapi/petstore.yaml).
#[derive(Parser)]
#[command(version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API until SIGINT or SIGTERM (SIGHUP reloads the TLS certificate).
    #[command(
        after_help = "Settings come from a flag, else its environment variable, else the \
        --config file, else the default. API keys: the stored ones (see `keys`) and those in \
        the environment variable PETSTORE_API_KEYS (comma-separated), never a flag, so that \
        they do not show in process listings. The server refuses to start without one."
    )]
    // Boxed: its settings dwarf the other commands' arguments.
    Serve(Box<ServeArgs>),
    /// Create or upgrade the database schema, then exit.
    Migrate(DatabaseArgs),
    /// Manage API keys: create, list, revoke. Running servers pick up changes within seconds.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Every webhook subscription, whoever made it: list, deliveries, remove.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// Check configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print the OpenAPI document this server implements (JSON, as emitted from code).
    Openapi,
    /// Webhooks' key file: the keys that seal signing secrets, outside the database.
    #[command(subcommand)]
    WebhookKey(WebhookKeyCommand),
}

#[derive(Subcommand)]
enum WebhookKeyCommand {
    /// Write a new key file (mode 0600; refused if the file exists). Give every instance the
    /// same file with --webhook-key-file.
    Create {
        /// The file to write.
        file: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file and print the effective configuration (with the
    /// environment's PETSTORE_* variables applied; secrets masked).
    Check {
        /// The TOML file.
        file: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    // Before the command line is read: the connection cap's default is
    // sized from the raised limit.
    let open_files = raise_open_file_limit();
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // The subcommand's own matches tell a flag from its environment variable.
    let (_, sub) = matches.subcommand().expect("clap requires a command");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(format!("cannot start the async runtime: {e}")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args.resolve(sub)?, open_files).await,
            Command::Migrate(args) => migrate(args.resolve(sub)?).await,
            Command::Keys(command) => {
                let (_, sub) = sub.subcommand().expect("clap requires a keys command");
                cli::keys::run(command, sub).await
            }
            Command::Webhooks(command) => {
                let (_, sub) = sub.subcommand().expect("clap requires a webhooks command");
                cli::webhooks::run(command, sub).await
            }
            Command::Config(ConfigCommand::Check { file }) => config_check(file),
            Command::Openapi => print_openapi(),
            Command::WebhookKey(WebhookKeyCommand::Create { file }) => create_webhook_key(&file),
        }
    });
    // Connections cut at the shutdown deadline still have tasks on the
    // runtime; they are dropped here rather than waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(petstore_api::error::chain(e.as_ref())),
    }
}

fn create_webhook_key(file: &std::path::Path) -> anyhow::Result<()> {
    SealingKeys::generate()
        .and_then(|keys| keys.write_new(file))
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    println!("{}", file.display());
    Ok(())
}

fn fail(message: String) -> ExitCode {
    eprintln!("petstore-server: error: {message}");
    ExitCode::FAILURE
}

async fn serve(settings: ServeSettings, open_files: OpenFiles) -> anyhow::Result<()> {
    // Taken first: SIGHUP's default action would end the process, and a
    // reload may come while a large catalogue is still loading.
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    // Taken before the server starts: a SIGTERM sent as soon as it says it
    // is serving would otherwise end it without a graceful stop.
    let stop = shutdown_signal()?;
    tokio::pin!(stop);
    let log = logging::logger(settings.log(), std::io::stderr());
    open_files.log(&log);
    let api_keys = ApiKeys::parse(&std::env::var("PETSTORE_API_KEYS").unwrap_or_default())?;
    let deadline = Duration::from_secs(settings.shutdown_timeout);
    let starting = petstore_server::start(
        ServerConfig {
            bind: settings.bind,
            database: settings.database.url(),
            api_keys,
            admin_bind: match settings.admin_bind {
                AdminBind::On(address) => Some(address),
                AdminBind::Off => None,
            },
            tls: settings.tls()?,
            idempotency_retention: settings.idempotency_retention,
            events_retention: settings.events_retention,
            webhooks: WebhookSettings {
                key_file: settings.webhook_key_file.clone(),
                allow_private_targets: settings.webhook_allow_private_targets == Switch::On,
                retry_delays: settings.webhook_retry_schedule.0.clone(),
                timeout: settings.webhook_timeout,
            },
            docs: settings.docs == Switch::On,
            rate_limits: settings.rate_limits(),
            edge: settings.edge.limits(),
        },
        log.clone(),
    );
    // A signal that comes meanwhile waits for the start to finish: what
    // the start spawned holds the logger, whose records are written only
    // once every holder is gone, which a graceful stop sees to.
    let server = starting.await?;
    let fatal = loop {
        tokio::select! {
            signal = &mut stop => {
                slog::info!(log, "shutting down"; "signal" => signal);
                break None;
            }
            reason = server.fatal_failure() => {
                slog::crit!(log, "shutting down after a fatal failure"; "reason" => &reason);
                break Some(reason);
            }
            _ = hangups.recv() => match server.reload_tls().await {
                Ok(true) => slog::info!(log, "SIGHUP: reloaded the TLS certificate and key"),
                Ok(false) => slog::info!(log, "SIGHUP: nothing to reload (no TLS)"),
                Err(e) => slog::error!(log, "SIGHUP: the TLS certificate was not reloaded; \
                    the one in use stays"; "error" => %e),
            },
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

/// The open-file limit before and after [`raise_open_file_limit`].
struct OpenFiles {
    before: u64,
    raised: std::io::Result<u64>,
}

impl OpenFiles {
    /// Logs both limits, or why the limit was not raised.
    fn log(self, log: &slog::Logger) {
        match self.raised {
            Ok(now) => {
                let hard =
                    rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(now, |(_, hard)| hard);
                slog::info!(log, "open-file limit"; "soft_before" => self.before,
                    "soft" => now, "hard" => hard);
            }
            Err(e) => slog::warn!(log, "cannot raise the open-file limit"; "error" => %e),
        }
    }
}

/// Raises the soft open-file limit to the hard limit: every connection
/// costs a descriptor, and the connection cap is sized from the limit.
/// Logged once there is a logger.
fn raise_open_file_limit() -> OpenFiles {
    OpenFiles {
        before: rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(0, |(soft, _)| soft),
        raised: rlimit::increase_nofile_limit(u64::MAX),
    }
}

/// Takes SIGINT and SIGTERM from now on; the future names the first that
/// comes.
fn shutdown_signal() -> anyhow::Result<impl Future<Output = &'static str>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        }
    })
}

async fn migrate(settings: DatabaseSettings) -> anyhow::Result<()> {
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let database: DatabaseUrl = settings.url();
    // Where it went, as the other operators' commands say (password redacted).
    eprintln!("database: {database}");
    let opened = storage::open(
        &database,
        &log,
        FatalSender::new(None),
        StorageMetrics::default(),
    )
    .await?;
    opened.pets.close().await;
    println!("the database is at the current schema version (created or migrated as needed)");
    Ok(())
}

fn config_check(file: std::path::PathBuf) -> anyhow::Result<()> {
    /// `serve`'s settings from the file and the environment alone.
    #[derive(Parser)]
    #[command(no_binary_name = true)]
    struct FileAndEnvironment {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let matches = FileAndEnvironment::command()
        .try_get_matches_from([std::ffi::OsString::from("--config"), file.into_os_string()])?;
    let args = FileAndEnvironment::from_arg_matches(&matches)?.serve;
    let settings = args.resolve(&matches)?;
    if let Some(tls) = settings.tls()? {
        tls.load()?;
    }
    print!("{}", settings.describe()?);
    eprintln!("the configuration is valid");
    Ok(())
}

fn print_openapi() -> anyhow::Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(&petstore_api::openapi_document())?
    );
    Ok(())
}
