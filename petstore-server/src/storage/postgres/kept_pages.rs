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
//! - **Until the floor moves.** A purge changes what a query answers: a
//!   cursor below the new floor has expired, and a page from the floor
//!   starts later. So every page is let go once the floor this instance
//!   knows rises, and a page read while it rose is not kept. The floor is
//!   known at once after this instance's purges, and within a round of the
//!   head (`head::POLL`) after another's: in between, another instance's
//!   purge may find a page still kept, as it would a page read just before.
//! - **Bounded.** At most [`KEPT_BYTES`] of JSON; past it, the page used
//!   least recently goes first.
//!
//! Only `listEvents`' pages to the head are kept (`encoded_events`); the
//! webhooks' fan-out reads the events as stored.

use std::sync::{Mutex, MutexGuard};

use hashlink::LruCache;
use petstore_api::model::EncodedEvents;

use crate::storage::{EventPage, EventQuery, EventsOutcome};

/// The most JSON the kept pages hold: about 900 pages of 20 events, or 180
/// of 100.
pub(super) const KEPT_BYTES: usize = 4 << 20;

/// The pages kept, by query.
pub(super) struct KeptPages {
    kept: Mutex<Kept>,
}

struct Kept {
    /// The floor every kept page was read at.
    floor: i64,
    pages: LruCache<EventQuery, EventPage<EncodedEvents>>,
    /// Their JSON's length, together.
    bytes: usize,
}

impl KeptPages {
    pub fn new() -> KeptPages {
        KeptPages {
            kept: Mutex::new(Kept {
                floor: i64::MIN,
                pages: LruCache::new_unbounded(),
                bytes: 0,
            }),
        }
    }

    /// The page kept for `query`, if the floor is still `floor`.
    pub fn get(&self, query: &EventQuery, floor: i64) -> Option<EventsOutcome<EncodedEvents>> {
        let mut kept = self.lock();
        kept.at_floor(floor);
        kept.pages.get(query).cloned().map(EventsOutcome::Page)
    }

    /// Keeps what `query` read, if it is a page that stops short of the
    /// head, and the floor was `floor` both before it was read (`read_at`)
    /// and after (`now`).
    pub fn keep(
        &self,
        query: EventQuery,
        outcome: &EventsOutcome<EncodedEvents>,
        read_at: i64,
        now: i64,
    ) {
        let EventsOutcome::Page(page) = outcome else {
            return;
        };
        let bytes = page.events.byte_len();
        if page.at_head || read_at != now || bytes > KEPT_BYTES {
            return;
        }
        let mut kept = self.lock();
        kept.at_floor(now);
        if kept.floor != now {
            return;
        }
        if let Some(before) = kept.pages.remove(&query) {
            kept.bytes -= before.events.byte_len();
        }
        while kept.bytes + bytes > KEPT_BYTES {
            let Some((_, oldest)) = kept.pages.remove_lru() else {
                break;
            };
            kept.bytes -= oldest.events.byte_len();
        }
        kept.pages.insert(query, page.clone());
        kept.bytes += bytes;
    }

    fn lock(&self) -> MutexGuard<'_, Kept> {
        // Every change leaves the pages and their length in step before
        // anything that could panic.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Kept {
    /// Lets every page go if the floor rose past the one they were read at.
    fn at_floor(&mut self, floor: i64) {
        if floor > self.floor {
            self.pages.clear();
            self.bytes = 0;
            self.floor = floor;
        }
    }
}

#[cfg(test)]
mod tests {
    use enumset::EnumSet;
    use petstore_api::model::{EventArrayWriter, EventDataRef, EventType};

    use super::*;

