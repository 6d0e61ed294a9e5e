//! The end-to-end test harness: a real `petstore-server`, started in-process
//! on `127.0.0.1:0` over a real database — a fresh SQLite file in a temporary
//! directory, or a fresh database on a real PostgreSQL server — spoken to
//! over real HTTP.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use petstore_api::scopes::Scopes;
use petstore_server::budget::KeyLimits;
use petstore_server::keys::ApiKeys;
use petstore_server::logging::{self, LogFormat, LogSettings};
use petstore_server::ratelimit::RateLimits;
use petstore_server::storage::{self, DatabaseUrl, StoredKey};
use petstore_server::webhooks::secrets::SealingKeys;
use petstore_server::{
    EVENTS_RETENTION_DEFAULT, IDEMPOTENCY_RETENTION_MIN, RunningServer, ServerConfig,
    WebhookSettings,
};
pub use petstore_support::{blocking, eventually, eventually_async, postgres};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::Value;

/// A key the test servers accept.
pub const KEY: &str = "e2e-key-4f1c2b7a9d";
/// A second accepted key: any configured key works.
pub const OTHER_KEY: &str = "e2e-second-key";

/// How long a running server may take to honour a stored key or a change
/// of its scopes. It promises 2 s (the keyring's unit test holds it to
/// that, in virtual time); here, in real time on a shared machine, a wide
/// margin. Only a hang guard: each wait ends as soon as the change shows.
pub const KEY_CHANGE: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a server may take to serve again once its database is back.
pub const OUTAGE: std::time::Duration = std::time::Duration::from_secs(120);

/// How long one request may take: only a hang guard (a request that must
/// wait longer says so with a timeout of its own).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The storage backends the suite runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default.
    Sqlite,
    /// PostgreSQL, for many instances.
    Postgres,
}

/// A new, empty database for one test, and a scratch directory (which
/// holds the SQLite file, if any). Dropping it removes both (a database on
/// an external PostgreSQL server is dropped).
pub struct TestDatabase {
    /// Where the database is.
    pub url: DatabaseUrl,
    /// A directory for the test's files.
    pub dir: tempfile::TempDir,
    _postgres: Option<postgres::TestDatabase>,
}

impl TestDatabase {
    /// `database`, on PostgreSQL.
    pub fn postgres(database: postgres::TestDatabase) -> TestDatabase {
        TestDatabase {
            url: database.url().parse().expect("a valid PostgreSQL URL"),
            dir: tempfile::tempdir().expect("temporary directory"),
            _postgres: Some(database),
        }
    }

    /// The PostgreSQL database at `url`, which the caller keeps (on
    /// clusters of its own, say).
    pub fn postgres_at(url: &str) -> TestDatabase {
        TestDatabase {
            url: url.parse().expect("a valid PostgreSQL URL"),
            dir: tempfile::tempdir().expect("temporary directory"),
            _postgres: None,
        }
    }

    /// The URL as the command line takes it, password included.
    pub fn arg(&self) -> String {
        match &self.url {
            DatabaseUrl::Sqlite(path) => format!("sqlite://{}", path.display()),
            DatabaseUrl::Postgres(pg) => pg.url().to_owned(),
        }
    }
}

/// A new, empty database of `backend`; `None` only when PostgreSQL is
/// unavailable and the developer opted out.
pub async fn fresh_database(backend: Backend) -> Option<TestDatabase> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (url, pg) = match backend {
        Backend::Sqlite => (DatabaseUrl::Sqlite(dir.path().join("petstore.db")), None),
        Backend::Postgres => {
            let pg = postgres::fresh_database().await?;
            (pg.url().parse().expect("a valid PostgreSQL URL"), Some(pg))
        }
    };
    Some(TestDatabase {
        url,
        dir,
        _postgres: pg,
    })
}

/// Runs each test body once per backend: `on_every_backend! { async fn
/// name(server) { ... } }` makes `name::sqlite` and `name::postgres`, each
/// with its own fresh server in `server`.
#[macro_export]
macro_rules! on_every_backend {
    ($(async fn $name:ident($server:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                #[allow(unused_mut)]
                let mut $server = $crate::TestServer::start().await;
                $body
            }

            #[tokio::test]
            async fn postgres() {
                let Some(server) =
                    $crate::TestServer::start_with($crate::Backend::Postgres).await
                else {
                    return;
                };
                #[allow(unused_mut)]
                let mut $server = server;
                $body
            }
        }
    )*};
}

