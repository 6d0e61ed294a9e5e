//! Webhook subscriptions and their deliveries in the SQLite file, on a
//! connection of their own beside the writer (as the keys are, `keys.rs`).
//!
//! - **Immediate transactions, in turn with the writer.** A change takes
//!   the process's write gate (`gate.rs`), waiting for the writer's group
//!   to commit, and one of more than one statement then takes the write
//!   lock at its start (`BEGIN IMMEDIATE`), so it never fails half-way on
//!   a lock another process (a `keys` or `webhooks` command) holds: that
//!   one it waits for up to the busy timeout. The longest holds the file
//!   for a batch of outcomes, two short statements each.
//! - **Claims without `SKIP LOCKED`.** One process serves a file
//!   (`lock.rs`), and a claim reads and marks its deliveries in one
//!   immediate transaction, so no other claim runs meanwhile. Leases end
//!   and a finish counts only for the lease it was given, exactly as on
//!   PostgreSQL: the deliverer is the same on both.
//! - Times are microseconds since the Unix epoch, by the process's clock.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, Row, Transaction, TransactionBehavior, params};

use super::gate::WriteGate;
use super::lock::DatabaseLock;
use super::rows::micros_to_time;
use super::schema::{on_connection, open_for_command, sqlite};
use crate::storage::webhooks::held_until;
use crate::storage::webhooks::{
    ClaimRoom, ClaimedDelivery, DeliveryState, FinishedAttempt, NewDelivery, NewSubscription,
    SealedSecret, StoredDelivery, StoredSubscription, SubscriptionOwner, WebhookCounts,
    WebhookStorage, distinct, kinds_column, stored_delivery_state, stored_kind, stored_kinds,
    stored_owner, stored_state,
};
use crate::storage::{OpenError, StorageError};

/// The SQLite implementation of [`WebhookStorage`].
pub struct SqliteWebhooks {
    conn: Arc<Mutex<Connection>>,
    /// Taken around each write, in turn with the writer's.
    gate: WriteGate,
    /// Held by an operator's command when no server had the file.
    _lock: Option<DatabaseLock>,
}

impl SqliteWebhooks {
    /// Webhooks on an open connection of the serving process, writing in
    /// turn with the others that take `gate`.
    pub(super) fn on(conn: Connection, gate: WriteGate) -> SqliteWebhooks {
        SqliteWebhooks {
            conn: Arc::new(Mutex::new(conn)),
            gate,
            _lock: None,
        }
    }

    /// Opens the webhooks of the database at `path` for the `webhooks`
    /// commands, whether or not a server is serving it
    /// ([`open_for_command`]): SQLite's locks serialise the command's
    /// writes with the server's, as they do the `keys` commands'.
    pub async fn open(path: PathBuf) -> Result<SqliteWebhooks, OpenError> {
        let opened = tokio::task::spawn_blocking(move || open_for_command(&path)).await;
        let (conn, lock) = opened.map_err(|e| OpenError::Io {
            doing: "opening the database".into(),
            source: std::io::Error::other(e.to_string()),
        })??;
        Ok(SqliteWebhooks {
            conn: Arc::new(Mutex::new(conn)),
            gate: WriteGate::default(),
            _lock: lock,
        })
    }

    /// Runs `f`, which writes, on the connection, off the async workers,
    /// holding the write gate; its commits as durable as `commits` says.
    async fn with<T: Send + 'static>(
        &self,
        commits: Commits,
        f: impl FnOnce(&mut Connection) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        let gate = self.gate.clone();
        on_connection(&self.conn, move |conn| {
            // Cached: parsing the pragma anew cost a delivery more than
            // its own statements.
            conn.prepare_cached(commits.pragma())
                .and_then(|mut pragma| pragma.execute([]))
                .map_err(sqlite("setting how commits reach the disk"))?;
            let _held = gate.enter();
            f(conn)
        })
        .await
    }

    /// Runs `f`, which only reads, on the connection, off the async
    /// workers (a read does not wait for writers: WAL).
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        on_connection(&self.conn, f).await
    }
}

