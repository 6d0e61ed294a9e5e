//! The contract in people's hands: the committed document, embedded at
//! build time (and turned into JSON then, by `build.rs`), and an
//! interactive page that renders it and can call the API.
//!
//! - `GET /openapi.yaml`: `openapi/petstore.yaml` byte for byte;
//!   `GET /openapi.json`: the same document as JSON.
//! - `GET /docs/`: Swagger UI, its assets shipped inside the
//!   `utoipa-swagger-ui` crate (`vendored`: nothing is fetched, at build or
//!   at run time). It loads `/docs/openapi.json`: the contract with this
//!   server (`/v1`) listed first among its servers, so that "Try it out"
//!   calls the server that serves the page; the reader types the key into
//!   "Authorize".
//!
//! These endpoints are `unpublished`: not part of the pet API, not in the
//! emitted document, and they need no key. `--docs off` leaves them out.

use std::sync::{Arc, LazyLock};

use dropshot::{ApiDescription, Body, Path, RequestContext};
use http::{Response, StatusCode, header};
use schemars::JsonSchema;
use serde::Deserialize;
use utoipa_swagger_ui::Config;

use petstore_api::auth::ApiContext;
use petstore_api::error::ApiError;

/// The committed contract, as it is in the repository.
pub const CONTRACT_YAML: &str = include_str!("../../openapi/petstore.yaml");

/// Where the page loads the contract from.
const PAGE_CONTRACT: &str = "/docs/openapi.json";

/// The contract as JSON (made by `build.rs`).
const CONTRACT_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/petstore.json"));

/// The contract as JSON with this server listed first (made by `build.rs`).
const PAGE_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/docs-page.json"));

static PAGE_CONFIG: LazyLock<Arc<Config<'static>>> = LazyLock::new(|| {
    Arc::new(
        Config::new([PAGE_CONTRACT])
            .try_it_out_enabled(true)
            .persist_authorization(false),
    )
});

/// Adds the contract and the docs page to `api`.
pub fn register(api: &mut ApiDescription<ApiContext>) -> Result<(), String> {
    api.register(openapi_yaml)
        .and_then(|()| api.register(openapi_json))
        .and_then(|()| api.register(docs_file))
        .map_err(|e| e.to_string())
}

fn respond(content_type: &str, body: impl Into<Body>) -> Result<Response<Body>, ApiError> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .map_err(|e| ApiError::internal(&e))
}

/// The contract, as committed.
#[dropshot::endpoint { method = GET, path = "/openapi.yaml", unpublished = true }]
async fn openapi_yaml(_rqctx: RequestContext<ApiContext>) -> Result<Response<Body>, ApiError> {
    respond("application/yaml", CONTRACT_YAML)
}

/// The contract, as JSON.
#[dropshot::endpoint { method = GET, path = "/openapi.json", unpublished = true }]
async fn openapi_json(_rqctx: RequestContext<ApiContext>) -> Result<Response<Body>, ApiError> {
    respond("application/json", CONTRACT_JSON)
}

/// A file of the page.
#[derive(Deserialize, JsonSchema)]
struct DocsPath {
    path: Vec<String>,
}

/// The page and its assets, and the contract it renders.
#[dropshot::endpoint { method = GET, path = "/docs/{path:.*}", unpublished = true }]
async fn docs_file(
    rqctx: RequestContext<ApiContext>,
    path: Path<DocsPath>,
) -> Result<Response<Body>, ApiError> {
    let file = path.into_inner().path.join("/");
    // `/docs` itself: the page's assets are relative to `/docs/`.
    if file.is_empty() && !rqctx.request.uri().path().ends_with('/') {
        return Response::builder()
            .status(StatusCode::MOVED_PERMANENTLY)
            .header(header::LOCATION, "/docs/")
            .body(Body::empty())
            .map_err(|e| ApiError::internal(&e));
    }
    if format!("/docs/{file}") == PAGE_CONTRACT {
        return respond("application/json", PAGE_JSON);
    }
    match utoipa_swagger_ui::serve(&file, Arc::clone(&PAGE_CONFIG)) {
        Ok(Some(found)) => respond(&found.content_type, found.bytes.into_owned()),
        // The contract's 404, as for any path it does not define.
        Ok(None) => Err(ApiError::not_found(format!(
            "the docs page has no file /docs/{file}"
        ))),
        Err(e) => Err(ApiError::internal(&*e)),
    }
}