/// How a test server is configured beyond its database.
#[derive(Clone, Copy, Debug)]
struct Options {
    idempotency_retention: Duration,
    events_retention: Duration,
    rate_limits: Option<RateLimits>,
    webhook_retry_delays: &'static [Duration],
    webhook_timeout: Duration,
    webhook_private_targets: bool,
    webhook_key_file: bool,
}

/// The retry schedule of test servers' webhooks: the default's shape,
/// compressed from a day to seconds.
pub const WEBHOOK_RETRY_DELAYS: &[Duration] = &[
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
    Duration::from_millis(1600),
];

/// The webhook key file of a test server, in its database's directory.
const WEBHOOK_KEY_FILE: &str = "webhook.key";

/// How long test servers' webhook deliveries may take.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(2);

impl Default for Options {
    fn default() -> Options {
        Options {
            idempotency_retention: IDEMPOTENCY_RETENTION_MIN,
            events_retention: EVENTS_RETENTION_DEFAULT,
            rate_limits: None,
            webhook_retry_delays: WEBHOOK_RETRY_DELAYS,
            webhook_timeout: WEBHOOK_TIMEOUT,
            webhook_private_targets: true,
            webhook_key_file: true,
        }
    }
}

/// A running server and the database it owns.
pub struct TestServer {
    server: Option<RunningServer>,
    /// Everything the server logged, as JSON lines.
    log: LogBuffer,
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    client: reqwest::Client,
    options: Options,
    // Dropped after the server (fields drop in order).
    database: TestDatabase,
}

impl TestServer {
    /// Starts a server on a fresh SQLite file.
    pub async fn start() -> TestServer {
        TestServer::start_with(Backend::Sqlite)
            .await
            .expect("SQLite is always available")
    }

    /// Starts a server on a fresh database of `backend`; `None` only when
    /// PostgreSQL is unavailable and the developer opted out of it.
    pub async fn start_with(backend: Backend) -> Option<TestServer> {
        Some(TestServer::start_on(fresh_database(backend).await?).await)
    }

    /// Starts a server on `database`, which it keeps as long as it lives.
    pub async fn start_on(database: TestDatabase) -> TestServer {
        TestServer::start_keeping_idempotency_keys(database, IDEMPOTENCY_RETENTION_MIN).await
    }

    /// Starts a server on `database` that keeps idempotency keys for
    /// `retention` (the command line refuses less than 24 hours; tests of
    /// expiry need less).
    pub async fn start_keeping_idempotency_keys(
        database: TestDatabase,
        retention: Duration,
    ) -> TestServer {
        let options = Options {
            idempotency_retention: retention,
            ..Options::default()
        };
        TestServer::start_configured(database, options).await
    }

    /// Starts a server on `database` with webhooks as in production: only
    /// https targets at public addresses.
    pub async fn start_with_public_webhooks_only(database: TestDatabase) -> TestServer {
        let options = Options {
            webhook_private_targets: false,
            ..Options::default()
        };
        TestServer::start_configured(database, options).await
    }

    /// Starts a server on `database` without `--webhook-key-file`: on
    /// PostgreSQL, webhooks are off.
    pub async fn start_without_webhook_key_file(database: TestDatabase) -> TestServer {
        let options = Options {
            webhook_key_file: false,
            ..Options::default()
        };
        TestServer::start_configured(database, options).await
    }

    /// Starts a server on `database` that keeps events for `retention`.
    pub async fn start_keeping_events(database: TestDatabase, retention: Duration) -> TestServer {
        let options = Options {
            events_retention: retention,
            ..Options::default()
        };
        TestServer::start_configured(database, options).await
    }

    /// Starts a server on `database` with rate limits on, as `limits` say.
    pub async fn start_limited(database: TestDatabase, limits: RateLimits) -> TestServer {
        let options = Options {
            rate_limits: Some(limits),
            ..Options::default()
        };
        TestServer::start_configured(database, options).await
    }