/// How durable a change's commit must be.
#[derive(Clone, Copy)]
enum Commits {
    /// On disk before the call returns (`synchronous=FULL`, as the writer's):
    /// what an API answer acknowledges (a subscription made, deleted,
    /// rotated; a replay).
    Durable,
    /// In the WAL, on disk at the next durable commit or checkpoint
    /// (`synchronous=NORMAL`): the deliverer's own bookkeeping, which a power
    /// cut may lose harmlessly (deliveries and their cursor are lost together
    /// and made again from the feed; a lost claim or outcome sends a delivery
    /// again, which at least once allows). It holds the file's one write
    /// lock for microseconds rather than an fsync, beside the writer's
    /// groups, which would otherwise wait behind every subscription's rounds.
    Relaxed,
}

impl Commits {
    fn pragma(self) -> &'static str {
        match self {
            Commits::Durable => "PRAGMA synchronous = FULL",
            Commits::Relaxed => "PRAGMA synchronous = NORMAL",
        }
    }
}

fn now() -> i64 {
    Utc::now().timestamp_micros()
}

fn micros(time: DateTime<Utc>) -> i64 {
    time.timestamp_micros()
}

fn immediate<'c>(
    conn: &'c mut Connection,
    doing: &'static str,
) -> Result<Transaction<'c>, StorageError> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite(doing))
}

fn owner_column(owner: &SubscriptionOwner) -> Option<&[u8]> {
    owner.as_ref().map(|owner| &owner.0[..])
}

/// "No earlier delivery of the same subscription and resource is open":
/// what keeps one resource's deliveries in event order (for the delivery
/// `d`).
macro_rules! none_open_before {
    () => {
        "NOT EXISTS (SELECT 1 FROM webhook_deliveries e
                     WHERE e.webhook_id = d.webhook_id AND e.resource = d.resource
                       AND e.event_id < d.event_id AND e.state IN ('pending', 'sending'))"
    };
}

/// A subscription's columns, as [`SubscriptionRow::read`] reads them, then
/// what stands for its open deliveries.
macro_rules! subscription_select {
    ($pending:literal) => {
        concat!(
            "SELECT w.id, w.url, w.kinds, w.sees_owner, w.creator, w.creator_name, w.state,
                    w.disabled_reason, w.created_at, w.fanned_out, w.secret, w.previous_secret,
                    w.previous_until, w.last_success_at, w.last_failure_at, ",
            $pending,
            " FROM webhooks w"
        )
    };
}

/// A subscription, its open deliveries counted (subscriptions are few).
const SUBSCRIPTION: &str = subscription_select!(
    "(SELECT count(*) FROM webhook_deliveries d
      WHERE d.webhook_id = w.id AND d.state IN ('pending', 'sending'))"
);

/// A subscription with 0 for its open deliveries, for the fan-out, which
/// reads every subscription every second and needs no count (PostgreSQL's
/// `ACTIVE` says what the count cost).
const SUBSCRIPTION_UNCOUNTED: &str = subscription_select!("0");

/// A subscription's row as stored, before it is decoded.
struct SubscriptionRow {
    id: i64,
    url: String,
    kinds: i64,
    sees_owner: Option<Vec<u8>>,
    creator: Vec<u8>,
    creator_name: String,
    state: String,
    reason: Option<String>,
    created_at: i64,
    fanned_out: i64,
    secret: Vec<u8>,
    previous_secret: Option<Vec<u8>>,
    previous_until: Option<i64>,
    last_success_at: Option<i64>,
    last_failure_at: Option<i64>,
    pending: i64,
}

impl SubscriptionRow {
    fn read(row: &Row) -> rusqlite::Result<SubscriptionRow> {
        Ok(SubscriptionRow {
            id: row.get(0)?,
            url: row.get(1)?,
            kinds: row.get(2)?,
            sees_owner: row.get(3)?,
            creator: row.get(4)?,
            creator_name: row.get(5)?,
            state: row.get(6)?,
            reason: row.get(7)?,
            created_at: row.get(8)?,
            fanned_out: row.get(9)?,
            secret: row.get(10)?,
            previous_secret: row.get(11)?,
            previous_until: row.get(12)?,
            last_success_at: row.get(13)?,
            last_failure_at: row.get(14)?,
            pending: row.get(15)?,
        })
    }

