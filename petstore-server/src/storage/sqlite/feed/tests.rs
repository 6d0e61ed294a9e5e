//! The feed through the `Storage` interface: every acknowledged write's
//! events (and no refused one's), the head moving before a write is
//! answered, long polls parked at the head woken by their kinds only, the
//! filters, the scan's bound and the cursor's rules, retention, a feed
//! that survives reopening, and pages answered as JSON straight from
//! memory.

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use enumset::EnumSet;
use petstore_api::auth::Identity;
use petstore_api::model::{
    EventData, NewPet, Order, OrderStatus, OrderUpdateStatus, Pet, PetStatus,
};

use super::super::SqliteStorage;
use crate::storage::idempotency::{Fingerprint, fingerprint, order_fingerprint};
use crate::storage::{
    CreateOutcome, EVENT_SCAN_MAX, EventKind, EventPage, EventQuery, EventsOutcome, FatalSender,
    Idempotency, Owner, OwnerId, PlaceOutcome, ReadTo, Retention, Storage, StorageMetrics,
    StoredEvent, StoredOrder, UpdateOutcome,
};

async fn open(path: &Path) -> SqliteStorage {
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let (storage, _keys, _webhooks) = SqliteStorage::open(
        path.to_owned(),
        log,
        FatalSender::new(None),
        StorageMetrics::default(),
    )
    .await
    .expect("the database opens");
    storage
}

fn new_pet(name: &str, status: Option<PetStatus>) -> NewPet {
    NewPet {
        name: name.into(),
        category_id: 7,
        status,
    }
}

fn owner(byte: u8) -> Owner {
    Owner {
        id: OwnerId([byte; 32]),
        name: format!("key-{byte}"),
    }
}

fn once(key: &str, fingerprint: Fingerprint) -> Idempotency {
    let now = Utc::now().timestamp();
    let retention = Retention::new(std::time::Duration::from_secs(86_400));
    Idempotency::new(Identity([9; 32]), key.into(), fingerprint, now, retention)
}

fn query(after: Option<i64>, limit: u32) -> EventQuery {
    EventQuery {
        after,
        limit,
        kinds: EnumSet::all(),
        owner: None,
    }
}

async fn page(storage: &SqliteStorage, query: EventQuery) -> EventPage {
    match storage.events(query).await.expect("a page") {
        EventsOutcome::Page(page) => page,
        EventsOutcome::Expired { floor } => panic!("expired at {floor}: {query:?}"),
    }
}

/// Every retained event, page by page.
async fn all_events(storage: &SqliteStorage) -> Vec<StoredEvent> {
    let (mut events, mut after) = (Vec::new(), None);
    loop {
        let page = page(storage, query(after, 100)).await;
        events.extend(page.events);
        if page.at_head {
            return events;
        }
        after = Some(page.next_after);
    }
}

/// The events' kinds and data, for comparing with what was expected.
fn summary(events: &[StoredEvent]) -> Vec<(EventKind, EventData)> {
    events.iter().map(|e| (e.kind, e.data.clone())).collect()
}

fn pet_data(pet: &Pet, status: Option<PetStatus>) -> EventData {
    EventData::Pet(Pet {
        status,
        ..pet.clone()
    })
}

fn order_data(order: &StoredOrder, status: OrderStatus) -> EventData {
    EventData::Order(Order {
        id: order.id,
        pet_id: order.pet_id,
        status,
        placed_at: order.placed_at,
        placed_by: None,
    })
}

fn placed(outcome: PlaceOutcome) -> StoredOrder {
    match outcome {
        PlaceOutcome::Placed(order) => order,
        other => panic!("not placed: {other:?}"),
    }
}

fn created(outcome: CreateOutcome) -> Pet {
    match outcome {
        CreateOutcome::Created(pet) => pet,
        other => panic!("not created: {other:?}"),
    }
}

