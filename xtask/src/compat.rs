//! The compatibility gate: `cargo xtask openapi compat`.
//!
//! Released contracts are frozen in `openapi/released/petstore-X.Y.Z.yaml`.
//! The gate compares `openapi/petstore.yaml` with every released document of
//! the same major version and reports each change that can break a client
//! or a server built from the older document, one line per finding:
//!
//! ```text
//! paths./pets.get.parameters.limit.schema.maximum: 100 -> 50 (narrows what requests may send): breaking
//! ```
//!
//! Every finding is `breaking` or `compatible`; an edit with no finding at
//! all (descriptions, key order, YAML style) is *semantic-free*. On top, the
//! semver rule: `info.version` must be greater than every released version;
//! a compatible change needs at least a minor bump, a breaking one a new
//! major version — within the same major it fails the gate.
//!
//! It builds on the drift check's normalisation ([`canon`]): both documents
//! are parsed with `openapiv3`, references are resolved, annotations are
//! dropped and lists sorted, so only meaning is compared. The rules are in
//! [`rules`]; [`catalogue`] proves them on a catalogue of edits.
//!
//! Oxide's `drift` crate was measured on that catalogue
//! (`docs/compatibility.md`): it judges 14 of its 43 edits as the gate must,
//! the rules all of them, so the rules alone judge.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use openapiv3::OpenAPI;
use semver::Version;

use crate::drift::canon;
use crate::{openapi, workspace_root};

#[cfg(test)]
mod catalogue;
mod rules;

/// How a change affects clients and servers built from the older document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Nothing that a client or server could notice changed.
    SemanticFree,
    /// Something changed, and everything built from the older document
    /// keeps working.
    Compatible,
    /// Something built from the older document can break.
    Breaking,
}

impl Verdict {
    /// The smallest version bump the verdict needs.
    fn bump(self) -> &'static str {
        match self {
            Verdict::SemanticFree => "patch",
            Verdict::Compatible => "minor",
            Verdict::Breaking => "major",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::SemanticFree => "semantic-free",
            Verdict::Compatible => "compatible",
            Verdict::Breaking => "breaking",
        })
    }
}

/// One change between two documents.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// Where, as a dotted path into the newer document.
    pub location: String,
    /// What changed, and why it matters.
    pub message: String,
    /// Breaking or compatible.
    pub verdict: Verdict,
}

impl Finding {
    fn new(location: impl Into<String>, message: impl Into<String>, verdict: Verdict) -> Finding {
        let (location, message) = (location.into(), message.into());
        Finding {
            location,
            message,
            verdict,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.location, self.message, self.verdict)
    }
}

/// Every change from `old` to `new`, and the verdict over all of them.
pub fn compare(old: &OpenAPI, new: &OpenAPI) -> (Vec<Finding>, Verdict) {
    let old_side = canon::Side::new(old, "", canon::Mode::Probe);
    let new_side = canon::Side::new(new, "", canon::Mode::Probe);
    let findings = rules::compare(&old_side, &new_side);
    let verdict = findings.iter().map(|f| f.verdict).max();
    (findings, verdict.unwrap_or(Verdict::SemanticFree))
}

/// A released document.
pub struct Released {
    path: PathBuf,
    pub version: Version,
    pub api: OpenAPI,
}

/// The directory of released documents.
pub fn released_dir() -> PathBuf {
    workspace_root().join("openapi/released")
}

fn parse(path: &Path) -> anyhow::Result<(OpenAPI, Version)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let api: OpenAPI =
        serde_norway::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let version = Version::parse(&api.info.version)
        .with_context(|| format!("{}: info.version is not a semantic version", path.display()))?;
    Ok((api, version))
}

/// Every released document of `dir`, oldest first.
pub fn released(dir: &Path) -> anyhow::Result<Vec<Released>> {
    let mut released = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let (api, version) = parse(&path)?;
            let expected = format!("petstore-{version}.yaml");
            if path
                .file_name()
                .is_none_or(|name| name != expected.as_str())
            {
                bail!(
                    "{} holds version {version}; it must be named {expected}",
                    path.display()
                );
            }
            released.push(Released { path, version, api });
        }
    }
    released.sort_by(|a, b| a.version.cmp(&b.version));
    Ok(released)
}

