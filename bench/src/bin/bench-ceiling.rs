//! `bench-ceiling`: the baseline the bench (`cargo xtask bench`) compares
//! the pet store server with.
//!
//! A minimal hyper 1.x server that does what every request to the real server
//! must do at the least — accept the connection, parse HTTP/1.1, check the
//! bearer key, read the body — and then answers with the bytes the real
//! server sent for the same request, captured once (see
//! `bench/src/canned.rs`). It uses the same connection setup as
//! dropshot (hyper-util's `auto` builder with a tokio timer) and a
//! multi-threaded tokio runtime with tokio's default worker count (one per
//! core), as `petstore-server` does. So its throughput is what the machine,
//! the loopback and wrk allow; the real server's share of it is the ratio the
//! bench reports.
//!
//! Usage: `BENCH_CEILING_KEY=KEY bench-ceiling --bind ADDR --responses FILE`
//! (the key in the environment, out of process listings).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::signal::unix::{SignalKind, signal};

#[path = "../canned.rs"]
mod canned;

use canned::{Canned, CannedSet};

/// Replays the pet store's captured answers: the baseline of the bench.
#[derive(clap::Parser)]
struct Args {
    /// Where to listen
    #[arg(long)]
    bind: SocketAddr,
    /// The canned responses, as `cargo xtask bench` captured them
    #[arg(long)]
    responses: PathBuf,
    /// The bearer key requests must carry
    #[arg(long, env = "BENCH_CEILING_KEY", hide_env_values = true)]
    key: String,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-ceiling: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let Args {
        bind,
        responses,
        key,
    } = clap::Parser::parse();
    let text = std::fs::read_to_string(&responses)
        .map_err(|e| format!("reading {}: {e}", responses.display()))?;
    let set: CannedSet =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", responses.display()))?;
    let routes = Arc::new(Routes::new(&set, &key)?);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?
        .block_on(serve(bind, routes))
}

async fn serve(bind: SocketAddr, routes: Arc<Routes>) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot watch for SIGTERM: {e}"))?;
    loop {
        // SIGTERM is how the bench stops it: exit 0, as the real server does.
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = terminate.recv() => return Ok(()),
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let routes = Arc::clone(&routes);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let routes = Arc::clone(&routes);
                async move { Ok::<_, Infallible>(routes.answer(request).await) }
            });
            // As dropshot sets it up, so the connection handling costs the same.
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new());
            builder.http2().timer(TokioTimer::new());
            // A client closing its connection mid-request is not our error.
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A response ready to be cloned out: headers parsed once, body shared.
struct Prepared {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Prepared {
    fn new(canned: &Canned) -> Result<Prepared, String> {
        let status = StatusCode::from_u16(canned.status).map_err(|e| e.to_string())?;
        let mut headers = HeaderMap::new();
        for (name, value) in &canned.headers {
            let name = HeaderName::try_from(name.as_str()).map_err(|e| e.to_string())?;
            let value = HeaderValue::try_from(value.as_str()).map_err(|e| e.to_string())?;
            headers.append(name, value);
        }
        Ok(Prepared {
            status,
            headers,
            body: Bytes::from(canned.body.clone()),
        })
    }

    fn response(&self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(self.body.clone()));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

/// The routes of the bench's scenarios, and the key they need.
struct Routes {
    authorization: HeaderValue,
    list20: Prepared,
    list100_available: Prepared,
    list20_deep: Prepared,
    get: Prepared,
    max_id: i64,
    create: Prepared,
    unauthorized: Prepared,
    place_order: Prepared,
    update_order: Prepared,
    inventory: Prepared,
    /// The queries of the two feed pages, and their answers.
    events_page: (String, Prepared),
    events_page_deep: (String, Prepared),
    /// A page of pets after any id, and of the feed after any other event.
    list20_random: Prepared,
    events_page_random: Prepared,
}

impl Routes {
    fn new(set: &CannedSet, key: &str) -> Result<Routes, String> {
        Ok(Routes {
            authorization: HeaderValue::try_from(format!("Bearer {key}"))
                .map_err(|e| format!("--key: {e}"))?,
            list20: Prepared::new(&set.list20)?,
            list100_available: Prepared::new(&set.list100_available)?,
            list20_deep: Prepared::new(&set.list20_deep)?,
            get: Prepared::new(&set.get)?,
            max_id: set.max_id,
            create: Prepared::new(&set.create)?,
            unauthorized: Prepared::new(&set.unauthorized)?,
            place_order: Prepared::new(&set.place_order)?,
            update_order: Prepared::new(&set.update_order)?,
            inventory: Prepared::new(&set.inventory)?,
            events_page: (
                format!("limit=20&after={}", set.feed.start),
                Prepared::new(&set.events_page)?,
            ),
            events_page_deep: (
                format!("limit=20&after={}", set.feed.deep),
                Prepared::new(&set.events_page_deep)?,
            ),
            list20_random: Prepared::new(&set.list20_random)?,
            events_page_random: Prepared::new(&set.events_page_random)?,
        })
    }

    async fn answer(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        if request.headers().get(AUTHORIZATION) != Some(&self.authorization) {
            return self.unauthorized.response();
        }
        let prepared = match (request.method(), request.uri().path()) {
            (&Method::GET, "/v1/pets") => match request.uri().query() {
                Some("limit=20") => Some(&self.list20),
                Some("limit=100&status=available") => Some(&self.list100_available),
                Some(query) if query.starts_with("status=pending&limit=20&after=") => {
                    Some(&self.list20_deep)
                }
                Some(query) if query.starts_with("limit=20&after=") => Some(&self.list20_random),
                _ => None,
            },
            (&Method::GET, "/v1/store/inventory") => Some(&self.inventory),
            (&Method::GET, "/v1/events") => [&self.events_page, &self.events_page_deep]
                .into_iter()
                .find(|(query, _)| request.uri().query() == Some(query.as_str()))
                .map(|(_, page)| page)
                .or_else(|| {
                    let query = request.uri().query().unwrap_or_default();
                    query
                        .starts_with("limit=20&after=")
                        .then_some(&self.events_page_random)
                }),
            (&Method::GET, path) => path
                .strip_prefix("/v1/pets/")
                .and_then(|id| id.parse::<i64>().ok())
                .filter(|id| (1..=self.max_id).contains(id))
                .map(|_| &self.get),
            // The real server reads the whole body before answering.
            (&Method::POST, "/v1/pets") => read_body(request, &self.create).await,
            (&Method::POST, "/v1/store/orders") => read_body(request, &self.place_order).await,
            (&Method::PATCH, path) if path.starts_with("/v1/store/orders/") => {
                read_body(request, &self.update_order).await
            }
            _ => None,
        };
        match prepared {
            Some(prepared) => prepared.response(),
            None => {
                let mut response = Response::new(Full::new(Bytes::new()));
                *response.status_mut() = StatusCode::NOT_FOUND;
                response
            }
        }
    }
}

/// `answer` once the request's whole body is read.
async fn read_body(request: Request<Incoming>, answer: &Prepared) -> Option<&Prepared> {
    request.into_body().collect().await.ok().map(|_| answer)
}