    fn decode(self) -> Result<StoredSubscription, StorageError> {
        let id = self.id;
        let sees_owner = self.sees_owner.as_deref();
        Ok(StoredSubscription {
            id,
            url: self.url,
            kinds: stored_kinds(id, self.kinds)?,
            sees_owner: sees_owner
                .map(|bytes| stored_owner(id, "sees_owner", bytes))
                .transpose()?,
            creator: stored_owner(id, "creator", &self.creator)?,
            creator_name: self.creator_name,
            state: stored_state(id, &self.state, self.reason.as_deref())?,
            created_at: micros_to_time(self.created_at),
            fanned_out: self.fanned_out,
            secret: SealedSecret(self.secret),
            previous_secret: self
                .previous_secret
                .zip(self.previous_until)
                .map(|(secret, until)| (SealedSecret(secret), micros_to_time(until))),
            pending: u64::try_from(self.pending).unwrap_or(0),
            last_success_at: self.last_success_at.map(micros_to_time),
            last_failure_at: self.last_failure_at.map(micros_to_time),
        })
    }
}

/// The subscriptions `select` (one of [`SUBSCRIPTION`] and
/// [`SUBSCRIPTION_UNCOUNTED`]) with `clause` reads.
fn subscriptions(
    conn: &Connection,
    select: &str,
    clause: &str,
    params: impl rusqlite::Params,
    doing: &'static str,
) -> Result<Vec<StoredSubscription>, StorageError> {
    let sql = sqlite(doing);
    let mut select = conn
        .prepare_cached(&format!("{select} {clause}"))
        .map_err(&sql)?;
    let rows = select
        .query_map(params, SubscriptionRow::read)
        .map_err(&sql)?;
    rows.map(|row| row.map_err(&sql)?.decode()).collect()
}

/// The subscription `id` (only `owner`'s when given).
fn subscription(
    conn: &Connection,
    id: i64,
    owner: &SubscriptionOwner,
    doing: &'static str,
) -> Result<Option<StoredSubscription>, StorageError> {
    let clause = "WHERE w.id = ?1 AND (?2 IS NULL OR w.creator = ?2)";
    let found = subscriptions(
        conn,
        SUBSCRIPTION,
        clause,
        params![id, owner_column(owner)],
        doing,
    )?;
    Ok(found.into_iter().next())
}

/// What a claim reads of a due delivery.
struct Due {
    webhook_id: i64,
    event_id: i64,
    attempts: i64,
    url: String,
    body: String,
    secret: Vec<u8>,
    previous: Option<Vec<u8>>,
    next_at: i64,
}

impl Due {
    /// A row of [`DUE`].
    fn read(row: &Row) -> rusqlite::Result<Due> {
        Ok(Due {
            webhook_id: row.get(0)?,
            event_id: row.get(1)?,
            attempts: row.get(2)?,
            url: row.get(3)?,
            body: row.get(4)?,
            secret: row.get(5)?,
            previous: row.get(6)?,
            next_at: row.get(7)?,
        })
    }
}

/// At most `?2` deliveries of subscription `?3` due at `?1` (see
/// [`WebhookStorage::claim`]), in the claim's order, read from
/// `webhook_deliveries_due_per_webhook`, with the previous secret while it
/// is valid.
const DUE: &str = concat!(
    "SELECT d.webhook_id, d.event_id, d.attempts, w.url, d.body, w.secret,
            CASE WHEN w.previous_until > ?1 THEN w.previous_secret END, d.next_at
     FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
     WHERE d.webhook_id = ?3 AND w.state = 'active' AND d.next_at <= ?1
       AND d.state IN ('pending', 'sending')
       AND (d.state = 'pending' OR (d.state = 'sending' AND d.lease_until < ?1))
       AND ",
    none_open_before!(),
    " ORDER BY d.next_at, d.event_id LIMIT ?2"
);

/// The deliveries due at `now` that `room` lets a claim take: each active
/// subscription's first (subscriptions are few), then the earliest due of
/// them all.
fn due(tx: &Transaction, now: i64, room: &ClaimRoom) -> rusqlite::Result<Vec<Due>> {
    let active: Vec<i64> = tx
        .prepare_cached("SELECT id FROM webhooks WHERE state = 'active'")?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut select = tx.prepare_cached(DUE)?;
    let mut due = Vec::new();
    for webhook in active {
        let limit = i64::try_from(room.of(webhook)).unwrap_or(i64::MAX);
        if limit == 0 {
            continue;
        }
        for row in select.query_map(params![now, limit, webhook], Due::read)? {
            due.push(row?);
        }
    }
    due.sort_by_key(|due| (due.next_at, due.event_id));
    due.truncate(room.total);
    Ok(due)
}

