//! The feed as memory holds it: the floor, how many events are retained
//! and the oldest one's time (for the figures), and every retained event
//! in columns, so that a page costs what a page of pets does at any depth.
//!
//! 18 bytes an event (up to twice that while the columns grow: they double,
//! as the catalogue's do, and keep their room after a purge). An animal has
//! one event of its own, and each of its orders at most four (placed and
//! ordered, then delivered and sold or cancelled and returned), and memory
//! holds every animal and order already: the events add about 18 bytes an
//! animal and 72 an order, less what retention purges. (Memory kept only the last 2^20 events
//! before, and older pages were read from the file: 4.7 times a page of
//! pets, BENCHMARKS.md, "Issue 28, fifth pass".)

use std::collections::VecDeque;

use enumset::EnumSet;
use rusqlite::Connection;
use rusqlite::types::{Type, ValueRef};

use super::super::schema::sqlite;
use super::log::{Purged, RetainedEvent};
use super::recent::RecentEvents;
use crate::storage::parked::Found;
use crate::storage::{EventKind, KindMarks, StorageError};
use petstore_api::model::PetStatus;

/// The feed in memory: changed only by the writer, after each commit that
/// wrote or purged events, before the head moves.
pub(in crate::storage::sqlite) struct Feed {
    /// The largest id purged.
    pub(super) floor: i64,
    /// How many events are retained.
    pub(in crate::storage::sqlite) count: u64,
    /// The time of the smallest id retained (microseconds).
    oldest: Option<i64>,
    /// Every retained event.
    pub(super) retained: Retained,
    /// For each kind, an id that none of that kind exceeds: the last one
    /// appended, or the head at start-up.
    last_of_kind: KindMarks,
    /// The events pages read again lately, as JSON.
    pub(super) recent: RecentEvents,
}

impl Feed {
    /// What the database holds of the feed, every retained event with it
    /// (once, at start-up).
    pub(in crate::storage::sqlite) fn load(conn: &Connection) -> Result<Feed, StorageError> {
        let sql = sqlite("loading the feed");
        let (floor, count, oldest, head) = conn
            .query_row(
                "SELECT floor, (SELECT count(*) FROM events),
                        (SELECT at FROM events ORDER BY id LIMIT 1),
                        coalesce((SELECT max(id) FROM events), floor)
                 FROM events_floor",
                [],
                |row| {
                    Ok((
                        row.get(0)?,
                        row.get::<_, i64>(1)?,
                        row.get(2)?,
                        row.get::<_, i64>(3)?,
                    ))
                },
            )
            .map_err(&sql)?;
        let mut feed = Feed {
            floor,
            count: count.unsigned_abs(),
            oldest,
            retained: Retained::default(),
            last_of_kind: KindMarks::all_at(head),
            recent: RecentEvents::default(),
        };
        let mut select = conn
            .prepare(
                "SELECT id, kind, at, coalesce(order_id, pet_id), created_status FROM events
                 WHERE id > ?1 ORDER BY id",
            )
            .map_err(&sql)?;
        let mut rows = select.query([floor]).map_err(&sql)?;
        while let Some(row) = rows.next().map_err(&sql)? {
            let id = row.get(0).map_err(&sql)?;
            let created = match row.get_ref(4).map_err(&sql)? {
                ValueRef::Null => None,
                status => Some(decode_status(id, status).map_err(&sql)?),
            };
            feed.retained.push(RetainedEvent {
                id,
                kind: decode_kind(id, row.get(1).map_err(&sql)?).map_err(&sql)?,
                at: row.get(2).map_err(&sql)?,
                subject: row.get(3).map_err(&sql)?,
                created,
            });
        }
        Ok(feed)
    }

    /// A group committed these events (in id order).
    pub(in crate::storage::sqlite) fn append(&mut self, events: &[RetainedEvent]) {
        let Some(first) = events.first() else {
            return;
        };
        self.count += events.len() as u64;
        self.oldest.get_or_insert(first.at);
        for event in events {
            self.retained.push(*event);
            self.last_of_kind.mark(event.kind, event.id);
        }
    }

    /// Whether an event of one of `kinds` may have an id above `after`.
    pub(in crate::storage::sqlite) fn any_of_after(
        &self,
        kinds: EnumSet<EventKind>,
        after: i64,
    ) -> bool {
        self.last_of_kind.any_after(kinds, after)
    }

    /// What the scout's look for parked polls (`storage/parked.rs`) after
    /// `from` up to the head `to` finds: each kind with an event after
    /// `from`, at its last id, or at `to` when that id is beyond it; and
    /// the floor. (Memory may hold a commit the head has not reached yet.
    /// Marked at `to`, a poll below it reads up to the head, and one at `to`
    /// waits for the next look, rather than reading below the head again
    /// and again.)
    pub(in crate::storage::sqlite) fn last_of_each(&self, from: i64, to: i64) -> Found {
        let kinds = EventKind::ALL
            .into_iter()
            .map(|kind| (kind, self.last_of_kind.of(kind)))
            .filter(|&(_, last)| last > from)
            .map(|(kind, last)| (kind, last.min(to)))
            .collect();
        Found {
            kinds,
            floor: self.floor,
        }
    }

