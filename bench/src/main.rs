//! `petstore-bench` (`cargo xtask bench` runs it): throughput, latency, CPU
//! and memory of the release server under wrk, each number next to a ceiling
//! measured the same way.
//!
//! For each dataset — 1k pets on SQLite (every scenario), the scaling
//! dataset (1M pets, reads only) and, with `--postgres`, 1k pets on a
//! throwaway PostgreSQL cluster — the bench seeds a fresh database through
//! the storage layer, starts `petstore-server` (release build, free loopback
//! port, a fresh key, default log settings), captures one answer per
//! scenario and starts `bench-ceiling` replaying them. Then, round after
//! round, it drives the ceiling and the server with wrk in turn (which goes
//! first alternates by round) and records req/s, p50/p99, CPU per request
//! (utime + stime from `/proc/PID/stat`, before and after) and peak RSS
//! (`VmHWM`). It reports medians over rounds and the median of the per-round
//! ratios server ÷ ceiling, which is what stays comparable on a noisy machine.
//! Feed pages are also set beside their page of pets in pairs of short runs
//! against the server, back to back ([`Bench::feed_pairs`]).
//!
//! Every process it starts is held by a guard that stops it when dropped, so
//! a failure midway leaves no server, ceiling, wrk or cluster behind.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use petstore_server::storage::DatabaseUrl;
use petstore_server::webhooks::secrets::SealingKeys;
use petstore_support::postgres::Cluster;
use petstore_support::{Service, free_loopback_addr, generate_key};

mod canned;
mod capture;
mod cycle;
mod feed;
mod machine;
mod options;
mod report;
mod scenario;
mod seed;
mod webhook;
mod wrk;

use canned::FeedCursors;
use feed::FollowersOn;
use options::{Options, Switch};
use report::{Round, Row, Sample, pets_label};
use scenario::Scenario;

/// How long each target is driven, per scenario, before round 1 (not
/// recorded): caches and connection pools warm up there.
const WARM_UP: Duration = Duration::from_secs(1);
/// A pause before each run, so the previous run's tail (late responses,
/// closing connections) is not measured.
const SETTLE: Duration = Duration::from_millis(300);
/// Each run of a pair of a feed page and its page of pets
/// ([`Bench::feed_pairs`]): short, so that the machine's state seldom
/// changes within a pair.
const PAIR_RUN: Duration = Duration::from_secs(2);
/// Pairs of a feed page and its page of pets for each round asked for.
const PAIRS_PER_ROUND: u64 = 2;

