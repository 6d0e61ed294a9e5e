//! Pages of the feed that stop short of the head, kept encoded, so that a
//! page asked for again is answered from memory, without the database.
//!
//! - **Why it may be kept.** A page that stops short of the head (its
//!   `at_head` is false) examined only events below the head, and no event
//!   can still appear there (`head.rs`): the same query answers the same
//!   page at any later head. Followers reading the same stretch of the feed
//!   (several consumers catching up, a consumer started again from its
//!   cursor) read it from the database once. A page that reached the head
//!   is read each time: a later one may hold more.
//! - **While the floor is known.** A purge changes what a query answers
//!   from below the new floor: a cursor there has expired, and a page from
//!   the floor starts later. So once the floor rises, only the pages after
//!   a cursor at or above it stay; a page read while it rose is not kept.
//!   The floor is the head's (`Head::floor`): read by every round (every
//!   200 ms at the least), and raised as soon as this instance's purge is
//!   answered. Kept pages are answered only while the rounds read the
//!   floor (the last asked within half a second, and none failed since):
//!   not while the database does not answer the head, and at most half a
//!   second after another instance's purge (in between, this instance
//!   answers a cursor just purged from a page it kept, as it would have a
//!   moment before). A new connection of the head's (the database may have
//!   been restored or failed over) lets every page go.
//! - **Bounded.** At most [`KEPT_BYTES`], counting each page's JSON and
//!   [`ENTRY_COST`] for what keeping it takes besides (a query can be made
//!   to keep many empty pages); past it, the page read least recently goes
//!   first.
//!
//! Only `listEvents`' pages to the head are kept (`encoded_events`); the
//! webhooks' fan-out reads the events as stored.

use std::sync::{Arc, Mutex, MutexGuard};

use hashlink::LinkedHashMap;
use petstore_api::model::EncodedEvents;

use super::head::Floor;
use crate::storage::{EventPage, EventQuery, EventsOutcome};

/// The most the kept pages take: about 850 pages of 20 events, 180 of 100,
/// or 16,000 empty ones.
pub(super) const KEPT_BYTES: usize = 4 << 20;

/// What keeping a page takes besides its JSON, about: the query, the page's
/// other fields, its allocation, the map's node and slot.
pub(super) const ENTRY_COST: usize = 256;

/// The pages kept, by query.
pub(super) struct KeptPages {
    kept: Mutex<Kept>,
}

struct Kept {
    /// The floor every kept page holds at (none before the first).
    floor: Option<Floor>,
    /// The least recently read first.
    pages: LinkedHashMap<EventQuery, Arc<EventPage<EncodedEvents>>>,
    /// What they take, together (see [`cost`]).
    bytes: usize,
}

impl KeptPages {
    pub fn new() -> KeptPages {
        KeptPages {
            kept: Mutex::new(Kept {
                floor: None,
                pages: LinkedHashMap::new(),
                bytes: 0,
            }),
        }
    }

    /// The page kept for `query`, if the floor is known (`floor`).
    pub fn get(
        &self,
        query: &EventQuery,
        floor: Option<Floor>,
    ) -> Option<EventsOutcome<EncodedEvents>> {
        let page = {
            let mut kept = self.lock();
            if !kept.at(floor?) {
                return None;
            }
            Arc::clone(kept.pages.to_back(query)?)
        };
        Some(EventsOutcome::Page(EventPage::clone(&page)))
    }

    /// Keeps what `query` read, if it is a page that stops short of the
    /// head, and the floor was known and the same before it was read
    /// (`floor_before`) and after (`floor_after`).
    pub fn keep(
        &self,
        query: EventQuery,
        outcome: &EventsOutcome<EncodedEvents>,
        floor_before: Option<Floor>,
        floor_after: Option<Floor>,
    ) {
        let EventsOutcome::Page(page) = outcome else {
            return;
        };
        let bytes = cost(page);
        if page.at_head
            || floor_before.is_none()
            || floor_before != floor_after
            || bytes > KEPT_BYTES
        {
            return;
        }
        let page = Arc::new(page.clone());
        let mut kept = self.lock();
        if kept.floor != floor_after {
            return;
        }
        if let Some(before) = kept.pages.remove(&query) {
            kept.bytes -= cost(&before);
        }
        while kept.bytes + bytes > KEPT_BYTES {
            let Some((_, oldest)) = kept.pages.pop_front() else {
                break;
            };
            kept.bytes -= cost(&oldest);
        }
        kept.pages.insert(query, page);
        kept.bytes += bytes;
    }

