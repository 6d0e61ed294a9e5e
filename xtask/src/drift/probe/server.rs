//! The server the probes talk to: started in-process on `127.0.0.1:0`
//! over a fresh SQLite file in a temporary directory, with a key generated
//! for the run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use petstore_server::keys::ApiKeys;
use petstore_server::store::DatabaseUrl;
use petstore_server::{RunningServer, ServerConfig};
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::plan::Scheme;

/// A running server and how to reach it.
pub struct Harness {
    server: Option<RunningServer>,
    database: PathBuf,
    client: reqwest::Client,
    /// `http://127.0.0.1:PORT` + the servers' prefix.
    base: String,
    key: String,
    sent: AtomicUsize,
    _dir: tempfile::TempDir,
}

/// Which credentials a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// The generated key.
    Valid,
    /// None at all.
    Missing,
    /// A well-formed key the server was not given.
    Wrong,
}

/// A request to send.
#[derive(Clone, Debug)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The path after the prefix, parameters filled in and encoded.
    pub path: String,
    /// Query parameters.
    pub query: Vec<(String, String)>,
    /// Header parameters.
    pub headers: Vec<(String, String)>,
    /// The body and its media type.
    pub body: Option<(String, Vec<u8>)>,
    /// The credentials it carries.
    pub credentials: Credentials,
}

/// What the server answered.
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The response headers.
    pub headers: HeaderMap,
    /// The media type of the body, lowercase, without parameters.
    pub media_type: Option<String>,
    /// The body, if it is JSON.
    pub json: Option<Value>,
}

impl Answer {
    /// ` ("message")` from an error body, to make a report line say why.
    pub fn detail(&self) -> String {
        self.json
            .as_ref()
            .and_then(|body| body.get("message"))
            .and_then(Value::as_str)
            .map(|message| format!(" ({message:?})"))
            .unwrap_or_default()
    }
}

impl Harness {
    /// Starts a server whose paths carry `prefix`.
    pub async fn start(prefix: &str) -> anyhow::Result<Harness> {
        let dir = tempfile::tempdir().context("creating a temporary directory")?;
        let database = dir.path().join("drift.db");
        let key = petstore_support::generate_key("drift").context("generating a key")?;
        let config = ServerConfig {
            bind: "127.0.0.1:0".parse().expect("a literal address"),
            database: DatabaseUrl::Sqlite(database.clone()),
            api_keys: ApiKeys::parse(&key).context("the generated key")?,
            admin_bind: None,
            tls: None,
            idempotency_retention: petstore_server::IDEMPOTENCY_RETENTION_MIN,
            docs: false,
        };
        let log = slog::Logger::root(slog::Discard, slog::o!());
        let server = petstore_server::start(config, log)
            .await
            .context("starting the server to probe")?;
        let base = format!("http://{}{prefix}", server.local_addr());
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .context("building the HTTP client")?;
        Ok(Harness {
            server: Some(server),
            database,
            client,
            base,
            key,
            sent: AtomicUsize::new(0),
            _dir: dir,
        })
    }

    /// How many requests were sent.
    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }

    /// Sends `request`, with credentials the way `scheme` says.
    pub async fn send(&self, request: &Request, scheme: &Scheme) -> anyhow::Result<Answer> {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let mut query = request.query.clone();
        let mut builder = self.client.request(
            request.method.clone(),
            format!("{}{}", self.base, request.path),
        );
        let key = match request.credentials {
            Credentials::Valid => Some(self.key.clone()),
            Credentials::Wrong => Some(format!("{}-wrong", self.key)),
            Credentials::Missing => None,
        };
        if let Some(key) = key {
            match scheme {
                Scheme::Bearer | Scheme::Unsupported(_) => builder = builder.bearer_auth(key),
                Scheme::Header(name) => builder = builder.header(name, key),
                Scheme::Query(name) => query.push((name.clone(), key)),
            }
        }
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        if let Some((media_type, body)) = &request.body {
            builder = builder
                .header("content-type", media_type)
                .body(body.clone());
        }
        let response = builder
            .query(&query)
            .send()
            .await
            .with_context(|| format!("{} {}", request.method, request.path))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let media_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            });
        let bytes = response.bytes().await.context("reading the response")?;
        Ok(Answer {
            status,
            headers,
            media_type,
            json: serde_json::from_slice(&bytes).ok(),
        })
    }

    /// Makes the database unavailable under the running server, as an
    /// operator's mistake would: its file is deleted, and the server, which
    /// checks after every commit that the path still names the file it has
    /// open, must refuse creates with 503 rather than acknowledge writes
    /// into a file nobody will open again.
    pub fn break_database(&self) -> anyhow::Result<()> {
        std::fs::remove_file(&self.database)
            .with_context(|| format!("deleting {}", self.database.display()))
    }

    /// Shuts the server down.
    pub async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            // A failed shutdown leaves nothing behind that matters: the
            // process or test ends and the directory is removed.
            let _ = server.shutdown(Duration::from_secs(30)).await;
        }
    }
}
