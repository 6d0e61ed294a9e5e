//! Webhooks (contract 1.7.0) as the bench measures them
//! (`--webhook-latency`): a receiver on loopback subscribed to every event,
//! and the delay from each event's commit (its `time`) to its delivery
//! reaching the receiver — the issue's bound is p99 ≤ 1 s for a healthy
//! receiver.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;

use super::feed;

/// How long a measurement waits, from the end of its load, for the last
/// deliveries: far past the bound, so that a backlog shows how it drains.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// A request the receiver got: when it had arrived whole, and its body.
type Got = (SystemTime, Bytes);

/// A webhook receiver: HTTP/1.1 on loopback, answering every request `204`
/// and keeping when it arrived and its body. Not petstore-support's test
/// receiver: that one scans every earlier request on each arrival (to
/// script its answers), which under hundreds of thousands of deliveries
/// would become the bottleneck measured.
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Got>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on a free loopback port, on the current runtime.
    async fn start() -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let got = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(serve(listener, Arc::clone(&got)));
        Ok(Receiver { addr, got, task })
    }

    fn count(&self) -> usize {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The requests from the `from`th on.
    fn since(&self, from: usize) -> Vec<Got> {
        self.got.lock().unwrap_or_else(|e| e.into_inner())[from..].to_vec()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: tokio::net::TcpListener, got: Arc<Mutex<Vec<Got>>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let got = Arc::clone(&got);
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let got = Arc::clone(&got);
            async move {
                let body = request.into_body().collect().await;
                let body = body.map(|body| body.to_bytes()).unwrap_or_default();
                let now = SystemTime::now();
                got.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((now, body));
                let mut response = hyper::Response::new(Empty::<Bytes>::new());
                *response.status_mut() = hyper::StatusCode::NO_CONTENT;
                Ok::<_, Infallible>(response)
            }
        });
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new();
            let _ = connection
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Where a measurement starts: the feed's head, and how many requests the
/// receiver had got.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    head: u64,
    received: usize,
}

/// A receiver subscribed to a server.
pub struct Subscriber {
    receiver: Receiver,
    /// The subscription's id.
    id: i64,
}

/// What one measurement found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WebhookLatency {
    /// What made the events.
    pub load: String,
    /// The events committed during it (the feed's, after its head at the
    /// start).
    pub created: usize,
    /// How many of them were delivered within [`PATIENCE`] (all, or the
    /// bench fails), and requests beyond one per event (at least once may
    /// mean twice).
    pub delivered: usize,
    pub repeated: usize,
    /// Per event, ms from its `time` (the commit) to its first delivery
    /// having arrived whole; for an event not delivered, to the end of the
    /// wait (a lower bound: then so are the percentiles).
    pub delays_ms: Vec<f64>,
    /// Deliveries per second, from the first arrival to the last.
    pub rate: f64,
}

impl Subscriber {
    /// Starts a receiver and subscribes it on the server at `addr` to every
    /// type of event (`types` omitted: every type the key may see).
    pub async fn start((addr, key): (SocketAddr, &str)) -> anyhow::Result<Subscriber> {
        let receiver = Receiver::start().await?;
        let url = format!("http://{}/hook", receiver.addr);
        let response = reqwest::Client::new()
            .post(format!("http://{addr}/v1/webhooks"))
            .bearer_auth(key)
            .json(&serde_json::json!({ "url": url }))
            .send()
            .await
            .context("POST /v1/webhooks")?;
        let status = response.status();
        let webhook: serde_json::Value = response.json().await.context("POST /v1/webhooks")?;
        let Some(id) = webhook["id"].as_i64().filter(|_| status.as_u16() == 201) else {
            bail!("POST /v1/webhooks: {status} {webhook}");
        };
        Ok(Subscriber { receiver, id })
    }

    /// Where a measurement starting now starts.
    pub async fn mark(&self, (addr, key): (SocketAddr, &str)) -> anyhow::Result<Mark> {
        Ok(Mark {
            head: feed::locate(addr, key).await?.head,
            received: self.receiver.count(),
        })
    }

