//! `Client::follow_events`: the feed followed live. Against the crate's
//! generated mocks (the feed's pages, its empty pages and their `Link`, its
//! refusals, as the contract writes them), then against the real server.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use httpmock::MockServer;
use petstore_client::mock::MockServerExt;
use petstore_client::{Client, Error, EventType, NewPet, PetStatus, RetryPolicy, types};
use petstore_support::FaultProxy;
use serde_json::json;

use crate::error_response;

/// An event of the feed.
fn event(id: u64, type_: &str, data: serde_json::Value) -> types::Event {
    let serde_json::Value::Object(data) = data else {
        panic!("data is an object");
    };
    types::Event::builder()
        .specversion("1.0")
        .id(id.to_string())
        .source("/v1")
        .type_(type_)
        .subject(format!("pets/{}", data["id"]))
        .time(
            "2026-11-24T09:30:00.123456Z"
                .parse::<chrono::DateTime<chrono::Utc>>()
                .unwrap(),
        )
        .datacontenttype("application/json")
        .data(data)
        .try_into()
        .unwrap()
}

fn pet_created(id: u64, pet_id: i64) -> types::Event {
    event(
        id,
        "pet.created",
        json!({"id": pet_id, "name": "Rex", "categoryId": 1, "status": "available"}),
    )
}

fn order_placed(id: u64, order_id: i64) -> types::Event {
    event(
        id,
        "order.placed",
        json!({"id": order_id, "petId": 1, "status": "placed",
               "placedAt": "2026-11-24T09:30:00.123456Z"}),
    )
}

/// A position in the feed, as the mocks match it.
fn at(id: &str) -> types::ListEventsAfter {
    id.parse().unwrap()
}

/// The `Link` header of a page: read on after `after`.
fn next(after: &str) -> String {
    format!("</v1/events?limit=100&wait=30&after={after}>; rel=\"next\"")
}

/// The service's error body.
fn error(status: i32, code: &str) -> types::Error {
    types::Error::builder()
        .status(status)
        .code(code)
        .message(format!("{code}, as the mock says"))
        .try_into()
        .unwrap()
}

/// `GET /events` after `after` (`None`: from the start), as the follower
/// asks for it: the largest page, the longest wait.
fn page_after<'a>(
    server: &'a MockServer,
    after: Option<&str>,
    events: &[types::Event],
    link: &str,
) -> httpmock::Mock<'a> {
    let after = after.map(at);
    server.list_events(|when, then| {
        when.after(after.as_ref())
            .limit(NonZeroU32::new(100))
            .wait(30);
        then.ok(&events.to_vec()).into_inner().header("link", link);
    })
}

/// `GET /events` after `after` answered `410 cursor_expired`: it ends the
/// follower, so that a test can read the stream to its end.
fn expired_after<'a>(server: &'a MockServer, after: &str) -> httpmock::Mock<'a> {
    let after = at(after);
    server.list_events(|when, then| {
        when.after(&after);
        then.gone(&error(410, "cursor_expired"));
    })
}

/// `GET /events` after `after` answered `503` with `Retry-After`, the first
/// `times` times.
fn unavailable_after<'a>(
    server: &'a MockServer,
    after: &str,
    retry_after: &str,
    times: usize,
) -> httpmock::Mock<'a> {
    let after = at(after);
    server.list_events(|when, then| {
        when.after(&after);
        then.service_unavailable(&error(503, "service_unavailable"))
            .into_inner()
            .header("retry-after", retry_after)
            .up_to_n_times(times);
    })
}

fn client(server: &MockServer) -> Client {
    // The mocks match the contract's paths without `/v1`.
    Client::with_api_key(&server.base_url(), "test-key")
}

