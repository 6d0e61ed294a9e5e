//! The compatibility rules: what each kind of change does to a client or a
//! server built from the older document.
//!
//! A change is judged by where it is. What a *request* may carry (a query
//! parameter, a request body) may widen but not narrow: an older client's
//! request must still be accepted. What a *response* may hold may narrow
//! but not widen: an older client must still understand every answer. A
//! schema used both ways (`PetStatus` is a request filter and a response
//! field) is judged both ways, and the stricter verdict stands.
//!
//! Oxide's `drift` crate was measured against these rules on the catalogue
//! and is not used: `docs/compatibility.md` has the measurement.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::SystemTime;

use openapiv3::{Parameter, ParameterSchemaOrContent, Response};
use serde_json::{Map, Value};

use super::{Finding, Verdict};
use crate::drift::canon::{self, Op, Side};

/// Which way a schema's values travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Direction {
    Request,
    Response,
}

/// How a constraint changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Fewer values are allowed than before.
    Narrower,
    /// More values are allowed than before.
    Wider,
    /// Neither contains the other.
    Unrelated,
}

/// Every change from `old` to `new`, sorted, each once.
pub fn compare(old: &Side<'_>, new: &Side<'_>) -> Vec<Finding> {
    let mut rules = Rules {
        old,
        new,
        findings: Vec::new(),
        compared: HashSet::new(),
    };
    rules.operations();
    rules.security_schemes();
    let mut findings = rules.findings;
    findings.sort();
    findings.dedup();
    findings
}

struct Rules<'s, 'a> {
    old: &'s Side<'a>,
    new: &'s Side<'a>,
    findings: Vec<Finding>,
    /// Component schemas already compared, per direction.
    compared: HashSet<(String, Direction)>,
}

impl Rules<'_, '_> {
    fn found(&mut self, location: impl Into<String>, message: impl Into<String>, verdict: Verdict) {
        let finding = Finding::new(location, message, verdict);
        self.findings.push(finding);
    }

    fn breaking(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.found(location, message, Verdict::Breaking);
    }

    fn compatible(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.found(location, message, Verdict::Compatible);
    }

    /// A constraint that narrowed or widened, judged by direction.
    fn bounded(
        &mut self,
        location: impl Into<String>,
        what: String,
        change: Change,
        direction: Direction,
    ) {
        use {Change::*, Direction::*};
        let (verdict, how) = match (change, direction) {
            (Narrower, Request) => (Verdict::Breaking, "narrows what requests may send"),
            (Wider, Request) => (Verdict::Compatible, "widens what requests may send"),
            (Narrower, Response) => (Verdict::Compatible, "narrows what responses may hold"),
            (Wider, Response) => (Verdict::Breaking, "widens what responses may hold"),
            (Unrelated, _) => (Verdict::Breaking, "changes what is allowed"),
        };
        self.found(location, format!("{what} ({how})"), verdict);
    }

    /// Operations in both documents, removed, and new.
    fn operations(&mut self) {
        let (old_ops, new_ops) = (self.old.operations(), self.new.operations());
        for (_, a, b) in paired(&old_ops, &new_ops) {
            match (a, b) {
                (Some(a), Some(b)) => self.operation(&a.location(), a, b),
                (Some(a), None) => self.removed_operation(&a.location(), a),
                (None, Some(b)) => self.compatible(b.location(), "new operation"),
                (None, None) => {}
            }
        }
    }

    /// Removing an operation breaks its clients — unless it was deprecated
    /// and the sunset its responses announced has passed.
    fn removed_operation(&mut self, location: &str, op: &Op<'_>) {
        if !op.operation.deprecated {
            return self.breaking(location, "operation removed");
        }
        let Some(sunset) = sunset(self.old, op) else {
            let message =
                "deprecated operation removed, and the older document announces no sunset";
            return self.breaking(location, message);
        };
        let date = httpdate::fmt_http_date(sunset);
        match sunset <= SystemTime::now() {
            true => self.compatible(
                location,
                format!("deprecated operation removed after its sunset ({date})"),
            ),
            false => self.breaking(
                location,
                format!("deprecated operation removed before its sunset ({date})"),
            ),
        }
    }

