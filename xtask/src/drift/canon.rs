//! Normalisation: one side's document (the YAML or the emitted one) turned
//! into canonical JSON that says only what the interface means.
//!
//! What normalisation removes, because it is representation only:
//!
//! - descriptions, summaries, titles, examples, `x-` extensions;
//! - key order (the trees are compared by key) and YAML style (both sides
//!   are parsed with `openapiv3` and re-serialised as JSON);
//! - the order of `required` and `enum` (sorted);
//! - defaults that are spelt out (`nullable: false`, `additionalProperties:
//!   true`, a query parameter's `style: form`...);
//! - a single-element `allOf` wrapper around a schema (how schemars writes an
//!   optional field with a description), and the `nullable` on such a
//!   wrapper of an optional property (schemars' `Option<T>`; whether `null`
//!   is really accepted is probed instead);
//! - the path prefix that the YAML puts in its `servers` URLs;
//! - the response headers the server sets on every response outside the
//!   API trait ([`SERVER_WIDE_HEADERS`]), which no handler's response type
//!   declares; the probes ask a real server for them instead;
//! - references to parameters, request bodies, responses and headers
//!   (resolved here). References to component schemas are kept as
//!   `{"$ref": "Name"}` and resolved lazily by the differ, so that a change
//!   in a shared schema is reported once, where it is defined.

use std::collections::BTreeMap;

use openapiv3::{
    Components, Content, Header, OpenAPI, Operation, Parameter, ParameterSchemaOrContent,
    QueryStyle, ReferenceOr, RequestBody, Response, Schema, StatusCode,
};
use serde_json::{Map, Value, json};

use super::Difference;

/// Schema keys that carry no meaning for a client or a server.
const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "example",
    "examples",
    "externalDocs",
];

/// Schema keys whose spelt-out value is the default, so absent and present
/// mean the same.
const DEFAULTS: &[(&str, Value)] = &[
    ("nullable", Value::Bool(false)),
    ("readOnly", Value::Bool(false)),
    ("writeOnly", Value::Bool(false)),
    ("deprecated", Value::Bool(false)),
    ("uniqueItems", Value::Bool(false)),
    ("exclusiveMinimum", Value::Bool(false)),
    ("exclusiveMaximum", Value::Bool(false)),
    ("additionalProperties", Value::Bool(true)),
];

/// Response headers the server sets on every response it answers, outside
/// the API trait (the rate limiter writes them, whatever the operation
/// answers), so the emitted document never declares them. They are left
/// out of both sides' responses here; `probe` checks every declared header
/// on the answers it gets.
pub const SERVER_WIDE_HEADERS: &[&str] = &["ratelimit-policy", "ratelimit"];

/// How far a chain of references is followed before giving up.
const MAX_REF_CHAIN: usize = 16;

/// One side of the comparison: a parsed document and its canonical
/// component schemas.
pub struct Side<'a> {
    /// The parsed document.
    pub api: &'a OpenAPI,
    /// The path prefix the document's paths carry and the YAML's do not.
    prefix: String,
    /// Every component schema, canonical, by name.
    pub schemas: BTreeMap<String, Value>,
    /// How schemas are normalised.
    mode: Mode,
}

/// What normalisation is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Comparing with the emitted document: the `nullable` of an optional
    /// property's `allOf` wrapper is dropped (schemars' `Option<T>`).
    Compare,
    /// Probing, and comparing two YAMLs: every `nullable` is kept, so that
    /// the probes learn where the YAML allows `null` (and ask the server),
    /// and the compatibility gate sees it change.
    Probe,
}

/// An operation of a document, with its path-level parameters merged in.
pub struct Op<'a> {
    /// The path as the YAML writes it (without the servers' prefix).
    pub path: String,
    /// `get`, `post`, ...
    pub method: &'static str,
    /// The operation itself.
    pub operation: &'a Operation,
    /// Its parameters, resolved, path-level ones included.
    pub parameters: Vec<&'a Parameter>,
}

impl Op<'_> {
    /// `paths./pets.get`: where the operation is in the YAML.
    pub fn location(&self) -> String {
        format!("paths.{}.{}", self.path, self.method)
    }
}

