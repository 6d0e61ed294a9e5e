//! The implementation of [`PetstoreApi`] and the running server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dropshot::{
    ConfigDropshot, HandlerTaskMode, HttpResponseCreated, HttpResponseHeaders, HttpResponseOk,
    HttpServer, Path, Query, RequestContext, ServerBuilder,
};
use tokio::sync::watch;

use crate::api::{
    DeprecationHeaders, LIMIT_MAX, ListPetsParams, PageHeaders, PetPath, PetstoreApi,
    REQUEST_BODY_MAX_BYTES, petstore_api_mod,
};
use crate::auth::Authenticated;
use crate::body::StrictJson;
use crate::context::{ApiContext, Requests};
use crate::error::ApiError;
use crate::keys::ApiKeys;
use crate::model::{NewPet, Pet};
use crate::store::{self, DatabaseUrl, ListQuery, OpenError, PetStore, StoreError};

// Every page the contract allows, the store can serve.
const _: () = assert!(LIMIT_MAX as u32 <= store::LIST_MAX);

/// The implementation of the API trait; never constructed.
pub enum PetstoreImpl {}

/// A storage failure as the client sees it: 503 when retrying later is
/// right, 500 when it is a bug or corrupt data (the cause is logged either
/// way, in the access log's `error_message_internal`).
fn store_failure(error: StoreError) -> ApiError {
    if error.is_unavailable() {
        ApiError::service_unavailable(&error)
    } else {
        ApiError::internal(&error)
    }
}

impl PetstoreApi for PetstoreImpl {
    type Context = ApiContext;

    async fn list_pets(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
        query: Query<ListPetsParams>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Vec<Pet>>, PageHeaders>, ApiError> {
        let params = query.into_inner();
        let limit = params.checked_limit()?;
        let page = rqctx
            .context()
            .store
            .list(ListQuery {
                limit,
                status: params.status,
                after: params.after,
            })
            .await
            .map_err(store_failure)?;
        let headers = match page.pets.last() {
            Some(last) if page.more => PageHeaders::next(limit, params.status, last.id),
            _ => PageHeaders::default(),
        };
        Ok(HttpResponseHeaders::new(HttpResponseOk(page.pets), headers))
    }

    async fn create_pet(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
        body: StrictJson<NewPet>,
    ) -> Result<HttpResponseCreated<Pet>, ApiError> {
        let pet = rqctx
            .context()
            .store
            .create(body.into_inner())
            .await
            .map_err(store_failure)?;
        Ok(HttpResponseCreated(pet))
    }

    async fn get_pet(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
        path: Path<PetPath>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Pet>, DeprecationHeaders>, ApiError> {
        let id = path.into_inner().pet_id;
        match rqctx.context().store.get(id).await.map_err(store_failure)? {
            Some(pet) => Ok(HttpResponseHeaders::new(
                HttpResponseOk(pet),
                DeprecationHeaders::get_pet(),
            )),
            None => Err(ApiError::not_found(format!("no pet has id {id}"))),
        }
    }
}

/// Everything needed to start a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// The database to serve.
    pub database: DatabaseUrl,
    /// The keys clients must present.
    pub api_keys: ApiKeys,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address cannot be listened on (e.g. the port is in use).
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address asked for.
        address: SocketAddr,
        /// Why not.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The database cannot be opened.
    #[error(transparent)]
    Database(#[from] OpenError),
    /// The API trait does not describe a valid API (a bug in us).
    #[error("invalid API description: {0}")]
    Api(String),
}

/// Why a shutdown was not clean.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    /// The HTTP server reported an error while stopping.
    #[error("the HTTP server did not stop cleanly: {0}")]
    Http(String),
}

/// How a shutdown went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether the deadline passed with connections still open (which were
    /// then dropped).
    pub deadline_passed: bool,
    /// Requests past authentication still in flight when the deadline
    /// passed, cut with their connections.
    pub requests_cut: usize,
}

/// A server accepting requests.
pub struct RunningServer {
    http: HttpServer<ApiContext>,
    store: Arc<dyn PetStore>,
    requests: Requests,
    fatal: watch::Receiver<Option<String>>,
}

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Resolves when the server can no longer work at all (e.g. the SQLite
    /// writer thread panicked), with the reason; the process should then
    /// shut down and exit non-zero, so that a supervisor restarts it.
    /// Pending forever otherwise.
    pub async fn fatal_failure(&self) -> String {
        let mut fatal = self.fatal.clone();
        if let Ok(reason) = fatal.wait_for(Option::is_some).await
            && let Some(reason) = reason.clone()
        {
            return reason;
        }
        std::future::pending().await
    }

    /// Stops accepting connections and lets in-flight requests finish for
    /// up to `deadline`; then drops the connections still open, closes the
    /// database and reports how many requests were cut.
    pub async fn shutdown(self, deadline: Duration) -> Result<ShutdownReport, ShutdownError> {
        let closed = tokio::time::timeout(deadline, self.http.close()).await;
        // Past the deadline, dropping the close future leaves the remaining
        // connections' tasks to be dropped with the runtime: their requests
        // are cut.
        let report = ShutdownReport {
            deadline_passed: closed.is_err(),
            requests_cut: if closed.is_err() {
                self.requests.in_flight()
            } else {
                0
            },
        };
        self.store.close().await;
        match closed {
            Ok(Err(e)) => Err(ShutdownError::Http(e)),
            _ => Ok(report),
        }
    }
}

/// Opens the database (creating or migrating its schema) and starts serving.
///
/// The address is tried first, so that a port in use is reported before
/// any database file is created.
pub async fn start(config: ServerConfig, log: slog::Logger) -> Result<RunningServer, StartError> {
    let listen_error = |source| StartError::Listen {
        address: config.bind,
        source,
    };
    std::net::TcpListener::bind(config.bind).map_err(|e| listen_error(Box::new(e)))?;
    let (fatal_sender, fatal) = watch::channel(None);
    let store = store::open(&config.database, &log, fatal_sender).await?;
    let api = match petstore_api_mod::api_description::<PetstoreImpl>() {
        Ok(api) => api,
        Err(e) => {
            store.close().await;
            return Err(StartError::Api(e.to_string()));
        }
    };
    let dropshot_config = ConfigDropshot {
        bind_address: config.bind,
        default_request_body_max_bytes: REQUEST_BODY_MAX_BYTES,
        // Handlers run on the connection's task instead of a task of their
        // own (a spawn per request costs about 10 % of throughput). If a
        // client hangs up, its handler is dropped: a create already handed
        // to the store is still committed, just never acknowledged, which is
        // what that client saw anyway. Graceful shutdown still waits for
        // every request in flight.
        default_handler_task_mode: HandlerTaskMode::CancelOnDisconnect,
        ..Default::default()
    };
    let requests = Requests::default();
    let context = ApiContext {
        keys: config.api_keys,
        store: Arc::clone(&store),
        requests: requests.clone(),
    };
    let http = match ServerBuilder::new(api, context, log.clone())
        .config(dropshot_config)
        .start()
    {
        Ok(http) => http,
        Err(e) => {
            store.close().await;
            return Err(listen_error(Box::new(e)));
        }
    };
    slog::info!(log, "serving"; "address" => %http.local_addr(), "database" => %config.database);
    Ok(RunningServer {
        http,
        store,
        requests,
        fatal,
    })
}
