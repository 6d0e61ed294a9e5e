//! The implementation of [`PetstoreApi`] and the running server.

use std::net::SocketAddr;
use std::sync::Arc;

use dropshot::{
    ConfigDropshot, HandlerTaskMode, HttpResponseCreated, HttpResponseHeaders, HttpResponseOk,
    HttpServer, Path, Query, RequestContext, ServerBuilder, TypedBody,
};

use crate::api::{
    DeprecationHeaders, ListPetsParams, PetPath, PetstoreApi, REQUEST_BODY_MAX_BYTES,
    petstore_api_mod,
};
use crate::auth::{ApiKeys, Authenticated};
use crate::error::ApiError;
use crate::model::{NewPet, Pet};
use crate::store::{self, DatabaseUrl, PetStore};

/// What every request handler can reach.
pub struct ApiContext {
    pub(crate) keys: ApiKeys,
    store: Arc<dyn PetStore>,
}

/// The implementation of the API trait; never constructed.
pub enum PetstoreImpl {}

impl PetstoreApi for PetstoreImpl {
    type Context = ApiContext;

    async fn list_pets(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
        query: Query<ListPetsParams>,
    ) -> Result<HttpResponseOk<Vec<Pet>>, ApiError> {
        let params = query.into_inner();
        let limit = params.checked_limit()?;
        let pets = rqctx
            .context()
            .store
            .list(limit, params.status)
            .await
            .map_err(ApiError::service_unavailable)?;
        Ok(HttpResponseOk(pets))
    }

    async fn create_pet(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
        body: TypedBody<NewPet>,
    ) -> Result<HttpResponseCreated<Pet>, ApiError> {
        let pet = rqctx
            .context()
            .store
            .create(body.into_inner())
            .await
            .map_err(ApiError::service_unavailable)?;
        Ok(HttpResponseCreated(pet))
    }

    async fn get_pet(
        rqctx: RequestContext<ApiContext>,
        _auth: Authenticated,
        path: Path<PetPath>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Pet>, DeprecationHeaders>, ApiError> {
        let id = path.into_inner().pet_id;
        match rqctx
            .context()
            .store
            .get(id)
            .await
            .map_err(ApiError::service_unavailable)?
        {
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

/// A server accepting requests.
pub struct RunningServer {
    http: HttpServer<ApiContext>,
    store: Arc<dyn PetStore>,
}

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Stops accepting connections, lets in-flight requests finish, then
    /// closes the database.
    pub async fn shutdown(self) -> Result<(), String> {
        let closed = self.http.close().await;
        self.store.close().await;
        closed
    }
}

/// Opens the database (creating or migrating its schema) and starts serving.
pub async fn start(config: ServerConfig, log: slog::Logger) -> anyhow::Result<RunningServer> {
    let store = store::open(&config.database).await?;
    let api = petstore_api_mod::api_description::<PetstoreImpl>()
        .map_err(|e| anyhow::anyhow!("invalid API description: {e}"))?;
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
    let context = ApiContext {
        keys: config.api_keys,
        store: Arc::clone(&store),
    };
    let http = match ServerBuilder::new(api, context, log.clone())
        .config(dropshot_config)
        .start()
    {
        Ok(http) => http,
        Err(e) => {
            store.close().await;
            return Err(anyhow::anyhow!("cannot listen on {}: {e}", config.bind));
        }
    };
    slog::info!(log, "serving"; "address" => %http.local_addr(), "database" => %config.database);
    Ok(RunningServer { http, store })
}
