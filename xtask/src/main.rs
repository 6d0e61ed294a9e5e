//! Project automation, in plain Rust: `cargo xtask <command>` (`cargo xtask
//! help` lists the commands).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

mod client;
mod compat;
mod conformance;
mod drift;
mod openapi;
mod python;
#[cfg(test)]
mod yaml_edit;

/// Project automation for the pet store workspace.
#[derive(Parser)]
#[command(bin_name = "cargo xtask")]
enum Command {
    /// The contract, openapi/petstore.yaml
    #[command(subcommand)]
    Openapi(Openapi),
    /// The client generated from the contract (petstore-client)
    #[command(subcommand)]
    Client(Client),
    /// Run schemathesis against a server built from the tree
    Conformance,
    /// wrk load test of the release server next to a hyper ceiling (see BENCHMARKS.md);
    /// runs the petstore-bench crate with ARGS (`cargo xtask bench --help` lists them)
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum Openapi {
    /// Write the server's emitted OpenAPI document to target/openapi/emitted.json
    Emit,
    /// Validate openapi/petstore.yaml with openapi-spec-validator (venv in target/)
    Validate,
    /// Fail when openapi/petstore.yaml and the server disagree (the drift check)
    Check,
    /// Fail when openapi/petstore.yaml breaks a released contract (openapi/released/)
    Compat,
}

#[derive(Subcommand)]
enum Client {
    /// Regenerate the client, its mocks and its CLI from openapi/petstore.yaml
    Generate,
    /// Fail when the committed client, mocks or CLI are not what the YAML generates,
    /// or the client's version does not name the YAML's
    Check,
    /// Fail when the client breaks Rust's semver against its last release
    /// (petstore-client/RELEASED), with cargo-semver-checks
    Semver,
}

fn main() -> ExitCode {
    let result = match Command::parse() {
        Command::Openapi(Openapi::Emit) => openapi::emit(),
        Command::Openapi(Openapi::Validate) => openapi::validate(),
        Command::Openapi(Openapi::Check) => drift::check(),
        Command::Openapi(Openapi::Compat) => compat::check(),
        Command::Client(Client::Generate) => client::generate(),
        Command::Client(Client::Check) => client::check(),
        Command::Client(Client::Semver) => client::semver(),
        Command::Conformance => conformance::run(),
        Command::Bench { args } => bench(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask bench ARGS`: `cargo run --release -p petstore-bench --
/// ARGS`, the bench being a crate of its own. Optimised: besides driving
/// wrk, the bench is itself a client of the server (the steady creates, the
/// webhook receiver, the long-poll followers) on the same two cores, and a
/// debug build of it took the CPU the server needed.
fn bench(args: &[String]) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .current_dir(workspace_root())
        .args(["run", "--quiet", "--release", "-p", "petstore-bench", "--"])
        .args(args)
        .status()
        .context("running cargo run --release -p petstore-bench")?;
    if !status.success() {
        anyhow::bail!("the bench failed ({status})");
    }
    Ok(())
}

/// The workspace root (the parent of this crate's directory).
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Command::command().debug_assert();
    }
}
