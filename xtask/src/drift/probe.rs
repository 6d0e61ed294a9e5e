//! The probing half: what neither the emitted document nor schemathesis can
//! check, asked of a real server started in-process (SQLite in a temporary
//! directory, a key generated for the run), every expectation read from the
//! YAML.
//!
//! What schemathesis checks in `cargo xtask conformance` is not probed here:
//! values at and beyond each bound, wrong types, missing and undeclared
//! fields, that a secured operation refuses a request without a key or with
//! a wrong one (`ignored_auth`), that every status it meets — 401, a path
//! parameter naming nothing (404), 400 — is declared (`status_code_conformance`)
//! with a body of the declared media type and schema. What stays here:
//!
//! - **query defaults**: dropshot cannot write a parameter's `default` into
//!   the emitted document, and schemathesis does not check what an omitted
//!   parameter means. A page size's default (an integer of at least 1, of
//!   an operation answering an array) is checked by counting, after seeding
//!   more items than it through the collection's create operation (a `POST`
//!   with a body to the list's own path); any other default is noted as not
//!   probed, and so is one whose collection the probe cannot fill: a list
//!   below an item (`/webhooks/{id}/deliveries`), or a collection whose
//!   every create was refused with a status the YAML declares for it (a
//!   webhook's `url` must be a public `https` endpoint, which the probe
//!   has none of). Seeded items carry the first value of each optional
//!   enum, and an integer property named `xId` names a distinct seeded item
//!   of the collection `…/xs`, so that one collection's items can refer to
//!   another's.
//! - **an open operation**: the emitted document has no security, and
//!   schemathesis takes a 401 as a fair answer to any request; an operation
//!   the YAML leaves open must answer without a key.
//! - **the error statuses schemathesis cannot provoke**: 413 for a 1 MiB body
//!   (it never sends one) and 503 with the database file deleted under the
//!   server; each must be declared for the operation (the server declares
//!   `4XX`/`5XX` ranges). A declared status no probe tries is noted.
//! - **`null` for an optional property**: schemars writes every `Option<T>`
//!   as nullable, so the emitted document cannot say whether the server
//!   takes `null`; it is sent, and must be refused (400) unless the YAML says
//!   `nullable`.
//! - **the body of each provoked error**: a declared media type, valid
//!   against the YAML's schema (checked with the `jsonschema` crate), and its
//!   `status` field, when the schema has one, equal to the HTTP status — a
//!   rule no document can state.
//! - **the headers of every answer judged**: each header the YAML declares
//!   for the status answered, present when required and valid against its
//!   schema. The emitted document cannot carry the headers of an error
//!   (its errors are `4XX`/`5XX` ranges) nor those the server sets outside
//!   the API trait (`canon::SERVER_WIDE_HEADERS`), so this is where they
//!   are checked: on a valid request of each operation, on requests
//!   without a key and with an unknown one (`401`), and on the `413` and
//!   `503` provoked above; the probed server has rate limits on (budgets
//!   no probe reaches), so the `RateLimit` fields are judged too.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use openapiv3::{APIKeyLocation, Parameter, ReferenceOr, Response, SecurityScheme};
use petstore_server::budget::{Budget, Rate};
use petstore_server::ratelimit::RateLimits;
use petstore_server::{RunningServer, ServerConfig, keys::ApiKeys, storage::DatabaseUrl};
use reqwest::Method;
use serde_json::{Value, json};

use super::canon::{self, Side, covers, is_error};
use super::{Difference, Report};

/// The size of the body sent to provoke 413: far above any sensible limit
/// (the YAML states 16384 bytes) yet quick to send.
const OVERSIZED_BODY: usize = 1 << 20;

