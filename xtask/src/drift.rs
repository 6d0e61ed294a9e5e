//! The drift check: `cargo xtask openapi check` fails whenever
//! `openapi/petstore.yaml` and the server disagree.
//!
//! It works in two halves, both driven by the YAML:
//!
//! - [`compare`]: the document the server emits from its API trait and the
//!   YAML are parsed with `openapiv3`, normalised by [`canon`] (so that only
//!   meaning is left: no descriptions, no key order, references resolved) and
//!   compared facet by facet by [`diff`].
//! - [`probe`]: what the emitted document cannot carry and schemathesis
//!   does not check — query defaults, an open operation answering without a
//!   key, 413 and 503 declared, `null` for optional properties, the error
//!   body's `status` — is asked of a real server started in-process, every
//!   expected answer read from the YAML (the module says what is kept, and
//!   why).
//!
//! [`check_contract`] takes the YAML as text, so the mutation table
//! (`mutations`) can feed it edited copies.

use std::fmt;

use anyhow::{Context, bail};
use openapiv3::OpenAPI;

use crate::openapi;

pub(crate) mod canon;
mod compare;
mod diff;
#[cfg(test)]
mod mutations;
mod probe;

/// One way in which the YAML and the server disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// Where, as a dotted path into the YAML (`paths./pets.get.parameters.limit`).
    pub location: String,
    /// What differs, naming the YAML's and the server's side.
    pub message: String,
}

impl Difference {
    /// A difference at `location`.
    pub fn new(location: impl Into<String>, message: impl Into<String>) -> Difference {
        Difference {
            location: location.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// The outcome of a drift check.
#[derive(Debug, Default)]
pub struct Report {
    /// Every disagreement found; the check fails when there is any.
    pub differences: Vec<Difference>,
    /// Informational lines: what was declared but could not be probed.
    pub notes: Vec<String>,
    /// How many requests the probes sent.
    pub requests: usize,
}

/// `cargo xtask openapi check`: runs [`check_contract`] on the committed
/// YAML, prints every difference on its own line and fails if there is any.
pub fn check() -> anyhow::Result<()> {
    let path = openapi::contract_path();
    let yaml =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let report = runtime.block_on(check_contract(&yaml))?;
    for note in &report.notes {
        println!("info: {note}");
    }
    for difference in &report.differences {
        println!("{difference}");
    }
    if !report.differences.is_empty() {
        bail!(
            "{} difference(s) between {} and the server",
            report.differences.len(),
            path.display()
        );
    }
    println!(
        "openapi check: {} and the server agree ({} probe requests)",
        path.display(),
        report.requests
    );
    Ok(())
}

/// Compares the contract `yaml` with the server: its emitted document
/// statically, then its behaviour by probing a server started for the
/// purpose. Errors only when the check itself cannot run (the YAML does not
/// parse, the server does not start).
pub async fn check_contract(yaml: &str) -> anyhow::Result<Report> {
    let contract: OpenAPI = serde_norway::from_str(yaml).context("parsing the contract YAML")?;
    let emitted: OpenAPI =
        serde_json::from_value(openapi::emitted()).context("parsing the emitted document")?;
    let mut report = Report::default();
    let prefix = canon::path_prefix(&contract, &mut report.differences);
    let yaml_side = canon::Side::new(&contract, "", canon::Mode::Compare);
    let server_side = canon::Side::new(&emitted, &prefix, canon::Mode::Compare);
    report
        .differences
        .extend(compare::documents(&yaml_side, &server_side));
    let probed_side = canon::Side::new(&contract, "", canon::Mode::Probe);
    probe::run(&probed_side, &prefix, &mut report).await?;
    Ok(report)
}
