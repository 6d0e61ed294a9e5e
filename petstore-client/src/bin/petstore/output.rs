//! What the command prints: answers as JSON on stdout, errors as one line
//! each on stderr, and the exit status.

use std::cell::Cell;
use std::fmt::Debug;
use std::io::Write;
use std::process::ExitCode;

use clap::ArgMatches;
use petstore_client::{Error, EventType, ResponseValue, builder, types};
use serde::Serialize;

use crate::API_KEY_VARIABLE;
use crate::generated::{CliCommand, CliConfig};

/// Prints answers as pretty JSON: one value, or one array however many pages
/// it takes.
#[derive(Default)]
pub struct Json {
    /// Whether an array has been opened by its first item.
    array_open: Cell<bool>,
}

impl CliConfig for Json {
    fn success_item<T>(&self, value: &ResponseValue<T>)
    where
        T: Serialize + Debug,
    {
        print(&format!("{}\n", to_json(&**value)), Flush::Now);
    }

    fn success_no_item(&self, _: &ResponseValue<()>) {}

    /// `webhooks add --types a,b`: the body's `types`, which progenitor
    /// makes no flag of (it is an array).
    fn execute_create_webhook(
        &self,
        matches: &ArgMatches,
        request: &mut builder::CreateWebhook,
    ) -> anyhow::Result<()> {
        if let Some(types) = matches.get_many::<EventType>("types") {
            let types: Vec<EventType> = types.copied().collect();
            *request = request.clone().body_map(|body| body.types(types));
        }
        Ok(())
    }

    /// Errors are reported by [`Outcome`], with the exit status.
    fn error<T>(&self, _: &Error<T>)
    where
        T: Serialize + Debug,
    {
    }

    fn list_start<T>(&self)
    where
        T: Serialize + Debug,
    {
        self.array_open.set(false);
    }

    /// Prints exactly what `serde_json::to_string_pretty` prints for the
    /// whole array, without holding it.
    fn list_item<T>(&self, value: &T)
    where
        T: Serialize + Debug,
    {
        let separator = if self.array_open.replace(true) {
            ",\n"
        } else {
            "[\n"
        };
        let item: String = to_json(value)
            .lines()
            .map(|line| format!("  {line}"))
            .collect::<Vec<_>>()
            .join("\n");
        print(&format!("{separator}{item}"), Flush::Later);
    }

    fn list_end_success<T>(&self)
    where
        T: Serialize + Debug,
    {
        let end = if self.array_open.get() {
            "\n]\n"
        } else {
            "[]\n"
        };
        print(end, Flush::Now);
    }

    /// The array stays open, so that what was printed is not mistaken for
    /// the whole answer; the error is reported by [`Outcome`].
    fn list_end_error<T>(&self, _: &Error<T>)
    where
        T: Serialize + Debug,
    {
        if self.array_open.get() {
            print("\n", Flush::Now);
        }
    }
}

/// Prints `value` as one line of JSON (JSON Lines), flushed at once: a
/// reader of a stream of them sees each as soon as it is read.
pub fn json_line<T: Serialize>(value: &T) {
    let line = serde_json::to_string(value).expect("the contract's types serialize");
    print(&format!("{line}\n"), Flush::Now);
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("the contract's types serialize")
}

/// Whether [`print`] flushes stdout.
enum Flush {
    /// Now: the answer, or a part of it, is complete.
    Now,
    /// When the buffer is full: more of the answer follows.
    Later,
}

/// Writes `text` to stdout. When the reader has gone (`petstore … | head`),
/// there is no one left to tell: the command ends quietly.
fn print(text: &str, flush: Flush) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| match flush {
            Flush::Now => stdout.flush(),
            Flush::Later => Ok(()),
        });
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write the answer: {e}");
        std::process::exit(Outcome::IO_FAILURE.into());
    }
}

/// `url` without the password in it, if any, for messages.
pub fn without_password(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        // Unparsed, it may still hold `user:password@`.
        Err(_) => match url.rsplit_once('@') {
            Some((credentials, host)) => {
                let scheme = credentials.split_once("://").map(|(scheme, _)| scheme);
                match scheme {
                    Some(scheme) => format!("{scheme}://***@{host}"),
                    None => format!("***@{host}"),
                }
            }
            None => url.to_owned(),
        },
    }
}

/// How a command ended.
pub enum Outcome {
    /// The answer was printed.
    Success,
    /// The command line is wrong; the message says how.
    Usage(String),
    /// The service answered with one of the contract's errors.
    Refused {
        error: types::Error,
        /// Whether a key was sent (for the hint on a 401).
        key_sent: bool,
        /// The wait a `429` or `503` asked for in `Retry-After`.
        retry_after: Option<std::time::Duration>,
    },
    /// No answer from the service, or one the contract does not describe.
    NoAnswer(String),
}

