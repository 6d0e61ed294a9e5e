//! [`Client::follow_events`]: the feed of events (since 1.6.0) as an endless
//! [`Stream`] that long-polls the service, yields every event once and in
//! the feed's order, and goes on from where it was through outages.

use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt, stream};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, HeaderMap};
use serde::de::DeserializeOwned;

use crate::retry::is_throttled;
use crate::walk::next_link;
use crate::{
    Client, ClientInfo, DEFAULT_TIMEOUT, Error, EventType, PAGE_SIZE_MAX, ResponseValue,
    RetryPolicy, types,
};

/// The longest `wait` the service grants a request of the feed (the
/// contract's maximum), in seconds: how long [`Client::follow_events`] asks
/// it to hold each request while there is nothing new.
pub const EVENTS_WAIT_MAX: u32 = 30;

/// How long one request of the follower may take in all: the service's
/// wait, then as long as any other request may take ([`DEFAULT_TIMEOUT`]).
/// The client's own timeout may be shorter than the wait (it is
/// [`DEFAULT_TIMEOUT`] for [`Client::with_api_key`]'s): each request sets
/// this one instead.
const REQUEST_TIMEOUT: Duration =
    Duration::from_secs(EVENTS_WAIT_MAX as u64 + DEFAULT_TIMEOUT.as_secs());

/// The follower's attempts at one request by default: no limit that an
/// outage could reach (at the default's waits, centuries), since a follower
/// of a live feed is meant to outlast outages.
const UNLIMITED_ATTEMPTS: u32 = u32::MAX;

/// The statuses other than `200` that the contract declares for
/// `listEvents`, each with the service's `types::Error` body.
const DECLARED_ERRORS: [u16; 7] = [400, 401, 403, 410, 429, 500, 503];

/// The feed followed by [`Client::follow_events`].
#[derive(Clone, Debug)]
#[must_use = "a follower does nothing until it is streamed"]
pub struct FollowEvents<'a> {
    client: &'a Client,
    /// The event to start after, or why the one given cannot be.
    after: Result<Option<types::ListEventsAfter>, String>,
    /// The types asked for (`None`: every type), or why they cannot be.
    types: Result<Option<types::ListEventsTypes>, String>,
    policy: RetryPolicy,
}

impl Client {
    /// The feed of events (`GET /events`), followed live: an endless
    /// [`Stream`] of every event the key may see, each once, in the feed's
    /// order, from the oldest event the service keeps (or after the one
    /// given to [`FollowEvents::after`]).
    ///
    /// Each request asks for up to [`PAGE_SIZE_MAX`] events and lets the
    /// service wait up to [`EVENTS_WAIT_MAX`] seconds for one (a long poll),
    /// with a timeout of its own longer than that wait, whatever the
    /// client's. The next request starts after the last event of the page,
    /// or, after an empty page, where the page's `Link: <…>; rel="next"`
    /// says the service read up to (past events of other types or that the
    /// key may not see); it is sent at once, since the service has already
    /// waited.
    ///
    /// A request that fails for a reason that may pass — no answer, a
    /// broken connection or a timeout, `429`, `503` or another `5xx` — is
    /// sent again from the same position, after the `Retry-After` of a `429`
    /// or `503`, else after a backoff with jitter. By default it is sent
    /// again for as long as that takes, so that the stream goes on through
    /// a restart or an outage of any length: waits capped at 100 ms
    /// doubling up to 5 s, and a `Retry-After` of up to 30 s waited for
    /// (the [`RetryPolicy::default`]'s, without its limit on the attempts).
    /// [`FollowEvents::retry`] gives a policy of its own, whose
    /// `max_attempts` counts the attempts of each request apart. Any other
    /// error (`410 cursor_expired`: the position is older than the service
    /// keeps events; `400`; `401`; `403`), a `Retry-After` longer than the
    /// policy waits for, and the last error when a policy with a limit gives
    /// up, is the stream's last item: the stream never skips an event
    /// silently. After it, start again after the last event read, or, after
    /// a `410`, without `after`.
    ///
    /// ```no_run
    /// use futures::TryStreamExt;
    /// use petstore_client::{Client, EventType};
    ///
    /// # async fn example() -> Result<(), petstore_client::Error<petstore_client::types::Error>> {
    /// let client = Client::with_api_key("http://127.0.0.1:8080/v1", "my-api-key");
    /// let mut events = client
    ///     .follow_events()
    ///     .after("41") // the `id` of the last event read, kept from before
    ///     .types(&[EventType::OrderPlaced, EventType::OrderDelivered])
    ///     .stream();
    /// while let Some(event) = events.try_next().await? {
    ///     match (event.event_type(), event.order()) {
    ///         (Some(EventType::OrderPlaced), Some(order)) => println!("order {} placed", order.id),
    ///         (Some(EventType::OrderDelivered), Some(order)) => println!("order {} delivered", order.id),
    ///         _ => {} // a type this version does not know: skip it
    ///     }
    ///     // ... and keep `event.id` to go on after it next time.
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn follow_events(&self) -> FollowEvents<'_> {
        FollowEvents {
            client: self,
            after: Ok(None),
            types: Ok(None),
            policy: RetryPolicy::with_max_attempts(UNLIMITED_ATTEMPTS),
        }
    }
}

