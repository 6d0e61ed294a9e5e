//! The probing half: what the emitted document cannot say — query
//! defaults, security, each error status, the error body — checked against
//! a real server, with every expectation read from the YAML.
//!
//! One server is started for the run. The probes, in order:
//!
//! 1. seed: items are created through the YAML's create operation (a POST
//!    with a body on a path without parameters), more than any integer
//!    query default, so a list operation's default page size can be seen;
//! 2. defaults: each integer query parameter with a `default` on an
//!    operation returning an array is omitted, and the array must hold
//!    exactly `default` items;
//! 3. per operation: a valid request gets the declared success status, its
//!    required headers and a body valid against the YAML's schema; a
//!    secured operation answers 401 without a key and with a wrong one, an
//!    open one (`security: []`) does not ask for a key; a path parameter
//!    naming nothing gets 404; each value breaking one rule of a parameter
//!    or body schema gets 400 and each value at the edge of a rule is
//!    accepted; an oversized body gets 413;
//! 4. the database is broken under the server and each operation must
//!    answer 503.
//!
//! Every error answer must be declared for its operation and carry a body
//! valid against the YAML's schema for that status, whose `status` (when it
//! has one) is the HTTP status. A declared status that no probe can provoke
//! (500) is reported as an informational line, not a failure.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::canon::Side;
use super::{Difference, Report};

mod plan;
mod server;
mod validate;
mod values;

use plan::{ProbeOp, Scheme, json_schema};
use server::{Answer, Credentials, Harness, Request};
use values::{Case, Flavor, as_text};

/// The size of the body sent to provoke 413: far above any sensible limit
/// (the YAML states 16384 bytes) yet quick to send.
const OVERSIZED_BODY: usize = 1 << 20;

/// Extra items seeded beyond the largest default page size.
const SEED_MARGIN: u64 = 3;

/// Runs every probe against a server started for the purpose; differences
/// and notes go to `report`.
pub async fn run(yaml: &Side<'_>, prefix: &str, report: &mut Report) -> anyhow::Result<()> {
    let operations = plan::operations(yaml);
    let harness = Harness::start(prefix).await?;
    let mut prober = Prober {
        yaml,
        harness,
        items: Vec::new(),
        ledgers: BTreeMap::new(),
        reported: BTreeSet::new(),
        differences: Vec::new(),
        notes: Vec::new(),
        provoked_unavailable: false,
    };
    let outcome = prober.all(&operations).await;
    report.requests += prober.harness.sent();
    report.differences.append(&mut prober.differences);
    report.notes.append(&mut prober.notes);
    prober.harness.stop().await;
    outcome
}

/// The error statuses tried and seen for one operation.
#[derive(Default)]
struct Ledger {
    attempted: BTreeSet<u16>,
    observed: BTreeSet<u16>,
}

struct Prober<'a> {
    yaml: &'a Side<'a>,
    harness: Harness,
    /// Items created while seeding, for path parameters that must exist.
    items: Vec<Value>,
    ledgers: BTreeMap<String, Ledger>,
    /// Body problems already reported, per operation and status, so that
    /// one wrong schema is not reported once per probe or array item.
    reported: BTreeSet<String>,
    differences: Vec<Difference>,
    notes: Vec<String>,
    /// Whether some operation answered 503 with the database broken.
    provoked_unavailable: bool,
}

