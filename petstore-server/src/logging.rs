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
//! load, many records go out in one `write`, no request hands its record to
//! another thread, and at most the first record after each write wakes the
//! writing thread.
//!
//! Logging never blocks the thread that logs (a tokio worker, most often):
//! the output's buffer is bounded ([`BUFFER_MAX`]), and when whatever reads
//! the log falls that far behind, the records that do not fit are dropped
//! rather than wait for it. They are counted ([`dropped_records`], the
//! metric `petstore_log_records_dropped_total`) and, once the writing thread
//! has caught up, reported in a record of their own, `log records dropped`
//! with their number in `dropped` (as slog-async's `DropAndReport` does).
//! Everything that was buffered is still written when the last logger is
//! dropped.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
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
    let drain = LastOut(Output::start(out, settings.format));
    let drain = slog::Filter::new(drain, move |record: &Record<'_>| {
        access_log || !is_access_record(record)
    });
    named(drain.filter_level(settings.level).fuse())
}

/// The root logger of `drain`.
fn named<D>(drain: D) -> Logger
where
    D: slog::SendSyncRefUnwindSafeDrain<Ok = (), Err = slog::Never>
        + std::panic::UnwindSafe
        + 'static,
{
    Logger::root(drain, o!("name" => "petstore-server"))
}

/// Log records this process dropped because their output fell behind (or
/// its writing thread died).
static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// What a caught panic said, for a log record.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// The count of log records dropped, for the metrics.
pub fn dropped_records() -> Counter {
    DROPPED.clone()
}

/// How long the writing thread lets records gather after a write.
const GATHER: Duration = Duration::from_millis(5);

/// The most bytes of records waiting to be written; a record that would
/// go past it is dropped.
const BUFFER_MAX: usize = 4 << 20;

/// Formats each record on the thread that makes it and hands the bytes to
/// the output.
struct Buffered {
    format: LogFormat,
    output: Arc<Output>,
}

/// Where a thread formats its records: the formatters write to
/// [`ThreadBuffer`], that is into `RECORD`.
/// (A record whose values fail to format is dropped, not a panic.)
type JsonFormat = slog::IgnoreResult<slog_json::Json<ThreadBuffer>>;
type TextFormat =
    slog::IgnoreResult<slog_term::FullFormat<slog_term::PlainDecorator<ThreadBuffer>>>;

thread_local! {
    /// The record being formatted.
    static RECORD: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(1024));
    /// Whether the thread is formatting a record: one logged while it does
    /// (by a value's `Display`) is dropped rather than tangled in it.
    static FORMATTING: Cell<bool> = const { Cell::new(false) };
    static JSON: JsonFormat = slog_json::Json::new(ThreadBuffer)
        .add_default_keys()
        .set_newlines(true)
        .build()
        .ignore_res();
    static TEXT: TextFormat =
        slog_term::FullFormat::new(slog_term::PlainDecorator::new(ThreadBuffer))
            .build()
            .ignore_res();
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

    /// A record logged while the thread formats another, or while it
    /// exits (its thread-locals gone), is dropped.
    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        if FORMATTING.try_with(|formatting| formatting.replace(true)) != Ok(false) {
            return Ok(());
        }
        let _formatting = Formatting;
        let cleared = RECORD.try_with(|bytes| bytes.borrow_mut().clear());
        let formatted = match self.format {
            LogFormat::Json => JSON.try_with(|format| format.log(record, values)),
            LogFormat::Text => TEXT.try_with(|format| format.log(record, values)),
        };
        if cleared.is_ok() && formatted.is_ok() {
            let _ = RECORD.try_with(|bytes| self.output.append(&bytes.borrow()));
        }
        Ok(())
    }
}

/// Marks the thread as formatting until dropped (a panic included).
struct Formatting;

impl Drop for Formatting {
    fn drop(&mut self) {
        let _ = FORMATTING.try_with(|formatting| formatting.set(false));
    }
}

