//! The events feed on PostgreSQL, through the storage itself on real
//! throwaway databases: every acknowledged change writes its events and a
//! refusal none; the head never passes an event that may still appear
//! (an uncommitted transaction holding a smaller id, even one whose xid is
//! newer than a committed later id's); two instances changing the same
//! animals at once give a tailer every event once, in order, each
//! animal's statuses in the order they changed; purging keeps a prefix and
//! raises the floor; the head moves again after a database restart; a
//! long poll parked on one kind sleeps through the others, and learns how
//! far they went; a page answered (`encoded_events`) is its events in the
//! contract's JSON, to the head or to the known head.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use enumset::EnumSet;
use petstore_api::auth::Identity;
use petstore_api::model::{
    EncodedEvents, EventData, NewPet, Order, OrderStatus, OrderUpdateStatus, Pet, PetStatus,
};
use petstore_server::storage::idempotency::{fingerprint, order_fingerprint};
use petstore_server::storage::{
    CreateOutcome, EVENT_SCAN_MAX, EventKind, EventPage, EventQuery, EventsOutcome, Idempotency,
    Owner, OwnerId, PlaceOutcome, PlacedBy, PostgresStorage, PostgresUrl, ReadTo, Retention,
    Storage, StoredEvent, UpdateOutcome,
};
use petstore_support::postgres::TestDatabase;
use petstore_support::{SOON, blocking, eventually_some, within};

async fn open(database: &TestDatabase) -> PostgresStorage {
    let url = PostgresUrl::parse(database.url()).expect("a PostgreSQL URL");
    PostgresStorage::open(&url)
        .await
        .expect("open the database")
}

/// A connection of the test's own, for what no instance would do.
async fn raw(database: &TestDatabase) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

