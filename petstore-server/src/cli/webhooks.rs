//! `petstore-server webhooks list|deliveries|remove`: every webhook
//! subscription in the database, whoever made it, for operators. Through
//! the API a subscription is its maker's key's alone, so these are the only
//! way to see or remove one whose key was revoked or is held by someone
//! else.

use std::collections::HashMap;

use anyhow::bail;
use chrono::{DateTime, SecondsFormat, Utc};
use petstore_api::model::EventType;
use petstore_server::storage::{self, LIST_MAX, StoredSubscription, SubscriptionState};
use petstore_server::webhooks::api::subscribed_types;

use super::settings::DatabaseArgs;

/// What to do with webhook subscriptions.
#[derive(clap::Subcommand, Debug)]
pub enum WebhooksCommand {
    /// List every subscription: id, state, pending deliveries, last success and failure, the
    /// key that made it and that key's state, its types and URL (never a secret).
    List {
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// A subscription's deliveries, newest event first: state, attempts, the last attempt's
    /// answer or error, the next attempt, delivery.
    Deliveries {
        /// The subscription's id (as `list` shows it).
        id: i64,
        /// How many, at most.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
        /// Only the deliveries of events older than this one: to read on, the last EVENT shown.
        #[arg(long, value_name = "EVENT")]
        before: Option<i64>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Remove a subscription and its deliveries, whoever made it; running servers send it
    /// nothing more.
    Remove {
        /// The subscription's id (as `list` shows it).
        id: i64,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Runs a `webhooks` command.
pub async fn run(command: WebhooksCommand, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    match command {
        WebhooksCommand::List { database } => list(database, matches).await,
        WebhooksCommand::Deliveries {
            id,
            limit,
            before,
            database,
        } => deliveries(id, limit, before, database, matches).await,
        WebhooksCommand::Remove { id, database } => remove(id, database, matches).await,
    }
}

async fn list(database: DatabaseArgs, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let url = database.resolve(matches)?.url();
    // One after the other: with no server, the first takes the file's lock
    // and migrates it, and the second opens it beside the first.
    let hooks = storage::open_webhooks(&url).await?;
    let keys = storage::open_keys(&url).await?;
    eprintln!("database: {url}");
    let key_states: HashMap<[u8; 32], &'static str> = keys
        .list_keys()
        .await?
        .iter()
        .map(|key| (key.digest.0, super::keys::state(key)))
        .collect();
    let mut subscriptions = Vec::new();
    let mut after = None;
    loop {
        let page = hooks.list_subscriptions(None, after, LIST_MAX).await?;
        after = page.last().map(|last| last.id);
        let full = page.len() == LIST_MAX as usize;
        subscriptions.extend(page);
        if !full {
            break;
        }
    }
    let rows: Vec<[String; 9]> = subscriptions
        .iter()
        .map(|subscription| {
            // Keys given in PETSTORE_API_KEYS are not stored.
            let key = key_states.get(&subscription.creator.0).copied();
            row(subscription, key.unwrap_or("not stored"))
        })
        .collect();
    let header = [
        "ID",
        "STATE",
        "PENDING",
        "LAST SUCCESS",
        "LAST FAILURE",
        "MADE BY",
        "KEY",
        "TYPES",
        "URL",
    ]
    .map(String::from);
    super::print_table(&header, &rows);
    if rows.is_empty() {
        eprintln!("no webhook subscriptions");
    }
    Ok(())
}

/// A subscription's line of `list`, its maker's key in `key_state`.
fn row(subscription: &StoredSubscription, key_state: &str) -> [String; 9] {
    let state = match subscription.state {
        SubscriptionState::Active => "active".to_owned(),
        SubscriptionState::Disabled(reason) => {
            format!("disabled ({})", <&str>::from(reason))
        }
    };
    let optional = |at: Option<DateTime<Utc>>| at.map_or_else(|| "-".to_owned(), time);
    let types: Vec<&str> = subscribed_types(subscription.kinds)
        .into_iter()
        .map(EventType::as_str)
        .collect();
    [
        subscription.id.to_string(),
        state,
        subscription.pending.to_string(),
        optional(subscription.last_success_at),
        optional(subscription.last_failure_at),
        subscription.creator_name.clone(),
        key_state.to_owned(),
        types.join(","),
        // Last: the widest.
        subscription.url.clone(),
    ]
}

async fn deliveries(
    id: i64,
    limit: u32,
    before: Option<i64>,
    database: DatabaseArgs,
    matches: &clap::ArgMatches,
) -> anyhow::Result<()> {
    let url = database.resolve(matches)?.url();
    let hooks = storage::open_webhooks(&url).await?;
    eprintln!("database: {url}");
    if hooks.get_subscription(id, None).await?.is_none() {
        bail!(no_such(id));
    }
    let optional = |at: Option<DateTime<Utc>>| at.map_or_else(|| "-".to_owned(), time);
    let listed = hooks.list_deliveries(id, before, limit).await?;
    let oldest = listed.last().map(|delivery| delivery.event_id);
    let rows: Vec<[String; 9]> = listed
        .into_iter()
        .map(|delivery| {
            [
                delivery.event_id.to_string(),
                delivery.kind.event_type().as_str().to_owned(),
                <&str>::from(delivery.state).to_owned(),
                delivery.attempts_made().to_string(),
                delivery
                    .last_status
                    .map_or_else(|| "-".to_owned(), |status| status.to_string()),
                optional(delivery.last_attempt_at),
                optional(delivery.next_attempt_at),
                optional(delivery.delivered_at),
                // Last: the widest.
                delivery.last_error.unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    let header = [
        "EVENT",
        "TYPE",
        "STATE",
        "ATTEMPTS",
        "STATUS",
        "LAST ATTEMPT",
        "NEXT ATTEMPT",
        "DELIVERED",
        "LAST ERROR",
    ]
    .map(String::from);
    super::print_table(&header, &rows);
    match (oldest, before) {
        // A full page: there may be older ones.
        (Some(oldest), _) if rows.len() == limit as usize => {
            eprintln!("older deliveries, if any: add --before {oldest}");
        }
        (Some(_), _) => {}
        (None, None) => eprintln!("no deliveries yet"),
        (None, Some(before)) => eprintln!("no deliveries of events before {before}"),
    }
    Ok(())
}

/// What `deliveries` and `remove` say of an id that is not a subscription's.
fn no_such(id: i64) -> String {
    format!("no webhook subscription has id {id} (see `petstore-server webhooks list`)")
}

async fn remove(id: i64, database: DatabaseArgs, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let url = database.resolve(matches)?.url();
    let hooks = storage::open_webhooks(&url).await?;
    eprintln!("database: {url}");
    if !hooks.delete_subscription(id, None).await? {
        bail!(no_such(id));
    }
    eprintln!("removed webhook subscription {id} and its deliveries");
    Ok(())
}

/// A time as RFC 3339 UTC, to the second.
fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}