#[tokio::test]
async fn each_acknowledged_write_writes_its_events_and_a_refused_one_none() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir.path().join("feed.db")).await;
    let before = Utc::now();
    let mut expected = Vec::new();

    let rex = storage.create(new_pet("Rex", None)).await.unwrap();
    expected.push((EventKind::PetCreated, pet_data(&rex, None)));
    let available = Some(PetStatus::Available);
    let tom_once = once("tom", fingerprint(&new_pet("Tom", available)));
    let tom = created(
        storage
            .create_idempotent(new_pet("Tom", available), tom_once.clone())
            .await
            .unwrap(),
    );
    expected.push((EventKind::PetCreated, pet_data(&tom, available)));
    let max = storage.create(new_pet("Max", available)).await.unwrap();
    expected.push((EventKind::PetCreated, pet_data(&max, available)));
    // A replay and a reuse of the key create nothing.
    let replay = storage
        .create_idempotent(new_pet("Tom", available), tom_once.clone())
        .await
        .unwrap();
    assert_eq!(replay, CreateOutcome::Replayed(tom.clone()));
    let reused = Idempotency {
        fingerprint: fingerprint(&new_pet("Other", None)),
        ..tom_once
    };
    let reuse = storage
        .create_idempotent(new_pet("Other", None), reused)
        .await
        .unwrap();
    assert_eq!(reuse, CreateOutcome::KeyReused);

    // Tom: ordered (plain), then delivered, and delivered again (no change).
    let tom_order = placed(storage.place_order(tom.id, owner(1), None).await.unwrap());
    expected.push((
        EventKind::OrderPlaced,
        order_data(&tom_order, OrderStatus::Placed),
    ));
    expected.push((
        EventKind::PetOrdered,
        pet_data(&tom, Some(PetStatus::Pending)),
    ));
    for _ in 0..2 {
        let delivered = storage
            .update_order(tom_order.id, OrderUpdateStatus::Delivered)
            .await
            .unwrap();
        assert!(matches!(delivered, UpdateOutcome::Done(o) if o.status == OrderStatus::Delivered));
    }
    expected.push((
        EventKind::OrderDelivered,
        order_data(&tom_order, OrderStatus::Delivered),
    ));
    expected.push((EventKind::PetSold, pet_data(&tom, Some(PetStatus::Sold))));

    // Max: ordered with a key (replayed once), then cancelled.
    let max_once = once("max", order_fingerprint(max.id));
    let max_order = placed(
        storage
            .place_order(max.id, owner(2), Some(max_once.clone()))
            .await
            .unwrap(),
    );
    expected.push((
        EventKind::OrderPlaced,
        order_data(&max_order, OrderStatus::Placed),
    ));
    expected.push((
        EventKind::PetOrdered,
        pet_data(&max, Some(PetStatus::Pending)),
    ));
    let replayed = storage
        .place_order(max.id, owner(2), Some(max_once))
        .await
        .unwrap();
    assert!(
        matches!(replayed, PlaceOutcome::Replayed(_)),
        "{replayed:?}"
    );
    storage
        .update_order(max_order.id, OrderUpdateStatus::Cancelled)
        .await
        .unwrap();
    expected.push((
        EventKind::OrderCancelled,
        order_data(&max_order, OrderStatus::Cancelled),
    ));
    expected.push((EventKind::PetReturned, pet_data(&max, available)));

    // Refusals: an animal not available (pending, sold, without a status,
    // missing; with a key too, which reaches the writer), a change an
    // order cannot make.
    let again = placed(storage.place_order(max.id, owner(1), None).await.unwrap());
    expected.push((
        EventKind::OrderPlaced,
        order_data(&again, OrderStatus::Placed),
    ));
    expected.push((
        EventKind::PetOrdered,
        pet_data(&max, Some(PetStatus::Pending)),
    ));
    for pet_id in [max.id, tom.id, rex.id, 999] {
        let refused = storage.place_order(pet_id, owner(1), None).await.unwrap();
        assert!(!matches!(refused, PlaceOutcome::Placed(_)), "{refused:?}");
        let keyed = once(&format!("refused-{pet_id}"), order_fingerprint(pet_id));
        let refused = storage
            .place_order(pet_id, owner(1), Some(keyed))
            .await
            .unwrap();
        assert!(!matches!(refused, PlaceOutcome::Placed(_)), "{refused:?}");
    }
    let invalid = storage
        .update_order(tom_order.id, OrderUpdateStatus::Cancelled)
        .await
        .unwrap();
    assert_eq!(invalid, UpdateOutcome::Invalid(OrderStatus::Delivered));
    assert_eq!(
        storage
            .update_order(12345, OrderUpdateStatus::Cancelled)
            .await
            .unwrap(),
        UpdateOutcome::NoSuchOrder
    );

    let events = all_events(&storage).await;
    assert_eq!(summary(&events), expected);
    let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=expected.len() as i64).collect::<Vec<_>>());
    let after = Utc::now();
    for event in &events {
        assert!(before <= event.time && event.time <= after, "{event:?}");
        if let EventData::Order(order) = &event.data
            && event.kind == EventKind::OrderPlaced
        {
            assert_eq!(event.time, order.placed_at, "{event:?}");
        }
    }
    // Each status change at its order's time.
    for pair in events.windows(2) {
        if pair[0].kind.pet_change() == Some(pair[1].kind) {
            assert_eq!(pair[0].time, pair[1].time);
        }
    }
    assert_eq!(*storage.events_head().borrow(), expected.len() as i64);
    let stats = storage.stats().await.unwrap();
    assert_eq!(stats.events, expected.len() as u64);
    assert_eq!(stats.oldest_event, Some(events[0].time));
    storage.close().await;
}

