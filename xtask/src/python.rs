//! Python tools (validators, conformance testers) in a venv under `target/`,
//! installed from PyPI on first use, so nothing is installed system-wide.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::workspace_root;

/// A venv at `target/xtask-venv` holding `packages` (pinned requirement
/// strings); only what is missing is installed.
pub fn venv(packages: &[&str]) -> anyhow::Result<PathBuf> {
    let venv = workspace_root().join("target/xtask-venv");
    if !venv.join("bin/python").exists() {
        status(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .context("creating the Python venv (is python3 with venv installed?)")?;
    }
    let stamp = venv.join(format!(
        "installed-{}",
        packages.join("+").replace(['=', '<', '>'], "_")
    ));
    if !stamp.exists() {
        let mut pip = Command::new(venv.join("bin/pip"));
        pip.args(["install", "--quiet", "--disable-pip-version-check"])
            .args(packages);
        status(&mut pip).with_context(|| format!("pip install {}", packages.join(" ")))?;
        std::fs::write(&stamp, "")?;
    }
    Ok(venv)
}

/// Runs the venv's `tool` with `args`, failing on a non-zero exit.
pub fn run(venv: &Path, tool: &str, args: &[&OsStr]) -> anyhow::Result<()> {
    status(Command::new(venv.join("bin").join(tool)).args(args))
}

fn status(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}