fn main() -> ExitCode {
    match run(Options::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("petstore-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the bench with `options`.
fn run(mut options: Options) -> anyhow::Result<()> {
    wrk::ensure_installed()?;
    // Checked before anything is built. (`cargo xtask bench` runs the bench
    // from the workspace root: a relative path is relative to it.)
    if let Some(path) = &mut options.baseline_binary {
        *path = std::fs::canonicalize(&*path)
            .with_context(|| format!("--baseline-binary {}", path.display()))?;
    }
    let binaries = Binaries::build()?;
    let machine = machine::Machine::describe();
    println!(
        "bench: {}; load average {}",
        machine.summary, machine.load_average
    );
    let scratch = tempfile::Builder::new()
        .prefix("petstore-bench-")
        .tempdir()
        .context("creating a scratch directory")?;
    let runtime = tokio::runtime::Runtime::new().context("starting a tokio runtime")?;
    let bench = Bench {
        options,
        binaries,
        scratch: scratch.path().to_owned(),
        interrupted: watch_interrupts(&runtime)?,
        runtime,
        rates: Default::default(),
        cycle_animals: Default::default(),
    };
    let outcome = bench.run_all(&machine);
    if bench.interrupted.load(Ordering::Relaxed) {
        bail!("interrupted; everything the bench started has been stopped");
    }
    outcome
}

/// Ctrl-C reaches the whole process group, so wrk and the servers stop at
/// once and the run in progress fails. The bench itself must not die on the
/// spot, or its guards and its scratch directory (databases of up to a
/// million pets) would never be cleaned up: it notes the signal and stops at
/// the next step, through the same path as any failure.
fn watch_interrupts(runtime: &tokio::runtime::Runtime) -> anyhow::Result<Arc<AtomicBool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupts = runtime
        .block_on(async { signal(SignalKind::interrupt()) })
        .context("watching for Ctrl-C")?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupted);
    runtime.spawn(async move {
        if interrupts.recv().await.is_some() {
            flag.store(true, Ordering::Relaxed);
            eprintln!("bench: interrupted; stopping");
        }
    });
    Ok(interrupted)
}

/// The built executables.
struct Binaries {
    server: PathBuf,
    ceiling: PathBuf,
}

impl Binaries {
    /// `cargo build --release` of the server and the ceiling.
    fn build() -> anyhow::Result<Binaries> {
        println!("bench: building the release server and ceiling");
        Ok(Binaries {
            server: petstore_support::build("petstore-server", "petstore-server", true)?,
            ceiling: petstore_support::build("petstore-bench", "bench-ceiling", true)?,
        })
    }
}

/// Where the catalogue is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// One dataset on one backend, and the scenarios run on it.
struct Setup {
    backend: Backend,
    pets: u64,
    scenarios: Vec<Scenario>,
}

/// What every setup shares.
struct Bench {
    options: Options,
    binaries: Binaries,
    scratch: PathBuf,
    /// Set by Ctrl-C.
    interrupted: Arc<AtomicBool>,
    runtime: tokio::runtime::Runtime,
    /// The last rate of each scenario on each target (by address), which
    /// sizes the next supply of animals to order.
    rates: std::cell::RefCell<std::collections::HashMap<(Scenario, std::net::SocketAddr), f64>>,
    /// `order_cycle`'s fixed animals on each target (by address), made at
    /// its first run.
    cycle_animals: std::cell::RefCell<std::collections::HashMap<std::net::SocketAddr, Vec<i64>>>,
}

impl Bench {
    /// Every setup, then the results.
    fn run_all(&self, machine: &machine::Machine) -> anyhow::Result<()> {
        let mut rows = Vec::new();
        let mut seeding = Vec::new();
        let (mut followers, mut followers_failed) = (Vec::new(), false);
        let (mut latencies, mut webhooks, mut idle_costs) = (Vec::new(), Vec::new(), Vec::new());
        let mut feed_pairs = Vec::new();
        for setup in self.setups() {
            let outcome = self.run_setup(&setup)?;
            let label = format!("{} {}", pets_label(setup.pets), setup.backend.name());
            rows.extend(outcome.rows);
            feed_pairs.extend(outcome.feed_pairs);
            seeding.push(format!(
                "{} pets ({}) in {:.1?}, server's first answer {:.1?} after its start",
                pets_label(setup.pets),
                setup.backend.name(),
                outcome.seeded,
                outcome.first_answer
            ));
            if let Some((summary, failed)) = outcome.followers {
                followers.push(format!("{label}: {summary}"));
                followers_failed |= failed;
            }
            let parked = self.options.latency_followers as usize;
            let backend = setup.backend.name();
            latencies.extend(
                (outcome.latency.into_iter()).map(|(on, latency)| (backend, on, parked, latency)),
            );
            let backend = setup.backend.name();
            webhooks.extend(outcome.webhooks.into_iter().map(|w| (backend, w)));
            idle_costs.extend(outcome.idle_cost.into_iter().map(|c| (backend, c)));
        }
        let load_after = machine::load_average();
        let mut preamble = machine.markdown(&self.options, &load_after, &seeding);
        if !followers.is_empty() {
            preamble += &format!(
                "- Idle followers beside every round: {}\n",
                followers.join("; ")
            );
        }
        let latency = report::feed_pairs_table(&feed_pairs)
            + &report::latency_table(&latencies)
            + &report::webhook_table(&webhooks)
            + &report::idle_cost_table(&idle_costs);
        write_results(&rows, &preamble, &latency, &self.peer_name())?;
        println!(
            "bench: load average {} before, {load_after} after",
            machine.load_average
        );
        if followers_failed {
            bail!("idle followers' polls failed: {}", followers.join("; "));
        }
        if let Some((backend, w)) = webhooks.iter().find(|(_, w)| w.delivered < w.created) {
            bail!(
                "on {backend}, {} of {} events of {} were not delivered within {:?}",
                w.created - w.delivered,
                w.created,
                w.load,
                webhook::PATIENCE
            );
        }
        fail_on_errors(&rows, &feed_pairs)
    }

    /// How the report names the peer.
    fn peer_name(&self) -> String {
        match &self.options.baseline_binary {
            Some(path) => format!("the baseline (`--baseline-binary {}`)", path.display()),
            None => "the peer (`--compare-with`)".to_owned(),
        }
    }

    /// Fails once Ctrl-C has been pressed.
    fn go_on(&self) -> anyhow::Result<()> {
        if self.interrupted.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        Ok(())
    }

    /// 1k on SQLite, the scaling dataset (reads only), 1k on PostgreSQL.
    fn setups(&self) -> Vec<Setup> {
        let chosen = |reads_only: bool| -> Vec<Scenario> {
            Scenario::value_variants()
                .iter()
                .copied()
                .filter(|&s| self.options.runs(s))
                .filter(|s| !reads_only || s.reads_only())
                .collect()
        };
        let mut setups = vec![Setup {
            backend: Backend::Sqlite,
            pets: report::BASE_PETS,
            scenarios: chosen(false),
        }];
        if self.options.scaling_pets > 0 {
            let pets = self.options.scaling_pets;
            setups.push(Setup {
                backend: Backend::Sqlite,
                pets,
                scenarios: chosen(true),
            });
        }
        if self.options.postgres() {
            setups.push(Setup {
                backend: Backend::Postgres,
                pets: report::BASE_PETS,
                scenarios: chosen(false),
            });
        }
        if self.options.postgres() && self.options.postgres_scaling_pets > 0 {
            setups.push(Setup {
                backend: Backend::Postgres,
                pets: self.options.postgres_scaling_pets,
                scenarios: chosen(true),
            });
        }
        if self.options.postgres_only {
            setups.retain(|s| s.backend == Backend::Postgres);
        }
        let beside = self.options.measures_beside();
        setups.retain(|s| !s.scenarios.is_empty() || (beside && s.pets == report::BASE_PETS));
        setups
    }

    /// Seeds, starts both targets (and the peer, the idle followers and the
    /// webhook receiver), runs every round, then measures the webhook and
    /// follower latencies if asked.
    fn run_setup(&self, setup: &Setup) -> anyhow::Result<SetupOutcome> {
        let label = format!("{} {}", pets_label(setup.pets), setup.backend.name());
        let dir = self.scratch.join(label.replace(' ', "-"));
        std::fs::create_dir_all(&dir)?;
        // Declared first, so it is dropped (stopped and deleted) last.
        let cluster = match setup.backend {
            Backend::Postgres => Some(Cluster::start_durable().map_err(anyhow::Error::msg)?),
            Backend::Sqlite => None,
        };
        let url = match &cluster {
            Some(cluster) => cluster.url("postgres"),
            None => format!("sqlite://{}", dir.join("petstore.db").display()),
        };
        let database: DatabaseUrl = url.parse()?;
        println!("bench: [{label}] seeding {} pets", setup.pets);
        let seeded = self.runtime.block_on(seed::seed(&database, setup.pets))?;
        println!("bench: [{label}] seeded in {seeded:.1?}");
        self.go_on()?;
        let key = generate_key("bench")?;
        // The same flags on both backends: PostgreSQL needs the key file,
        // and the receiver listens on loopback over http.
        let base = setup.pets == report::BASE_PETS;
        let webhook_key =
            (self.options.webhook_latency > 0 && base).then(|| dir.join("webhook.key"));
        if let Some(path) = &webhook_key {
            SealingKeys::generate()
                .and_then(|keys| keys.write_new(path))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let starting = std::time::Instant::now();
        let server = self.start_server(
            "petstore-server",
            &self.binaries.server,
            (&url, &key),
            webhook_key.as_deref(),
        )?;
        let first_answer = starting.elapsed();
        println!("bench: [{label}] server answered {first_answer:.1?} after its start");
        let feed = self.runtime.block_on(feed::locate(server.addr, &key))?;
        println!(
            "bench: [{label}] the feed's ids run from {} to {}; the deep page reads after {}",
            feed.cursors.start, feed.head, feed.cursors.deep
        );
        let pets = setup.pets as i64;
        let capture = capture::capture(server.addr, &key, pets, feed.cursors);
        let canned = self.runtime.block_on(capture)?;
        let responses = dir.join("responses.json");
        std::fs::write(&responses, serde_json::to_string_pretty(&canned)?)?;
        let ceiling = self.start_ceiling(&responses, &key)?;
        // The peer is seeded over HTTP, one pet at a time: the base dataset only.
        let o = &self.options;
        let peer = match (setup.backend, &o.compare_with, &o.baseline_binary) {
            (Backend::Postgres, Some(command), _) if base => {
                Some(self.start_peer(command, &key, setup.pets, &label)?)
            }
            (backend, None, Some(binary)) if base => {
                Some(self.start_baseline(binary, backend, &key, setup.pets, &label)?)
            }
            _ => None,
        };
        let mut databases = Vec::new();
        if setup.backend == Backend::Postgres {
            databases.push(url.clone());
        }
        databases.extend(peer.as_ref().and_then(|peer| peer.database.clone()));
        // Whose database is whose, to measure its CPU beside the target's.
        let mut postmasters = std::collections::HashMap::new();
        if setup.backend == Backend::Postgres {
            let ours = self.runtime.block_on(machine::postmaster(&url))?;
            postmasters.insert(server.addr, ours);
        }
        if let Some(Peer {
            database: Some(database),
            service,
            ..
        }) = &peer
        {
            let theirs = self.runtime.block_on(machine::postmaster(database))?;
            postmasters.insert(service.addr, theirs);
        }
        let targets = Targets {
            server: &server,
            ceiling: &ceiling,
            peer: peer.as_ref().map(|peer| &peer.service),
            // The peer compared with serves what a plain pet store serves;
            // our own server of an earlier version, all but the feed.
            peer_serves: match o.baseline_binary {
                Some(_) => |s: Scenario| !s.reads_feed(),
                None => Scenario::plain,
            },
            databases: &databases,
            postmasters,
        };
        let followers = (o.idle_followers > 0)
            .then(|| {
                let (addr, count, types) = (server.addr, o.idle_followers, o.follower_types());
                println!("bench: [{label}] parking {count} idle followers on the server");
                let runtime = self.runtime.handle();
                feed::IdleFollowers::start(runtime, (addr, &key), count, types, feed.head)
            })
            .transpose()?;
        let webhooks = webhook_key
            .map(|_| self.webhooks_steady(&server, &key, &label))
            .transpose()?;
        let rows = self.rounds(setup, &label, &targets, (&key, feed.cursors), &dir)?;
        let followers = followers.map(feed::IdleFollowers::stop);
        let webhooks = webhooks
            .map(|run| self.webhooks_after_runs(run, setup, (&server, &key), &label))
            .transpose()?
            .unwrap_or_default();
        // After the webhooks' tail, which these reads would slow.
        let feed_pairs = self.feed_pairs(&targets, &rows, &label, &dir)?;
        let latency = match o.follower_latency > 0 && base {
            true => self.follower_latencies(setup.backend, (&server, &url, &key), &label)?,
            false => Vec::new(),
        };
        let idle_cost = match o.idle_cost > 0 && base {
            true => {
                let postmaster = targets.postmasters.get(&server.addr).copied();
                self.idle_cost((&server, postmaster), &key, &label)?
            }
            false => Vec::new(),
        };
        server.stop()?;
        ceiling.stop()?;
        if let Some(peer) = peer {
            peer.service.terminate()?;
        }
        drop(cluster);
        Ok(SetupOutcome {
            rows,
            feed_pairs,
            seeded,
            first_answer,
            followers,
            latency,
            idle_cost,
            webhooks,
        })
    }

    /// `--idle-cost`: windows of steady creates on `server`, alternately
    /// without and with the followers parked, and the CPU each took.
    fn idle_cost(
        &self,
        (server, postmaster): (&Service, Option<u32>),
        key: &str,
        label: &str,
    ) -> anyhow::Result<Vec<feed::IdleCost>> {
        let o = &self.options;
        let parked = o.latency_followers as usize;
        let count = (o.idle_cost * u64::from(o.idle_cost_rate)) as usize;
        println!(
            "bench: [{label}] idle cost: {count} creates at {}/s, without and with {parked} \
             followers parked",
            o.idle_cost_rate
        );
        let mut windows = Vec::new();
        for followers in [0, parked, 0, parked, 0, parked] {
            let head = self.runtime.block_on(feed::locate(server.addr, key))?.head;
            let target = (server.addr, key);
            let polls = (followers > 0)
                .then(|| {
                    let runtime = self.runtime.handle();
                    feed::IdleFollowers::start(runtime, target, followers, o.follower_types(), head)
                })
                .transpose()?;
            std::thread::sleep(SETTLE);
            let since = machine::CpuSince::now(server.pid(), postmaster)?;
            let started = std::time::Instant::now();
            let steady = webhook::steady_creates(target, count, o.idle_cost_rate);
            self.runtime.block_on(steady)?;
            let elapsed = started.elapsed();
            let (cpu, database_cpu) = since.taken()?;
            if let Some((summary, true)) = polls.map(feed::IdleFollowers::stop) {
                bail!("idle cost: {summary}");
            }
            let window = feed::IdleCost {
                followers,
                creates: count,
                elapsed,
                cpu,
                database_cpu,
            };
            println!(
                "bench: [{label}] idle cost, {followers} followers: server CPU {:.0} ms a second",
                report::per_second(&window) * 1e3
            );
            windows.push(window);
        }
        Ok(windows)
    }

    /// `--webhook-latency`, first: a receiver subscribed, and the delays of
    /// the deliveries of N creates at a steady rate, on a server without a
    /// backlog. The subscription stays through the warm-up and the runs.
    fn webhooks_steady(
        &self,
        server: &Service,
        key: &str,
        label: &str,
    ) -> anyhow::Result<WebhookRun> {
        let target = (server.addr, key);
        let (count, rate) = (self.options.webhook_latency, self.options.webhook_rate);
        println!(
            "bench: [{label}] webhooks: a receiver subscribed, {count} creates at {rate} a second"
        );
        let subscriber = self.runtime.block_on(webhook::Subscriber::start(target))?;
        let mark = self.runtime.block_on(subscriber.mark(target))?;
        let made = self
            .runtime
            .block_on(webhook::steady_creates(target, count, rate))?;
        let load = format!("{count} creates at {rate}/s (made at {made:.0}/s)");
        let measure = subscriber.measure(target, mark, load);
        let steady = self.runtime.block_on(measure)?;
        print_webhooks(label, &steady);
        let runs_start = self.runtime.block_on(subscriber.mark(target))?;
        Ok(WebhookRun {
            subscriber,
            runs_start,
            measured: vec![steady],
        })
    }

    /// `--webhook-latency`, after the runs (if any ran): the delays of the
    /// deliveries of every event they wrote; then the subscription ends.
    fn webhooks_after_runs(
        &self,
        mut run: WebhookRun,
        setup: &Setup,
        (server, key): (&Service, &str),
        label: &str,
    ) -> anyhow::Result<Vec<webhook::WebhookLatency>> {
        let target = (server.addr, key);
        if !setup.scenarios.is_empty() {
            let names: Vec<_> = setup.scenarios.iter().map(|s| s.name()).collect();
            let load = format!("the runs of {} (warm-up included)", names.join(", "));
            println!("bench: [{label}] webhooks: waiting for the deliveries of {load}");
            let measure = run.subscriber.measure(target, run.runs_start, load);
            let beside = self.runtime.block_on(measure)?;
            // Read-only scenarios write no event: no row of NaNs.
            if beside.created == 0 {
                println!("bench: [{label}] webhooks: {} wrote no event", beside.load);
            } else {
                print_webhooks(label, &beside);
                run.measured.push(beside);
            }
        }
        self.runtime.block_on(run.subscriber.unsubscribe(target))?;
        Ok(run.measured)
    }

    /// `--follower-latency`: the followers parked at the feed's head (as it
    /// is now, after the runs) and the commits, on `server`; on PostgreSQL
    /// then the same with the followers on a second instance on the same
    /// database, which learns of the commits from the first one's
    /// notification.
    fn follower_latencies(
        &self,
        backend: Backend,
        (server, url, key): (&Service, &str, &str),
        label: &str,
    ) -> anyhow::Result<Vec<(FollowersOn, feed::Latency)>> {
        let on_the_writer = self.follower_latency((server, server), key, label)?;
        let mut latencies = vec![(FollowersOn::TheWriter, on_the_writer)];
        if backend == Backend::Postgres {
            let binary = &self.binaries.server;
            let second = self.start_server("petstore-server-2", binary, (url, key), None)?;
            let on_another = self.follower_latency((&second, server), key, label);
            second.stop()?;
            latencies.push((FollowersOn::AnotherInstance, on_another?));
        }
        Ok(latencies)
    }

    /// The followers parked on `followed`, the commits made on `writer`.
    fn follower_latency(
        &self,
        (followed, writer): (&Service, &Service),
        key: &str,
        label: &str,
    ) -> anyhow::Result<feed::Latency> {
        let (commits, followers) = (
            self.options.follower_latency,
            self.options.latency_followers as usize,
        );
        let on = FollowersOn::of(followed.addr, writer.addr).name();
        println!(
            "bench: [{label}] follower latency: {followers} followers on {on}, {commits} commits"
        );
        let head = self
            .runtime
            .block_on(feed::locate(followed.addr, key))?
            .head;
        let target = (followed.addr, key);
        let measure = feed::follower_latency(target, writer.addr, followers, commits, head);
        let latency = self.runtime.block_on(measure)?;
        let p99 = report::percentile(latency.delays_ms.clone(), 99.0);
        println!("bench: [{label}] follower latency, followers on {on}: p99 {p99:.2} ms");
        Ok(latency)
    }

    /// Starts `binary` (our server, this version's or the baseline's) as
    /// the bench starts every server of ours, named `name`.
    fn start_server(
        &self,
        name: &str,
        binary: &Path,
        (url, key): (&str, &str),
        webhook_key: Option<&Path>,
    ) -> anyhow::Result<Service> {
        let addr = free_loopback_addr()?;
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .args(["--bind", &addr.to_string(), "--database", url]);
        if let Some(level) = &self.options.log_level {
            command.args(["--log-level", level]);
        }
        // Metrics on, as by default, on a port of its own.
        let admin = if self.options.metrics == Switch::On {
            free_loopback_addr()?.to_string()
        } else {
            "off".to_owned()
        };
        command.args(["--admin-bind", &admin]);
        if let Some(path) = webhook_key {
            command.args(["--webhook-allow-private-targets", "on"]);
            command.arg("--webhook-key-file").arg(path);
        }
        // Only what is given here counts, not the caller's PETSTORE_* settings.
        petstore_support::without_petstore_settings(&mut command).env("PETSTORE_API_KEYS", key);
        Service::start(name, &mut command, (addr, key), None)
    }

    /// Starts the baseline (`--baseline-binary`) on a database of its own
    /// on `backend` (a second throwaway cluster for PostgreSQL), and seeds it
    /// with the same pets as ours, through its API: its schema is its own
    /// version's.
    fn start_baseline(
        &self,
        binary: &Path,
        backend: Backend,
        key: &str,
        pets: u64,
        label: &str,
    ) -> anyhow::Result<Peer> {
        let cluster = match backend {
            Backend::Postgres => Some(Cluster::start_durable().map_err(anyhow::Error::msg)?),
            Backend::Sqlite => None,
        };
        let database = cluster.as_ref().map(|cluster| cluster.url("postgres"));
        let sqlite = self
            .scratch
            .join(format!("baseline-{}.db", label.replace(' ', "-")));
        let url = database
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", sqlite.display()));
        let service = self.start_server("baseline", binary, (&url, key), None)?;
        println!("bench: [{label}] seeding the baseline with {pets} pets through POST /v1/pets");
        let seeded = self
            .runtime
            .block_on(seed::seed_over_http(service.addr, key, pets))?;
        println!("bench: [{label}] baseline seeded in {seeded:.1?}");
        Ok(Peer {
            service,
            database,
            _cluster: cluster,
        })
    }

    /// Starts the peer (`--compare-with`) on a throwaway cluster of its own
    /// and seeds it with the same pets as ours, through its API.
    fn start_peer(&self, command: &str, key: &str, pets: u64, label: &str) -> anyhow::Result<Peer> {
        let cluster = Cluster::start_durable().map_err(anyhow::Error::msg)?;
        let addr = free_loopback_addr()?;
        let mut shell = Command::new("sh");
        shell
            .arg("-c")
            // `exec`, so that the process measured is the peer, not a shell.
            .arg(format!("exec {command}"));
        petstore_support::without_petstore_settings(&mut shell)
            .env("BENCH_PORT", addr.port().to_string())
            .env("BENCH_DATABASE_URL", cluster.url("postgres"))
            .env("BENCH_API_KEY", key);
        let service = Service::start("peer", &mut shell, (addr, key), None)
            .with_context(|| format!("starting the peer: sh -c 'exec {command}'"))?;
        println!("bench: [{label}] seeding the peer with {pets} pets through POST /v1/pets");
        let seeded = self
            .runtime
            .block_on(seed::seed_over_http(addr, key, pets))?;
        println!("bench: [{label}] peer seeded in {seeded:.1?}");
        Ok(Peer {
            service,
            database: Some(cluster.url("postgres")),
            _cluster: Some(cluster),
        })
    }

    fn start_ceiling(&self, responses: &Path, key: &str) -> anyhow::Result<Service> {
        let addr = free_loopback_addr()?;
        let mut command = Command::new(&self.binaries.ceiling);
        command
            .args(["--bind", &addr.to_string()])
            .arg("--responses")
            .arg(responses)
            .env("BENCH_CEILING_KEY", key);
        Service::start("bench-ceiling", &mut command, (addr, key), None)
    }

    /// The warm-up, then every round of every scenario of `setup`.
    fn rounds(
        &self,
        setup: &Setup,
        label: &str,
        targets: &Targets,
        (key, feed): (&str, FeedCursors),
        dir: &Path,
    ) -> anyhow::Result<Vec<Row>> {
        let mut rows = Vec::new();
        let mut scripts = Vec::new();
        let supply = dir.join("supply.txt");
        for &scenario in &setup.scenarios {
            let script = script_path(dir, scenario);
            let text = scenario.wrk_script(key, setup.pets as i64, &supply, feed);
            std::fs::write(&script, text)?;
            scripts.push(script);
            rows.push(Row {
                scenario,
                pets: setup.pets,
                backend: setup.backend.name(),
                rounds: Vec::new(),
            });
        }
        println!("bench: [{label}] warming up ({WARM_UP:?} per scenario and target)");
        for (row, script) in rows.iter().zip(&scripts) {
            for target in targets.for_scenario(row.scenario) {
                self.stock(row.scenario, targets, target, WARM_UP, key, &supply)?;
                let run = wrk::run(script, target.addr, WARM_UP, &dir.join("wrk.out"))?;
                self.rates
                    .borrow_mut()
                    .insert((row.scenario, target.addr), run.rate());
            }
        }
        for round in 0..self.options.rounds {
            for (row, script) in rows.iter_mut().zip(&scripts) {
                self.go_on()?;
                let measured = self.round(round, targets, row.scenario, script, (key, dir))?;
                print_round(label, row.scenario, round, self.options.rounds, &measured);
                row.rounds.push(measured);
            }
        }
        Ok(rows)
    }

    /// Each feed page that ran beside its page of pets in `rows`
    /// ([`Scenario::pets_beside`]), against the server again:
    /// [`PAIRS_PER_ROUND`] pairs a round of back-to-back runs of
    /// [`PAIR_RUN`] (or `--duration`, if shorter), the pets first in every
    /// other pair. The rounds run each scenario for the duration
    /// asked, one after the other, and on this machine the CPU a request
    /// takes can change by half between two of them (BENCHMARKS.md,
    /// twenty-eighth pass); within a pair it changes less often. A pair
    /// with errors does not count, and fails the command at the end.
    fn feed_pairs(
        &self,
        targets: &Targets,
        rows: &[Row],
        label: &str,
        dir: &Path,
    ) -> anyhow::Result<Vec<report::FeedPairs>> {
        let (out, run) = (dir.join("wrk.out"), PAIR_RUN.min(self.options.duration()));
        let pairs = PAIRS_PER_ROUND * self.options.rounds;
        let ran = |scenario| rows.iter().any(|row| row.scenario == scenario);
        let pages = rows.iter().filter(|row| row.scenario.reads_feed());
        let mut all = Vec::new();
        for page in pages.filter(|page| ran(page.scenario.pets_beside())) {
            self.runtime.block_on(settle(targets.databases))?;
            let (name, pets) = (page.scenario.name(), page.scenario.pets_beside());
            let (page_script, pets_script) =
                (script_path(dir, page.scenario), script_path(dir, pets));
            let (mut ratios, mut errors) = (Vec::new(), Vec::new());
            for pair in 0..pairs {
                self.go_on()?;
                let scripts = [pets_script.as_path(), page_script.as_path()];
                let [pets_run, page_run] = self.pair(targets, scripts, pair % 2 == 0, run, &out)?;
                let outcome = match report::pair_ratio(&pets_run, &page_run) {
                    Ok(ratio) => {
                        ratios.push(ratio);
                        let cpu = [&page_run, &pets_run].map(report::pair_cpu_us);
                        format!("{:.1} / {:.1} µs CPU/req, {ratio:.2}", cpu[0], cpu[1])
                    }
                    Err(error) => {
                        errors.push(error.clone());
                        format!("ERROR ({error})")
                    }
                };
                let (pets, number) = (pets.name(), pair + 1);
                println!("bench: [{label}] {name} beside {pets}, pair {number}/{pairs}: {outcome}");
            }
            let page = Row {
                rounds: Vec::new(),
                ..*page
            };
            all.push(report::FeedPairs {
                page,
                ratios,
                errors,
            });
        }
        Ok(all)
    }

    /// A run of each of `scripts` against the server, back to back, for
    /// `run` each, in that order or (not `in_order`) the other; their
    /// samples in the order of `scripts`.
    fn pair(
        &self,
        targets: &Targets,
        scripts: [&Path; 2],
        in_order: bool,
        run: Duration,
        out: &Path,
    ) -> anyhow::Result<[Sample; 2]> {
        let postmaster = targets.postmasters.get(&targets.server.addr).copied();
        let measure = |script: &Path| measure(targets.server, postmaster, script, run, out);
        Ok(match in_order {
            true => {
                let first = measure(scripts[0])?;
                [first, measure(scripts[1])?]
            }
            false => {
                let second = measure(scripts[1])?;
                [measure(scripts[0])?, second]
            }
        })
    }

    /// The ceiling, the server and the peer (if it serves the scenario), one
    /// after the other; the order reverses every other round, so that no
    /// target always gets the quieter moment.
    fn round(
        &self,
        round: u64,
        targets: &Targets,
        scenario: Scenario,
        script: &Path,
        (key, dir): (&str, &Path),
    ) -> anyhow::Result<Round> {
        self.runtime.block_on(settle(targets.databases))?;
        let (mut order, odd) = (targets.for_scenario(scenario), !round.is_multiple_of(2));
        if odd {
            order.reverse();
        }
        let out = dir.join("wrk.out");
        let duration = self.options.duration();
        let supply = dir.join("supply.txt");
        let mut samples = Vec::new();
        for target in order {
            self.stock(scenario, targets, target, duration, key, &supply)?;
            let postmaster = targets.postmasters.get(&target.addr).copied();
            let sample = measure(target, postmaster, script, duration, &out)?;
            self.rates
                .borrow_mut()
                .insert((scenario, target.addr), sample.rate);
            samples.push(sample);
        }
        if odd {
            samples.reverse();
        }
        let mut samples = samples.into_iter();
        let (ceiling, server) = (samples.next(), samples.next());
        Ok(Round {
            server: server.expect("the server is always measured"),
            ceiling: ceiling.expect("the ceiling is always measured"),
            peer: samples.next(),
        })
    }
}

impl Bench {
    /// Writes to `path` the animals a run of `scenario` on `target` will
    /// order, one id a line. For `place_order`, enough for `duration` at
    /// the target's last rate and half as many again (the first run
    /// guesses), created on it just before. For `order_cycle`, its
    /// [`scenario::CYCLE_ANIMALS`] animals, made at the target's first run
    /// and every one made available again before each later one. The
    /// ceiling answers every order alike, so its ids are made up.
    fn stock(
        &self,
        scenario: Scenario,
        targets: &Targets,
        target: &Service,
        duration: Duration,
        key: &str,
        path: &Path,
    ) -> anyhow::Result<()> {
        if !scenario.needs_supply() {
            return Ok(());
        }
        let count = match scenario {
            Scenario::OrderCycle => scenario::CYCLE_ANIMALS,
            _ => {
                let rate = self.rates.borrow().get(&(scenario, target.addr)).copied();
                let rate = rate.unwrap_or(FIRST_ORDER_RATE_GUESS);
                ((rate * duration.as_secs_f64() * 1.5) as usize).max(SUPPLY_MIN)
            }
        };
        let kept = self.cycle_animals.borrow().get(&target.addr).cloned();
        let ids: Vec<i64> = if target.addr == targets.ceiling.addr {
            (1..=count as i64).collect()
        } else if let (Scenario::OrderCycle, Some(ids)) = (scenario, kept) {
            self.runtime
                .block_on(cycle::make_available(target.addr, key, &ids))?;
            ids
        } else {
            let ids = self.runtime.block_on(petstore_support::create_available(
                target.addr,
                key,
                count,
            ))?;
            if scenario == Scenario::OrderCycle {
                let mut kept = self.cycle_animals.borrow_mut();
                kept.insert(target.addr, ids.clone());
            }
            ids
        };
        let lines: String = ids.iter().map(|id| format!("{id}\n")).collect();
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))
    }
}

