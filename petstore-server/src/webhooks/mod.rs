//! Webhooks (since contract 1.7.0): events of the feed sent to
//! subscribers' URLs, signed as the Standard Webhooks spec says, after
//! commit and off the write path.
//!
//! - [`secrets`]: signing secrets, and the key file whose keys seal them
//!   at rest (the database holds ciphertexts only).
//! - [`sign`]: the `webhook-signature` header of a delivery.
//! - [`target`]: which URLs deliveries may go to (https, public addresses),
//!   checked where the connection is made, and the HTTP client they go
//!   through.
//! - [`schedule`]: when a failed delivery is tried again (the retry
//!   schedule, a receiver's `Retry-After`).
//! - [`fanout`]: the feed turned into deliveries, each event once per
//!   subscription whichever instance gets there first.
//! - [`deliverer`]: due deliveries claimed, sent, and their outcome kept.
//! - [`outage`]: what those two tasks log while the database is down.
//! - [`api`]: the operations' decisions (who sees which subscription, what
//!   a new one receives), for the handlers.
//!
//! What it stores is behind [`crate::storage::webhooks`].

pub mod api;
pub mod deliverer;
pub mod fanout;
pub mod schedule;
pub mod secrets;
pub mod sign;
pub mod target;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::keyring::Keyring;
use crate::metrics::Metrics;
use crate::storage::outage::Outage;
use crate::storage::webhooks::{StoredSubscription, WebhookStorage};
use crate::storage::{DatabaseUrl, Storage};
use schedule::RetrySchedule;
use secrets::SealingKeys;
use target::TargetPolicy;

/// How webhooks are delivered.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// The file of the keys that seal signing secrets; without it, SQLite
    /// uses (and makes) `FILE.webhook-key` beside the database, and
    /// PostgreSQL has no webhooks.
    pub key_file: Option<PathBuf>,
    /// Whether loopback and private addresses (and plain http) may be
    /// targeted.
    pub allow_private_targets: bool,
    /// The delays before each retry.
    pub retry_delays: Vec<Duration>,
    /// The bound of one request.
    pub timeout: Duration,
}

impl Default for WebhookSettings {
    fn default() -> WebhookSettings {
        WebhookSettings {
            key_file: None,
            allow_private_targets: false,
            retry_delays: RetrySchedule::default().waits().to_vec(),
            timeout: Duration::from_secs(15),
        }
    }
}

/// Why webhooks cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WebhooksError {
    /// The key file cannot be read or made (its error names it).
    #[error(transparent)]
    KeyFile(#[from] secrets::KeyFileError),
    /// The HTTP client cannot be built (no TLS roots, say).
    #[error("cannot build the webhooks' HTTP client: {0}")]
    Client(String),
    /// The key file does not open a signing secret stored: it is not the
    /// file the secrets were sealed with. (Its source says why, after.)
    #[error(
        "the webhook key file {path} does not open the signing secret of webhook subscription \
         {subscription}: the secrets stored were sealed with another key file, and every \
         instance needs the one that sealed them (the same --webhook-key-file)"
    )]
    SealedElsewhere {
        /// The key file.
        path: PathBuf,
        /// The subscription whose secret it does not open.
        subscription: i64,
        /// Why not.
        source: secrets::SecretError,
    },
    /// SQLite's default key file is missing, and the database holds
    /// subscriptions whose secrets were sealed with a key file.
    #[error(
        "the webhook key file {path} is missing, but the database holds webhook subscriptions \
         whose signing secrets were sealed with a key file: restore it beside the database, or \
         give the one that sealed them with --webhook-key-file (a new one would open none of \
         them; if it is lost for good, remove the subscriptions with `petstore-server webhooks \
         remove` and have their makers subscribe again)"
    )]
    KeyFileLost {
        /// Where it was.
        path: PathBuf,
    },
    /// The subscriptions could not be read to check them.
    #[error("cannot read the webhook subscriptions to check the key file: {0}")]
    Storage(String),
}

/// What the handlers use of webhooks.
pub struct Webhooks {
    /// Subscriptions and deliveries.
    pub store: Arc<dyn WebhookStorage>,
    /// Seals and opens secrets; `None` when webhooks are off (PostgreSQL
    /// without a key file).
    pub keys: Option<Arc<SealingKeys>>,
    /// Which targets are admitted.
    pub policy: TargetPolicy,
    /// Wakes the fan-out (a subscription made or replayed).
    pub changed: Arc<Notify>,
    /// Wakes the deliverer (deliveries made due).
    pub due: Arc<Notify>,
}

/// The running tasks of webhooks.
pub struct WebhookTasks(Vec<JoinHandle<()>>);

impl WebhookTasks {
    /// Stops them. A delivery in flight is dropped unrecorded: its lease
    /// runs out and it is sent again (at least once).
    pub fn abort(self) {
        for task in self.0 {
            task.abort();
        }
    }
}

/// The key file in use: the one configured, else (SQLite) the one beside
/// the database, made on first start.
fn key_file(settings: &WebhookSettings, database: &DatabaseUrl) -> Option<(PathBuf, bool)> {
    match (&settings.key_file, database) {
        (Some(path), _) => Some((path.clone(), false)),
        (None, DatabaseUrl::Sqlite(path)) => {
            let mut file = path.clone().into_os_string();
            file.push(".webhook-key");
            Some((PathBuf::from(file), true))
        }
        (None, DatabaseUrl::Postgres(_)) => None,
    }
}

