//! The events' half of the storage interface (since contract 1.6.0): every
//! acknowledged change writes its events in its own transaction (an
//! outbox), and the feed reads them back in commit order.
//!
//! What each backend promises ([`super::Storage::events`]):
//!
//! - **Exactly once, in commit order.** An event is written in the same
//!   transaction as the change it describes, so there is none without its
//!   change and no change without it. Ids increase in commit order for the
//!   events of any one resource (an animal, an order).
//! - **No skipped event.** A page only ever returns events up to the
//!   *head*: an id below which no event can still appear. On SQLite the one
//!   writer assigns ids in commit order, so every committed id is below it.
//!   On PostgreSQL an id is taken before its transaction commits, so a later
//!   id can be visible before an earlier one: the head only passes an id
//!   once every transaction that could still commit a smaller one has
//!   ended. A cursor therefore never moves past an event that appears
//!   later, on any instance.
//! - **Retention.** Old events are purged from the oldest id up
//!   ([`super::Storage::purge_events`]); the *floor* is the largest id
//!   purged, and a cursor below it is expired ([`EventsOutcome::Expired`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use enumset::{EnumSet, EnumSetType};
use petstore_api::model::{
    EncodedEvents, Event, EventArrayWriter, EventData, EventType, PetStatus, encode_event,
};
use petstore_api::scopes::{Scope, Scopes};

use super::orders::OwnerId;

/// The most rows one page examines: with a filter that matches few events,
/// a page stops there, so that no page costs more than a bounded scan.
pub const EVENT_SCAN_MAX: u32 = 1000;

/// How often the kinds of new events are looked at for parked long polls,
/// at most (`parked.rs`). Every commit moves the head; a poll that wants
/// other types (or another customer's orders) would otherwise read a page
/// per commit for nothing, and 200 of them cost the writes a third of their
/// rate (BENCHMARKS.md, "Issue 28, fourth pass"). A matching event waits at
/// most this much longer.
pub const PARKED_READ_GAP: Duration = Duration::from_millis(20);

/// How a long poll parked at the head ended its wait
/// ([`super::Storage::events_after`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParkedWait {
    /// Whether to read again: an event of its kinds may have come. `false`:
    /// the wait ended (its deadline, or the storage closed).
    pub read: bool,
    /// An id up to which the feed is known to hold no event of its kinds,
    /// at least the head it parked at: the poll's cursor may move there
    /// without examining a row.
    pub quiet: i64,
}

/// For each kind, an id that no event of that kind exceeds (among the ids
/// it covers): what lets a page, or a long poll parked at the head, know
/// that a kind has nothing after a cursor without examining a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindMarks([i64; KIND_CODES]);

/// One more than the largest kind's code (they are 1 to 7).
pub(crate) const KIND_CODES: usize = EventKind::ALL.len() + 1;

impl KindMarks {
    /// Every kind at `id`: nothing is known of them but that none exceeds
    /// it.
    pub fn all_at(id: i64) -> KindMarks {
        KindMarks([id; KIND_CODES])
    }

    /// An event of `kind` has the id `id`.
    pub fn mark(&mut self, kind: EventKind, id: i64) {
        let mark = &mut self.0[kind_index(kind)];
        *mark = (*mark).max(id);
    }

    /// Whether an event of one of `kinds` may have an id above `after`.
    pub fn any_after(&self, kinds: EnumSet<EventKind>, after: i64) -> bool {
        kinds.iter().any(|kind| self.of(kind) > after)
    }

    /// The id that no event of `kind` exceeds.
    pub fn of(&self, kind: EventKind) -> i64 {
        self.0[kind_index(kind)]
    }
}

/// Where `kind` is in [`KindMarks`] (and in any array of [`KIND_CODES`]).
pub(crate) fn kind_index(kind: EventKind) -> usize {
    usize::from(kind.code().unsigned_abs())
}

