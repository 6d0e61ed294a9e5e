//! The command line of `petstore-bench` (and `cargo xtask bench`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use super::scenario::Scenario;

/// wrk load test of the release server next to a hyper ceiling (see BENCHMARKS.md)
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(name = "petstore-bench", bin_name = "cargo xtask bench")]
pub struct Options {
    /// Seconds wrk drives each run
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    duration: u64,
    /// Rounds per scenario, ceiling and server alternating
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: u64,
    /// Run only this scenario (repeat it to run several, in their usual order)
    #[arg(long, value_name = "NAME")]
    pub scenario: Vec<Scenario>,
    /// Also run the 1k scenarios on a throwaway PostgreSQL cluster
    #[arg(long)]
    postgres: bool,
    /// Only the PostgreSQL setup (implies --postgres)
    #[arg(long)]
    pub postgres_only: bool,
    /// Also run another server (a peer) beside ours under the same load on the
    /// PostgreSQL setup (implies --postgres), on a throwaway cluster of its own
    /// seeded with the same pets through POST /v1/pets. CMD is run by
    /// `sh -c 'exec CMD'` with BENCH_PORT (where it must listen on 127.0.0.1),
    /// BENCH_DATABASE_URL and BENCH_API_KEY (the bearer key it must accept) in
    /// its environment; every scenario but those a plain pet store does not
    /// implement (create_idempotent, list20_deep, list20_random, the feed's)
    /// is run against it. Example, with the peer built as its README says:
    /// --compare-with
    /// 'target/peers/release/axum-postgres $BENCH_PORT $BENCH_DATABASE_URL'
    #[arg(long, value_name = "CMD", verbatim_doc_comment)]
    pub compare_with: Option<String>,
    /// Also run our server of another version (PATH: its release binary, e.g.
    /// 1.5.0's, built in a worktree of its own; absolute, or relative to the
    /// workspace root) beside ours under the same load,
    /// on every 1k setup: started exactly as ours, on a database of its own
    /// seeded with the same pets through POST /v1/pets; every scenario but the
    /// feed's. Its numbers are reported as the peer's
    #[arg(long, value_name = "PATH", conflicts_with = "compare_with")]
    pub baseline_binary: Option<PathBuf>,
    /// Keep N long polls of the feed parked on the server beside every run
    /// (GET /v1/events?after=HEAD&wait=30&types=…, each asked again as soon
    /// as it is answered, from its Link)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub idle_followers: usize,
    /// The types the idle followers ask for: by default one no scenario
    /// writes, so that they stay parked (each commit still wakes each one
    /// inside the server, which reads on and parks it again); `all` for every
    /// type (then every write answers them, and they ask again)
    #[arg(long, value_name = "TYPES", default_value = "order.delivered")]
    pub follower_types: String,
    /// After the runs of each 1k setup, measure the delay from a commit to the
    /// followers parked at the head receiving it: K pets created one at a time,
    /// each once every follower has the previous one; on PostgreSQL, then the
    /// same with the followers on a second instance on the same database. Only
    /// the scenarios named with --scenario run beside it (none without one)
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub follower_latency: usize,
    /// The followers parked for --follower-latency and --idle-cost
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    pub latency_followers: u64,
    /// After the runs of each 1k setup, measure what parked long polls cost
    /// the server: S seconds of creates at a steady --idle-cost-rate with
    /// none parked, then with --latency-followers parked on --follower-types
    /// (three times each, alternating), and the server's CPU (and its
    /// database's) a second and per create. Only the scenarios named with
    /// --scenario run beside it (none without one)
    #[arg(long, value_name = "S", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=25))]
    pub idle_cost: u64,
    /// Creates a second of --idle-cost's steady load
    #[arg(long, value_name = "R", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub idle_cost_rate: u32,
    /// On each 1k setup, subscribe a webhook receiver (on loopback) to every
    /// event and measure the delay from each event's commit (its `time`) to its
    /// delivery: first over N pets created at a steady --webhook-rate, then
    /// over the warm-up and runs of the scenarios named with --scenario (none
    /// without one). The server gets --webhook-allow-private-targets on and a
    /// --webhook-key-file
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub webhook_latency: usize,
    /// Creates a second of --webhook-latency's steady load (each started on
    /// its tick, without waiting for the one before)
    #[arg(long, value_name = "R", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub webhook_rate: u32,
    /// Pets in the scaling dataset (0 skips it)
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub scaling_pets: u64,
    /// Pets in a scaling dataset on PostgreSQL too (reads only, without the
    /// peer; 0, the default, skips it: seeding a million takes minutes)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub postgres_scaling_pets: u64,
    /// Pass --log-level to the server (default: the server's own, info), to
    /// measure what logging costs
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// The server's management listener, which serves its metrics (on by
    /// default, as the server's default); off to measure what serving them
    /// costs (the metrics themselves are always kept)
    #[arg(
        long,
        value_name = "on|off",
        hide_possible_values = true,
        default_value = "on"
    )]
    pub metrics: Switch,
}

/// `on` or `off`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Switch {
    On,
    Off,
}

impl Options {
    /// How long wrk drives one run.
    pub fn duration(&self) -> Duration {
        Duration::from_secs(self.duration)
    }