/// The keys that seal signing secrets, as start-up finds them.
pub enum StartKeys {
    /// PostgreSQL without a key file: webhooks are off.
    Off,
    /// Read from the key file at `path`.
    Read {
        /// Its keys.
        keys: SealingKeys,
        /// The file.
        path: PathBuf,
    },
    /// SQLite's default file beside the database, not made yet.
    ToMake(PathBuf),
}

/// Reads the key file, and writes nothing: start-up calls it before it
/// opens the database, so that an unusable key file (missing, open to
/// others, malformed) refuses start before any database file is made.
pub fn read_keys(
    settings: &WebhookSettings,
    database: &DatabaseUrl,
) -> Result<StartKeys, WebhooksError> {
    let Some((path, made_if_missing)) = key_file(settings, database) else {
        return Ok(StartKeys::Off);
    };
    match SealingKeys::load(&path) {
        Err(secrets::KeyFileError::Read { source, .. })
            if made_if_missing && source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(StartKeys::ToMake(path))
        }
        loaded => Ok(StartKeys::Read {
            keys: loaded?,
            path,
        }),
    }
}

/// Checks that `keys` open the signing secrets stored, before this
/// instance delivers anything: one started with another key file (or
/// SQLite's default file lost and about to be made anew) could sign
/// nothing. The secrets of every active subscription are opened: its
/// current one, and the previous one while it still signs (AES-GCM-SIV:
/// microseconds each). They are read without their backlogs counted (a
/// large one after an outage is when a restart is likeliest).
pub async fn check_stored_secrets(
    keys: &StartKeys,
    store: &dyn WebhookStorage,
) -> Result<(), WebhooksError> {
    let subscriptions = store
        .active_subscriptions()
        .await
        .map_err(|e| WebhooksError::Storage(petstore_api::error::chain(&e)))?;
    match keys {
        StartKeys::Off => Ok(()),
        StartKeys::ToMake(_) if subscriptions.is_empty() => Ok(()),
        StartKeys::ToMake(path) => Err(WebhooksError::KeyFileLost { path: path.clone() }),
        StartKeys::Read { keys, path } => opens_every_secret(keys, path, &subscriptions),
    }
}

/// Whether `keys` (of the file at `path`) open each subscription's
/// current secret, and its previous one while it still signs.
fn opens_every_secret(
    keys: &SealingKeys,
    path: &Path,
    subscriptions: &[StoredSubscription],
) -> Result<(), WebhooksError> {
    let now = chrono::Utc::now();
    for subscription in subscriptions {
        let previous = subscription
            .previous_secret
            .iter()
            .filter(|(_, until)| *until > now)
            .map(|(sealed, _)| sealed);
        for sealed in std::iter::once(&subscription.secret).chain(previous) {
            keys.open(sealed)
                .map_err(|source| WebhooksError::SealedElsewhere {
                    path: path.to_owned(),
                    subscription: subscription.id,
                    source,
                })?;
        }
    }
    Ok(())
}

/// Starts fan-out and delivery with `keys` (making SQLite's default key
/// file if it is still missing); with no key file on PostgreSQL, webhooks
/// are off (logged): this instance neither fans out nor delivers, and
/// creating or rotating a secret answers 503.
pub fn start(
    settings: &WebhookSettings,
    keys: StartKeys,
    storage: Arc<dyn Storage>,
    store: Arc<dyn WebhookStorage>,
    keyring: Arc<Keyring>,
    metrics: Arc<Metrics>,
    log: &slog::Logger,
) -> Result<(Arc<Webhooks>, WebhookTasks), WebhooksError> {
    let policy = TargetPolicy {
        allow_private: settings.allow_private_targets,
    };
    let keys = match keys {
        StartKeys::Off => {
            slog::warn!(
                log,
                "webhooks are off: on PostgreSQL they need --webhook-key-file \
                (the same file on every instance); this instance neither fans out nor delivers, \
                and creating a subscription or rotating a secret answers 503"
            );
            None
        }
        StartKeys::Read { keys, .. } => Some(Arc::new(keys)),
        // Another process may make it meanwhile: load_or_create then reads it.
        StartKeys::ToMake(path) => Some(Arc::new(SealingKeys::load_or_create(&path)?)),
    };
    let webhooks = Arc::new(Webhooks {
        store: Arc::clone(&store),
        keys: keys.clone(),
        policy,
        changed: Arc::new(Notify::new()),
        due: Arc::new(Notify::new()),
    });
    let Some(keys) = keys else {
        return Ok((webhooks, WebhookTasks(Vec::new())));
    };
    let client = target::delivery_client(policy, settings.timeout)
        .map_err(|e| WebhooksError::Client(petstore_api::error::chain(&e)))?;
    let log = log.new(slog::o!("task" => "webhooks"));
    let fan_out = tokio::spawn(fanout::run(
        storage,
        Arc::clone(&store),
        keyring,
        Arc::clone(&webhooks.changed),
        Arc::clone(&webhooks.due),
        log.clone(),
    ));
    let deliverer = deliverer::Deliverer {
        instance: uuid::Uuid::new_v4().to_string(),
        hooks: store,
        keys,
        client,
        policy,
        schedule: RetrySchedule::new(settings.retry_delays.clone()).unwrap_or_default(),
        timeout: settings.timeout,
        due: Arc::clone(&webhooks.due),
        metrics,
        outage: Outage::new("webhook deliveries", log.clone()),
        log,
    };
    let delivering = tokio::spawn(deliverer.run());
    Ok((webhooks, WebhookTasks(vec![fan_out, delivering])))
}
