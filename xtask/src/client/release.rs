//! The client's version and its releases.
//!
//! `petstore-client` has a version of its own, which follows Rust's semver
//! for the crate, with the contract's `info.version` as its build metadata:
//! `2.0.0+1.5.0` is the crate's 2.0.0, generated from contract 1.5.0.
//! [`check_names_contract`] (run by `client check`) fails when the build
//! metadata is not the contract's version, so that a new contract cannot be
//! generated without a new release of the client being named.
//!
//! [`semver`] (`client semver`) runs cargo-semver-checks on the tree's
//! client against its last release, named in `petstore-client/RELEASED` by
//! version and commit (a commit of this history, since CI works on a fresh
//! clone, where a tag may not be): a change that breaks the crate under
//! Rust's semver without a new major version fails (cargo-semver-checks
//! judges breakage; that an addition is a minor version is the author's).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail, ensure};
use semver::Version;

use crate::compat::git;
use crate::workspace_root;

/// The client's manifest, relative to the workspace root.
const MANIFEST: &str = "petstore-client/Cargo.toml";
/// The client's last release, relative to the workspace root.
const RELEASED: &str = "petstore-client/RELEASED";

/// The `package.version` of a manifest's text.
fn version_of(manifest: &str) -> anyhow::Result<Version> {
    let manifest: toml::Table = toml::from_str(manifest).context("not TOML")?;
    let version = manifest
        .get("package")
        .and_then(|package| package.get("version"))
        .and_then(|version| version.as_str())
        .context("no `package.version` string (the client's version is its own)")?;
    Version::parse(version).with_context(|| format!("{version} is not a semantic version"))
}

/// The tree's client version.
fn current(root: &Path) -> anyhow::Result<Version> {
    let path = root.join(MANIFEST);
    let manifest =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    version_of(&manifest).context(MANIFEST)
}

/// Fails unless the client's version has `contract` (the contract's
/// `info.version`) as its build metadata.
pub fn check_names_contract(contract: &str) -> anyhow::Result<()> {
    let version = current(&workspace_root())?;
    if version.build.as_str() != contract {
        bail!(
            "{MANIFEST}: version {version} does not name the contract it is generated from, \
             {contract}: its build metadata must be the contract's version. A new contract is \
             a new release of the client: set its version to the next one Rust's semver \
             allows, `+{contract}` (e.g. {}.{}.0+{contract} for an addition), and say what \
             changed in petstore-client/CHANGELOG.md",
            version.major,
            version.minor + 1,
        );
    }
    println!("{MANIFEST}: version {version} names contract {contract}");
    Ok(())
}

/// What `petstore-client/RELEASED` records: the last release's version and
/// its commit.
fn released(root: &Path) -> anyhow::Result<(Version, String)> {
    let path = root.join(RELEASED);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'));
    let (Some(line), None) = (lines.next(), lines.next()) else {
        bail!("{RELEASED}: expected one line `VERSION COMMIT` besides comments");
    };
    let Some((version, commit)) = line.split_once(' ') else {
        bail!("{RELEASED}: expected `VERSION COMMIT`, found {line:?}");
    };
    let commit = commit.trim();
    ensure!(
        commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{RELEASED}: {commit:?} is not a full commit hash"
    );
    let version =
        Version::parse(version).with_context(|| format!("{RELEASED}: version {version}"))?;
    Ok((version, commit.to_owned()))
}

/// `cargo xtask client semver`: cargo-semver-checks on the tree's client
/// against its last release.
pub fn semver() -> anyhow::Result<()> {
    let root = workspace_root();
    let (released, commit) = released(&root)?;
    git(&root, &["merge-base", "--is-ancestor", &commit, "HEAD"]).with_context(|| {
        format!(
            "{RELEASED}: {commit} is not a commit of this history (was the release rebased \
             or squashed when it landed? name the commit it has here)"
        )
    })?;
    let then = version_of(&git(&root, &["show", &format!("{commit}:{MANIFEST}")])?)
        .with_context(|| format!("{MANIFEST} at {commit}"))?;
    ensure!(
        then == released,
        "{RELEASED} names {released}, but at {commit} the client's version is {then}"
    );
    let now = current(&root)?;
    ensure!(
        now.cmp_precedence(&released).is_ge(),
        "{MANIFEST}: version {now} is below the last release, {released}"
    );
    let numbers = |v: &Version| (v.major, v.minor, v.patch, v.pre.clone());
    ensure!(
        now == released || numbers(&now) != numbers(&released),
        "{MANIFEST}: version {now} differs from the release {released} in its build \
         metadata alone: a registry takes a version once whatever its build metadata, so a \
         new contract needs a new version number"
    );

    println!("petstore-client {now} against its last release, {released} ({commit}):");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&root)
        .args([
            "semver-checks",
            "check-release",
            "--package",
            "petstore-client",
        ])
        .args(["--baseline-rev", &commit, "--all-features"])
        .status()
        .context("running cargo semver-checks")?;
    ensure!(
        status.success(),
        "cargo semver-checks failed ({status}): the client's changes since {released} need \
         a greater version than {now} under Rust's semver (or cargo-semver-checks is not \
         installed: `cargo install --locked cargo-semver-checks`)"
    );
    Ok(())
}