/// Every item of `stream`, to its end (each test's mocks end it).
fn read_to_end(
    stream: impl futures::Stream<Item = Result<types::Event, Error<types::Error>>>,
) -> Vec<Result<types::Event, Error<types::Error>>> {
    // Only a hang guard: a follower that loops where it should go on.
    let guard = Duration::from_secs(60);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { tokio::time::timeout(guard, stream.collect()).await })
        .expect("the stream ends")
}

/// The events before the stream's end, and the error that ended it.
fn events_then_error(
    items: Vec<Result<types::Event, Error<types::Error>>>,
) -> (Vec<types::Event>, Error<types::Error>) {
    let mut items = items.into_iter();
    let Some(Err(last)) = items.next_back() else {
        panic!("the stream ends with an error");
    };
    let events = items.map(|item| item.expect("an event")).collect();
    (events, last)
}

#[test]
fn pages_are_read_in_order_each_from_the_last_event_of_the_one_before() {
    let server = MockServer::start();
    let first = page_after(
        &server,
        None,
        &[pet_created(1, 7), order_placed(2, 3)],
        &next("2"),
    );
    let second = page_after(&server, Some("2"), &[pet_created(5, 8)], &next("5"));
    expired_after(&server, "5");
    let (events, end) = events_then_error(read_to_end(client(&server).follow_events().stream()));
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["1", "2", "5"]);
    assert_eq!(events[0].pet().unwrap().id, 7);
    assert_eq!(events[1].order().unwrap().id, 3);
    error_response(Err::<(), _>(end), 410, "cursor_expired");
    first.assert_calls(1);
    second.assert_calls(1);
}

/// The service may read past events the key may not see, or of other
/// types, and answer none: the next request starts where its `Link` says,
/// at once.
#[test]
fn an_empty_page_goes_on_from_where_its_link_says_the_service_read() {
    let server = MockServer::start();
    let empty = page_after(&server, Some("10"), &[], &next("17"));
    let then = page_after(&server, Some("17"), &[order_placed(18, 4)], &next("18"));
    expired_after(&server, "18");
    let started = Instant::now();
    let items = read_to_end(client(&server).follow_events().after("10").stream());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no wait after an empty page"
    );
    let (events, _) = events_then_error(items);
    assert_eq!(events, [order_placed(18, 4)]);
    empty.assert_calls(1);
    then.assert_calls(1);
}

/// A type this version does not know is in the stream, not skipped by it
/// nor an error: the caller skips it, as the contract asks.
#[test]
fn an_event_of_an_unknown_type_passes_through() {
    let server = MockServer::start();
    let visit = event(4, "vet.visit", json!({"id": 1, "clinic": "North"}));
    page_after(
        &server,
        Some("3"),
        &[visit.clone(), pet_created(5, 9)],
        &next("5"),
    );
    expired_after(&server, "5");
    let (events, _) = events_then_error(read_to_end(
        client(&server).follow_events().after("3").stream(),
    ));
    assert_eq!(events, [visit, pet_created(5, 9)]);
    assert_eq!(events[0].event_type(), None);
    assert_eq!((events[0].pet(), events[0].order()), (None, None));
    assert_eq!(events[1].event_type(), Some(EventType::PetCreated));
}

/// A `503` with `Retry-After` is waited for, and the same position asked
/// for again: nothing skipped, nothing twice.
#[test]
fn a_503_is_waited_for_then_the_same_position_asked_for_again() {
    let server = MockServer::start();
    let unavailable = unavailable_after(&server, "20", "1", 1);
    let served = page_after(&server, Some("20"), &[pet_created(21, 1)], &next("21"));
    expired_after(&server, "21");
    let started = Instant::now();
    let (events, _) = events_then_error(read_to_end(
        client(&server).follow_events().after("20").stream(),
    ));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After waited for"
    );
    assert_eq!(events, [pet_created(21, 1)]);
    unavailable.assert_calls(1);
    served.assert_calls(1);
}