/// Runs every probe against a server started for the purpose.
pub async fn run(yaml: &Side<'_>, prefix: &str, report: &mut Report) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let database = dir.path().join("drift.db");
    let key = petstore_support::generate_key("drift").context("generating a key")?;
    let server = start(&database, &key).await?;
    let operations: Vec<Op> = yaml
        .operations()
        .into_values()
        .map(|op| Op::new(yaml, op))
        .collect();
    let mut prober = Prober {
        yaml,
        api: serde_json::to_value(yaml.api)?,
        // Pooled connections are dropped after half the server's idle
        // timeout: reusing one the server is closing at that moment fails
        // the request ("error sending request"; seen twice under load, most
        // likely so).
        client: reqwest::Client::builder()
            .pool_idle_timeout(petstore_server::edge::limits::DEFAULT_TIMEOUT / 2)
            .build()
            .context("building the probe's HTTP client")?,
        base: format!("http://{}{prefix}", server.local_addr()),
        key,
        unknown_key: petstore_support::generate_key("unknown").context("generating a key")?,
        items: BTreeMap::new(),
        unfillable: BTreeMap::new(),
        tried: BTreeMap::new(),
        sent: Cell::new(0),
        report,
    };
    prober.seed(&operations).await;
    for op in &operations {
        prober.defaults(op).await;
        prober.open(op).await;
        prober.refused(op).await;
        prober.body(op).await;
        prober.answered(op).await;
    }
    std::fs::remove_file(&database).context("deleting the database under the server")?;
    prober.unavailable(&operations).await;
    for op in &operations {
        prober.untried(op);
    }
    prober.report.requests += prober.sent.get();
    // The run is over either way: a failed shutdown leaves nothing that matters.
    let _ = server.shutdown(Duration::from_secs(30)).await;
    Ok(())
}

/// A server over a fresh SQLite file, accepting `key`.
async fn start(database: &std::path::Path, key: &str) -> anyhow::Result<RunningServer> {
    let config = ServerConfig {
        // On, so that the RateLimit fields are probed; budgets no probe
        // comes near, so that no answer is a 429 the probes did not ask for.
        rate_limits: Some(RateLimits {
            key: Budget {
                rate: Rate::per_second(NonZeroU32::new(100_000).expect("not 0")),
                burst: NonZeroU32::new(100_000).expect("not 0"),
                in_flight: NonZeroU32::new(1_000).expect("not 0"),
            },
            address_rate: Rate::per_second(NonZeroU32::new(100_000).expect("not 0")),
            address_burst: NonZeroU32::new(100_000).expect("not 0"),
        }),
        bind: "127.0.0.1:0".parse().expect("a literal address"),
        database: DatabaseUrl::Sqlite(database.to_owned()),
        api_keys: ApiKeys::parse(key).context("the generated key")?,
        admin_bind: None,
        tls: None,
        idempotency_retention: petstore_server::IDEMPOTENCY_RETENTION_MIN,
        events_retention: petstore_server::EVENTS_RETENTION_DEFAULT,
        webhooks: petstore_server::WebhookSettings::default(),
        docs: false,
        edge: Default::default(),
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let started = petstore_server::start(config, log).await;
    started.context("starting the server to probe")
}

/// An operation of the YAML, as the probes see it.
struct Op<'a> {
    location: String,
    name: String,
    method: Method,
    path: String,
    params: Vec<&'a Parameter>,
    /// The JSON-like media type of the request body, and its canonical schema.
    body: Option<(String, Value)>,
    /// The lowest 2xx status, and whether its body is an array.
    success: Option<(u16, bool)>,
    /// The error responses, keyed as written (`404`, `4XX`).
    errors: Vec<(String, &'a Response)>,
    /// The success responses, keyed as written.
    successes: Vec<(String, &'a Response)>,
    secured: bool,
}

impl<'a> Op<'a> {
    fn new(side: &Side<'a>, op: canon::Op<'a>) -> Op<'a> {
        let responses = side.responses(op.operation);
        let array = |r: &Response| {
            let schema = json_schema(&r.content).map(|s| side.resolve(&side.schema(s)));
            schema.is_some_and(|s| s["type"] == "array")
        };
        let success = responses
            .iter()
            .filter_map(|(key, r)| Some((key.parse().ok().filter(|c| (200..300).contains(c))?, r)))
            .min_by_key(|(code, _)| *code)
            .map(|(code, r)| (code, array(r)));
        let security = op
            .operation
            .security
            .as_ref()
            .or(side.api.security.as_ref());
        let body = op
            .operation
            .request_body
            .as_ref()
            .and_then(|b| side.body(b));
        let body = body.and_then(|b| b.content.iter().find(|(media, _)| media.contains("json")));
        let id = op.operation.operation_id.clone();
        Op {
            location: op.location(),
            name: id.unwrap_or_else(|| op.location()),
            method: Method::from_bytes(op.method.to_uppercase().as_bytes()).expect("a method"),
            path: op.path.clone(),
            params: op.parameters,
            body: body
                .and_then(|(media, m)| Some((media.clone(), side.schema(m.schema.as_ref()?)))),
            success,
            successes: responses
                .iter()
                .filter(|(key, _)| !is_error(key))
                .cloned()
                .collect(),
            errors: responses
                .into_iter()
                .filter(|(key, _)| is_error(key))
                .collect(),
            secured: security.is_some_and(|r| !r.is_empty() && r.iter().all(|r| !r.is_empty())),
        }
    }

    /// The declared response covering `status`: its own code, else its range.
    fn declared(&self, status: u16) -> Option<&'a Response> {
        let exact = self
            .errors
            .iter()
            .find(|(key, _)| *key == status.to_string());
        let range = || self.errors.iter().find(|(key, _)| covers(key, status));
        exact.or_else(range).map(|(_, response)| *response)
    }

    /// The declared response for any status, success or error.
    fn response(&self, status: u16) -> Option<&'a Response> {
        let success = self.successes.iter().find(|(key, _)| covers(key, status));
        success
            .map(|(_, response)| *response)
            .or_else(|| self.declared(status))
    }
}

