//! Structured logs: the access log — one record per request (dropshot's
//! "request completed", with method, uri, response code, latency and request
//! id) and one per connection — plus start-up and shutdown records.
//!
//! The level and access-log filters sit *before* the asynchronous drain, so
//! records nobody wants are dropped where they are made instead of being
//! queued and thrown away on the logging thread.

use std::io::{LineWriter, Write};

use slog::{Drain, Logger, o};

/// How log records are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines, for a terminal.
    Text,
}

/// What to log, and how.
#[derive(Clone, Copy, Debug)]
pub struct LogSettings {
    /// How records are written.
    pub format: LogFormat,
    /// The least severe level written.
    pub level: slog::Level,
    /// Whether the per-request and per-connection records (at `info`) are
    /// written.
    pub access_log: bool,
}

/// A logger writing the records `settings` asks for to `out`.
pub fn logger(settings: LogSettings, out: impl Write + Send + 'static) -> Logger {
    // The formatters write a record in many small pieces; on an unbuffered
    // `stderr` each would be a system call. Buffered by line, a record is
    // one `write`.
    let out = LineWriter::with_capacity(16 * 1024, out);
    match settings.format {
        LogFormat::Json => root(
            slog_json::Json::new(out)
                .add_default_keys()
                .set_newlines(true)
                .build()
                .fuse(),
            settings,
        ),
        LogFormat::Text => {
            let decorator = slog_term::PlainDecorator::new(out);
            root(
                slog_term::FullFormat::new(decorator).build().fuse(),
                settings,
            )
        }
    }
}

fn root<D>(format: D, settings: LogSettings) -> Logger
where
    D: Drain<Ok = (), Err = slog::Never> + Send + 'static,
{
    let access_log = settings.access_log;
    let drain = slog_async::Async::new(format).chan_size(4096).build();
    let drain = slog::Filter::new(drain, move |record: &slog::Record<'_>| {
        access_log || !is_access_record(record)
    });
    Logger::root(
        drain.filter_level(settings.level).fuse(),
        o!("name" => "petstore-server"),
    )
}

/// dropshot's per-request and per-connection records.
fn is_access_record(record: &slog::Record<'_>) -> bool {
    matches!(
        record.msg().as_str(),
        Some("request completed" | "accepted connection")
    )
}
