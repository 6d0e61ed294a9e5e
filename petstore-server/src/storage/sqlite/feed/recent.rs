//! The events read again lately, kept encoded: the next page with one of
//! them copies its JSON instead of making the event from memory and
//! encoding it once more. That was most of what a page cost beyond a page
//! of pets (BENCHMARKS.md, twenty-fourth pass), and the followers of a feed
//! mostly read the same, latest, events.
//!
//! - **Kept on its second read.** The first read of an event only marks
//!   its slot; a page that reads it while the mark is still there keeps it.
//!   A reader catching up through old events reads each once, and pays for
//!   no copy it will not use again.
//! - **The latest events stay.** One slot per id modulo [`SLOTS`]; a kept
//!   event gives its slot only to a later event, so a reader catching up
//!   through old events leaves the followers' events kept. (A mark of one
//!   read gives way to any event: it would otherwise keep an older page
//!   read again and again out for good.)
//! - **Right for as long as it is kept.** An event never changes once
//!   committed, and its id is never given to another (a rolled-back
//!   group's ids come back, but pages read committed events only, and a
//!   purge raises the floor).
//! - **Bounded.** At most [`SLOTS`] events: about 450 bytes each with a
//!   name of ordinary length, 2 MiB in all; at most about 10 MiB with
//!   names of 255 characters that all need escaping.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::storage::{EncodedEvent, PageEvent, StorageError, StoredEvent};

/// How many events are kept at most: every follower's latest events, and
/// room for some older pages read again and again.
const SLOTS: usize = 4096;

/// What a slot holds.
#[derive(Clone, Default)]
enum Slot {
    #[default]
    Empty,
    /// The event with this id was read once.
    Read(i64),
    /// The event read again, encoded.
    Kept(Arc<EncodedEvent>),
}

impl Slot {
    /// Whether the event `id` may take this slot: it holds no kept
    /// event, or an earlier one (or this one).
    fn may_take(&self, id: i64) -> bool {
        match self {
            Slot::Empty | Slot::Read(_) => true,
            Slot::Kept(kept) => kept.event().id <= id,
        }
    }
}

/// The events read again lately, one slot per id modulo [`SLOTS`].
pub(in crate::storage::sqlite) struct RecentEvents {
    slots: Mutex<Box<[Slot]>>,
}

impl Default for RecentEvents {
    fn default() -> RecentEvents {
        RecentEvents {
            slots: Mutex::new(vec![Slot::Empty; SLOTS].into_boxed_slice()),
        }
    }
}

impl RecentEvents {
    /// The events of `rows` (ids `id_of`), in their order: kept, or made
    /// by `make`, and kept from now on when this is their second read.
    /// The slots are locked only to look up and to keep, never while an
    /// event is made: pages read at once on other threads wait only for
    /// those.
    pub(super) fn events<R>(
        &self,
        rows: Vec<R>,
        id_of: impl Fn(&R) -> i64,
        mut make: impl FnMut(R) -> Result<StoredEvent, StorageError>,
    ) -> Result<Vec<PageEvent>, StorageError> {
        let looked: Vec<Looked> = {
            let mut slots = self.lock();
            rows.iter()
                .map(|row| look_up(&mut slots, id_of(row)))
                .collect()
        };
        let mut made_again = Vec::new();
        let mut events = Vec::with_capacity(rows.len());
        for (row, looked) in rows.into_iter().zip(looked) {
            events.push(match looked {
                Looked::Kept(kept) => PageEvent::Kept(kept),
                Looked::Make => PageEvent::Made(make(row)?),
                Looked::MakeAndKeep => {
                    let kept = Arc::new(EncodedEvent::new(make(row)?));
                    made_again.push(Arc::clone(&kept));
                    PageEvent::Kept(kept)
                }
            });
        }
        if !made_again.is_empty() {
            let mut slots = self.lock();
            for kept in made_again {
                // (A later event may have taken the slot meanwhile.)
                let id = kept.event().id;
                let slot = &mut slots[slot_of(id)];
                if slot.may_take(id) {
                    *slot = Slot::Kept(kept);
                }
            }
        }
        Ok(events)
    }

