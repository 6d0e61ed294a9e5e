//! Webhook subscriptions and their deliveries on PostgreSQL, for many
//! instances at once (the statements: `webhook_statements.rs`).
//!
//! - **Pools of their own.** The webhook operations, and apart from them
//!   the deliverer's fan-out, claims, finishes and purges, run on a few
//!   pooled connections each (`WEBHOOK_CONNECTIONS`), apart from the
//!   requests', so that a burst of deliveries never holds up creates, nor
//!   the other way round. The deliverer's commits do not wait for the disk
//!   (`without_waiting_for_the_disk`): losing one in a crash only sends
//!   again.
//! - **Each change one statement where it can be.** A fan-out (cursor and
//!   deliveries), a claim, a finish (delivery and subscription): one
//!   statement each, so one transaction and one round trip.
//! - **Locks in one order.** Whatever changes both locks deliveries before
//!   their subscription, the deliveries in key order (a batch of finishes,
//!   a replay, a delete), so that none deadlocks with another; a fan-out
//!   locks only its subscription (its deliveries are new rows), and a
//!   claim skips what is locked.
//! - Times are the database's clock (`now()`), the same for every
//!   instance, except what the deliverer measured (an attempt's time, when
//!   to retry).

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::shared::STATEMENT_TIMEOUT;
use super::webhook_statements as statements;
use super::{Lent, PostgresStorage, postgres};
use crate::storage::StorageError;
use crate::storage::webhooks::{
    ClaimRoom, ClaimedDelivery, DeliveryState, FinishedAttempt, NewDelivery, NewSubscription,
    SealedSecret, StoredDelivery, StoredSubscription, SubscriptionOwner, WebhookCounts,
    WebhookStorage, distinct, kinds_column, stored_delivery_state, stored_kind, stored_kinds,
    stored_owner, stored_state,
};

/// The most pooled connections webhooks use per instance: each claim,
/// finish or read is one short statement (or two), so a couple keep up
/// with the deliverer and the operations; more would only add sessions on
/// every instance.
pub(super) const WEBHOOK_CONNECTIONS: usize = 2;

fn owner_column(owner: &SubscriptionOwner) -> Option<&[u8]> {
    owner.as_ref().map(|owner| &owner.0[..])
}

fn subscription_from_row(row: &Row) -> Result<StoredSubscription, StorageError> {
    let decode = postgres("decoding a webhook");
    let id: i64 = row.try_get(0).map_err(&decode)?;
    let sees_owner: Option<&[u8]> = row.try_get(3).map_err(&decode)?;
    let previous_secret: Option<Vec<u8>> = row.try_get(11).map_err(&decode)?;
    let previous_until: Option<DateTime<Utc>> = row.try_get(12).map_err(&decode)?;
    let pending: i64 = row.try_get(15).map_err(&decode)?;
    Ok(StoredSubscription {
        id,
        url: row.try_get(1).map_err(&decode)?,
        kinds: stored_kinds(id, row.try_get::<_, i16>(2).map_err(&decode)?.into())?,
        sees_owner: sees_owner
            .map(|bytes| stored_owner(id, "sees_owner", bytes))
            .transpose()?,
        creator: stored_owner(id, "creator", row.try_get(4).map_err(&decode)?)?,
        creator_name: row.try_get(5).map_err(&decode)?,
        state: stored_state(
            id,
            row.try_get(6).map_err(&decode)?,
            row.try_get(7).map_err(&decode)?,
        )?,
        created_at: row.try_get(8).map_err(&decode)?,
        fanned_out: row.try_get(9).map_err(&decode)?,
        secret: SealedSecret(row.try_get(10).map_err(&decode)?),
        previous_secret: previous_secret
            .zip(previous_until)
            .map(|(secret, until)| (SealedSecret(secret), until)),
        pending: u64::try_from(pending).unwrap_or(0),
        last_success_at: row.try_get(13).map_err(&decode)?,
        last_failure_at: row.try_get(14).map_err(&decode)?,
    })
}

