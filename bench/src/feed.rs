//! The feed of events (`GET /v1/events`, contract 1.6.0) as the bench uses
//! it: where the feed scenarios read ([`locate`]), long polls kept parked
//! at its head beside the runs ([`IdleFollowers`]), and the delay from a
//! commit to the followers waiting for it ([`follower_latency`]).
//!
//! Event ids are opaque digits, increasing in the feed's order but not
//! necessarily dense: the bench learns them from the feed itself.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::task::JoinSet;

use super::canned::FeedCursors;
use super::scenario::CREATE_BODY;

/// A follower's `wait`, in seconds: the contract's longest.
pub const WAIT_SECS: u64 = 30;
/// How long a follower's request may take before it is an error.
const POLL_TIMEOUT: Duration = Duration::from_secs(WAIT_SECS + 15);
/// How long the latency followers are given to park before the first
/// commit, and again after each commit's last receipt.
const PARK_FIRST: Duration = Duration::from_secs(1);
const PARK_AGAIN: Duration = Duration::from_millis(100);
/// How long every follower may take to receive a commit.
const RECEIPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The feed of a freshly seeded server.
#[derive(Clone, Copy, Debug)]
pub struct Feed {
    /// Where `events_page` and `events_page_deep` read.
    pub cursors: FeedCursors,
    /// The last event's id.
    pub head: u64,
}

/// One page of the feed.
struct Page {
    events: Vec<serde_json::Value>,
    /// The `Link: rel="next"` target (a path from `/v1`).
    next: String,
}

/// `GET path` (from `/v1`), which must be a `200` with a JSON array and a
/// `Link` to the next page.
async fn page(
    http: &reqwest::Client,
    addr: SocketAddr,
    key: &str,
    path: &str,
) -> anyhow::Result<Page> {
    let response = http
        .get(format!("http://{addr}{path}"))
        .bearer_auth(key)
        .send()
        .await
        .with_context(|| format!("GET {path}"))?;
    let status = response.status();
    let link = response.headers().get("link").cloned();
    let body = response
        .text()
        .await
        .with_context(|| format!("GET {path}"))?;
    if status != reqwest::StatusCode::OK {
        bail!("GET {path}: {status} {body}");
    }
    let next = link
        .and_then(|link| {
            Some(
                link.to_str()
                    .ok()?
                    .strip_prefix('<')?
                    .split_once('>')?
                    .0
                    .to_owned(),
            )
        })
        .with_context(|| format!("GET {path}: no Link <…>; rel=\"next\""))?;
    let events = serde_json::from_str(&body).with_context(|| format!("GET {path}: {body}"))?;
    Ok(Page { events, next })
}

/// An event's id, as a number.
fn id(event: &serde_json::Value) -> anyhow::Result<u64> {
    let id = event["id"]
        .as_str()
        .with_context(|| format!("an event without an id: {event}"))?;
    id.parse()
        .with_context(|| format!("an event id that is not digits: {id:?}"))
}

/// The first event's id, the last one's, and an id about 90 % of the way
/// from one to the other, from `limit=1` pages of the server at `addr`.
pub async fn locate(addr: SocketAddr, key: &str) -> anyhow::Result<Feed> {
    let http = reqwest::Client::new();
    search(async |after: Option<u64>| {
        let after = after.map_or(String::new(), |after| format!("&after={after}"));
        let page = page(&http, addr, key, &format!("/v1/events?limit=1{after}")).await?;
        page.events.first().map(id).transpose()
    })
    .await
}

/// [`locate`] with `next(after)`, the id of the first event after `after`
/// (from the feed's start for `None`), if any: about 2 log₂ of the id
/// range calls.
async fn search(
    next: impl AsyncFn(Option<u64>) -> anyhow::Result<Option<u64>>,
) -> anyhow::Result<Feed> {
    let Some(start) = next(None).await? else {
        bail!("the feed is empty, although the seeding created pets (each a pet.created event)");
    };
    // `low` is an event's id, `high` one at or past the last: double the
    // step past `low` until no event follows, then halve the gap.
    let (mut low, mut step) = (start, 1);
    let mut high = loop {
        match next(Some(low + step)).await? {
            Some(id) => (low, step) = (id, step * 2),
            None => break low + step,
        }
    };
    while low < high {
        let middle = low + (high - low) / 2;
        match next(Some(middle)).await? {
            Some(id) => low = id,
            None => high = middle,
        }
    }
    let deep = next(Some(start + (low - start) * 9 / 10)).await?;
    Ok(Feed {
        cursors: FeedCursors {
            start,
            deep: deep.unwrap_or(low),
        },
        head: low,
    })
}

/// The id and `time` of every event after `after`, read page by page.
pub async fn events_after(
    addr: SocketAddr,
    key: &str,
    mut after: u64,
) -> anyhow::Result<Vec<(u64, String)>> {
    let http = reqwest::Client::new();
    let mut events = Vec::new();
    loop {
        let path = format!("/v1/events?limit=100&after={after}");
        let page = page(&http, addr, key, &path).await?;
        if page.events.is_empty() {
            return Ok(events);
        }
        for event in &page.events {
            let time = event["time"].as_str().context("an event without a time")?;
            after = id(event)?;
            events.push((after, time.to_owned()));
        }
    }
}

