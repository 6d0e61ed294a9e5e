//! The management listener: health, readiness and metrics, on an address
//! of its own (`--admin-bind`, loopback by default), without API keys. It is
//! not part of the public contract and is not in the OpenAPI document.
//!
//! - `GET /healthz`: 200 while the process serves at all (liveness).
//! - `GET /readyz`: 200 when the database is reachable and migrated and the
//!   keys are loaded; 503, with the reason, otherwise (readiness: a load
//!   balancer stops sending requests, and resumes when it is 200 again).
//! - `GET /metrics`: the metrics, in the OpenMetrics text format.

use std::sync::Arc;
use std::time::Duration;

use dropshot::{ApiDescription, Body, HttpError, RequestContext, endpoint};
use http::{Response, StatusCode, header};

use crate::keyring::Keyring;
use crate::metrics::{self, Metrics};
use crate::storage::{Storage, WebhookStorage};

/// How long `/readyz` waits for the database before it says 503.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// What the management endpoints reach.
pub struct AdminContext {
    /// The catalogue (for readiness and figures).
    pub storage: Arc<dyn Storage>,
    /// The webhooks' subscriptions and deliveries (for figures).
    pub webhooks: Arc<dyn WebhookStorage>,
    /// The keys.
    pub keys: Arc<Keyring>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
}

/// The management endpoints.
pub fn api() -> Result<ApiDescription<AdminContext>, String> {
    let mut api = ApiDescription::new();
    api.register(healthz).map_err(|e| e.to_string())?;
    api.register(readyz).map_err(|e| e.to_string())?;
    api.register(metrics_text).map_err(|e| e.to_string())?;
    Ok(api)
}

fn text(status: StatusCode, content_type: &str, body: String) -> Result<Response<Body>, HttpError> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-store")
        .body(body.into())
        .map_err(|e| HttpError::for_internal_error(e.to_string()))
}

/// Liveness: the process is serving.
#[endpoint { method = GET, path = "/healthz", unpublished = true }]
async fn healthz(_rqctx: RequestContext<AdminContext>) -> Result<Response<Body>, HttpError> {
    text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into())
}

/// Readiness: the database answers and keys are loaded.
#[endpoint { method = GET, path = "/readyz", unpublished = true }]
async fn readyz(rqctx: RequestContext<AdminContext>) -> Result<Response<Body>, HttpError> {
    let context = rqctx.context();
    let problem = match tokio::time::timeout(READY_TIMEOUT, context.storage.check_ready()).await {
        Err(_) => Some(format!(
            "the database did not answer within {} s",
            READY_TIMEOUT.as_secs()
        )),
        Ok(Err(error)) => Some(petstore_api::error::chain(&error)),
        Ok(Ok(())) if context.keys.counts().usable == 0 => {
            Some("no usable API key is loaded".to_owned())
        }
        Ok(Ok(())) => None,
    };
    match problem {
        None => text(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "ready\n".into(),
        ),
        Some(problem) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain; charset=utf-8",
            format!("not ready: {problem}\n"),
        ),
    }
}

/// The metrics.
#[endpoint { method = GET, path = "/metrics", unpublished = true }]
async fn metrics_text(rqctx: RequestContext<AdminContext>) -> Result<Response<Body>, HttpError> {
    let context = rqctx.context();
    let body = context
        .metrics
        .render(&context.storage, &context.webhooks, context.keys.counts())
        .await;
    text(StatusCode::OK, metrics::CONTENT_TYPE, body)
}
