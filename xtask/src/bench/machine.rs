//! What machine the numbers come from, and how busy it was.

use std::process::Command;

use super::options::{Options, Switch};
use super::wrk;

/// The machine, described once at the start.
pub struct Machine {
    /// Cores the bench may use.
    pub cores: usize,
    /// The CPU model, from `/proc/cpuinfo`.
    pub cpu: String,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// `uname -r`.
    pub kernel: String,
    /// `rustc --version`.
    pub rustc: String,
    /// wrk's version line.
    pub wrk: String,
    /// When the bench started (UTC).
    pub started: String,
    /// 1, 5 and 15 minute load averages at the start.
    pub load_average: String,
}

/// What was run, for the results file.
pub struct RunInfo {
    /// The command line.
    pub command: String,
    /// Its options.
    pub options: Options,
    /// The load average at the start.
    pub load_before: String,
    /// The load average at the end.
    pub load_after: String,
    /// How long seeding each dataset took.
    pub seeding: Vec<String>,
}

impl Machine {
    /// Looks the machine up.
    pub fn describe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            cpu: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown CPU".into()),
            memory_gib: field(&meminfo, "MemTotal")
                .and_then(|kb| kb.trim_end_matches(" kB").parse::<f64>().ok())
                .map_or(f64::NAN, |kb| kb / 1024.0 / 1024.0),
            kernel: output("uname", &["-r"]),
            rustc: output("rustc", &["--version"]),
            wrk: wrk::version(),
            started: output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            load_average: load_average(),
        }
    }

    /// For the start of the bench's output.
    pub fn one_line(&self) -> String {
        format!(
            "{} cores ({}), {:.1} GiB, Linux {}, {}, {}; load average {}",
            self.cores,
            self.cpu,
            self.memory_gib,
            self.kernel,
            self.rustc,
            self.wrk,
            self.load_average
        )
    }

    /// The preamble of `results.md`.
    pub fn markdown(&self, run: &RunInfo) -> String {
        let o = &run.options;
        let machine = self.one_line();
        let machine = machine.split("; load").next().unwrap_or_default();
        let log_level = o
            .log_level
            .as_deref()
            .unwrap_or("the default (info, one JSON record per request)");
        let metrics = if o.metrics == Switch::On { "on" } else { "off" };
        let (duration, rounds) = (o.duration().as_secs(), o.rounds);
        let (threads, connections) = (wrk::THREADS, wrk::CONNECTIONS);
        format!(
            "Results of `{}`, {}.\n\n\
             - Machine: {machine}\n\
             - Load average (1/5/15 min): {} at the start, {} at the end\n\
             - Load: wrk -t {threads} -c {connections}, {duration} s per run, {rounds} round(s), \
             ceiling and server alternating; medians over rounds\n\
             - Server log level: {log_level}\n\
             - Server metrics (management listener): {metrics}\n\
             - Seeding through the storage layer, and start-up: {}\n",
            run.command,
            self.started,
            run.load_before,
            run.load_after,
            run.seeding.join("; "),
        )
    }
}

/// `/proc/loadavg`'s first three numbers.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// The value of the first `name: value` line.
fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == name)
        .map(|(_, value)| value.trim().to_owned())
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| format!("{program}: unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_proc_style_text() {
        let text = "processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\n";
        assert_eq!(
            field(text, "model name").as_deref(),
            Some("Some CPU @ 2.0GHz")
        );
        assert_eq!(
            field("MemTotal:       24000000 kB\n", "MemTotal").as_deref(),
            Some("24000000 kB")
        );
        assert_eq!(field(text, "flags"), None);
    }
}
