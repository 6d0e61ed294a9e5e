//! The writes the writer thread commits in groups, each with its own
//! outcome: what it does inside the group's transaction ([`Write::apply`]),
//! its events included, then what it changes in memory once the group is
//! committed ([`Write::remember`]) and what its request is answered
//! ([`Write::outcome`]).

use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, params};

use super::feed::EventLog;
use super::memory::Committed;
use super::rows::{ORDER_COLUMNS, micros_to_time, order_from_row, pet_from_row};
use crate::storage::StorageError;
use crate::storage::idempotency::{Claim, CreateOutcome, Idempotency};
use crate::storage::orders::{Owner, PlaceOutcome, StoredOrder, UpdateOutcome, transition};
use petstore_api::model::{NewPet, Order, OrderStatus, Pet, PetStatus};

/// A write committed with others in one transaction.
pub(super) trait Write: Send + 'static {
    /// What the transaction did: what memory and the answer are made from.
    type Applied: Send;
    /// What the request is answered.
    type Outcome: Send;

    /// Does the write inside the group's transaction, and records its
    /// events in `events` there (a write that changes nothing records
    /// none). A write with an idempotency key first looks for the key's
    /// live record there, so a retry queued behind the first request finds
    /// the first one's record even within one group.
    fn apply(&self, tx: &Connection, events: &mut EventLog) -> rusqlite::Result<Self::Applied>;

    /// Makes memory show what was committed (only the writer calls it,
    /// under the write lock, in the order of the transaction).
    fn remember(&self, applied: &Self::Applied, memory: &mut Committed);

    /// The answer.
    fn outcome(self, applied: Self::Applied) -> Result<Self::Outcome, StorageError>;
}

/// A create without an idempotency key.
pub(super) struct Create(pub(super) NewPet);

impl Write for Create {
    type Applied = Pet;
    type Outcome = Pet;

    fn apply(&self, tx: &Connection, events: &mut EventLog) -> rusqlite::Result<Pet> {
        insert_pet(tx, events, &self.0, None)
    }

    fn remember(&self, pet: &Pet, memory: &mut Committed) {
        memory.pets.push(pet);
    }

    fn outcome(self, pet: Pet) -> Result<Pet, StorageError> {
        Ok(pet)
    }
}

/// A create with an idempotency key, claimed until it is answered.
pub(super) struct CreateOnce {
    pub(super) pet: NewPet,
    pub(super) once: Idempotency,
    /// Released just before the answer is sent: once a request is
    /// answered, a retry with its key must find the committed record, not
    /// a claim.
    pub(super) claim: Claim,
}

impl Write for CreateOnce {
    /// The new pet, or the key's live record.
    type Applied = Result<Pet, Live<Result<Pet, StorageError>>>;
    type Outcome = CreateOutcome;

    fn apply(&self, tx: &Connection, events: &mut EventLog) -> rusqlite::Result<Self::Applied> {
        if let Some(live) = live_record(tx, &self.once)? {
            return Ok(Err(live));
        }
        insert_pet(tx, events, &self.pet, Some(&self.once)).map(Ok)
    }

    fn remember(&self, applied: &Self::Applied, memory: &mut Committed) {
        if let Ok(pet) = applied {
            memory.pets.push(pet);
        }
    }

    fn outcome(self, applied: Self::Applied) -> Result<CreateOutcome, StorageError> {
        drop(self.claim);
        match applied {
            Ok(pet) => Ok(CreateOutcome::Created(pet)),
            Err(Live::Replay(pet)) => pet.map(CreateOutcome::Replayed),
            Err(Live::Reused) => Ok(CreateOutcome::KeyReused),
        }
    }
}

/// An order for an animal, with its idempotency key if it has one.
pub(super) struct Place {
    pub(super) pet_id: i64,
    pub(super) owner: Owner,
    /// The key, claimed until just before the answer (see [`CreateOnce`]).
    pub(super) once: Option<(Idempotency, Claim)>,
}

impl Write for Place {
    type Applied = PlaceOutcome;
    type Outcome = PlaceOutcome;

    fn apply(&self, tx: &Connection, events: &mut EventLog) -> rusqlite::Result<PlaceOutcome> {
        let once = self.once.as_ref().map(|(once, _)| once);
        if let Some(once) = once
            && let Some(found) = live_order_record(tx, once)?
        {
            return Ok(found);
        }
        place(tx, events, self.pet_id, &self.owner, once)
    }

    fn remember(&self, outcome: &PlaceOutcome, memory: &mut Committed) {
        if let PlaceOutcome::Placed(order) = outcome {
            memory.pets.set_status(order.pet_id, PetStatus::Pending);
            memory.orders.push(order, Some(&self.owner.id));
        }
    }

    fn outcome(self, outcome: PlaceOutcome) -> Result<PlaceOutcome, StorageError> {
        // The claim goes before the answer, as a create's does.
        drop(self.once);
        Ok(outcome)
    }
}

