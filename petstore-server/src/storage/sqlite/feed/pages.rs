//! Pages of the feed, read from memory's columns (`retained.rs`), each event's
//! data made from memory's animals and orders: into the events as stored
//! (what the webhooks deliver), or straight into the JSON the feed answers,
//! with no event, animal or name allocated in between, and copied instead
//! when a page before kept it (`recent.rs`).

use super::super::memory::Committed;
use super::super::rows::micros_to_time;
use crate::storage::{
    EVENT_SCAN_MAX, EventKind, EventPage, EventQuery, EventsOutcome, OwnerId, StorageError,
    StoredEvent,
};
use petstore_api::model::{
    EncodedEvents, EventArrayWriter, EventData, EventDataRef, Order, OrderStatus, PetStatus,
};

/// An event that passed the query's filters, before its data is made.
pub(in crate::storage::sqlite) struct Row {
    id: i64,
    kind: EventKind,
    at: i64,
    pet_id: i64,
    order_id: Option<i64>,
    created: Option<PetStatus>,
}

/// What a page's events are made into.
pub(in crate::storage::sqlite) trait PageEvents: Sized {
    /// The events of `rows`, their data made from `memory`.
    fn make(memory: &Committed, rows: &[Row]) -> Result<Self, StorageError>;
}

/// The events as stored: what the webhooks' fan-out delivers.
impl PageEvents for Vec<StoredEvent> {
    fn make(memory: &Committed, rows: &[Row]) -> Result<Self, StorageError> {
        rows.iter()
            .map(|row| {
                Ok(StoredEvent {
                    id: row.id,
                    kind: row.kind,
                    time: micros_to_time(row.at),
                    data: with_data(memory, row, |data| EventData::from(data))?,
                })
            })
            .collect()
    }
}

/// The JSON the feed answers: each event written straight from memory, or
/// copied when a page before kept it.
impl PageEvents for EncodedEvents {
    fn make(memory: &Committed, rows: &[Row]) -> Result<Self, StorageError> {
        let write = |row: &Row, page: &mut EventArrayWriter| {
            let time = micros_to_time(row.at);
            let (event_type, previous) = (row.kind.event_type(), row.kind.previous_status());
            with_data(memory, row, |data| {
                page.push(row.id, event_type, &time, previous, data);
            })
        };
        memory.events.recent.encode(rows, |row| row.id, write)
    }
}

/// The rows a page examines, in id order, and what it keeps of them.
struct Scan {
    query: EventQuery,
    found: Vec<Row>,
    examined: u32,
    last_examined: Option<i64>,
}

impl Scan {
    fn new(query: EventQuery) -> Scan {
        Scan {
            query,
            found: Vec::with_capacity(query.limit as usize),
            examined: 0,
            last_examined: None,
        }
    }

    /// Whether the page may examine another row: it is not full, and not
    /// at the bound.
    fn wants_more(&self) -> bool {
        self.found.len() < self.query.limit as usize && self.examined < EVENT_SCAN_MAX
    }

    /// Examines the event `id` of `kind` (about an order of `owner`, for
    /// an order event); `row` makes it when the page shows it.
    fn examine(
        &mut self,
        id: i64,
        kind: EventKind,
        owner: impl FnOnce() -> Option<OwnerId>,
        row: impl FnOnce() -> Result<Row, StorageError>,
    ) -> Result<(), StorageError> {
        self.examined += 1;
        self.last_examined = Some(id);
        let seen = match self.query.owner {
            _ if !self.query.kinds.contains(kind) => false,
            Some(only) if kind.is_order() => owner() == Some(only),
            _ => true,
        };
        if seen {
            self.found.push(row()?);
        }
        Ok(())
    }

    /// The page, its events made from `memory`. `ended`: the rows up to
    /// the head ran out before the page was full or at the bound.
    fn page<Events: PageEvents>(
        self,
        memory: &Committed,
        after: i64,
        head: i64,
        ended: bool,
    ) -> Result<EventPage<Events>, StorageError> {
        // Ids are consecutive: a page that stopped (full, or at the bound)
        // reached the head only if its last row was the head.
        let (next_after, at_head) = if ended {
            (self.last_examined.unwrap_or(after), true)
        } else if self.found.len() == self.query.limit as usize {
            let last = self.found.last().map_or(after, |row| row.id);
            (last, last >= head)
        } else {
            let last = self.last_examined.unwrap_or(after);
            (last, last >= head)
        };
        Ok(EventPage {
            events: Events::make(memory, &self.found)?,
            next_after,
            head,
            at_head,
        })
    }
}

