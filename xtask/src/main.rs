//! Project automation, in plain Rust: `cargo xtask <command>`.
//!
//! - `openapi emit`: write the document the server emits to
//!   `target/openapi/emitted.json`.
//! - `openapi validate`: validate `openapi/petstore.yaml` with a real
//!   OpenAPI 3.0 validator (`openapi-spec-validator`, in a venv under `target/`).
//! - `openapi check`: the drift check between the contract and the server.
//! - `openapi compat`: the compatibility gate against the released contracts.
//! - `client generate` / `client check`: the progenitor-generated client, its
//!   mocks and its command line.
//! - `conformance`: schemathesis against a server built from the tree.

use std::path::PathBuf;
use std::process::ExitCode;

mod bench;
mod client;
mod compat;
mod conformance;
mod drift;
mod openapi;
mod python;
mod readiness;
#[cfg(test)]
mod yaml_edit;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  openapi emit       write the server's emitted OpenAPI document to target/openapi/emitted.json
  openapi validate   validate openapi/petstore.yaml with openapi-spec-validator (venv in target/)
  openapi check      fail when openapi/petstore.yaml and the server disagree (the drift check)
  openapi compat     fail when openapi/petstore.yaml breaks a released contract (openapi/released/)
  client generate    regenerate the client, its mocks and its CLI from openapi/petstore.yaml
  client check       fail when the committed client, mocks or CLI are not what the YAML generates
  conformance        run schemathesis against a server built from the tree
  bench [OPTIONS]    wrk load test of the release server next to a hyper ceiling (bench --help)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["openapi", "emit"] => openapi::emit(),
        ["openapi", "validate"] => openapi::validate(),
        ["openapi", "check"] => drift::check(),
        ["openapi", "compat"] => compat::check(),
        ["client", "generate"] => client::generate(),
        ["client", "check"] => client::check(),
        ["conformance"] => conformance::run(),
        ["bench", rest @ ..] => bench::run(rest),
        ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the parent of this crate's directory).
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}