/// An order asked to have a status.
pub(super) struct Update {
    pub(super) id: i64,
    pub(super) to: OrderStatus,
}

impl Write for Update {
    /// The outcome, and whether the order's status changed.
    type Applied = (UpdateOutcome, bool);
    type Outcome = UpdateOutcome;

    fn apply(
        &self,
        tx: &Connection,
        events: &mut EventLog,
    ) -> rusqlite::Result<(UpdateOutcome, bool)> {
        update(tx, events, self.id, self.to)
    }

    fn remember(&self, applied: &(UpdateOutcome, bool), memory: &mut Committed) {
        if let (UpdateOutcome::Done(order), true) = applied {
            memory.orders.set_status(order.id, order.status);
            memory
                .pets
                .set_status(order.pet_id, order.status.pet_status());
        }
    }

    fn outcome(self, (outcome, _): (UpdateOutcome, bool)) -> Result<UpdateOutcome, StorageError> {
        Ok(outcome)
    }
}

/// What an idempotency key's live record says of a request with it.
pub(super) enum Live<R> {
    /// The same body: the first answer, `R`, again.
    Replay(R),
    /// Another body: nothing is done.
    Reused,
}

/// Inserts the pet (and the key's record, replacing an expired one) and
/// its `PetCreated`.
fn insert_pet(
    tx: &Connection,
    events: &mut EventLog,
    pet: &NewPet,
    once: Option<&Idempotency>,
) -> rusqlite::Result<Pet> {
    let status = pet.status.map(PetStatus::as_str);
    let id = tx
        .prepare_cached(
            "INSERT INTO pets (name, category_id, status) VALUES (?1, ?2, ?3) RETURNING id",
        )?
        .query_row(params![pet.name, pet.category_id, status], |row| row.get(0))?;
    if let Some(once) = once {
        tx.prepare_cached(
            "INSERT INTO idempotency_keys
                 (scope, key, fingerprint, created_at, pet_id, name, category_id, status)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (scope, key) DO UPDATE SET
                 fingerprint = excluded.fingerprint, created_at = excluded.created_at,
                 pet_id = excluded.pet_id, name = excluded.name,
                 category_id = excluded.category_id, status = excluded.status",
        )?
        .execute(params![
            &once.caller.0[..],
            once.key,
            once.fingerprint.as_bytes(),
            once.now,
            id,
            pet.name,
            pet.category_id,
            status
        ])?;
    }
    let pet = Pet::from_new(id, pet.clone());
    events.pet_created(tx, &pet)?;
    Ok(pet)
}

