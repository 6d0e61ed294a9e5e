//! Turns the committed contract into the two JSON documents the server
//! serves (`/openapi.json`, and the docs page's copy with this server
//! listed first), so that the server parses no YAML when it runs.

use std::path::PathBuf;

const CONTRACT: &str = "../openapi/petstore.yaml";

fn main() {
    println!("cargo::rerun-if-changed={CONTRACT}");
    let yaml = std::fs::read_to_string(CONTRACT).expect("the committed contract is readable");
    let mut contract: serde_json::Value =
        serde_norway::from_str(&yaml).expect("the committed contract is valid YAML");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let json = serde_json::to_string_pretty(&contract).expect("JSON always serialises");
    std::fs::write(out.join("petstore.json"), json).expect("OUT_DIR is writable");
    let this_server = serde_json::json!({"url": "/v1", "description": "This server"});
    match contract["servers"].as_array_mut() {
        Some(servers) => servers.insert(0, this_server),
        None => contract["servers"] = serde_json::json!([this_server]),
    }
    let page = serde_json::to_string(&contract).expect("JSON always serialises");
    std::fs::write(out.join("docs-page.json"), page).expect("OUT_DIR is writable");
}