/// A stored event's kind: its type and, for a status change, which one.
/// The codes are stored in the databases and never change.
#[derive(Debug, Hash, PartialOrd, Ord, EnumSetType)]
#[enumset(repr = "u8")]
pub enum EventKind {
    /// `pet.created`.
    PetCreated = 1,
    /// `order.placed`.
    OrderPlaced = 2,
    /// `order.delivered`.
    OrderDelivered = 3,
    /// `order.cancelled`.
    OrderCancelled = 4,
    /// `pet.status_changed`, `available` to `pending` (ordered).
    PetOrdered = 5,
    /// `pet.status_changed`, `pending` to `sold` (its order delivered).
    PetSold = 6,
    /// `pet.status_changed`, `pending` to `available` (its order cancelled).
    PetReturned = 7,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 7] = [
        EventKind::PetCreated,
        EventKind::OrderPlaced,
        EventKind::OrderDelivered,
        EventKind::OrderCancelled,
        EventKind::PetOrdered,
        EventKind::PetSold,
        EventKind::PetReturned,
    ];

    /// The stored code.
    pub fn code(self) -> i16 {
        self as i16
    }

    /// The kind stored as `code`, if any.
    pub fn from_code(code: i64) -> Option<EventKind> {
        EventKind::ALL
            .into_iter()
            .find(|kind| i64::from(kind.code()) == code)
    }

    /// The contract's event type.
    pub fn event_type(self) -> EventType {
        match self {
            EventKind::PetCreated => EventType::PetCreated,
            EventKind::OrderPlaced => EventType::OrderPlaced,
            EventKind::OrderDelivered => EventType::OrderDelivered,
            EventKind::OrderCancelled => EventType::OrderCancelled,
            EventKind::PetOrdered | EventKind::PetSold | EventKind::PetReturned => {
                EventType::PetStatusChanged
            }
        }
    }

    /// The kinds of `event_type`.
    pub fn of_type(event_type: EventType) -> EnumSet<EventKind> {
        EventKind::ALL
            .into_iter()
            .filter(|kind| kind.event_type() == event_type)
            .collect()
    }

    /// For a status change, the animal's status before and after it.
    pub fn status_change(self) -> Option<(PetStatus, PetStatus)> {
        match self {
            EventKind::PetOrdered => Some((PetStatus::Available, PetStatus::Pending)),
            EventKind::PetSold => Some((PetStatus::Pending, PetStatus::Sold)),
            EventKind::PetReturned => Some((PetStatus::Pending, PetStatus::Available)),
            _ => None,
        }
    }

    /// For a status change, the animal's status before it: the event's
    /// `previousstatus`.
    pub fn previous_status(self) -> Option<PetStatus> {
        self.status_change().map(|(from, _)| from)
    }

    /// The animal's status change that goes with an order event of this
    /// kind (placing, delivering, cancelling), written beside it.
    pub fn pet_change(self) -> Option<EventKind> {
        match self {
            EventKind::OrderPlaced => Some(EventKind::PetOrdered),
            EventKind::OrderDelivered => Some(EventKind::PetSold),
            EventKind::OrderCancelled => Some(EventKind::PetReturned),
            _ => None,
        }
    }

    /// Whether events of this kind are about an order (and so seen only
    /// by keys that may see that order).
    pub fn is_order(self) -> bool {
        self.event_type().is_order()
    }

    /// The kinds a key with `scopes` may see, in the feed and through its
    /// webhooks: `pet.*` with `pets:read`, `order.*` with `orders:place`
    /// or `orders:manage` (whose orders, the query's owner says).
    pub fn visible_to(scopes: Scopes) -> EnumSet<EventKind> {
        let orders = scopes.contains(Scope::OrdersPlace) || scopes.contains(Scope::OrdersManage);
        let pets = scopes.contains(Scope::PetsRead);
        EventKind::ALL
            .into_iter()
            .filter(|kind| if kind.is_order() { orders } else { pets })
            .collect()
    }
}

/// Which page of the feed to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventQuery {
    /// Only events whose id is greater than this; from the oldest retained
    /// event when `None`.
    pub after: Option<i64>,
    /// At most this many events (at most [`super::LIST_MAX`]).
    pub limit: u32,
    /// Only events of these kinds (the `types` filter and what the caller
    /// may see, together).
    pub kinds: EnumSet<EventKind>,
    /// When given, order events only of this owner's orders (animal events
    /// are not filtered by it).
    pub owner: Option<OwnerId>,
}

/// An event as stored, ready to be answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its id: increasing in commit order.
    pub id: i64,
    /// What happened.
    pub kind: EventKind,
    /// When it was committed (microseconds).
    pub time: DateTime<Utc>,
    /// The resource right after the change (an order without `placedBy`).
    pub data: EventData,
}