/// Orders the animal if it is available: its status, the new order and
/// their events (`OrderPlaced`, then `PetOrdered`, at the order's
/// `placed_at`) in the group's transaction.
fn place(
    tx: &Connection,
    events: &mut EventLog,
    pet_id: i64,
    owner: &Owner,
    once: Option<&Idempotency>,
) -> rusqlite::Result<PlaceOutcome> {
    let reserved = tx
        .prepare_cached(
            "UPDATE pets SET status = 'pending' WHERE id = ?1 AND status = 'available'",
        )?
        .execute(params![pet_id])?;
    if reserved == 0 {
        let status: Option<Option<String>> = tx
            .prepare_cached("SELECT status FROM pets WHERE id = ?1")?
            .query_row(params![pet_id], |row| row.get(0))
            .optional()?;
        return Ok(match status {
            None => PlaceOutcome::NoSuchPet,
            Some(status) => {
                PlaceOutcome::NotAvailable(status.as_deref().and_then(PetStatus::parse))
            }
        });
    }
    let micros = Utc::now().timestamp_micros();
    let id: i64 = tx
        .prepare_cached(
            "INSERT INTO orders (pet_id, status, placed_at, owner, placed_by)
             VALUES (?1, 'placed', ?2, ?3, ?4) RETURNING id",
        )?
        .query_row(
            params![pet_id, micros, &owner.id.0[..], owner.name],
            |row| row.get(0),
        )?;
    if let Some(once) = once {
        tx.prepare_cached(
            "INSERT INTO order_idempotency_keys
                 (scope, key, fingerprint, created_at, order_id, pet_id, placed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (scope, key) DO UPDATE SET
                 fingerprint = excluded.fingerprint, created_at = excluded.created_at,
                 order_id = excluded.order_id, pet_id = excluded.pet_id,
                 placed_at = excluded.placed_at",
        )?
        .execute(params![
            &once.caller.0[..],
            once.key,
            once.fingerprint.as_bytes(),
            once.now,
            id,
            pet_id,
            micros
        ])?;
    }
    let order = Order {
        id,
        pet_id,
        status: OrderStatus::Placed,
        placed_at: micros_to_time(micros),
        placed_by: Some(owner.name.clone()),
    };
    events.order_changed(tx, &order, Some(&owner.id.0), micros)?;
    Ok(PlaceOutcome::Placed(StoredOrder::new(order)))
}

/// Gives the order the status `to` (and its animal the status that goes
/// with it) if the order may change so, with their events (the order's,
/// then its animal's); says whether it changed.
fn update(
    tx: &Connection,
    events: &mut EventLog,
    id: i64,
    to: OrderStatus,
) -> rusqlite::Result<(UpdateOutcome, bool)> {
    let found = tx
        .prepare_cached(&format!(
            "SELECT {ORDER_COLUMNS}, owner FROM orders WHERE id = ?1"
        ))?
        .query_row(params![id], |row| {
            Ok((order_from_row(row)?, row.get::<_, Option<Vec<u8>>>(5)?))
        })
        .optional()?;
    let Some((mut order, owner)) = found else {
        return Ok((UpdateOutcome::NoSuchOrder, false));
    };
    match transition(order.status, to) {
        Err(from) => Ok((UpdateOutcome::Invalid(from), false)),
        Ok(None) => Ok((UpdateOutcome::Done(StoredOrder::new(order)), false)),
        Ok(Some(to)) => {
            tx.prepare_cached("UPDATE orders SET status = ?2 WHERE id = ?1")?
                .execute(params![id, to.as_str()])?;
            tx.prepare_cached("UPDATE pets SET status = ?2 WHERE id = ?1")?
                .execute(params![order.pet_id, to.pet_status().as_str()])?;
            order.status = to;
            let at = Utc::now().timestamp_micros();
            events.order_changed(tx, &order, owner.as_deref(), at)?;
            Ok((UpdateOutcome::Done(StoredOrder::new(order)), true))
        }
    }
}

/// The key's live record in what `select` reads (`fingerprint, created_at`
/// and then the first answer's columns, for `scope = ?1 AND key = ?2`),
/// the answer read by `replay`; `None` when the key has no live record.
fn live_key<R>(
    tx: &Connection,
    select: &str,
    once: &Idempotency,
    replay: impl FnOnce(&rusqlite::Row) -> rusqlite::Result<R>,
) -> rusqlite::Result<Option<Live<R>>> {
    let mut select = tx.prepare_cached(select)?;
    let mut rows = select.query(params![&once.caller.0[..], once.key])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let created_at: i64 = row.get(1)?;
    if !once.is_live(created_at) {
        return Ok(None);
    }
    let fingerprint: Vec<u8> = row.get(0)?;
    if fingerprint != once.fingerprint.as_bytes() {
        return Ok(Some(Live::Reused));
    }
    replay(row).map(|answer| Some(Live::Replay(answer)))
}

/// The create key's live record: a replay of the same pet (or a record
/// that does not decode), or a reuse of the key for another.
fn live_record(
    tx: &Connection,
    once: &Idempotency,
) -> rusqlite::Result<Option<Live<Result<Pet, StorageError>>>> {
    let found = live_key(
        tx,
        "SELECT fingerprint, created_at, pet_id, name, category_id, status
         FROM idempotency_keys WHERE scope = ?1 AND key = ?2",
        once,
        |row| Ok((row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?)),
    )?;
    Ok(found.map(|live| match live {
        Live::Replay(stored) => Live::Replay(pet_from_row(stored)),
        Live::Reused => Live::Reused,
    }))
}

/// The order key's live record, as what an order with it comes to: a
/// replay of the same order, or a reuse of the key for another animal.
fn live_order_record(
    tx: &Connection,
    once: &Idempotency,
) -> rusqlite::Result<Option<PlaceOutcome>> {
    let found = live_key(
        tx,
        "SELECT fingerprint, created_at, order_id, pet_id, placed_at
         FROM order_idempotency_keys WHERE scope = ?1 AND key = ?2",
        once,
        |row| {
            Ok(Order {
                id: row.get(2)?,
                pet_id: row.get(3)?,
                status: OrderStatus::Placed,
                placed_at: micros_to_time(row.get(4)?),
                // The key that placed it is the one replaying it.
                placed_by: None,
            })
        },
    )?;
    Ok(found.map(|live| match live {
        Live::Replay(order) => PlaceOutcome::Replayed(StoredOrder::new(order)),
        Live::Reused => PlaceOutcome::KeyReused,
    }))
}

/// Deletes at most `limit` idempotency records (of creates, then of
/// orders) made before `before`.
pub(super) fn purge_records(
    conn: &Connection,
    before: i64,
    limit: usize,
) -> rusqlite::Result<usize> {
    let mut purged = 0;
    for table in ["idempotency_keys", "order_idempotency_keys"] {
        purged += conn
            .prepare_cached(&format!(
                "DELETE FROM {table} WHERE rowid IN
                     (SELECT rowid FROM {table} WHERE created_at < ?1 LIMIT ?2)"
            ))?
            .execute(params![before, (limit - purged) as i64])?;
    }
    Ok(purged)
}