    fn lock(&self) -> MutexGuard<'_, Kept> {
        // Every change leaves the pages and their length in step before
        // anything that could panic.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What keeping `page` takes, counted against [`KEPT_BYTES`].
fn cost(page: &EventPage<EncodedEvents>) -> usize {
    page.events.byte_len() + ENTRY_COST
}

impl Kept {
    /// Brings the pages to the floor `now`, and says whether they hold at
    /// it: a floor that rose lets go the pages from below it; a newer
    /// connection's, every page; an older one (read before another request
    /// saw it rise, or on the connection before) is not theirs.
    fn at(&mut self, now: Floor) -> bool {
        match self.floor {
            Some(floor) if floor == now => return true,
            Some(floor) if (floor.session, floor.floor) > (now.session, now.floor) => {
                return false;
            }
            Some(floor) if floor.session == now.session => {
                // Still the same answer: every event after such a cursor
                // is above the floor.
                self.pages
                    .retain(|query, _| query.after.is_some_and(|after| after >= now.floor));
            }
            _ => self.pages.clear(),
        }
        self.bytes = self.pages.values().map(|page| cost(page)).sum();
        self.floor = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use enumset::EnumSet;
    use petstore_api::model::{EventArrayWriter, EventDataRef, EventType};

    use super::*;
    use crate::storage::{EventKind, OwnerId};

    fn query(after: i64) -> EventQuery {
        EventQuery {
            after: Some(after),
            limit: 2,
            kinds: EnumSet::all(),
            owner: None,
        }
    }

    /// The floor `floor` as read on the head's connection 1.
    fn floor(floor: i64) -> Option<Floor> {
        Some(Floor { session: 1, floor })
    }

    /// A page of `count` events after `after`, each of about 200 bytes.
    fn page(after: i64, count: i64, at_head: bool) -> EventsOutcome<EncodedEvents> {
        let time = chrono::DateTime::UNIX_EPOCH;
        let mut events = EventArrayWriter::with_capacity(count as usize);
        for id in after + 1..=after + count {
            let data = EventDataRef::Pet {
                id,
                name: "Rex",
                category_id: 1,
                status: None,
            };
            events.push(id, EventType::PetCreated, &time, None, data);
        }
        EventsOutcome::Page(EventPage {
            events: events.finish(),
            next_after: after + count,
            head: after + count + 1,
            at_head,
        })
    }

    /// Pages kept at `floor`, after each of `afters`.
    fn kept_at(at: Option<Floor>, afters: &[i64]) -> KeptPages {
        let kept = KeptPages::new();
        // As in `encoded_events`, a look first: the pages take its floor.
        assert_eq!(kept.get(&query(-1), at), None);
        for &after in afters {
            assert_eq!(kept.get(&query(after), at), None);
            kept.keep(query(after), &page(after, 2, false), at, at);
        }
        kept
    }

    #[test]
    fn a_page_short_of_the_head_is_kept_for_its_query_alone() {
        let kept = kept_at(floor(0), &[0]);
        assert_eq!(kept.get(&query(0), floor(0)), Some(page(0, 2, false)));
        let others = [
            EventQuery {
                limit: 3,
                ..query(0)
            },
            EventQuery {
                owner: Some(OwnerId([1; 32])),
                ..query(0)
            },
            EventQuery {
                kinds: EnumSet::only(EventKind::PetCreated),
                ..query(0)
            },
            query(1),
        ];
        for other in others {
            assert_eq!(kept.get(&other, floor(0)), None, "{other:?}");
        }
    }

    #[test]
    fn a_page_at_the_head_is_not_kept() {
        let kept = kept_at(floor(0), &[]);
        kept.keep(query(5), &page(5, 1, true), floor(0), floor(0));
        assert_eq!(kept.get(&query(5), floor(0)), None);
    }

    #[test]
    fn a_floor_that_rises_lets_go_the_pages_from_below_it() {
        let kept = kept_at(floor(3), &[3, 4, 10]);
        let from_the_floor = EventQuery {
            after: None,
            ..query(0)
        };
        kept.keep(from_the_floor, &page(3, 2, false), floor(3), floor(3));
        assert!(kept.get(&from_the_floor, floor(3)).is_some());
        assert!(kept.get(&query(10), floor(4)).is_some(), "above it");
        assert!(kept.get(&query(4), floor(4)).is_some(), "at it");
        assert_eq!(kept.get(&query(3), floor(4)), None, "expired");
        assert_eq!(kept.get(&from_the_floor, floor(4)), None, "starts later");
        assert_eq!(kept.lock().pages.len(), 2, "gone, not hidden");
        // A floor read before the rise is not theirs.
        assert!(kept.get(&query(10), floor(3)).is_none());
        assert!(kept.get(&query(10), floor(4)).is_some());
    }

    #[test]
    fn without_a_floor_known_nothing_is_answered_or_kept() {
        let kept = kept_at(floor(0), &[0]);
        assert_eq!(kept.get(&query(0), None), None);
        kept.keep(query(7), &page(7, 2, false), None, None);
        assert_eq!(kept.get(&query(7), floor(0)), None);
        assert!(kept.get(&query(0), floor(0)).is_some(), "kept meanwhile");
    }

    #[test]
    fn a_page_read_while_the_floor_moved_is_not_kept() {
        // The pages at the floor the read ended with…
        let kept = kept_at(floor(4), &[]);
        kept.keep(query(10), &page(10, 2, false), floor(3), floor(4));
        assert_eq!(kept.get(&query(10), floor(4)), None);
        // … or at a later one than it had throughout.
        kept.keep(query(10), &page(10, 2, false), floor(3), floor(3));
        assert_eq!(kept.get(&query(10), floor(4)), None);
        assert_eq!(kept.lock().pages.len(), 0);
    }

    #[test]
    fn a_newer_connection_of_the_heads_lets_every_page_go() {
        let kept = kept_at(floor(3), &[10]);
        let restored = Some(Floor {
            session: 2,
            floor: 0,
        });
        assert_eq!(kept.get(&query(10), restored), None);
        assert_eq!(kept.lock().pages.len(), 0);
        kept.keep(query(20), &page(20, 2, false), restored, restored);
        // A floor read on the connection before is not theirs.
        assert_eq!(kept.get(&query(20), floor(3)), None);
        assert!(kept.get(&query(20), restored).is_some());
    }

    #[test]
    fn empty_pages_count_against_the_bound_too() {
        let kept = kept_at(floor(0), &[]);
        for after in 0..(KEPT_BYTES / ENTRY_COST) as i64 {
            kept.keep(query(after), &page(after, 0, false), floor(0), floor(0));
        }
        let kept = kept.lock();
        assert!(kept.bytes <= KEPT_BYTES);
        assert!(kept.pages.len() < KEPT_BYTES / ENTRY_COST);
    }

    #[test]
    fn past_the_bound_the_page_read_least_recently_goes_first() {
        let kept = kept_at(floor(0), &[]);
        // Ids of as many digits each: pages of as many bytes.
        let first = 1_000_000;
        let EventsOutcome::Page(one) = page(first, 20, false) else {
            unreachable!()
        };
        let fit = KEPT_BYTES / cost(&one);
        for n in 0..fit as i64 {
            let after = first + n * 100;
            kept.keep(query(after), &page(after, 20, false), floor(0), floor(0));
        }
        assert_eq!(kept.lock().pages.len(), fit, "all fit");
        // The first read again: the second is now the least recent.
        assert!(kept.get(&query(first), floor(0)).is_some());
        let last = first + fit as i64 * 100;
        kept.keep(query(last), &page(last, 20, false), floor(0), floor(0));
        assert!(kept.get(&query(first), floor(0)).is_some());
        assert_eq!(kept.get(&query(first + 100), floor(0)), None);
        assert!(kept.get(&query(last), floor(0)).is_some());
        assert!(kept.lock().bytes <= KEPT_BYTES);
    }

    /// On a database: a page that stopped short of the head is answered
    /// again without the database (changed behind the storage's back, the
    /// rows show only in pages read anew), until a purge.
    mod on_postgres {
        use petstore_api::model::NewPet;
        use petstore_support::postgres::TestDatabase;
        use petstore_support::{SOON, eventually_some, within};

        use super::*;
        use crate::storage::{PostgresStorage, PostgresUrl, ReadTo, Storage};

        /// The first two events of three.
        const FIRST_TWO: EventQuery = EventQuery {
            after: Some(0),
            limit: 2,
            kinds: EnumSet::all(),
            owner: None,
        };

        async fn open(database: &TestDatabase) -> PostgresStorage {
            let url = PostgresUrl::parse(database.url()).expect("a PostgreSQL URL");
            PostgresStorage::open(&url)
                .await
                .expect("open the database")
        }

        /// Waits until `storage`'s head has passed the three events.
        async fn past_three(storage: &PostgresStorage) {
            let mut head = storage.events_head();
            within("the head past 3", SOON, head.wait_for(|head| *head >= 3))
                .await
                .expect("the watcher runs");
        }

        /// A new database with three events, the storage on it, and a
        /// connection of the test's own.
        async fn three_events() -> Option<(TestDatabase, PostgresStorage, tokio_postgres::Client)> {
            let database = petstore_support::postgres::fresh_database().await?;
            let storage = open(&database).await;
            for name in ["Rex", "Max", "Bo"] {
                let created = NewPet {
                    name: name.to_owned(),
                    category_id: 1,
                    status: None,
                };
                storage.create(created).await.expect("create");
            }
            past_three(&storage).await;
            let (client, connection) =
                tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
                    .await
                    .expect("connect");
            tokio::spawn(connection);
            Some((database, storage, client))
        }

        async fn read(storage: &PostgresStorage, query: EventQuery) -> String {
            match storage.encoded_events(query, ReadTo::Head).await {
                Ok(EventsOutcome::Page(page)) => {
                    String::from_utf8(page.events.into_bytes()).expect("UTF-8")
                }
                Ok(EventsOutcome::Expired { floor }) => format!("expired at {floor}"),
                Err(error) => panic!("reading events: {error}"),
            }
        }

        /// Reads each of `queries` until its page is kept (a page read
        /// while the floor was not known is not), renames every animal in
        /// the feed behind the storage's back, and checks that each page is
        /// answered from memory: the old names, which the database no
        /// longer has (again, once the floor is known). The pages.
        async fn kept_before_renaming(
            storage: &PostgresStorage,
            client: &tokio_postgres::Client,
            queries: &[EventQuery],
        ) -> Vec<String> {
            let mut pages = Vec::new();
            for query in queries {
                let page = eventually_some("the page kept", SOON, || async {
                    let page = read(storage, *query).await;
                    let kept = storage.kept_pages.lock().pages.contains_key(query);
                    kept.then_some(page)
                })
                .await;
                pages.push(page);
            }
            client
                .execute("UPDATE events SET name = 'Renamed'", &[])
                .await
                .expect("rename");
            for (query, page) in queries.iter().zip(&pages) {
                eventually_some("the page answered from memory", SOON, || async {
                    (read(storage, *query).await == *page).then_some(())
                })
                .await;
            }
            pages
        }

        #[tokio::test]
        async fn a_page_short_of_the_head_is_read_once_and_one_at_the_head_each_time() {
            let Some((_database, storage, client)) = three_events().await else {
                return;
            };
            let whole = EventQuery {
                limit: 10,
                ..FIRST_TWO
            };
            // Every kind (one statement), and some (another).
            let created = EventQuery {
                kinds: EnumSet::only(EventKind::PetCreated),
                ..FIRST_TWO
            };
            assert!(read(&storage, whole).await.contains("Bo"), "all three");
            let pages = kept_before_renaming(&storage, &client, &[FIRST_TWO, created]).await;
            assert!(pages[0].contains("Max") && !pages[0].contains("Bo"));
            assert_eq!(pages[1], pages[0]);
            let at_head = read(&storage, whole).await;
            assert!(
                at_head.contains("Renamed") && !at_head.contains("Rex"),
                "read anew"
            );
            storage.close().await;
        }

        #[tokio::test]
        async fn this_instances_purge_lets_the_pages_below_the_floor_go_at_once() {
            let Some((_database, storage, client)) = three_events().await else {
                return;
            };
            let from_the_floor = EventQuery {
                after: None,
                ..FIRST_TWO
            };
            let pages = kept_before_renaming(&storage, &client, &[FIRST_TWO, from_the_floor]).await;
            assert_eq!(pages[1], pages[0]);
            let future = chrono::Utc::now() + chrono::TimeDelta::hours(1);
            assert_eq!(storage.purge_events(future, 1).await.expect("purge"), 1);
            assert_eq!(read(&storage, FIRST_TWO).await, "expired at 1");
            let page = read(&storage, from_the_floor).await;
            assert!(page.contains("Renamed") && !page.contains("Rex"), "{page}");
            storage.close().await;
        }

        #[tokio::test]
        async fn another_instances_purge_lets_the_pages_below_the_floor_go_within_a_round() {
            let Some((database, storage, client)) = three_events().await else {
                return;
            };
            kept_before_renaming(&storage, &client, &[FIRST_TWO]).await;
            let other = open(&database).await;
            // (A purge stays below the head.)
            past_three(&other).await;
            let future = chrono::Utc::now() + chrono::TimeDelta::hours(1);
            assert_eq!(other.purge_events(future, 1).await.expect("purge"), 1);
            eventually_some("the purge seen", SOON, || async {
                (read(&storage, FIRST_TWO).await == "expired at 1").then_some(())
            })
            .await;
            other.close().await;
            storage.close().await;
        }
    }
}