#[tokio::test]
async fn the_head_moves_before_a_write_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(open(&dir.path().join("head.db")).await);
    let mut head = storage.events_head();
    assert_eq!(*head.borrow_and_update(), 0);
    let rex = storage.create(new_pet("Rex", None)).await.unwrap();
    assert!(head.has_changed().unwrap(), "moved before the answer");
    assert_eq!(*head.borrow_and_update(), 1);
    assert_eq!(
        summary(&page(&storage, query(None, 10)).await.events),
        [(EventKind::PetCreated, pet_data(&rex, None))]
    );

    // Many writers at once, grouped: each finds its own event as soon as it
    // is answered.
    let writers = (0..64).map(|i| {
        let storage = Arc::clone(&storage);
        tokio::spawn(async move {
            let pet = storage
                .create(new_pet(&format!("pet-{i}"), None))
                .await
                .unwrap();
            let head = *storage.events_head().borrow();
            let page = page(&storage, query(Some(1), 100)).await;
            assert_eq!(page.head, head);
            assert!(
                page.events.iter().any(|e| e.data == pet_data(&pet, None)),
                "{pet:?} not in the feed once created"
            );
        })
    });
    for writer in futures::future::join_all(writers).await {
        writer.unwrap();
    }
    assert_eq!(*head.borrow_and_update(), 65);
    storage.close().await;
}

/// Waits until the scout has looked at an event of `kind` after `above`:
/// a poll parked on it is answered.
async fn looked_at(storage: &SqliteStorage, kind: EventKind, above: i64) {
    let far = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let waited = storage.events_after(EnumSet::only(kind), above, far).await;
    assert!(waited.read, "{kind:?} after {above} not seen");
}

#[tokio::test]
async fn a_parked_poll_sleeps_through_other_kinds_and_wakes_for_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir.path().join("parked.db")).await;
    let far = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let delivered = EnumSet::only(EventKind::OrderDelivered);
    let mut poll = tokio_test::task::spawn(storage.events_after(delivered, 0, far));
    assert!(poll.poll().is_pending());

    // A pet created (1), then ordered (2 and 3): looked at, and not woken.
    let available = Some(PetStatus::Available);
    let rex = storage.create(new_pet("Rex", available)).await.unwrap();
    looked_at(&storage, EventKind::PetCreated, 0).await;
    let order = placed(storage.place_order(rex.id, owner(1), None).await.unwrap());
    looked_at(&storage, EventKind::OrderPlaced, 1).await;
    assert!(!poll.is_woken(), "woken by other kinds");
    assert!(poll.poll().is_pending());

    // Delivered (4 and 5): woken, to read after 3, where its kind was
    // last seen quiet.
    storage
        .update_order(order.id, OrderUpdateStatus::Delivered)
        .await
        .unwrap();
    let waited = poll.await;
    assert_eq!((waited.read, waited.quiet), (true, 3));
    storage.close().await;
}