    /// Another instance beside this one, on the same database and with the
    /// same settings (PostgreSQL; stop it first: this one owns the
    /// database).
    pub async fn beside(&self) -> TestServer {
        let database = TestDatabase {
            url: self.database.url.clone(),
            dir: tempfile::tempdir().expect("temporary directory"),
            _postgres: None,
        };
        // Every instance seals and opens webhook secrets with the same keys.
        std::fs::copy(
            self.database.dir.path().join(WEBHOOK_KEY_FILE),
            database.dir.path().join(WEBHOOK_KEY_FILE),
        )
        .expect("the webhook key file copied");
        TestServer::start_configured(database, self.options).await
    }

    async fn start_configured(database: TestDatabase, options: Options) -> TestServer {
        let log = LogBuffer::default();
        let server = launch(&database, &log, options).await;
        TestServer {
            addr: server.local_addr(),
            admin_addr: server.admin_addr(),
            server: Some(server),
            database,
            log,
            // Idle connections dropped well before the server closes them
            // (its idle timeout), so that none is reused as it closes.
            client: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .pool_idle_timeout(petstore_server::edge::limits::DEFAULT_TIMEOUT / 2)
                .build()
                .expect("an HTTP client"),
            options,
        }
    }

    /// The management listener's address (`/metrics`).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The database the server serves.
    pub fn database(&self) -> &TestDatabase {
        &self.database
    }

    /// Shuts the server down gracefully and starts a new one on the same
    /// database (and a new port).
    pub async fn restart(&mut self) {
        self.stop().await;
        let server = launch(&self.database, &self.log, self.options).await;
        self.addr = server.local_addr();
        self.admin_addr = server.admin_addr();
        self.server = Some(server);
    }

