//! Structured logs: one record per request (dropshot's "request completed",
//! with method, uri, response code, latency and request id), plus start-up
//! and shutdown records.
//!
//! The level filter sits *before* the asynchronous drain, so records below
//! the level are dropped where they are made instead of being built, queued
//! and thrown away on the logging thread.

use std::io::{LineWriter, Write};

use slog::{Drain, Logger, o};

/// How log records are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines, for a terminal.
    Text,
}

/// A logger writing `format` records at `level` and above to `out`.
pub fn logger(format: LogFormat, level: slog::Level, out: impl Write + Send + 'static) -> Logger {
    // The formatters write a record in many small pieces; on an unbuffered
    // `stderr` each would be a system call. Buffered by line, a record is
    // one `write`.
    let out = LineWriter::with_capacity(16 * 1024, out);
    match format {
        LogFormat::Json => root(
            slog_json::Json::new(out)
                .add_default_keys()
                .set_newlines(true)
                .build()
                .fuse(),
            level,
        ),
        LogFormat::Text => {
            let decorator = slog_term::PlainDecorator::new(out);
            root(slog_term::FullFormat::new(decorator).build().fuse(), level)
        }
    }
}

fn root<D>(format: D, level: slog::Level) -> Logger
where
    D: Drain<Ok = (), Err = slog::Never> + Send + 'static,
{
    let drain = slog_async::Async::new(format)
        .chan_size(4096)
        .build()
        .filter_level(level)
        .fuse();
    Logger::root(drain, o!("name" => "petstore-server"))
}