/// What the gate concluded.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Every line to print, findings first.
    pub lines: Vec<String>,
    /// Why the gate fails; empty when it passes.
    pub failures: Vec<String>,
}

/// Runs the gate on the contract `new` (at `new_path`) against the released
/// documents in `dir`.
pub fn gate(new_path: &Path, dir: &Path) -> anyhow::Result<Outcome> {
    let (new, version) = parse(new_path)?;
    let released = released(dir)?;
    let mut outcome = Outcome::default();
    if released.is_empty() {
        outcome
            .failures
            .push(format!("no released document in {}", dir.display()));
    }
    for old in &released {
        let name = old.path.file_name().unwrap_or_default().to_string_lossy();
        let (findings, verdict) = compare(&old.api, &new);
        if version == old.version {
            if verdict != Verdict::SemanticFree {
                outcome.failures.push(format!(
                    "info.version {version} is released already ({name}) and the contract \
                     differs from it ({verdict}): bump info.version"
                ));
            } else {
                outcome
                    .lines
                    .push(format!("{name}: the contract is this release"));
            }
            continue;
        }
        if version < old.version {
            outcome.failures.push(format!(
                "info.version {version} is not greater than the released {}",
                old.version
            ));
            continue;
        }
        if version.major != old.version.major {
            outcome.lines.push(format!(
                "{name}: not compared (major version {} replaces {})",
                version.major, old.version.major
            ));
            continue;
        }
        outcome
            .lines
            .extend(findings.iter().map(|f| format!("{name}: {f}")));
        let needed = needed_version(&old.version, verdict);
        outcome.lines.push(format!(
            "{name}: {verdict} change; needs a {} bump (at least {needed}); info.version is {version}",
            verdict.bump()
        ));
        if verdict == Verdict::Breaking {
            outcome.failures.push(format!(
                "breaking changes against released {}: they need a new major version \
                 ({needed}), or must be undone",
                old.version
            ));
        } else if version < needed {
            outcome.failures.push(format!(
                "{verdict} changes against released {} need info.version {needed} or later, \
                 not {version}",
                old.version
            ));
        }
    }
    Ok(outcome)
}

/// The least version after `released` that a change of `verdict` allows.
fn needed_version(released: &Version, verdict: Verdict) -> Version {
    match verdict {
        Verdict::SemanticFree => Version::new(released.major, released.minor, released.patch + 1),
        Verdict::Compatible => Version::new(released.major, released.minor + 1, 0),
        Verdict::Breaking => Version::new(released.major + 1, 0, 0),
    }
}

/// Why the freeze rule fails, if it does: the contract's `info.version` must
/// have a frozen copy identical to it, byte for byte (each version that
/// lands is frozen in the same change), and no frozen copy may differ from
/// the bytes it was first committed with, or be gone (a release is never
/// edited). The history is git's; files not yet committed are new.
pub fn freeze_failures(root: &Path, contract: &Path, dir: &Path) -> anyhow::Result<Vec<String>> {
    let (_, version) = parse(contract)?;
    let mut failures = Vec::new();
    let frozen = dir.join(format!("petstore-{version}.yaml"));
    let shown = |path: &Path| {
        path.strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string()
    };
    match std::fs::read(&frozen) {
        Err(_) => failures.push(format!(
            "info.version {version} is not frozen: copy {} to {} in the same change",
            shown(contract),
            shown(&frozen)
        )),
        Ok(bytes) if bytes != std::fs::read(contract)? => failures.push(format!(
            "{} differs from {}: a released version is never edited; bump info.version and \
             freeze the new version",
            shown(&frozen),
            shown(contract)
        )),
        Ok(_) => {}
    }
    let relative = shown(dir);
    let added = git(
        root,
        &[
            "log",
            "--diff-filter=A",
            "--format=commit %H",
            "--name-only",
            "--",
            &relative,
        ],
    )?;
    let mut first_commit = std::collections::BTreeMap::new();
    let mut commit = "";
    for line in added.lines().filter(|line| !line.is_empty()) {
        match line.strip_prefix("commit ") {
            Some(hash) => commit = hash,
            // Newest first: the last commit seen for a file is its first.
            None => drop(first_commit.insert(line.to_owned(), commit.to_owned())),
        }
    }
    for (file, commit) in first_commit {
        let released = git(root, &["show", &format!("{commit}:{file}")])?;
        match std::fs::read(root.join(&file)) {
            Err(_) => failures.push(format!("{file} was released and is gone: restore it")),
            Ok(bytes) if bytes != released.as_bytes() => failures.push(format!(
                "{file} differs from the bytes it was released with (commit {}): a released \
                 version is never edited; restore it (`git checkout {commit} -- {file}`)",
                &commit[..12]
            )),
            Ok(_) => {}
        }
    }
    Ok(failures)
}

