//! Reads answered together: requests of one kind that arrive while a
//! statement is under way wait for the next one, which serves them all.
//!
//! With many requests in flight, PostgreSQL's cost is per statement (a
//! backend woken, a plan run) far more than per row: `getPet` for 40 ids is
//! one `WHERE id = ANY($1)`, forty identical `listPets` are one query, and
//! the inventory is read once for everyone waiting. A request only ever
//! joins a statement sent after it arrived (the batcher takes it from the
//! queue before sending), never one already under way, so it still sees
//! every write acknowledged before it — on any instance.

use std::collections::HashMap;

use super::batch::{Job, Waiting, fail_all};
use super::shared::{Lease, SharedConnections};
use super::{orders, pet_from_row, postgres, status_from_column};
use crate::storage::{ListQuery, Page, StorageError};
use petstore_api::model::{Inventory, Pet, PetArrayWriter};
use tokio_postgres::types::ToSql;

/// A pet read by id.
pub(super) struct GetPet(pub i64);

/// A page of pets.
pub(super) struct ListPets(pub ListQuery);

/// The counts of pets by status.
pub(super) struct CountPets;

impl Job for GetPet {
    type Output = Option<Pet>;

    async fn run(batch: Vec<Waiting<GetPet>>, connections: &SharedConnections) {
        let ids: Vec<i64> = batch.iter().map(|w| w.job.0).collect();
        match get_many(connections, &ids).await {
            // The same id may be asked for more than once in a batch.
            Ok(pets) => {
                for waiting in batch {
                    let _ = waiting.answer.send(Ok(pets.get(&waiting.job.0).cloned()));
                }
            }
            Err(error) => fail_all(batch, error),
        }
    }
}

impl Job for ListPets {
    type Output = Page;

    /// Each distinct page once, pipelined on one connection.
    async fn run(batch: Vec<Waiting<ListPets>>, connections: &SharedConnections) {
        let shared = match connections.get().await {
            Ok(shared) => shared,
            Err(error) => return fail_all(batch, error),
        };
        let mut by_query: HashMap<ListQuery, Vec<Waiting<ListPets>>> = HashMap::new();
        for waiting in batch {
            by_query.entry(waiting.job.0).or_default().push(waiting);
        }
        let pages =
            by_query
                .into_iter()
                .map(async |(query, waiting)| match list(&shared, query).await {
                    Ok(page) => answer_all(waiting, page),
                    Err(error) => fail_all(waiting, error),
                });
        futures::future::join_all(pages).await;
    }
}

impl Job for CountPets {
    type Output = Inventory;

    async fn run(batch: Vec<Waiting<CountPets>>, connections: &SharedConnections) {
        let counted = match connections.get().await {
            Ok(shared) => orders::inventory(&shared).await,
            Err(error) => Err(error),
        };
        match counted {
            Ok(inventory) => answer_all(batch, inventory),
            Err(error) => fail_all(batch, error),
        }
    }
}

/// Answers every request of `waiting` with `answer`.
fn answer_all<J: Job>(waiting: Vec<Waiting<J>>, answer: J::Output)
where
    J::Output: Clone,
{
    for request in waiting {
        let _ = request.answer.send(Ok(answer.clone()));
    }
}

/// The pets with the ids `ids`, by id, in one statement.
async fn get_many(
    connections: &SharedConnections,
    ids: &[i64],
) -> Result<HashMap<i64, Pet>, StorageError> {
    let shared = connections.get().await?;
    let by_id = |row: &tokio_postgres::Row| pet_from_row(row).map(|pet| (pet.id, pet));
    shared
        .query_map("reading pets", &shared.get_many, &[&ids], by_id)
        .await
}

/// A page of pets, its JSON written straight from the rows: no `Pet`, no
/// `String` per name.
async fn list(shared: &Lease<'_>, query: ListQuery) -> Result<Page, StorageError> {
    let limit = query.limit as usize;
    let fetch = i64::from(query.limit) + 1;
    // Ids are positive (an identity from 1): no cursor means from the start.
    let after = query.after.unwrap_or(i64::MIN);
    let doing = "listing pets";
    let rows = match query.status {
        None => {
            let params: [&(dyn ToSql + Sync); 2] = [&after, &fetch];
            shared
                .run(doing, shared.client.query(&shared.list, &params))
                .await?
        }
        // Served by the (status, id) index at any depth.
        Some(status) => {
            let params: [&(dyn ToSql + Sync); 3] = [&status.as_str(), &after, &fetch];
            let rows = shared.client.query(&shared.list_by_status, &params);
            shared.run(doing, rows).await?
        }
    };
    let decode = postgres("decoding a row");
    let mut pets = PetArrayWriter::with_capacity(limit);
    for row in rows.iter().take(limit) {
        let id: i64 = row.try_get(0).map_err(&decode)?;
        let status = status_from_column(row, 3, id)?;
        pets.push(
            id,
            row.try_get(1).map_err(&decode)?,
            row.try_get(2).map_err(&decode)?,
            status,
        );
    }
    Ok(Page {
        pets: pets.finish(),
        more: rows.len() > limit,
    })
}