    /// A purge committed.
    pub(in crate::storage::sqlite) fn purged(&mut self, purged: &Purged) {
        self.count = self.count.saturating_sub(purged.count as u64);
        self.oldest = purged.oldest;
        if let Some(floor) = purged.floor {
            self.floor = self.floor.max(floor);
            while self.retained.first().is_some_and(|first| first <= floor) {
                self.retained.pop_front();
            }
        }
    }

    /// The oldest event's time.
    pub(in crate::storage::sqlite) fn oldest(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.oldest.map(super::super::rows::micros_to_time)
    }
}

/// The kind stored as `code` in the event `id`.
fn decode_kind(id: i64, code: i64) -> rusqlite::Result<EventKind> {
    EventKind::from_code(code).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(1, format!("kind of event {id}: {code}"), Type::Integer)
    })
}

/// The status stored as `created_status` in the event `id`.
fn decode_status(id: i64, status: ValueRef<'_>) -> rusqlite::Result<PetStatus> {
    let text = status.as_str().ok();
    text.and_then(PetStatus::parse).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(
            4,
            format!("created_status of event {id}: {text:?}"),
            Type::Text,
        )
    })
}

/// The retained events, consecutive ids in columns (the writer assigns
/// them consecutively, so an id is found by subtraction).
#[derive(Default)]
pub(super) struct Retained {
    /// The first event's id.
    first: i64,
    kinds: VecDeque<EventKind>,
    created: VecDeque<Option<PetStatus>>,
    at: VecDeque<i64>,
    subjects: VecDeque<i64>,
}

impl Retained {
    pub(super) fn len(&self) -> usize {
        self.kinds.len()
    }

    /// The first event's id, if there is one.
    pub(super) fn first(&self) -> Option<i64> {
        (self.len() > 0).then_some(self.first)
    }

    /// The last event's id, if there is one.
    pub(super) fn last(&self) -> Option<i64> {
        (self.len() > 0).then(|| self.first + self.len() as i64 - 1)
    }

    /// The event `id`, if it is retained.
    pub(super) fn get(&self, id: i64) -> Option<RetainedEvent> {
        let at = usize::try_from(id.checked_sub(self.first)?).ok()?;
        Some(RetainedEvent {
            id,
            kind: *self.kinds.get(at)?,
            at: self.at[at],
            subject: self.subjects[at],
            created: self.created[at],
        })
    }

    /// Appends `event`. Ids are consecutive; should one not follow the
    /// last (ids missing from the file), the retained events start again
    /// from it, so that they never hold a gap a page would take for the
    /// head (a page from before the gap then fails as a bug would: memory
    /// lacks it).
    fn push(&mut self, event: RetainedEvent) {
        if self.last().is_some_and(|last| last + 1 != event.id) {
            *self = Retained::default();
        }
        if self.len() == 0 {
            self.first = event.id;
        }
        self.kinds.push_back(event.kind);
        self.created.push_back(event.created);
        self.at.push_back(event.at);
        self.subjects.push_back(event.subject);
    }

    fn pop_front(&mut self) {
        if self.kinds.pop_front().is_some() {
            self.created.pop_front();
            self.at.pop_front();
            self.subjects.pop_front();
            self.first += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64) -> RetainedEvent {
        RetainedEvent {
            id,
            kind: EventKind::PetCreated,
            at: id * 10,
            subject: id + 100,
            created: None,
        }
    }

    #[test]
    fn the_retained_events_are_found_by_id_and_starts_again_after_a_gap() {
        let mut retained = Retained::default();
        assert_eq!((retained.first(), retained.last()), (None, None));
        (5..=7).for_each(|id| retained.push(event(id)));
        assert_eq!((retained.first(), retained.last()), (Some(5), Some(7)));
        assert_eq!(retained.get(6).map(|e| (e.at, e.subject)), Some((60, 106)));
        assert!(retained.get(4).is_none() && retained.get(8).is_none());
        retained.pop_front();
        assert_eq!(
            (retained.first(), retained.get(5).is_none()),
            (Some(6), true)
        );
        // Ids missing from the file: only what follows is retained.
        retained.push(event(10));
        assert_eq!((retained.first(), retained.last()), (Some(10), Some(10)));
        assert!(retained.get(7).is_none());
    }

    #[test]
    fn a_look_finds_each_kind_s_last_id_after_its_start_and_none_past_the_head() {
        let mut feed = Feed {
            floor: 2,
            count: 0,
            oldest: None,
            retained: Retained::default(),
            last_of_kind: KindMarks::all_at(2),
            recent: RecentEvents::default(),
        };
        let of_kind = |id, kind| RetainedEvent { kind, ..event(id) };
        feed.append(&[
            of_kind(3, EventKind::PetCreated),
            of_kind(4, EventKind::OrderPlaced),
            of_kind(5, EventKind::PetOrdered),
            of_kind(6, EventKind::PetCreated),
        ]);
        // Up to the head 5: the animal created at 6 is in memory before the
        // head passed it; its kind is marked at the head.
        let found = feed.last_of_each(3, 5);
        let kinds = [
            (EventKind::PetCreated, 5),
            (EventKind::OrderPlaced, 4),
            (EventKind::PetOrdered, 5),
        ];
        assert_eq!((found.kinds, found.floor), (kinds.to_vec(), 2));
        let found = feed.last_of_each(5, 6);
        assert_eq!(found.kinds, [(EventKind::PetCreated, 6)]);
        assert!(feed.last_of_each(6, 6).kinds.is_empty());
    }
}