/// A `504` of a proxy (not the contract's) may pass too: asked for again
/// after a backoff. `429` is the service's "not now".
#[test]
fn a_proxy_s_504_and_a_429_are_asked_for_again() {
    let server = MockServer::start();
    let gateway = server.list_events(|when, then| {
        when.after(&at("30"));
        then.into_inner().status(504).up_to_n_times(1);
    });
    let limited = server.list_events(|when, then| {
        when.after(&at("30"));
        then.too_many_requests(&error(429, "rate_limited"))
            .into_inner()
            .header("retry-after", "0")
            .up_to_n_times(1);
    });
    page_after(&server, Some("30"), &[pet_created(31, 1)], &next("31"));
    expired_after(&server, "31");
    let (events, _) = events_then_error(read_to_end(
        client(&server).follow_events().after("30").stream(),
    ));
    assert_eq!(events, [pet_created(31, 1)]);
    gateway.assert_calls(1);
    limited.assert_calls(1);
}

/// By default a follower outlasts any outage: one request asked for again
/// well past the 10 attempts of `RetryPolicy::default`, then the feed read
/// on from the same position.
#[test]
fn by_default_a_follower_asks_again_for_as_long_as_an_outage_lasts() {
    let server = MockServer::start();
    let unavailable = unavailable_after(&server, "50", "0", 25);
    let served = page_after(&server, Some("50"), &[pet_created(51, 1)], &next("51"));
    expired_after(&server, "51");
    let (events, _) = events_then_error(read_to_end(
        client(&server).follow_events().after("50").stream(),
    ));
    assert_eq!(events, [pet_created(51, 1)]);
    unavailable.assert_calls(25);
    served.assert_calls(1);
}

/// An answer lost with its connection (the service restarting) is no
/// refusal: the same position is asked for again on a new one, and each
/// event comes once.
#[test]
fn a_connection_closed_without_an_answer_is_followed_by_the_same_request_again() {
    let server = MockServer::start();
    let served = page_after(&server, Some("60"), &[pet_created(61, 1)], &next("61"));
    expired_after(&server, "61");
    // The proxy runs on a runtime of its own, beside the follower's.
    let proxy_runtime = tokio::runtime::Runtime::new().unwrap();
    let proxy = proxy_runtime
        .block_on(FaultProxy::start(*server.address()))
        .unwrap();
    proxy.swallow_responses(2);
    let client = Client::with_api_key(&format!("http://{}", proxy.addr()), "test-key");
    let (events, end) = events_then_error(read_to_end(client.follow_events().after("60").stream()));
    assert_eq!(events, [pet_created(61, 1)]);
    error_response(Err::<(), _>(end), 410, "cursor_expired");
    // Two answers lost on the way back, then the third came through.
    assert_eq!(proxy.swallowed(), 2);
    served.assert_calls(3);
}

/// The policy bounds the attempts of one request: its last error ends the
/// stream.
#[test]
fn when_the_policy_gives_up_its_last_error_ends_the_stream() {
    let server = MockServer::start();
    let unavailable = server.list_events(|_, then| {
        then.service_unavailable(&error(503, "service_unavailable"))
            .into_inner()
            .header("retry-after", "0");
    });
    let client = client(&server);
    let follow = client
        .follow_events()
        .retry(RetryPolicy::with_max_attempts(3));
    let (events, end) = events_then_error(read_to_end(follow.stream()));
    assert!(events.is_empty());
    error_response(Err::<(), _>(end), 503, "service_unavailable");
    unavailable.assert_calls(3);
}

/// What no retry changes is the stream's last item, asked for once.
#[test]
fn a_410_and_the_other_refusals_end_the_stream_with_the_error() {
    for (status, code) in [
        (410, "cursor_expired"),
        (400, "bad_request"),
        (401, "unauthorized"),
        (403, "insufficient_scope"),
    ] {
        let server = MockServer::start();
        let refused = server.list_events(|when, then| {
            when.after(&at("1"));
            let body = error(status, code);
            match status {
                410 => then.gone(&body),
                400 => then.bad_request(&body),
                401 => then.unauthorized(&body),
                _ => then.forbidden(&body),
            };
        });
        let items = read_to_end(client(&server).follow_events().after("1").stream());
        let [end] = <[_; 1]>::try_from(items).expect("only the error");
        error_response(end, status as u16, code);
        refused.assert_calls(1);
    }
}

