//! Structured logs: the access log — one record per request (dropshot's
//! "request completed", with method, uri, response code, latency and request
//! id) and one per connection — plus start-up and shutdown records.
//!
//! The level and access-log filters come first, so records nobody wants cost
//! nothing more. A record that passes is formatted where it is made, into a
//! buffer of the thread's own, and appended to the output's buffer; a
//! thread of the output's own writes that buffer out whenever it holds
//! something, then lets the next records gather for [`GATHER`] before it
//! writes again. When the server is quiet a record is written at once; under
//! load, many records go out in one `write`, and no request hands its
//! record to another thread or wakes one. The output's buffer is bounded
//! ([`BUFFER_MAX`]): when whatever reads the log falls that far behind, the
//! request waits for the log rather than lose records.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use slog::{Drain, Logger, OwnedKVList, Record, o};

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
    let access_log = settings.access_log;
    let drain = Buffered {
        format: settings.format,
        output: Output::start(out),
    };
    let drain = slog::Filter::new(drain, move |record: &Record<'_>| {
        access_log || !is_access_record(record)
    });
    Logger::root(
        drain.filter_level(settings.level).fuse(),
        o!("name" => "petstore-server"),
    )
}

/// How long the writing thread lets records gather after a write.
const GATHER: Duration = Duration::from_millis(5);

/// The most bytes of records waiting to be written; a record that would
/// go past it waits for the writing thread.
const BUFFER_MAX: usize = 4 << 20;

/// Formats each record on the thread that makes it and hands the bytes to
/// the output.
struct Buffered {
    format: LogFormat,
    output: Arc<Output>,
}

/// Where a thread formats its records: the formatters write to
/// [`ThreadBuffer`], that is into `RECORD`.
type JsonFormat = slog::Fuse<slog_json::Json<ThreadBuffer>>;
type TextFormat = slog::Fuse<slog_term::FullFormat<slog_term::PlainDecorator<ThreadBuffer>>>;

thread_local! {
    /// The record being formatted.
    static RECORD: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(1024));
    static JSON: JsonFormat = slog_json::Json::new(ThreadBuffer)
        .add_default_keys()
        .set_newlines(true)
        .build()
        .fuse();
    static TEXT: TextFormat =
        slog_term::FullFormat::new(slog_term::PlainDecorator::new(ThreadBuffer))
            .build()
            .fuse();
}

/// Appends to the thread's `RECORD`.
struct ThreadBuffer;

impl Write for ThreadBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        RECORD.with_borrow_mut(|record| record.extend_from_slice(bytes));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drain for Buffered {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        RECORD.with_borrow_mut(Vec::clear);
        match self.format {
            LogFormat::Json => JSON.with(|format| format.log(record, values))?,
            LogFormat::Text => TEXT.with(|format| format.log(record, values))?,
        }
        RECORD.with_borrow(|bytes| self.output.append(bytes));
        Ok(())
    }
}

/// Records waiting to be written, and the thread that writes them.
struct Output {
    state: Mutex<Waiting>,
    /// Signalled when records arrive in an empty buffer, when the buffer
    /// has been taken, and when the output closes.
    changed: Condvar,
    writer: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Waiting {
    bytes: Vec<u8>,
    closed: bool,
}

impl Output {
    /// Starts the writing thread for `out`.
    fn start(out: impl Write + Send + 'static) -> Arc<Output> {
        let output = Arc::new(Output {
            state: Mutex::new(Waiting::default()),
            changed: Condvar::new(),
            writer: Mutex::new(None),
        });
        let writing = Arc::clone(&output);
        let thread = std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || writing.write_out(out))
            .expect("the log's writing thread starts");
        *output.writer.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
        output
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues one formatted record.
    fn append(&self, record: &[u8]) {
        let mut waiting = self.lock();
        while waiting.bytes.len() + record.len() > BUFFER_MAX && !waiting.bytes.is_empty() {
            waiting = self
                .changed
                .wait(waiting)
                .unwrap_or_else(|e| e.into_inner());
        }
        let was_empty = waiting.bytes.is_empty();
        waiting.bytes.extend_from_slice(record);
        drop(waiting);
        if was_empty {
            self.changed.notify_all();
        }
    }

    /// The writing thread: writes whatever waits, then lets more gather.
    /// A failed write is dropped: there is nowhere left to report it.
    fn write_out(&self, mut out: impl Write) {
        let mut bytes = Vec::new();
        loop {
            let mut waiting = self.lock();
            while waiting.bytes.is_empty() && !waiting.closed {
                waiting = self
                    .changed
                    .wait(waiting)
                    .unwrap_or_else(|e| e.into_inner());
            }
            let closed = waiting.closed;
            std::mem::swap(&mut bytes, &mut waiting.bytes);
            drop(waiting);
            // Records held back by a full buffer may go on.
            self.changed.notify_all();
            let _ = out.write_all(&bytes).and_then(|()| out.flush());
            bytes.clear();
            if closed {
                return;
            }
            std::thread::sleep(GATHER);
        }
    }
}

/// The last logger gone: what waits is written before the thread ends.
impl Drop for Buffered {
    fn drop(&mut self) {
        self.output.lock().closed = true;
        self.output.changed.notify_all();
        let writer = self
            .output
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

/// dropshot's per-request and per-connection records.
fn is_access_record(record: &slog::Record<'_>) -> bool {
    matches!(
        record.msg().as_str(),
        Some("request completed" | "accepted connection")
    )
}
