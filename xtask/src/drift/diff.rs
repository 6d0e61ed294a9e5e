//! The differ: walks two canonical trees side by side and reports every
//! facet that differs, with its location.
//!
//! Component references (`{"$ref": "Name"}`) are resolved lazily: the same
//! component on both sides is taken as equal here (it is compared once,
//! under `components.schemas`), while a reference facing an inline schema,
//! or references to differently named components, are expanded and compared
//! by content — so moving a schema into a component is not a difference.

use serde_json::{Map, Value};

use super::Difference;
use super::canon::{Side, ref_name};

/// How deep references are expanded before comparing them as they stand.
const MAX_DEPTH: usize = 32;

/// Compares canonical trees of the YAML's side and the server's side.
pub struct Differ<'a> {
    yaml: &'a Side<'a>,
    server: &'a Side<'a>,
    /// Pairs of references being expanded (recursive schemas end here).
    expanding: Vec<(Option<String>, Option<String>)>,
    /// What differs so far.
    pub differences: Vec<Difference>,
}

impl<'a> Differ<'a> {
    /// A differ resolving references on each side in its own components.
    pub fn new(yaml: &'a Side<'a>, server: &'a Side<'a>) -> Differ<'a> {
        Differ {
            yaml,
            server,
            expanding: Vec::new(),
            differences: Vec::new(),
        }
    }

    /// Compares the values of `key` under `location` on both sides.
    pub fn values(&mut self, location: &str, key: &str, yaml: &Value, server: &Value) {
        let (yaml_ref, server_ref) = (ref_name(yaml), ref_name(server));
        if yaml_ref.is_some() || server_ref.is_some() {
            self.references(location, key, yaml, server);
            return;
        }
        match (yaml, server) {
            (Value::Object(y), Value::Object(s)) => self.objects(&join(location, key), y, s),
            (Value::Array(y), Value::Array(s))
                if y.len() == s.len() && y.iter().chain(s).all(Value::is_object) =>
            {
                for (index, (y, s)) in y.iter().zip(s).enumerate() {
                    self.values(&join(location, key), &format!("[{index}]"), y, s);
                }
            }
            _ if yaml != server => self.leaf(location, key, Some(yaml), Some(server)),
            _ => {}
        }
    }

    /// Compares two objects key by key.
    pub fn objects(
        &mut self,
        location: &str,
        yaml: &Map<String, Value>,
        server: &Map<String, Value>,
    ) {
        let mut keys: Vec<&String> = yaml.keys().chain(server.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            match (yaml.get(key), server.get(key)) {
                (Some(y), Some(s)) => self.values(location, key, y, s),
                (y, s) => self.leaf(location, key, y, s),
            }
        }
    }

    /// Records that `key` differs: `location: key: yaml X, server Y`.
    pub fn leaf(
        &mut self,
        location: &str,
        key: &str,
        yaml: Option<&Value>,
        server: Option<&Value>,
    ) {
        self.differences.push(Difference::new(
            location,
            format!("{key}: yaml {}, server {}", show(yaml), show(server)),
        ));
    }

    fn references(&mut self, location: &str, key: &str, yaml: &Value, server: &Value) {
        let (yaml_ref, server_ref) = (ref_name(yaml), ref_name(server));
        if let (Some(y), Some(s)) = (yaml_ref, server_ref)
            && y == s
            && self.yaml.schemas.contains_key(y)
            && self.server.schemas.contains_key(s)
        {
            // The shared component is compared under components.schemas;
            // here only what is laid over the reference (e.g. `nullable`).
            let siblings = |v: &Value| {
                let mut map = v.as_object().cloned().unwrap_or_default();
                map.remove("$ref");
                map
            };
            if siblings(yaml) != siblings(server) {
                self.objects(&join(location, key), &siblings(yaml), &siblings(server));
            }
            return;
        }
        let pair = (yaml_ref.map(str::to_owned), server_ref.map(str::to_owned));
        if self.expanding.contains(&pair) {
            // A recursive schema came back to a pair already being compared:
            // any difference is reported where the recursion started.
            return;
        }
        let expanded_yaml = self.yaml.expand(yaml);
        let expanded_server = self.server.expand(server);
        let unresolved = (yaml_ref.is_some() && expanded_yaml.is_none())
            || (server_ref.is_some() && expanded_server.is_none());
        if unresolved || self.expanding.len() >= MAX_DEPTH {
            if yaml != server {
                self.leaf(location, key, Some(yaml), Some(server));
            }
            return;
        }
        self.expanding.push(pair);
        let yaml = expanded_yaml.unwrap_or_else(|| yaml.clone());
        let server = expanded_server.unwrap_or_else(|| server.clone());
        self.values(location, key, &yaml, &server);
        self.expanding.pop();
    }
}

/// `location.key`, or `key` at the top.
pub fn join(location: &str, key: &str) -> String {
    match (location.is_empty(), key.starts_with('[')) {
        (true, _) => key.to_owned(),
        (false, true) => format!("{location}{key}"),
        (false, false) => format!("{location}.{key}"),
    }
}

/// A value as a short line of JSON; `absent` when there is none.
pub fn show(value: Option<&Value>) -> String {
    const LONGEST: usize = 120;
    let Some(value) = value else {
        return "absent".into();
    };
    let text = value.to_string();
    if text.chars().count() <= LONGEST {
        text
    } else {
        let cut: String = text.chars().take(LONGEST).collect();
        format!("{cut}…")
    }
}
