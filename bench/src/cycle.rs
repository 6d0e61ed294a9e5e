//! `order_cycle`'s fixed animals: made on a target once, then made
//! available again before each run (a run ends with some of them in orders
//! placed and not yet cancelled).

use std::net::SocketAddr;

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};

/// Requests in flight while the animals are made available again.
const IN_FLIGHT: usize = 16;

/// Cancels every order placed for the animals `ids` on the server at
/// `addr` (through `GET /v1/store/orders?petId=…&status=placed` and `PATCH
/// …{"status":"cancelled"}`, which any server of the contract serves), then
/// checks that each is available.
pub async fn make_available(addr: SocketAddr, key: &str, ids: &[i64]) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let base = format!("http://{addr}/v1");
    let get = async |path: String| -> anyhow::Result<serde_json::Value> {
        let response = client
            .get(format!("{base}{path}"))
            .bearer_auth(key)
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = response.status();
        let body = response.text().await?;
        if status != reqwest::StatusCode::OK {
            bail!("GET {path}: {status} {body}");
        }
        Ok(serde_json::from_str(&body)?)
    };
    let free = async |id: i64| -> anyhow::Result<()> {
        let placed = get(format!("/store/orders?petId={id}&status=placed&limit=100")).await?;
        for order in placed.as_array().context("a list of orders")? {
            let path = format!("/store/orders/{}", order["id"]);
            let response = client
                .patch(format!("{base}{path}"))
                .bearer_auth(key)
                .header("content-type", "application/json")
                .body(r#"{"status":"cancelled"}"#)
                .send()
                .await
                .with_context(|| format!("PATCH {path}"))?;
            let status = response.status();
            if status != reqwest::StatusCode::OK {
                bail!("PATCH {path}: {status} {}", response.text().await?);
            }
        }
        let pet = get(format!("/pets/{id}")).await?;
        if pet["status"] != "available" {
            bail!("pet {id} is not available after its orders were cancelled: {pet}");
        }
        Ok(())
    };
    futures::stream::iter(ids.iter().copied())
        .map(free)
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await
}