impl<'a> Side<'a> {
    /// A side whose paths carry `prefix` before the YAML's paths.
    pub fn new(api: &'a OpenAPI, prefix: &str, mode: Mode) -> Side<'a> {
        let schemas = api
            .components
            .iter()
            .flat_map(|components| &components.schemas)
            .map(|(name, schema)| (name.clone(), normalise_schema(to_json(schema), mode)))
            .collect();
        Side {
            api,
            prefix: prefix.to_owned(),
            schemas,
            mode,
        }
    }

    /// The canonical form of `schema` (component references kept).
    pub fn schema(&self, schema: &ReferenceOr<Schema>) -> Value {
        normalise_schema(to_json(schema), self.mode)
    }

    /// `schema` with every top-level component reference replaced by the
    /// component (siblings of the reference laid over it). Nested
    /// references stay; unknown ones are left as they are.
    pub fn resolve(&self, schema: &Value) -> Value {
        let mut current = schema.clone();
        for _ in 0..MAX_REF_CHAIN {
            match self.expand(&current) {
                Some(expanded) => current = expanded,
                None => break,
            }
        }
        current
    }

    /// One step of [`Side::resolve`]: `None` unless `schema` is a reference
    /// to a component this side has.
    pub fn expand(&self, schema: &Value) -> Option<Value> {
        let name = ref_name(schema)?;
        let mut target = self.schemas.get(name)?.clone();
        let siblings = schema.as_object()?.iter().filter(|(key, _)| *key != "$ref");
        if let Value::Object(target) = &mut target {
            for (key, value) in siblings {
                target.insert(key.clone(), value.clone());
            }
        }
        Some(target)
    }

    /// Every operation, keyed by (path without prefix, method).
    pub fn operations(&self) -> BTreeMap<(String, &'static str), Op<'a>> {
        let mut operations = BTreeMap::new();
        for (path, item) in &self.api.paths.paths {
            let Some(item) = item.as_item() else { continue };
            let shared: Vec<&Parameter> = item
                .parameters
                .iter()
                .filter_map(|p| self.parameter(p))
                .collect();
            let path = path
                .strip_prefix(self.prefix.as_str())
                .filter(|rest| rest.starts_with('/'))
                .unwrap_or(path);
            for (method, operation) in item.iter() {
                let own: Vec<&Parameter> = operation
                    .parameters
                    .iter()
                    .filter_map(|p| self.parameter(p))
                    .collect();
                // An operation's parameter overrides a path-level one of the
                // same name and location.
                let key = |p: &&Parameter| (location(p), p.parameter_data_ref().name.clone());
                let mut parameters: Vec<&Parameter> = shared
                    .iter()
                    .filter(|s| !own.iter().any(|o| key(o) == key(s)))
                    .copied()
                    .collect();
                parameters.extend(own);
                let method = static_method(method);
                operations.insert(
                    (path.to_owned(), method),
                    Op {
                        path: path.to_owned(),
                        method,
                        operation,
                        parameters,
                    },
                );
            }
        }
        operations
    }

    /// The canonical operation, error responses excepted (they are compared
    /// separately, because the server writes them as `4XX`/`5XX`).
    pub fn operation(&self, op: &Op<'_>) -> Value {
        let operation = op.operation;
        let mut tags = operation.tags.clone();
        tags.sort();
        let parameters: Map<String, Value> = op
            .parameters
            .iter()
            .map(|p| (p.parameter_data_ref().name.clone(), self.parameter_json(p)))
            .collect();
        let mut out = Map::new();
        out.insert("operationId".into(), json!(operation.operation_id));
        out.insert("deprecated".into(), json!(operation.deprecated));
        out.insert("tags".into(), json!(tags));
        out.insert("parameters".into(), Value::Object(parameters));
        if let Some(body) = operation.request_body.as_ref().and_then(|b| self.body(b)) {
            out.insert("requestBody".into(), self.body_json(body));
        }
        let successes: Map<String, Value> = self
            .responses(operation)
            .into_iter()
            .filter(|(status, _)| !is_error(status))
            .map(|(status, response)| (status, self.response_json(response)))
            .collect();
        out.insert("responses".into(), Value::Object(successes));
        Value::Object(out)
    }

    /// The operation's responses, resolved, keyed as written (`201`, `4XX`,
    /// `default`).
    pub fn responses(&self, operation: &'a Operation) -> Vec<(String, &'a Response)> {
        let responses = &operation.responses;
        let default = responses.default.iter().map(|r| ("default".to_owned(), r));
        let codes = responses
            .responses
            .iter()
            .map(|(status, r)| (status_key(status), r));
        default
            .chain(codes)
            .filter_map(|(status, r)| Some((status, self.response(r)?)))
            .collect()
    }

    /// The canonical response: its headers (but the server-wide ones) and
    /// its content.
    pub fn response_json(&self, response: &Response) -> Value {
        let headers: Map<String, Value> = response
            .headers
            .iter()
            .map(|(name, h)| (name.to_ascii_lowercase(), h))
            .filter(|(name, _)| !SERVER_WIDE_HEADERS.contains(&name.as_str()))
            .filter_map(|(name, h)| Some((name, self.header_json(self.header(h)?))))
            .collect();
        json!({"headers": headers, "content": self.content_json(&response.content)})
    }

    /// The canonical error response: its content alone. The server's
    /// document declares its errors as `4XX`/`5XX` ranges of one response
    /// that cannot carry the headers each status has (`WWW-Authenticate`
    /// on a `401`, `Retry-After` on a `503`); the probes check those on the
    /// errors they provoke.
    pub fn error_response_json(&self, response: &Response) -> Value {
        json!({"content": self.content_json(&response.content)})
    }

    /// The canonical schema of a parameter or header, or its content.
    pub fn format_json(&self, format: &ParameterSchemaOrContent) -> (&'static str, Value) {
        match format {
            ParameterSchemaOrContent::Schema(schema) => ("schema", self.schema(schema)),
            ParameterSchemaOrContent::Content(content) => ("content", self.content_json(content)),
        }
    }

    fn parameter_json(&self, parameter: &Parameter) -> Value {
        let data = parameter.parameter_data_ref();
        let (style, explode) = style(parameter);
        let mut out = Map::new();
        out.insert("in".into(), json!(location(parameter)));
        out.insert("required".into(), json!(data.required));
        out.insert("deprecated".into(), json!(data.deprecated.unwrap_or(false)));
        out.insert("style".into(), style);
        out.insert("explode".into(), json!(explode));
        if let Parameter::Query {
            allow_reserved,
            allow_empty_value,
            ..
        } = parameter
        {
            out.insert("allowReserved".into(), json!(allow_reserved));
            out.insert(
                "allowEmptyValue".into(),
                json!(allow_empty_value.unwrap_or(false)),
            );
        }
        let (key, mut format) = self.format_json(&data.format);
        // dropshot cannot carry a parameter's default into the document; the
        // probes check query defaults against the running server instead.
        if let Some(schema) = format.as_object_mut() {
            schema.remove("default");
        }
        out.insert(key.into(), format);
        Value::Object(out)
    }

    fn body_json(&self, body: &RequestBody) -> Value {
        json!({"required": body.required, "content": self.content_json(&body.content)})
    }

    fn header_json(&self, header: &Header) -> Value {
        let (key, format) = self.format_json(&header.format);
        json!({
            "required": header.required,
            "deprecated": header.deprecated.unwrap_or(false),
            key: format,
        })
    }

    fn content_json(&self, content: &Content) -> Value {
        let media: Map<String, Value> = content
            .iter()
            .map(|(media_type, media)| {
                let schema = media.schema.as_ref().map(|s| self.schema(s));
                (media_type.to_ascii_lowercase(), json!({"schema": schema}))
            })
            .collect();
        Value::Object(media)
    }

    /// A parameter, following references into `components.parameters`.
    pub fn parameter(&self, p: &'a ReferenceOr<Parameter>) -> Option<&'a Parameter> {
        self.follow(p, "parameters", |c, name| c.parameters.get(name))
    }

    /// A request body, following references into `components.requestBodies`.
    pub fn body(&self, b: &'a ReferenceOr<RequestBody>) -> Option<&'a RequestBody> {
        self.follow(b, "requestBodies", |c, name| c.request_bodies.get(name))
    }

    /// A response, following references into `components.responses`.
    pub fn response(&self, r: &'a ReferenceOr<Response>) -> Option<&'a Response> {
        self.follow(r, "responses", |c, name| c.responses.get(name))
    }

    /// A header, following references into `components.headers`.
    pub fn header(&self, h: &'a ReferenceOr<Header>) -> Option<&'a Header> {
        self.follow(h, "headers", |c, name| c.headers.get(name))
    }

    fn follow<T>(
        &self,
        mut item: &'a ReferenceOr<T>,
        kind: &str,
        lookup: impl Fn(&'a Components, &str) -> Option<&'a ReferenceOr<T>>,
    ) -> Option<&'a T> {
        let components = self.api.components.as_ref();
        for _ in 0..MAX_REF_CHAIN {
            match item {
                ReferenceOr::Item(item) => return Some(item),
                ReferenceOr::Reference { reference } => {
                    let name = reference.strip_prefix(&format!("#/components/{kind}/"))?;
                    item = lookup(components?, name)?;
                }
            }
        }
        None
    }
}

/// The name of the component a canonical schema refers to, if it is a
/// reference.
pub fn ref_name(schema: &Value) -> Option<&str> {
    schema.get("$ref")?.as_str()
}

/// The canonical form of a schema given as JSON.
pub fn normalise_schema(raw: Value, mode: Mode) -> Value {
    let Value::Object(mut map) = raw else {
        return raw;
    };
    if let Some(Value::String(reference)) = map.get("$ref") {
        // OpenAPI 3.0 ignores the siblings of a reference.
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or(reference);
        return json!({ "$ref": name });
    }
    map.retain(|key, value| {
        !ANNOTATIONS.contains(&key.as_str())
            && !key.starts_with("x-")
            && !DEFAULTS.iter().any(|(k, v)| k == key && v == value)
    });
    let required = required_names(&map);
    let mut out = Map::new();
    for (key, value) in map {
        let value = match key.as_str() {
            "properties" => normalise_properties(value, &required, mode),
            "items" | "not" => normalise_schema(value, mode),
            "additionalProperties" if value.is_object() => normalise_schema(value, mode),
            "allOf" | "oneOf" | "anyOf" => map_array(value, |v| normalise_schema(v, mode)),
            "required" | "enum" => sorted(value),
            _ => value,
        };
        out.insert(key, value);
    }
    if out
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        out.remove("required");
    }
    collapse_wrapper(out)
}

fn normalise_properties(properties: Value, required: &[String], mode: Mode) -> Value {
    let Value::Object(properties) = properties else {
        return properties;
    };
    let properties = properties
        .into_iter()
        .map(|(name, mut property)| {
            if mode == Mode::Compare
                && !required.contains(&name)
                && is_wrapper(&property)
                && let Some(property) = property.as_object_mut()
            {
                property.remove("nullable");
            }
            (name, normalise_schema(property, mode))
        })
        .collect();
    Value::Object(properties)
}

/// Whether `schema` is `allOf: [one schema]` plus annotations.
fn is_wrapper(schema: &Value) -> bool {
    schema
        .get("allOf")
        .and_then(Value::as_array)
        .is_some_and(|parts| parts.len() == 1)
}

/// `allOf: [X]` plus other keys becomes X with those keys laid over it
/// (when they do not clash with X's own).
fn collapse_wrapper(mut schema: Map<String, Value>) -> Value {
    let single = match schema.get("allOf").and_then(Value::as_array) {
        Some(parts) if parts.len() == 1 => parts[0].clone(),
        _ => return Value::Object(schema),
    };
    let Value::Object(mut inner) = single else {
        return Value::Object(schema);
    };
    schema.remove("allOf");
    if schema
        .iter()
        .any(|(key, value)| inner.get(key).is_some_and(|own| own != value))
    {
        schema.insert("allOf".into(), Value::Array(vec![Value::Object(inner)]));
        return Value::Object(schema);
    }
    inner.extend(schema);
    Value::Object(inner)
}

fn map_array(value: Value, f: impl Fn(Value) -> Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.into_iter().map(f).collect()),
        other => other,
    }
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Array(mut items) => {
            items.sort_by_key(|item| item.to_string());
            Value::Array(items)
        }
        other => other,
    }
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("an openapiv3 value always serialises")
}

/// How a parameter is serialised: its style and explode, defaults filled in.
pub fn style(parameter: &Parameter) -> (Value, bool) {
    let (style, default_explode) = match parameter {
        Parameter::Query { style, .. } => (to_json(style), matches!(style, QueryStyle::Form)),
        Parameter::Header { style, .. } => (to_json(style), false),
        Parameter::Path { style, .. } => (to_json(style), false),
        Parameter::Cookie { style, .. } => (to_json(style), true),
    };
    let explode = parameter.parameter_data_ref().explode;
    (style, explode.unwrap_or(default_explode))
}

/// `query`, `path`, `header` or `cookie`.
pub fn location(parameter: &Parameter) -> &'static str {
    match parameter {
        Parameter::Query { .. } => "query",
        Parameter::Header { .. } => "header",
        Parameter::Path { .. } => "path",
        Parameter::Cookie { .. } => "cookie",
    }
}

fn static_method(method: &str) -> &'static str {
    const METHODS: &[&str] = &[
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("unknown")
}

/// A response key as written: `201`, `4XX`.
pub fn status_key(status: &StatusCode) -> String {
    status.to_string()
}

/// Whether a response key is a 4xx/5xx status or range.
pub fn is_error(key: &str) -> bool {
    key.starts_with('4') || key.starts_with('5')
}

/// Whether the error response `declared` (a code or a range, as written)
/// covers the HTTP status `status`.
pub fn covers(declared: &str, status: u16) -> bool {
    match declared.strip_suffix("XX") {
        Some(class) => class.parse::<u16>() == Ok(status / 100),
        None => declared.parse::<u16>() == Ok(status),
    }
}

/// The path prefix of the YAML's servers (`/v1` for
/// `https://api.example/v1`), which the server's paths carry. Every server
/// must agree on it; a disagreement is itself a difference.
pub fn path_prefix(api: &OpenAPI, differences: &mut Vec<Difference>) -> String {
    let prefixes: Vec<(String, &str)> = api
        .servers
        .iter()
        .map(|server| (server_path(server), server.url.as_str()))
        .collect();
    let Some((first, _)) = prefixes.first() else {
        return String::new();
    };
    if prefixes.iter().any(|(prefix, _)| prefix != first) {
        let listed: Vec<String> = prefixes
            .iter()
            .map(|(prefix, url)| format!("{url} → {prefix:?}"))
            .collect();
        differences.push(Difference::new(
            "servers",
            format!(
                "the servers disagree on the path prefix ({}); the server has one prefix for every path",
                listed.join(", ")
            ),
        ));
    }
    first.clone()
}

/// The path part of a server URL, variables replaced by their defaults,
/// without a trailing slash.
fn server_path(server: &openapiv3::Server) -> String {
    let mut url = server.url.clone();
    for (name, variable) in server.variables.iter().flatten() {
        url = url.replace(&format!("{{{name}}}"), &variable.default);
    }
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("", |slash| &rest[slash..]),
        None => url.as_str(),
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.trim_end_matches('/').to_owned()
}

/// The property names a schema object lists as required.
pub fn required_names(schema: &Map<String, Value>) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_collapse_and_annotations_go() {
        let wrapped = json!({
            "allOf": [{"$ref": "#/components/schemas/PetStatus"}],
            "description": "Availability."
        });
        assert_eq!(
            normalise_schema(wrapped, Mode::Compare),
            json!({"$ref": "PetStatus"})
        );
        let titled = json!({"type": "array", "title": "Array_of_Pet", "items": {"$ref": "#/components/schemas/Pet"}});
        assert_eq!(
            normalise_schema(titled, Mode::Compare),
            json!({"type": "array", "items": {"$ref": "Pet"}})
        );
    }