    fn lock(&self) -> MutexGuard<'_, Box<[Slot]>> {
        // A panic while holding the lock left at worst one slot replaced
        // whole: every kept event is still right.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the slots hold of an event a page reads.
enum Looked {
    Kept(Arc<EncodedEvent>),
    /// Not read lately: made for this page only (its slot now says it was
    /// read, unless a later event is kept there).
    Make,
    /// Read once lately: made and kept.
    MakeAndKeep,
}

fn look_up(slots: &mut [Slot], id: i64) -> Looked {
    let slot = &mut slots[slot_of(id)];
    match slot {
        Slot::Kept(kept) if kept.event().id == id => Looked::Kept(Arc::clone(kept)),
        Slot::Read(read) if *read == id => Looked::MakeAndKeep,
        _ => {
            if slot.may_take(id) {
                *slot = Slot::Read(id);
            }
            Looked::Make
        }
    }
}

fn slot_of(id: i64) -> usize {
    // Ids are positive; `rem_euclid` keeps the slot in range for any.
    usize::try_from(id.rem_euclid(SLOTS as i64)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::EventKind;
    use petstore_api::model::{EventData, Pet};

    fn event(id: i64, name: &str) -> StoredEvent {
        StoredEvent {
            id,
            kind: EventKind::PetCreated,
            time: chrono::DateTime::from_timestamp(1_795_305_600, 0).unwrap(),
            data: EventData::Pet(Pet {
                id,
                name: name.to_owned(),
                category_id: 1,
                status: None,
            }),
        }
    }

    fn is_kept(event: &PageEvent) -> bool {
        matches!(event, PageEvent::Kept(_))
    }

    /// The events `ids` as a page reads them, each made with `name`.
    fn read(recent: &RecentEvents, ids: &[i64], name: &str) -> Vec<PageEvent> {
        recent
            .events(ids.to_vec(), |id| *id, |id| Ok(event(id, name)))
            .unwrap()
    }

    #[test]
    fn an_event_is_kept_on_its_second_read_and_shared_from_then_on() {
        let recent = RecentEvents::default();
        let first = read(&recent, &[5, 6], "Rex");
        assert!(!first.iter().any(is_kept));
        let second = read(&recent, &[5, 6, 7], "Rex");
        assert_eq!(
            second.iter().map(is_kept).collect::<Vec<_>>(),
            [true, true, false]
        );
        let third = recent
            .events(vec![5, 6], |id| *id, |_| panic!("made again although kept"))
            .unwrap();
        assert_eq!(third, first);
        assert_eq!(third[0].to_json(), first[0].to_json());
        assert!(third[0].to_json().contains("\"name\":\"Rex\""));
    }

    #[test]
    fn a_later_event_in_the_same_slot_takes_it_over() {
        let recent = RecentEvents::default();
        let later = 5 + SLOTS as i64;
        read(&recent, &[5], "Rex");
        read(&recent, &[5], "Rex");
        let taken = read(&recent, &[later], "Max");
        assert_eq!(taken[0].id, later);
        let again = read(&recent, &[5], "Rex");
        assert!(!is_kept(&again[0]), "the slot is the later event's now");
    }

    #[test]
    fn a_mark_of_one_read_gives_way_to_an_older_event_read_again() {
        let recent = RecentEvents::default();
        let later = 5 + SLOTS as i64;
        read(&recent, &[later], "Max");
        read(&recent, &[5], "Rex");
        assert!(is_kept(&read(&recent, &[5], "Rex")[0]));
    }

    #[test]
    fn a_reader_catching_up_leaves_the_latest_events_kept() {
        let recent = RecentEvents::default();
        let latest: Vec<i64> = (2 * SLOTS as i64..).take(20).collect();
        read(&recent, &latest, "Rex");
        read(&recent, &latest, "Rex");
        // Every slot, read once and twice by a reader of older events.
        let older: Vec<i64> = (1..=SLOTS as i64).collect();
        read(&recent, &older, "Old");
        let catching_up = read(&recent, &older, "Old");
        assert_eq!(
            catching_up.iter().filter(|e| is_kept(e)).count(),
            SLOTS - 20
        );
        let followers = recent
            .events(
                latest.clone(),
                |id| *id,
                |_| panic!("made again although kept"),
            )
            .unwrap();
        assert_eq!(followers.iter().map(|e| e.id).collect::<Vec<_>>(), latest);
    }

    #[test]
    fn a_failure_to_make_an_event_fails_the_page_and_keeps_nothing() {
        let recent = RecentEvents::default();
        read(&recent, &[9], "Rex");
        let failed = recent.events(
            vec![9],
            |id| *id,
            |_| Err(StorageError::Invariant("no such animal")),
        );
        assert!(failed.is_err());
        let made = read(&recent, &[9], "Rex");
        assert!(is_kept(&made[0]), "still read once before, so kept now");
    }
}