/// Where a page starts: `query.after`, or the floor; or the page is
/// expired (`Err(floor)`).
fn start(query: &EventQuery, floor: i64) -> Result<i64, i64> {
    match query.after {
        Some(after) if after < floor => Err(floor),
        Some(after) => Ok(after),
        None => Ok(floor),
    }
}

/// The page `query` asks for up to `head` (read before this is called: the
/// writer changes memory before it sends the head, so memory holds every
/// id up to it).
pub(in crate::storage::sqlite) fn memory_page<Events: PageEvents>(
    memory: &Committed,
    query: EventQuery,
    head: i64,
) -> Result<EventsOutcome<Events>, StorageError> {
    let feed = &memory.events;
    let after = match start(&query, feed.floor) {
        Ok(after) => after,
        Err(floor) => return Ok(EventsOutcome::Expired { floor }),
    };
    if !feed.any_of_after(query.kinds, after) {
        // Nothing of its kinds to examine: a long poll parked on a type
        // nobody writes would otherwise go through every commit's events.
        return Ok(EventsOutcome::Page(EventPage {
            events: Events::make(memory, &[])?,
            next_after: after.max(head),
            head,
            at_head: true,
        }));
    }
    let mut scan = Scan::new(query);
    let ended = scan_retained(memory, &mut scan, after.saturating_add(1), head)?;
    scan.page(memory, after, head, ended)
        .map(EventsOutcome::Page)
}

/// Examines the retained events from `from` on, up to `head`; says whether
/// they ran out before the page was full or at the bound.
fn scan_retained(
    memory: &Committed,
    scan: &mut Scan,
    from: i64,
    head: i64,
) -> Result<bool, StorageError> {
    let retained = &memory.events.retained;
    for id in from..=head {
        if !scan.wants_more() {
            return Ok(false);
        }
        let Some(event) = retained.get(id) else {
            // Only if the file's ids had a gap (`Retained::push`).
            return Err(StorageError::Invariant(
                "memory lacks an event between the floor and the head",
            ));
        };
        // An order event's subject is its order: its animal and owner are
        // the order's.
        let order = || memory.orders.pet_and_owner(event.subject);
        let row = || {
            let (pet_id, order_id) = if event.kind.is_order() {
                let (pet_id, _) =
                    order().ok_or(StorageError::Invariant("an event's order is not in memory"))?;
                (pet_id, Some(event.subject))
            } else {
                (event.subject, None)
            };
            Ok(Row {
                id,
                kind: event.kind,
                at: event.at,
                pet_id,
                order_id,
                created: event.created,
            })
        };
        scan.examine(id, event.kind, || order().and_then(|(_, owner)| owner), row)?;
    }
    Ok(true)
}

/// The data of the event `row`, made from `memory` and given to `use_data`:
/// the animal as it was right after the change (a pet's name and category
/// never change), or the order (whose `placed_at` never changes).
fn with_data<T>(
    memory: &Committed,
    row: &Row,
    use_data: impl FnOnce(EventDataRef<'_>) -> T,
) -> Result<T, StorageError> {
    if let Some(order_id) = row.order_id {
        let placed_at = memory
            .orders
            .placed_at(order_id)
            .ok_or(StorageError::Invariant("an event's order is not in memory"))?;
        let status = match row.kind {
            EventKind::OrderDelivered => OrderStatus::Delivered,
            EventKind::OrderCancelled => OrderStatus::Cancelled,
            _ => OrderStatus::Placed,
        };
        let order = Order {
            id: order_id,
            pet_id: row.pet_id,
            status,
            placed_at,
            placed_by: None,
        };
        return Ok(use_data(EventDataRef::Order(&order)));
    }
    let status = match (row.kind, row.kind.status_change()) {
        (EventKind::PetCreated, _) => row.created,
        (_, Some((_, after))) => Some(after),
        (_, None) => return Err(StorageError::Invariant("an order event without its order")),
    };
    let Some((name, category_id)) = memory.pets.name_and_category(row.pet_id) else {
        return Err(StorageError::Invariant(
            "an event's animal is not in memory",
        ));
    };
    Ok(use_data(EventDataRef::Pet {
        id: row.pet_id,
        name,
        category_id,
        status,
    }))
}
