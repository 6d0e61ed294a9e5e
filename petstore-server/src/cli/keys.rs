//! `petstore-server keys create|list|scopes|limits|revoke`: API keys in the
//! database, for running servers to pick up within seconds (see
//! `keyring.rs`).

use std::time::{Duration, UNIX_EPOCH};

use std::num::NonZeroU32;
use std::str::FromStr;

use anyhow::{Context, bail};
use petstore_api::scopes::Scopes;
use petstore_server::budget::{KeyLimits, LimitsChange, Rate};
use petstore_server::keyring::{REFRESH_INTERVAL, unix_now};
use petstore_server::keys::{KeyDigest, generate};
use petstore_server::storage::{self, Revoked, StoredKey};

use super::settings::DatabaseArgs;

/// What to do with keys.
#[derive(clap::Subcommand, Debug)]
pub enum KeysCommand {
    /// Create a key and print it, once: only its hash is stored.
    Create {
        /// A unique name for the key (letters, digits, . _ -; at most 64), e.g. ci-2026-11.
        #[arg(long, value_parser = parse_name)]
        name: String,
        /// Expire the key after this long, e.g. 90d, 12h, 1y 6months; never by default.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        expires_in: Option<Duration>,
        /// What the key may do: comma-separated scopes among pets:read, pets:write,
        /// orders:place (a customer: its own orders), orders:manage (staff: every
        /// order), inventory:read, events:read (the feed of events), webhooks:manage
        /// (webhook subscriptions); or all. Default: all, every scope, as keys made
        /// before scopes existed; give a customer or a shop-front only what it needs.
        #[arg(
            long,
            value_name = "SCOPES",
            default_value = "all",
            verbatim_doc_comment
        )]
        scopes: Scopes,
        #[command(flatten)]
        budget: BudgetArgs,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List the keys: names, state, creation, expiry, last use, revocation, budget and scopes
    /// (never keys or hashes).
    List {
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Change what a key may do; running servers apply it within seconds.
    Scopes {
        /// The key's name.
        name: String,
        /// Its new scopes, comma-separated (as for `create --scopes`), or all.
        scopes: Scopes,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Change a key's budget (what is not given is kept; `default` returns a setting to
    /// the server's --key-* default); running servers apply it within seconds.
    Limits {
        /// The key's name.
        name: String,
        #[command(flatten)]
        budget: BudgetArgs,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Revoke a key by name; running servers refuse it within seconds.
    Revoke {
        /// The key's name.
        name: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// A key's own budget (with `--rate-limits on`); each unset is the
/// server's default.
#[derive(clap::Args, Debug)]
pub struct BudgetArgs {
    /// The key's sustained rate, e.g. 50/s, 600/min, 10/h; or default (--key-rate).
    #[arg(long, value_name = "RATE", value_parser = parse_setting::<Rate>)]
    rate: Option<Setting<Rate>>,
    /// How many requests it may send at once above its rate; or default (--key-burst).
    #[arg(long, value_name = "N", value_parser = parse_setting::<NonZeroU32>)]
    burst: Option<Setting<NonZeroU32>>,
    /// How many of its requests may be in progress at once; or default (--key-in-flight).
    #[arg(long, value_name = "N", value_parser = parse_setting::<NonZeroU32>)]
    in_flight: Option<Setting<NonZeroU32>>,
}

impl BudgetArgs {
    fn change(&self) -> LimitsChange {
        LimitsChange {
            rate: self.rate.map(|setting| setting.0),
            burst: self.burst.map(|setting| setting.0),
            in_flight: self.in_flight.map(|setting| setting.0),
        }
    }
}

/// A budget setting's value, `None` for `default`. (A flag's type of
/// `Option<Option<T>>` would mean to clap a flag whose value may be left out.)
#[derive(Clone, Copy, Debug)]
struct Setting<T>(Option<T>);

/// A budget setting, or `default`.
fn parse_setting<T: FromStr>(text: &str) -> Result<Setting<T>, String>
where
    T::Err: std::fmt::Display,
{
    if text == "default" {
        return Ok(Setting(None));
    }
    text.parse()
        .map(|value| Setting(Some(value)))
        .map_err(|e| format!("{e} (or default)"))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|e| format!("{e}; expected a duration such as 90d, 12h, 30min or 1y 6months"))?;
    if duration < Duration::from_secs(1) {
        return Err("a key must live at least one second".into());
    }
    Ok(duration)
}

/// A new key's name, refused by the command line (exit status 2) before
/// any database is opened.
fn parse_name(name: &str) -> Result<String, String> {
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    match valid {
        true => Ok(name.to_owned()),
        false => Err("use 1 to 64 letters, digits, dots, underscores or hyphens".into()),
    }
}

/// Runs a `keys` command.
pub async fn run(command: KeysCommand, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create {
            name,
            expires_in,
            scopes,
            budget,
            database,
        } => {
            let limits = KeyLimits::default().changed(budget.change());
            create(name, expires_in, scopes, limits, database, matches).await
        }
        KeysCommand::List { database } => list(database, matches).await,
        KeysCommand::Scopes {
            name,
            scopes,
            database,
        } => set_scopes(name, scopes, database, matches).await,
        KeysCommand::Limits {
            name,
            budget,
            database,
        } => set_limits(name, budget.change(), database, matches).await,
        KeysCommand::Revoke { name, database } => revoke(name, database, matches).await,
    }
}

/// The key storage of the database the settings name, which is said on
/// stderr (password masked), so that a key never lands unnoticed in the
/// wrong database.
async fn open(
    database: DatabaseArgs,
    matches: &clap::ArgMatches,
) -> anyhow::Result<std::sync::Arc<dyn storage::KeyStorage>> {
    let url = database.resolve(matches)?.url();
    let keys = storage::open_keys(&url).await?;
    eprintln!("database: {url}");
    Ok(keys)
}

async fn create(
    name: String,
    expires_in: Option<Duration>,
    scopes: Scopes,
    limits: KeyLimits,
    database: DatabaseArgs,
    matches: &clap::ArgMatches,
) -> anyhow::Result<()> {
    let keys = open(database, matches).await?;
    // Counted from when the key is stored, not from when the command began.
    let now = unix_now();
    let expires_at = match expires_in {
        None => None,
        Some(duration) => Some(
            i64::try_from(duration.as_secs())
                .ok()
                .and_then(|secs| now.checked_add(secs))
                .filter(|at| *at < 253_402_300_800) // the year 10000
                .context("the expiry is too far in the future")?,
        ),
    };
    let key = generate().context("cannot get random bytes from the operating system")?;
    keys.create_key(StoredKey {
        name: name.clone(),
        digest: KeyDigest::of(&key),
        created_at: now,
        expires_at,
        scopes,
        limits,
        last_used_at: None,
        revoked_at: None,
    })
    .await?;
    // The key on stdout alone, for scripts; the rest on stderr.
    println!("{key}");
    eprintln!(
        "created key {name:?} with scopes {scopes}, {limits}{}; this is the only time it is \
         shown: store it now. Running servers accept it within {} s.",
        expires_at.map_or(String::new(), |at| format!(", expiring {}", time(at))),
        REFRESH_INTERVAL.as_secs() + 1,
    );
    Ok(())
}

async fn list(database: DatabaseArgs, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let keys = open(database, matches).await?.list_keys().await?;
    let optional = |at: Option<i64>| at.map_or_else(|| "-".to_owned(), time);
    let own = |value: Option<String>| value.unwrap_or_else(|| "default".to_owned());
    let rows: Vec<[String; 10]> = keys
        .iter()
        .map(|key| {
            [
                key.name.clone(),
                state(key).to_owned(),
                time(key.created_at),
                optional(key.expires_at),
                optional(key.last_used_at),
                optional(key.revoked_at),
                own(key.limits.rate.map(|rate| rate.to_string())),
                own(key.limits.burst.map(|burst| burst.to_string())),
                own(key.limits.in_flight.map(|cap| cap.to_string())),
                // Last: the widest, and what scripts have read as the last.
                key.scopes.to_string(),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "STATE",
        "CREATED",
        "EXPIRES",
        "LAST USED",
        "REVOKED",
        "RATE",
        "BURST",
        "IN-FLIGHT",
        "SCOPES",
    ]
    .map(String::from);
    super::print_table(&header, &rows);
    if rows.is_empty() {
        eprintln!("no stored keys; create one with `petstore-server keys create --name NAME`");
    }
    Ok(())
}

async fn set_scopes(
    name: String,
    scopes: Scopes,
    database: DatabaseArgs,
    matches: &clap::ArgMatches,
) -> anyhow::Result<()> {
    let keys = open(database, matches).await?;
    let before = keys.set_key_scopes(&name, scopes).await?;
    eprintln!(
        "key {name:?} now has scopes {scopes} (before: {before}); running servers apply it \
         within {} s",
        REFRESH_INTERVAL.as_secs() + 1
    );
    Ok(())
}

async fn set_limits(
    name: String,
    change: LimitsChange,
    database: DatabaseArgs,
    matches: &clap::ArgMatches,
) -> anyhow::Result<()> {
    if change == LimitsChange::default() {
        bail!("nothing to change: give --rate, --burst or --in-flight (a value, or default)");
    }
    let keys = open(database, matches).await?;
    let (before, after) = keys.set_key_limits(&name, change).await?;
    eprintln!(
        "key {name:?} now has {after} (before: {before}); running servers apply it within {} s",
        REFRESH_INTERVAL.as_secs() + 1
    );
    Ok(())
}

async fn revoke(
    name: String,
    database: DatabaseArgs,
    matches: &clap::ArgMatches,
) -> anyhow::Result<()> {
    let keys = open(database, matches).await?;
    match keys.revoke_key(&name, unix_now()).await? {
        Revoked::Now => eprintln!(
            "revoked key {name:?}; running servers refuse it within {} s",
            REFRESH_INTERVAL.as_secs() + 1
        ),
        Revoked::Already(at) => eprintln!("key {name:?} was already revoked at {}", time(at)),
    }
    Ok(())
}

/// A stored key's state: `active`, `expired` or `revoked`.
pub(super) fn state(key: &StoredKey) -> &'static str {
    match (key.revoked_at, key.expires_at) {
        (Some(_), _) => "revoked",
        (None, Some(at)) if at <= unix_now() => "expired",
        _ => "active",
    }
}

/// A Unix time as RFC 3339 UTC, to the second.
fn time(at: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_secs(at.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}