/// Orders per second assumed before a target's first run of an order
/// scenario (its warm-up), and the smallest supply.
const FIRST_ORDER_RATE_GUESS: f64 = 20_000.0;
const SUPPLY_MIN: usize = 2_000;

/// The servers of a setup.
struct Targets<'a> {
    server: &'a Service,
    ceiling: &'a Service,
    /// The server compared with (`--compare-with`, on PostgreSQL, or
    /// `--baseline-binary`).
    peer: Option<&'a Service>,
    /// The scenarios the peer serves.
    peer_serves: fn(Scenario) -> bool,
    /// The PostgreSQL databases of the server and the peer, settled before
    /// each round.
    databases: &'a [String],
    /// The postmaster of each target's PostgreSQL cluster, by the target's
    /// address.
    postmasters: std::collections::HashMap<std::net::SocketAddr, u32>,
}

impl<'a> Targets<'a> {
    /// The targets `scenario` runs against, in the order of an even round
    /// (ceiling, server, peer): the peer only for what it serves.
    fn for_scenario(&self, scenario: Scenario) -> Vec<&'a Service> {
        let peer = self.peer.filter(|_| (self.peer_serves)(scenario));
        [self.ceiling, self.server]
            .into_iter()
            .chain(peer)
            .collect()
    }
}