#[test]
fn the_types_asked_for_are_sent_and_a_bad_position_never_is() {
    let server = MockServer::start();
    let types: types::ListEventsTypes = "order.placed,order.cancelled".parse().unwrap();
    let filtered = server.list_events(|when, then| {
        when.types(&types).after(None);
        then.gone(&error(410, "cursor_expired"));
    });
    let client = client(&server);
    let follow = client
        .follow_events()
        .types(&[EventType::OrderPlaced, EventType::OrderCancelled]);
    let (_, end) = events_then_error(read_to_end(follow.stream()));
    error_response(Err::<(), _>(end), 410, "cursor_expired");
    filtered.assert_calls(1);

    let items = read_to_end(client.follow_events().after("-3").stream());
    assert!(
        matches!(items.as_slice(), [Err(Error::InvalidRequest(_))]),
        "{items:?}"
    );
    filtered.assert_calls(1);
}

/// The long poll outlasts the client's own timeout: a client whose requests
/// time out after 1 s still waits for a page the service holds for 2 s.
#[test]
fn a_long_poll_is_not_cut_short_by_the_client_s_timeout() {
    let server = MockServer::start();
    server.list_events(|when, then| {
        when.after(&at("40"));
        then.ok(&vec![pet_created(41, 1)])
            .into_inner()
            .header("link", next("41"))
            .delay(Duration::from_secs(2));
    });
    expired_after(&server, "41");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let impatient = Client::new_with_client(&server.base_url(), http);
    let follow = impatient
        .follow_events()
        .after("40")
        .retry(RetryPolicy::with_max_attempts(1));
    let (events, _) = events_then_error(read_to_end(follow.stream()));
    assert_eq!(events, [pet_created(41, 1)]);
}

/// Against the real server: what the client does is in the feed as it
/// happens, in order, each event once, with its resource. (Needs a storage
/// backend that implements the feed.)
#[tokio::test]
async fn the_real_feed_shows_changes_as_they_are_committed() {
    let server = petstore_tests::TestServer::start().await;
    let client = super::client(&server);
    let mut events = client.follow_events().stream();

    let rex = super::create(&client, "Rex", 1, Some(PetStatus::Available)).await;
    let created = events.try_next().await.unwrap().unwrap();
    assert_eq!(created.event_type(), Some(EventType::PetCreated));
    assert_eq!(created.pet(), Some(rex.clone()));

    let order = client.place_order_once(rex.id).send().await.unwrap().order;
    let placed = events.try_next().await.unwrap().unwrap();
    let changed = events.try_next().await.unwrap().unwrap();
    assert_eq!(placed.event_type(), Some(EventType::OrderPlaced));
    assert_eq!(placed.order().unwrap().id, order.id);
    assert_eq!(changed.event_type(), Some(EventType::PetStatusChanged));
    assert_eq!(changed.previousstatus, Some(PetStatus::Available));
    assert_eq!(changed.pet().unwrap().status, Some(PetStatus::Pending));

    // Started again after the first event, a follower of orders only reads
    // on from there.
    let mut orders = client
        .follow_events()
        .after(created.id.as_str())
        .types(&[EventType::OrderPlaced])
        .stream();
    assert_eq!(orders.try_next().await.unwrap(), Some(placed));
    let tom = NewPet::builder().name("Tom").category_id(2);
    client.create_pet().body(tom).send().await.unwrap();
    let next_created = events.try_next().await.unwrap().unwrap();
    assert_eq!(next_created.pet().unwrap().name.as_str(), "Tom");
}
