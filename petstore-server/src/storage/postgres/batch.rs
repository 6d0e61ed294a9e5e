//! Writes many per statement and per commit: plain creates (without an
//! idempotency key) here, and orders placed and updated (`orders.rs`).
//!
//! Each write waits in its kind's queue; a writer task takes everything
//! waiting (up to [`BATCH_MAX`]) and stores it with one statement over
//! arrays — for creates an `INSERT … SELECT FROM unnest(…)` — in
//! autocommit: one statement, one commit, one WAL flush for the whole
//! batch (with `synchronous_commit = on`, the rows are on disk when it
//! returns), then answers each write (a create with its pet and id, an
//! order with what became of it). While a batch commits the next one
//! gathers, so batches grow with the load and a lone write waits for
//! nobody. [`WRITERS`] batches may commit at once, on shared
//! connections of their own (a commit holds its connection until the flush
//! is done, so reads never share these; each batch goes to the connection
//! with the fewest in flight). A batch that fails for want of the database
//! fails every write in it with 503, and may have been stored (as any
//! write whose connection is lost mid-commit).
//!
//! The queue is bounded ([`QUEUE_MAX`]): when the database falls that far
//! behind, a write is refused at once with 503 (nothing stored) rather than
//! queued, so memory never grows without bound and a client learns to
//! back off instead of waiting for an answer that may come too late.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_postgres::types::ToSql;

use super::shared::SharedConnections;
use crate::storage::{PostgresFailure, StorageError};
use petstore_api::model::{NewPet, Pet, PetStatus};

/// The most writes of a kind one statement stores.
pub(super) const BATCH_MAX: usize = 512;

/// Batches committing at once (and connections for them).
pub(super) const WRITERS: usize = 2;

/// The most writes of a kind waiting for a batch: four rounds of full
/// batches.
pub(super) const QUEUE_MAX: usize = 4 * WRITERS * BATCH_MAX;

/// A kind of request done many at once: writes stored together, reads
/// answered together (`reads.rs`).
pub(super) trait Job: Send + Sized + 'static {
    /// What a request of this kind comes to.
    type Output: Send + 'static;

    /// Does `batch` (one statement, or a few) and answers each request.
    fn run(
        batch: Vec<Waiting<Self>>,
        connections: &SharedConnections,
    ) -> impl Future<Output = ()> + Send;
}

/// A write waiting for its batch.
pub(super) struct Waiting<J: Job> {
    pub job: J,
    pub answer: oneshot::Sender<Result<J::Output, StorageError>>,
}

/// The queue of one kind of write and the task that stores them.
pub(super) struct Batcher<J: Job> {
    queue: mpsc::Sender<Waiting<J>>,
}

/// Plain creates.
pub(super) type CreateBatcher = Batcher<NewPet>;

impl<J: Job> Batcher<J> {
    /// Starts the task that takes the batches, on the current runtime,
    /// running at most `at_once` of them at a time through `connections`.
    /// It ends when the batcher is dropped.
    pub fn start(connections: Arc<SharedConnections>, at_once: usize) -> Batcher<J> {
        let (batcher, waiting) = Batcher::with_queue(QUEUE_MAX);
        tokio::spawn(write_batches(waiting, connections, at_once));
        batcher
    }

    /// A batcher whose writes wait in a queue of `capacity`, for whoever
    /// takes them from the receiver.
    fn with_queue(capacity: usize) -> (Batcher<J>, mpsc::Receiver<Waiting<J>>) {
        let (queue, waiting) = mpsc::channel(capacity);
        (Batcher { queue }, waiting)
    }

    /// Stores `job` (in the next batch) and returns what it came to once
    /// the batch is committed; refuses at once when the queue is full.
    pub async fn submit(&self, job: J) -> Result<J::Output, StorageError> {
        let (answer, stored) = oneshot::channel();
        self.queue
            .try_send(Waiting { job, answer })
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => {
                    StorageError::Overloaded(self.queue.max_capacity())
                }
                mpsc::error::TrySendError::Closed(_) => StorageError::Closed,
            })?;
        // The writer answers every write it takes, unless the runtime is
        // shutting down under it.
        stored.await.unwrap_or(Err(StorageError::Closed))
    }
}

impl Job for NewPet {
    type Output = Pet;

    async fn run(batch: Vec<Waiting<NewPet>>, connections: &SharedConnections) {
        store_and_answer(batch, connections).await;
    }
}

/// The batcher's task: takes what is waiting (only requests that arrived
/// before the batch's statement is sent: a read sees every write
/// acknowledged before it), runs it, answers; at most `at_once` batches at
/// a time.
async fn write_batches<J: Job>(
    mut waiting: mpsc::Receiver<Waiting<J>>,
    connections: Arc<SharedConnections>,
    at_once: usize,
) {
    let writers = Arc::new(Semaphore::new(at_once));
    loop {
        let Ok(writer) = Arc::clone(&writers).acquire_owned().await else {
            return;
        };
        let Some(first) = waiting.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < BATCH_MAX
            && let Ok(next) = waiting.try_recv()
        {
            batch.push(next);
        }
        // A write whose request is gone (its client hung up) is not
        // stored: nobody would be told of it.
        batch.retain(|waiting| !waiting.answer.is_closed());
        if batch.is_empty() {
            continue;
        }
        let connections = Arc::clone(&connections);
        tokio::spawn(async move {
            J::run(batch, &connections).await;
            drop(writer);
        });
    }
}