/// The peer and the cluster it owns, if any (dropped after it: fields drop
/// in order).
struct Peer {
    service: Service,
    /// Its PostgreSQL database's URL.
    database: Option<String>,
    _cluster: Option<Cluster>,
}

/// `--webhook-latency` on a setup, between its steady creates and its runs.
struct WebhookRun {
    subscriber: webhook::Subscriber,
    /// Where the runs' events start.
    runs_start: webhook::Mark,
    measured: Vec<webhook::WebhookLatency>,
}

/// What one setup measured.
struct SetupOutcome {
    rows: Vec<Row>,
    /// Each feed page beside its page of pets, pair by pair.
    feed_pairs: Vec<report::FeedPairs>,
    /// How long seeding took.
    seeded: Duration,
    /// How long the server took from its start to its first answer (loading
    /// the catalogue included).
    first_answer: Duration,
    /// What the idle followers did, and whether any of their polls failed.
    followers: Option<(String, bool)>,
    /// `--follower-latency`: on the writer, and (PostgreSQL) on another
    /// instance.
    latency: Vec<(FollowersOn, feed::Latency)>,
    /// `--idle-cost`: its windows, in the order measured.
    idle_cost: Vec<feed::IdleCost>,
    /// `--webhook-latency`: beside the runs, and under a steady load.
    webhooks: Vec<webhook::WebhookLatency>,
}