    /// Whether the 1k scenarios run on PostgreSQL (asked for, or implied by
    /// `--postgres-only` or `--compare-with`).
    pub fn postgres(&self) -> bool {
        self.postgres || self.postgres_only || self.compare_with.is_some()
    }

    /// The idle followers' `types` filter; `None` for every type.
    pub fn follower_types(&self) -> Option<&str> {
        Some(self.follower_types.as_str()).filter(|types| *types != "all")
    }

    /// Whether a measurement that needs no scenario is asked for:
    /// `--follower-latency`, `--webhook-latency` or `--idle-cost`.
    pub fn measures_beside(&self) -> bool {
        self.follower_latency > 0 || self.webhook_latency > 0 || self.idle_cost > 0
    }

    /// Whether `scenario` runs: every one when none is named, except
    /// beside [`Options::measures_beside`]'s measurements.
    pub fn runs(&self, scenario: Scenario) -> bool {
        match self.scenario.is_empty() {
            true => !self.measures_beside(),
            false => self.scenario.contains(&scenario),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Options::command().debug_assert();
    }

    #[test]
    fn defaults_are_ten_seconds_three_rounds_every_scenario() {
        let options = parse(&[]).unwrap();
        assert_eq!(
            (options.duration(), options.rounds),
            (Duration::from_secs(10), 3)
        );
        assert!(options.scenario.is_empty() && options.scaling_pets == 1_000_000);
        assert!(!options.postgres() && options.metrics == Switch::On);
        assert!(options.runs(Scenario::EventsPageDeep) && options.baseline_binary.is_none());
        assert_eq!(
            (options.idle_followers, options.follower_types()),
            (0, Some("order.delivered"))
        );
        assert_eq!(
            (options.follower_latency, options.latency_followers),
            (0, 200)
        );
    }

    #[test]
    fn every_option_is_read_and_the_implications_hold() {
        let args = "--duration 3 --rounds 1 --scenario list100_available --postgres-only \
                    --scaling-pets 0 --log-level warn --metrics off";
        let options = parse(&args.split_whitespace().collect::<Vec<_>>()).unwrap();
        assert_eq!(
            (options.duration(), options.rounds),
            (Duration::from_secs(3), 1)
        );
        assert_eq!(options.scenario, [Scenario::List100Available]);
        let two = parse(&["--scenario", "order_cycle", "--scenario", "place_order"]).unwrap();
        assert_eq!(two.scenario, [Scenario::OrderCycle, Scenario::PlaceOrder]);
        assert!(options.postgres() && options.postgres_only);
        assert_eq!(
            (options.scaling_pets, options.log_level.as_deref()),
            (0, Some("warn"))
        );
        assert_eq!(options.metrics, Switch::Off);
        assert!(
            parse(&["--compare-with", "peer $BENCH_PORT"])
                .unwrap()
                .postgres()
        );
    }

    #[test]
    fn the_feed_s_options_are_read() {
        let args = "--baseline-binary /tmp/1.5.0/petstore-server --idle-followers 200 \
                    --follower-types all";
        let options = parse(&args.split_whitespace().collect::<Vec<_>>()).unwrap();
        assert_eq!(
            options.baseline_binary.as_deref(),
            Some(std::path::Path::new("/tmp/1.5.0/petstore-server"))
        );
        assert!(
            !options.postgres(),
            "the baseline runs on every backend asked for"
        );
        assert_eq!(
            (options.idle_followers, options.follower_types()),
            (200, None)
        );
        // Alone, the latency runs no scenario; with some, those.
        let alone = parse(&["--follower-latency", "100"]).unwrap();
        assert_eq!(
            (alone.follower_latency, alone.latency_followers),
            (100, 200)
        );
        assert!(!alone.runs(Scenario::List20) && !alone.runs(Scenario::Create));
        let beside = parse(&["--follower-latency", "5", "--scenario", "create"]).unwrap();
        assert!(beside.runs(Scenario::Create) && !beside.runs(Scenario::List20));
        let cost = parse(&["--idle-cost", "10"]).unwrap();
        assert_eq!((cost.idle_cost, cost.idle_cost_rate), (10, 500));
        assert!(!cost.runs(Scenario::Create));
        assert!(
            parse(&["--idle-cost", "26"]).is_err(),
            "past the polls' wait"
        );
    }

    #[test]
    fn the_webhook_latency_runs_only_the_scenarios_named() {
        assert_eq!(parse(&[]).unwrap().webhook_latency, 0);
        let alone = parse(&["--webhook-latency", "1000"]).unwrap();
        assert_eq!(alone.webhook_latency, 1000);
        assert!(!alone.runs(Scenario::Create));
        let beside = parse(&["--webhook-latency", "5", "--scenario", "create"]).unwrap();
        assert!(beside.runs(Scenario::Create) && !beside.runs(Scenario::List20));
    }

    #[test]
    fn wrong_arguments_are_refused() {
        for args in [
            &["--duration"][..],
            &["--duration", "0"],
            &["--rounds", "x"],
            &["--scenario", "nope"],
            &["--metrics", "maybe"],
            &["--baseline-binary", "a", "--compare-with", "b"],
            &["--latency-followers", "0"],
            &["--idle-followers", "-1"],
            &["--webhook-latency", "x"],
            &["--webhook-rate", "0"],
            &["--fast"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