#[tokio::test]
async fn a_parked_poll_is_answered_when_the_storage_closes() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir.path().join("closing.db")).await;
    let far = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let created = EnumSet::only(EventKind::PetCreated);
    let mut poll = tokio_test::task::spawn(storage.events_after(created, 0, far));
    assert!(poll.poll().is_pending());
    storage.close().await;
    assert!(poll.is_woken());
    let waited = poll.await;
    assert_eq!((waited.read, waited.quiet), (false, 0));
}

#[tokio::test]
async fn kinds_and_owner_filter_pages() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir.path().join("filters.db")).await;
    let available = Some(PetStatus::Available);
    let a = storage.create(new_pet("A", available)).await.unwrap();
    let b = storage.create(new_pet("B", available)).await.unwrap();
    let (alice, bob) = (owner(1), owner(2));
    let alices = placed(
        storage
            .place_order(a.id, alice.clone(), None)
            .await
            .unwrap(),
    );
    let bobs = placed(storage.place_order(b.id, bob.clone(), None).await.unwrap());
    storage
        .update_order(bobs.id, OrderUpdateStatus::Cancelled)
        .await
        .unwrap();

    // Alice sees every animal event, and only her order's events.
    let mine = page(
        &storage,
        EventQuery {
            owner: Some(alice.id),
            ..query(None, 100)
        },
    )
    .await;
    assert_eq!(
        mine.events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [
            EventKind::PetCreated,
            EventKind::PetCreated,
            EventKind::OrderPlaced,
            EventKind::PetOrdered,
            EventKind::PetOrdered,
            EventKind::PetReturned,
        ]
    );
    assert!(mine.events.iter().all(|e| match &e.data {
        EventData::Order(order) => order.id == alices.id,
        EventData::Pet(_) => true,
    }));
    assert_eq!((mine.next_after, mine.head, mine.at_head), (8, 8, true));

    // Only order events, of every owner.
    let orders = page(
        &storage,
        EventQuery {
            kinds: EventKind::ALL
                .into_iter()
                .filter(|k| k.is_order())
                .collect(),
            ..query(None, 100)
        },
    )
    .await;
    assert_eq!(
        orders
            .events
            .iter()
            .map(|e| (e.id, e.kind))
            .collect::<Vec<_>>(),
        [
            (3, EventKind::OrderPlaced),
            (5, EventKind::OrderPlaced),
            (7, EventKind::OrderCancelled)
        ]
    );
    // The last row examined, past the last event found.
    assert_eq!((orders.next_after, orders.at_head), (8, true));

    // Only the cancellations that Alice may see: none.
    let none = page(
        &storage,
        EventQuery {
            kinds: EventKind::OrderCancelled.into(),
            owner: Some(alice.id),
            ..query(None, 100)
        },
    )
    .await;
    assert!(none.events.is_empty());
    assert_eq!((none.next_after, none.at_head), (8, true));
    // No kind at all: nothing, every row examined.
    let nothing = page(
        &storage,
        EventQuery {
            kinds: EnumSet::empty(),
            ..query(Some(2), 100)
        },
    )
    .await;
    assert!(nothing.events.is_empty());
    assert_eq!((nothing.next_after, nothing.at_head), (8, true));
    storage.close().await;
}

