//! Edits of a parsed copy of a contract, for the tests that prove the drift
//! check and the compatibility gate: each edit fails loudly when a key it
//! edits is missing, so no edit can silently turn into no change.

use serde_yaml::{Mapping, Value};

use crate::openapi;

/// The committed contract's text.
pub fn contract_text() -> String {
    std::fs::read_to_string(openapi::contract_path()).expect("the committed contract")
}

/// The committed contract, parsed.
pub fn contract() -> Value {
    serde_yaml::from_str(&contract_text()).expect("the contract parses")
}

/// A YAML fragment, parsed.
pub fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).expect("a YAML fragment")
}

/// The value at `path` (mapping keys), which must exist.
pub fn at<'a>(doc: &'a mut Value, path: &[&str]) -> &'a mut Value {
    path.iter().fold(doc, |value, key| {
        value
            .get_mut(*key)
            .unwrap_or_else(|| panic!("the contract has no {key:?} in {path:?}"))
    })
}

/// The mapping at `path`, which must exist.
pub fn map<'a>(doc: &'a mut Value, path: &[&str]) -> &'a mut Mapping {
    at(doc, path).as_mapping_mut().expect("a mapping")
}

/// The parameter `name` of an operation.
pub fn param<'a>(doc: &'a mut Value, path: &str, method: &str, name: &str) -> &'a mut Value {
    at(doc, &["paths", path, method, "parameters"])
        .as_sequence_mut()
        .expect("a parameter list")
        .iter_mut()
        .find(|p| p["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("{method} {path} has no parameter {name}"))
}