/// Marks `due` as sent by `instance` until `until`: its next attempt.
fn lease(
    tx: &Transaction,
    due: Due,
    instance: &str,
    until: i64,
) -> Result<ClaimedDelivery, StorageError> {
    let sql = sqlite("claiming webhook deliveries");
    let attempt = due.attempts + 1;
    tx.prepare_cached(
        "UPDATE webhook_deliveries
         SET state = 'sending', attempts = ?3, lease_owner = ?4, lease_until = ?5
         WHERE webhook_id = ?1 AND event_id = ?2",
    )
    .and_then(|mut update| {
        update.execute(params![
            due.webhook_id,
            due.event_id,
            attempt,
            instance,
            until
        ])
    })
    .map_err(&sql)?;
    let secrets = std::iter::once(due.secret).chain(due.previous);
    Ok(ClaimedDelivery {
        webhook_id: due.webhook_id,
        event_id: due.event_id,
        attempt: u32::try_from(attempt).map_err(|_| StorageError::BadWebhook {
            id: due.webhook_id,
            reason: format!("a delivery has made {} attempts", due.attempts),
        })?,
        url: due.url,
        body: due.body,
        secrets: secrets.map(SealedSecret).collect(),
    })
}

/// Records an attempt's outcome on its subscription: when it last
/// succeeded or failed (the latest, whatever order finishes come in), and
/// the reason it is disabled for, if the outcome disables it.
const AFTER_ATTEMPT: &str = "
    UPDATE webhooks SET
        last_success_at = CASE WHEN ?2 THEN max(coalesce(last_success_at, ?3), ?3)
                          ELSE last_success_at END,
        last_failure_at = CASE WHEN ?2 THEN last_failure_at
                          ELSE max(coalesce(last_failure_at, ?3), ?3) END,
        state = CASE WHEN ?4 IS NULL THEN state ELSE 'disabled' END,
        disabled_reason = coalesce(?4, disabled_reason)
    WHERE id = ?1";

/// Records `finished` if `instance` still holds its claim, and then on its
/// subscription; returns whether it did.
fn record_attempt(
    tx: &Transaction,
    instance: &str,
    finished: &FinishedAttempt,
) -> rusqlite::Result<bool> {
    let FinishedAttempt {
        webhook_id,
        event_id,
        attempt,
        ref outcome,
    } = *finished;
    let next = outcome.next;
    let state: &str = next.delivery_state().into();
    let ended = micros(outcome.ended);
    let recorded = tx
        .prepare_cached(
            "UPDATE webhook_deliveries
             SET state = ?5, next_at = coalesce(?6, next_at), lease_owner = NULL,
                 lease_until = NULL, last_status = ?7, last_error = ?8, last_at = ?9,
                 delivered_at = CASE WHEN ?5 = 'delivered' THEN ?10 END
             WHERE webhook_id = ?1 AND event_id = ?2 AND state = 'sending'
               AND lease_owner = ?3 AND attempts = ?4",
        )?
        .execute(params![
            webhook_id,
            event_id,
            instance,
            attempt,
            state,
            next.retry_at().map(micros),
            outcome.status,
            outcome.error,
            micros(outcome.at),
            ended
        ])?;
    if recorded == 0 {
        return Ok(false);
    }
    if let Some(retry_at) = next.retry_at() {
        // The later deliveries of its resource wait for it: as long. (By
        // the resource's index: SQLite chose the one by `next_at`, every
        // open delivery of the subscription due before the retry.)
        tx.prepare_cached(
            "UPDATE webhook_deliveries INDEXED BY webhook_deliveries_open SET next_at = ?3
             WHERE webhook_id = ?1
               AND resource = (SELECT resource FROM webhook_deliveries
                               WHERE webhook_id = ?1 AND event_id = ?2)
               AND event_id > ?2 AND state IN ('pending', 'sending')
               AND state = 'pending' AND next_at < ?3",
        )?
        .execute(params![webhook_id, event_id, micros(retry_at)])?;
    }
    let delivered = next.delivery_state() == DeliveryState::Delivered;
    let reason: Option<&str> = next.disables().map(Into::into);
    tx.prepare_cached(AFTER_ATTEMPT)?
        .execute(params![webhook_id, delivered, ended, reason])?;
    Ok(true)
}

