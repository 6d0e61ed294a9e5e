//! Checks a JSON value the server sent against one of the YAML's
//! (canonical) schemas.

use serde_json::Value;

use super::values::{int_bounds, matches_pattern, required, type_of};
use crate::drift::canon::Side;

/// Every way in which `value` breaks `schema`, each as `at: problem`.
pub fn problems(side: &Side<'_>, schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(side, schema, value, "body", &mut out, 0);
    out
}

fn check(
    side: &Side<'_>,
    schema: &Value,
    value: &Value,
    at: &str,
    out: &mut Vec<String>,
    depth: usize,
) {
    if depth > 32 {
        return;
    }
    let schema = side.resolve(schema);
    let mut problem = |text: String| out.push(format!("{at}: {text}"));
    if value.is_null() {
        if type_of(&schema).is_some() && schema.get("nullable") != Some(&Value::Bool(true)) {
            problem("null, but the schema is not nullable".into());
        }
        return;
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        problem(format!(
            "{value} is not one of {}",
            Value::Array(values.clone())
        ));
    }
    match type_of(&schema) {
        Some("string") => match value.as_str() {
            None => problem(format!("{value} is not a string")),
            Some(text) => string(&schema, text, &mut problem),
        },
        Some("integer") => match value
            .as_i64()
            .map(i128::from)
            .or(value.as_u64().map(i128::from))
        {
            None => problem(format!("{value} is not an integer")),
            Some(number) => {
                let (lo, hi) = int_bounds(&schema);
                if let Some((lo, rule)) = lo.filter(|(lo, _)| number < *lo) {
                    problem(format!("{number} is below {rule} (lowest {lo})"));
                }
                if let Some((hi, rule)) = hi.filter(|(hi, _)| number > *hi) {
                    problem(format!("{number} is above {rule} (highest {hi})"));
                }
            }
        },
        Some("number") if !value.is_number() => problem(format!("{value} is not a number")),
        Some("boolean") if !value.is_boolean() => problem(format!("{value} is not a boolean")),
        Some("array") => match value.as_array() {
            None => problem(format!("{value} is not an array")),
            Some(items) => {
                let item_schema = schema.get("items").cloned().unwrap_or_default();
                for (index, item) in items.iter().enumerate() {
                    check(
                        side,
                        &item_schema,
                        item,
                        &format!("{at}[{index}]"),
                        out,
                        depth + 1,
                    );
                }
            }
        },
        Some("object") => match value.as_object() {
            None => problem(format!("{value} is not an object")),
            Some(object) => {
                for name in required(&schema) {
                    if !object.contains_key(&name) {
                        problem(format!("the required {name:?} is missing"));
                    }
                }
                let properties = schema.get("properties").and_then(Value::as_object);
                let extra = schema.get("additionalProperties");
                for (name, item) in object {
                    let at = format!("{at}.{name}");
                    match (properties.and_then(|p| p.get(name)), extra) {
                        (Some(property), _) => check(side, property, item, &at, out, depth + 1),
                        (None, Some(Value::Bool(false))) => {
                            out.push(format!("{at}: not a declared property"));
                        }
                        (None, Some(extra)) if extra.is_object() => {
                            check(side, extra, item, &at, out, depth + 1);
                        }
                        _ => {}
                    }
                }
            }
        },
        _ => combinations(side, &schema, value, at, out, depth),
    }
}

fn string(schema: &Value, text: &str, problem: &mut impl FnMut(String)) {
    let length = text.chars().count() as u64;
    if let Some(min) = schema
        .get("minLength")
        .and_then(Value::as_u64)
        .filter(|m| length < *m)
    {
        problem(format!("{length} characters, below minLength {min}"));
    }
    if let Some(max) = schema
        .get("maxLength")
        .and_then(Value::as_u64)
        .filter(|m| length > *m)
    {
        problem(format!("{length} characters, above maxLength {max}"));
    }
    if matches_pattern(schema, text) == Some(false) {
        problem(format!("{text:?} does not match the pattern"));
    }
}

fn combinations(
    side: &Side<'_>,
    schema: &Value,
    value: &Value,
    at: &str,
    out: &mut Vec<String>,
    depth: usize,
) {
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        for part in parts {
            check(side, part, value, at, out, depth + 1);
        }
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(parts) = schema.get(key).and_then(Value::as_array) {
            let fits = parts.iter().any(|part| {
                let mut scratch = Vec::new();
                check(side, part, value, at, &mut scratch, depth + 1);
                scratch.is_empty()
            });
            if !fits {
                out.push(format!("{at}: matches none of its {key} schemas"));
            }
        }
    }
}