impl<'a> FollowEvents<'a> {
    /// Starts after the event `id` (an event's `id`: decimal digits), the
    /// last one read, instead of at the oldest event the service keeps. An
    /// `id` that is not one is the stream's only item, an
    /// [`Error::InvalidRequest`].
    pub fn after<V>(mut self, id: V) -> FollowEvents<'a>
    where
        V: TryInto<types::ListEventsAfter>,
    {
        self.after = id
            .try_into()
            .map(Some)
            .map_err(|_| "an event's id, decimal digits, was expected for after".to_owned());
        self
    }

    /// Only events of `types` (none given, the default: every type).
    pub fn types(mut self, types: &[EventType]) -> FollowEvents<'a> {
        self.types = match types {
            [] => Ok(None),
            types => {
                let types: Vec<&str> = types.iter().map(|t| t.as_str()).collect();
                types::ListEventsTypes::try_from(types.join(","))
                    .map(Some)
                    .map_err(|e| format!("types: {e}"))
            }
        };
        self
    }

    /// Sends a request again as `policy` says instead of for as long as it
    /// takes: `RetryPolicy::with_max_attempts(n)` ends the stream with the
    /// error of the `n`th failed attempt at one request.
    pub fn retry(mut self, policy: RetryPolicy) -> FollowEvents<'a> {
        self.policy = policy;
        self
    }

    /// The events, as they come. The stream ends only after an error, its
    /// last item. It is `Send` and `Unpin`.
    pub fn stream(
        self,
    ) -> impl Stream<Item = Result<types::Event, Error<types::Error>>> + Send + Unpin + 'a {
        let FollowEvents {
            client,
            after,
            types,
            policy,
        } = self;
        // A parameter that cannot be sent is the first step's error.
        let (start, types) = match types {
            Ok(types) => (after, types),
            Err(message) => (Err(message), None),
        };
        // State: where the next request starts.
        stream::try_unfold(start, move |after| {
            let types = types.clone();
            let policy = policy.clone();
            async move {
                let after = after.map_err(Error::<types::Error>::InvalidRequest)?;
                let page = page_retrying(client, after, types.as_ref(), &policy).await?;
                Ok::<_, Error<types::Error>>(Some((page.events, Ok(page.next))))
            }
        })
        .map_ok(|events| stream::iter(events.into_iter().map(Ok)))
        .try_flatten()
        .boxed()
    }
}

/// A page of the feed, and where the next one starts.
struct Page {
    events: Vec<types::Event>,
    next: Option<types::ListEventsAfter>,
}

/// The page after `after`, asked for again, as `policy` says, while it fails
/// for a reason that may pass.
async fn page_retrying(
    client: &Client,
    after: Option<types::ListEventsAfter>,
    types: Option<&types::ListEventsTypes>,
    policy: &RetryPolicy,
) -> Result<Page, Error<types::Error>> {
    let mut attempt = 1;
    loop {
        let error = match page(client, after.as_ref(), types).await {
            Ok(page) => return Ok(page),
            Err(error) => error,
        };
        let Some(wait) = policy.wait_after(&error, attempt, may_pass(&error)) else {
            return Err(error);
        };
        tokio::time::sleep(wait).await;
        attempt = attempt.saturating_add(1);
    }
}