#[tokio::test]
async fn a_page_examines_at_most_the_scan_bound_and_says_where_to_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir.path().join("scan.db")).await;
    // An empty feed: nothing to examine, at the head.
    let empty = page(&storage, query(None, 20)).await;
    assert!(empty.events.is_empty());
    assert_eq!((empty.next_after, empty.head, empty.at_head), (0, 0, true));

    let scan = i64::from(EVENT_SCAN_MAX);
    let creates = (0..scan + 200).map(|i| storage.create(new_pet(&format!("p{i}"), None)));
    let pets: Vec<Pet> = futures::future::join_all(creates)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let available = storage
        .create(new_pet("last", Some(PetStatus::Available)))
        .await
        .unwrap();
    placed(
        storage
            .place_order(available.id, owner(1), None)
            .await
            .unwrap(),
    );
    let head = scan + 203;
    assert_eq!(*storage.events_head().borrow(), head);

    // A full page: next after its last event, not at the head.
    let full = page(&storage, query(None, 20)).await;
    assert_eq!(full.events.len(), 20);
    assert_eq!(
        (full.next_after, full.head, full.at_head),
        (20, head, false)
    );
    let mut created_ids: Vec<i64> = pets.iter().map(|p| p.id).collect();
    created_ids.sort_unstable();
    let first: Vec<i64> = full
        .events
        .iter()
        .map(|e| match &e.data {
            EventData::Pet(pet) => pet.id,
            EventData::Order(_) => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(first, created_ids[..20]);

    // A rare kind: the first page stops at the bound with nothing found,
    // the next finds it and reaches the head.
    let placed_only = EventQuery {
        kinds: EventKind::OrderPlaced.into(),
        ..query(None, 20)
    };
    let bounded = page(&storage, placed_only).await;
    assert!(bounded.events.is_empty());
    assert_eq!((bounded.next_after, bounded.at_head), (scan, false));
    let found = page(
        &storage,
        EventQuery {
            after: Some(bounded.next_after),
            ..placed_only
        },
    )
    .await;
    assert_eq!(
        found.events.iter().map(|e| e.id).collect::<Vec<_>>(),
        [head - 1]
    );
    assert_eq!((found.next_after, found.at_head), (head, true));

    // A kind with no event after the cursor: empty and at the head at once,
    // however many events of other kinds lie between.
    let delivered_only = EventQuery {
        kinds: EventKind::OrderDelivered | EventKind::PetSold,
        ..query(None, 20)
    };
    let none = page(&storage, delivered_only).await;
    assert!(none.events.is_empty());
    assert_eq!(
        (none.next_after, none.head, none.at_head),
        (head, head, true)
    );

    // A full page ending at the head is at the head; a page after it is
    // empty and stays there.
    let last = page(&storage, query(Some(head - 2), 2)).await;
    assert_eq!(last.events.len(), 2);
    assert_eq!((last.next_after, last.at_head), (head, true));
    let beyond = page(&storage, query(Some(head), 20)).await;
    assert!(beyond.events.is_empty());
    assert_eq!(
        (beyond.next_after, beyond.head, beyond.at_head),
        (head, head, true)
    );
    storage.close().await;
}

#[tokio::test]
async fn purging_removes_the_oldest_raises_the_floor_and_expires_cursors() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir.path().join("purge.db")).await;
    for i in 0..6 {
        storage
            .create(new_pet(&format!("old-{i}"), None))
            .await
            .unwrap();
    }
    // In whole microseconds, as events' times are stored.
    let cut = DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap();
    for i in 0..4 {
        storage
            .create(new_pet(&format!("new-{i}"), None))
            .await
            .unwrap();
    }
    let events = all_events(&storage).await;
    assert!(events[..6].iter().all(|e| e.time < cut) && events[6..].iter().all(|e| e.time >= cut));

    // Nothing older than the oldest.
    assert_eq!(storage.purge_events(events[0].time, 100).await.unwrap(), 0);
    assert_eq!(storage.purge_events(cut, 4).await.unwrap(), 4);
    let expired = storage.events(query(Some(3), 10)).await.unwrap();
    assert_eq!(expired, EventsOutcome::Expired { floor: 4 });
    let from_floor = page(&storage, query(Some(4), 10)).await;
    assert_eq!(from_floor.events, events[4..]);
    assert_eq!(page(&storage, query(None, 10)).await.events, events[4..]);
    let stats = storage.stats().await.unwrap();
    assert_eq!(
        (stats.events, stats.oldest_event),
        (6, Some(events[4].time))
    );

    // Only those older than `before`, however many are asked for.
    assert_eq!(storage.purge_events(cut, 100).await.unwrap(), 2);
    assert_eq!(page(&storage, query(None, 10)).await.events, events[6..]);
    assert!(matches!(
        storage.events(query(Some(5), 10)).await.unwrap(),
        EventsOutcome::Expired { floor: 6 }
    ));

    // Everything: the head stays, the floor reaches it.
    let later = Utc::now() + chrono::Duration::seconds(1);
    assert_eq!(storage.purge_events(later, 100).await.unwrap(), 4);
    let stats = storage.stats().await.unwrap();
    assert_eq!((stats.events, stats.oldest_event), (0, None));
    let empty = page(&storage, query(None, 10)).await;
    assert!(empty.events.is_empty());
    assert_eq!(
        (empty.next_after, empty.head, empty.at_head),
        (10, 10, true)
    );
    assert_eq!(
        storage.events(query(Some(9), 10)).await.unwrap(),
        EventsOutcome::Expired { floor: 10 }
    );
    storage.close().await;
}

