//! Capturing the real server's answers for the ceiling to replay, which
//! also checks that every scenario gets the status it should before any
//! load is sent.

use std::net::SocketAddr;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};

use super::canned::{Canned, CannedSet, FeedCursors};
use super::scenario::{CREATE_BODY, PETS_PREFIX, deep_path, events_path};

/// Headers the HTTP layer writes per response, so the ceiling's hyper
/// writes its own instead of replaying these.
const PER_RESPONSE_HEADERS: [&str; 5] = [
    "date",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
];

/// Captures one response per scenario from the server at `addr` (whose
/// pets have ids `1..=max_id`, and whose feed is read after the events
/// `feed`). Creates one pet, and one order that it cancels.
pub async fn capture(
    addr: SocketAddr,
    key: &str,
    max_id: i64,
    feed: FeedCursors,
) -> anyhow::Result<CannedSet> {
    use {Method as M, StatusCode as S};
    let http = reqwest::Client::new();
    // An available animal to order (seeding concurrently, ids need not
    // follow the seed's order of statuses).
    let available: serde_json::Value = http
        .get(format!("http://{addr}/v1/pets?status=available&limit=1"))
        .bearer_auth(key)
        .send()
        .await?
        .json()
        .await?;
    let order_body = format!(r#"{{"petId":{}}}"#, available[0]["id"]);
    // Sends one request as `as_key` and checks its status is `expected`.
    let fetch = async |method: Method, path: &str, as_key: &str, expected: S| {
        let what = format!("{method} /v1{path}");
        let mut request = http
            .request(method.clone(), format!("http://{addr}/v1{path}"))
            .bearer_auth(as_key);
        let body = match (&method, path) {
            (&Method::POST, "/pets") => Some(CREATE_BODY.to_owned()),
            (&Method::POST, _) => Some(order_body.clone()),
            (&Method::PATCH, _) => Some(r#"{"status":"cancelled"}"#.to_owned()),
            _ => None,
        };
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await.with_context(|| what.clone())?;
        let status = response.status();
        let headers = kept_headers(response.headers()).with_context(|| what.clone())?;
        let body = response.text().await.with_context(|| what.clone())?;
        if status != expected {
            let as_whom = if as_key == key { "" } else { " (wrong key)" };
            bail!("{what}{as_whom} got {status}, not {expected}: {body}");
        }
        anyhow::Ok(Canned {
            status: status.as_u16(),
            headers,
            body,
        })
    };
    // The first and the last id must exist, since wrk asks for all of them.
    fetch(M::GET, "/pets/1", key, S::OK).await?;
    // An order for that animal, cancelled: the catalogue is as seeded again.
    let place_order = fetch(M::POST, "/store/orders", key, S::CREATED).await?;
    let order: serde_json::Value = serde_json::from_str(&place_order.body)?;
    let update = format!("/store/orders/{}", order["id"]);
    let update_order = fetch(M::PATCH, &update, key, S::OK).await?;
    // A feed page must be full, or it measures less than a page.
    let events = async |after: u64| {
        let path = events_path(after);
        let page = fetch(M::GET, path.trim_start_matches("/v1"), key, S::OK).await?;
        let events: Vec<serde_json::Value> = serde_json::from_str(&page.body)?;
        if events.len() != 20 {
            bail!("GET {path} returned {} events, not 20", events.len());
        }
        anyhow::Ok(page)
    };
    Ok(CannedSet {
        place_order,
        update_order,
        inventory: fetch(M::GET, "/store/inventory", key, S::OK).await?,
        get: fetch(M::GET, &format!("/pets/{max_id}"), key, S::OK).await?,
        list20: fetch(M::GET, "/pets?limit=20", key, S::OK).await?,
        list100_available: fetch(M::GET, "/pets?limit=100&status=available", key, S::OK).await?,
        list20_deep: fetch(
            M::GET,
            deep_path(max_id).trim_start_matches("/v1"),
            key,
            S::OK,
        )
        .await?,
        max_id,
        create: fetch(M::POST, "/pets", key, S::CREATED).await?,
        unauthorized: fetch(M::GET, "/pets?limit=20", "not-the-key", S::UNAUTHORIZED).await?,
        feed,
        events_page: events(feed.start).await?,
        events_page_deep: events(feed.deep).await?,
        list20_random: fetch(
            M::GET,
            format!("{PETS_PREFIX}{}", max_id / 2).trim_start_matches("/v1"),
            key,
            S::OK,
        )
        .await?,
        events_page_random: events(feed.start.midpoint(feed.deep)).await?,
    })
}

fn kept_headers(headers: &reqwest::header::HeaderMap) -> anyhow::Result<Vec<(String, String)>> {
    let kept = headers
        .iter()
        .filter(|(name, _)| !PER_RESPONSE_HEADERS.contains(&name.as_str()));
    let text = |(name, value): (&reqwest::header::HeaderName, &reqwest::header::HeaderValue)| {
        let value = value
            .to_str()
            .with_context(|| format!("header {name} is not ASCII"))?;
        Ok((name.as_str().to_owned(), value.to_owned()))
    };
    kept.map(text).collect()
}
