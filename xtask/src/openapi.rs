//! The OpenAPI document: the hand-written contract and the one the server emits.

use std::path::PathBuf;

use anyhow::Context;

use crate::{python, workspace_root};

/// The hand-written contract, the source of truth.
pub fn contract_path() -> PathBuf {
    workspace_root().join("openapi/petstore.yaml")
}

/// The document the server emits from its API trait (the interface crate
/// alone: no server is started).
pub fn emitted() -> serde_json::Value {
    petstore_api::openapi_document()
}

/// Writes the document emitted from the API trait to `target/openapi/emitted.json`.
pub fn emit() -> anyhow::Result<()> {
    let dir = workspace_root().join("target/openapi");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("emitted.json");
    let document = emitted();
    std::fs::write(&path, serde_json::to_string_pretty(&document)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("{}", path.display());
    Ok(())
}

/// Validates the contract against the OpenAPI 3.0 specification.
pub fn validate() -> anyhow::Result<()> {
    let venv = python::venv(&["openapi-spec-validator==0.8.5"])?;
    let contract = contract_path();
    python::run(&venv, "openapi-spec-validator", &[contract.as_os_str()])
        .with_context(|| format!("{} is not a valid OpenAPI document", contract.display()))
}
