//! `cargo xtask conformance`: schemathesis against a server built from the tree.
//!
//! Builds `petstore-server`, starts it as a child process on a free loopback
//! port with a fresh temporary SQLite database and a freshly generated API
//! key, waits until it answers an authenticated request, runs schemathesis
//! with `openapi/petstore.yaml` as the schema, and always stops the server,
//! also when something failed. Any schemathesis failure or warning fails the
//! command, and so does anything needed being missing (python3, pip, cargo,
//! the `kill` command): nothing is skipped.
//!
//! What runs (the settings are in [`CONFIG`], written next to the reports in
//! `target/conformance/`):
//!
//! - **Every check** schemathesis has (`checks.enabled = true`), none
//!   excluded: `not_a_server_error`, `status_code_conformance`,
//!   `content_type_conformance`, `response_headers_conformance`,
//!   `response_schema_conformance`, `negative_data_rejection`,
//!   `positive_data_acceptance`, `missing_required_header`,
//!   `unsupported_method`, `allow_header_conformance`, `use_after_free`,
//!   `ensure_resource_availability`, `ignored_auth`,
//!   `object_level_authorization`, and `max_response_time` at its default
//!   10 s per response (no tighter bound is set: the server is a debug build
//!   on a 2-core machine that may be busy building, so latency here says
//!   little). `positive_data_acceptance` also accepts `422`: a schema-valid
//!   create whose `Idempotency-Key` was used before for another body gets
//!   it, by contract, and the generator does reuse short keys.
//! - **Every phase**: examples (the contract has none for inputs, so it
//!   skips), coverage (boundary and invalid values, unexpected methods,
//!   duplicated query parameters), fuzzing, and stateful testing over the
//!   links schemathesis infers (`POST /pets` → `GET /pets/{petId}`, …).
//! - Positive and negative data, a fixed budget and a fixed seed, one
//!   worker, and no example database or crash cache carried over from
//!   earlier runs, so a run is reproducible and takes one to two minutes.
//! - `placeOrder` names an animal, and a random `petId` names none (or
//!   one not available): before the run, [`STOCK`] available animals are
//!   created, and half of the generated orders name one of them (a
//!   schemathesis dictionary on `body.petId`), so that its positive cases
//!   can succeed.
//! - The webhook operations name a subscription: [`WEBHOOKS`] are created
//!   before the run (the server admits loopback targets for it, and
//!   [`WEBHOOK_TARGET`] is one), and half of the generated requests name
//!   one of them, half of the created subscriptions point at that target,
//!   and half of the replays start at the first event.
//! - Warnings fail the run (`warnings.fail-on`): without that, a key the
//!   server refuses would give a "passing" run in which every request got
//!   401. The opt-in `low_valid_rate` warning stays off: it measures how
//!   often random `petId`s hit an animal (a 404 is the right answer when
//!   they do not), which is about the generator, not the contract.
//!
//! Requests outside the contract — a method the path does not have, a path
//! the API does not have — are answered by dropshot's router before any
//! handler runs: 405 (with `Allow`) or 404, with dropshot's own body
//! `{request_id, message}` rather than the contract's `Error`. The
//! `unsupported_method` check passes on them (it asks for 405 and `Allow`),
//! and the contract documents no 405, so no schema applies to that body.
//! dropshot 0.18 has no hook for the router's errors; making them
//! contract-shaped would take an unpublished catch-all endpoint per method
//! and path in the API trait, which is more machinery than the gap is
//! worth. So nothing is excluded for it and nothing is declared for it.

use std::fs::File;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use petstore_support::Service;

use crate::{openapi, python, workspace_root};

/// The schemathesis release the run is pinned to.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// The environment variable through which schemathesis gets the key: the
/// key stays out of process listings and out of the config file.
const KEY_VARIABLE: &str = "PETSTORE_CONFORMANCE_KEY";

/// Available animals created before the run, for `placeOrder` to order.
const STOCK: usize = 300;

/// Webhook subscriptions created before the run, for the operations on one.
const WEBHOOKS: usize = 50;

/// Where the conformance server's webhooks point: a loopback port nothing
/// listens on (the server admits private targets for the run; deliveries
/// there fail and are retried, which no check looks at).
const WEBHOOK_TARGET: &str = "http://127.0.0.1:9/conformance";

/// The schemathesis configuration. The seed and the example budget are
/// fixed here: 500 cases per operation and phase keeps schemathesis to one or two
/// minutes on a 2-core machine.
const CONFIG: &str = r#"# Written by `cargo xtask conformance`; edit xtask/src/conformance.rs instead.

# Reproducible: a fixed seed, one worker, and nothing carried over from an
# earlier run (no example database, no crash cache).
seed = 20261122
workers = 1

[cache]
enabled = false

[generation]
mode = "all"
max-examples = 500
database = "none"

# Every check; none is excluded.
[checks]
enabled = true

# A schema-valid create can meet a state no schema describes: its
# Idempotency-Key already used for another body (the generator reuses short
# keys), which the contract answers with 422. Schemathesis's defaults, plus 422.
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]

[phases.coverage]
generate-duplicate-query-parameters = true

# placeOrder's body names an animal: a schema-valid petId names no animal
# (422) or one that is not available (409), as the contract says, so with
# random ids every order would be refused. Half of its orders name one of
# the available animals created before the run (ids 1 to STOCK).
[dictionaries.stocked_pets]
values = [STOCKED_IDS]

[[operations]]
include-operation-id = "placeOrder"
parameters = { "body.petId" = { dictionary = "stocked_pets", probability = 0.5 } }