fn delivery_from_row(webhook_id: i64, row: &Row) -> Result<StoredDelivery, StorageError> {
    let sql = sqlite("reading webhook deliveries");
    let get = |index| -> Result<Option<i64>, StorageError> { row.get(index).map_err(&sql) };
    let state: String = row.get(2).map_err(&sql)?;
    let state = stored_delivery_state(webhook_id, &state)?;
    let bad = |reason: String| StorageError::BadWebhook {
        id: webhook_id,
        reason,
    };
    let attempts: i64 = row.get(3).map_err(&sql)?;
    let last_status = get(4)?
        .map(|status| u16::try_from(status).map_err(|_| bad(format!("status {status}"))))
        .transpose()?;
    Ok(StoredDelivery {
        event_id: row.get(0).map_err(&sql)?,
        kind: stored_kind(webhook_id, row.get(1).map_err(&sql)?)?,
        state,
        attempts: u32::try_from(attempts).map_err(|_| bad(format!("{attempts} attempts")))?,
        last_status,
        last_error: row.get(5).map_err(&sql)?,
        last_attempt_at: get(6)?.map(micros_to_time),
        next_attempt_at: get(7)?
            .filter(|_| state == DeliveryState::Pending)
            .map(micros_to_time),
        delivered_at: get(8)?.map(micros_to_time),
    })
}