    fn query(after: i64) -> EventQuery {
        EventQuery {
            after: Some(after),
            limit: 2,
            kinds: EnumSet::all(),
            owner: None,
        }
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

    #[test]
    fn a_page_short_of_the_head_is_kept_and_one_at_the_head_is_not() {
        let kept = KeptPages::new();
        kept.keep(query(0), &page(0, 2, false), 0, 0);
        kept.keep(query(5), &page(5, 1, true), 0, 0);
        assert_eq!(kept.get(&query(0), 0), Some(page(0, 2, false)));
        assert_eq!(kept.get(&query(5), 0), None);
        let other = EventQuery {
            limit: 3,
            ..query(0)
        };
        assert_eq!(kept.get(&other, 0), None, "another query, another page");
    }

    #[test]
    fn every_page_goes_once_the_floor_rises() {
        let kept = KeptPages::new();
        kept.keep(query(10), &page(10, 2, false), 3, 3);
        assert!(kept.get(&query(10), 3).is_some());
        assert_eq!(kept.get(&query(10), 4), None);
        // Gone for good, not only hidden from the new floor.
        assert_eq!(kept.get(&query(10), 4), None);
    }

    #[test]
    fn a_page_read_while_the_floor_rose_is_not_kept() {
        let kept = KeptPages::new();
        kept.keep(query(10), &page(10, 2, false), 3, 4);
        assert_eq!(kept.get(&query(10), 4), None);
        // Nor one read at a floor older than the one the pages are at.
        assert_eq!(kept.get(&query(10), 5), None);
        kept.keep(query(10), &page(10, 2, false), 4, 4);
        assert_eq!(kept.get(&query(10), 5), None);
    }

    #[test]
    fn past_the_bound_the_page_used_least_recently_goes_first() {
        let kept = KeptPages::new();
        // Ids of as many digits each: pages of as many bytes.
        let first = 1_000_000;
        let EventsOutcome::Page(one) = page(first, 20, false) else {
            unreachable!()
        };
        let fit = KEPT_BYTES / one.events.byte_len();
        for n in 0..fit as i64 {
            let after = first + n * 100;
            kept.keep(query(after), &page(after, 20, false), 0, 0);
        }
        assert_eq!(kept.lock().pages.len(), fit, "all fit");
        // The first read again: the second is now the least recent.
        assert!(kept.get(&query(first), 0).is_some());
        let last = first + fit as i64 * 100;
        kept.keep(query(last), &page(last, 20, false), 0, 0);
        assert!(kept.get(&query(first), 0).is_some());
        assert_eq!(kept.get(&query(first + 100), 0), None);
        assert!(kept.get(&query(last), 0).is_some());
        assert!(kept.lock().bytes <= KEPT_BYTES);
    }

    /// On a database: a page that stopped short of the head is answered
    /// again without the database (changed behind the storage's back, the
    /// rows show only in pages read anew), until a purge.
    mod on_postgres {
        use petstore_api::model::NewPet;
        use petstore_support::{SOON, eventually_some};

        use super::*;
        use crate::storage::postgres::PostgresStorage;
        use crate::storage::{PostgresUrl, ReadTo, Storage};

        /// The first two events of three.
        const FIRST_TWO: EventQuery = EventQuery {
            after: Some(0),
            limit: 2,
            kinds: EnumSet::all(),
            owner: None,
        };

        /// A database with three events, and a connection of the test's own.
        async fn three_events(
            database: &petstore_support::postgres::TestDatabase,
        ) -> (PostgresStorage, tokio_postgres::Client) {
            let url = PostgresUrl::parse(database.url()).expect("a PostgreSQL URL");
            let storage = PostgresStorage::open(&url)
                .await
                .expect("open the database");
            for name in ["Rex", "Max", "Bo"] {
                let created = NewPet {
                    name: name.to_owned(),
                    category_id: 1,
                    status: None,
                };
                storage.create(created).await.expect("create");
            }
            let (client, connection) =
                tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
                    .await
                    .expect("connect");
            tokio::spawn(connection);
            (storage, client)
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

        async fn rename_every_animal_in_the_feed(client: &tokio_postgres::Client) {
            client
                .execute("UPDATE events SET name = 'Renamed'", &[])
                .await
                .expect("rename");
        }

        #[tokio::test]
        async fn a_page_short_of_the_head_is_read_once_and_one_at_the_head_each_time() {
            let Some(database) = petstore_support::postgres::fresh_database().await else {
                return;
            };
            let (storage, client) = three_events(&database).await;
            let whole = EventQuery {
                limit: 10,
                ..FIRST_TWO
            };
            assert!(read(&storage, whole).await.contains("Bo"), "all three");
            let first_two = read(&storage, FIRST_TWO).await;
            assert!(first_two.contains("Max") && !first_two.contains("Bo"));
            rename_every_animal_in_the_feed(&client).await;
            assert_eq!(read(&storage, FIRST_TWO).await, first_two, "kept");
            let at_head = read(&storage, whole).await;
            assert!(
                at_head.contains("Renamed") && !at_head.contains("Rex"),
                "read anew"
            );
            storage.close().await;
        }

        #[tokio::test]
        async fn this_instances_purge_lets_every_page_go_at_once() {
            let Some(database) = petstore_support::postgres::fresh_database().await else {
                return;
            };
            let (storage, client) = three_events(&database).await;
            let from_the_floor = EventQuery {
                after: None,
                ..FIRST_TWO
            };
            assert_eq!(
                read(&storage, from_the_floor).await,
                read(&storage, FIRST_TWO).await
            );
            rename_every_animal_in_the_feed(&client).await;
            let future = chrono::Utc::now() + chrono::TimeDelta::hours(1);
            assert_eq!(storage.purge_events(future, 1).await.expect("purge"), 1);
            assert_eq!(read(&storage, FIRST_TWO).await, "expired at 1");
            let page = read(&storage, from_the_floor).await;
            assert!(page.contains("Renamed") && !page.contains("Rex"), "{page}");
            storage.close().await;
        }

        #[tokio::test]
        async fn another_instances_purge_lets_every_page_go_within_a_round() {
            let Some(database) = petstore_support::postgres::fresh_database().await else {
                return;
            };
            let (storage, _client) = three_events(&database).await;
            assert!(read(&storage, FIRST_TWO).await.contains("Max"));
            let url = PostgresUrl::parse(database.url()).expect("a PostgreSQL URL");
            let other = PostgresStorage::open(&url)
                .await
                .expect("open the database");
            // (A purge stays below the head: the other's must pass them.)
            assert!(read(&other, FIRST_TWO).await.contains("Max"));
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