    fn operation(&mut self, location: &str, old: &Op<'_>, new: &Op<'_>) {
        let (old_id, new_id) = (&old.operation.operation_id, &new.operation.operation_id);
        if old_id != new_id {
            let message = format!(
                "{} -> {} (renames the generated client's method)",
                show(old_id),
                show(new_id)
            );
            self.breaking(format!("{location}.operationId"), message);
        }
        match (old.operation.deprecated, new.operation.deprecated) {
            (false, true) => self.compatible(format!("{location}.deprecated"), "now deprecated"),
            (true, false) => {
                self.compatible(format!("{location}.deprecated"), "no longer deprecated")
            }
            _ => {}
        }
        let (old_security, new_security) = (security(self.old, old), security(self.new, new));
        if old_security != new_security {
            let why = "a semantic change: who may call it, and how, is no longer what clients were built for";
            self.breaking(
                format!("{location}.security"),
                format!("{old_security:?} -> {new_security:?} ({why})"),
            );
        }
        self.parameters(location, old, new);
        self.request_body(location, old, new);
        self.responses(location, old, new);
    }

    /// Parameters removed, new, and in both documents.
    fn parameters(&mut self, location: &str, old: &Op<'_>, new: &Op<'_>) {
        let (old_params, new_params) = (by_key(old), by_key(new));
        for ((place, name), a, b) in paired(&old_params, &new_params) {
            let here = format!("{location}.parameters.{name}");
            match (a, b) {
                (Some(a), Some(b)) => self.parameter(&here, a, b),
                (Some(_), None) => self.breaking(here, format!("{place} parameter removed")),
                (None, Some(b)) if b.parameter_data_ref().required => {
                    self.breaking(here, format!("new required {place} parameter"))
                }
                (None, _) => self.compatible(here, format!("new optional {place} parameter")),
            }
        }
    }

    fn parameter(&mut self, location: &str, old: &Parameter, new: &Parameter) {
        let (old_data, new_data) = (old.parameter_data_ref(), new.parameter_data_ref());
        self.required(location, old_data.required, new_data.required);
        let (a, b) = (
            old_data.deprecated.unwrap_or(false),
            new_data.deprecated.unwrap_or(false),
        );
        if a != b {
            self.compatible(format!("{location}.deprecated"), format!("{a} -> {b}"));
        }
        let style = |p| {
            let (style, explode) = canon::style(p);
            format!("{}, explode {explode}", style.as_str().unwrap_or_default())
        };
        let (old_style, new_style) = (style(old), style(new));
        if old_style != new_style {
            let message = format!("{old_style} -> {new_style} (changes how values are written)");
            self.breaking(format!("{location}.style"), message);
        }
        if let (ParameterSchemaOrContent::Schema(a), ParameterSchemaOrContent::Schema(b)) =
            (&old_data.format, &new_data.format)
        {
            let (a, b) = (self.old.schema(a), self.new.schema(b));
            self.schema(&format!("{location}.schema"), &a, &b, Direction::Request);
        } else if self.old.format_json(&old_data.format) != self.new.format_json(&new_data.format) {
            self.breaking(location, "serialisation changed (schema or content)");
        }
    }

    /// A request body removed, new, or in both documents.
    fn request_body(&mut self, location: &str, old: &Op<'_>, new: &Op<'_>) {
        let here = format!("{location}.requestBody");
        let old_body = old
            .operation
            .request_body
            .as_ref()
            .and_then(|b| self.old.body(b));
        let new_body = new
            .operation
            .request_body
            .as_ref()
            .and_then(|b| self.new.body(b));
        match (old_body, new_body) {
            (Some(_), None) => self.breaking(here, "request body removed"),
            (None, Some(body)) if body.required => self.breaking(here, "new required request body"),
            (None, Some(_)) => self.compatible(here, "new optional request body"),
            (Some(a), Some(b)) => {
                self.required(&here, a.required, b.required);
                let (a, b) = (content(self.old, &a.content), content(self.new, &b.content));
                self.content(
                    &format!("{here}.content"),
                    &a,
                    &b,
                    Direction::Request,
                    false,
                );
            }
            (None, None) => {}
        }
    }