fn pet(name: &str, status: Option<PetStatus>) -> NewPet {
    NewPet {
        name: name.to_owned(),
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

fn once(key: &str, fingerprint: petstore_server::storage::Fingerprint) -> Idempotency {
    let now = chrono::Utc::now().timestamp();
    Idempotency::new(
        Identity([9; 32]),
        key.to_owned(),
        fingerprint,
        now,
        Retention::new(Duration::from_secs(86_400)),
    )
}

fn every_kind(after: Option<i64>) -> EventQuery {
    EventQuery {
        after,
        limit: 100,
        kinds: EnumSet::all(),
        owner: None,
    }
}

async fn page(storage: &PostgresStorage, query: EventQuery) -> EventPage {
    match storage.events(query).await.expect("read the feed") {
        EventsOutcome::Page(page) => page,
        EventsOutcome::Expired { floor } => panic!("{query:?}: expired below {floor}"),
    }
}

/// The events after `cursor` up to the head, page after page; moves the
/// cursor past them.
async fn new_events(storage: &PostgresStorage, cursor: &mut Option<i64>) -> Vec<StoredEvent> {
    let mut events = Vec::new();
    loop {
        let page = page(storage, every_kind(*cursor)).await;
        *cursor = Some(page.next_after);
        let done = page.at_head;
        events.extend(page.events);
        if done {
            return events;
        }
    }
}

fn kinds(events: &[StoredEvent]) -> Vec<EventKind> {
    events.iter().map(|event| event.kind).collect()
}

fn pet_data(event: &StoredEvent) -> &Pet {
    match &event.data {
        EventData::Pet(pet) => pet,
        EventData::Order(order) => panic!("an animal's event with an order: {order:?}"),
    }
}

fn order_data(event: &StoredEvent) -> &Order {
    match &event.data {
        EventData::Order(order) => order,
        EventData::Pet(pet) => panic!("an order's event with an animal: {pet:?}"),
    }
}

fn assert_increasing(events: &[StoredEvent]) {
    for pair in events.windows(2) {
        assert!(pair[0].id < pair[1].id, "{pair:?}");
    }
}

/// The order of an order event and its animal's status change, written
/// together: the order's first, the animal's right after in id order.
fn assert_order_then_animal(events: &[StoredEvent], order: &Order, kind: EventKind) {
    assert_eq!(
        kinds(events),
        [kind, kind.pet_change().unwrap()],
        "{events:?}"
    );
    assert_increasing(events);
    assert_eq!(order_data(&events[0]), order);
    let animal = pet_data(&events[1]);
    assert_eq!(animal.id, order.pet_id);
    assert_eq!(
        animal.status,
        kind.pet_change().unwrap().status_change().map(|c| c.1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_change_writes_its_events_and_a_refusal_none() {
    let Some(database) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    let storage = open(&database).await;
    let mut cursor = None;
    assert_eq!(new_events(&storage, &mut cursor).await, []);
    assert_eq!(cursor, Some(0), "an empty feed starts at the floor, 0");

    // Creates, plain and keyed, with and without a status.
    let rex = storage
        .create(pet("Rex", Some(PetStatus::Available)))
        .await
        .unwrap();
    let nameless = storage.create(pet("Tom", None)).await.unwrap();
    let created = new_events(&storage, &mut cursor).await;
    assert_eq!(kinds(&created), [EventKind::PetCreated; 2]);
    assert_increasing(&created);
    assert_eq!(pet_data(&created[0]), &rex);
    assert_eq!(pet_data(&created[1]), &nameless);
    let kept = pet("Kept", Some(PetStatus::Available));
    let key = once("create-1", fingerprint(&kept));
    let CreateOutcome::Created(kept_pet) = storage
        .create_idempotent(kept.clone(), key.clone())
        .await
        .unwrap()
    else {
        panic!("not created");
    };
    let created = new_events(&storage, &mut cursor).await;
    assert_eq!(kinds(&created), [EventKind::PetCreated]);
    assert_eq!(pet_data(&created[0]), &kept_pet);
    let replayed = storage.create_idempotent(kept, key).await.unwrap();
    assert_eq!(replayed, CreateOutcome::Replayed(kept_pet.clone()));
    let other = pet("Other", None);
    let reused = storage
        .create_idempotent(other.clone(), once("create-1", fingerprint(&other)))
        .await
        .unwrap();
    assert_eq!(reused, CreateOutcome::KeyReused);
    assert_eq!(
        new_events(&storage, &mut cursor).await,
        [],
        "no create, no event"
    );

    // Orders placed, plain and keyed; the refusals write nothing.
    let customer = owner(1);
    let PlaceOutcome::Placed(first) = storage
        .place_order(rex.id, customer.clone(), None)
        .await
        .unwrap()
    else {
        panic!("not placed");
    };
    let first = first.answered(PlacedBy::Hidden);
    let placed = new_events(&storage, &mut cursor).await;
    assert_order_then_animal(&placed, &first, EventKind::OrderPlaced);
    assert_eq!(
        placed[0].time, first.placed_at,
        "an order placed at its placedAt"
    );
    let refused = [
        storage.place_order(rex.id, owner(2), None).await.unwrap(),
        storage
            .place_order(nameless.id, owner(2), None)
            .await
            .unwrap(),
        storage.place_order(-5, owner(2), None).await.unwrap(),
    ];
    assert!(
        matches!(
            refused,
            [
                PlaceOutcome::NotAvailable(Some(PetStatus::Pending)),
                PlaceOutcome::NotAvailable(None),
                PlaceOutcome::NoSuchPet
            ]
        ),
        "{refused:?}"
    );
    let key = once("place-1", order_fingerprint(kept_pet.id));
    let PlaceOutcome::Placed(second) = storage
        .place_order(kept_pet.id, owner(2), Some(key.clone()))
        .await
        .unwrap()
    else {
        panic!("not placed");
    };
    let second = second.answered(PlacedBy::Hidden);
    let placed = new_events(&storage, &mut cursor).await;
    assert_order_then_animal(&placed, &second, EventKind::OrderPlaced);
    let replayed = storage
        .place_order(kept_pet.id, owner(2), Some(key))
        .await
        .unwrap();
    assert!(
        matches!(replayed, PlaceOutcome::Replayed(_)),
        "{replayed:?}"
    );
    assert_eq!(
        new_events(&storage, &mut cursor).await,
        [],
        "no order, no event"
    );

    // Delivered, cancelled; the same status again, or a settled order
    // changed, writes nothing.
    let delivered = storage
        .update_order(first.id, OrderUpdateStatus::Delivered)
        .await
        .unwrap();
    let UpdateOutcome::Done(delivered) = delivered else {
        panic!("{delivered:?}");
    };
    let delivered = delivered.answered(PlacedBy::Hidden);
    assert_eq!(delivered.status, OrderStatus::Delivered);
    let settled = new_events(&storage, &mut cursor).await;
    assert_order_then_animal(&settled, &delivered, EventKind::OrderDelivered);
    let cancelled = storage
        .update_order(second.id, OrderUpdateStatus::Cancelled)
        .await
        .unwrap();
    let UpdateOutcome::Done(cancelled) = cancelled else {
        panic!("{cancelled:?}");
    };
    let cancelled = cancelled.answered(PlacedBy::Hidden);
    let settled = new_events(&storage, &mut cursor).await;
    assert_order_then_animal(&settled, &cancelled, EventKind::OrderCancelled);
    let again = storage
        .update_order(first.id, OrderUpdateStatus::Delivered)
        .await
        .unwrap();
    assert!(matches!(again, UpdateOutcome::Done(_)), "{again:?}");
    let invalid = storage
        .update_order(first.id, OrderUpdateStatus::Cancelled)
        .await
        .unwrap();
    assert_eq!(invalid, UpdateOutcome::Invalid(OrderStatus::Delivered));
    let missing = storage
        .update_order(999_999, OrderUpdateStatus::Cancelled)
        .await
        .unwrap();
    assert_eq!(missing, UpdateOutcome::NoSuchOrder);
    assert_eq!(
        new_events(&storage, &mut cursor).await,
        [],
        "no change, no event"
    );

    // The whole feed, then filtered: by kind, and a customer's orders.
    let all = new_events(&storage, &mut None).await;
    assert_eq!(all.len(), 3 + 2 * 4);
    assert_increasing(&all);
    let only = |kinds: EnumSet<EventKind>, owner: Option<OwnerId>| EventQuery {
        after: None,
        limit: 100,
        kinds,
        owner,
    };
    let settled_kinds = EventKind::OrderDelivered | EventKind::OrderCancelled;
    let filtered = page(&storage, only(settled_kinds, None)).await;
    assert_eq!(
        kinds(&filtered.events),
        [EventKind::OrderDelivered, EventKind::OrderCancelled]
    );
    assert!(filtered.at_head);
    assert_eq!(
        filtered.next_after,
        all.last().unwrap().id,
        "the last examined"
    );
    let mine = page(&storage, only(EnumSet::all(), Some(customer.id))).await;
    let expected: Vec<&StoredEvent> = all
        .iter()
        .filter(|event| !event.kind.is_order() || order_data(event).id == first.id)
        .collect();
    assert_eq!(mine.events.iter().collect::<Vec<_>>(), expected);
    // A page of two is full: it goes on from its last event.
    let two = page(
        &storage,
        EventQuery {
            limit: 2,
            ..every_kind(None)
        },
    )
    .await;
    assert_eq!(two.events, all[..2]);
    assert_eq!(two.next_after, all[1].id);
    assert!(!two.at_head);

    let stats = storage.stats().await.unwrap();
    assert_eq!(stats.events, all.len() as u64);
    assert_eq!(stats.oldest_event, Some(all[0].time));
    storage.close().await;
}

/// A transaction of the test's own that inserts an animal and so takes an
/// event id, left open; returns the id.
async fn hold_an_event(client: &tokio_postgres::Client) -> i64 {
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute(
            "INSERT INTO pets (name, category_id, status) VALUES ('Held', 1, 'available')",
            &[],
        )
        .await
        .unwrap();
    let row = client
        .query_one("SELECT currval('events_ids')", &[])
        .await
        .unwrap();
    row.get(0)
}

/// Waits until the head's watcher (of the one instance on the database)
/// has finished a round that began after now, as the database saw its
/// statements start: three of its horizon statements started after now,
/// so the second's round read the ids after now, and the third's began
/// once the second's was done.
async fn a_whole_round_later(client: &tokio_postgres::Client) {
    let mut since: chrono::DateTime<chrono::Utc> = client
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    for _ in 0..3 {
        since = eventually_some("the head's watcher runs a round", SOON, || async {
            client
                .query_opt(
                    "SELECT query_start FROM pg_stat_activity
                     WHERE pid <> pg_backend_pid() AND datname = current_database()
                       AND query LIKE '%pg_current_snapshot() AS snapshot%'
                       AND query_start > $1",
                    &[&since],
                )
                .await
                .unwrap()
                .map(|row| row.get(0))
        })
        .await;
    }
}

/// On a cluster of its own: no other test's transactions end there, so
/// nothing but the transactions below decides what the snapshots show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_never_passes_an_event_that_may_still_appear() {
    let Some(cluster) = petstore_support::postgres::own_cluster().await else {
        return;
    };
    let database = cluster.fresh_database().await;
    let storage = open(&database).await;
    let before = storage.create(pet("Before", None)).await.unwrap();
    let mut cursor = None;
    let seen = new_events(&storage, &mut cursor).await;
    assert_eq!(pet_data(&seen[0]), &before);

    // B takes its xid first; A, newer, takes an event id and stays open;
    // then B takes a larger one and commits. B's xid is the newest that
    // completed, so A is in neither the snapshots' xmax nor their xip: a
    // head read from them alone would pass A's id.
    let b = raw(&database).await;
    b.batch_execute("BEGIN; SELECT pg_current_xact_id()")
        .await
        .unwrap();
    let a = raw(&database).await;
    let held = hold_an_event(&a).await;
    b.batch_execute(
        "INSERT INTO pets (name, category_id, status) VALUES ('Later', 1, NULL); COMMIT",
    )
    .await
    .unwrap();
    let observer = raw(&database).await;
    a_whole_round_later(&observer).await;
    let page = page(&storage, every_kind(cursor)).await;
    assert!(page.head < held, "{page:?} passed the uncommitted {held}");
    assert_eq!(page.events, [], "{page:?}");
    // A write of this instance's own, which a page waits for (in vain,
    // while A is open).
    let after = storage.create(pet("After", None)).await.unwrap();
    let page = self::page(&storage, every_kind(cursor)).await;
    assert!(page.head < held, "{page:?} passed the uncommitted {held}");
    assert_eq!(page.events, [], "{page:?}");
    assert!(*storage.events_head().borrow() < held);
    // A cursor read on from that page skips nothing either.
    cursor = Some(page.next_after);

    a.batch_execute("COMMIT").await.unwrap();
    let seen = new_events(&storage, &mut cursor).await;
    let names: Vec<&str> = seen.iter().map(|e| pet_data(e).name.as_str()).collect();
    assert_eq!(names, ["Held", "Later", "After"]);
    assert_eq!(seen[0].id, held);
    assert_eq!(pet_data(&seen[2]), &after);
    assert_increasing(&seen);
    storage.close().await;
}

/// What one instance acknowledged is in the next page read on another,
/// although that one's head learns of other instances' writes only when
/// their notification arrives (or at its next poll): the page sees ids
/// taken above its head and is read again once the head has passed them.
/// Twenty times, each way in turn (a page that merely came after a
/// notification or a poll would pass now and then, not every time).
/// On a cluster of its own: another test's long transaction would hold
/// the head back, and the page would rightly not wait for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_read_on_one_instance_has_what_another_just_acknowledged() {
    let Some(cluster) = petstore_support::postgres::own_cluster().await else {
        return;
    };
    let database = cluster.fresh_database().await;
    let one = open(&database).await;
    let two = open(&database).await;
    let mut cursor = None;
    assert_eq!(new_events(&one, &mut cursor).await, []);
    for round in 0..20 {
        let (writer, reader) = match round % 2 {
            0 => (&one, &two),
            _ => (&two, &one),
        };
        let created = writer
            .create(pet(&format!("acknowledged-{round}"), None))
            .await
            .unwrap();
        let page = page(reader, every_kind(cursor)).await;
        let got: Vec<&Pet> = page.events.iter().map(pet_data).collect();
        assert_eq!(got, [&created], "round {round}: {page:?}");
        cursor = Some(page.next_after);
    }
    one.close().await;
    two.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_page_with_an_event_after_it_is_not_at_the_head() {
    let Some(database) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    let storage = open(&database).await;
    for n in 0..3 {
        storage
            .create(pet(&format!("one-of-three-{n}"), None))
            .await
            .unwrap();
    }
    let mut cursor = None;
    assert_eq!(new_events(&storage, &mut cursor).await.len(), 3);
    // Every kind (a plain range), then a filter (the filtering statement).
    for kinds in [EnumSet::all(), EnumSet::only(EventKind::PetCreated)] {
        let query = EventQuery {
            limit: 2,
            kinds,
            ..every_kind(None)
        };
        let first = page(&storage, query).await;
        assert_eq!(first.events.len(), 2, "{first:?}");
        assert!(!first.at_head, "the third event is left: {first:?}");
        let rest = page(
            &storage,
            EventQuery {
                after: Some(first.next_after),
                ..query
            },
        )
        .await;
        assert_eq!((rest.events.len(), rest.at_head), (1, true), "{rest:?}");
    }
    storage.close().await;
}

/// The contract's JSON of `events`, as serde writes it.
fn contract_json(events: &[StoredEvent]) -> String {
    let events: Vec<_> = events.iter().map(StoredEvent::to_contract).collect();
    serde_json::to_string(&events).unwrap()
}

/// The page `listEvents` would answer, read to `to`.
async fn answered(
    storage: &PostgresStorage,
    query: EventQuery,
    to: ReadTo,
) -> EventPage<EncodedEvents> {
    match storage
        .encoded_events(query, to)
        .await
        .expect("read the feed")
    {
        EventsOutcome::Page(page) => page,
        EventsOutcome::Expired { floor } => panic!("{query:?}: expired below {floor}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_answered_is_its_events_in_the_contract_s_json_to_either_head() {
    let Some(database) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    let storage = open(&database).await;
    // Every kind of event, names that need escaping, two customers.
    let names = ["Rex \"the\" dog", "naïve \\ café 🐕 \u{2028}"];
    for (i, name) in names.into_iter().enumerate() {
        let animal = storage
            .create(pet(name, Some(PetStatus::Available)))
            .await
            .unwrap();
        let PlaceOutcome::Placed(order) = storage
            .place_order(animal.id, owner(i as u8), None)
            .await
            .unwrap()
        else {
            panic!("{name} is available");
        };
        let to = [OrderUpdateStatus::Delivered, OrderUpdateStatus::Cancelled][i];
        storage.update_order(order.id, to).await.unwrap();
    }
    storage.create(pet("without a status", None)).await.unwrap();
    let mut cursor = None;
    let all = new_events(&storage, &mut cursor).await;
    assert_eq!(all.len(), 2 * 5 + 1);
    let orders = EventKind::OrderPlaced | EventKind::OrderDelivered | EventKind::OrderCancelled;
    let queries = [
        every_kind(None),
        EventQuery {
            limit: 3,
            ..every_kind(Some(all[1].id))
        },
        EventQuery {
            owner: Some(owner(1).id),
            kinds: orders,
            ..every_kind(None)
        },
        EventQuery {
            kinds: EventKind::PetCreated | EventKind::PetSold,
            ..every_kind(None)
        },
        every_kind(cursor),
    ];
    for query in queries {
        let stored = page(&storage, query).await;
        // To the head; then to the known head, read, then kept for the
        // next poll parked at the same cursor and head.
        for to in [ReadTo::Head, ReadTo::KnownHead, ReadTo::KnownHead] {
            let answered = answered(&storage, query, to).await;
            assert_eq!(
                (answered.next_after, answered.head, answered.at_head),
                (stored.next_after, stored.head, stored.at_head),
                "{query:?} {to:?}"
            );
            assert_eq!(answered.events.is_empty(), stored.events.is_empty());
            assert_eq!(
                String::from_utf8(answered.events.into_bytes()).unwrap(),
                contract_json(&stored.events),
                "{query:?} {to:?}"
            );
        }
    }
    // Once the head moves, the page kept for parked polls is read again.
    let later = storage.create(pet("later", None)).await.unwrap();
    let at_head = every_kind(cursor);
    eventually_some("the later event, to the known head", SOON, || async {
        let answered = answered(&storage, at_head, ReadTo::KnownHead).await;
        let json = String::from_utf8(answered.events.into_bytes()).unwrap();
        json.contains(&format!("\"subject\":\"pets/{}\"", later.id))
            .then_some(())
    })
    .await;
    storage.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_poll_sleeps_through_other_kinds_and_wakes_for_its_own() {
    let Some(database) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    let storage = Arc::new(open(&database).await);
    let animal = storage
        .create(pet("parked-on", Some(PetStatus::Available)))
        .await
        .unwrap();
    let mut cursor = None;
    new_events(&storage, &mut cursor).await;
    let parked_at = cursor.expect("a head");
    // Beyond every wait of this test: only an event ends these.
    let far = tokio::time::Instant::now() + 3 * SOON;
    let parked = |kind: EventKind| {
        let storage = Arc::clone(&storage);
        tokio::spawn(async move {
            storage
                .events_after(EnumSet::only(kind), parked_at, far)
                .await
        })
    };
    let delivered = parked(EventKind::OrderDelivered);
    let placed = parked(EventKind::OrderPlaced);
    for n in 0..50 {
        storage
            .create(pet(&format!("other-{n}"), None))
            .await
            .unwrap();
    }
    let order = match storage
        .place_order(animal.id, owner(1), None)
        .await
        .unwrap()
    {
        PlaceOutcome::Placed(order) => order,
        other => panic!("{other:?}"),
    };
    let woken = within("the poll on order.placed", SOON, placed).await;
    assert!(woken.unwrap().read);
    // Another look of the scout after the one that woke that poll: one
    // that woke every poll at each move of the head would have woken it.
    let head = page(&storage, every_kind(cursor)).await.head;
    storage.create(pet("one-more", None)).await.unwrap();
    let created = storage.events_after(EnumSet::only(EventKind::PetCreated), head, far);
    assert!(within("the poll on pet.created", SOON, created).await.read);
    assert!(!delivered.is_finished(), "woken with no delivery after it");
    // A poll on `order.delivered` whose wait ends: the scout has looked
    // past `head`, and its cursor may move past every event so far.
    let now = tokio::time::Instant::now();
    let ended = storage
        .events_after(EnumSet::only(EventKind::OrderDelivered), parked_at, now)
        .await;
    assert!(!ended.read && ended.quiet > head, "{ended:?}, head {head}");
    storage
        .update_order(order.id, OrderUpdateStatus::Delivered)
        .await
        .unwrap();
    let woken = within("the poll on order.delivered", SOON, delivered).await;
    assert!(woken.unwrap().read);
    Arc::into_inner(storage).expect("one owner").close().await;
}

/// Orders and cancels the animals, in turn, `rounds` times, through
/// `storage`: every other order with an idempotency key of its own.
/// Returns how many orders it placed. (The Store may give up on an order
/// overtaken again and again, or answer 503 under load: what the feed must
/// show is read from the database afterwards.)
async fn shopper(
    storage: Arc<PostgresStorage>,
    animals: Vec<i64>,
    shopper: u8,
    rounds: usize,
) -> usize {
    let mut placed_count = 0;
    for round in 0..rounds {
        let pet_id = animals[(round + usize::from(shopper)) % animals.len()];
        let key = (round % 2 == 0).then(|| {
            once(
                &format!("shopper-{shopper}-{round}"),
                order_fingerprint(pet_id),
            )
        });
        let order = match storage.place_order(pet_id, owner(shopper), key).await {
            Ok(PlaceOutcome::Placed(order)) => order,
            Ok(PlaceOutcome::NotAvailable(_) | PlaceOutcome::KeyInUse) | Err(_) => continue,
            Ok(other) => panic!("{other:?}"),
        };
        placed_count += 1;
        let cancelled = storage
            .update_order(order.id, OrderUpdateStatus::Cancelled)
            .await;
        // Only its placer changes an order here.
        assert!(
            matches!(cancelled, Ok(UpdateOutcome::Done(_)) | Err(_)),
            "{cancelled:?}"
        );
    }
    placed_count
}

/// Reads the feed from the start through `storage` until it has read
/// `total` events (once known), waiting on the head between pages at the
/// head.
async fn tail(
    storage: Arc<PostgresStorage>,
    total: Arc<std::sync::Mutex<Option<usize>>>,
) -> Vec<StoredEvent> {
    let mut head = storage.events_head();
    let mut cursor = None;
    let mut seen = Vec::new();
    loop {
        let page = page(&storage, every_kind(cursor)).await;
        cursor = Some(page.next_after);
        seen.extend(page.events);
        let expected = *total.lock().unwrap();
        if expected.is_some_and(|total| seen.len() >= total) {
            return seen;
        }
        if page.at_head {
            // Woken by the head, or by the end of the writers (whose last
            // events came from the other instance too: its poll moves it).
            let moved = page.head;
            let _ = tokio::time::timeout(
                Duration::from_millis(100),
                head.wait_for(|now| *now > moved),
            )
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_changing_the_same_animals_feed_every_event_once_in_order() {
    let Some(database) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    let one = Arc::new(open(&database).await);
    let two = Arc::new(open(&database).await);
    let mut animals = Vec::new();
    for i in 0..6 {
        let storage = if i % 2 == 0 { &one } else { &two };
        let created = storage
            .create(pet(&format!("raced-{i}"), Some(PetStatus::Available)))
            .await
            .unwrap();
        animals.push(created.id);
    }
    let total = Arc::new(std::sync::Mutex::new(None));
    let tailer = tokio::spawn(tail(Arc::clone(&one), Arc::clone(&total)));
    let shoppers: Vec<_> = (0..4u8)
        .map(|i| {
            let storage = if i % 2 == 0 { &one } else { &two };
            tokio::spawn(shopper(Arc::clone(storage), animals.clone(), i, 60))
        })
        .collect();
    for shopper in shoppers {
        assert!(shopper.await.unwrap() > 0, "a shopper placed no order");
    }
    // What was committed, as the database has it.
    let client = raw(&database).await;
    let column = async |sql: &str| -> Vec<(i64, String)> {
        let rows = client.query(sql, &[]).await.unwrap();
        rows.iter().map(|row| (row.get(0), row.get(1))).collect()
    };
    let committed: Vec<i64> = column("SELECT id, '' FROM events ORDER BY id")
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let orders_stored = column("SELECT id, status FROM orders").await;
    let animals_stored = column("SELECT id, status FROM pets").await;
    *total.lock().unwrap() = Some(committed.len());
    let seen = within("the tailer reads every event", SOON, tailer)
        .await
        .unwrap();

    // Each event once, in increasing ids, and nothing else.
    let ids: Vec<i64> = seen.iter().map(|event| event.id).collect();
    assert_eq!(ids, committed);
    assert_eq!(
        committed.len(),
        animals.len()
            + 2 * orders_stored.len()
            + 2 * {
                orders_stored
                    .iter()
                    .filter(|(_, status)| status == "cancelled")
                    .count()
            }
    );
    // Each animal's statuses in the order they changed: created available,
    // then ordered and returned in turn; each order placed, then
    // cancelled, its animal's change right after its own in id order.
    let mut statuses: HashMap<i64, Vec<Option<PetStatus>>> = HashMap::new();
    let mut orders: BTreeMap<i64, Vec<(EventKind, i64)>> = BTreeMap::new();
    for event in &seen {
        match &event.data {
            EventData::Pet(pet) => statuses.entry(pet.id).or_default().push(pet.status),
            EventData::Order(order) => orders
                .entry(order.id)
                .or_default()
                .push((event.kind, event.id)),
        }
    }
    for (pet_id, stored) in &animals_stored {
        let statuses = &statuses[pet_id];
        assert_eq!(
            statuses.last().unwrap().map(PetStatus::as_str),
            Some(stored.as_str()),
            "animal {pet_id} as stored"
        );
    }
    for (pet_id, statuses) in &statuses {
        assert_eq!(statuses[0], Some(PetStatus::Available), "{pet_id}");
        for (i, status) in statuses.iter().enumerate().skip(1) {
            let expected = match i % 2 {
                1 => PetStatus::Pending,
                _ => PetStatus::Available,
            };
            assert_eq!(*status, Some(expected), "animal {pet_id}: {statuses:?}");
        }
    }
    assert_eq!(orders.len(), orders_stored.len());
    for (order_id, status) in &orders_stored {
        let kinds: Vec<EventKind> = orders[order_id].iter().map(|(kind, _)| *kind).collect();
        let expected: &[EventKind] = match status.as_str() {
            "placed" => &[EventKind::OrderPlaced],
            _ => &[EventKind::OrderPlaced, EventKind::OrderCancelled],
        };
        assert_eq!(kinds, expected, "order {order_id}, {status}");
    }
    // An order's animal changes after it, and before anything else happens
    // to that animal.
    for (i, event) in seen.iter().enumerate() {
        if let EventData::Order(order) = &event.data {
            let animal = seen[i + 1..]
                .iter()
                .find(|later| matches!(&later.data, EventData::Pet(pet) if pet.id == order.pet_id))
                .expect("an order's animal changes after it");
            assert_eq!(animal.kind, event.kind.pet_change().unwrap(), "{event:?}");
        }
    }
    // The other instance reads the same feed.
    let mut from_two = Vec::new();
    let mut cursor = None;
    while from_two.len() < seen.len() {
        from_two.extend(new_events(&two, &mut cursor).await);
    }
    assert_eq!(from_two, seen);
    one.close().await;
    two.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_keeps_a_prefix_raises_the_floor_and_expires_cursors_below_it() {
    let Some(database) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    let storage = open(&database).await;
    for i in 0..5 {
        storage.create(pet(&format!("p{i}"), None)).await.unwrap();
    }
    let all = new_events(&storage, &mut None).await;
    let ids: Vec<i64> = all.iter().map(|event| event.id).collect();
    assert_eq!(ids.len(), 5);
    // The third is newer than the purge's limit: the purge stops there,
    // though the fourth and fifth are older.
    raw(&database)
        .await
        .execute(
            "UPDATE events SET at = now() + interval '1 day' WHERE id = $1",
            &[&ids[2]],
        )
        .await
        .unwrap();
    let all = new_events(&storage, &mut None).await;
    let an_hour = chrono::Duration::hours(1);
    let later = chrono::Utc::now() + an_hour;
    assert_eq!(storage.purge_events(later, 10).await.unwrap(), 2);
    let expired = storage.events(every_kind(Some(ids[0]))).await.unwrap();
    assert_eq!(expired, EventsOutcome::Expired { floor: ids[1] });
    let at_floor = page(&storage, every_kind(Some(ids[1]))).await;
    assert_eq!(at_floor.events, all[2..]);
    let from_start = page(&storage, every_kind(None)).await;
    assert_eq!(from_start.events, all[2..]);
    // Nothing before an hour ago; then at most one.
    assert_eq!(
        storage
            .purge_events(chrono::Utc::now() - an_hour, 10)
            .await
            .unwrap(),
        0
    );
    let much_later = chrono::Utc::now() + chrono::Duration::days(2);
    assert_eq!(storage.purge_events(much_later, 1).await.unwrap(), 1);
    assert_eq!(
        storage.events(every_kind(Some(ids[1]))).await.unwrap(),
        EventsOutcome::Expired { floor: ids[2] }
    );
    let stats = storage.stats().await.unwrap();
    assert_eq!(stats.events, 2);
    assert_eq!(stats.oldest_event, Some(all[3].time));
    // Everything gone: a cursor from the start begins at the floor.
    assert_eq!(storage.purge_events(much_later, 10).await.unwrap(), 2);
    let empty = page(&storage, every_kind(None)).await;
    assert_eq!(empty.events, []);
    assert_eq!(empty.next_after, ids[4]);
    assert!(empty.at_head);
    let stats = storage.stats().await.unwrap();
    assert_eq!((stats.events, stats.oldest_event), (0, None));
    storage.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_examines_at_most_its_bound_and_says_how_far_it_looked() {
    let Some(database) = petstore_support::postgres::fresh_database().await else {
        return;
    };
    let storage = open(&database).await;
    // More animals than a page examines, written as another instance
    // would: this one learns of them from the head.
    let count = i64::from(EVENT_SCAN_MAX) + 5;
    let client = raw(&database).await;
    client
        .execute(
            "INSERT INTO pets (name, category_id, status)
             SELECT 'many', n, 'available' FROM generate_series(1, $1::bigint) AS n",
            &[&count],
        )
        .await
        .unwrap();
    let last: i64 = client
        .query_one("SELECT max(id) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    let mut head = storage.events_head();
    within("the head passes the animals' events", SOON, async {
        head.wait_for(|head| *head >= last).await.unwrap();
    })
    .await;
    // A filter that matches none: the page examines its bound, says where
    // it stopped, and that it did not reach the head.
    let orders_only = |after| EventQuery {
        after,
        limit: 20,
        kinds: EventKind::OrderPlaced | EventKind::OrderCancelled,
        owner: None,
    };
    let first = page(&storage, orders_only(None)).await;
    assert_eq!(first.events, []);
    assert_eq!(first.next_after, i64::from(EVENT_SCAN_MAX));
    assert!(!first.at_head, "{first:?}");
    let second = page(&storage, orders_only(Some(first.next_after))).await;
    assert_eq!(second.events, []);
    assert_eq!(second.next_after, last);
    assert!(second.at_head, "{second:?}");
    // Unfiltered, a full page stops at its last event.
    let full = page(&storage, every_kind(Some(10))).await;
    let ids: Vec<i64> = full.events.iter().map(|event| event.id).collect();
    assert_eq!(ids, (11..=110).collect::<Vec<_>>());
    assert_eq!(full.next_after, 110);
    assert!(!full.at_head);
    let end = page(&storage, every_kind(Some(last - 100))).await;
    assert_eq!(end.events.len(), 100);
    assert_eq!(end.next_after, last);
    assert!(end.at_head, "a full page that ends at the head");
    storage.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_moves_again_after_a_database_restart() {
    let Some(cluster) = petstore_support::postgres::own_cluster().await else {
        return;
    };
    let database = cluster.fresh_database().await;
    let storage = open(&database).await;
    let first = storage.create(pet("First", None)).await.unwrap();
    let mut cursor = None;
    let seen = new_events(&storage, &mut cursor).await;
    assert_eq!(pet_data(&seen[0]), &first);

    let restarted = Arc::clone(&cluster);
    blocking(move || {
        restarted.stop();
        restarted.restart();
    })
    .await;
    // The first writes after the restart may find their connections
    // broken; a client retries.
    let second = eventually_some("a create after the restart", SOON, || async {
        storage.create(pet("Second", None)).await.ok()
    })
    .await;
    let seen = eventually_some("its event after the restart", SOON, || async {
        let Ok(EventsOutcome::Page(page)) = storage.events(every_kind(cursor)).await else {
            return None;
        };
        page.events
            .iter()
            .any(|event| pet_data(event) == &second)
            .then_some(page.events)
    })
    .await;
    assert_eq!(pet_data(seen.last().unwrap()), &second);
    // Another instance's write, which this one learns of by its poll.
    raw(&database)
        .await
        .execute(
            "INSERT INTO pets (name, category_id, status) VALUES ('Elsewhere', 1, NULL)",
            &[],
        )
        .await
        .unwrap();
    let mut head = storage.events_head();
    let last = seen.last().unwrap().id;
    within("the head passes another instance's event", SOON, async {
        head.wait_for(|head| *head > last).await.unwrap();
    })
    .await;
    storage.close().await;
}

/// A value of the head waits until the WAL up to it is flushed, and a
/// commit that does not wait for the disk leaves the WAL unflushed (the
/// webhooks' bookkeeping commits so, and so does the notification to the
/// other instances unless it writes to the WAL): the watcher has the WAL
/// flushed (by its notification, or on its own when a value waits only for
/// the disk) rather than wait for the WAL writer. Here every write of the
/// storage commits so (`synchronous_commit=off` in its URL), and so does
/// another session's, and the WAL writer runs every 10 s: each write is
/// still in the feed at once. (It fails with neither flush.) On a cluster
/// of its own, whose WAL writer this test slows down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_does_not_wait_for_the_wal_writer() {
    let Some(cluster) = petstore_support::postgres::own_cluster().await else {
        return;
    };
    let database = cluster.fresh_database().await;
    cluster.slow_wal_writer().await.unwrap();
    let admin = raw(&database).await;
    let url = format!("{}?options=-c%20synchronous_commit%3Doff", database.url());
    let storage = PostgresStorage::open(&PostgresUrl::parse(&url).unwrap())
        .await
        .expect("open the database");
    let mut cursor = None;
    new_events(&storage, &mut cursor).await;
    // The WAL writer would show each in 10 to 30 s.
    let at_once = Duration::from_secs(5);
    for n in 0..3 {
        let created = storage
            .create(pet(&format!("async-{n}"), None))
            .await
            .unwrap();
        let shown = async {
            loop {
                let events = new_events(&storage, &mut cursor).await;
                if events.iter().any(|event| event.resource() == created.id) {
                    return;
                }
            }
        };
        within("the write in the feed", at_once, shown).await;
    }
    // A write this instance did not make (another instance's, say, whose
    // notification is not awaited here): the watcher finds it at its poll,
    // and has the WAL flushed itself.
    admin
        .batch_execute("SET synchronous_commit = off")
        .await
        .unwrap();
    let elsewhere: i64 = admin
        .query_one(
            "INSERT INTO pets (name, category_id, status) VALUES ('elsewhere', 1, 'available')
             RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let shown = async {
        loop {
            let events = new_events(&storage, &mut cursor).await;
            if events.iter().any(|event| event.resource() == elsewhere) {
                return;
            }
        }
    };
    within("another session's write in the feed", at_once, shown).await;
    storage.close().await;
}
