//! Values made from the YAML's schemas: a valid one, ones at the edges of
//! what is allowed, and ones that break exactly one rule.

use serde_json::{Map, Value, json};

use crate::drift::canon::{Side, required_names};

/// The longest string the probes make for a length rule; longer bounds are
/// not probed at the edge.
const LONGEST: u64 = 4096;

/// Candidates for a string that breaks a pattern, tried in order.
const PATTERN_BREAKERS: &[&str] = &[
    "a\u{1}b", "a\nb", "\u{7f}", "a\u{85}b", " ", "!", "a b", "-", "Z", "0", "a", "",
];

/// A value and what makes it interesting.
#[derive(Clone, Debug)]
pub struct Case {
    /// Why the value was chosen (`above maximum 100`).
    pub what: String,
    /// The value.
    pub value: Value,
}

fn case(what: impl Into<String>, value: Value) -> Case {
    Case {
        what: what.into(),
        value,
    }
}

/// Whether the values go into JSON (every type can be broken) or into text
/// such as a query string (only the content of the text can).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// A JSON body.
    Json,
    /// A query or path parameter.
    Text,
    /// A header parameter: text that HTTP can carry in a header value
    /// (visible ASCII and inner spaces; no control characters).
    Header,
}

/// A value the schema accepts.
pub fn valid(side: &Side<'_>, schema: &Value) -> Value {
    valid_at(side, schema, 0)
}

fn valid_at(side: &Side<'_>, schema: &Value, depth: usize) -> Value {
    let schema = side.resolve(schema);
    if depth > 16 {
        return Value::Null;
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match type_of(&schema) {
        Some("integer") => {
            let (lo, hi) = int_bounds(&schema);
            let value = 1i128
                .max(lo.map_or(i128::MIN, |(v, _)| v))
                .min(hi.map_or(i128::MAX, |(v, _)| v));
            int_json(value).unwrap_or(Value::Null)
        }
        Some("number") => {
            let lo = number(&schema, "minimum").unwrap_or(f64::MIN);
            let hi = number(&schema, "maximum").unwrap_or(f64::MAX);
            json!(1f64.max(lo).min(hi))
        }
        Some("string") => json!(valid_string(&schema)),
        Some("boolean") => json!(true),
        Some("array") => {
            let count = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = schema
                .get("items")
                .map_or(Value::Null, |i| valid_at(side, i, depth + 1));
            Value::Array((0..count).map(|_| item.clone()).collect())
        }
        Some("object") => {
            let mut object = Map::new();
            for name in required(&schema) {
                let property = schema["properties"]
                    .get(&name)
                    .cloned()
                    .unwrap_or(json!({}));
                object.insert(name, valid_at(side, &property, depth + 1));
            }
            Value::Object(object)
        }
        _ => {
            if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
                let mut merged = Map::new();
                for part in parts {
                    if let Value::Object(part) = valid_at(side, part, depth + 1) {
                        merged.extend(part);
                    }
                }
                return Value::Object(merged);
            }
            let first = ["oneOf", "anyOf"]
                .iter()
                .find_map(|key| schema.get(*key)?.as_array()?.first().cloned());
            first.map_or(json!({}), |f| valid_at(side, &f, depth + 1))
        }
    }
}

fn valid_string(schema: &Value) -> String {
    let by_format = match schema.get("format").and_then(Value::as_str) {
        Some("date-time") => Some("2024-01-01T00:00:00Z"),
        Some("date") => Some("2024-01-01"),
        Some("uuid") => Some("00000000-0000-4000-8000-000000000000"),
        Some("email") => Some("probe@example.com"),
        Some("uri") => Some("https://example.com/"),
        _ => None,
    };
    if let Some(text) = by_format {
        return text.into();
    }
    let min = schema
        .get("minLength")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .max(1);
    let candidates = ["a", "A", "0", "a0"].map(|unit| unit.repeat(min as usize));
    candidates
        .iter()
        .find(|c| matches_pattern(schema, c) != Some(false))
        .unwrap_or(&candidates[0])
        .clone()
}