# An operation on a webhook names one: a random webhookId names none (404),
# so half of them name one of the subscriptions created before the run, a
# replay's range starts at the first event half of the time (a random one
# would often end before it starts: 422), and half of the subscriptions
# created point at a URL the server admits (a random one is refused: 422).
[dictionaries.webhooks]
values = [WEBHOOK_IDS]

[dictionaries.webhook_targets]
values = ["WEBHOOK_TARGET"]

[dictionaries.first_event]
values = ["1"]

# Whether a URL may be subscribed depends on what its host resolves to,
# which no schema can say: the contract's example (hooks.example.com, which
# resolves nowhere here) and the boundary URLs of the coverage phase are all
# refused (422 webhook_target_refused, as the contract says), which
# schemathesis reports as a schema stricter than the server. So this one
# operation is generated by the fuzzing phase only (positive and negative
# data, half of its URLs one the server admits); its refusals have tests of
# their own (tests/tests/api/webhooks.rs).
[[operations]]
include-operation-id = "createWebhook"
parameters = { "body.url" = { dictionary = "webhook_targets", probability = 0.5 } }
phases = { examples = { enabled = false }, coverage = { enabled = false } }

[[operations]]
include-operation-id = "replayWebhook"
parameters = { "path.webhookId" = { dictionary = "webhooks", probability = 0.5 }, "body.from" = { dictionary = "first_event", probability = 0.5 } }

[[operations]]
include-operation-id = ["getWebhook", "deleteWebhook", "listWebhookDeliveries", "rotateWebhookSecret"]
parameters = { "path.webhookId" = { dictionary = "webhooks", probability = 0.5 } }

# listEvents' long poll holds a request up to `wait` seconds (30 at most)
# when nothing follows `after`, longer than schemathesis waits for an answer
# (10 s): its requests do not wait (the long poll has tests of its own).
[[operations]]
include-operation-id = "listEvents"
parameters = { "query.wait" = 0 }

[auth.openapi.bearerAuth]
bearer = "${PETSTORE_CONFORMANCE_KEY}"

# Any warning (authentication failed, no test data, schema problems, ...)
# fails the run.
[warnings]
fail-on = true
"#;

/// Runs schemathesis against a freshly built and started server.
pub fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let venv = python::venv(&[SCHEMATHESIS])?;
    println!("conformance: building the server");
    let binary = petstore_support::build("petstore-server", "petstore-server", false)?;
    let out = workspace_root().join("target/conformance");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let config = out.join("schemathesis.toml");
    let scratch = tempfile::Builder::new()
        .prefix("petstore-conformance-")
        .tempdir()?;
    let key = petstore_support::generate_key("conformance")?;
    let addr = petstore_support::free_loopback_addr()?;
    let database = format!("sqlite://{}", scratch.path().join("petstore.db").display());
    let mut command = Command::new(binary);
    // Only what is given here counts, not the caller's PETSTORE_* settings.
    petstore_support::without_petstore_settings(&mut command)
        .arg("serve")
        .args([
            "--bind",
            &addr.to_string(),
            "--database",
            &database,
            "--admin-bind",
            "off",
            "--webhook-allow-private-targets",
            "on",
        ])
        .args(["--log-format", "json", "--log-level", "info"])
        .env("PETSTORE_API_KEYS", &key);
    let log = out.join("server.log");
    let file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let server = Service::start("petstore-server", &mut command, (addr, &key), Some(file))?;
    println!("conformance: server listening on http://{addr}/v1");
    let runtime = tokio::runtime::Runtime::new().context("starting a tokio runtime")?;
    let stocked = runtime.block_on(petstore_support::create_available(addr, &key, STOCK))?;
    let webhooks = runtime.block_on(petstore_support::create_webhooks(
        addr,
        &key,
        WEBHOOK_TARGET,
        WEBHOOKS,
    ))?;
    let listed = |ids: &[i64]| {
        ids.iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let text = CONFIG
        .replace("STOCKED_IDS", &listed(&stocked))
        .replace("WEBHOOK_IDS", &listed(&webhooks))
        .replace("WEBHOOK_TARGET", WEBHOOK_TARGET)
        .replace("STOCK", &STOCK.to_string());
    std::fs::write(&config, text).with_context(|| format!("writing {}", config.display()))?;
    let tested = schemathesis(&venv, &config, &out, addr, &key);
    // Stopped before the result is looked at, so a failed run stops it too.
    let stopped = server.stop();
    tested?;
    stopped?;
    println!("conformance: passed in {:.0?}", started.elapsed());
    Ok(())
}

/// Runs schemathesis against the server at `addr`, in `out` (where it may
/// keep files of its own), with its JSON report in `out/report.json`.
fn schemathesis(
    venv: &Path,
    config: &Path,
    out: &Path,
    addr: SocketAddr,
    key: &str,
) -> anyhow::Result<()> {
    let report = out.join("report.json");
    let mut command = Command::new(venv.join("bin/schemathesis"));
    command
        .current_dir(out)
        .env(KEY_VARIABLE, key)
        .arg("--config-file")
        .arg(config)
        .arg("run")
        .arg(openapi::contract_path())
        .args(["--url", &format!("http://{addr}/v1")])
        .args(["--report", "json", "--report-json-path"])
        .arg(&report);
    let status = command.status().context("running schemathesis")?;
    if !status.success() {
        bail!(
            "schemathesis found problems ({status}); report: {}, server log: {}",
            report.display(),
            out.join("server.log").display()
        );
    }
    Ok(())
}