/// Records waiting to be written, and the thread that writes them.
struct Output {
    state: Mutex<Waiting>,
    /// Signalled when records arrive in an empty buffer and when the output
    /// closes.
    changed: Condvar,
    writer: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Waiting {
    bytes: Vec<u8>,
    /// Records dropped since the writing thread last took the buffer.
    dropped: u64,
    closed: bool,
    /// The writing thread ended (it panicked): every record is dropped.
    writer_gone: bool,
}

impl Output {
    /// Starts the writing thread for `out`; the loggers' drain formats
    /// records as `format`, and so does the writing thread its reports.
    fn start(out: impl Write + Send + 'static, format: LogFormat) -> Buffered {
        let output = Arc::new(Output {
            state: Mutex::new(Waiting::default()),
            changed: Condvar::new(),
            writer: Mutex::new(None),
        });
        let report = named(Buffered {
            format,
            output: Arc::clone(&output),
        });
        let writing = Arc::clone(&output);
        let thread = std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || writing.write_out(out, report))
            .expect("the log's writing thread starts");
        *output.writer.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
        Buffered { format, output }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues one formatted record, or drops it (and counts it) when the
    /// buffer has no room for it: never waits for the writing thread.
    fn append(&self, record: &[u8]) {
        let mut waiting = self.lock();
        let full = waiting.bytes.len() + record.len() > BUFFER_MAX && !waiting.bytes.is_empty();
        if full || waiting.writer_gone {
            waiting.dropped += 1;
            DROPPED.inc();
            return;
        }
        let was_empty = waiting.bytes.is_empty();
        waiting.bytes.extend_from_slice(record);
        drop(waiting);
        if was_empty {
            self.changed.notify_all();
        }
    }

    /// The writing thread: writes whatever waits, then lets more gather.
    /// Once it has written what waited, it reports the records dropped
    /// meanwhile, through `report`. A failed write is dropped: there is
    /// nowhere left to report it.
    fn write_out(&self, mut out: impl Write, report: Logger) {
        let _gone = WriterGone(self);
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
            let dropped = std::mem::take(&mut waiting.dropped);
            std::mem::swap(&mut bytes, &mut waiting.bytes);
            drop(waiting);
            write_all(&mut out, &bytes);
            bytes.clear();
            if dropped > 0 {
                // Written with the next batch, the last one included.
                slog::error!(report, "log records dropped: the log's output fell behind";
                    "dropped" => dropped);
            } else if closed {
                return;
            } else {
                std::thread::sleep(GATHER);
            }
        }
    }
}

/// Writes `bytes`, waiting out a full non-blocking output; any other
/// failure drops them: there is nowhere left to report it.
fn write_all(out: &mut impl Write, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match out.write(bytes) {
            Ok(0) => return,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return,
        }
    }
    let _ = out.flush();
}

/// Marks the writing thread gone when it ends, however it ends.
struct WriterGone<'a>(&'a Output);

impl Drop for WriterGone<'_> {
    fn drop(&mut self) {
        self.0.lock().writer_gone = true;
    }
}

/// The loggers' drain: when the last logger is gone, what waits is written
/// before the writing thread ends.
struct LastOut(Buffered);

impl Drain for LastOut {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        self.0.log(record, values)
    }
}