#[async_trait::async_trait]
impl WebhookStorage for SqliteWebhooks {
    async fn create_subscription(
        &self,
        new: NewSubscription,
    ) -> Result<StoredSubscription, StorageError> {
        self.with(Commits::Durable, move |conn| {
            let created_at = now();
            let id = conn
                .query_row(
                    "INSERT INTO webhooks (url, kinds, sees_owner, creator, creator_name, state,
                         secret, fanned_out, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?7, ?8)
                     RETURNING id",
                    params![
                        new.url,
                        kinds_column(new.kinds),
                        new.sees_owner.as_ref().map(|owner| &owner.0[..]),
                        &new.creator.0[..],
                        new.creator_name,
                        new.secret.0,
                        new.start_after,
                        created_at
                    ],
                    |row| row.get(0),
                )
                .map_err(sqlite("storing a webhook"))?;
            Ok(new.stored(id, micros_to_time(created_at)))
        })
        .await
    }

    async fn list_subscriptions(
        &self,
        owner: SubscriptionOwner,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StoredSubscription>, StorageError> {
        self.read(move |conn| {
            let clause =
                "WHERE w.id > ?1 AND (?2 IS NULL OR w.creator = ?2) ORDER BY w.id LIMIT ?3";
            let params = params![after.unwrap_or(i64::MIN), owner_column(&owner), limit];
            subscriptions(conn, SUBSCRIPTION, clause, params, "listing webhooks")
        })
        .await
    }

    async fn get_subscription(
        &self,
        id: i64,
        owner: SubscriptionOwner,
    ) -> Result<Option<StoredSubscription>, StorageError> {
        self.read(move |conn| subscription(conn, id, &owner, "reading a webhook"))
            .await
    }

    async fn delete_subscription(
        &self,
        id: i64,
        owner: SubscriptionOwner,
    ) -> Result<bool, StorageError> {
        self.with(Commits::Durable, move |conn| {
            let doing = "deleting a webhook";
            let sql = sqlite(doing);
            let owner = owner_column(&owner);
            let tx = immediate(conn, doing)?;
            // Its deliveries first: they refer to it.
            tx.execute(
                "DELETE FROM webhook_deliveries WHERE webhook_id IN (
                     SELECT id FROM webhooks WHERE id = ?1 AND (?2 IS NULL OR creator = ?2))",
                params![id, owner],
            )
            .map_err(&sql)?;
            let deleted = tx
                .execute(
                    "DELETE FROM webhooks WHERE id = ?1 AND (?2 IS NULL OR creator = ?2)",
                    params![id, owner],
                )
                .map_err(&sql)?;
            tx.commit().map_err(&sql)?;
            Ok(deleted == 1)
        })
        .await
    }

    async fn rotate_secret(
        &self,
        id: i64,
        owner: SubscriptionOwner,
        secret: SealedSecret,
        previous_until: DateTime<Utc>,
    ) -> Result<Option<StoredSubscription>, StorageError> {
        self.with(Commits::Durable, move |conn| {
            let doing = "rotating a webhook's secret";
            let sql = sqlite(doing);
            let tx = immediate(conn, doing)?;
            let rotated = tx
                .execute(
                    "UPDATE webhooks
                     SET previous_secret = secret, previous_until = ?3, secret = ?4
                     WHERE id = ?1 AND (?2 IS NULL OR creator = ?2)",
                    params![id, owner_column(&owner), micros(previous_until), secret.0],
                )
                .map_err(&sql)?;
            if rotated == 0 {
                return Ok(None);
            }
            let stored = subscription(&tx, id, &None, doing)?;
            tx.commit().map_err(&sql)?;
            Ok(stored)
        })
        .await
    }

    async fn active_subscriptions(&self) -> Result<Vec<StoredSubscription>, StorageError> {
        self.read(|conn| {
            let clause = "WHERE w.state = 'active' ORDER BY w.id";
            subscriptions(
                conn,
                SUBSCRIPTION_UNCOUNTED,
                clause,
                [],
                "reading the active webhooks",
            )
        })
        .await
    }

    async fn fan_out(
        &self,
        id: i64,
        from: i64,
        to: i64,
        deliveries: Vec<NewDelivery>,
    ) -> Result<bool, StorageError> {
        self.with(Commits::Relaxed, move |conn| {
            let doing = "storing webhook deliveries";
            let sql = sqlite(doing);
            let tx = immediate(conn, doing)?;
            let moved = tx
                .prepare_cached(
                    "UPDATE webhooks SET fanned_out = ?3
                     WHERE id = ?1 AND fanned_out = ?2 AND state = 'active'",
                )
                .and_then(|mut update| update.execute(params![id, from, to]))
                .map_err(&sql)?;
            if moved == 0 {
                return Ok(false);
            }
            // Due now, or, behind an open delivery of its resource, when
            // that one is (`held_until!`).
            let mut insert = tx
                .prepare_cached(concat!(
                    "INSERT INTO webhook_deliveries
                         (webhook_id, event_id, kind, resource, body, state, next_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'pending', max(?6, coalesce(",
                    held_until!("?1", "?4"),
                    ", ?6)))
                     ON CONFLICT DO NOTHING"
                ))
                .map_err(&sql)?;
            let now = now();
            for delivery in &deliveries {
                let NewDelivery {
                    event_id,
                    kind,
                    resource,
                    body,
                } = delivery;
                insert
                    .execute(params![id, event_id, kind.code(), resource, body, now])
                    .map_err(&sql)?;
            }
            drop(insert);
            tx.commit().map_err(&sql)?;
            Ok(true)
        })
        .await
    }

    async fn claim(
        &self,
        instance: &str,
        room: &ClaimRoom,
        lease_for: Duration,
    ) -> Result<Vec<ClaimedDelivery>, StorageError> {
        let (instance, room) = (instance.to_owned(), room.clone());
        self.with(Commits::Relaxed, move |conn| {
            let doing = "claiming webhook deliveries";
            let sql = sqlite(doing);
            let now = now();
            let until =
                now.saturating_add(i64::try_from(lease_for.as_micros()).unwrap_or(i64::MAX));
            let tx = immediate(conn, doing)?;
            let claimed = due(&tx, now, &room)
                .map_err(&sql)?
                .into_iter()
                .map(|due| lease(&tx, due, &instance, until))
                .collect::<Result<Vec<_>, _>>()?;
            tx.commit().map_err(&sql)?;
            Ok(claimed)
        })
        .await
    }

    async fn finish_all(
        &self,
        instance: &str,
        finished: &[FinishedAttempt],
    ) -> Result<Vec<bool>, StorageError> {
        let (instance, finished) = (instance.to_owned(), finished.to_vec());
        self.with(Commits::Relaxed, move |conn| {
            let doing = "recording webhook deliveries' attempts";
            let tx = immediate(conn, doing)?;
            let counted = finished
                .iter()
                .map(|attempt| record_attempt(&tx, &instance, attempt))
                .collect::<Result<_, _>>()
                .map_err(sqlite(doing))?;
            tx.commit().map_err(sqlite(doing))?;
            Ok(counted)
        })
        .await
    }

    async fn next_due(&self, excluding: &[i64]) -> Result<Option<DateTime<Utc>>, StorageError> {
        // Each active subscription's first pending delivery, in the
        // claim's order, that nothing holds back (`…_due_per_webhook`).
        // Leases are left out, as on PostgreSQL (see the trait).
        // (`state IN (…)` beside `state = 'pending'` is the partial index's
        // predicate, which SQLite uses only when the query names it.)
        const NEXT_DUE: &str = concat!(
            "SELECT min((SELECT d.next_at FROM webhook_deliveries d
                         WHERE d.webhook_id = w.id AND d.state IN ('pending', 'sending')
                           AND d.state = 'pending' AND ",
            none_open_before!(),
            "            ORDER BY d.next_at, d.event_id LIMIT 1))
             FROM webhooks w
             WHERE w.state = 'active' AND w.id NOT IN (SELECT value FROM json_each(?1))"
        );
        // A JSON array, which `json_each` reads.
        let ids: Vec<String> = excluding.iter().map(i64::to_string).collect();
        let excluding = format!("[{}]", ids.join(","));
        self.read(move |conn| {
            let next: Option<i64> = conn
                .query_row(NEXT_DUE, [excluding], |row| row.get(0))
                .map_err(sqlite("reading when a webhook delivery is next due"))?;
            Ok(next.map(micros_to_time))
        })
        .await
    }

    async fn list_deliveries(
        &self,
        id: i64,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StoredDelivery>, StorageError> {
        self.read(move |conn| {
            let sql = sqlite("reading webhook deliveries");
            let mut select = conn
                .prepare_cached(
                    "SELECT event_id, kind, state, attempts, last_status, last_error, last_at,
                         next_at, delivered_at
                     FROM webhook_deliveries
                     WHERE webhook_id = ?1 AND event_id < ?2
                     ORDER BY event_id DESC LIMIT ?3",
                )
                .map_err(&sql)?;
            let mut rows = select
                .query(params![id, before.unwrap_or(i64::MAX), limit])
                .map_err(&sql)?;
            let mut deliveries = Vec::new();
            while let Some(row) = rows.next().map_err(&sql)? {
                deliveries.push(delivery_from_row(id, row)?);
            }
            Ok(deliveries)
        })
        .await
    }

    async fn replay(&self, id: i64, deliveries: Vec<NewDelivery>) -> Result<u64, StorageError> {
        self.with(Commits::Durable, move |conn| {
            let doing = "replaying webhook deliveries";
            let sql = sqlite(doing);
            let tx = immediate(conn, doing)?;
            let enabled = tx
                .execute(
                    "UPDATE webhooks SET state = 'active', disabled_reason = NULL WHERE id = ?1",
                    [id],
                )
                .map_err(&sql)?;
            if enabled == 0 {
                return Ok(0);
            }
            let mut upsert = tx
                .prepare_cached(
                    "INSERT INTO webhook_deliveries
                         (webhook_id, event_id, kind, resource, body, state, next_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6)
                     ON CONFLICT (webhook_id, event_id) DO UPDATE SET
                         state = 'pending', attempts = 0, next_at = excluded.next_at,
                         lease_owner = NULL, lease_until = NULL, delivered_at = NULL",
                )
                .map_err(&sql)?;
            let now = now();
            let mut replayed = 0;
            for delivery in distinct(deliveries) {
                let NewDelivery {
                    event_id,
                    kind,
                    resource,
                    body,
                } = delivery;
                replayed += upsert
                    .execute(params![id, event_id, kind.code(), resource, body, now])
                    .map_err(&sql)?;
            }
            drop(upsert);
            tx.commit().map_err(&sql)?;
            Ok(replayed as u64)
        })
        .await
    }

    async fn counts(&self) -> Result<WebhookCounts, StorageError> {
        self.read(|conn| {
            let counts = conn.query_row(
                "SELECT (SELECT count(*) FROM webhooks WHERE state = 'active'),
                        (SELECT count(*) FROM webhooks WHERE state = 'disabled'),
                        (SELECT count(*) FROM webhook_deliveries
                         WHERE state IN ('pending', 'sending'))",
                [],
                |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                    ))
                },
            );
            let (active, disabled, open) = counts.map_err(sqlite("counting webhooks"))?;
            let count = |n: i64| u64::try_from(n).unwrap_or(0);
            Ok(WebhookCounts {
                active: count(active),
                disabled: count(disabled),
                open_deliveries: count(open),
            })
        })
        .await
    }

    async fn purge_deliveries(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<usize, StorageError> {
        self.with(Commits::Relaxed, move |conn| {
            conn.execute(
                "DELETE FROM webhook_deliveries WHERE rowid IN (
                     SELECT rowid FROM webhook_deliveries
                     WHERE state IN ('delivered', 'failed') AND last_at < ?1
                     LIMIT ?2)",
                params![micros(before), i64::try_from(limit).unwrap_or(i64::MAX)],
            )
            .map_err(sqlite("purging webhook deliveries"))
        })
        .await
    }
}