fn delivery_from_row(webhook_id: i64, row: &Row) -> Result<StoredDelivery, StorageError> {
    let decode = postgres("decoding a webhook delivery");
    let bad = |reason: String| StorageError::BadWebhook {
        id: webhook_id,
        reason,
    };
    let state = stored_delivery_state(webhook_id, row.try_get(2).map_err(&decode)?)?;
    let attempts: i32 = row.try_get(3).map_err(&decode)?;
    let last_status: Option<i32> = row.try_get(4).map_err(&decode)?;
    let next_at: DateTime<Utc> = row.try_get(7).map_err(&decode)?;
    Ok(StoredDelivery {
        event_id: row.try_get(0).map_err(&decode)?,
        kind: stored_kind(
            webhook_id,
            row.try_get::<_, i16>(1).map_err(&decode)?.into(),
        )?,
        state,
        attempts: u32::try_from(attempts).map_err(|_| bad(format!("{attempts} attempts")))?,
        last_status: last_status
            .map(|status| u16::try_from(status).map_err(|_| bad(format!("status {status}"))))
            .transpose()?,
        last_error: row.try_get(5).map_err(&decode)?,
        last_attempt_at: row.try_get(6).map_err(&decode)?,
        next_attempt_at: (state == DeliveryState::Pending).then_some(next_at),
        delivered_at: row.try_get(8).map_err(&decode)?,
    })
}

fn claimed_from_row(row: &Row) -> Result<ClaimedDelivery, StorageError> {
    let decode = postgres("decoding a claimed webhook delivery");
    let webhook_id: i64 = row.try_get(0).map_err(&decode)?;
    let attempt: i32 = row.try_get(2).map_err(&decode)?;
    let secret: Vec<u8> = row.try_get(5).map_err(&decode)?;
    let previous: Option<Vec<u8>> = row.try_get(6).map_err(&decode)?;
    Ok(ClaimedDelivery {
        webhook_id,
        event_id: row.try_get(1).map_err(&decode)?,
        attempt: u32::try_from(attempt).map_err(|_| StorageError::BadWebhook {
            id: webhook_id,
            reason: format!("a delivery's attempt {attempt}"),
        })?,
        url: row.try_get(3).map_err(&decode)?,
        body: row.try_get(4).map_err(&decode)?,
        secrets: std::iter::once(secret)
            .chain(previous)
            .map(SealedSecret)
            .collect(),
    })
}

/// Deliveries as the columns `unnest` takes: event ids, kinds, resources,
/// bodies.
type DeliveryColumns = (Vec<i64>, Vec<i16>, Vec<i64>, Vec<String>);

fn delivery_columns(deliveries: Vec<NewDelivery>) -> DeliveryColumns {
    let mut columns = DeliveryColumns::default();
    for delivery in deliveries {
        columns.0.push(delivery.event_id);
        columns.1.push(delivery.kind.code());
        columns.2.push(delivery.resource);
        columns.3.push(delivery.body);
    }
    columns
}

/// The subscriptions `statement` selects.
async fn subscriptions(
    client: &impl GenericClient,
    statement: &str,
    params: &[&(dyn ToSql + Sync)],
    doing: &'static str,
) -> Result<Vec<StoredSubscription>, StorageError> {
    let sql = postgres(doing);
    let statement = client.prepare_cached(statement).await.map_err(&sql)?;
    let rows = client.query(&statement, params).await.map_err(&sql)?;
    rows.iter().map(subscription_from_row).collect()
}

/// How many rows `statement` changed.
async fn execute(
    client: &impl GenericClient,
    statement: &str,
    params: &[&(dyn ToSql + Sync)],
    doing: &'static str,
) -> Result<u64, StorageError> {
    let sql = postgres(doing);
    let statement = client.prepare_cached(statement).await.map_err(&sql)?;
    client.execute(&statement, params).await.map_err(&sql)
}

async fn create(client: &Client, new: NewSubscription) -> Result<StoredSubscription, StorageError> {
    let sql = postgres("storing a webhook");
    let statement = client
        .prepare_cached(statements::CREATE)
        .await
        .map_err(&sql)?;
    let sees_owner = new.sees_owner.as_ref().map(|owner| &owner.0[..]);
    let row = client
        .query_one(
            &statement,
            &[
                &new.url,
                &kinds_column(new.kinds),
                &sees_owner,
                &&new.creator.0[..],
                &new.creator_name,
                &new.secret.0,
                &new.start_after,
            ],
        )
        .await
        .map_err(&sql)?;
    let id = row.try_get(0).map_err(&sql)?;
    let created_at = row.try_get(1).map_err(&sql)?;
    Ok(new.stored(id, created_at))
}