impl Outcome {
    /// Exit status of a refusal.
    const REFUSED: u8 = 1;
    /// Exit status of a wrong command line (as clap's own).
    const USAGE: u8 = 2;
    /// Exit status when there is no answer the contract describes.
    const NO_ANSWER: u8 = 3;
    /// Exit status of a 401: the key is missing or not accepted.
    const UNAUTHORIZED: u8 = 4;
    /// Exit status when the answer cannot be written out.
    const IO_FAILURE: u8 = 5;
    /// Exit status of a 403: the key lacks a scope the operation needs.
    const FORBIDDEN: u8 = 6;
    /// Exit status of a 429: over the rate limit; retry after the wait shown.
    const RATE_LIMITED: u8 = 7;

    /// The outcome of a failed request to the service at `base_url`.
    pub fn from_error(error: anyhow::Error, base_url: &str, key_sent: bool) -> Outcome {
        let base_url = &without_password(base_url);
        let Some(error) = error.downcast_ref::<Error<types::Error>>() else {
            // The generated code's own errors: an unreadable `--json-body`.
            return Outcome::Usage(format!("{error:#}"));
        };
        match error {
            Error::ErrorResponse(answer) => Outcome::Refused {
                error: (**answer).clone(),
                key_sent,
                retry_after: petstore_client::retry_after(error),
            },
            Error::InvalidRequest(message) => Outcome::Usage(message.clone()),
            Error::CommunicationError(e) | Error::ResponseBodyError(e) => {
                Outcome::NoAnswer(format!("no answer from {base_url}: {}", chain(e)))
            }
            Error::InvalidResponsePayload(_, e) => Outcome::NoAnswer(format!(
                "{base_url} answered with a body the contract does not describe ({e}); \
                 is that the service's API (its URL ends in /v1)?"
            )),
            Error::UnexpectedResponse(answer) => {
                let status = answer.status();
                let hint = match status.as_u16() {
                    404 | 405 => "; is that the service's API (its URL ends in /v1)?",
                    _ => "",
                };
                Outcome::NoAnswer(format!(
                    "{base_url} answered HTTP {status}, which the contract does not declare \
                     here{hint}"
                ))
            }
            other => Outcome::NoAnswer(other.to_string()),
        }
    }

    /// Reports the outcome of `operation` on stderr and gives its exit
    /// status.
    pub fn exit_code(self, operation: CliCommand) -> ExitCode {
        let status = match self {
            Outcome::Success => return ExitCode::SUCCESS,
            Outcome::Usage(message) => {
                eprintln!("error: {message}");
                Outcome::USAGE
            }
            Outcome::Refused {
                error,
                key_sent,
                retry_after,
            } => {
                eprintln!(
                    "error: {} (HTTP {}): {}",
                    error.code, error.status, error.message
                );
                if let Some(wait) = retry_after {
                    eprintln!("retry after: {} s", wait.as_secs());
                }
                match error.status {
                    401 => {}
                    429 => return ExitCode::from(Outcome::RATE_LIMITED),
                    410 => {
                        eprintln!("hint: {}", purged_events_hint(operation));
                        return ExitCode::from(Outcome::REFUSED);
                    }
                    403 => {
                        eprintln!(
                            "hint: the key in {API_KEY_VARIABLE} may not do this; an operator \
                             can give it the scope (petstore-server keys scopes)"
                        );
                        return ExitCode::from(Outcome::FORBIDDEN);
                    }
                    _ => return ExitCode::from(Outcome::REFUSED),
                }
                match key_sent {
                    true => {
                        eprintln!("hint: the service does not accept the key in {API_KEY_VARIABLE}")
                    }
                    false => eprintln!("hint: set {API_KEY_VARIABLE} to an API key of the service"),
                }
                Outcome::UNAUTHORIZED
            }
            Outcome::NoAnswer(message) => {
                eprintln!("error: {message}");
                Outcome::NO_ANSWER
            }
        };
        ExitCode::from(status)
    }
}

/// What to do about a `410` (`cursor_expired`): the events `operation`
/// asked for were purged. Only the feed and a replay read past events.
fn purged_events_hint(operation: CliCommand) -> &'static str {
    match operation {
        CliCommand::ReplayWebhook => {
            "the service no longer keeps the events from --from on up to the one the message \
             names; replay from a later --from (the events in between are gone)"
        }
        _ => {
            "the service no longer keeps the events after that id; run the command again \
             without --after to start at the oldest event it keeps (the events in between are \
             gone)"
        }
    }
}

/// `error` and its sources, as one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