/// Whether a request carries the key.
#[derive(Clone, Copy)]
enum Key {
    Valid,
    Missing,
    /// A well-formed key the server does not know.
    Unknown,
}

/// What the YAML says a request must get.
#[derive(Clone, Copy)]
enum Expect {
    Error(u16),
    Success,
    Not(u16),
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Error(code) => write!(f, "{code}"),
            Expect::Success => f.write_str("2xx"),
            Expect::Not(code) => write!(f, "anything but {code}"),
        }
    }
}

/// A request to send.
struct Request {
    path: String,
    query: Vec<(String, String)>,
    body: Option<String>,
    key: Key,
}

/// What the server answered.
struct Answer {
    status: u16,
    media_type: String,
    headers: reqwest::header::HeaderMap,
    json: Option<Value>,
}

struct Prober<'a, 'r> {
    yaml: &'a Side<'a>,
    /// The YAML as JSON, whose components the error schemas refer to.
    api: Value,
    client: reqwest::Client,
    base: String,
    key: String,
    /// A key of the same form that the server does not accept.
    unknown_key: String,
    /// Items created while seeding, by collection (the create's path):
    /// path parameters that must exist name them.
    items: BTreeMap<String, Vec<Value>>,
    /// Collections (the create's path) of which no item could be created,
    /// every create being refused with a status the YAML declares for it:
    /// those statuses.
    unfillable: BTreeMap<String, BTreeSet<u16>>,
    /// The statuses each operation was made to answer.
    tried: BTreeMap<String, BTreeSet<u16>>,
    sent: Cell<usize>,
    report: &'r mut Report,
}

impl Prober<'_, '_> {
    fn differ(&mut self, location: &str, message: String) {
        let difference = Difference::new(location, message);
        if !self.report.differences.contains(&difference) {
            self.report.differences.push(difference);
        }
    }