    /// Shuts the server down gracefully.
    pub async fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            let report = server
                .shutdown(Duration::from_secs(60))
                .await
                .expect("clean shutdown");
            assert!(!report.deadline_passed, "a request hung the shutdown");
        }
    }

    /// Shuts the server down, giving in-flight requests `deadline`, and
    /// reports how it went.
    pub async fn stop_within(&mut self, deadline: Duration) -> petstore_server::ShutdownReport {
        let server = self.server.take().expect("the server is running");
        server.shutdown(deadline).await.expect("clean shutdown")
    }

    /// Stores a new key named `name` with `scopes` (comma-separated, or
    /// `all`) in the server's database
    /// (as `petstore-server keys create` does) and waits until the server
    /// accepts it; returns the key.
    pub async fn stored_key(&self, name: &str, scopes: &str) -> String {
        self.stored_key_limited(name, scopes, KeyLimits::default())
            .await
    }

    /// [`TestServer::stored_key`], the key setting `limits` of its own
    /// budget.
    pub async fn stored_key_limited(&self, name: &str, scopes: &str, limits: KeyLimits) -> String {
        let scopes: Scopes = scopes.parse().expect("scopes as `keys create` takes them");
        let key = petstore_server::keys::generate().expect("random bytes");
        let keys = storage::open_keys(&self.database.url)
            .await
            .expect("the key store opens");
        keys.create_key(StoredKey {
            name: name.to_owned(),
            digest: petstore_server::keys::KeyDigest::of(&key),
            created_at: petstore_server::keyring::unix_now(),
            expires_at: None,
            scopes,
            limits,
            last_used_at: None,
            revoked_at: None,
        })
        .await
        .expect("the key is stored");
        self.key_answers(&key, "/pets?limit=1", |status| status != 401)
            .await;
        key
    }

    /// Revokes the stored key named `name` (as `petstore-server keys revoke`
    /// does); the server refuses it within 2 s.
    pub async fn revoke_key(&self, name: &str) {
        let keys = storage::open_keys(&self.database.url)
            .await
            .expect("the key store opens");
        keys.revoke_key(name, petstore_server::keyring::unix_now())
            .await
            .expect("the key is revoked");
    }

    /// Gives the stored key named `name` the scopes `scopes` (as
    /// `petstore-server keys scopes` does); the server applies them within
    /// 2 s.
    pub async fn set_key_scopes(&self, name: &str, scopes: &str) {
        let scopes: Scopes = scopes.parse().expect("scopes as `keys scopes` takes them");
        let keys = storage::open_keys(&self.database.url)
            .await
            .expect("the key store opens");
        keys.set_key_scopes(name, scopes)
            .await
            .expect("the key's scopes are changed");
    }

    /// Waits until a `GET path` with `key` gets a status `accepted` takes
    /// (keys and their scopes reach a running server within 2 s; the wait's
    /// deadline is [`KEY_CHANGE`]).
    pub async fn key_answers(&self, key: &str, path: &str, accepted: impl Fn(u16) -> bool) {
        let url = self.url(path);
        let what = format!("GET {path} answered as expected");
        petstore_support::eventually_async_within(&what, KEY_CHANGE, || {
            let request = self.client.get(&url).bearer_auth(key).send();
            let accepted = &accepted;
            async move {
                let status = request.await.expect("request sent").status().as_u16();
                accepted(status)
            }
        })
        .await;
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/v1{path}", self.addr)
    }

    /// A GET of `path` outside the API's `/v1`, with no credentials
    /// (the contract, its page).
    pub async fn client_get_root(&self, path: &str) -> Response {
        self.client
            .get(format!("http://{}{path}", self.addr))
            .send()
            .await
            .expect("request sent")
    }

    /// A request with no credentials at all.
    pub fn anonymous(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, self.url(path))
    }

    /// A request carrying `Authorization: Bearer KEY`.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.anonymous(method, path).bearer_auth(KEY)
    }

    /// An authenticated GET.
    pub fn get(&self, path: &str) -> RequestBuilder {
        self.request(Method::GET, path)
    }

    /// An authenticated `POST /pets` with a JSON body.
    pub fn post_pet(&self, body: &Value) -> RequestBuilder {
        self.request(Method::POST, "/pets").json(body)
    }

    /// An authenticated `POST /pets` with `body` sent as it is, declared JSON.
    pub async fn post_raw(&self, body: impl Into<reqwest::Body>) -> Response {
        self.request(Method::POST, "/pets")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request sent")
    }

    /// Creates a pet, insisting on 201, and returns the stored pet.
    pub async fn create(&self, body: Value) -> Value {
        let response = self.post_pet(&body).send().await.expect("request sent");
        assert_eq!(response.status(), StatusCode::CREATED, "creating {body}");
        response.json().await.expect("a JSON pet")
    }

    /// Creates `count` pets, 50 at a time, insisting on 201 for each: names
    /// `pet-I`, statuses cycling through available, pending, sold and none,
    /// except that every tenth is pending (so one status is rarer than the
    /// others). Returns them in id order.
    pub async fn create_many(&self, count: usize) -> Vec<Value> {
        const STATUSES: [Option<&str>; 4] =
            [Some("available"), Some("pending"), Some("sold"), None];
        let mut pets = Vec::new();
        let indexes: Vec<usize> = (0..count).collect();
        for chunk in indexes.chunks(50) {
            let creates = chunk.iter().map(|&i| {
                let mut body = serde_json::json!({"name": format!("pet-{i}"), "categoryId": i});
                let status = if i % 10 == 9 {
                    Some("pending")
                } else {
                    STATUSES[i % 4]
                };
                if let Some(status) = status {
                    body["status"] = serde_json::json!(status);
                }
                self.create(body)
            });
            pets.extend(futures::future::join_all(creates).await);
        }
        pets.sort_by_key(|pet| pet["id"].as_i64());
        pets
    }

    /// `GET /pets` + `query`, insisting on 200, returning the array.
    pub async fn list(&self, query: &str) -> Vec<Value> {
        let response = self
            .get(&format!("/pets{query}"))
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), StatusCode::OK, "listing {query}");
        response.json().await.expect("a JSON array")
    }

    /// `GET /pets/{id}`, insisting on 200, returning the pet.
    pub async fn read(&self, id: &Value) -> Value {
        let response = self
            .get(&format!("/pets/{id}"))
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), StatusCode::OK, "reading pet {id}");
        response.json().await.expect("a JSON pet")
    }

    /// An authenticated `POST /store/orders` ordering the animal `pet_id`.
    pub fn post_order(&self, pet_id: &Value) -> RequestBuilder {
        self.request(Method::POST, "/store/orders")
            .json(&serde_json::json!({ "petId": pet_id }))
    }

    /// Orders the animal `pet_id`, insisting on 201; returns the order.
    pub async fn place_order(&self, pet_id: &Value) -> Value {
        let response = self.post_order(pet_id).send().await.expect("request sent");
        assert_eq!(
            response.status(),
            StatusCode::CREATED,
            "ordering pet {pet_id}"
        );
        response.json().await.expect("a JSON order")
    }

    /// Orders the animal `pet_id` with `key`, insisting on 201; returns
    /// the order.
    pub async fn place_order_as(&self, key: &str, pet_id: &Value) -> Value {
        let response = self
            .anonymous(Method::POST, "/store/orders")
            .bearer_auth(key)
            .json(&serde_json::json!({ "petId": pet_id }))
            .send()
            .await
            .expect("request sent");
        assert_eq!(
            response.status(),
            StatusCode::CREATED,
            "ordering pet {pet_id}"
        );
        response.json().await.expect("a JSON order")
    }

    /// An authenticated `PATCH /store/orders/{id}` asking for `status`.
    pub fn patch_order(&self, id: &Value, status: &str) -> RequestBuilder {
        self.request(Method::PATCH, &format!("/store/orders/{id}"))
            .json(&serde_json::json!({ "status": status }))
    }

    /// `GET /store/inventory`, insisting on 200.
    pub async fn inventory(&self) -> Value {
        let response = self
            .get("/store/inventory")
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), StatusCode::OK, "reading the inventory");
        response.json().await.expect("a JSON inventory")
    }

    /// Every item of a list, following `Link: rel="next"` from `first` (a
    /// path under `/v1`, with its query); checks that each page holds at
    /// most `limit` items, that each link follows its page's last `id`, and
    /// that ids ascend throughout (so that the walk moves on, and ends).
    pub async fn walk(&self, first: &str, limit: usize) -> Vec<Value> {
        self.walk_as(KEY, first, limit).await
    }

    /// [`TestServer::walk`], with the API key `key`.
    pub async fn walk_as(&self, key: &str, first: &str, limit: usize) -> Vec<Value> {
        let mut seen = Vec::new();
        let mut next = Some(format!("/v1{first}"));
        while let Some(target) = next {
            let path = target.strip_prefix("/v1").expect("a link under /v1");
            let request = self.anonymous(Method::GET, path).bearer_auth(key);
            let response = request.send().await.expect("request sent");
            assert_eq!(response.status(), StatusCode::OK, "{target}");
            next = next_link(&response);
            let items: Vec<Value> = response.json().await.expect("a JSON array");
            assert!(items.len() <= limit, "{target}: {} items", items.len());
            if let Some(link) = &next {
                let last = &items.last().expect("a next link after an empty page")["id"];
                assert!(link.ends_with(&format!("&after={last}")), "{link}");
            }
            let ids = seen
                .last()
                .into_iter()
                .chain(&items)
                .map(|item| item["id"].as_i64());
            let ids: Vec<i64> = ids.map(|id| id.expect("an id")).collect();
            assert!(ids.is_sorted_by(|a, b| a < b), "{target}: ids {ids:?}");
            seen.extend(items);
        }
        seen
    }

    /// The sum of the samples of `metric` (a name, or a name and its
    /// labels) in `/metrics`.
    pub async fn metric(&self, metric: &str) -> f64 {
        let admin = self.admin_addr().expect("the management listener is on");
        let text = self
            .client
            .get(format!("http://{admin}/metrics"))
            .send()
            .await
            .expect("request sent")
            .text()
            .await
            .expect("a text body");
        text.lines()
            .filter(|line| line.starts_with(metric))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Everything logged so far (the async drain may lag; see
    /// [`TestServer::log_eventually_contains`]).
    pub fn log_text(&self) -> String {
        self.log.text()
    }

    /// Waits until the log contains `needle` (the asynchronous drain writes
    /// records a moment after they are made); returns the log. Fails if it
    /// does not within [`petstore_support::SOON`].
    pub async fn log_eventually_contains(&self, needle: &str) -> String {
        eventually(&format!("the log contains {needle:?}"), || {
            self.log_text().contains(needle)
        })
        .await;
        self.log_text()
    }
}

async fn launch(database: &TestDatabase, log: &LogBuffer, options: Options) -> RunningServer {
    let key_file = database.dir.path().join(WEBHOOK_KEY_FILE);
    if options.webhook_key_file && !key_file.exists() {
        SealingKeys::generate()
            .and_then(|keys| keys.write_new(&key_file))
            .expect("a webhook key file");
    }
    let config = ServerConfig {
        bind: "127.0.0.1:0".parse().expect("an address"),
        database: database.url.clone(),
        api_keys: ApiKeys::parse(&format!("{KEY},{OTHER_KEY}")).expect("valid keys"),
        admin_bind: Some("127.0.0.1:0".parse().expect("an address")),
        tls: None,
        idempotency_retention: options.idempotency_retention,
        events_retention: options.events_retention,
        // Receivers in tests listen on loopback, over plain HTTP.
        webhooks: WebhookSettings {
            key_file: options.webhook_key_file.then_some(key_file),
            allow_private_targets: options.webhook_private_targets,
            retry_delays: options.webhook_retry_delays.to_vec(),
            timeout: options.webhook_timeout,
        },
        docs: true,
        rate_limits: options.rate_limits,
        edge: Default::default(),
    };
    let settings = LogSettings {
        format: LogFormat::Json,
        level: slog::Level::Info,
        access_log: true,
    };
    let logger = logging::logger(settings, log.clone());
    petstore_server::start(config, logger)
        .await
        .expect("the server starts")
}

/// The target of the response's `Link: <…>; rel="next"` header, if it has
/// one; fails on any other `Link` or on more than one.
pub fn next_link(response: &Response) -> Option<String> {
    let links: Vec<&str> = response
        .headers()
        .get_all("link")
        .iter()
        .map(|v| v.to_str().expect("an ASCII link"))
        .collect();
    assert!(links.len() <= 1, "{links:?}");
    links.first().map(|link| {
        link.strip_suffix("; rel=\"next\"")
            .and_then(|l| l.strip_prefix('<'))
            .and_then(|l| l.strip_suffix('>'))
            .unwrap_or_else(|| panic!("not a next link: {link}"))
            .to_owned()
    })
}

/// Asserts that `response` is an error in the contract's shape — JSON, with
/// exactly `code`, `message` and `status`, `status` equal to the HTTP status,
/// and the headers its status promises (1.5.0: `Retry-After` on every 503
/// and 429, `WWW-Authenticate` on every 401, `Allow` on every 405) — and
/// returns its body.
pub async fn assert_error(response: Response, status: StatusCode, code: &str) -> Value {
    assert_eq!(response.status(), status, "HTTP status");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|value| value.to_str().expect("an ASCII header").to_owned())
    };
    match status.as_u16() {
        429 | 503 => {
            let retry_after = header("retry-after").expect("a Retry-After");
            let seconds: u64 = retry_after.parse().expect("Retry-After in seconds");
            assert!(seconds >= 1, "Retry-After: {seconds}");
        }
        401 => {
            let challenge = header("www-authenticate").expect("a WWW-Authenticate");
            assert!(
                challenge.starts_with(r#"Bearer realm="petstore""#),
                "{challenge}"
            );
        }
        405 => assert!(header("allow").is_some(), "a 405 without Allow"),
        _ => {}
    }
    let content_type = response.headers().get("content-type").cloned();
    assert_eq!(
        content_type.as_ref().map(|v| v.to_str().unwrap()),
        Some("application/json")
    );
    let body: Value = response.json().await.expect("a JSON error body");
    let object = body.as_object().expect("an object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "status"], "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(
        !body["message"]
            .as_str()
            .expect("a string message")
            .is_empty(),
        "{body}"
    );
    body
}

/// An in-memory log sink shared with the server's logger.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log lock")).into_owned()
    }
}

impl Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
