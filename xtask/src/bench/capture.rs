//! Capturing the real server's answers for the ceiling to replay, which
//! also checks that every scenario gets the status it should before any
//! load is sent.

use std::net::SocketAddr;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};

use super::canned::{Canned, CannedSet};
use super::scenario::{CREATE_BODY, deep_path};

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
/// pets have ids `1..=max_id`). Creates one pet.
pub async fn capture(addr: SocketAddr, key: &str, max_id: i64) -> anyhow::Result<CannedSet> {
    let client = Client {
        http: reqwest::Client::new(),
        base: format!("http://{addr}/v1"),
        key,
    };
    // The first and the last id must exist, since wrk asks for all of them.
    client
        .fetch(Method::GET, "/pets/1", key, StatusCode::OK)
        .await?;
    let get = client
        .fetch(Method::GET, &format!("/pets/{max_id}"), key, StatusCode::OK)
        .await?;
    Ok(CannedSet {
        list20: client
            .fetch(Method::GET, "/pets?limit=20", key, StatusCode::OK)
            .await?,
        list100_available: client
            .fetch(
                Method::GET,
                "/pets?limit=100&status=available",
                key,
                StatusCode::OK,
            )
            .await?,
        list20_deep: client
            .fetch(
                Method::GET,
                deep_path(max_id).trim_start_matches("/v1"),
                key,
                StatusCode::OK,
            )
            .await?,
        get,
        max_id,
        create: client
            .fetch(Method::POST, "/pets", key, StatusCode::CREATED)
            .await?,
        unauthorized: client
            .fetch(
                Method::GET,
                "/pets?limit=20",
                "not-the-key",
                StatusCode::UNAUTHORIZED,
            )
            .await?,
    })
}

struct Client<'a> {
    http: reqwest::Client,
    base: String,
    key: &'a str,
}

impl Client<'_> {
    /// Sends one request as `key` and checks its status is `expected`.
    async fn fetch(
        &self,
        method: Method,
        path: &str,
        key: &str,
        expected: StatusCode,
    ) -> anyhow::Result<Canned> {
        let what = format!("{method} /v1{path}");
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(key);
        if method == Method::POST {
            request = request
                .header("content-type", "application/json")
                .body(CREATE_BODY);
        }
        let response = request.send().await.with_context(|| what.clone())?;
        let status = response.status();
        let headers = kept_headers(response.headers()).with_context(|| what.clone())?;
        let body = response.text().await.with_context(|| what.clone())?;
        if status != expected {
            let as_whom = if key == self.key { "" } else { " (wrong key)" };
            bail!("{what}{as_whom} got {status}, not {expected}: {body}");
        }
        Ok(Canned {
            status: status.as_u16(),
            headers,
            body,
        })
    }
}

fn kept_headers(headers: &reqwest::header::HeaderMap) -> anyhow::Result<Vec<(String, String)>> {
    headers
        .iter()
        .filter(|(name, _)| !PER_RESPONSE_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| {
            let value = value
                .to_str()
                .with_context(|| format!("header {name} is not ASCII"))?;
            Ok((name.as_str().to_owned(), value.to_owned()))
        })
        .collect()
}
