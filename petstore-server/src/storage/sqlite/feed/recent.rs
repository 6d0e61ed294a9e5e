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
//! - **Right for as long as it is kept.** An event never changes once
//!   committed, and its id is never given to another (a rolled-back
//!   group's ids come back, but pages read committed events only, and a
//!   purge raises the floor).
//! - **Bounded.** One slot per id modulo [`SLOTS`]: a later event in the
//!   same slot takes it over, so what is kept stays within a couple of
//!   megabytes however long the feed.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::storage::{EncodedEvent, PageEvent, StorageError, StoredEvent};

/// How many events are kept at most: the pages of 200 followers, each
/// reading 20 different events.
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
    /// event is made: pages read at once on other threads do not wait.
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
                Looked::ReadFirst => PageEvent::Made(make(row)?),
                Looked::ReadAgain => {
                    let kept = Arc::new(EncodedEvent::new(make(row)?));
                    made_again.push(Arc::clone(&kept));
                    PageEvent::Kept(kept)
                }
            });
        }
        if !made_again.is_empty() {
            let mut slots = self.lock();
            for kept in made_again {
                // (Whatever took the slot meanwhile gives way: any event
                // kept is right for its id.)
                let slot = slot_of(kept.event().id);
                slots[slot] = Slot::Kept(kept);
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
    /// Not read lately: made for this page only; its slot now says it was
    /// read.
    ReadFirst,
    /// Read once lately: made and kept.
    ReadAgain,
}

fn look_up(slots: &mut [Slot], id: i64) -> Looked {
    let slot = &mut slots[slot_of(id)];
    match slot {
        Slot::Kept(kept) if kept.event().id == id => Looked::Kept(Arc::clone(kept)),
        Slot::Read(read) if *read == id => Looked::ReadAgain,
        _ => {
            *slot = Slot::Read(id);
            Looked::ReadFirst
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