async fn delete(
    client: &mut Client,
    id: i64,
    owner: SubscriptionOwner,
) -> Result<bool, StorageError> {
    let doing = "deleting a webhook";
    let sql = postgres(doing);
    let owner = owner_column(&owner);
    let tx = client.transaction().await.map_err(&sql)?;
    execute(&tx, statements::DELETE_DELIVERIES, &[&id, &owner], doing).await?;
    let deleted = execute(&tx, statements::DELETE, &[&id, &owner], doing).await?;
    tx.commit().await.map_err(&sql)?;
    Ok(deleted == 1)
}

async fn fan_out(
    client: &Client,
    id: i64,
    [from, to]: [i64; 2],
    deliveries: Vec<NewDelivery>,
) -> Result<bool, StorageError> {
    let sql = postgres("storing webhook deliveries");
    let (events, kinds, resources, bodies) = delivery_columns(deliveries);
    // Planned for this execution only, as the claim is: a cached
    // statement's generic plan, made while the table was small, read every
    // delivery for each one stored (`held_until!`: a sequential scan, 13 ms
    // a delivery behind 100,000, measured), and held the subscription's row
    // meanwhile.
    let row = client
        .query_one(
            statements::FAN_OUT,
            &[&id, &from, &to, &events, &kinds, &resources, &bodies],
        )
        .await
        .map_err(&sql)?;
    Ok(row.try_get::<_, i64>(0).map_err(&sql)? == 1)
}

async fn claim(
    client: &Client,
    instance: &str,
    room: &ClaimRoom,
    lease: Duration,
) -> Result<Vec<ClaimedDelivery>, StorageError> {
    let sql = postgres("claiming webhook deliveries");
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let (fuller, fuller_room): (Vec<i64>, Vec<i64>) =
        room.fuller.iter().map(|&(id, n)| (id, count(n))).unzip();
    // Prepared for this execution only, not cached: PostgreSQL plans it
    // with this claim's values and the statistics of now. A cached
    // statement gets a generic plan after five executions, and the claim's
    // was made while the table was empty (a new subscription's first
    // claims): it read every open delivery for each one (six minutes for
    // one claim behind 50,000, measured), and delivery fell to a few
    // hundred a second until statistics invalidated the plan. Planning
    // costs about a millisecond, once per claim of up to 128 deliveries.
    let rows = client
        .query(
            statements::CLAIM,
            &[
                &count(room.total),
                &instance,
                &lease.as_secs_f64(),
                &count(room.each),
                &fuller,
                &fuller_room,
            ],
        )
        .await
        .map_err(&sql)?;
    rows.iter().map(claimed_from_row).collect()
}

async fn finish_all(
    client: &Client,
    instance: &str,
    finished: &[FinishedAttempt],
) -> Result<Vec<bool>, StorageError> {
    fn column<T>(finished: &[FinishedAttempt], f: impl Fn(&FinishedAttempt) -> T) -> Vec<T> {
        finished.iter().map(f).collect()
    }
    let webhook_ids = column(finished, |f| f.webhook_id);
    let event_ids = column(finished, |f| f.event_id);
    let attempts = column(finished, |f| i32::try_from(f.attempt).unwrap_or(i32::MAX));
    let states = column(finished, |f| <&str>::from(f.outcome.next.delivery_state()));
    let retry_at = column(finished, |f| f.outcome.next.retry_at());
    let statuses = column(finished, |f| f.outcome.status.map(i32::from));
    let errors = column(finished, |f| f.outcome.error.clone());
    let at = column(finished, |f| f.outcome.at);
    let reasons = column(finished, |f| f.outcome.next.disables().map(<&str>::from));
    let ended = column(finished, |f| f.outcome.ended);
    let params: [&(dyn ToSql + Sync); 11] = [
        &webhook_ids,
        &event_ids,
        &instance,
        &attempts,
        &states,
        &retry_at,
        &statuses,
        &errors,
        &at,
        &reasons,
        &ended,
    ];
    let sql = postgres("recording webhook deliveries' attempts");
    // Planned for each batch, as the claim is: a cached plan made while
    // the queue was small read the whole table for every batch (a hash
    // join: 2,035 pages for 48 outcomes behind 22,000 rows; 4.6-5.2 ms a
    // batch on average under load) until statistics caught up. Planning
    // costs about 0.8 ms a batch.
    let rows = client
        .query(statements::FINISH_ALL, &params)
        .await
        .map_err(&sql)?;
    let counted = rows
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
        .collect::<Result<HashSet<(i64, i64, i32)>, tokio_postgres::Error>>()
        .map_err(&sql)?;
    Ok(column(finished, |f| {
        let attempt = i32::try_from(f.attempt).unwrap_or(i32::MAX);
        counted.contains(&(f.webhook_id, f.event_id, attempt))
    }))
}