/// One long poll of the feed after `after`.
///
/// The request is the generated `list_events()`'s, sent here because that
/// one cannot be given a timeout of its own: with the client's, a request
/// held for the whole wait would time out on every quiet stretch of the
/// feed. Its answer is read as the generated code reads it.
async fn page(
    client: &Client,
    after: Option<&types::ListEventsAfter>,
    types: Option<&types::ListEventsTypes>,
) -> Result<Page, Error<types::Error>> {
    let mut request = client
        .client
        .get(format!("{}/events", client.baseurl))
        .header(ACCEPT, "application/json")
        .header("api-version", <Client as ClientInfo<()>>::api_version())
        .query(&[("limit", PAGE_SIZE_MAX), ("wait", EVENTS_WAIT_MAX)])
        .timeout(REQUEST_TIMEOUT);
    if let Some(after) = after {
        request = request.query(&[("after", after.as_str())]);
    }
    if let Some(types) = types {
        request = request.query(&[("types", types.as_str())]);
    }
    let response = request.send().await?;
    match response.status() {
        StatusCode::OK => {}
        status if DECLARED_ERRORS.contains(&status.as_u16()) => {
            return Err(Error::ErrorResponse(json(response).await?));
        }
        _ => return Err(Error::UnexpectedResponse(response)),
    }
    let events: ResponseValue<Vec<types::Event>> = json(response).await?;
    let next = match events.last() {
        // Its `id`, which the contract makes decimal digits.
        Some(last) => match types::ListEventsAfter::try_from(last.id.as_str()) {
            Ok(position) => Some(position),
            Err(e) => return Err(not_a_position(last, e)),
        },
        // Past the events it skipped for this key and these types; without
        // a usable link (the contract says there is always one), from the
        // same place.
        None => link_after(events.headers()).or_else(|| after.cloned()),
    };
    Ok(Page {
        events: events.into_inner(),
        next,
    })
}

/// The body of `response` as JSON, with its status and headers.
async fn json<T: DeserializeOwned>(
    response: reqwest::Response,
) -> Result<ResponseValue<T>, Error<types::Error>> {
    let (status, headers) = (response.status(), response.headers().clone());
    let body = response.bytes().await.map_err(Error::ResponseBodyError)?;
    match serde_json::from_slice(&body) {
        Ok(value) => Ok(ResponseValue::new(value, status, headers)),
        Err(e) => Err(Error::InvalidResponsePayload(body, e)),
    }
}

/// The error of an `event` whose `id` is not a position in the feed: an
/// answer the contract does not describe, which the follower could not go
/// on from.
fn not_a_position(event: &types::Event, e: types::error::ConversionError) -> Error<types::Error> {
    let why = format!("event id {:?} is not a position in the feed: {e}", event.id);
    let body = serde_json::to_vec(event).unwrap_or_default();
    Error::InvalidResponsePayload(body.into(), serde::de::Error::custom(why))
}

/// The `after` of the response's `Link: <…>; rel="next"`.
fn link_after(headers: &HeaderMap) -> Option<types::ListEventsAfter> {
    let (_, query) = next_link(headers)?.split_once('?')?;
    let query = query.split('#').next().unwrap_or_default();
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("after="))
        .and_then(|after| after.parse().ok())
}

/// Whether `error` may pass by itself, so that the same request is worth
/// sending again: no answer, or the connection broke (a timeout among
/// them); `429` or `503`, the service refusing for now; or another `5xx`,
/// from the service or a proxy in front of it (a `504` of a proxy that
/// holds requests for less than the wait). Reading the feed again changes
/// nothing, so any of them may be retried. What no retry changes (`400`,
/// `401`, `403`, `410`, an answer the contract does not describe) ends the
/// stream.
fn may_pass(error: &Error<types::Error>) -> bool {
    if is_throttled(error) {
        return true;
    }
    match error {
        Error::CommunicationError(_) | Error::ResponseBodyError(_) => true,
        Error::ErrorResponse(response) => response.status().is_server_error(),
        Error::UnexpectedResponse(response) => response.status().is_server_error(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderValue, LINK};

    fn with_link(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(LINK, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn an_empty_page_goes_on_from_the_link_s_after() {
        let link = "</v1/events?limit=100&types=pet.created&wait=30&after=977>; rel=\"next\"";
        assert_eq!(link_after(&with_link(link)).unwrap().as_str(), "977");
        let first = "</v1/events?after=12&limit=100>; rel=\"next\"";
        assert_eq!(link_after(&with_link(first)).unwrap().as_str(), "12");
        // Nothing usable: no `after`, one that is not a position, no next.
        for unusable in [
            "</v1/events?limit=100&wait=30>; rel=\"next\"",
            "</v1/events?limit=100&after=-1>; rel=\"next\"",
            "</v1/events?safter=5>; rel=\"next\"",
            "</v1/events?after=5>; rel=\"prev\"",
        ] {
            assert_eq!(link_after(&with_link(unusable)), None, "{unusable}");
        }
        assert_eq!(link_after(&HeaderMap::new()), None);
    }

    #[test]
    fn an_id_that_is_not_a_position_is_refused_before_sending() {
        let client = Client::with_api_key("http://127.0.0.1:1/v1", "k");
        assert!(client.follow_events().after("42").after.is_ok());
        assert!(client.follow_events().after("4a2").after.is_err());
        let all = client.follow_events().types(&[]);
        assert_eq!(all.types, Ok(None));
        let some = client
            .follow_events()
            .types(&[EventType::OrderPlaced, EventType::PetCreated]);
        assert_eq!(
            some.types.unwrap().unwrap().as_str(),
            "order.placed,pet.created"
        );
    }
}