/// Values just inside each bound, and each enum value: the server must
/// accept them.
pub fn boundaries(side: &Side<'_>, schema: &Value, flavor: Flavor) -> Vec<Case> {
    let schema = side.resolve(schema);
    let mut cases = Vec::new();
    if flavor == Flavor::Json && schema.get("nullable") == Some(&json!(true)) {
        cases.push(case(
            "null, which the schema allows (nullable)",
            Value::Null,
        ));
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        for value in values.iter().filter(|v| !v.is_null()) {
            cases.push(case(format!("the enum value {value}"), value.clone()));
        }
        return cases;
    }
    match type_of(&schema) {
        Some("integer") => {
            let (lo, hi) = int_bounds(&schema);
            for (value, rule) in lo.into_iter().chain(hi) {
                if let Some(json) = encode_int(value, flavor) {
                    cases.push(case(format!("the edge of {rule}"), json));
                }
            }
        }
        Some("string") => {
            let min = schema.get("minLength").and_then(Value::as_u64);
            let max = schema.get("maxLength").and_then(Value::as_u64);
            for (length, rule) in [(min, "minLength"), (max, "maxLength")] {
                let Some(length) = length.filter(|l| (1..=LONGEST).contains(l)) else {
                    continue;
                };
                let text = "a".repeat(length as usize);
                if matches_pattern(&schema, &text) != Some(false) {
                    cases.push(case(
                        format!("{length} characters, the edge of {rule}"),
                        json!(text),
                    ));
                }
            }
        }
        _ => {}
    }
    cases
}

/// Values that break one rule of the schema each: the server must reject
/// them with 400.
pub fn violations(side: &Side<'_>, schema: &Value, flavor: Flavor) -> Vec<Case> {
    let schema = side.resolve(schema);
    let json = flavor == Flavor::Json;
    let mut cases = Vec::new();
    if json && schema.get("nullable") != Some(&json!(true)) && type_of(&schema).is_some() {
        cases.push(case("null, which the schema does not allow", Value::Null));
    }
    match type_of(&schema) {
        Some("integer") => integer_violations(&schema, flavor, &mut cases),
        Some("number") => {
            cases.push(case("not a number", json!("x")));
            for (key, step) in [("minimum", -1.0), ("maximum", 1.0)] {
                if let Some(bound) = number(&schema, key) {
                    let value = json!(bound + step);
                    cases.push(case(format!("beyond {key} {bound}"), text(value, flavor)));
                }
            }
        }
        Some("string") => string_violations(&schema, flavor, &mut cases),
        Some("boolean") => cases.push(case("not a boolean", json!("x"))),
        Some("array" | "object") if json => {
            cases.push(case("a string instead of the declared type", json!("x")));
        }
        _ => {}
    }
    cases
}

fn integer_violations(schema: &Value, flavor: Flavor, cases: &mut Vec<Case>) {
    cases.push(case("not an integer", json!("x")));
    cases.push(case("a fraction", text(json!(1.5), flavor)));
    let (lo, hi) = int_bounds(schema);
    if let Some((lo, rule)) = lo
        && let Some(value) = encode_int(lo - 1, flavor)
    {
        cases.push(case(format!("below {rule}"), value));
    }
    if let Some((hi, rule)) = hi
        && let Some(value) = encode_int(hi + 1, flavor)
    {
        cases.push(case(format!("above {rule}"), value));
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let outside = values.iter().filter_map(Value::as_i64).max().unwrap_or(0) as i128 + 1;
        if let Some(value) = encode_int(outside, flavor) {
            cases.push(case("not in the enum", value));
        }
    }
}

fn string_violations(schema: &Value, flavor: Flavor, cases: &mut Vec<Case>) {
    if flavor == Flavor::Json {
        cases.push(case("a number instead of a string", json!(12345)));
    }
    if schema.get("enum").is_some() {
        cases.push(case("not in the enum", json!("zz-not-a-listed-value")));
        return;
    }
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    let max = schema.get("maxLength").and_then(Value::as_u64);
    if min > 0 {
        let text = "a".repeat(min as usize - 1);
        cases.push(case(format!("shorter than minLength {min}"), json!(text)));
    }
    if let Some(max) = max.filter(|m| *m < LONGEST) {
        let text = "a".repeat(max as usize + 1);
        cases.push(case(format!("longer than maxLength {max}"), json!(text)));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        let fits = |c: &&&str| {
            let length = c.chars().count() as u64;
            let sendable = flavor != Flavor::Header || is_header_value(c);
            sendable && length >= min && max.is_none_or(|max| length <= max)
        };
        let breaker = PATTERN_BREAKERS
            .iter()
            .filter(fits)
            .find(|c| matches_pattern(schema, c) == Some(false));
        if let Some(breaker) = breaker {
            cases.push(case(
                format!("not matching pattern {pattern}"),
                json!(breaker),
            ));
        }
    }
}

/// Whether `text` can be sent as an HTTP header value as it is: visible
/// ASCII with inner spaces (a leading or trailing one would be trimmed).
fn is_header_value(text: &str) -> bool {
    text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) && text.trim() == text
}