#[tokio::test]
async fn events_survive_reopening_and_ids_are_never_given_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reopen.db");
    let storage = open(&path).await;
    let rex = storage
        .create(new_pet("Rex", Some(PetStatus::Available)))
        .await
        .unwrap();
    let order = placed(storage.place_order(rex.id, owner(1), None).await.unwrap());
    let before = all_events(&storage).await;
    assert_eq!(before.len(), 3);
    storage.close().await;

    let storage = open(&path).await;
    assert_eq!(*storage.events_head().borrow(), 3);
    assert_eq!(all_events(&storage).await, before);
    let stats = storage.stats().await.unwrap();
    assert_eq!(
        (stats.events, stats.oldest_event),
        (3, Some(before[0].time))
    );
    storage
        .update_order(order.id, OrderUpdateStatus::Delivered)
        .await
        .unwrap();
    let tom = storage.create(new_pet("Tom", None)).await.unwrap();
    let events = all_events(&storage).await;
    assert_eq!(
        events.iter().map(|e| (e.id, e.kind)).collect::<Vec<_>>()[3..],
        [
            (4, EventKind::OrderDelivered),
            (5, EventKind::PetSold),
            (6, EventKind::PetCreated)
        ]
    );
    // Purge everything: the next ids still follow the last one given.
    let later = Utc::now() + chrono::Duration::seconds(1);
    assert_eq!(storage.purge_events(later, 100).await.unwrap(), 6);
    storage.close().await;

    let storage = open(&path).await;
    assert_eq!(*storage.events_head().borrow(), 6);
    let empty = page(&storage, query(None, 10)).await;
    assert_eq!(
        (empty.events.len(), empty.next_after, empty.at_head),
        (0, 6, true)
    );
    storage.create(new_pet("Max", None)).await.unwrap();
    let after_purge = page(&storage, query(None, 10)).await;
    assert_eq!(
        after_purge.events.iter().map(|e| e.id).collect::<Vec<_>>(),
        [7]
    );
    assert!(matches!(
        storage.events(query(Some(5), 10)).await.unwrap(),
        EventsOutcome::Expired { floor: 6 }
    ));
    assert_eq!(storage.get(tom.id).await.unwrap(), Some(tom));
    storage.close().await;
}

