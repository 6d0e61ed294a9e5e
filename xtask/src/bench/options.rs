//! The command line of `cargo xtask bench`.

use std::time::Duration;

use anyhow::{Context, bail};

use super::scenario::Scenario;

/// The usage text, printed for `--help` and after a wrong argument.
pub const USAGE: &str = "usage: cargo xtask bench [OPTIONS]

options:
  --duration SECS      seconds wrk drives each run (default 10)
  --rounds N           rounds per scenario, ceiling and server alternating (default 3)
  --scenario NAME      run only NAME: list20, get_by_id, create, create_idempotent,
                       list100_available, list20_deep
  --postgres           also run the 1k scenarios on a throwaway PostgreSQL cluster
  --postgres-only      only the PostgreSQL setup (implies --postgres)
  --compare-with CMD   also run another server (a peer) beside ours under the same load
                       on the PostgreSQL setup (implies --postgres), on a throwaway cluster
                       of its own seeded with the same pets through POST /v1/pets. CMD is
                       run by `sh -c 'exec CMD'` with BENCH_PORT (where it must listen on
                       127.0.0.1), BENCH_DATABASE_URL and BENCH_API_KEY (the bearer key it
                       must accept) in its environment; only the scenarios a plain pet
                       store implements (list20, get_by_id, create, list100_available)
                       are run against it. Example, with the peer built as its README says:
  --compare-with 'target/peers/release/axum-postgres $BENCH_PORT $BENCH_DATABASE_URL'
  --scaling-pets N     pets in the scaling dataset (default 1000000; 0 skips it)
  --log-level LEVEL    pass --log-level to the server (default: the server's own, info),
                       to measure what logging costs
  --metrics on|off     the server's metrics and management listener (default on, as the
                       server's default), off to measure what metrics cost";

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// How long wrk drives one run.
    pub duration: Duration,
    /// Rounds per scenario and dataset.
    pub rounds: usize,
    /// Only this scenario, if given.
    pub scenario: Option<Scenario>,
    /// Whether to run the 1k scenarios on PostgreSQL too.
    pub postgres: bool,
    /// Whether to run only those (no SQLite setup).
    pub postgres_only: bool,
    /// A shell command starting another server to measure beside ours on
    /// PostgreSQL, if given.
    pub compare_with: Option<String>,
    /// Pets in the scaling dataset; 0 skips it.
    pub scaling_pets: u64,
    /// `--log-level` for the server, if not its default.
    pub log_level: Option<String>,
    /// Whether the server keeps metrics (its management listener on, as by
    /// default); off to measure what they cost.
    pub metrics: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            duration: Duration::from_secs(10),
            rounds: 3,
            scenario: None,
            postgres: false,
            postgres_only: false,
            compare_with: None,
            scaling_pets: 1_000_000,
            log_level: None,
            metrics: true,
        }
    }
}

/// What the command line asks for: a run, or the usage text.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Run the bench with these options.
    Run(Options),
    /// Print the usage text.
    Help,
}

/// Parses the arguments after `bench`.
pub fn parse(args: &[&str]) -> anyhow::Result<Parsed> {
    let mut options = Options::default();
    let mut args = args.iter();
    while let Some(&flag) = args.next() {
        let mut value = || {
            args.next()
                .copied()
                .with_context(|| format!("{flag} needs a value"))
        };
        match flag {
            "--help" | "-h" => return Ok(Parsed::Help),
            "--postgres" => options.postgres = true,
            "--postgres-only" => {
                options.postgres_only = true;
                options.postgres = true;
            }
            "--compare-with" => {
                options.compare_with = Some(value()?.to_owned());
                options.postgres = true;
            }
            "--duration" => options.duration = Duration::from_secs(positive(flag, value()?)?),
            "--rounds" => options.rounds = positive(flag, value()?)? as usize,
            "--scenario" => options.scenario = Some(Scenario::parse(value()?)?),
            "--scaling-pets" => options.scaling_pets = number(flag, value()?)?,
            "--log-level" => options.log_level = Some(value()?.to_owned()),
            "--metrics" => {
                options.metrics = match value()? {
                    "on" => true,
                    "off" => false,
                    other => bail!("--metrics {other:?}: expected on or off"),
                }
            }
            _ => bail!("unknown argument {flag:?}\n\n{USAGE}"),
        }
    }
    Ok(Parsed::Run(options))
}

fn number(flag: &str, value: &str) -> anyhow::Result<u64> {
    value
        .parse()
        .with_context(|| format!("{flag} {value:?}: expected a whole number"))
}

fn positive(flag: &str, value: &str) -> anyhow::Result<u64> {
    match number(flag, value)? {
        0 => bail!("{flag} must be at least 1"),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse(args).unwrap() {
            Parsed::Run(options) => options,
            Parsed::Help => panic!("help"),
        }
    }

    #[test]
    fn defaults_are_ten_seconds_three_rounds_every_scenario() {
        assert_eq!(run(&[]), Options::default());
        assert_eq!(Options::default().duration, Duration::from_secs(10));
        assert_eq!(Options::default().rounds, 3);
    }

    #[test]
    fn every_option_is_read() {
        let options = run(&[
            "--duration",
            "3",
            "--rounds",
            "1",
            "--scenario",
            "get_by_id",
            "--postgres-only",
            "--scaling-pets",
            "0",
            "--log-level",
            "warn",
            "--metrics",
            "off",
        ]);
        assert_eq!(
            options,
            Options {
                duration: Duration::from_secs(3),
                rounds: 1,
                scenario: Some(Scenario::GetById),
                postgres: true,
                postgres_only: true,
                compare_with: None,
                scaling_pets: 0,
                log_level: Some("warn".into()),
                metrics: false,
            }
        );
    }

    #[test]
    fn a_peer_to_compare_with_implies_postgres() {
        let options = run(&["--compare-with", "peer $BENCH_PORT"]);
        assert_eq!(options.compare_with.as_deref(), Some("peer $BENCH_PORT"));
        assert!(options.postgres);
    }

    #[test]
    fn wrong_arguments_are_refused_with_a_reason() {
        let error = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert!(error(&["--duration"]).contains("needs a value"));
        assert!(error(&["--duration", "0"]).contains("at least 1"));
        assert!(error(&["--rounds", "x"]).contains("whole number"));
        assert!(error(&["--scenario", "nope"]).contains("list20"));
        assert!(error(&["--fast"]).contains("unknown argument"));
        assert_eq!(parse(&["--help"]).unwrap(), Parsed::Help);
    }
}