/// What the idle followers counted.
#[derive(Default)]
struct Counts {
    polls: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Counts {
    /// Counts a failed poll, keeping the first error.
    fn failed(&self, error: &anyhow::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert_with(|| format!("{error:#}"));
    }
}

/// Long polls kept parked on a server (`--idle-followers`): each follower
/// asks for the events after the head with `wait=30`, and when it is
/// answered (the wait ended, or an event of its types came) asks again at
/// once from the answer's `Link: rel="next"`. They run on the bench's
/// runtime, beside wrk, until [`IdleFollowers::stop`].
pub struct IdleFollowers {
    tasks: JoinSet<()>,
    counts: Arc<Counts>,
    count: usize,
    started: Instant,
}

impl IdleFollowers {
    /// Starts `count` followers of the events of `types` (every type when
    /// `None`) after `head` on the server at `addr`.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        (addr, key): (SocketAddr, &str),
        count: usize,
        types: Option<&str>,
        head: u64,
    ) -> anyhow::Result<IdleFollowers> {
        let http = reqwest::Client::builder().timeout(POLL_TIMEOUT).build()?;
        let types = types.map_or(String::new(), |types| format!("&types={types}"));
        let first = format!("/v1/events?limit=20{types}&wait={WAIT_SECS}&after={head}");
        let counts = Arc::new(Counts::default());
        let mut tasks = JoinSet::new();
        for _ in 0..count {
            let (http, key, counts, mut path) = (
                http.clone(),
                key.to_owned(),
                Arc::clone(&counts),
                first.clone(),
            );
            tasks.spawn_on(
                async move {
                    loop {
                        match page(&http, addr, &key, &path).await {
                            Ok(page) => {
                                counts.polls.fetch_add(1, Ordering::Relaxed);
                                path = page.next;
                            }
                            Err(e) => {
                                counts.failed(&e);
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                        }
                    }
                },
                runtime,
            );
        }
        Ok(IdleFollowers {
            tasks,
            counts,
            count,
            started: Instant::now(),
        })
    }

    /// Stops them; returns what they did, for the report, and whether any
    /// poll failed.
    pub fn stop(mut self) -> (String, bool) {
        self.tasks.abort_all();
        let elapsed = self.started.elapsed().as_secs_f64();
        let polls = self.counts.polls.load(Ordering::Relaxed);
        let errors = self.counts.errors.load(Ordering::Relaxed);
        let first = self
            .counts
            .first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let mut summary = format!(
            "{} idle followers answered {polls} polls in {elapsed:.0} s (parked throughout: about {:.0})",
            self.count,
            self.count as f64 * (elapsed / WAIT_SECS as f64).floor(),
        );
        if let Some(first) = first {
            summary += &format!("; {errors} polls FAILED, the first: {first}");
        }
        (summary, errors > 0)
    }
}

/// One window of `--idle-cost`: steady creates, with `followers` long
/// polls parked beside them (none, or `--latency-followers`).
#[derive(Clone, Debug, PartialEq)]
pub struct IdleCost {
    pub followers: usize,
    /// The creates made, and the time they took (from before the first
    /// was sent to the last answer).
    pub creates: usize,
    pub elapsed: Duration,
    /// The server's CPU over the window, and its database's.
    pub cpu: Duration,
    pub database_cpu: Option<Duration>,
}

/// Where [`follower_latency`]'s followers are parked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FollowersOn {
    /// The instance the commits are made on.
    TheWriter,
    /// Another instance on the same database.
    AnotherInstance,
}

impl FollowersOn {
    /// Followers on `followed`, commits on `writer`.
    pub fn of(followed: SocketAddr, writer: SocketAddr) -> Self {
        match followed == writer {
            true => Self::TheWriter,
            false => Self::AnotherInstance,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::TheWriter => "the writer",
            Self::AnotherInstance => "another instance",
        }
    }
}

/// What [`follower_latency`] measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latency {
    /// Per follower and commit, ms from the create's `201` reaching the
    /// bench to the follower's page reaching it (negative when the
    /// follower was first).
    pub delays_ms: Vec<f64>,
    /// Each create's round trip, ms.
    pub creates_ms: Vec<f64>,
    /// Receipts whose request was sent after the create was: that follower
    /// was not parked (its answer did not come from a wake-up).
    pub not_parked: usize,
}

/// One follower's page, as received.
struct Receipt {
    pet: i64,
    sent: Instant,
    received: Instant,
}