impl Prober<'_> {
    async fn all(&mut self, operations: &[ProbeOp]) -> anyhow::Result<()> {
        let create = operations.iter().find(|op| {
            op.method == reqwest::Method::POST && op.body.is_some() && !op.path.contains('{')
        });
        self.seed(operations, create).await;
        self.defaults(operations, create.is_some()).await;
        for op in operations {
            self.success(op).await;
            self.security(op).await;
            self.not_found(op).await;
            self.parameters(op).await;
            self.body(op).await;
            self.too_large(op).await;
        }
        self.harness.break_database()?;
        for op in operations {
            self.unavailable(op).await;
        }
        let declares_503 = operations.iter().any(|op| op.declared_error(503).is_some());
        if declares_503 && !self.provoked_unavailable {
            self.differ(
                "paths",
                "probe with the database broken: no operation answered 503, which the yaml declares"
                    .to_owned(),
            );
        }
        for op in operations {
            self.unprobed(op);
        }
        Ok(())
    }

    /// With the database broken, a valid request gets 503 — unless the
    /// operation did not need the database (the server may serve reads from
    /// memory); then its success is noted, not failed. At least one
    /// operation must show the 503, so the status is still seen.
    async fn unavailable(&mut self, op: &ProbeOp) {
        let request = self.valid_request(op, Credentials::Valid);
        let location = format!("{}.responses", op.location);
        let what = "a valid request while the database is broken";
        let success = op.success.as_ref().map(|(code, _)| *code);
        let Some(answer) = self.send(op, &location, what, &request).await else {
            return;
        };
        if success == Some(answer.status) {
            self.ledger(op).attempted.insert(503);
            self.notes.push(format!(
                "{location}.503: declared, not provoked (the operation succeeded without the database)"
            ));
            return;
        }
        self.expect_error(op, &location, what, request, 503).await;
        self.provoked_unavailable = true;
    }

    fn differ(&mut self, location: &str, message: String) {
        self.differences.push(Difference::new(location, message));
    }

    fn ledger(&mut self, op: &ProbeOp) -> &mut Ledger {
        self.ledgers.entry(op.location.clone()).or_default()
    }

    async fn send(
        &mut self,
        op: &ProbeOp,
        location: &str,
        what: &str,
        request: &Request,
    ) -> Option<Answer> {
        match self.harness.send(request, &op.scheme).await {
            Ok(answer) => Some(answer),
            Err(e) => {
                self.differ(location, format!("probe {what}: the request failed: {e:#}"));
                None
            }
        }
    }

    /// Creates items through `create`, more than any integer query default.
    async fn seed(&mut self, operations: &[ProbeOp], create: Option<&ProbeOp>) {
        let Some(create) = create else { return };
        let largest_default = operations
            .iter()
            .flat_map(|op| &op.params)
            .filter_map(|p| self.yaml.resolve(&p.schema).get("default")?.as_u64())
            .max()
            .unwrap_or(0);
        let count = largest_default.min(1000) + SEED_MARGIN;
        let request = self.valid_request(create, Credentials::Valid);
        for chunk in (0..count).collect::<Vec<_>>().chunks(16) {
            let sends = chunk
                .iter()
                .map(|_| self.harness.send(&request, &create.scheme));
            for answer in futures::future::join_all(sends).await.into_iter().flatten() {
                // A failing create is reported by the create's own success
                // probe; here only the items matter.
                if (200..300).contains(&answer.status)
                    && let Some(item) = answer.json.filter(Value::is_object)
                {
                    self.items.push(item);
                }
            }
        }
    }

    /// Each query default: integer page sizes of list operations are
    /// checked by counting; any other default is noted as not probed.
    async fn defaults(&mut self, operations: &[ProbeOp], seeded: bool) {
        for op in operations {
            for param in op.params.iter().filter(|p| p.location == "query") {
                let schema = self.yaml.resolve(&param.schema);
                let Some(default) = schema.get("default") else {
                    continue;
                };
                let location = format!("{}.parameters.{}", op.location, param.name);
                let returns_array = op
                    .success_schema()
                    .is_some_and(|s| values::type_of(&self.yaml.resolve(s)) == Some("array"));
                let integer = values::type_of(&schema) == Some("integer");
                match default.as_u64() {
                    Some(default) if integer && returns_array && seeded && !param.required => {
                        self.default_page_size(op, &location, &param.name, default).await;
                    }
                    _ => self.notes.push(format!(
                        "{location}: default {default} declared, not probed (only integer page sizes of \
                         list operations, with a create operation to fill them, can be)"
                    )),
                }
            }
        }
    }

    async fn default_page_size(&mut self, op: &ProbeOp, location: &str, name: &str, default: u64) {
        let existing = self.items.len();
        if (existing as u64) <= default {
            self.differ(
                location,
                format!("default: cannot be probed, only {existing} items could be created (need more than {default})"),
            );
            return;
        }
        let request = self.valid_request(op, Credentials::Valid);
        let what = format!("{name} omitted");
        let Some(answer) = self.send(op, location, &what, &request).await else {
            return;
        };
        match answer.json.as_ref().and_then(Value::as_array) {
            Some(items) if (200..300).contains(&answer.status) => {
                if items.len() as u64 != default {
                    self.differ(
                        location,
                        format!(
                            "default: yaml {default}, server returned {} items with {name} omitted ({existing} exist)",
                            items.len()
                        ),
                    );
                }
            }
            _ => self.differ(
                location,
                format!(
                    "default: probe {what}: server answered {}{}",
                    answer.status,
                    answer.detail()
                ),
            ),
        }
    }

    /// A valid request gets the declared success status, headers and body.
    async fn success(&mut self, op: &ProbeOp) {
        let Some((code, response)) = op.success.clone() else {
            self.notes.push(format!(
                "{}.responses: no 2xx response declared, success not probed",
                op.location
            ));
            return;
        };
        let location = format!("{}.responses.{code}", op.location);
        let request = self.valid_request(op, Credentials::Valid);
        let Some(answer) = self.send(op, &location, "a valid request", &request).await else {
            return;
        };
        if answer.status != code {
            self.differ(
                &location,
                format!(
                    "probe a valid request: yaml expects {code}, server answered {}{}",
                    answer.status,
                    answer.detail()
                ),
            );
            return;
        }
        let headers = response["headers"].as_object().cloned().unwrap_or_default();
        for (name, header) in headers {
            if header["required"] == json!(true) && !answer.headers.contains_key(name.as_str()) {
                self.differ(
                    &location,
                    format!(
                        "headers.{name}: required by the yaml, missing from the server's answer"
                    ),
                );
            }
        }
        self.body_matches(op, &location, "a valid request", &response, &answer);
    }

    /// Secured operations answer 401 without a key and with a wrong one;
    /// open ones answer without a key.
    async fn security(&mut self, op: &ProbeOp) {
        let location = format!("{}.security", op.location);
        if !op.secured {
            let request = self.valid_request(op, Credentials::Missing);
            let Some(answer) = self
                .send(op, &location, "without credentials", &request)
                .await
            else {
                return;
            };
            if answer.status == 401 {
                self.differ(
                    &location,
                    "the yaml requires no credentials, but the server answered 401 to a request without them".into(),
                );
            }
            return;
        }
        if let Scheme::Unsupported(scheme) = &op.scheme {
            self.notes.push(format!(
                "{location}: scheme {scheme} cannot be spoken by the probes"
            ));
            return;
        }
        for (credentials, what) in [
            (Credentials::Missing, "a request without credentials"),
            (Credentials::Wrong, "a request with a wrong key"),
        ] {
            let request = self.valid_request(op, credentials);
            self.expect_error(op, &location, what, request, 401).await;
        }
    }

    /// A path parameter naming no item gets 404.
    async fn not_found(&mut self, op: &ProbeOp) {
        for param in op.params.iter().filter(|p| p.location == "path") {
            let schema = self.yaml.resolve(&param.schema);
            let value = match values::type_of(&schema) {
                Some("integer") => match values::int_bounds(&schema).1 {
                    Some((highest, _)) => json!(highest.to_string()),
                    None => json!("9007199254740991"),
                },
                Some("string") => json!("zz-no-such-item"),
                _ => continue,
            };
            if self.items.iter().any(|item| {
                item.as_object()
                    .is_some_and(|o| o.values().any(|v| as_text(v) == as_text(&value)))
            }) {
                continue;
            }
            let mut request = self.valid_request(op, Credentials::Valid);
            request.path = fill_path(&op.path, &[(param.name.as_str(), &value)], &request.path);
            let location = format!("{}.parameters.{}", op.location, param.name);
            let what = format!("{}={} (names no item)", param.name, as_text(&value));
            self.expect_error(op, &location, &what, request, 404).await;
        }
    }

    /// Each parameter: values breaking its schema get 400, values at its
    /// edges are accepted, a missing required one gets 400.
    async fn parameters(&mut self, op: &ProbeOp) {
        for param in &op.params {
            if param.location == "cookie" {
                self.notes.push(format!(
                    "{}.parameters.{}: cookie parameters are not probed",
                    op.location, param.name
                ));
                continue;
            }
            let location = format!("{}.parameters.{}", op.location, param.name);
            let flavor = if param.location == "header" {
                Flavor::Header
            } else {
                Flavor::Text
            };
            let cases = [
                (values::violations(self.yaml, &param.schema, flavor), true),
                (values::boundaries(self.yaml, &param.schema, flavor), false),
            ];
            for (cases, invalid) in cases {
                for Case { what, value } in cases {
                    let mut request = self.valid_request(op, Credentials::Valid);
                    set_param(&mut request, op, &param.name, param.location, Some(&value));
                    let what = format!("{}={} ({what})", param.name, show_text(&value));
                    if invalid {
                        self.expect_error(op, &location, &what, request, 400).await;
                    } else {
                        self.expect_accepted(op, &location, &what, request).await;
                    }
                }
            }
            if param.required && param.location != "path" {
                let mut request = self.valid_request(op, Credentials::Valid);
                set_param(&mut request, op, &param.name, param.location, None);
                let what = format!("without the required {}", param.name);
                self.expect_error(op, &location, &what, request, 400).await;
            }
        }
    }

    /// The request body: not JSON, missing, missing a required property,
    /// with an undeclared property, or with a property breaking its schema
    /// gets 400; a property at the edge of its schema is accepted.
    async fn body(&mut self, op: &ProbeOp) {
        let Some(body) = &op.body else { return };
        let location = format!("{}.requestBody", op.location);
        let schema = self.yaml.resolve(&body.schema);
        let base = values::valid(self.yaml, &schema);
        let mut invalid: Vec<(String, Option<Vec<u8>>)> =
            vec![("a body that is not JSON".into(), Some(b"{\"".to_vec()))];
        if body.required {
            invalid.push(("no body, which the yaml requires".into(), None));
        }
        let mut accepted = Vec::new();
        let with = |name: &str, value: Option<&Value>| {
            let mut object = base.as_object().cloned().unwrap_or_default();
            match value {
                Some(value) => object.insert(name.to_owned(), value.clone()),
                None => object.remove(name),
            };
            Some(Value::Object(object).to_string().into_bytes())
        };
        if values::type_of(&schema) == Some("object") {
            for name in values::required(&schema) {
                invalid.push((
                    format!("a body without the required {name}"),
                    with(&name, None),
                ));
            }
            if schema.get("additionalProperties") == Some(&json!(false)) {
                invalid.push((
                    "a body with an undeclared property".into(),
                    with("zzUndeclared", Some(&json!(1))),
                ));
            }
            let properties = schema
                .get("properties")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            for (name, property) in &properties {
                for Case { what, value } in values::violations(self.yaml, property, Flavor::Json) {
                    invalid.push((
                        format!("a body with {name} = {} ({what})", show_json(&value)),
                        with(name, Some(&value)),
                    ));
                }
                for Case { what, value } in values::boundaries(self.yaml, property, Flavor::Json) {
                    accepted.push((
                        format!("a body with {name} = {} ({what})", show_json(&value)),
                        with(name, Some(&value)),
                    ));
                }
            }
        } else {
            for Case { what, value } in values::violations(self.yaml, &schema, Flavor::Json) {
                invalid.push((
                    format!("a body of {} ({what})", show_json(&value)),
                    Some(value.to_string().into_bytes()),
                ));
            }
        }
        for (what, bytes) in invalid {
            let mut request = self.valid_request(op, Credentials::Valid);
            request.body = bytes.map(|bytes| (body.media_type.clone(), bytes));
            self.expect_error(op, &location, &what, request, 400).await;
        }
        for (what, bytes) in accepted {
            let mut request = self.valid_request(op, Credentials::Valid);
            request.body = bytes.map(|bytes| (body.media_type.clone(), bytes));
            self.expect_accepted(op, &location, &what, request).await;
        }
    }

    /// A body far larger than any limit gets 413.
    async fn too_large(&mut self, op: &ProbeOp) {
        let Some(body) = &op.body else { return };
        let padding = "a".repeat(OVERSIZED_BODY);
        let mut request = self.valid_request(op, Credentials::Valid);
        request.body = Some((
            body.media_type.clone(),
            json!({ "zzPadding": padding }).to_string().into_bytes(),
        ));
        let location = format!("{}.requestBody", op.location);
        self.expect_error(op, &location, "a 1 MiB body", request, 413)
            .await;
    }

    /// Notes each declared error status that no probe tried.
    fn unprobed(&mut self, op: &ProbeOp) {
        let ledger = self.ledgers.remove(&op.location).unwrap_or_default();
        for (key, _) in &op.errors {
            let tried = ledger
                .attempted
                .iter()
                .chain(&ledger.observed)
                .any(|status| super::canon::covers(key, *status));
            if !tried {
                self.notes.push(format!(
                    "{}.responses.{key}: declared, not probed (no probe can provoke it from outside the server)",
                    op.location
                ));
            }
        }
    }

    /// Sends a request that should get the error `expected`, and judges the
    /// answer: the status, that the YAML declares it, the error body.
    async fn expect_error(
        &mut self,
        op: &ProbeOp,
        location: &str,
        what: &str,
        request: Request,
        expected: u16,
    ) {
        self.ledger(op).attempted.insert(expected);
        let Some(answer) = self.send(op, location, what, &request).await else {
            return;
        };
        if answer.status >= 400 {
            self.ledger(op).observed.insert(answer.status);
        }
        if answer.status != expected {
            self.differ(
                location,
                format!(
                    "probe {what}: yaml expects {expected}, server answered {}{}",
                    answer.status,
                    answer.detail()
                ),
            );
            return;
        }
        match op.declared_error(expected) {
            Some(response) => {
                let response = response.clone();
                self.error_body(op, location, what, &response, &answer);
            }
            None => self.differ(
                location,
                format!(
                    "probe {what}: server answered {expected}, which the yaml does not declare for {}",
                    op.name
                ),
            ),
        }
    }

    /// Sends a request whose values the YAML allows: anything but a
    /// rejection (400, 401, 5xx) is fine — a 404 for an edge identifier too.
    async fn expect_accepted(
        &mut self,
        op: &ProbeOp,
        location: &str,
        what: &str,
        request: Request,
    ) {
        let Some(answer) = self.send(op, location, what, &request).await else {
            return;
        };
        if !((200..300).contains(&answer.status) || answer.status == 404) {
            self.differ(
                location,
                format!(
                    "probe {what}: the yaml allows it, server answered {}{}",
                    answer.status,
                    answer.detail()
                ),
            );
        }
    }

    /// An error answer: JSON of a declared media type, valid against the
    /// YAML's schema, its `status` field equal to the HTTP status.
    fn error_body(
        &mut self,
        op: &ProbeOp,
        location: &str,
        what: &str,
        response: &Value,
        answer: &Answer,
    ) {
        self.body_matches(op, location, what, response, answer);
        let schema = json_schema(response).map(|s| self.yaml.resolve(s));
        let has_status = schema
            .as_ref()
            .is_some_and(|s| s["properties"].get("status").is_some());
        if let Some(body) = &answer.json
            && has_status
            && body.get("status") != Some(&json!(answer.status))
        {
            self.differ(
                location,
                format!(
                    "probe {what}: the error body's status is {}, the HTTP status {}",
                    body["status"], answer.status
                ),
            );
        }
    }

    /// The answer's media type is declared and its body fits the schema.
    fn body_matches(
        &mut self,
        op: &ProbeOp,
        location: &str,
        what: &str,
        response: &Value,
        answer: &Answer,
    ) {
        let content = response["content"].as_object().cloned().unwrap_or_default();
        if content.is_empty() {
            return;
        }
        let media_type = answer.media_type.clone().unwrap_or_default();
        if !content.contains_key(&media_type) {
            let declared: Vec<&String> = content.keys().collect();
            self.differ(
                location,
                format!("probe {what}: server answered with content type {media_type:?}, yaml declares {declared:?}"),
            );
            return;
        }
        let Some(schema) = content[&media_type].get("schema").filter(|s| !s.is_null()) else {
            return;
        };
        let Some(body) = &answer.json else {
            self.differ(location, format!("probe {what}: the body is not JSON"));
            return;
        };
        for problem in validate::problems(self.yaml, schema, body) {
            let problem = any_index(&problem);
            if self
                .reported
                .insert(format!("{} {} {problem}", op.location, answer.status))
            {
                self.differ(
                    location,
                    format!("probe {what}: {problem} (server sent {})", show_json(body)),
                );
            }
        }
    }

    /// A request the YAML says is valid: path parameters naming a seeded
    /// item when one has a field of that name (or `id`), required query and
    /// header parameters, a valid body.
    fn valid_request(&self, op: &ProbeOp, credentials: Credentials) -> Request {
        let mut request = Request {
            method: op.method.clone(),
            path: op.path.clone(),
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
            credentials,
        };
        let mut path_values = Vec::new();
        for param in &op.params {
            let value = if param.location == "path" {
                self.existing(&param.name)
                    .unwrap_or_else(|| values::valid(self.yaml, &param.schema))
            } else if param.required {
                values::valid(self.yaml, &param.schema)
            } else {
                continue;
            };
            match param.location {
                "path" => path_values.push((param.name.as_str(), value)),
                "query" => request.query.push((param.name.clone(), as_text(&value))),
                "header" => request.headers.push((param.name.clone(), as_text(&value))),
                _ => {}
            }
        }
        let refs: Vec<(&str, &Value)> = path_values.iter().map(|(n, v)| (*n, v)).collect();
        request.path = fill_path(&op.path, &refs, &op.path);
        if let Some(body) = &op.body {
            let value = values::valid(self.yaml, &body.schema);
            request.body = Some((body.media_type.clone(), value.to_string().into_bytes()));
        }
        request
    }

    /// The value of field `name` (or `id`) of the first seeded item.
    fn existing(&self, name: &str) -> Option<Value> {
        let item = self.items.first()?;
        item.get(name).or_else(|| item.get("id")).cloned()
    }
}