    #[test]
    fn required_and_enum_are_sets() {
        let a = normalise_schema(
            json!({"type": "object", "required": ["b", "a"]}),
            Mode::Compare,
        );
        let b = normalise_schema(
            json!({"type": "object", "required": ["a", "b"]}),
            Mode::Compare,
        );
        assert_eq!(a, b);
    }

    #[test]
    fn optional_wrappers_lose_nullable_required_ones_keep_it() {
        let object = json!({
            "type": "object",
            "required": ["a"],
            "properties": {
                "a": {"allOf": [{"$ref": "#/components/schemas/X"}], "nullable": true},
                "b": {"allOf": [{"$ref": "#/components/schemas/X"}], "nullable": true}
            }
        });
        let canonical = normalise_schema(object.clone(), Mode::Compare);
        let literal = normalise_schema(object, Mode::Probe);
        assert_eq!(
            literal["properties"]["b"],
            json!({"$ref": "X", "nullable": true})
        );
        assert_eq!(
            canonical["properties"]["a"],
            json!({"$ref": "X", "nullable": true})
        );
        assert_eq!(canonical["properties"]["b"], json!({"$ref": "X"}));
    }

    #[test]
    fn server_paths_give_the_prefix() {
        let server = |url: &str| openapiv3::Server {
            url: url.into(),
            ..Default::default()
        };
        assert_eq!(server_path(&server("https://api.example/v1")), "/v1");
        assert_eq!(server_path(&server("https://api.example/v1/")), "/v1");
        assert_eq!(server_path(&server("https://api.example")), "");
        assert_eq!(server_path(&server("/v2")), "/v2");
    }

    #[test]
    fn ranges_cover_their_class() {
        assert!(covers("4XX", 404));
        assert!(!covers("4XX", 503));
        assert!(covers("404", 404));
        assert!(!covers("400", 404));
    }
}
