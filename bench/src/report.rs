//! Results: medians over rounds, the printed table, the TSV and markdown.

use std::fmt::Write as _;
use std::time::Duration;

use super::feed::{FollowersOn, IdleCost, Latency};
use super::scenario::Scenario;
use super::webhook::{PATIENCE, WebhookLatency};

/// The dataset the scaling rows are compared with.
pub const BASE_PETS: u64 = 1000;

/// What one wrk run against one target measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Requests per second.
    pub rate: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th-percentile latency.
    pub p99: Duration,
    /// The target's CPU time (user + system) over the run, per request.
    pub cpu_per_request: Duration,
    /// Its PostgreSQL cluster's CPU time over the run (every process of
    /// the cluster), per request; none for a target without one.
    pub database_cpu_per_request: Option<Duration>,
    /// The target's peak resident memory so far, in KiB.
    pub peak_rss_kib: u64,
    /// Why the run does not count (non-2xx responses, socket errors).
    pub error: Option<String>,
}

/// One round of one scenario: the ceiling, the server and the peer (if
/// any), back to back.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    /// The pet store server.
    pub server: Sample,
    /// The ceiling.
    pub ceiling: Sample,
    /// The server compared with (`--compare-with`), when it ran.
    pub peer: Option<Sample>,
}

impl Round {
    /// Every sample of the round, named.
    fn samples(&self) -> impl Iterator<Item = (&'static str, &Sample)> {
        [("server", &self.server), ("ceiling", &self.ceiling)]
            .into_iter()
            .chain(self.peer.iter().map(|peer| ("peer", peer)))
    }
}

/// Every round of one scenario on one dataset and backend.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was sent.
    pub scenario: Scenario,
    /// Pets in the catalogue when the load started.
    pub pets: u64,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The rounds, in order.
    pub rounds: Vec<Round>,
}

/// A row's medians over the rounds in which no run had an error.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Rounds that count.
    pub rounds_ok: usize,
    /// The server's medians.
    pub server: Stats,
    /// The ceiling's medians.
    pub ceiling: Stats,
    /// Median over rounds of server req/s ÷ ceiling req/s in that round.
    pub ratio: f64,
    /// The peer's medians, and the median of server req/s ÷ peer req/s, when
    /// it ran.
    pub peer: Option<(Stats, f64)>,
    /// Every error, with its round.
    pub errors: Vec<String>,
}

/// One target's medians: req/s, p50 and p99 in ms, CPU µs per request (its
/// own, and its database's: NaN without one); and its peak RSS over every
/// round, MiB.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub cpu_us: f64,
    pub db_cpu_us: f64,
    pub rss_mib: f64,
}

/// The median; the mean of the middle two for an even count; NaN for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

impl Row {
    /// Medians over the rounds that count.
    pub fn summary(&self) -> Summary {
        let ok: Vec<&Round> = self
            .rounds
            .iter()
            .filter(|r| r.samples().all(|(_, s)| s.error.is_none()))
            .collect();
        let of = |f: &dyn Fn(&Round) -> f64| median(ok.iter().map(|r| f(r)).collect());
        let stats = |pick: &dyn Fn(&Round) -> &Sample| Stats {
            rate: of(&|r| pick(r).rate),
            p50_ms: of(&|r| pick(r).p50.as_secs_f64() * 1e3),
            p99_ms: of(&|r| pick(r).p99.as_secs_f64() * 1e3),
            cpu_us: of(&|r| pick(r).cpu_per_request.as_secs_f64() * 1e6),
            db_cpu_us: of(&|r| {
                pick(r)
                    .database_cpu_per_request
                    .map_or(f64::NAN, |cpu| cpu.as_secs_f64() * 1e6)
            }),
            rss_mib: self
                .rounds
                .iter()
                .map(|r| pick(r).peak_rss_kib)
                .max()
                .unwrap_or(0) as f64
                / 1024.0,
        };
        fn peer(r: &Round) -> &Sample {
            r.peer.as_ref().expect("every round has the peer")
        }
        let peer = self
            .rounds
            .iter()
            .all(|r| r.peer.is_some())
            .then(|| (stats(&peer), of(&|r| r.server.rate / peer(r).rate)));
        Summary {
            rounds_ok: ok.len(),
            server: stats(&|r| &r.server),
            ceiling: stats(&|r| &r.ceiling),
            ratio: of(&|r| r.server.rate / r.ceiling.rate),
            peer,
            errors: self.errors(),
        }
    }

