//! What machine the numbers come from, how busy it was, and what `/proc`
//! says about each process measured.

use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use procfs::Current;

use super::options::{Options, Switch};
use super::wrk;

/// The machine, described once at the start.
pub struct Machine {
    /// Cores, CPU model, memory, kernel, rustc and wrk, on one line.
    pub summary: String,
    /// When the bench started (UTC).
    started: String,
    /// 1, 5 and 15 minute load averages at the start.
    pub load_average: String,
}

impl Machine {
    /// Looks the machine up.
    pub fn describe() -> Machine {
        let cpuinfo = procfs::CpuInfo::current().ok();
        let cpu = cpuinfo.as_ref().and_then(|info| info.model_name(0));
        let memory = procfs::Meminfo::current().map_or(f64::NAN, |m| m.mem_total as f64);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Machine {
            summary: format!(
                "{} cores ({}), {:.1} GiB, Linux {}, {}, {}",
                std::thread::available_parallelism().map_or(1, usize::from),
                cpu.unwrap_or("unknown CPU"),
                memory / f64::from(1 << 30),
                kernel.trim(),
                output("rustc", &["--version"]),
                wrk::version().unwrap_or_else(|| "wrk (unknown version)".into()),
            ),
            started: output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            load_average: load_average(),
        }
    }

    /// The preamble of `results.md`: the command line and its options, the
    /// machine, the load before and `load_after`, how long `seeding` took.
    pub fn markdown(&self, o: &Options, load_after: &str, seeding: &[String]) -> String {
        let command = std::iter::once("cargo xtask bench".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" ");
        let log_level = o
            .log_level
            .as_deref()
            .unwrap_or("the default (info, one JSON record per request)");
        let metrics = if o.metrics == Switch::On { "on" } else { "off" };
        let (duration, rounds) = (o.duration().as_secs(), o.rounds);
        let (threads, connections) = (wrk::THREADS, wrk::CONNECTIONS);
        format!(
            "Results of `{command}`, {}.\n\n\
             - Machine: {}\n\
             - Load average (1/5/15 min): {} at the start, {load_after} at the end\n\
             - Load: wrk -t {threads} -c {connections}, {duration} s per run, {rounds} round(s), \
             ceiling and server alternating; medians over rounds\n\
             - Server log level: {log_level}\n\
             - Server metrics (management listener): {metrics}\n\
             - Seeding through the storage layer, and start-up: {}\n",
            self.started,
            self.summary,
            self.load_average,
            seeding.join("; "),
        )
    }
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` writes them.
pub fn load_average() -> String {
    procfs::LoadAverage::current().map_or("unknown".into(), |l| {
        format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen)
    })
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

/// CPU time the process `pid` has used so far (user + system, all threads).
fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = process(pid)?.stat().context("reading /proc/PID/stat")?;
    let ticks = (stat.utime + stat.stime) as f64;
    Ok(Duration::from_secs_f64(
        ticks / procfs::ticks_per_second() as f64,
    ))
}

/// CPU time a PostgreSQL cluster has used so far: its postmaster's and that
/// of every process it started — backends, autovacuum, checkpointer, WAL
/// writer — including those that have exited (the postmaster reaps them,
/// and their time becomes its children's).
fn cluster_cpu_time(postmaster: u32) -> anyhow::Result<Duration> {
    let stat = process(postmaster)?
        .stat()
        .context("reading the postmaster's /proc/PID/stat")?;
    let reaped = u64::try_from(stat.cutime + stat.cstime).unwrap_or(0);
    let mut ticks = stat.utime + stat.stime + reaped;
    let all = procfs::process::all_processes().context("listing processes")?;
    for child in all.flatten() {
        // A process may exit while it is read: it is then counted as reaped.
        if let Ok(stat) = child.stat()
            && u32::try_from(stat.ppid) == Ok(postmaster)
        {
            ticks += stat.utime + stat.stime;
        }
    }
    Ok(Duration::from_secs_f64(
        ticks as f64 / procfs::ticks_per_second() as f64,
    ))
}

/// The CPU time a server, and its PostgreSQL cluster if it has one, have
/// used since [`CpuSince::now`]: around a run.
pub struct CpuSince {
    pid: u32,
    postmaster: Option<u32>,
    server: Duration,
    database: Option<Duration>,
}

impl CpuSince {
    /// Starts counting for the process `pid` and the cluster of `postmaster`.
    pub fn now(pid: u32, postmaster: Option<u32>) -> anyhow::Result<CpuSince> {
        Ok(CpuSince {
            pid,
            postmaster,
            database: postmaster.map(cluster_cpu_time).transpose()?,
            server: cpu_time(pid)?,
        })
    }

    /// The server's CPU time since, and its database's.
    pub fn taken(&self) -> anyhow::Result<(Duration, Option<Duration>)> {
        let server = cpu_time(self.pid)?.saturating_sub(self.server);
        let database = match (self.postmaster, self.database) {
            (Some(postmaster), Some(before)) => {
                Some(cluster_cpu_time(postmaster)?.saturating_sub(before))
            }
            _ => None,
        };
        Ok((server, database))
    }
}

/// The pid of the postmaster of the cluster at `url`: the parent of the
/// backend of a session.
pub async fn postmaster(url: &str) -> anyhow::Result<u32> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let connection = tokio::spawn(connection);
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .try_get(0)?;
    // Read while the session (and so its backend) lives.
    let parent = process(u32::try_from(backend)?)?.stat()?.ppid;
    drop(client);
    let _ = connection.await;
    Ok(u32::try_from(parent)?)
}

/// The most resident memory the process `pid` has had (`VmHWM`), in KiB.
pub fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = process(pid)?.status().context("reading /proc/PID/status")?;
    status.vmhwm.context("no VmHWM in /proc/PID/status")
}

fn process(pid: u32) -> anyhow::Result<procfs::process::Process> {
    procfs::process::Process::new(pid as i32).with_context(|| format!("/proc/{pid}"))
}
