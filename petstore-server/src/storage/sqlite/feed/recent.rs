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
    /// The slots, for one page's events.
    pub(super) fn lock(&self) -> Slots<'_> {
        // A panic while holding the lock left at worst one slot replaced
        // whole: every kept event is still right.
        Slots(self.slots.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The slots, locked while a page takes its events.
pub(super) struct Slots<'a>(MutexGuard<'a, Box<[Slot]>>);

impl Slots<'_> {
    /// The event `id`: kept, or made by `make` (and kept from now on when
    /// this is its second read).
    pub(super) fn event(
        &mut self,
        id: i64,
        make: impl FnOnce() -> Result<StoredEvent, StorageError>,
    ) -> Result<PageEvent, StorageError> {
        let slot = &mut self.0[slot_of(id)];
        match slot {
            Slot::Kept(kept) if kept.event().id == id => Ok(PageEvent::Kept(Arc::clone(kept))),
            Slot::Read(read) if *read == id => {
                let kept = Arc::new(EncodedEvent::new(make()?));
                *slot = Slot::Kept(Arc::clone(&kept));
                Ok(PageEvent::Kept(kept))
            }
            _ => {
                let made = make()?;
                *slot = Slot::Read(id);
                Ok(PageEvent::Made(made))
            }
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

    #[test]
    fn an_event_is_kept_on_its_second_read_and_shared_from_then_on() {
        let recent = RecentEvents::default();
        let mut slots = recent.lock();
        let first = slots.event(5, || Ok(event(5, "Rex"))).unwrap();
        assert!(!is_kept(&first));
        let second = slots.event(5, || Ok(event(5, "Rex"))).unwrap();
        assert!(is_kept(&second));
        let third = slots
            .event(5, || panic!("made again although kept"))
            .unwrap();
        assert_eq!(third, first);
        assert_eq!(third.to_json(), first.to_json());
        assert!(third.to_json().contains("\"name\":\"Rex\""));
    }

    #[test]
    fn a_later_event_in_the_same_slot_takes_it_over() {
        let recent = RecentEvents::default();
        let mut slots = recent.lock();
        let later = 5 + SLOTS as i64;
        for _ in 0..2 {
            slots.event(5, || Ok(event(5, "Rex"))).unwrap();
        }
        let taken = slots.event(later, || Ok(event(later, "Max"))).unwrap();
        assert_eq!(taken.id, later);
        let again = slots.event(5, || Ok(event(5, "Rex"))).unwrap();
        assert!(!is_kept(&again), "the slot is the later event's now");
    }

    #[test]
    fn a_failure_to_make_an_event_keeps_nothing() {
        let recent = RecentEvents::default();
        let mut slots = recent.lock();
        slots.event(9, || Ok(event(9, "Rex"))).unwrap();
        let failed = slots.event(9, || Err(StorageError::Invariant("no such animal")));
        assert!(failed.is_err());
        let made = slots.event(9, || Ok(event(9, "Rex"))).unwrap();
        assert!(is_kept(&made), "still read once before, so kept now");
    }
}
