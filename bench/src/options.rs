//! The command line of `petstore-bench` (and `cargo xtask bench`).

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
    /// implement (create_idempotent, list20_deep) is run against it. Example, with
    /// the peer built as its README says: --compare-with
    /// 'target/peers/release/axum-postgres $BENCH_PORT $BENCH_DATABASE_URL'
    #[arg(long, value_name = "CMD", verbatim_doc_comment)]
    pub compare_with: Option<String>,
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
    fn wrong_arguments_are_refused() {
        for args in [
            &["--duration"][..],
            &["--duration", "0"],
            &["--rounds", "x"],
            &["--scenario", "nope"],
            &["--metrics", "maybe"],
            &["--fast"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