    /// Sends `request` with the key where the YAML's security scheme puts it.
    async fn send(&self, op: &Op<'_>, request: &Request) -> reqwest::Result<Answer> {
        self.sent.set(self.sent.get() + 1);
        let url = format!("{}{}", self.base, request.path);
        let mut builder = self
            .client
            .request(op.method.clone(), url)
            .query(&request.query);
        let key = match request.key {
            Key::Valid => self.key.clone(),
            Key::Unknown => self.unknown_key.clone(),
            Key::Missing => String::new(),
        };
        let scheme = self
            .yaml
            .api
            .security
            .iter()
            .flatten()
            .flat_map(|r| r.keys())
            .next();
        let schemes = self
            .yaml
            .api
            .components
            .as_ref()
            .map(|c| &c.security_schemes);
        builder = match scheme.and_then(|name| schemes?.get(name)) {
            _ if key.is_empty() => builder,
            Some(ReferenceOr::Item(SecurityScheme::APIKey { location, name, .. })) => {
                match location {
                    APIKeyLocation::Query => builder.query(&[(name, key)]),
                    _ => builder.header(name, key),
                }
            }
            _ => builder.bearer_auth(key),
        };
        if let (Some(body), Some((media_type, _))) = (&request.body, &op.body) {
            builder = builder
                .header("content-type", media_type)
                .body(body.clone());
        }
        let builder = builder.timeout(Duration::from_secs(30));
        let again = builder.try_clone();
        let response = match (builder.send().await, again) {
            // A request that failed in sending (on a pooled connection the
            // server was closing, say) is sent once more: the check compares
            // answers, not connections. If it fails again, that is reported.
            (Err(e), Some(again)) if e.is_request() && !e.is_timeout() => again.send().await?,
            (sent, _) => sent?,
        };
        let status = response.status().as_u16();
        let media_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok());
        let media_type = media_type
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default();
        let media_type = media_type.trim().to_ascii_lowercase();
        let headers = response.headers().clone();
        let json = serde_json::from_slice(&response.bytes().await?).ok();
        Ok(Answer {
            status,
            media_type,
            headers,
            json,
        })
    }

    /// A request the YAML says is valid: path parameters naming the first
    /// seeded item (its field of that name, or `id`), required query
    /// parameters, a valid body.
    fn request(&self, op: &Op<'_>, key: Key) -> Request {
        let (mut path, mut query) = (op.path.clone(), Vec::new());
        for param in &op.params {
            let data = param.parameter_data_ref();
            let name = data.name.as_str();
            let schema = self.yaml.format_json(&data.format).1;
            let first = self.collection(&op.path).and_then(|items| items.first());
            let existing = first.and_then(|item| item.get(name).or(item.get("id")).cloned());
            match canon::location(param) {
                "path" => {
                    let value = existing.unwrap_or_else(|| valid(self.yaml, &schema, 0));
                    path = path.replace(&format!("{{{name}}}"), &text(&value));
                }
                "query" if data.required => {
                    query.push((name.to_owned(), text(&valid(self.yaml, &schema, 0))));
                }
                _ => {}
            }
        }
        let body = op
            .body
            .as_ref()
            .map(|(_, s)| valid(self.yaml, s, 0).to_string());
        Request {
            path,
            query,
            body,
            key,
        }
    }

    /// Sends `request` and judges the answer; a failed request is itself a
    /// difference.
    async fn probe(
        &mut self,
        op: &Op<'_>,
        location: &str,
        what: &str,
        request: Request,
        expect: Expect,
    ) {
        match self.send(op, &request).await {
            Ok(answer) => self.judge(op, location, what, &answer, expect),
            Err(e) => self.differ(
                location,
                format!("probe {what}: the request failed: {}", causes(e)),
            ),
        }
    }

    /// Whether the answer is what `expect` says; an expected error must also
    /// be declared for the operation, with a body fitting the declaration.
    fn judge(&mut self, op: &Op<'_>, location: &str, what: &str, answer: &Answer, expect: Expect) {
        let status = answer.status;
        self.tried
            .entry(op.location.clone())
            .or_default()
            .insert(status);
        let fits = match expect {
            Expect::Error(code) => status == code,
            Expect::Success => (200..300).contains(&status),
            Expect::Not(code) => status != code,
        };
        if !fits {
            let why = answer
                .json
                .as_ref()
                .and_then(|body| body["message"].as_str());
            let why = why
                .map(|message| format!(" ({message:?})"))
                .unwrap_or_default();
            let message =
                format!("probe {what}: yaml expects {expect}, server answered {status}{why}");
            return self.differ(location, message);
        }
        if let Some(response) = op.response(status) {
            self.headers(location, what, response, answer);
        }
        let Expect::Error(code) = expect else { return };
        let Some(response) = op.declared(code) else {
            let name = &op.name;
            let message = format!(
                "probe {what}: server answered {code}, which the yaml does not declare for {name}"
            );
            return self.differ(location, message);
        };
        for problem in self.body_problems(response, answer) {
            self.differ(location, format!("probe {what}: {problem}"));
        }
    }

    /// Each header `response` declares: present if required, valid against
    /// its schema if present.
    fn headers(&mut self, location: &str, what: &str, response: &Response, answer: &Answer) {
        for (name, header) in &response.headers {
            let Some(header) = self.yaml.header(header) else {
                continue;
            };
            let name = name.to_ascii_lowercase();
            // Field lines of one name are one list (RFC 9110 section 5.3).
            let lines = answer.headers.get_all(&name);
            let lines: Vec<&str> = lines.iter().map(|v| v.to_str().unwrap_or("")).collect();
            let problem = if lines.is_empty() {
                header
                    .required
                    .then(|| "required, server sent none".to_owned())
            } else {
                let value = lines.join(", ");
                let schema = self.yaml.resolve(&self.yaml.format_json(&header.format).1);
                let valid = jsonschema::draft4::new(&schema)
                    .map(|validator| validator.is_valid(&json!(value)));
                match valid {
                    Ok(true) => None,
                    Ok(false) => Some(format!(
                        "server sent {value:?}, not valid against the yaml's schema"
                    )),
                    Err(e) => Some(format!("the yaml's schema cannot be used: {e}")),
                }
            };
            let Some(problem) = problem else { continue };
            let status = answer.status;
            self.differ(
                location,
                format!("probe {what}: {status} header {name}: {problem}"),
            );
        }
    }

    /// What is wrong with an error answer's body: its media type undeclared,
    /// the body not valid against the declared schema, its `status` not the
    /// HTTP status.
    fn body_problems(&self, response: &Response, answer: &Answer) -> Vec<String> {
        let Some(media) = response.content.get(&answer.media_type) else {
            let declared: Vec<&String> = response.content.keys().collect();
            let media_type = &answer.media_type;
            return vec![format!(
                "server answered with content type {media_type:?}, yaml declares {declared:?}"
            )];
        };
        let (Some(schema), Some(body)) = (&media.schema, &answer.json) else {
            let not_json = media
                .schema
                .is_some()
                .then(|| "the body is not JSON".to_owned());
            return not_json.into_iter().collect();
        };
        // The schema's references point into the YAML's components.
        let root = json!({"components": self.api["components"], "allOf": [schema]});
        let mut problems: Vec<String> = match jsonschema::draft4::new(&root) {
            Ok(validator) => validator
                .iter_errors(body)
                .map(|e| format!("body{}: {e}", e.instance_path()))
                .collect(),
            Err(e) => vec![format!("the yaml's schema cannot be used: {e}")],
        };
        let declares_status = self.yaml.resolve(&self.yaml.schema(schema))["properties"]
            .get("status")
            .is_some();
        if declares_status && body.get("status") != Some(&json!(answer.status)) {
            let (field, status) = (&body["status"], answer.status);
            problems.push(format!(
                "the error body's status is {field}, the HTTP status {status}"
            ));
        }
        problems
    }

    /// The seeded items of the collection `path` is in: the longest
    /// collection path it starts with.
    fn collection(&self, path: &str) -> Option<&Vec<Value>> {
        let within = self
            .items
            .iter()
            .filter(|(c, _)| path.starts_with(c.as_str()));
        within.max_by_key(|(c, _)| c.len()).map(|(_, items)| items)
    }

    /// Creates more items than any integer query default (and a few) in
    /// each collection, through its create operation: a POST with a body to
    /// a path without parameters. Collections whose items refer to others
    /// are seeded after those.
    async fn seed(&mut self, operations: &[Op<'_>]) {
        let defaults = operations
            .iter()
            .flat_map(|op| op.params.iter().map(move |param| (op, param)));
        let defaults = defaults.filter_map(|(op, param)| self.page_size_default(op, param));
        let count = defaults.max().unwrap_or(0).min(1000) as usize + 3;
        let creates: Vec<&Op> = operations
            .iter()
            .filter(|op| op.method == Method::POST && op.body.is_some() && !op.path.contains('{'))
            .collect();
        let mut creates: Vec<_> = creates
            .into_iter()
            .map(|op| (op, self.references(op)))
            .collect();
        creates.sort_by_key(|(_, references)| references.len());
        for (create, references) in creates {
            let body = self.seed_body(create);
            let requests: Vec<Request> = (0..count)
                .map(|i| self.seed_request(create, body.as_ref(), &references, i))
                .collect();
            let sends = requests.iter().map(|request| self.send(create, request));
            let answers: Vec<_> = futures::stream::iter(sends)
                .buffer_unordered(16)
                .collect()
                .await;
            // A failing create shows as too few items to count, unless the
            // contract itself refuses every create the probe can make.
            let refused: BTreeSet<u16> = answers
                .iter()
                .flatten()
                .map(|a| a.status)
                .filter(|status| *status >= 300)
                .collect();
            let failed = answers.iter().any(Result::is_err);
            let created = answers.into_iter().flatten().filter(|a| a.status < 300);
            let items: Vec<Value> = created.filter_map(|a| a.json).collect();
            let declared = refused
                .iter()
                .all(|status| create.declared(*status).is_some());
            if items.is_empty() && !failed && declared {
                self.unfillable.insert(create.path.clone(), refused);
            }
            self.items.insert(create.path.clone(), items);
        }
    }

    /// The body properties of `op` that name an item of another collection
    /// (`petId` → a collection path ending in `/pets`), with that path.
    fn references(&self, op: &Op<'_>) -> Vec<(String, String)> {
        let Some((_, schema)) = &op.body else {
            return Vec::new();
        };
        let schema = self.yaml.resolve(schema);
        let properties = schema["properties"].as_object().into_iter().flatten();
        let operations = self.yaml.operations();
        let paths: BTreeSet<&str> = operations.values().map(|o| o.path.as_str()).collect();
        properties
            .filter_map(|(name, _)| {
                let plural = format!("/{}s", name.strip_suffix("Id")?);
                let path = paths.iter().find(|p| p.ends_with(&plural))?;
                Some((name.clone(), (*path).to_owned()))
            })
            .collect()
    }

    /// The `i`-th seeding request of `create`: `body`, with the `i`-th item
    /// of each collection it refers to.
    fn seed_request(
        &self,
        create: &Op<'_>,
        body: Option<&serde_json::Map<String, Value>>,
        references: &[(String, String)],
        i: usize,
    ) -> Request {
        let mut request = self.request(create, Key::Valid);
        let Some(body) = body else {
            return request;
        };
        let mut body = body.clone();
        for (name, path) in references {
            let item = self.items.get(path).and_then(|items| items.get(i));
            if let Some(id) = item.and_then(|item| item.get("id")) {
                body.insert(name.clone(), id.clone());
            }
        }
        request.body = Some(Value::Object(body).to_string());
        request
    }

    /// A valid body of `create` with the first value of each optional enum.
    fn seed_body(&self, create: &Op<'_>) -> Option<serde_json::Map<String, Value>> {
        let schema = self.yaml.resolve(&create.body.as_ref()?.1);
        let Value::Object(mut body) = valid(self.yaml, &schema, 0) else {
            return None;
        };
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            if let Some(first) = self.yaml.resolve(property)["enum"].get(0) {
                body.entry(name.clone()).or_insert_with(|| first.clone());
            }
        }
        Some(body)
    }

    /// The `default` of a query parameter's schema.
    fn default(&self, param: &Parameter) -> Option<Value> {
        let format = &param.parameter_data_ref().format;
        let schema = self.yaml.resolve(&self.yaml.format_json(format).1);
        schema
            .get("default")
            .filter(|_| canon::location(param) == "query")
            .cloned()
    }

    /// The default of `param` if it is a page size: an integer of at least
    /// 1, in the query of an operation answering an array.
    fn page_size_default(&self, op: &Op<'_>, param: &Parameter) -> Option<u64> {
        let array = op.success.is_some_and(|(_, array)| array);
        let page_size = self.minimum(param).is_some_and(|minimum| minimum >= 1.0);
        let default = self.default(param)?.as_u64()?;
        (array && page_size).then_some(default)
    }

    /// The `minimum` of a parameter's schema, if it has one.
    fn minimum(&self, param: &Parameter) -> Option<f64> {
        let format = &param.parameter_data_ref().format;
        let schema = self.yaml.resolve(&self.yaml.format_json(format).1);
        schema.get("minimum").and_then(Value::as_f64)
    }

    /// Each query default: an integer one of an operation answering an
    /// array must be the number of items answered with it omitted.
    async fn defaults(&mut self, op: &Op<'_>) {
        for param in &op.params {
            let Some(default) = self.default(param) else {
                continue;
            };
            let name = &param.parameter_data_ref().name;
            let location = format!("{}.parameters.{name}", op.location);
            // Only the list of the very collection a create operation adds
            // to can be filled (the feed of events has none, and a webhook's
            // deliveries are not created: their tests check their defaults).
            let collection = self.items.get(&op.path);
            let existing = collection.map_or(0, Vec::len);
            // A page size is at least 1 (`wait`'s 0 is no page size).
            let Some(default) = self
                .page_size_default(op, param)
                .filter(|_| collection.is_some() && !param.parameter_data_ref().required)
            else {
                let why = "only integer page sizes of list operations, with a create operation to fill them, can be";
                self.report.notes.push(format!(
                    "{location}: default {default} declared, not probed ({why})"
                ));
                continue;
            };
            if let Some(refused) = self.unfillable.get(&op.path) {
                let refused: Vec<String> = refused.iter().map(u16::to_string).collect();
                let why = format!(
                    "every create of {} was refused ({}), as the yaml allows",
                    op.path,
                    refused.join(", ")
                );
                self.report.notes.push(format!(
                    "{location}: default {default} declared, not probed ({why})"
                ));
                continue;
            }
            if existing as u64 <= default {
                let why =
                    format!("only {existing} items could be created (need more than {default})");
                self.differ(&location, format!("default: cannot be probed, {why}"));
                continue;
            }
            let answer = self.send(op, &self.request(op, Key::Valid)).await;
            let message = match answer.map(|a| (a.status, a.json)) {
                Ok((200..300, Some(Value::Array(items)))) if items.len() as u64 == default => {
                    continue;
                }
                Ok((200..300, Some(Value::Array(items)))) => {
                    let got = items.len();
                    format!(
                        "default: yaml {default}, server returned {got} items with {name} omitted ({existing} exist)"
                    )
                }
                Ok((status, _)) => {
                    format!("default: probe {name} omitted: server answered {status}")
                }
                Err(e) => format!(
                    "default: probe {name} omitted: the request failed: {}",
                    causes(e)
                ),
            };
            self.differ(&location, message);
        }
    }

    /// An operation the YAML leaves open answers without a key.
    async fn open(&mut self, op: &Op<'_>) {
        if op.secured {
            return;
        }
        let location = format!("{}.security", op.location);
        let request = self.request(op, Key::Missing);
        let what = "a request without credentials, which the yaml does not require";
        self.probe(op, &location, what, request, Expect::Not(401))
            .await;
    }

    /// A secured operation refuses a request without a key, and one with a
    /// key it does not know, with `401` (and the `401`'s headers).
    async fn refused(&mut self, op: &Op<'_>) {
        if !op.secured {
            return;
        }
        let location = format!("{}.security", op.location);
        for (key, what) in [
            (Key::Missing, "a request without credentials"),
            (Key::Unknown, "a request with an unknown key"),
        ] {
            let request = self.request(op, key);
            self.probe(op, &location, what, request, Expect::Error(401))
                .await;
        }
    }

    /// A valid request, judged by what it is answered: its body (for an
    /// error) and its headers must be the declared ones for that status.
    async fn answered(&mut self, op: &Op<'_>) {
        let location = format!("{}.responses", op.location);
        let what = "a valid request";
        let answer = match self.send(op, &self.request(op, Key::Valid)).await {
            Ok(answer) => answer,
            Err(e) => {
                return self.differ(
                    &location,
                    format!("probe {what}: the request failed: {}", causes(e)),
                );
            }
        };
        let expect = match answer.status {
            200..300 => Expect::Success,
            status => Expect::Error(status),
        };
        self.judge(op, &location, what, &answer, expect);
    }

    /// A 1 MiB body gets 413; `null` for an optional property is refused
    /// unless the YAML says it is nullable.
    async fn body(&mut self, op: &Op<'_>) {
        let Some((_, schema)) = &op.body else { return };
        let location = format!("{}.requestBody", op.location);
        let mut request = self.request(op, Key::Valid);
        request.body = Some(json!({ "zzPadding": "a".repeat(OVERSIZED_BODY) }).to_string());
        self.probe(op, &location, "a 1 MiB body", request, Expect::Error(413))
            .await;
        let schema = self.yaml.resolve(schema);
        let Value::Object(valid_body) = valid(self.yaml, &schema, 0) else {
            return;
        };
        let properties = schema["properties"].as_object().into_iter().flatten();
        for (name, property) in properties.filter(|(name, _)| !valid_body.contains_key(*name)) {
            let mut request = self.request(op, Key::Valid);
            let mut body = valid_body.clone();
            body.insert(name.clone(), Value::Null);
            request.body = Some(Value::Object(body).to_string());
            let (expect, allows) = match self.yaml.resolve(property)["nullable"] == true {
                true => (Expect::Success, "allows (nullable)"),
                false => (Expect::Error(400), "does not allow"),
            };
            let what = format!("a body with {name} = null, which the yaml {allows}");
            self.probe(op, &location, &what, request, expect).await;
        }
    }

    /// With the database file deleted, a valid request gets 503 — unless
    /// the operation did not need the database (reads, and refusals, may be
    /// decided from memory), which is noted. Some operation must show the
    /// 503.
    async fn unavailable(&mut self, operations: &[Op<'_>]) {
        let mut provoked = false;
        for op in operations {
            let location = format!("{}.responses", op.location);
            let what = "a valid request while the database is broken";
            let answer = match self.send(op, &self.request(op, Key::Valid)).await {
                Ok(answer) => answer,
                Err(e) => {
                    return self.differ(
                        &location,
                        format!("probe {what}: the request failed: {}", causes(e)),
                    );
                }
            };
            if op.success.is_some_and(|(code, _)| code == answer.status) {
                self.tried
                    .entry(op.location.clone())
                    .or_default()
                    .insert(503);
                let note = "declared, not provoked (the operation succeeded without the database)";
                self.report.notes.push(format!("{location}.503: {note}"));
                continue;
            }
            // A refusal the server could decide from memory (no such item,
            // a conflict) is as right without the database as with it.
            if answer.status < 500 && op.declared(answer.status).is_some() {
                let status = answer.status;
                self.judge(op, &location, what, &answer, Expect::Error(status));
                let note =
                    format!("declared, not provoked (answered {status} without the database)");
                self.report.notes.push(format!("{location}.503: {note}"));
                continue;
            }
            provoked |= answer.status == 503;
            self.judge(op, &location, what, &answer, Expect::Error(503));
        }
        if !provoked && operations.iter().any(|op| op.declared(503).is_some()) {
            let message = "probe with the database broken: no operation answered 503, which the yaml declares";
            self.differ("paths", message.into());
        }
    }

    /// Notes each declared error status that no probe made the operation
    /// answer (400, 401, 404 and the like are schemathesis's; the others
    /// cannot be provoked from outside the server).
    fn untried(&mut self, op: &Op<'_>) {
        let tried = self.tried.remove(&op.location).unwrap_or_default();
        for (key, _) in &op.errors {
            if !tried.iter().any(|status| covers(key, *status)) {
                let location = &op.location;
                self.report.notes.push(format!(
                    "{location}.responses.{key}: declared, not probed here"
                ));
            }
        }
    }
}