/// Vacuums (with statistics) and checkpoints every database, so that no
/// target pays, during its run, for the maintenance its database owes to the
/// previous scenario's writes — which would make the faster writer pay
/// more. (PostgreSQL's autovacuum and checkpoints would otherwise run at
/// any time, on the same cores.)
async fn settle(databases: &[String]) -> anyhow::Result<()> {
    for url in databases {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to {url} to settle it"))?;
        let connection = tokio::spawn(connection);
        // One at a time: VACUUM cannot run inside a transaction.
        for statement in ["VACUUM (ANALYZE)", "CHECKPOINT"] {
            client
                .batch_execute(statement)
                .await
                .with_context(|| format!("{statement} on {url}"))?;
        }
        drop(client);
        let _ = connection.await;
    }
    Ok(())
}

/// Where the wrk script of `scenario` is written (by [`Bench::rounds`]).
fn script_path(dir: &Path, scenario: Scenario) -> PathBuf {
    dir.join(format!("{}.lua", scenario.name()))
}

/// One wrk run against `target`, with its CPU time before and after, and
/// that of its PostgreSQL cluster (whose `postmaster` is given).
fn measure(
    target: &Service,
    postmaster: Option<u32>,
    script: &Path,
    duration: Duration,
    out: &Path,
) -> anyhow::Result<Sample> {
    std::thread::sleep(SETTLE);
    let since = machine::CpuSince::now(target.pid(), postmaster)?;
    let run = wrk::run(script, target.addr, duration, out)?;
    let (cpu, database) = since.taken()?;
    let per_request = |cpu: Duration| cpu.div_f64(run.requests.max(1) as f64);
    Ok(Sample {
        rate: run.rate(),
        p50: run.p50,
        p99: run.p99,
        cpu_per_request: per_request(cpu),
        database_cpu_per_request: database.map(per_request),
        peak_rss_kib: machine::peak_rss_kib(target.pid())?,
        error: run.error(),
    })
}