impl Drop for LastOut {
    fn drop(&mut self) {
        let output = &self.0.output;
        output.lock().closed = true;
        output.changed.notify_all();
        let writer = output
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

/// dropshot's record of a request answered.
pub const REQUEST_COMPLETED: &str = "request completed";

/// dropshot's record of a request whose client hung up first (or whose
/// handler panicked: see `observe`).
pub const REQUEST_CANCELLED: &str = "request handling cancelled (client disconnected)";

/// The per-request and per-connection records: a request answered, a
/// request whose client hung up first, a connection accepted.
fn is_access_record(record: &slog::Record<'_>) -> bool {
    matches!(
        record.msg().as_str(),
        Some(REQUEST_COMPLETED | REQUEST_CANCELLED | "accepted connection")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output the test can read.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn settings(format: LogFormat) -> LogSettings {
        LogSettings {
            format,
            level: slog::Level::Info,
            access_log: true,
        }
    }

    /// Each line as JSON, without the time (which differs between two
    /// loggers).
    fn untimed(text: &str) -> Vec<serde_json::Value> {
        text.lines()
            .map(|line| {
                let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
                record
                    .as_object_mut()
                    .unwrap()
                    .remove("ts")
                    .expect("a time");
                record
            })
            .collect()
    }

    #[test]
    fn records_are_what_slog_json_writes_and_all_are_written_by_the_drop() {
        let ours = Shared::default();
        let theirs = Shared::default();
        let direct = Logger::root(
            std::sync::Mutex::new(
                slog_json::Json::new(theirs.clone())
                    .add_default_keys()
                    .set_newlines(true)
                    .build(),
            )
            .fuse(),
            o!("name" => "petstore-server"),
        );
        let log = logger(settings(LogFormat::Json), ours.clone());
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                let (log, direct) = (log.clone(), direct.clone());
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let child = log.new(o!("thread" => thread));
                        slog::info!(child, "request completed"; "i" => i, "uri" => "/v1/pets?x=\"y\"");
                        let child = direct.new(o!("thread" => thread));
                        slog::info!(child, "request completed"; "i" => i, "uri" => "/v1/pets?x=\"y\"");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(log);
        let mut ours = untimed(&String::from_utf8(ours.0.lock().unwrap().clone()).unwrap());
        let mut theirs = untimed(&String::from_utf8(theirs.0.lock().unwrap().clone()).unwrap());
        assert_eq!(ours.len(), 2000);
        let key = |record: &serde_json::Value| (record["thread"].as_u64(), record["i"].as_u64());
        ours.sort_by_key(key);
        theirs.sort_by_key(key);
        assert_eq!(ours, theirs);
    }

    #[test]
    fn text_records_are_lines() {
        let out = Shared::default();
        let log = logger(settings(LogFormat::Text), out.clone());
        slog::info!(log, "started"; "bind" => "127.0.0.1:8080");
        slog::debug!(log, "not wanted");
        drop(log);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("started") && text.contains("bind: 127.0.0.1:8080"),
            "{text}"
        );
    }

    /// An output whose writes do not return until it is released, like a
    /// pipe nobody reads; what it was given is then in `written`.
    #[derive(Clone, Default)]
    struct Stalled {
        state: Arc<(Mutex<Stall>, Condvar)>,
        written: Shared,
    }

    #[derive(Default)]
    struct Stall {
        writing: bool,
        released: bool,
    }

    impl Stalled {
        fn wait_until(&self, condition: impl Fn(&Stall) -> bool) {
            let (stall, changed) = &*self.state;
            let stall = stall.lock().unwrap();
            drop(
                changed
                    .wait_while(stall, |stall| !condition(stall))
                    .unwrap(),
            );
        }

        fn release(&self) {
            self.state.0.lock().unwrap().released = true;
            self.state.1.notify_all();
        }
    }

    impl Write for Stalled {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.state.0.lock().unwrap().writing = true;
            self.state.1.notify_all();
            self.wait_until(|stall| stall.released);
            self.written.write(bytes)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_output_never_holds_up_the_threads_that_log_and_drops_are_reported() {
        let out = Stalled::default();
        let log = logger(settings(LogFormat::Json), out.clone());
        let dropped_before = dropped_records().get();
        slog::info!(log, "first");
        // The writing thread is stuck in the output with the first record.
        out.wait_until(|stall| stall.writing);
        let big = "x".repeat(64 * 1024);
        let logged = 2 * BUFFER_MAX / big.len();
        let (done, returned) = std::sync::mpsc::channel();
        let logging = std::thread::spawn({
            let log = log.clone();
            move || {
                for i in 0..logged {
                    slog::info!(log, "big"; "i" => i, "value" => &big);
                }
                done.send(()).unwrap();
            }
        });
        // Twice what the buffer holds is logged while the output is stalled
        // (it is released only below): had a record waited for room, this
        // would never come. (The bound only turns such a hang into a failure.)
        returned
            .recv_timeout(Duration::from_secs(60))
            .expect("logging returned while the output was stalled");
        logging.join().unwrap();
        out.release();
        drop(log);
        let text = String::from_utf8(out.written.0.lock().unwrap().clone()).unwrap();
        let records: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(records[0]["msg"], "first");
        let kept: Vec<_> = records.iter().filter(|r| r["msg"] == "big").collect();
        let reports: Vec<_> = records.iter().filter(|r| r["level"] == "ERRO").collect();
        assert_eq!(
            records.len(),
            1 + kept.len() + reports.len(),
            "{text:.2000}"
        );
        assert_eq!(reports.len(), 1);
        assert_eq!(
            reports[0]["msg"],
            "log records dropped: the log's output fell behind"
        );
        let dropped = reports[0]["dropped"].as_u64().unwrap() as usize;
        assert!(kept.len() > 1 && dropped > 1, "{} kept", kept.len());
        // Nothing else was lost: what was kept is intact and in order, and
        // with the dropped makes up what was logged.
        assert_eq!(kept.len() + dropped, logged);
        assert!(
            kept.iter()
                .all(|r| r["value"].as_str().unwrap().len() == 64 * 1024)
        );
        let order: Vec<_> = kept.iter().map(|r| r["i"].as_u64().unwrap()).collect();
        assert!(order.is_sorted(), "{order:?}");
        assert!(dropped_records().get() - dropped_before >= dropped as u64);
    }

    /// An output that fails for good.
    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            panic!("the output is gone");
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_dead_output_never_holds_up_the_threads_that_log() {
        let log = logger(settings(LogFormat::Json), Broken);
        let big = "x".repeat(64 * 1024);
        // More than the buffer holds: were the writer's end not noticed,
        // this would wait for it forever.
        for _ in 0..2 * BUFFER_MAX / big.len() {
            slog::info!(log, "big"; "value" => &big);
        }
        drop(log);
    }
}