    /// A parameter or request body that became required (an older client
    /// may leave it out), or optional.
    fn required(&mut self, location: &str, old: bool, new: bool) {
        match (old, new) {
            (false, true) => self.breaking(format!("{location}.required"), "now required"),
            (true, false) => self.compatible(format!("{location}.required"), "no longer required"),
            _ => {}
        }
    }

    fn responses(&mut self, location: &str, old: &Op<'_>, new: &Op<'_>) {
        let old_responses: BTreeMap<String, &Response> =
            self.old.responses(old.operation).into_iter().collect();
        let new_responses: BTreeMap<String, &Response> =
            self.new.responses(new.operation).into_iter().collect();
        for (status, a, b) in paired(&old_responses, &new_responses) {
            let here = format!("{location}.responses.{status}");
            match (a, b) {
                (Some(a), Some(b)) => self.response(&here, status, a, b),
                (Some(_), None) => self.breaking(here, "response removed"),
                (None, _) if canon::is_error(status) => {
                    let why = "older clients already treat an undeclared error as an error";
                    self.compatible(here, format!("new error response ({why})"));
                }
                (None, _) => self.breaking(
                    here,
                    "new success response (older clients cannot decode it)",
                ),
            }
        }
    }

    fn response(&mut self, location: &str, status: &str, old: &Response, new: &Response) {
        let headers = |side: &Side<'_>, response: &Response| -> BTreeMap<String, (bool, Value)> {
            let resolved = response
                .headers
                .iter()
                .filter_map(|(name, h)| Some((name, side.header(h)?)));
            let headers = resolved.map(|(name, h)| {
                (
                    name.to_ascii_lowercase(),
                    (h.required, side.format_json(&h.format).1),
                )
            });
            headers.collect()
        };
        let (old_headers, new_headers) = (headers(self.old, old), headers(self.new, new));
        for (name, a, b) in paired(&old_headers, &new_headers) {
            let here = format!("{location}.headers.{name}");
            let Some((old_required, old_schema)) = a else {
                self.compatible(here, "new response header");
                continue;
            };
            let Some((new_required, new_schema)) = b else {
                self.breaking(here, "response header removed");
                continue;
            };
            match (old_required, new_required) {
                (true, false) => self.breaking(
                    format!("{here}.required"),
                    "no longer always sent (clients may rely on it)",
                ),
                (false, true) => self.compatible(format!("{here}.required"), "now always sent"),
                _ => {}
            }
            self.schema(
                &format!("{here}.schema"),
                old_schema,
                new_schema,
                Direction::Response,
            );
        }
        let (a, b) = (
            content(self.old, &old.content),
            content(self.new, &new.content),
        );
        self.content(
            &format!("{location}.content"),
            &a,
            &b,
            Direction::Response,
            canon::is_error(status),
        );
    }

    fn content(
        &mut self,
        location: &str,
        old: &BTreeMap<String, Value>,
        new: &BTreeMap<String, Value>,
        direction: Direction,
        is_error: bool,
    ) {
        for (media_type, a, b) in paired(old, new) {
            let here = format!("{location}.{media_type}");
            match (a, b, direction) {
                (Some(a), Some(b), _) => self.schema(&format!("{here}.schema"), a, b, direction),
                (Some(_), None, _) => self.breaking(here, "media type removed"),
                (None, _, Direction::Request) => self.compatible(here, "new media type accepted"),
                (None, _, Direction::Response) if is_error => {
                    self.compatible(here, "new error media type")
                }
                (None, _, Direction::Response) => {
                    self.breaking(here, "new media type (older clients cannot decode it)")
                }
            }
        }
    }

    fn security_schemes(&mut self) {
        let schemes = |side: &Side<'_>| -> BTreeMap<String, Value> {
            let schemes = side.api.components.iter().flat_map(|c| &c.security_schemes);
            let without_description = |(name, scheme): (&String, _)| {
                let mut json = serde_json::to_value(scheme).unwrap_or_default();
                json.as_object_mut().map(|map| map.remove("description"));
                (name.clone(), json)
            };
            schemes.map(without_description).collect()
        };
        let (old, new) = (schemes(self.old), schemes(self.new));
        for (name, scheme) in &old {
            if new.get(name) != Some(scheme) {
                let message = "security scheme removed or changed (clients authenticate as before)";
                self.breaking(format!("components.securitySchemes.{name}"), message);
            }
        }
    }

    /// Compares two canonical schemas; a component referenced on both sides
    /// is compared once per direction, where it is defined.
    fn schema(&mut self, location: &str, old: &Value, new: &Value, direction: Direction) {
        let (resolved_old, resolved_new) = (self.old.resolve(old), self.new.resolve(new));
        match (canon::ref_name(old), canon::ref_name(new)) {
            (Some(a), Some(b)) if a == b => {
                if self.compared.insert((a.to_owned(), direction)) {
                    let location = format!("components.schemas.{a}");
                    self.schema_body(&location, &resolved_old, &resolved_new, direction);
                }
            }
            _ => self.schema_body(location, &resolved_old, &resolved_new, direction),
        }
    }

    fn schema_body(&mut self, location: &str, old: &Value, new: &Value, direction: Direction) {
        let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
            if old != new {
                self.breaking(location, format!("{old} -> {new}"));
            }
            return;
        };
        let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
        for key in keys {
            let (a, b) = (old.get(key.as_str()), new.get(key.as_str()));
            if a == b {
                continue;
            }
            let (here, what) = (format!("{location}.{key}"), transition(a, b));
            // Absent means false (the canonical form drops `false`).
            let became_true = b == Some(&Value::Bool(true));
            let change = match key.as_str() {
                "type" => type_change(a, b),
                "format" => format_change(a, b),
                "minimum" | "minLength" | "minItems" | "minProperties" => bound_change(a, b, true),
                "maximum" | "maxLength" | "maxItems" | "maxProperties" => bound_change(a, b, false),
                "nullable" if became_true => Change::Wider,
                "nullable" => Change::Narrower,
                "exclusiveMinimum" | "exclusiveMaximum" if became_true => Change::Narrower,
                "exclusiveMinimum" | "exclusiveMaximum" => Change::Wider,
                "pattern" => match (a, b) {
                    (None, Some(_)) => Change::Narrower,
                    (Some(_), None) => Change::Wider,
                    _ => Change::Unrelated,
                },
                "enum" => {
                    self.enum_change(&here, a, b, direction);
                    continue;
                }
                "default" => {
                    self.breaking(
                        here,
                        format!("{what} (changes what an omitted value means)"),
                    );
                    continue;
                }
                "deprecated" => {
                    self.compatible(here, what);
                    continue;
                }
                "required" | "properties" | "additionalProperties" => continue,
                "items" => {
                    let (a, b) = (
                        a.cloned().unwrap_or_default(),
                        b.cloned().unwrap_or_default(),
                    );
                    self.schema(&here, &a, &b, direction);
                    continue;
                }
                _ => {
                    self.breaking(here, format!("{what} (changed)"));
                    continue;
                }
            };
            self.bounded(here, what, change, direction);
        }
        self.object(location, old, new, direction);
    }

    fn enum_change(
        &mut self,
        location: &str,
        a: Option<&Value>,
        b: Option<&Value>,
        direction: Direction,
    ) {
        let values = |v: Option<&Value>| -> Option<BTreeSet<String>> {
            Some(v?.as_array()?.iter().map(Value::to_string).collect())
        };
        let (old, new) = match (values(a), values(b)) {
            (None, Some(_)) => {
                return self.bounded(
                    location,
                    "values restricted to an enum".into(),
                    Change::Narrower,
                    direction,
                );
            }
            (Some(_), None) => {
                return self.bounded(location, "enum dropped".into(), Change::Wider, direction);
            }
            (None, None) => return self.breaking(location, "enum changed"),
            (Some(old), Some(new)) => (old, new),
        };
        let removed: Vec<&String> = old.difference(&new).collect();
        if !removed.is_empty() {
            self.bounded(
                location,
                format!("values removed: {}", list(&removed)),
                Change::Narrower,
                direction,
            );
        }
        let added: Vec<&String> = new.difference(&old).collect();
        if !added.is_empty() {
            let why = match direction {
                Direction::Response => " (generated clients' enums reject unknown values)",
                Direction::Request => "",
            };
            self.bounded(
                location,
                format!("values added: {}{why}", list(&added)),
                Change::Wider,
                direction,
            );
        }
    }

    /// Properties, `required` and `additionalProperties` of an object.
    fn object(
        &mut self,
        location: &str,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        direction: Direction,
    ) {
        let properties = |schema: &Map<String, Value>| -> BTreeMap<String, Value> {
            let properties = schema.get("properties").and_then(Value::as_object);
            properties
                .map(|p| p.clone().into_iter().collect())
                .unwrap_or_default()
        };
        let (old_props, new_props) = (properties(old), properties(new));
        let (old_required, new_required) = (canon::required_names(old), canon::required_names(new));
        let closed = |schema: &Map<String, Value>| {
            schema.get("additionalProperties") == Some(&Value::Bool(false))
        };
        for (name, a, b) in paired(&old_props, &new_props) {
            let here = format!("{location}.properties.{name}");
            match (a, b, direction) {
                (Some(a), Some(b), _) => self.schema(&here, a, b, direction),
                (Some(_), None, _) => self.breaking(here, "property removed"),
                (None, _, Direction::Request) if new_required.contains(name) => {
                    self.breaking(here, "new required property")
                }
                (None, _, Direction::Request) => self.compatible(here, "new optional property"),
                (None, _, Direction::Response) if closed(old) => {
                    let why = "older clients reject it";
                    self.breaking(
                        here,
                        format!("new property in an object that allowed no others ({why})"),
                    );
                }
                (None, _, Direction::Response) => {
                    let why = "older clients ignore properties they do not know";
                    self.compatible(here, format!("new property ({why})"));
                }
            }
        }
        for name in new_required
            .iter()
            .filter(|n| !old_required.contains(n) && old_props.contains_key(*n))
        {
            let here = format!("{location}.required.{name}");
            self.bounded(
                here,
                "property now required".into(),
                Change::Narrower,
                direction,
            );
        }
        for name in old_required
            .iter()
            .filter(|n| !new_required.contains(n) && new_props.contains_key(*n))
        {
            let here = format!("{location}.required.{name}");
            self.bounded(
                here,
                "property no longer required".into(),
                Change::Wider,
                direction,
            );
        }
        let here = format!("{location}.additionalProperties");
        match (
            old.get("additionalProperties"),
            new.get("additionalProperties"),
        ) {
            (a, b) if a == b => {}
            (Some(a @ Value::Object(_)), Some(b @ Value::Object(_))) => {
                self.schema(&here, a, b, direction)
            }
            (a, b) => {
                let change = match (closed(old), closed(new)) {
                    (_, true) => Change::Narrower,
                    (true, _) => Change::Wider,
                    _ => Change::Unrelated,
                };
                self.bounded(here, transition(a, b), change, direction);
            }
        }
    }
}