fn print_webhooks(label: &str, w: &webhook::WebhookLatency) {
    let p99 = report::percentile(w.delays_ms.clone(), 99.0);
    println!(
        "bench: [{label}] webhooks, {}: {} of {} events delivered within {:?}, p99 {p99:.1} ms",
        w.load,
        w.delivered,
        w.created,
        webhook::PATIENCE
    );
}

fn print_round(label: &str, scenario: Scenario, round: u64, rounds: u64, r: &Round) {
    let describe = |s: &Sample| match &s.error {
        Some(error) => format!("ERROR ({error})"),
        None => format!(
            "{:.0} req/s, p99 {:.2} ms, {:.0} µs CPU/req{}",
            s.rate,
            s.p99.as_secs_f64() * 1e3,
            s.cpu_per_request.as_secs_f64() * 1e6,
            s.database_cpu_per_request
                .map_or(String::new(), |cpu| format!(
                    " (+{:.0} µs its database's)",
                    cpu.as_secs_f64() * 1e6
                ))
        ),
    };
    let peer = r.peer.as_ref().map_or(String::new(), |peer| {
        format!(
            " | peer {} | server ÷ peer {:.3}",
            describe(peer),
            r.server.rate / peer.rate
        )
    });
    println!(
        "bench: [{label}] {} round {}/{rounds}: server {} | ceiling {} | ratio {:.3}{peer}",
        scenario.name(),
        round + 1,
        describe(&r.server),
        describe(&r.ceiling),
        r.server.rate / r.ceiling.rate
    );
}

/// Prints the tables and writes `target/bench/results.{tsv,md}`.
fn write_results(rows: &[Row], preamble: &str, latency: &str, peer: &str) -> anyhow::Result<()> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent();
    let out = workspace.expect("in the workspace").join("target/bench");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let table = report::markdown_table(rows, peer) + latency;
    let markdown = format!("{preamble}\n{table}");
    for (name, text) in [("results.tsv", report::tsv(rows)), ("results.md", markdown)] {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    println!("\n{table}");
    println!(
        "bench: wrote {0}/results.tsv and {0}/results.md",
        out.display()
    );
    Ok(())
}

/// A run with errors is reported in the table and fails the command.
fn fail_on_errors(rows: &[Row], pairs: &[report::FeedPairs]) -> anyhow::Result<()> {
    let errors: usize = rows
        .iter()
        .map(|row| row.summary().errors.len())
        .sum::<usize>()
        + pairs.iter().map(|p| p.errors.len()).sum::<usize>();
    if errors > 0 {
        bail!("{errors} runs had errors (non-2xx responses or socket errors); see the table");
    }
    Ok(())
}
