//! The events read again lately, kept encoded: the next page with one of
//! them copies its JSON instead of writing it from memory once more. The
//! followers of a feed mostly read the same, latest, events (BENCHMARKS.md,
//! twenty-fourth and twenty-fifth passes).
//!
//! - **Kept on its second read.** The first read of an event only marks
//!   its slot; a page that reads it while the mark is still there keeps
//!   what it wrote. A reader catching up through old events reads each
//!   once, and pays for no copy it will not use again.
//! - **The latest events stay.** One slot per id modulo [`SLOTS`]; a kept
//!   event gives its slot only to a later event, so a reader catching up
//!   through old events leaves the followers' events kept. (A mark of one
//!   read gives way to any event: it would otherwise keep an older page
//!   read again and again out for good.)
//! - **Right for as long as it is kept.** An event never changes once
//!   committed, and its id is never given to another (a rolled-back
//!   group's ids come back, but pages read committed events only, and a
//!   purge raises the floor). Its JSON depends on nothing else: the owner
//!   and type filters choose events, not what they say.
//! - **Bounded.** At most [`SLOTS`] events' JSON: about 250 bytes each with
//!   a name of ordinary length, 1 MiB in all; at most about 5 MiB with
//!   names of 255 characters of four bytes each (the longest a name can
//!   be written: it holds no control character to escape).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::storage::StorageError;
use petstore_api::model::{EncodedEvents, EventArrayWriter};

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
    /// The event with this id, read again: its JSON.
    Kept(i64, Arc<str>),
}

