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
//! writing thread. The output's buffer is bounded ([`BUFFER_MAX`]): when
//! whatever reads the log falls that far behind, the threads that log wait
//! for it rather than lose records — the whole server then waits, health
//! checks included, until the log is read again.

use std::cell::{Cell, RefCell};
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
    /// Signalled when records arrive in an empty buffer, when the buffer
    /// has been taken, and when the output closes.
    changed: Condvar,
    writer: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Waiting {
    bytes: Vec<u8>,
    closed: bool,
    /// The writing thread ended (it panicked): records are dropped rather
    /// than wait for it forever.
    writer_gone: bool,
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
        if waiting.writer_gone {
            return;
        }
        while waiting.bytes.len() + record.len() > BUFFER_MAX
            && !waiting.bytes.is_empty()
            && !waiting.writer_gone
        {
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
            std::mem::swap(&mut bytes, &mut waiting.bytes);
            drop(waiting);
            // Records held back by a full buffer may go on.
            self.changed.notify_all();
            write_all(&mut out, &bytes);
            bytes.clear();
            if closed {
                return;
            }
            std::thread::sleep(GATHER);
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

/// Marks the writing thread gone when it ends, however it ends, and lets
/// records held back by a full buffer go (to be dropped).
struct WriterGone<'a>(&'a Output);

impl Drop for WriterGone<'_> {
    fn drop(&mut self) {
        self.0.lock().writer_gone = true;
        self.0.changed.notify_all();
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