/// Why a batch was not stored.
enum Failure {
    /// The database refused the statement (a row it does not accept):
    /// nothing of the batch was stored.
    Refused(StorageError),
    /// Anything else: the database unavailable, or an answer that does not
    /// fit. The batch may have been stored.
    Other(StorageError),
}

/// Stores `batch` and answers each of its creates. When the database
/// refuses the statement, the batch is split in halves and each is tried
/// again, so that only the creates at fault fail (in a few steps, however
/// large the batch).
async fn store_and_answer(mut batch: Vec<Waiting<NewPet>>, connections: &SharedConnections) {
    match insert(&batch, connections).await {
        Ok(ids) => {
            for (waiting, id) in batch.into_iter().zip(ids) {
                let _ = waiting.answer.send(Ok(Pet::from_new(id, waiting.job)));
            }
        }
        Err(Failure::Refused(_)) if batch.len() > 1 => {
            let second = batch.split_off(batch.len() / 2);
            Box::pin(store_and_answer(batch, connections)).await;
            Box::pin(store_and_answer(second, connections)).await;
        }
        Err(Failure::Refused(e) | Failure::Other(e)) => fail_all(batch, e),
    }
}

/// Fails every write of `batch` with `error` (which may or may not have
/// stored them).
pub(super) fn fail_all<J: Job>(batch: Vec<Waiting<J>>, error: StorageError) {
    let shared = Arc::new(error);
    for waiting in batch {
        let _ = waiting
            .answer
            .send(Err(StorageError::Batch(Arc::clone(&shared))));
    }
}

/// Inserts every pet of `batch` in one statement; their ids, in the batch's
/// order.
async fn insert(
    batch: &[Waiting<NewPet>],
    connections: &SharedConnections,
) -> Result<Vec<i64>, Failure> {
    let names: Vec<&str> = batch.iter().map(|w| w.job.name.as_str()).collect();
    let categories: Vec<i64> = batch.iter().map(|w| w.job.category_id).collect();
    let statuses: Vec<Option<&str>> = batch
        .iter()
        .map(|w| w.job.status.map(PetStatus::as_str))
        .collect();
    let shared = connections.get().await.map_err(Failure::Other)?;
    let params: [&(dyn ToSql + Sync); 3] = [&names, &categories, &statuses];
    let inserted = shared.client.query(&shared.insert_many, &params);
    let rows = shared
        .run("creating pets", inserted)
        .await
        .map_err(|e| match &e {
            StorageError::Postgres {
                source: PostgresFailure::Driver(driver),
                ..
            } if driver.as_db_error().is_some() && !e.is_unavailable() => Failure::Refused(e),
            _ => Failure::Other(e),
        })?;
    // The statement is committed: from here on nothing is retried.
    let undecodable = |_| {
        Failure::Other(StorageError::Invariant(
            "a batch insert returned rows that do not decode",
        ))
    };
    // The rows come back with their content; pets with the same content
    // are interchangeable, so each create takes the id of a row equal to
    // its pet, whatever order the rows are in.
    let mut ids_by_pet: HashMap<(&str, i64, Option<&str>), Vec<i64>> = HashMap::new();
    for row in &rows {
        let pet = (
            row.try_get(1).map_err(undecodable)?,
            row.try_get(2).map_err(undecodable)?,
            row.try_get(3).map_err(undecodable)?,
        );
        ids_by_pet
            .entry(pet)
            .or_default()
            .push(row.try_get(0).map_err(undecodable)?);
    }
    batch
        .iter()
        .map(|w| {
            let pet = (
                w.job.name.as_str(),
                w.job.category_id,
                w.job.status.map(PetStatus::as_str),
            );
            ids_by_pet
                .get_mut(&pet)
                .and_then(Vec::pop)
                .ok_or(Failure::Other(StorageError::Invariant(
                    "a batch insert returned rows that differ from the pets sent",
                )))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rex() -> NewPet {
        NewPet {
            name: "Rex".into(),
            category_id: 1,
            status: None,
        }
    }

    #[tokio::test]
    async fn a_full_queue_refuses_a_create_at_once_and_keeps_what_it_holds() {
        let (batcher, mut waiting) = CreateBatcher::with_queue(2);
        let batcher = Arc::new(batcher);
        let queued: Vec<_> = (0..2)
            .map(|_| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move { batcher.submit(rex()).await })
            })
            .collect();
        // Both wait in the queue, unanswered, once the channel is full.
        let full = || std::future::ready(batcher.queue.capacity() == 0);
        petstore_support::eventually_async("both creates queued", full).await;
        let refused = batcher.submit(rex()).await.unwrap_err();
        assert!(
            matches!(refused, StorageError::Overloaded(2)),
            "{refused:?}"
        );
        assert!(refused.is_unavailable(), "a full queue is a 503");
        // What was queued is still there, and answered by whoever takes it.
        for (id, create) in (1..).zip(queued) {
            let Waiting { job: pet, answer } = waiting.recv().await.unwrap();
            answer.send(Ok(Pet::from_new(id, pet))).unwrap();
            assert_eq!(create.await.unwrap().unwrap().id, id);
        }
        // Room again.
        let next = tokio::spawn({
            let batcher = Arc::clone(&batcher);
            async move { batcher.submit(rex()).await }
        });
        let Waiting { job: pet, answer } = waiting.recv().await.unwrap();
        answer.send(Ok(Pet::from_new(3, pet))).unwrap();
        assert_eq!(next.await.unwrap().unwrap().id, 3);
    }
}