/// Whether `text` matches the schema's pattern; `None` when there is no
/// pattern or it is not a valid ECMAScript regular expression.
pub fn matches_pattern(schema: &Value, text: &str) -> Option<bool> {
    let pattern = schema.get("pattern")?.as_str()?;
    let regex = regress::Regex::new(pattern).ok()?;
    Some(regex.find(text).is_some())
}

/// The schema's `type`.
pub fn type_of(schema: &Value) -> Option<&str> {
    schema.get("type")?.as_str()
}

/// The names the schema requires.
pub fn required(schema: &Value) -> Vec<String> {
    schema.as_object().map(required_names).unwrap_or_default()
}

fn number(schema: &Value, key: &str) -> Option<f64> {
    schema.get(key)?.as_f64()
}

/// An integer bound and the rule that sets it (`maximum 100`).
pub type Bound = Option<(i128, String)>;

/// The smallest and largest integer the schema allows, with the rule that
/// sets each: `minimum`/`maximum` (exclusive ones moved inwards), else the
/// range of its format.
pub fn int_bounds(schema: &Value) -> (Bound, Bound) {
    let format = match schema.get("format").and_then(Value::as_str) {
        Some("int32") => Some((i32::MIN as i128, i32::MAX as i128, "the int32 range")),
        Some("int64") => Some((i64::MIN as i128, i64::MAX as i128, "the int64 range")),
        _ => None,
    };
    let bound = |key: &str, exclusive: &str, step: i128| {
        let value = schema.get(key)?.as_i64()? as i128;
        let value = if schema.get(exclusive) == Some(&json!(true)) {
            value + step
        } else {
            value
        };
        Some((value, format!("{key} {value}")))
    };
    let lo = bound("minimum", "exclusiveMinimum", 1)
        .or_else(|| format.map(|(lo, _, rule)| (lo, rule.to_owned())));
    let hi = bound("maximum", "exclusiveMaximum", -1)
        .or_else(|| format.map(|(_, hi, rule)| (hi, rule.to_owned())));
    (lo, hi)
}

/// An integer as JSON (when JSON can hold it) or as text.
fn encode_int(value: i128, flavor: Flavor) -> Option<Value> {
    match flavor {
        Flavor::Text | Flavor::Header => Some(json!(value.to_string())),
        Flavor::Json => int_json(value),
    }
}

fn int_json(value: i128) -> Option<Value> {
    i64::try_from(value)
        .map(Value::from)
        .ok()
        .or_else(|| u64::try_from(value).ok().map(Value::from))
}

fn text(value: Value, flavor: Flavor) -> Value {
    match flavor {
        Flavor::Json => value,
        Flavor::Text | Flavor::Header => json!(value.to_string()),
    }
}

/// A value as it is written in a query string, path or header.
pub fn as_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side() -> (openapiv3::OpenAPI,) {
        (serde_json::from_value(json!({
            "openapi": "3.0.3",
            "info": {"title": "t", "version": "1"},
            "paths": {}
        }))
        .unwrap(),)
    }

    #[test]
    fn integers_break_at_their_bounds() {
        let (api,) = side();
        let side = Side::new(&api, "", crate::drift::canon::Mode::Probe);
        let schema = json!({"type": "integer", "format": "int32", "minimum": 1, "maximum": 100});
        let values: Vec<Value> = violations(&side, &schema, Flavor::Text)
            .into_iter()
            .map(|c| c.value)
            .collect();
        assert!(values.contains(&json!("0")));
        assert!(values.contains(&json!("101")));
        let edges: Vec<Value> = boundaries(&side, &schema, Flavor::Json)
            .into_iter()
            .map(|c| c.value)
            .collect();
        assert_eq!(edges, vec![json!(1), json!(100)]);
        assert_eq!(valid(&side, &schema), json!(1));
    }

    #[test]
    fn patterns_are_broken_by_a_fitting_string() {
        let (api,) = side();
        let side = Side::new(&api, "", crate::drift::canon::Mode::Probe);
        let schema = json!({"type": "string", "minLength": 1, "pattern": "^[^\\u0000-\\u001F\\u007F-\\u009F]*$"});
        let broken: Vec<Case> = violations(&side, &schema, Flavor::Json)
            .into_iter()
            .filter(|c| c.what.contains("pattern"))
            .collect();
        assert_eq!(broken.len(), 1);
        assert_eq!(
            matches_pattern(&schema, broken[0].value.as_str().unwrap()),
            Some(false)
        );
        assert_eq!(valid(&side, &schema), json!("a"));
    }
}