#[tokio::test]
async fn a_group_that_rolls_back_writes_no_event_and_gives_its_ids_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollback.db");
    let storage = open(&path).await;
    let available = Some(PetStatus::Available);
    let rex = storage.create(new_pet("Rex", available)).await.unwrap();
    // Another program makes the animal's status change fail after its
    // order's event was inserted: the whole transaction rolls back.
    let sabotage = rusqlite::Connection::open(&path).unwrap();
    sabotage
        .execute_batch(&format!(
            "CREATE TRIGGER no_ordering BEFORE INSERT ON events WHEN NEW.kind = {}
             BEGIN SELECT RAISE(ABORT, 'refused'); END;",
            EventKind::PetOrdered.code()
        ))
        .unwrap();
    let failed = storage.place_order(rex.id, owner(1), None).await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(*storage.events_head().borrow(), 1);
    assert_eq!(
        storage.get(rex.id).await.unwrap().unwrap().status,
        available
    );
    sabotage.execute_batch("DROP TRIGGER no_ordering").unwrap();
    let order = placed(storage.place_order(rex.id, owner(1), None).await.unwrap());
    let events = all_events(&storage).await;
    assert_eq!(
        summary(&events),
        [
            (EventKind::PetCreated, pet_data(&rex, available)),
            (
                EventKind::OrderPlaced,
                order_data(&order, OrderStatus::Placed)
            ),
            (
                EventKind::PetOrdered,
                pet_data(&rex, Some(PetStatus::Pending))
            ),
        ]
    );
    assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(storage.stats().await.unwrap().events, 3);
    storage.close().await;
}

/// The contract's JSON of `events`, as serde writes it.
fn contract_json(events: &[StoredEvent]) -> String {
    let events: Vec<_> = events.iter().map(StoredEvent::to_contract).collect();
    serde_json::to_string(&events).unwrap()
}

#[tokio::test]
async fn a_page_answered_is_its_events_in_the_contract_s_json_read_once_or_again() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir.path().join("answered.db")).await;
    // Every kind of event, names that need escaping, two customers.
    let names = [
        "Rex \"the\" dog",
        "naïve \\ café 🐕 \u{2028}",
        "tab\tcontrol\u{1}",
    ];
    for (i, name) in names.into_iter().enumerate() {
        let pet = storage
            .create(new_pet(name, Some(PetStatus::Available)))
            .await
            .unwrap();
        let order = placed(
            storage
                .place_order(pet.id, owner(i as u8 % 2), None)
                .await
                .unwrap(),
        );
        let to = [OrderUpdateStatus::Delivered, OrderUpdateStatus::Cancelled][i % 2];
        storage.update_order(order.id, to).await.unwrap();
    }
    storage
        .create(new_pet("without a status", None))
        .await
        .unwrap();
    let all = all_events(&storage).await;
    assert_eq!(all.len(), 3 * 5 + 1);
    let head = all.last().unwrap().id;
    let queries = [
        query(None, 100),
        query(Some(2), 3),
        EventQuery {
            owner: Some(owner(1).id),
            kinds: EventKind::OrderPlaced | EventKind::OrderDelivered | EventKind::OrderCancelled,
            ..query(None, 10)
        },
        EventQuery {
            kinds: EventKind::PetCreated | EventKind::PetSold,
            ..query(Some(1), 4)
        },
        query(Some(head), 10),
    ];
    // Read once (written), twice (written and kept), and again (copied).
    for _ in 0..3 {
        for query in queries {
            let stored = page(&storage, query).await;
            let answered = match storage.encoded_events(query, ReadTo::Head).await.unwrap() {
                EventsOutcome::Page(page) => page,
                EventsOutcome::Expired { floor } => panic!("expired at {floor}: {query:?}"),
            };
            assert_eq!(
                (answered.next_after, answered.head, answered.at_head),
                (stored.next_after, stored.head, stored.at_head),
                "{query:?}"
            );
            assert_eq!(answered.events.is_empty(), stored.events.is_empty());
            assert_eq!(
                String::from_utf8(answered.events.into_bytes()).unwrap(),
                contract_json(&stored.events),
                "{query:?}"
            );
        }
    }
    storage.close().await;
}