async fn next_due(
    client: &Client,
    excluding: &[i64],
) -> Result<Option<DateTime<Utc>>, StorageError> {
    let sql = postgres("reading when a webhook delivery is next due");
    // As text, planned each time, as the claim is.
    let row = client
        .query_one(statements::NEXT_DUE, &[&excluding])
        .await
        .map_err(&sql)?;
    row.try_get(0).map_err(&sql)
}

async fn list_deliveries(
    client: &Client,
    id: i64,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<StoredDelivery>, StorageError> {
    let sql = postgres("reading webhook deliveries");
    let statement = client
        .prepare_cached(statements::LIST_DELIVERIES)
        .await
        .map_err(&sql)?;
    let before = before.unwrap_or(i64::MAX);
    let rows = client
        .query(&statement, &[&id, &before, &i64::from(limit)])
        .await
        .map_err(&sql)?;
    rows.iter().map(|row| delivery_from_row(id, row)).collect()
}

async fn replay(
    client: &mut Client,
    id: i64,
    deliveries: Vec<NewDelivery>,
) -> Result<u64, StorageError> {
    let doing = "replaying webhook deliveries";
    let sql = postgres(doing);
    let (events, kinds, resources, bodies) = delivery_columns(distinct(deliveries));
    let tx = client.transaction().await.map_err(&sql)?;
    let params: [&(dyn ToSql + Sync); 5] = [&id, &events, &kinds, &resources, &bodies];
    let replayed = execute(&tx, statements::REPLAY, &params, doing).await?;
    execute(&tx, statements::ENABLE, &[&id], doing).await?;
    tx.commit().await.map_err(&sql)?;
    Ok(replayed)
}

impl PostgresStorage {
    /// A connection of the webhook operations' pool (see [`Lent`]).
    async fn webhooks_client(&self) -> Result<Lent<'_>, StorageError> {
        Lent::from(&self.webhooks).await
    }

    /// A connection of the deliverer's pool, whose commits do not wait for
    /// the disk (see [`Lent`]).
    async fn deliveries_client(&self) -> Result<Lent<'_>, StorageError> {
        Lent::from(&self.deliveries).await
    }
}