/// A value the (canonical) schema accepts: its first enum value, else the
/// smallest allowed from 1 up, `a` repeated to `minLength`, `true`, an
/// empty array, or an object with its required properties.
fn valid(side: &Side<'_>, schema: &Value, depth: usize) -> Value {
    let schema = side.resolve(schema);
    if let Some(first) = schema["enum"].get(0) {
        return first.clone();
    }
    let bound = |key: &str, default: i64| schema[key].as_i64().unwrap_or(default);
    match schema["type"].as_str() {
        Some("integer" | "number") => {
            json!(bound("minimum", 1).max(1).min(bound("maximum", i64::MAX)))
        }
        Some("string") => json!("a".repeat(bound("minLength", 1).max(1) as usize)),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("object") if depth < 16 => {
            let names = schema
                .as_object()
                .map(canon::required_names)
                .unwrap_or_default();
            let values = names.into_iter().map(|name| {
                let value = valid(side, &schema["properties"][&name], depth + 1);
                (name, value)
            });
            Value::Object(values.collect())
        }
        _ => Value::Null,
    }
}

/// The schema of a content map's JSON-like media type.
fn json_schema(content: &openapiv3::Content) -> Option<&ReferenceOr<openapiv3::Schema>> {
    let (_, media) = content.iter().find(|(media, _)| media.contains("json"))?;
    media.schema.as_ref()
}

/// A value as it is written in a path or a query string.
fn text(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// A failed request's error with every cause under it (reqwest's own text
/// names only the outermost: "error sending request").
fn causes(error: reqwest::Error) -> String {
    format!("{:#}", anyhow::Error::new(error))
}