impl StoredEvent {
    /// The resource it is about, as one number: an animal's id, or minus
    /// an order's id (what keeps one resource's deliveries in order).
    pub fn resource(&self) -> i64 {
        match &self.data {
            EventData::Pet(pet) => pet.id,
            EventData::Order(order) => -order.id,
        }
    }

    /// The event as the contract's type: what its JSON (`to_json`, a page's
    /// `encode_into`) must serialise as, byte for byte.
    pub fn to_contract(&self) -> Event {
        let previous = self.kind.previous_status();
        let event_type = self.kind.event_type();
        Event::new(self.id, event_type, self.time, previous, self.data.clone())
    }

    /// The event as the contract shows it (a CloudEvent), appended to a
    /// page.
    pub fn encode_into(&self, page: &mut EventArrayWriter) {
        page.push(
            self.id,
            self.kind.event_type(),
            &self.time,
            self.kind.previous_status(),
            (&self.data).into(),
        );
    }

    /// The event as the contract shows it (a CloudEvent), in JSON: a
    /// webhook delivery's body.
    pub fn to_json(&self) -> String {
        encode_event(
            self.id,
            self.kind.event_type(),
            &self.time,
            self.kind.previous_status(),
            (&self.data).into(),
        )
    }
}

/// A page of the feed: its events as they are stored (`Vec<StoredEvent>`), or
/// encoded as the feed answers them ([`EncodedEvents`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventPage<Events = Vec<StoredEvent>> {
    /// The events, in ascending id order.
    pub events: Events,
    /// Where the next page starts (its `after`): the last event's id when
    /// the page is full, else the last id examined (a filter may have
    /// skipped rows), else the query's `after` (or the floor without one).
    pub next_after: i64,
    /// The head this page was read up to: no event above it was examined.
    pub head: i64,
    /// Whether every event up to `head` was examined (so a later page can
    /// only find events committed after this one was read: a long poll
    /// parks, [`super::Storage::events_after`]).
    pub at_head: bool,
}

/// What reading the feed can come to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventsOutcome<Events = Vec<StoredEvent>> {
    /// A page.
    Page(EventPage<Events>),
    /// `after` is below the floor: events after it were purged.
    Expired {
        /// The largest id purged: every event above it is kept.
        floor: i64,
    },
}

impl EventsOutcome {
    /// The page's events encoded as the feed answers them.
    pub fn encoded(&self) -> EventsOutcome<EncodedEvents> {
        match self {
            EventsOutcome::Page(page) => {
                let mut events = EventArrayWriter::with_capacity(page.events.len());
                for event in &page.events {
                    event.encode_into(&mut events);
                }
                EventsOutcome::Page(EventPage {
                    events: events.finish(),
                    next_after: page.next_after,
                    head: page.head,
                    at_head: page.at_head,
                })
            }
            EventsOutcome::Expired { floor } => EventsOutcome::Expired { floor: *floor },
        }
    }
}

/// How far a page of the feed reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadTo {
    /// The head, once it has passed every change acknowledged before the
    /// page was asked for, by any instance.
    Head,
    /// The head as this instance knows it now, without waiting for what
    /// other instances acknowledged to reach it: for a long poll's reads
    /// once the head has moved, which the head's move is what prompted.
    KnownHead,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_mark() {
        let places: std::collections::BTreeSet<usize> =
            EventKind::ALL.into_iter().map(kind_index).collect();
        assert_eq!(places.len(), EventKind::ALL.len());
        assert!(places.iter().all(|&place| place < KIND_CODES));
    }

    #[test]
    fn marks_say_which_kinds_may_have_events_after_a_cursor() {
        let mut marks = KindMarks::all_at(10);
        let delivered = EnumSet::only(EventKind::OrderDelivered);
        assert!(marks.any_after(delivered, 9) && !marks.any_after(delivered, 10));
        marks.mark(EventKind::PetCreated, 15);
        marks.mark(EventKind::PetCreated, 12);
        assert!(!marks.any_after(delivered, 10));
        assert!(marks.any_after(EventKind::PetCreated | EventKind::OrderDelivered, 14));
        assert!(!marks.any_after(EnumSet::only(EventKind::PetCreated), 15));
    }
}