    /// Waits until every event committed since `mark` has been delivered,
    /// or [`PATIENCE`] has passed, then measures.
    pub async fn measure(
        &self,
        (addr, key): (SocketAddr, &str),
        mark: Mark,
        load: String,
    ) -> anyhow::Result<WebhookLatency> {
        let waiting = tokio::time::Instant::now();
        let created: HashMap<u64, String> = feed::events_after(addr, key, mark.head)
            .await?
            .into_iter()
            .collect();
        let (got, first) = loop {
            let patient = waiting.elapsed() < PATIENCE;
            // Counting is cheap; reading the bodies is not.
            if self.receiver.count() - mark.received >= created.len() || !patient {
                let got = self.receiver.since(mark.received);
                let first = first_arrivals(&got, &created)?;
                if first.len() == created.len() || !patient {
                    break (got.len(), first);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let now = SystemTime::now();
        let mut delays_ms: Vec<f64> = first.values().map(|&(at, time)| ms(time, at)).collect();
        for (id, time) in &created {
            if !first.contains_key(id) {
                delays_ms.push(ms(rfc3339(time)?, now));
            }
        }
        let arrivals = || first.values().map(|&(at, _)| at);
        let span = arrivals().max().zip(arrivals().min());
        let span = span.and_then(|(last, first)| last.duration_since(first).ok());
        Ok(WebhookLatency {
            load,
            created: created.len(),
            delivered: first.len(),
            repeated: got - first.len(),
            delays_ms,
            rate: first.len() as f64 / span.map_or(f64::NAN, |span| span.as_secs_f64()),
        })
    }

    /// Ends the subscription, so that nothing measured later pays for it.
    pub async fn unsubscribe(self, (addr, key): (SocketAddr, &str)) -> anyhow::Result<()> {
        let path = format!("/v1/webhooks/{}", self.id);
        let response = reqwest::Client::new()
            .delete(format!("http://{addr}{path}"))
            .bearer_auth(key)
            .send()
            .await
            .with_context(|| format!("DELETE {path}"))?;
        match response.status().is_success() {
            true => Ok(()),
            false => bail!("DELETE {path}: {}", response.status()),
        }
    }
}

/// Per event of `created`, when its first delivery arrived and its `time`.
/// (Requests for other events are earlier loads' repeats.)
fn first_arrivals(
    got: &[Got],
    created: &HashMap<u64, String>,
) -> anyhow::Result<HashMap<u64, (SystemTime, SystemTime)>> {
    #[derive(serde::Deserialize)]
    struct Event {
        id: String,
        time: String,
    }
    let mut first = HashMap::new();
    for (at, body) in got {
        let event: Event = serde_json::from_slice(body).context("a delivery's body")?;
        let id = event.id.parse().context("an event id")?;
        if created.contains_key(&id) {
            let time = rfc3339(&event.time).with_context(|| format!("time {:?}", event.time))?;
            first.entry(id).or_insert((*at, time));
        }
    }
    Ok(first)
}

/// Creates `count` pets, `rate` a second: each is sent on its tick,
/// whether or not the ones before it were answered (so that a slow answer
/// does not lower the rate), with at most [`STEADY_IN_FLIGHT`] unanswered.
/// Says the rate made: from the first request to the last answer.
pub async fn steady_creates(
    (addr, key): (SocketAddr, &str),
    count: usize,
    rate: u32,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let http = reqwest::Client::new();
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / rate);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let slots = Arc::new(tokio::sync::Semaphore::new(STEADY_IN_FLIGHT));
    let mut creates = tokio::task::JoinSet::new();
    for _ in 0..count {
        ticks.tick().await;
        let slot = Arc::clone(&slots).acquire_owned().await?;
        let (http, key) = (http.clone(), key.to_owned());
        creates.spawn(async move {
            let created = feed::create(&http, addr, &key).await;
            drop(slot);
            created
        });
    }
    while let Some(created) = creates.join_next().await {
        created??;
    }
    Ok(count as f64 / started.elapsed().as_secs_f64())
}

/// The most creates of the steady load unanswered at once. Each durable
/// commit takes milliseconds, so this bounds the rate the load can make
/// (64 made at most about 2,400 a second on SQLite): enough for every rate
/// the two cores can deliver.
const STEADY_IN_FLIGHT: usize = 1024;

/// `time` as the contract writes it (RFC 3339 in UTC, `…T12:34:56.123456Z`).
/// By hand: the bench has no date library, and adding one would touch the
/// workspace's lock file for five lines.
fn rfc3339(time: &str) -> anyhow::Result<SystemTime> {
    let (date, clock) = time
        .strip_suffix('Z')
        .and_then(|t| t.split_once('T'))
        .context("not YYYY-MM-DDTHH:MM:SS[.f]Z")?;
    let numbers = |text: &str, separator| -> anyhow::Result<[u64; 3]> {
        let numbers: Result<Vec<u64>, _> = text.split(separator).map(str::parse).collect();
        let numbers = numbers.context("not digits")?;
        numbers.try_into().ok().context("not three numbers")
    };
    let [year, month, day] = numbers(date, '-')?;
    let (clock, fraction) = clock.split_once('.').unwrap_or((clock, "0"));
    let [hour, minute, second] = numbers(clock, ':')?;
    let nanos: u64 = format!("{fraction:0<9}")[..9]
        .parse()
        .context("not digits")?;
    // Days since 1970-01-01 in the proleptic Gregorian calendar, with
    // March as the first month so that February's day is the year's last
    // (H. Hinnant's days_from_civil, for years from 1970 on).
    let year = year - u64::from(month <= 2);
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let (era, year_of_era) = (year / 400, year % 400);
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = ((days * 24 + hour) * 60 + minute) * 60 + second;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_nanos(nanos))
}

/// Milliseconds from `from` to `to`, negative when `to` came first.
fn ms(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(after) => after.as_secs_f64() * 1e3,
        Err(before) => -before.duration().as_secs_f64() * 1e3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_the_contract_writes_them() {
        let at = |time| {
            let time = rfc3339(time).unwrap();
            time.duration_since(SystemTime::UNIX_EPOCH).unwrap()
        };
        assert_eq!(at("1970-01-01T00:00:00Z"), Duration::ZERO);
        // `date -u -d 2026-04-20T12:34:56Z +%s`
        assert_eq!(
            at("2026-04-20T12:34:56.123456Z"),
            Duration::new(1_776_688_496, 123_456_000)
        );
        assert_eq!(at("2024-02-29T23:59:59.5Z").as_secs(), 1_709_251_199);
        assert_eq!(at("2000-03-01T00:00:00Z").as_secs(), 951_868_800);
        for wrong in [
            "2026-04-20 12:34:56Z",
            "2026-04-20T12:34:56",
            "2026-04T12:00:00Z",
        ] {
            assert!(rfc3339(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn each_event_counts_its_first_delivery() {
        let epoch = SystemTime::UNIX_EPOCH;
        let body = |id: u64| {
            let event = format!(r#"{{"id":"{id}","time":"1970-01-01T00:00:01Z","data":{{}}}}"#);
            Bytes::from(event)
        };
        let second = |s: u64| epoch + Duration::from_millis(s);
        let got = [
            (second(1100), body(7)),
            (second(1500), body(8)),
            (second(1700), body(7)),
            (second(1800), body(3)),
        ];
        let created = HashMap::from([(7, String::new()), (8, String::new())]);
        let first = first_arrivals(&got, &created).unwrap();
        assert_eq!(first.len(), 2);
        assert_eq!(ms(first[&7].1, first[&7].0), 100.0);
        assert_eq!(ms(first[&8].1, first[&8].0), 500.0);
        assert_eq!(ms(second(2), second(1)), -1.0);
    }
}
