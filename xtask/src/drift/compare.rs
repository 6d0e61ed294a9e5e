//! The static half: the YAML against the document the server emits.

use std::collections::BTreeSet;

use openapiv3::Response;
use serde_json::{Value, json};

use super::Difference;
use super::canon::{Op, Side, is_error};
use super::diff::Differ;

/// Every facet in which the two documents differ.
pub fn documents(yaml: &Side<'_>, server: &Side<'_>) -> Vec<Difference> {
    let mut differ = Differ::new(yaml, server);
    differ.values(
        "info",
        "version",
        &json!(yaml.api.info.version),
        &json!(server.api.info.version),
    );
    differ.values("tags", "names", &tag_names(yaml), &tag_names(server));
    components(&mut differ, yaml, server);
    operations(&mut differ, yaml, server);
    differ.differences
}

fn tag_names(side: &Side<'_>) -> Value {
    let names: BTreeSet<&str> = side.api.tags.iter().map(|t| t.name.as_str()).collect();
    json!(names)
}

/// Component schemas that both sides name. A component on one side only is
/// not a difference by itself: whether a schema is named or written inline
/// is representation, and every use of it is compared where it is used.
fn components(differ: &mut Differ<'_>, yaml: &Side<'_>, server: &Side<'_>) {
    for (name, schema) in &yaml.schemas {
        if let Some(other) = server.schemas.get(name) {
            differ.values("components.schemas", name, schema, other);
        }
    }
}

fn operations(differ: &mut Differ<'_>, yaml: &Side<'_>, server: &Side<'_>) {
    let yaml_ops = yaml.operations();
    let server_ops = server.operations();
    let paths: BTreeSet<&String> = yaml_ops
        .keys()
        .chain(server_ops.keys())
        .map(|(p, _)| p)
        .collect();
    for path in paths {
        let methods = |ops: &std::collections::BTreeMap<(String, &'static str), Op<'_>>| {
            let methods: Vec<&str> = ops
                .keys()
                .filter(|(p, _)| p == path)
                .map(|(_, m)| *m)
                .collect();
            methods
        };
        let (yaml_methods, server_methods) = (methods(&yaml_ops), methods(&server_ops));
        if yaml_methods.is_empty() || server_methods.is_empty() {
            let listed = |m: &Vec<&str>| (!m.is_empty()).then(|| json!(m));
            differ.leaf(
                "paths",
                path,
                listed(&yaml_methods).as_ref(),
                listed(&server_methods).as_ref(),
            );
            continue;
        }
        let location = format!("paths.{path}");
        let all: BTreeSet<&str> = yaml_methods
            .iter()
            .chain(&server_methods)
            .copied()
            .collect();
        for method in all {
            let key = (path.clone(), method);
            match (yaml_ops.get(&key), server_ops.get(&key)) {
                (Some(y), Some(s)) => {
                    differ.values(&location, method, &yaml.operation(y), &server.operation(s));
                    errors(differ, yaml, y, server, s);
                }
                (y, s) => {
                    let id = |op: Option<&Op<'_>>| {
                        op.map(|op| json!({"operationId": op.operation.operation_id}))
                    };
                    differ.leaf(&location, method, id(y).as_ref(), id(s).as_ref());
                }
            }
        }
    }
}

/// Error responses. The server writes them as `4XX`/`5XX` ranges referring
/// to one `Error` response; the YAML lists each status. Each status the
/// YAML declares must be covered by a server response (its own code or its
/// range) with the same content, and each server error response must be
/// matched by at least one YAML status of its class. Whether the server
/// really answers each declared status, and with the headers the YAML
/// declares for it, is probed.
fn errors(
    differ: &mut Differ<'_>,
    yaml: &Side<'_>,
    yaml_op: &Op<'_>,
    server: &Side<'_>,
    server_op: &Op<'_>,
) {
    let location = format!("{}.responses", yaml_op.location());
    let yaml_errors = only_errors(yaml.responses(yaml_op.operation));
    let server_errors = only_errors(server.responses(server_op.operation));
    for (key, response) in &yaml_errors {
        let matching = server_errors
            .iter()
            .find(|(k, _)| k == key)
            .or_else(|| server_errors.iter().find(|(k, _)| covers(k, key)));
        match matching {
            Some((server_key, server_response)) => {
                let label = if server_key == key {
                    key.clone()
                } else {
                    format!("{key} (server {server_key})")
                };
                differ.values(
                    &location,
                    &label,
                    &yaml.error_response_json(response),
                    &server.error_response_json(server_response),
                );
            }
            None => differ.differences.push(Difference::new(
                &location,
                format!(
                    "{key}: yaml declares it, server declares neither {key} nor {}XX",
                    class(key)
                ),
            )),
        }
    }
    for (key, _) in &server_errors {
        if !yaml_errors
            .iter()
            .any(|(k, _)| covers(key, k) || covers(k, key))
        {
            differ.differences.push(Difference::new(
                &location,
                format!(
                    "{key}: server declares it, yaml declares no {}xx error",
                    class(key)
                ),
            ));
        }
    }
}

/// Whether the response key `wide` (`4XX` or `404`) covers the key `narrow`.
fn covers(wide: &str, narrow: &str) -> bool {
    wide == narrow || (wide.ends_with("XX") && class(wide) == class(narrow))
}

fn class(key: &str) -> &str {
    &key[..1]
}

fn only_errors(responses: Vec<(String, &Response)>) -> Vec<(String, &Response)> {
    responses
        .into_iter()
        .filter(|(key, _)| is_error(key))
        .collect()
}