#[async_trait::async_trait]
impl WebhookStorage for PostgresStorage {
    async fn create_subscription(
        &self,
        new: NewSubscription,
    ) -> Result<StoredSubscription, StorageError> {
        let mut lent = self.webhooks_client().await?;
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, create(lent.client(), new)).await;
        lent.settle("storing a webhook", answer)
    }

    async fn list_subscriptions(
        &self,
        owner: SubscriptionOwner,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StoredSubscription>, StorageError> {
        let doing = "listing webhooks";
        let after = after.unwrap_or(i64::MIN);
        let owner = owner_column(&owner);
        let mut lent = self.webhooks_client().await?;
        let params: [&(dyn ToSql + Sync); 3] = [&after, &owner, &i64::from(limit)];
        let work = subscriptions(lent.client(), statements::LIST, &params, doing);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer)
    }

    async fn get_subscription(
        &self,
        id: i64,
        owner: SubscriptionOwner,
    ) -> Result<Option<StoredSubscription>, StorageError> {
        let doing = "reading a webhook";
        let owner = owner_column(&owner);
        let mut lent = self.webhooks_client().await?;
        let params: [&(dyn ToSql + Sync); 2] = [&id, &owner];
        let work = subscriptions(lent.client(), statements::GET, &params, doing);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        Ok(lent.settle(doing, answer)?.into_iter().next())
    }

    async fn delete_subscription(
        &self,
        id: i64,
        owner: SubscriptionOwner,
    ) -> Result<bool, StorageError> {
        let mut lent = self.webhooks_client().await?;
        let answer =
            tokio::time::timeout(STATEMENT_TIMEOUT, delete(lent.client(), id, owner)).await;
        lent.settle("deleting a webhook", answer)
    }

    async fn rotate_secret(
        &self,
        id: i64,
        owner: SubscriptionOwner,
        secret: SealedSecret,
        previous_until: DateTime<Utc>,
    ) -> Result<Option<StoredSubscription>, StorageError> {
        let doing = "rotating a webhook's secret";
        let owner = owner_column(&owner);
        let mut lent = self.webhooks_client().await?;
        let params: [&(dyn ToSql + Sync); 4] = [&id, &owner, &previous_until, &secret.0];
        let work = subscriptions(lent.client(), statements::ROTATE, &params, doing);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        Ok(lent.settle(doing, answer)?.into_iter().next())
    }

    async fn active_subscriptions(&self) -> Result<Vec<StoredSubscription>, StorageError> {
        let doing = "reading the active webhooks";
        let mut lent = self.deliveries_client().await?;
        let work = subscriptions(lent.client(), statements::ACTIVE, &[], doing);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer)
    }

    async fn fan_out(
        &self,
        id: i64,
        from: i64,
        to: i64,
        deliveries: Vec<NewDelivery>,
    ) -> Result<bool, StorageError> {
        let mut lent = self.deliveries_client().await?;
        let work = fan_out(lent.client(), id, [from, to], deliveries);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle("storing webhook deliveries", answer)
    }

    async fn claim(
        &self,
        instance: &str,
        room: &ClaimRoom,
        lease: Duration,
    ) -> Result<Vec<ClaimedDelivery>, StorageError> {
        let mut lent = self.deliveries_client().await?;
        let work = claim(lent.client(), instance, room, lease);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle("claiming webhook deliveries", answer)
    }

    async fn finish_all(
        &self,
        instance: &str,
        finished: &[FinishedAttempt],
    ) -> Result<Vec<bool>, StorageError> {
        let mut lent = self.deliveries_client().await?;
        let work = finish_all(lent.client(), instance, finished);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle("recording webhook deliveries' attempts", answer)
    }

    async fn next_due(&self, excluding: &[i64]) -> Result<Option<DateTime<Utc>>, StorageError> {
        let mut lent = self.deliveries_client().await?;
        let work = next_due(lent.client(), excluding);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle("reading when a webhook delivery is next due", answer)
    }

    async fn list_deliveries(
        &self,
        id: i64,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StoredDelivery>, StorageError> {
        let mut lent = self.webhooks_client().await?;
        let work = list_deliveries(lent.client(), id, before, limit);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle("reading webhook deliveries", answer)
    }

    async fn replay(&self, id: i64, deliveries: Vec<NewDelivery>) -> Result<u64, StorageError> {
        let mut lent = self.webhooks_client().await?;
        let work = replay(lent.client(), id, deliveries);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle("replaying webhook deliveries", answer)
    }

    async fn counts(&self) -> Result<WebhookCounts, StorageError> {
        let doing = "counting webhooks";
        let mut lent = self.webhooks_client().await?;
        let work = async {
            let row = lent
                .client()
                .query_one(statements::COUNTS, &[])
                .await
                .map_err(postgres(doing))?;
            let count = |i| {
                row.try_get::<_, i64>(i)
                    .map(|n| u64::try_from(n).unwrap_or(0))
                    .map_err(postgres(doing))
            };
            Ok(WebhookCounts {
                active: count(0)?,
                disabled: count(1)?,
                open_deliveries: count(2)?,
            })
        };
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        lent.settle(doing, answer)
    }

    async fn purge_deliveries(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let doing = "purging webhook deliveries";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut lent = self.deliveries_client().await?;
        let params: [&(dyn ToSql + Sync); 2] = [&before, &limit];
        let work = execute(lent.client(), statements::PURGE, &params, doing);
        let answer = tokio::time::timeout(STATEMENT_TIMEOUT, work).await;
        let purged = lent.settle(doing, answer)?;
        Ok(usize::try_from(purged).unwrap_or(usize::MAX))
    }
}