/// The entries of two maps paired by key, in key order: `(key, old, new)`.
fn paired<'m, K: Ord, V>(
    old: &'m BTreeMap<K, V>,
    new: &'m BTreeMap<K, V>,
) -> Vec<(&'m K, Option<&'m V>, Option<&'m V>)> {
    let keys: BTreeSet<&K> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .map(|key| (key, old.get(key), new.get(key)))
        .collect()
}

/// An operation's parameters by location and name.
fn by_key<'a>(op: &Op<'a>) -> BTreeMap<(&'static str, String), &'a Parameter> {
    let key = |p: &Parameter| (canon::location(p), p.parameter_data_ref().name.clone());
    op.parameters.iter().map(|p| (key(p), *p)).collect()
}

/// `a -> b`, `absent` for a missing side.
fn transition(a: Option<&Value>, b: Option<&Value>) -> String {
    let show = |v: Option<&Value>| v.map_or("absent".to_owned(), Value::to_string);
    format!("{} -> {}", show(a), show(b))
}

fn show(value: &Option<String>) -> String {
    value.clone().unwrap_or_else(|| "absent".into())
}

fn list(values: &[&String]) -> String {
    values
        .iter()
        .map(|v| v.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a `type` changed: an integer is a number; any type is within none.
fn type_change(a: Option<&Value>, b: Option<&Value>) -> Change {
    match (a.and_then(Value::as_str), b.and_then(Value::as_str)) {
        (Some("integer"), Some("number")) | (Some(_), None) => Change::Wider,
        (Some("number"), Some("integer")) | (None, Some(_)) => Change::Narrower,
        _ => Change::Unrelated,
    }
}

/// How a lower (`is_min`) or upper bound changed.
fn bound_change(a: Option<&Value>, b: Option<&Value>, is_min: bool) -> Change {
    match (a.and_then(Value::as_f64), b.and_then(Value::as_f64)) {
        (None, Some(_)) => Change::Narrower,
        (Some(_), None) => Change::Wider,
        (Some(a), Some(b)) if (b > a) == is_min => Change::Narrower,
        (Some(_), Some(_)) => Change::Wider,
        (None, None) => Change::Unrelated,
    }
}

/// How a `format` changed: `int32` is within `int64`, `float` within
/// `double`, any format within none.
fn format_change(a: Option<&Value>, b: Option<&Value>) -> Change {
    let rank = |format: &str| match format {
        "int32" | "float" => Some(0),
        "int64" | "double" => Some(1),
        _ => None,
    };
    let same_family = |a: &str, b: &str| a.starts_with("int") == b.starts_with("int");
    match (a.and_then(Value::as_str), b.and_then(Value::as_str)) {
        (None, Some(_)) => Change::Narrower,
        (Some(_), None) => Change::Wider,
        (Some(a), Some(b)) => match (rank(a), rank(b)) {
            (Some(x), Some(y)) if x < y && same_family(a, b) => Change::Wider,
            (Some(x), Some(y)) if x > y && same_family(a, b) => Change::Narrower,
            _ => Change::Unrelated,
        },
        (None, None) => Change::Unrelated,
    }
}

/// The effective security of an operation: its own, or the document's.
fn security(side: &Side<'_>, op: &Op<'_>) -> Vec<Vec<String>> {
    let requirements = op
        .operation
        .security
        .as_ref()
        .or(side.api.security.as_ref());
    let alternatives = requirements
        .into_iter()
        .flatten()
        .map(|r| r.keys().cloned().collect());
    let mut alternatives: Vec<Vec<String>> = alternatives.collect();
    alternatives.sort();
    alternatives
}

/// The canonical schema of each media type of `content`.
fn content(side: &Side<'_>, content: &openapiv3::Content) -> BTreeMap<String, Value> {
    let schema = |media: &openapiv3::MediaType| {
        media
            .schema
            .as_ref()
            .map(|s| side.schema(s))
            .unwrap_or_default()
    };
    content
        .iter()
        .map(|(media_type, media)| (media_type.to_ascii_lowercase(), schema(media)))
        .collect()
}

/// The sunset an operation's responses announce: the example (or default,
/// or only enum value) of a `Sunset` response header (RFC 8594).
fn sunset(side: &Side<'_>, op: &Op<'_>) -> Option<SystemTime> {
    side.responses(op.operation)
        .into_iter()
        .find_map(|(_, response)| {
            let (_, header) = response
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("sunset"))?;
            let ParameterSchemaOrContent::Schema(schema) = &side.header(header)?.format else {
                return None;
            };
            let schema = serde_json::to_value(schema).ok()?;
            let date = schema.get("example").or_else(|| schema.get("default"));
            let date = date
                .or_else(|| schema.get("enum").and_then(|e| e.get(0)))?
                .as_str()?;
            httpdate::parse_http_date(date).ok()
        })
}
