//! Edits of a parsed copy of a contract, for the tables that prove the drift
//! check and the compatibility gate. A place is a dotted path
//! (`paths./pets.get.parameters.limit.schema`) in which a list is entered by
//! the `name` of an element (parameters). Each edit fails loudly when what it
//! edits is missing, or what it adds is there already, so that no edit can
//! silently turn into no change.

use serde_norway::Value;

use crate::openapi;

/// The committed contract's text.
pub fn contract_text() -> String {
    std::fs::read_to_string(openapi::contract_path()).expect("the committed contract")
}

/// A YAML text (a fragment or a whole document), parsed.
pub fn yaml(text: &str) -> Value {
    serde_norway::from_str(text).expect("YAML")
}

/// The value at `path`, which must exist.
pub fn at<'a>(doc: &'a mut Value, path: &str) -> &'a mut Value {
    let keys = path.split('.').filter(|key| !key.is_empty());
    keys.fold(doc, |value, key| {
        let found = match value {
            Value::Sequence(items) => items.iter_mut().find(|item| item["name"] == key),
            value => value.get_mut(key),
        };
        found.unwrap_or_else(|| panic!("no {key:?} in {path:?}"))
    })
}

/// Replaces the value at `path`, which must exist.
pub fn set(doc: &mut Value, path: &str, value: impl Into<Value>) {
    *at(doc, path) = value.into();
}

/// Adds the key at the end of `path` to its mapping; the key must be new.
pub fn insert(doc: &mut Value, path: &str, value: impl Into<Value>) {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    let mapping = at(doc, parent).as_mapping_mut().expect("a mapping");
    assert!(
        mapping.insert(key.into(), value.into()).is_none(),
        "{path} exists"
    );
}

/// Removes what `path` names, which must exist, and returns it.
pub fn remove(doc: &mut Value, path: &str) -> Value {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    let removed = match at(doc, parent) {
        Value::Sequence(items) => {
            let index = items.iter().position(|item| item["name"] == key);
            index.map(|index| items.remove(index))
        }
        value => value
            .as_mapping_mut()
            .and_then(|mapping| mapping.remove(key)),
    };
    removed.unwrap_or_else(|| panic!("no {path}"))
}

/// The list at `path`.
pub fn list<'a>(doc: &'a mut Value, path: &str) -> &'a mut Vec<Value> {
    at(doc, path).as_sequence_mut().expect("a list")
}