/// Parks `followers` long polls of `pet.created` after `head` on the
/// server at `addr`, then creates `commits` pets one at a time on the
/// server at `writer` (the same one, or another instance on the same
/// database): each after every follower has received the previous one and
/// had a moment to park again. Records, per follower and commit, the delay
/// from the create's `201` to the follower's receipt.
pub async fn follower_latency(
    (addr, key): (SocketAddr, &str),
    writer: SocketAddr,
    followers: usize,
    commits: usize,
    head: u64,
) -> anyhow::Result<Latency> {
    let http = reqwest::Client::builder().timeout(POLL_TIMEOUT).build()?;
    let (sender, mut receipts) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    for _ in 0..followers {
        let (http, key, sender) = (http.clone(), key.to_owned(), sender.clone());
        let mut path =
            format!("/v1/events?limit=100&types=pet.created&wait={WAIT_SECS}&after={head}");
        tasks.spawn(async move {
            loop {
                let sent = Instant::now();
                let page = page(&http, addr, &key, &path).await?;
                let received = Instant::now();
                for event in &page.events {
                    let pet = event["data"]["id"]
                        .as_i64()
                        .with_context(|| format!("no data.id: {event}"))?;
                    if sender
                        .send(Receipt {
                            pet,
                            sent,
                            received,
                        })
                        .is_err()
                    {
                        return anyhow::Ok(());
                    }
                }
                path = page.next;
            }
        });
    }
    drop(sender);
    let mut latency = Latency::default();
    tokio::time::sleep(PARK_FIRST).await;
    for _ in 0..commits {
        tokio::time::sleep(PARK_AGAIN).await;
        let sent = Instant::now();
        let pet = create(&http, writer, key).await?;
        let created = Instant::now();
        latency.creates_ms.push(ms(sent, created));
        for got in 0..followers {
            let receipt = match tokio::time::timeout(RECEIPT_TIMEOUT, receipts.recv()).await {
                Ok(Some(receipt)) => receipt,
                _ => {
                    let why = match tasks.try_join_next() {
                        Some(Ok(Err(e))) => format!(": a follower failed: {e:#}"),
                        _ => String::new(),
                    };
                    bail!(
                        "{got} of {followers} followers received pet {pet} within {RECEIPT_TIMEOUT:?}{why}"
                    );
                }
            };
            if receipt.pet != pet {
                bail!(
                    "a follower received pet {} while pet {pet} was awaited",
                    receipt.pet
                );
            }
            latency.delays_ms.push(ms(created, receipt.received));
            latency.not_parked += usize::from(receipt.sent > sent);
        }
    }
    Ok(latency)
}

/// `POST /v1/pets`; the new pet's id.
pub async fn create(http: &reqwest::Client, addr: SocketAddr, key: &str) -> anyhow::Result<i64> {
    let response = http
        .post(format!("http://{addr}/v1/pets"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(CREATE_BODY)
        .send()
        .await
        .context("POST /v1/pets")?;
    let status = response.status();
    let pet: serde_json::Value = response.json().await.context("POST /v1/pets")?;
    match pet["id"].as_i64() {
        Some(id) if status == reqwest::StatusCode::CREATED => Ok(id),
        _ => bail!("POST /v1/pets: {status} {pet}"),
    }
}

/// Milliseconds from `from` to `to`, negative when `to` came first.
fn ms(from: Instant, to: Instant) -> f64 {
    match to.checked_duration_since(from) {
        Some(after) => after.as_secs_f64() * 1e3,
        None => -(from - to).as_secs_f64() * 1e3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`search`] over the ids `ids` (sorted), counting its calls.
    async fn search_in(ids: &[u64]) -> (Feed, usize) {
        let calls = std::cell::Cell::new(0);
        let next = async |after: Option<u64>| {
            calls.set(calls.get() + 1);
            Ok(ids
                .iter()
                .copied()
                .find(|&id| after.is_none_or(|after| id > after)))
        };
        let feed = search(next).await.unwrap();
        (feed, calls.get())
    }

    #[tokio::test]
    async fn the_search_finds_the_start_the_head_and_a_deep_id() {
        let dense: Vec<u64> = (1..=1000).collect();
        let (feed, calls) = search_in(&dense).await;
        assert_eq!(
            (feed.cursors.start, feed.cursors.deep, feed.head),
            (1, 901, 1000)
        );
        assert!(calls <= 25, "{calls} calls");
        // Sparse and far from 0, as PostgreSQL's sequences may leave them.
        let sparse: Vec<u64> = (0..1_000_000).map(|i| 5_000_000 + i * 3 + i % 2).collect();
        let (feed, calls) = search_in(&sparse).await;
        let head = *sparse.last().unwrap();
        assert_eq!((feed.cursors.start, feed.head), (5_000_000, head));
        let deep = sparse
            .iter()
            .position(|&id| id == feed.cursors.deep)
            .unwrap();
        assert!((899_000..=901_000).contains(&deep), "{deep}");
        assert!(calls <= 50, "{calls} calls");
        let (feed, _) = search_in(&[42]).await;
        assert_eq!(
            (feed.cursors.start, feed.cursors.deep, feed.head),
            (42, 42, 42)
        );
        let empty = search(async |_| Ok(None)).await;
        assert!(empty.unwrap_err().to_string().contains("the feed is empty"));
    }

    #[test]
    fn delays_are_signed() {
        let now = Instant::now();
        let later = now + Duration::from_micros(1500);
        assert_eq!((ms(now, later), ms(later, now)), (1.5, -1.5));
    }
}