/// Sets (or, with `None`, removes) one parameter of a request.
fn set_param(
    request: &mut Request,
    op: &ProbeOp,
    name: &str,
    location: &str,
    value: Option<&Value>,
) {
    match location {
        "path" => {
            if let Some(value) = value {
                request.path = fill_path(&op.path, &[(name, value)], &request.path);
            }
        }
        "query" | "header" => {
            let list = if location == "query" {
                &mut request.query
            } else {
                &mut request.headers
            };
            list.retain(|(n, _)| n != name);
            if let Some(value) = value {
                list.push((name.to_owned(), as_text(value)));
            }
        }
        _ => {}
    }
}

/// `template` with `values` put in for its `{name}`s; the other segments
/// are taken from `current` (a path already filled in).
fn fill_path(template: &str, values: &[(&str, &Value)], current: &str) -> String {
    let current: Vec<&str> = current.split('/').collect();
    template
        .split('/')
        .enumerate()
        .map(|(index, segment)| {
            let name = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}'));
            match name.and_then(|name| values.iter().find(|(n, _)| *n == name)) {
                Some((_, value)) => encode_segment(&as_text(value)),
                None => current.get(index).copied().unwrap_or(segment).to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Percent-encodes a path segment (RFC 3986 unreserved characters stay).
fn encode_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `body[3].name: ...` as `body[*].name: ...`: the same problem in every
/// item of an array is one problem.
fn any_index(problem: &str) -> String {
    let mut out = String::with_capacity(problem.len());
    let mut rest = problem;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && rest[digits..].starts_with(']') {
            out.push('*');
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// A JSON value for a report line, long strings shortened.
fn show_json(value: &Value) -> String {
    super::diff::show(Some(value))
}

/// A text value for a report line, long ones shortened.
fn show_text(value: &Value) -> String {
    let text = as_text(value);
    if text.chars().count() > 40 {
        format!(
            "{}…({} characters)",
            text.chars().take(20).collect::<String>(),
            text.chars().count()
        )
    } else {
        format!("{text:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_indices_are_generalised() {
        assert_eq!(any_index("body[12].name: x"), "body[*].name: x");
        assert_eq!(any_index("body[*]: [1, 2]"), "body[*]: [1, 2]");
    }

    #[test]
    fn paths_are_filled_and_encoded() {
        let id = json!(42);
        let odd = json!("a b/c");
        assert_eq!(
            fill_path("/pets/{petId}", &[("petId", &id)], "/pets/{petId}"),
            "/pets/42"
        );
        assert_eq!(
            fill_path("/pets/{petId}", &[("petId", &odd)], "/pets/1"),
            "/pets/a%20b%2Fc"
        );
    }
}