    fn errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for (i, round) in self.rounds.iter().enumerate() {
            for (target, sample) in round.samples() {
                if let Some(error) = &sample.error {
                    errors.push(format!("round {}: {target}: {error}", i + 1));
                }
            }
        }
        errors
    }

    /// Server p99 on this dataset ÷ server p99 on the base dataset (same
    /// scenario and backend), for the scaling rows.
    fn p99_vs_base(&self, rows: &[Row]) -> Option<f64> {
        if self.pets == BASE_PETS {
            return None;
        }
        let base = rows.iter().find(|r| {
            r.pets == BASE_PETS && r.scenario == self.scenario && r.backend == self.backend
        })?;
        let ratio = self.summary().server.p99_ms / base.summary().server.p99_ms;
        ratio.is_finite().then_some(ratio)
    }
}

/// The `p`-th percentile of `values` (nearest rank); NaN for none.
pub fn percentile(mut values: Vec<f64>, p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = (p / 100.0 * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// `1000` → `1k`, `1000000` → `1M`.
pub fn pets_label(pets: u64) -> String {
    match pets {
        n if n >= 1_000_000 && n.is_multiple_of(1_000_000) => format!("{}M", n / 1_000_000),
        n if n >= 1000 && n.is_multiple_of(1000) => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}

const TSV_HEADER: &str = "scenario\tpets\tbackend\trounds\trounds_ok\tserver_rps\tceiling_rps\t\
    ratio\tserver_p50_ms\tserver_p99_ms\tceiling_p50_ms\tceiling_p99_ms\tp99_vs_1k\t\
    server_cpu_us_per_req\tceiling_cpu_us_per_req\tserver_peak_rss_mib\tceiling_peak_rss_mib\t\
    peer_rps\tserver_vs_peer\tpeer_p50_ms\tpeer_p99_ms\tpeer_cpu_us_per_req\tpeer_peak_rss_mib\t\
    server_db_cpu_us_per_req\tpeer_db_cpu_us_per_req\terrors";

/// One TSV line per row, with a header line.
pub fn tsv(rows: &[Row]) -> String {
    let mut out = format!("{TSV_HEADER}\n");
    for row in rows {
        let s = row.summary();
        let (server, ceiling) = (&s.server, &s.ceiling);
        let vs = row
            .p99_vs_base(rows)
            .map_or(String::new(), |v| format!("{v:.3}"));
        let peer = s.peer.as_ref().map_or("\t\t\t\t\t".to_owned(), |(p, vs)| {
            format!(
                "{:.0}\t{vs:.4}\t{:.3}\t{:.3}\t{:.1}\t{:.1}",
                p.rate, p.p50_ms, p.p99_ms, p.cpu_us, p.rss_mib
            )
        });
        let known = |us: f64| match us.is_finite() {
            true => format!("{us:.1}"),
            false => String::new(),
        };
        let database = format!(
            "{}\t{}",
            known(server.db_cpu_us),
            known(s.peer.as_ref().map_or(f64::NAN, |(p, _)| p.db_cpu_us))
        );
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{:.0}\t{:.0}\t{:.4}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{vs}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{peer}\t{database}\t{}",
            row.scenario.name(),
            row.pets,
            row.backend,
            row.rounds.len(),
            s.rounds_ok,
            server.rate,
            ceiling.rate,
            s.ratio,
            server.p50_ms,
            server.p99_ms,
            ceiling.p50_ms,
            ceiling.p99_ms,
            server.cpu_us,
            ceiling.cpu_us,
            server.rss_mib,
            ceiling.rss_mib,
            s.errors.join("; "),
        );
    }
    out
}

/// The results as a markdown table (also what the bench prints), then the
/// rounds left out, the feed's pages beside their pages of pets, and the
/// server beside the peer (described as `peer`: the `--compare-with` one, or the
/// `--baseline-binary`).
pub fn markdown_table(rows: &[Row], peer: &str) -> String {
    let mut out = String::from(
        "| scenario | pets | backend | req/s | ceiling req/s | ratio | p50 ms | p99 ms | \
         p99 vs 1k | ceiling p50 / p99 ms | CPU µs/req | ceiling CPU µs/req | peak RSS MiB |\n\
         |---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    let mut left_out = String::new();
    for row in rows {
        let s = row.summary();
        let (head, server, ceiling) = (row_head(row), &s.server, &s.ceiling);
        if s.rounds_ok == 0 {
            // The error fills the first number column; the other nine stay empty.
            let _ = writeln!(
                out,
                "{head}| **ERROR**: {} |{}",
                s.errors.join("; "),
                " |".repeat(9)
            );
            continue;
        }
        if !s.errors.is_empty() {
            let what = format!(
                "{} {} {}",
                row.scenario.name(),
                pets_label(row.pets),
                row.backend
            );
            let _ = writeln!(
                left_out,
                "\n{what}: rounds left out of the medians: {}",
                s.errors.join("; ")
            );
        }
        let vs = row
            .p99_vs_base(rows)
            .map_or("—".to_owned(), |v| format!("×{v:.2}"));
        let _ = writeln!(
            out,
            "{head}| {:.0} | {:.0} | **{:.3}** | {:.2} | {:.2} | {vs} | {:.2} / {:.2} | {:.1} | {:.1} | {:.1} |",
            server.rate,
            ceiling.rate,
            s.ratio,
            server.p50_ms,
            server.p99_ms,
            ceiling.p50_ms,
            ceiling.p99_ms,
            server.cpu_us,
            ceiling.cpu_us,
            server.rss_mib,
        );
    }
    out + &left_out + &feed_table(rows) + &peer_table(rows, peer)
}

/// Each feed page beside its page of pets ([`Scenario::pets_beside`]) on
/// the same dataset and backend: req/s, and CPU per request (the server's
/// and, on PostgreSQL, its database's); empty when no feed scenario ran
/// beside its page of pets.
fn feed_table(rows: &[Row]) -> String {
    let mut out = String::new();
    for row in rows.iter().filter(|row| row.scenario.reads_feed()) {
        let same = |r: &&Row| {
            r.scenario == row.scenario.pets_beside()
                && (r.pets, r.backend) == (row.pets, row.backend)
        };
        let Some(pets) = rows.iter().find(same) else {
            continue;
        };
        let (page, pets) = (row.summary(), pets.summary());
        if page.rounds_ok == 0 || pets.rounds_ok == 0 {
            continue;
        }
        let cpu = |s: &Stats| {
            s.cpu_us
                + if s.db_cpu_us.is_finite() {
                    s.db_cpu_us
                } else {
                    0.0
                }
        };
        let (rate, cpu) = (
            (page.server.rate, pets.server.rate),
            (cpu(&page.server), cpu(&pets.server)),
        );
        let _ = writeln!(
            out,
            "{}| {} | {:.0} / {:.0} | **{:.2}** | {:.1} / {:.1} | **{:.2}** |",
            row_head(row),
            row.scenario.pets_beside().name(),
            rate.0,
            rate.1,
            rate.0 / rate.1,
            cpu.0,
            cpu.1,
            cpu.0 / cpu.1,
        );
    }
    if out.is_empty() {
        return out;
    }
    "\nFeed pages beside a page of pets (same setup, same rounds; CPU: the server's, and its \
     PostgreSQL cluster's where it has one):\n\n\
     | scenario | pets | backend | beside | req/s, page / pets | ÷ | CPU µs/req, page / pets | ÷ |\n\
     |---|---|---|---|--:|--:|--:|--:|\n"
        .to_owned()
        + &out
}

/// A feed page beside its page of pets ([`Scenario::pets_beside`]) in
/// back-to-back pairs of short runs against the server: each pair's CPU
/// per request (the server's, and its PostgreSQL cluster's where it has
/// one), page ÷ pets.
pub struct FeedPairs {
    /// The page's row: its scenario, dataset and backend (no rounds).
    pub page: Row,
    /// The ratio of each pair without errors, in order.
    pub ratios: Vec<f64>,
    /// Why each other pair does not count.
    pub errors: Vec<String>,
}

/// A pair's CPU per request (the server's, and its PostgreSQL cluster's
/// where it has one), the page's ÷ the pets'; or why the pair does not
/// count.
pub fn pair_ratio(pets: &Sample, page: &Sample) -> Result<f64, String> {
    let errors: Vec<&str> = [pets, page]
        .iter()
        .filter_map(|s| s.error.as_deref())
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    Ok(pair_cpu_us(page) / pair_cpu_us(pets))
}

/// A run's CPU µs per request as a pair counts it: the server's, and its
/// PostgreSQL cluster's where it has one.
pub fn pair_cpu_us(s: &Sample) -> f64 {
    (s.cpu_per_request + s.database_cpu_per_request.unwrap_or_default()).as_secs_f64() * 1e6
}

/// The [`FeedPairs`] of every setup, as markdown: the median of the pairs'
/// ratios and their range, and how many pairs had errors; empty for none.
pub fn feed_pairs_table(pairs: &[FeedPairs]) -> String {
    let mut out = String::new();
    for p in pairs {
        let (low, high) = p
            .ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(low, high), &r| {
                (low.min(r), high.max(r))
            });
        let (median, range) = match p.ratios.is_empty() {
            true => ("ERROR".to_owned(), "—".to_owned()),
            false => (
                format!("{:.2}", median(p.ratios.clone())),
                format!("{low:.2} – {high:.2}"),
            ),
        };
        let _ = writeln!(
            out,
            "{}| {} | {} | {} | **{median}** | {range} |",
            row_head(&p.page),
            p.page.scenario.pets_beside().name(),
            p.ratios.len(),
            p.errors.len(),
        );
    }
    if out.is_empty() {
        return out;
    }
    "\nFeed pages beside a page of pets, in pairs: after the rounds (and without idle followers), \
     short runs of the two against the server back to back (which goes first alternates), so \
     that both see the same state of the machine; CPU µs/req (the server's, and its PostgreSQL \
     cluster's where it has one), page ÷ pets:\n\n\
     | scenario | pets | backend | beside | pairs | pairs with errors | CPU ÷, median | range |\n\
     |---|---|---|---|--:|--:|--:|--|\n"
        .to_owned()
        + &out
}

/// The follower latency of each setup that measured it (backend, where the
/// followers were parked, how many, what they received), as markdown; empty
/// for none.
pub fn latency_table(rows: &[(&str, FollowersOn, usize, Latency)]) -> String {
    let mut out = String::new();
    for (backend, on, followers, latency) in rows {
        let delays = |p: f64| percentile(latency.delays_ms.clone(), p);
        let _ = writeln!(
            out,
            "| {backend} | {} | {followers} | {} | {:.2} | **{:.2}** | {:.2} | {:.2} | {} |",
            on.name(),
            latency.creates_ms.len(),
            delays(50.0),
            delays(99.0),
            delays(100.0),
            median(latency.creates_ms.clone()),
            latency.not_parked,
        );
    }
    if out.is_empty() {
        return out;
    }
    "\nFrom a commit to the followers parked at the head (`--follower-latency`): ms from the \
     create's `201` reaching the bench to each follower's page reaching it (negative: the \
     follower was first), over every follower and commit. On PostgreSQL, then the same with \
     the followers on a second instance on the same database, and the commits on the first:\n\n\
     | backend | followers on | followers | commits | p50 ms | p99 ms | max ms | create p50 ms | receipts not from a parked poll |\n\
     |---|---|--:|--:|--:|--:|--:|--:|--:|\n"
        .to_owned()
        + &out
}

/// The webhook delivery delays of each setup that measured them (backend,
/// what was measured), as markdown; empty for none.
pub fn webhook_table(rows: &[(&str, WebhookLatency)]) -> String {
    let mut out = String::new();
    for (backend, w) in rows {
        // With events not delivered, their delays are lower bounds.
        let at_least = if w.delivered < w.created { "≥ " } else { "" };
        let delays = |p: f64| format!("{at_least}{:.1}", percentile(w.delays_ms.clone(), p));
        let _ = writeln!(
            out,
            "| {backend} | {} | {} | {} | {} | {} | **{}** | {} | {:.0} |",
            w.load,
            w.created,
            w.delivered,
            w.repeated,
            delays(50.0),
            delays(99.0),
            delays(100.0),
            w.rate,
        );
    }
    if out.is_empty() {
        return out;
    }
    format!(
        "\nFrom a commit to a webhook receiver (`--webhook-latency`): per event, ms from its \
         `time` (the commit) to its first delivery having reached the receiver (for an event not \
         delivered within {} s of the load's end, to then: the delays are lower bounds, marked \
         ≥); the issue's bound is p99 ≤ 1,000 ms. Deliveries/s: from the first arrival to the \
         last:\n\n\
         | backend | load | events | delivered | repeats | p50 ms | p99 ms | max ms | deliveries/s |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|\n{out}",
        PATIENCE.as_secs()
    )
}

/// The server's CPU a second over an `--idle-cost` window.
pub fn per_second(window: &IdleCost) -> f64 {
    window.cpu.as_secs_f64() / window.elapsed.as_secs_f64()
}

/// The `--idle-cost` windows of each setup that measured them (backend,
/// window), as markdown: each window, then per backend the medians with
/// the followers less those without; empty for none.
pub fn idle_cost_table(rows: &[(&str, IdleCost)]) -> String {
    let micros_per_create =
        |cpu: Duration, w: &IdleCost| cpu.as_secs_f64() * 1e6 / w.creates as f64;
    let mut out = String::new();
    for (backend, w) in rows {
        let database = w.database_cpu.map_or("—".to_owned(), |cpu| {
            format!("{:.0}", micros_per_create(cpu, w))
        });
        let _ = writeln!(
            out,
            "| {backend} | {} | {:.0} | {:.1} | {:.0} | {database} |",
            w.followers,
            w.creates as f64 / w.elapsed.as_secs_f64(),
            per_second(w) * 1e3,
            micros_per_create(w.cpu, w),
        );
    }
    if out.is_empty() {
        return out;
    }
    let mut backends: Vec<&str> = rows.iter().map(|(backend, _)| *backend).collect();
    backends.dedup();
    let mut added = String::new();
    for backend in backends {
        let of = |parked: bool| {
            let windows = rows
                .iter()
                .filter(|(b, w)| *b == backend && (w.followers > 0) == parked);
            median(windows.map(|(_, w)| per_second(w) * 1e3).collect())
        };
        let (without, with) = (of(false), of(true));
        let _ = write!(
            added,
            "{backend}: **{:+.1} ms a second** ({:+.1} %, {:.1} % of one core); ",
            with - without,
            100.0 * (with / without - 1.0),
            (with - without) / 10.0,
        );
    }
    format!(
        "\nWhat parked long polls cost the server (`--idle-cost`): windows of steady creates, \
         alternately without and with the followers parked; the server's CPU (ms a second, µs a \
         create) and its database's (µs a create). With the followers, medians less those \
         without: {}\n\n\
         | backend | followers | creates/s | server CPU ms/s | server CPU µs/create | database CPU µs/create |\n\
         |---|--:|--:|--:|--:|--:|\n{out}",
        added.trim_end_matches("; ")
    )
}

/// The first three cells of a row's line: scenario, pets, backend.
fn row_head(row: &Row) -> String {
    format!(
        "| {} | {} | {} ",
        row.scenario.name(),
        pets_label(row.pets),
        row.backend
    )
}

/// The server beside the peer (described as `peer`), for the rows it ran
/// in, then each one's rate round by round; empty when it ran in none.
fn peer_table(rows: &[Row], peer_name: &str) -> String {
    let mut out = String::new();
    let mut by_round = String::new();
    for row in rows {
        let s = row.summary();
        let (Some((peer, vs)), true) = (&s.peer, s.rounds_ok > 0) else {
            continue;
        };
        let server = &s.server;
        let _ = writeln!(
            out,
            "{}| {:.0} | {:.0} | **{vs:.2}** | {:.2} / {:.2} | {:.0} / {:.0} | {} / {} | {:.1} / {:.1} |",
            row_head(row),
            peer.rate,
            server.rate,
            peer.p99_ms,
            server.p99_ms,
            peer.cpu_us,
            server.cpu_us,
            whole(peer.db_cpu_us),
            whole(server.db_cpu_us),
            peer.rss_mib,
            server.rss_mib,
        );
        let rates = |pick: &dyn Fn(&Round) -> Option<&Sample>| {
            let rates: Vec<String> = row
                .rounds
                .iter()
                .map(|r| pick(r).map_or("—".to_owned(), |s| format!("{:.0}", s.rate)))
                .collect();
            let (first, last) = (row.rounds.first(), row.rounds.last());
            let change = match (first.and_then(pick), last.and_then(pick)) {
                (Some(first), Some(last)) => {
                    format!("{:+.0} %", (last.rate / first.rate - 1.0) * 100.0)
                }
                _ => "—".to_owned(),
            };
            format!("{} | {change}", rates.join(", "))
        };
        let ratios: Vec<String> = row
            .rounds
            .iter()
            .map(|r| {
                r.peer.as_ref().map_or("—".to_owned(), |p| {
                    format!("{:.2}", r.server.rate / p.rate)
                })
            })
            .collect();
        let _ = writeln!(
            by_round,
            "{}| {} | {} | {} |",
            row_head(row),
            rates(&|r| Some(&r.server)),
            rates(&|r| r.peer.as_ref()),
            ratios.join(", "),
        );
    }
    if out.is_empty() {
        return out;
    }
    format!(
        "\nBeside {peer_name}, same rounds, same load, each on its own database (database CPU: \
         every process of the target's PostgreSQL cluster):\n\n"
    ) + "| scenario | pets | backend | peer req/s | server req/s | server ÷ peer | p99 ms, peer / server | \
     CPU µs/req, peer / server | database CPU µs/req, peer / server | peak RSS MiB, peer / server |\n\
     |---|---|---|--:|--:|--:|--:|--:|--:|--:|\n"
        + &out
        + "\nRound by round (req/s, and the last round beside the first):\n\n\
           | scenario | pets | backend | server | last ÷ first | peer | last ÷ first | server ÷ peer |\n\
           |---|---|---|--:|--:|--:|--:|--:|\n"
        + &by_round
}

/// A number of µs, or a dash when unknown.
fn whole(us: f64) -> String {
    match us.is_finite() {
        true => format!("{us:.0}"),
        false => "—".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rate: f64, p99_ms: u64, error: Option<&str>) -> Sample {
        Sample {
            rate,
            p50: Duration::from_millis(1),
            p99: Duration::from_millis(p99_ms),
            cpu_per_request: Duration::from_micros(50),
            database_cpu_per_request: Some(Duration::from_micros(70)),
            peak_rss_kib: 2048,
            error: error.map(str::to_owned),
        }
    }

    fn round(server: f64, ceiling: f64) -> Round {
        Round {
            server: sample(server, 10, None),
            ceiling: sample(ceiling, 2, None),
            peer: None,
        }
    }

    #[test]
    fn the_peer_is_compared_round_by_round() {
        let mut rounds = vec![round(100.0, 400.0), round(300.0, 600.0), round(90.0, 100.0)];
        for (round, peer) in rounds.iter_mut().zip([50.0, 300.0, 100.0]) {
            round.peer = Some(sample(peer, 20, None));
        }
        let row = Row {
            scenario: Scenario::GetById,
            pets: 1000,
            backend: "postgres",
            rounds,
        };
        let (peer, server_vs_peer) = row.summary().peer.expect("the peer ran");
        // Per round: 2.0, 1.0, 0.9.
        assert_eq!(server_vs_peer, 1.0);
        assert_eq!((peer.rate, peer.p99_ms), (100.0, 20.0));
        let table = markdown_table(std::slice::from_ref(&row), "the peer");
        assert!(
            table.contains(
                "| get_by_id | 1k | postgres | 100 | 100 | **1.00** | 20.00 / 10.00 | 50 / 50 | 70 / 70 |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| get_by_id | 1k | postgres | 100, 300, 90 | -10 % | 50, 300, 100 | +100 % | 2.00, 1.00, 0.90 |"),
            "{table}"
        );
        assert_eq!(tsv(&[row]).lines().nth(1).unwrap().split('\t').count(), 26);

        let mut failed = round(1.0, 1.0);
        failed.peer = Some(sample(1.0, 1, Some("3 non-2xx responses")));
        let row = Row {
            scenario: Scenario::Create,
            pets: 1000,
            backend: "postgres",
            rounds: vec![failed],
        };
        assert_eq!(row.summary().errors, ["round 1: peer: 3 non-2xx responses"]);
        assert_eq!(row.summary().rounds_ok, 0);
    }

    #[test]
    fn medians_of_odd_even_and_no_values() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn the_ratio_is_the_median_of_per_round_ratios() {
        let row = Row {
            scenario: Scenario::List20,
            pets: 1000,
            backend: "sqlite",
            rounds: vec![round(100.0, 400.0), round(300.0, 600.0), round(90.0, 100.0)],
        };
        let s = row.summary();
        assert_eq!(s.rounds_ok, 3);
        assert_eq!(s.ratio, 0.5);
        assert_eq!((s.server.rate, s.ceiling.rate), (100.0, 400.0));
        assert_eq!((s.server.cpu_us, s.server.rss_mib), (50.0, 2.0));
    }

    #[test]
    fn rounds_with_errors_are_reported_not_counted() {
        let mut bad = round(1e6, 100.0);
        bad.server.error = Some("5 non-2xx responses".into());
        let row = Row {
            scenario: Scenario::Create,
            pets: 1000,
            backend: "sqlite",
            rounds: vec![bad.clone(), round(50.0, 100.0)],
        };
        let s = row.summary();
        assert_eq!((s.rounds_ok, s.ratio), (1, 0.5));
        assert_eq!(s.errors, ["round 1: server: 5 non-2xx responses"]);
        let all_bad = Row {
            rounds: vec![bad],
            ..row
        };
        let table = markdown_table(&[all_bad], "the peer");
        assert!(
            table.contains("**ERROR**: round 1: server: 5 non-2xx"),
            "{table}"
        );
        assert_eq!(
            table.lines().nth(2).unwrap().matches('|').count(),
            14,
            "{table}"
        );
    }

    #[test]
    fn scaling_rows_compare_their_p99_with_1k() {
        let base = Row {
            scenario: Scenario::GetById,
            pets: 1000,
            backend: "sqlite",
            rounds: vec![round(100.0, 200.0)],
        };
        let mut big = base.clone();
        big.pets = 1_000_000;
        big.rounds[0].server.p99 = Duration::from_millis(15);
        let rows = [base, big];
        assert_eq!(rows[1].p99_vs_base(&rows), Some(1.5));
        assert_eq!(rows[0].p99_vs_base(&rows), None);
        let tsv = tsv(&rows);
        assert_eq!(tsv.lines().count(), 3);
        assert!(tsv.lines().nth(2).unwrap().contains("\t1.500\t"), "{tsv}");
        assert!(markdown_table(&rows, "the peer").contains("| get_by_id | 1M | sqlite |"));
    }

    #[test]
    fn percentiles_are_nearest_ranks() {
        let values: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        let at = |p| percentile(values.clone(), p);
        assert_eq!(
            (at(50.0), at(99.0), at(100.0), at(0.0)),
            (100.0, 198.0, 200.0, 1.0)
        );
        assert!(percentile(vec![], 99.0).is_nan());
    }

    #[test]
    fn feed_pages_are_set_beside_their_page_of_pets_of_their_setup() {
        let row = |scenario, pets, backend, rate| {
            let mut round = round(rate, 1000.0);
            if backend == "sqlite" {
                round.server.database_cpu_per_request = None;
            }
            Row {
                scenario,
                pets,
                backend,
                rounds: vec![round],
            }
        };
        let mut deep = row(Scenario::EventsPageDeep, 1000, "postgres", 450.0);
        deep.rounds[0].server.cpu_per_request = Duration::from_micros(60);
        let rows = [
            row(Scenario::List20, 1000, "sqlite", 400.0),
            row(Scenario::List20, 1000, "postgres", 500.0),
            row(Scenario::List20Random, 1000, "sqlite", 250.0),
            row(Scenario::EventsPage, 1000, "sqlite", 500.0),
            deep,
            row(Scenario::EventsPageRandom, 1000, "sqlite", 200.0),
            // No list20 on 1M, nor list20_random on PostgreSQL: left out.
            row(Scenario::EventsPage, 1_000_000, "sqlite", 300.0),
            row(Scenario::EventsPageRandom, 1000, "postgres", 100.0),
        ];
        let table = markdown_table(&rows, "the peer");
        for line in [
            "| events_page | 1k | sqlite | list20 | 500 / 400 | **1.25** | 50.0 / 50.0 | **1.00** |",
            // On PostgreSQL, the database's CPU counts too: 60 + 70 beside 50 + 70.
            "| events_page_deep | 1k | postgres | list20 | 450 / 500 | **0.90** | 130.0 / 120.0 | **1.08** |",
            "| events_page_random | 1k | sqlite | list20_random | 200 / 250 | **0.80** | 50.0 / 50.0 | **1.00** |",
        ] {
            assert!(table.contains(line), "{table}");
        }
        for left_out in [
            "| events_page | 1M | sqlite | list20 |",
            "| events_page_random | 1k | postgres | list20_random |",
        ] {
            assert!(!table.contains(left_out), "{table}");
        }
        assert!(!markdown_table(&rows[..3], "the peer").contains("Feed pages"));
    }

    #[test]
    fn a_pair_compares_cpu_with_the_database_s_and_counts_only_without_errors() {
        let (mut list20, mut page) = (sample(100.0, 1, None), sample(90.0, 1, None));
        page.cpu_per_request = Duration::from_micros(20);
        // (20 + 70) ÷ (50 + 70).
        assert_eq!(pair_ratio(&list20, &page), Ok(0.75));
        page.database_cpu_per_request = None;
        list20.database_cpu_per_request = None;
        assert_eq!(pair_ratio(&list20, &page), Ok(0.4));
        let failed = |error| sample(90.0, 1, Some(error));
        assert_eq!(
            pair_ratio(&list20, &failed("12 non-2xx")),
            Err("12 non-2xx".to_owned())
        );
        assert_eq!(
            pair_ratio(&failed("3 timeouts"), &page),
            Err("3 timeouts".to_owned())
        );
    }

    #[test]
    fn feed_pairs_give_the_median_of_their_ratios_their_range_and_their_errors() {
        let pairs = |scenario, backend, ratios: &[f64], errors: usize| FeedPairs {
            page: Row {
                scenario,
                pets: 1000,
                backend,
                rounds: Vec::new(),
            },
            ratios: ratios.to_vec(),
            errors: vec!["12 non-2xx".to_owned(); errors],
        };
        let table = feed_pairs_table(&[
            pairs(Scenario::EventsPage, "sqlite", &[1.13, 1.03, 1.07, 1.38], 0),
            pairs(Scenario::EventsPageDeep, "postgres", &[0.7, 0.6, 0.65], 1),
            pairs(Scenario::EventsPageRandom, "postgres", &[], 2),
        ]);
        for row in [
            "| events_page | 1k | sqlite | list20 | 4 | 0 | **1.10** | 1.03 – 1.38 |",
            "| events_page_deep | 1k | postgres | list20 | 3 | 1 | **0.65** | 0.60 – 0.70 |",
            "| events_page_random | 1k | postgres | list20_random | 0 | 2 | **ERROR** | — |",
        ] {
            assert!(table.contains(row), "{table}");
        }
        assert_eq!(feed_pairs_table(&[]), "");
    }

    #[test]
    fn the_follower_latency_is_reported_per_setup() {
        let latency = Latency {
            delays_ms: (0..200).map(|i| f64::from(i) / 10.0 - 0.5).collect(),
            creates_ms: vec![2.0, 4.0, 3.0],
            not_parked: 1,
        };
        let table = latency_table(&[
            ("sqlite", FollowersOn::TheWriter, 200, latency.clone()),
            ("postgres", FollowersOn::AnotherInstance, 200, latency),
        ]);
        for row in [
            "| sqlite | the writer | 200 | 3 | 9.40 | **19.20** | 19.40 | 3.00 | 1 |",
            "| postgres | another instance | 200 | 3 | 9.40 | **19.20** | 19.40 | 3.00 | 1 |",
        ] {
            assert!(table.contains(row), "{table}");
        }
        assert!(latency_table(&[]).is_empty());
    }

    #[test]
    fn the_idle_cost_is_reported_per_window_with_the_medians_difference() {
        let window = |followers, cpu_ms| IdleCost {
            followers,
            creates: 1000,
            elapsed: Duration::from_secs(2),
            cpu: Duration::from_millis(cpu_ms),
            database_cpu: None,
        };
        let rows = [
            ("sqlite", window(0, 200)),
            ("sqlite", window(200, 300)),
            ("sqlite", window(0, 220)),
            ("sqlite", window(200, 260)),
            ("sqlite", window(0, 240)),
            ("sqlite", window(200, 280)),
        ];
        let table = idle_cost_table(&rows);
        // 140 ms a second with them (median), 110 without: 30 more.
        assert!(
            table.contains("sqlite: **+30.0 ms a second** (+27.3 %, 3.0 % of one core)"),
            "{table}"
        );
        assert!(
            table.contains("| sqlite | 200 | 500 | 150.0 | 300 | — |"),
            "{table}"
        );
        assert!(idle_cost_table(&[]).is_empty());
    }

    #[test]
    fn the_webhook_latency_is_reported_per_setup_and_load() {
        let latency = WebhookLatency {
            load: "100 creates at 100/s".to_owned(),
            created: 100,
            delivered: 100,
            repeated: 0,
            delays_ms: (1..=100).map(f64::from).collect(),
            rate: 99.6,
        };
        let table = webhook_table(&[("postgres", latency.clone())]);
        assert!(
            table.contains(
                "| postgres | 100 creates at 100/s | 100 | 100 | 0 | 50.0 | **99.0** | 100.0 | 100 |"
            ),
            "{table}"
        );
        let late = WebhookLatency {
            delivered: 90,
            ..latency.clone()
        };
        let table = webhook_table(&[("sqlite", late)]);
        assert!(
            table.contains("| 90 | 0 | ≥ 50.0 | **≥ 99.0** | ≥ 100.0 |"),
            "{table}"
        );
        assert!(webhook_table(&[]).is_empty());
    }

    #[test]
    fn pets_are_labelled_short() {
        assert_eq!(pets_label(1000), "1k");
        assert_eq!(pets_label(1_000_000), "1M");
        assert_eq!(pets_label(2500), "2500");
    }
}