/// What `git args` prints, run in `root`.
pub(crate) fn git(root: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .context("running git (the freeze rule and `client semver` read the history)")?;
    if !output.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8(output.stdout).context("git printed something that is not UTF-8")
}

/// `cargo xtask openapi compat`.
pub fn check() -> anyhow::Result<()> {
    let contract = openapi::contract_path();
    let mut outcome = gate(&contract, &released_dir())?;
    outcome.failures.extend(freeze_failures(
        &workspace_root(),
        &contract,
        &released_dir(),
    )?);
    for line in &outcome.lines {
        println!("{line}");
    }
    if !outcome.failures.is_empty() {
        for failure in &outcome.failures {
            eprintln!("openapi compat: {failure}");
        }
        bail!("{} breaks the compatibility gate", contract.display());
    }
    println!(
        "openapi compat: {} passes against every released version",
        contract.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Released documents are frozen: each is pinned to the SHA-256 of its
    /// bytes as released. A changed digest means a released file was
    /// edited; undo the edit (releases are never changed).
    const RELEASED: &[(&str, &str)] = &[
        (
            "petstore-1.0.0.yaml",
            "47289000aff3a8661f7752e2a0b616e013f0f9fde5227e38c56f051de257d007",
        ),
        (
            "petstore-1.1.0.yaml",
            "4b3407b0d98458c0f2a7820a6bb26e181fb9e6ae33262bfdfb06384a5c81e1c2",
        ),
        (
            "petstore-1.2.0.yaml",
            "dfa4267492dfe656b3ae7909306a528043451904bc22e1edd9fc6adcb574383f",
        ),
        (
            "petstore-1.3.0.yaml",
            "17e8175f77d6ebd92f1521ed896398e69158c0f40a55800a7fd048c2b535e38a",
        ),
        (
            "petstore-1.4.0.yaml",
            "49a3b1db00c895a9744c3588af4ea64042bec1ce0aba44b2876454b6c78684cc",
        ),
        (
            "petstore-1.5.0.yaml",
            "cbb9f209bab3a9b103b2c9540e5d50941a216692880136a031fdba07b1c0889d",
        ),
        (
            "petstore-1.6.0.yaml",
            "a0f483760d2e6bc6ccd7946a1e2d9e4ef074221a1488b5e36701e0d7aea6eb2e",
        ),
        (
            "petstore-1.7.0.yaml",
            "4ca67c9d61e8a0b73a50db4a3edf180821d375b6e004a091abc1755a7c81b21c",
        ),
        (
            "petstore-1.7.1.yaml",
            "4ead7f8837dc103160f9e2c83539612877efcc63da066420a30abfafe2c5cace",
        ),
        (
            "petstore-1.7.2.yaml",
            "56209a8445d8b6f4816ef2c622998a598b1d17a208d28e3ef8da1fa591b79f68",
        ),
        (
            "petstore-1.7.3.yaml",
            "c018b8cbd2343843d40a01ec22dfff37044a5fc96c3594a1613d3b7cb99448a0",
        ),
        (
            "petstore-1.7.4.yaml",
            "0c04974f4bbef009db91d407bf58a76788ba140f6c8ae239abb623ba97ffd998",
        ),
    ];

    fn sha256(path: &Path) -> String {
        use sha2::Digest;
        let bytes = std::fs::read(path).unwrap();
        sha2::Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn released_documents_are_never_edited() {
        let dir = released_dir();
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let pinned: Vec<&str> = RELEASED.iter().map(|(name, _)| *name).collect();
        assert_eq!(on_disk, pinned, "every released file is pinned here");
        for (name, digest) in RELEASED {
            assert_eq!(&sha256(&dir.join(name)), digest, "{name} was edited");
        }
    }

    #[test]
    fn the_committed_contract_passes_the_gate() {
        let outcome = gate(&openapi::contract_path(), &released_dir()).unwrap();
        assert!(outcome.failures.is_empty(), "{outcome:#?}");
    }

    #[test]
    fn the_contract_is_frozen_and_no_release_was_edited() {
        let root = workspace_root();
        let failures = freeze_failures(&root, &openapi::contract_path(), &released_dir()).unwrap();
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// A repository of its own: `openapi/released/petstore-1.0.0.yaml`
    /// committed, and the contract at `version`.
    fn repository(version: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let released = root.path().join("openapi/released");
        std::fs::create_dir_all(&released).unwrap();
        let text = std::fs::read_to_string(released_dir().join("petstore-1.0.0.yaml")).unwrap();
        std::fs::write(released.join("petstore-1.0.0.yaml"), &text).unwrap();
        let contract = text.replacen("version: 1.0.0", &format!("version: {version}"), 1);
        std::fs::write(root.path().join("openapi/petstore.yaml"), contract).unwrap();
        let quiet = [
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ];
        for args in [
            &["init", "-q"][..],
            &["add", "."],
            &[&quiet[..], &["commit", "-qm", "1.0.0"]].concat(),
        ] {
            git(root.path(), args).unwrap();
        }
        root
    }

    fn failures_in(root: &Path) -> Vec<String> {
        let contract = root.join("openapi/petstore.yaml");
        freeze_failures(root, &contract, &root.join("openapi/released")).unwrap()
    }

    #[test]
    fn a_version_without_an_identical_frozen_copy_fails() {
        let root = repository("1.0.0");
        assert_eq!(failures_in(root.path()), Vec::<String>::new());

        let root = repository("1.1.0");
        let failures = failures_in(root.path());
        assert!(
            failures.len() == 1 && failures[0].contains("1.1.0 is not frozen"),
            "{failures:?}"
        );

        // The contract edited after its version was frozen.
        let root = repository("1.0.0");
        let contract = root.path().join("openapi/petstore.yaml");
        let edited = std::fs::read_to_string(&contract).unwrap() + "\n# edited\n";
        std::fs::write(&contract, edited).unwrap();
        let failures = failures_in(root.path());
        assert!(
            failures
                .iter()
                .any(|f| f.contains("differs from openapi/petstore.yaml")),
            "{failures:?}"
        );
    }

    #[test]
    fn a_released_file_edited_or_gone_fails() {
        let root = repository("1.1.0");
        let released = root.path().join("openapi/released");
        std::fs::copy(
            root.path().join("openapi/petstore.yaml"),
            released.join("petstore-1.1.0.yaml"),
        )
        .unwrap();
        // 1.1.0 frozen but not yet committed: new, and fine.
        assert_eq!(failures_in(root.path()), Vec::<String>::new());

        let frozen = released.join("petstore-1.0.0.yaml");
        let edited = std::fs::read_to_string(&frozen)
            .unwrap()
            .replace("Pet", "Animal");
        std::fs::write(&frozen, edited).unwrap();
        let failures = failures_in(root.path());
        assert!(
            failures
                .iter()
                .any(|f| f
                    .contains("petstore-1.0.0.yaml differs from the bytes it was released with")),
            "{failures:?}"
        );

        std::fs::remove_file(&frozen).unwrap();
        let failures = failures_in(root.path());
        assert!(
            failures
                .iter()
                .any(|f| f.contains("petstore-1.0.0.yaml was released and is gone")),
            "{failures:?}"
        );
    }

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    #[test]
    fn each_verdict_needs_its_bump() {
        let released = v("1.2.3");
        assert_eq!(needed_version(&released, Verdict::SemanticFree), v("1.2.4"));
        assert_eq!(needed_version(&released, Verdict::Compatible), v("1.3.0"));
        assert_eq!(needed_version(&released, Verdict::Breaking), v("2.0.0"));
    }
}