impl Slot {
    /// Whether the event `id` may take this slot: it holds no kept
    /// event, or an earlier one (or this one).
    fn may_take(&self, id: i64) -> bool {
        match self {
            Slot::Empty | Slot::Read(_) => true,
            Slot::Kept(kept, _) => *kept <= id,
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
    /// The JSON array of the events of `rows` (ids `id_of`), in their
    /// order: each copied from its kept JSON, or written by `write`, and
    /// kept from now on when this is its second read. The slots are locked
    /// only to look up and to keep, never while an event is written: pages
    /// read at once on other threads wait only for those.
    pub(super) fn encode<R>(
        &self,
        rows: &[R],
        id_of: impl Fn(&R) -> i64,
        mut write: impl FnMut(&R, &mut EventArrayWriter) -> Result<(), StorageError>,
    ) -> Result<EncodedEvents, StorageError> {
        if rows.is_empty() {
            return Ok(EventArrayWriter::with_capacity(0).finish());
        }
        let looked: Vec<Looked> = {
            let mut slots = self.lock();
            rows.iter()
                .map(|row| look_up(&mut slots, id_of(row)))
                .collect()
        };
        let mut page = EventArrayWriter::with_capacity(rows.len());
        let mut written_again = Vec::new();
        for (row, looked) in rows.iter().zip(looked) {
            match looked {
                Looked::Kept(json) => page.push_encoded(&json),
                Looked::Write => write(row, &mut page)?,
                Looked::WriteAndKeep => {
                    let before = page.count();
                    write(row, &mut page)?;
                    // Kept only if `write` appended this row's event, so
                    // that no other event's JSON is ever kept for it.
                    if page.count() == before + 1 {
                        written_again.push((id_of(row), Arc::from(page.last_event())));
                    }
                }
            }
        }
        if !written_again.is_empty() {
            let mut slots = self.lock();
            for (id, json) in written_again {
                // (A later event may have taken the slot meanwhile.)
                let slot = &mut slots[slot_of(id)];
                if slot.may_take(id) {
                    *slot = Slot::Kept(id, json);
                }
            }
        }
        Ok(page.finish())
    }

    fn lock(&self) -> MutexGuard<'_, Box<[Slot]>> {
        // A panic while holding the lock left at worst one slot replaced
        // whole: every kept event is still right.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the slots hold of an event a page reads.
enum Looked {
    Kept(Arc<str>),
    /// Not read lately: written for this page only (its slot now says it
    /// was read, unless a later event is kept there).
    Write,
    /// Read once lately: written and kept.
    WriteAndKeep,
}

fn look_up(slots: &mut [Slot], id: i64) -> Looked {
    let slot = &mut slots[slot_of(id)];
    match slot {
        Slot::Kept(kept, json) if *kept == id => Looked::Kept(Arc::clone(json)),
        Slot::Read(read) if *read == id => Looked::WriteAndKeep,
        _ => {
            if slot.may_take(id) {
                *slot = Slot::Read(id);
            }
            Looked::Write
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
    use petstore_api::model::{EventDataRef, EventType};

    /// Writes the event `id` about an animal named `name`.
    fn write(id: i64, name: &str, page: &mut EventArrayWriter) {
        let time = chrono::DateTime::from_timestamp(1_795_305_600, 0).unwrap();
        let pet = EventDataRef::Pet {
            id,
            name,
            category_id: 1,
            status: None,
        };
        page.push(id, EventType::PetCreated, &time, None, pet);
    }

    /// The page of `events` (ids and names) written fresh.
    fn fresh(events: &[(i64, &str)]) -> Vec<u8> {
        let mut page = EventArrayWriter::with_capacity(events.len());
        events
            .iter()
            .for_each(|&(id, name)| write(id, name, &mut page));
        page.finish().into_bytes()
    }

    /// Reads the events `ids` (each written with `name` when it is
    /// written); returns the page and which ids were written.
    fn read(recent: &RecentEvents, ids: &[i64], name: &str) -> (Vec<u8>, Vec<i64>) {
        let mut written = Vec::new();
        let page = recent
            .encode(
                ids,
                |id| *id,
                |id, page| {
                    written.push(*id);
                    write(*id, name, page);
                    Ok(())
                },
            )
            .unwrap();
        (page.into_bytes(), written)
    }

    #[test]
    fn an_event_is_kept_on_its_second_read_and_copied_from_then_on() {
        let recent = RecentEvents::default();
        let (first, written) = read(&recent, &[5, 6], "Rex");
        assert_eq!(written, [5, 6]);
        assert_eq!(first, fresh(&[(5, "Rex"), (6, "Rex")]));
        let (second, written) = read(&recent, &[5, 6, 7], "Rex");
        assert_eq!(written, [5, 6, 7], "written, and kept, on the second read");
        assert_eq!(second, fresh(&[(5, "Rex"), (6, "Rex"), (7, "Rex")]));
        // Copied from now on: the name given here is never written.
        let (third, written) = read(&recent, &[7, 5, 6], "Max");
        assert_eq!(written, [7]);
        assert_eq!(third, fresh(&[(7, "Max"), (5, "Rex"), (6, "Rex")]));
    }

    #[test]
    fn a_later_event_in_the_same_slot_takes_it_over() {
        let recent = RecentEvents::default();
        let later = 5 + SLOTS as i64;
        read(&recent, &[5], "Rex");
        read(&recent, &[5], "Rex");
        read(&recent, &[later], "Max");
        read(&recent, &[later], "Max");
        let (copied, written) = read(&recent, &[later], "Rex");
        assert!(written.is_empty());
        assert_eq!(copied, fresh(&[(later, "Max")]));
        assert!(
            read(&recent, &[later], "Max").1.is_empty(),
            "copied, not written"
        );
        let (_, written) = read(&recent, &[5], "Rex");
        assert_eq!(written, [5], "the slot is the later event's now");
    }

    #[test]
    fn a_mark_of_one_read_gives_way_to_an_older_event_read_again() {
        let recent = RecentEvents::default();
        let later = 5 + SLOTS as i64;
        read(&recent, &[later], "Max");
        read(&recent, &[5], "Rex");
        read(&recent, &[5], "Rex");
        assert!(
            read(&recent, &[5], "Rex").1.is_empty(),
            "copied, not written"
        );
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
        read(&recent, &older, "Old");
        let (_, written) = read(&recent, &older, "Old");
        assert_eq!(written.len(), 20, "kept but where the latest are");
        let (followers, written) = read(&recent, &latest, "Rex");
        assert!(written.is_empty(), "copied, not written");
        let rex: Vec<(i64, &str)> = latest.iter().map(|&id| (id, "Rex")).collect();
        assert_eq!(followers, fresh(&rex));
    }

    #[test]
    fn a_row_written_as_no_event_keeps_nothing() {
        let recent = RecentEvents::default();
        read(&recent, &[3, 9], "Rex");
        let skipped = recent
            .encode(
                &[3, 9],
                |id| *id,
                |id, page| {
                    if *id == 3 {
                        write(*id, "Rex", page);
                    }
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!(skipped.into_bytes(), fresh(&[(3, "Rex")]));
        let (again, written) = read(&recent, &[3, 9], "Rex");
        assert_eq!(written, [9], "3 was kept, 9 was not");
        assert_eq!(again, fresh(&[(3, "Rex"), (9, "Rex")]));
    }

    #[test]
    fn a_failure_to_write_an_event_fails_the_page_and_keeps_nothing() {
        let recent = RecentEvents::default();
        read(&recent, &[9], "Rex");
        let failed = recent.encode(
            &[9],
            |id| *id,
            |_, _| Err(StorageError::Invariant("no such animal")),
        );
        assert!(failed.is_err());
        let (_, written) = read(&recent, &[9], "Rex");
        assert_eq!(written, [9], "still read once before, so kept now");
        assert!(
            read(&recent, &[9], "Rex").1.is_empty(),
            "copied, not written"
        );
    }
}
