//! `petstore`: the pet store service from the command line.
//!
//! The commands, their flags and their help are progenitor's CLI generator
//! output for the contract (`generated.rs`, written by `cargo xtask client
//! generate`). This file only arranges them as `petstore pets <command>`,
//! `petstore orders <command>`, `petstore events <command>`, `petstore
//! webhooks <command>` and `petstore inventory`, adds what the contract
//! cannot say (where the service is, the key, `--all`, `orders deliver` and
//! `orders cancel` for `updateOrder`'s two changes, `events tail` to follow
//! `listEvents` live, `webhooks add --types`) and turns answers into output
//! and exit codes.

#[rustfmt::skip]
#[allow(deprecated, missing_docs, unused, clippy::all)]
mod generated;
mod output;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};
use generated::{Cli, CliCommand, CliConfig};
use output::{Json, Outcome};
use std::num::NonZeroU32;

use petstore_client::{
    BuildError, Client, ClientInfo, DEFAULT_TIMEOUT, EVENTS_WAIT_MAX, EventType, OrderStatus,
    PAGE_SIZE_MAX, PetStatus, types,
};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

/// Where the key comes from: never a flag, which would leave it in shell
/// histories and process listings.
const API_KEY_VARIABLE: &str = "PETSTORE_API_KEY";

/// The service's address when neither `--url` nor `PETSTORE_URL` gives one.
const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The id of the global `--url` argument: where the service is.
const SERVICE_URL: &str = "service-url";

/// The contract's path prefix, added to a URL that has no path.
const API_PREFIX: &str = "/v1";

/// Where a command sits: under `pets`, `orders`, `events` or `webhooks`, or
/// on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    Pets,
    Orders,
    Events,
    Webhooks,
    Top,
}

impl Group {
    /// The groups of commands, and what each is about.
    const NESTED: [(Group, &str, &str); 4] = [
        (Group::Pets, "pets", "The catalogue of animals"),
        (Group::Orders, "orders", "The store: orders of animals"),
        (Group::Events, "events", "The feed of what changed"),
        (
            Group::Webhooks,
            "webhooks",
            "Webhook subscriptions: the feed's events pushed to an endpoint, signed",
        ),
    ];

    fn name(self) -> Option<&'static str> {
        Group::NESTED
            .iter()
            .find(|(group, _, _)| *group == self)
            .map(|(_, name, _)| *name)
    }
}

/// A command that runs an operation of the contract.
#[derive(Debug)]
struct Place {
    group: Group,
    name: &'static str,
    /// A parameter the command sets itself, and its summary: `orders
    /// deliver` is `updateOrder` with `status` `delivered`.
    fixed: Option<(&'static str, &'static str, &'static str)>,
}

const fn place(group: Group, name: &'static str) -> Place {
    Place {
        group,
        name,
        fixed: None,
    }
}

/// The commands that run each operation of the contract. The match is
/// exhaustive, so an operation added to the contract does not compile until
/// it is given a place here.
fn places(operation: CliCommand) -> &'static [Place] {
    match operation {
        CliCommand::ListPets => const { &[place(Group::Pets, "list")] },
        CliCommand::CreatePet => const { &[place(Group::Pets, "create")] },
        CliCommand::GetPet => const { &[place(Group::Pets, "get")] },
        CliCommand::ListOrders => const { &[place(Group::Orders, "list")] },
        CliCommand::PlaceOrder => const { &[place(Group::Orders, "place")] },
        CliCommand::GetOrder => const { &[place(Group::Orders, "get")] },
        CliCommand::UpdateOrder => &[
            Place {
                group: Group::Orders,
                name: "deliver",
                fixed: Some((
                    "status",
                    "delivered",
                    "Deliver an order: its animal is sold",
                )),
            },
            Place {
                group: Group::Orders,
                name: "cancel",
                fixed: Some((
                    "status",
                    "cancelled",
                    "Cancel an order: its animal can be ordered again",
                )),
            },
        ],
        CliCommand::GetInventory => const { &[place(Group::Top, "inventory")] },
        // `tail` reads the feed on and on, as `follow_events` does.
        CliCommand::ListEvents => {
            const { &[place(Group::Events, "list"), place(Group::Events, "tail")] }
        }
        CliCommand::ListWebhooks => const { &[place(Group::Webhooks, "list")] },
        CliCommand::CreateWebhook => const { &[place(Group::Webhooks, "add")] },
        CliCommand::GetWebhook => const { &[place(Group::Webhooks, "get")] },
        CliCommand::DeleteWebhook => const { &[place(Group::Webhooks, "remove")] },
        CliCommand::RotateWebhookSecret => const { &[place(Group::Webhooks, "rotate")] },
        CliCommand::ListWebhookDeliveries => const { &[place(Group::Webhooks, "deliveries")] },
        CliCommand::ReplayWebhook => const { &[place(Group::Webhooks, "replay")] },
    }
}

/// How a command is typed, e.g. `petstore orders deliver`.
fn typed(place: &Place) -> String {
    match place.group.name() {
        Some(group) => format!("petstore {group} {}", place.name),
        None => format!("petstore {}", place.name),
    }
}

/// The whole command line.
fn command() -> Command {
    let mut groups = Group::NESTED.map(|(group, name, about)| {
        let command = Command::new(name).about(about).subcommand_required(true);
        (group, command)
    });
    let mut top = Vec::new();
    for operation in CliCommand::iter() {
        for place in places(operation) {
            let generated = Cli::<Json>::get_command(operation).name(place.name);
            let command = adapt(operation, place, generated);
            match groups.iter_mut().find(|(group, _)| *group == place.group) {
                Some((_, group)) => *group = group.clone().subcommand(command),
                None => top.push(command),
            }
        }
    }
    Command::new("petstore")
        // The crate's version without its build metadata, which is the
        // contract's version: `2.0.0 (contract 1.5.0)`.
        .version(format!(
            "{}.{}.{} (contract {})",
            env!("CARGO_PKG_VERSION_MAJOR"),
            env!("CARGO_PKG_VERSION_MINOR"),
            env!("CARGO_PKG_VERSION_PATCH"),
            <Client as ClientInfo<()>>::api_version()
        ))
        .about("The pet store service from the command line: every answer is printed as JSON")
        .arg(
            // Not the id `url`: `webhooks add` has an argument of that id
            // (the endpoint's URL), and a global one would take its value.
            Arg::new(SERVICE_URL)
                .long("url")
                .env("PETSTORE_URL")
                // It may hold a password.
                .hide_env_values(true)
                .value_name("URL")
                .global(true)
                .help(format!(
                    "The service, e.g. https://petstore.example or http://127.0.0.1:8080/v1 \
                     (default {DEFAULT_URL}); {API_PREFIX} is added to a URL without a path"
                )),
        )
        .subcommands(groups.map(|(_, command)| command))
        .subcommands(top)
        .subcommand_required(true)
        .after_help(format!(
            "The API key is read from the {API_KEY_VARIABLE} environment variable (never from \
             a flag).\n\n\
             Exit status: 0 success; 1 the service answered with an error (its code and \
             message are printed); 2 the command line is wrong; 3 no answer from the service, \
             or one the contract does not describe; 4 the service did not accept the key (401); \
             5 the answer could not be written out; 6 the key may not do this (403, a scope it \
             lacks); 7 over the rate limit (429; the wait the service asks for is printed as \
             `retry after: N s`)."
        ))
}

/// What this command line adds to a generated command.
fn adapt(operation: CliCommand, place: &Place, command: Command) -> Command {
    let command = summary_first(command);
    // The path parameter as a positional argument: `petstore pets get 42`.
    let positional = |id: Arg| id.long(None).value_name("ID").allow_negative_numbers(true);
    let all = |what: &str| {
        Arg::new("all")
            .long("all")
            .action(ArgAction::SetTrue)
            .conflicts_with("after")
            .help(format!(
                "Every {what}, walking page by page; --limit is then the page size"
            ))
    };
    // The contract's bounds, which progenitor does not check.
    let paged = |command: Command| {
        command
            .mut_arg("limit", |limit| {
                limit.value_name("N").value_parser(page_size)
            })
            .mut_arg("after", |after| {
                after.value_name("ID").allow_negative_numbers(true)
            })
    };
    match operation {
        CliCommand::ListPets => paged(command.arg(all("animal (of the status, if given)"))),
        CliCommand::ListOrders => paged(command.arg(all("order (of the filters, if given)")))
            .mut_arg("pet-id", |id| id.allow_negative_numbers(true)),
        CliCommand::GetPet => command.mut_arg("pet-id", positional),
        CliCommand::GetOrder => command.mut_arg("order-id", positional),
        CliCommand::UpdateOrder => {
            let (parameter, value, summary) =
                place.fixed.expect("deliver and cancel fix the status");
            command
                .about(summary)
                .long_about(None)
                .mut_arg("order-id", positional)
                // The generated argument, but not required: its value is given.
                .mut_arg(parameter, |fixed| {
                    Arg::new(fixed.get_id().clone())
                        .long(parameter)
                        .value_parser(fixed.get_value_parser().clone())
                        .default_value(value)
                        .hide(true)
                })
                // The status is the command's: no body to give.
                .mut_arg("json-body", |body| {
                    body.hide(true).conflicts_with(parameter)
                })
        }
        CliCommand::CreatePet => command
            .mut_arg("category-id", |id| id.allow_negative_numbers(true))
            .mut_arg("status", |status| status.help("The animal's status."))
            // The file is the whole body: flags beside it would be ignored.
            .mut_arg("json-body", |body| {
                body.conflicts_with_all(["name", "category-id", "status"])
            }),
        CliCommand::PlaceOrder => command
            .mut_arg("pet-id", |id| id.allow_negative_numbers(true))
            .mut_arg("json-body", |body| body.conflicts_with("pet-id")),
        CliCommand::GetInventory => command,
        // No `--all`: the feed has no end to walk to; `tail` reads on.
        CliCommand::ListEvents if place.name == "list" => command
            .mut_arg("limit", |limit| {
                limit.value_name("N").value_parser(page_size)
            })
            .mut_arg("after", |after| after.value_name("ID"))
            .mut_arg("wait", |wait| {
                wait.value_name("SECONDS").value_parser(wait_seconds)
            })
            .mut_arg("types", |types| {
                types.value_name("TYPE,...").value_parser(event_types)
            }),
        CliCommand::ListEvents => tail_command(place),
        CliCommand::ListWebhooks => paged(command),
        // `petstore webhooks add https://hooks.example/x`: the endpoint is
        // positional, `--url` being where the service is (hence not `URL`,
        // which usage lines would print beside `--url <URL>`).
        CliCommand::CreateWebhook => command
            .mut_arg("url", |url| url.long(None).value_name("ENDPOINT"))
            .arg(
                Arg::new("types")
                    .long("types")
                    .value_name("TYPE,...")
                    .value_delimiter(',')
                    .value_parser(|value: &str| value.parse::<EventType>())
                    .help(
                        "Deliver only events of these types, comma-separated, e.g. \
                         order.placed,order.delivered (default: every type the key may see)",
                    ),
            )
            // The file is the whole body: flags beside it would be ignored.
            .mut_arg("json-body", |body| {
                body.conflicts_with_all(["url", "types"])
            }),
        CliCommand::GetWebhook | CliCommand::DeleteWebhook => {
            command.mut_arg("webhook-id", positional)
        }
        CliCommand::RotateWebhookSecret => command
            .mut_arg("webhook-id", positional)
            .mut_arg("previous-valid-for", |seconds| {
                seconds.value_name("SECONDS")
            }),
        CliCommand::ListWebhookDeliveries => command
            .mut_arg("webhook-id", positional)
            .mut_arg("limit", |limit| {
                limit.value_name("N").value_parser(page_size)
            })
            .mut_arg("before", |before| before.value_name("ID")),
        CliCommand::ReplayWebhook => command
            .mut_arg("webhook-id", positional)
            .mut_arg("from", |from| from.value_name("EVENT"))
            .mut_arg("to", |to| to.value_name("EVENT"))
            .mut_arg("json-body", |body| body.conflicts_with_all(["from", "to"])),
    }
}

/// `events tail`: where to start and which types, the pages' size and wait
/// being the follower's.
fn tail_command(place: &Place) -> Command {
    Command::new(place.name)
        .about("Follow the feed live, like `tail -f`: each event as one line of JSON, as it comes")
        .long_about(
            "Follow the feed live, like `tail -f`: each event the key may see is printed as one \
             line of JSON (JSON Lines) as soon as it is read, from the oldest event the service \
             keeps (or after --after), until interrupted (Ctrl-C).\n\n\
             To go on later from where it stopped, pass the `id` of the last line printed as \
             --after. A request that fails for a reason that may pass (no answer, a timeout, \
             429, 5xx) is sent again from the same place for as long as that lasts: it waits \
             through restarts and outages of the service. An answer no retry can change ends \
             it, with that answer's exit status (see `petstore --help`): 401, 403, any other \
             error, or a Retry-After longer than 30 s. An --after older than the events the \
             service keeps ends it with cursor_expired (exit status 1): run it again without \
             --after.",
        )
        .arg(
            Arg::new("after")
                .long("after")
                .value_name("ID")
                .value_parser(clap::value_parser!(types::ListEventsAfter))
                .help(
                    "Start after this event: the `id` of the last event read (default: at the \
                     oldest event the service keeps)",
                ),
        )
        .arg(
            Arg::new("types")
                .long("types")
                .value_name("TYPE,...")
                .value_delimiter(',')
                .value_parser(|value: &str| value.parse::<EventType>())
                .help(
                    "Only events of these types, comma-separated, e.g. \
                     order.placed,order.delivered (default: every type)",
                ),
        )
}

/// `--wait`: 0 to 30 seconds, as the contract says.
fn wait_seconds(value: &str) -> Result<i32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| *n <= EVENTS_WAIT_MAX)
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| format!("expected a whole number of seconds from 0 to {EVENTS_WAIT_MAX}"))
}

/// `events list --types`: each type checked by name, so that a typo is told
/// as `tail --types` tells it, not as the contract's pattern (which the
/// generated parser prints).
fn event_types(value: &str) -> Result<types::ListEventsTypes, String> {
    for name in value.split(',') {
        name.parse::<EventType>().map_err(|e| e.to_string())?;
    }
    value
        .parse()
        .map_err(|e: types::error::ConversionError| e.to_string())
}

/// `--limit`: 1 to 100, as the contract says.
fn page_size(value: &str) -> Result<NonZeroU32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=PAGE_SIZE_MAX).contains(n))
        .and_then(NonZeroU32::new)
        .ok_or_else(|| format!("expected a whole number from 1 to {PAGE_SIZE_MAX}"))
}

/// `command` with its summary (the first line of the help progenitor writes)
/// as its `about`, for `-h` and the list of commands, and the whole text as
/// its `long_about`, for `--help`.
fn summary_first(command: Command) -> Command {
    let Some(help) = command.get_about().map(|about| about.to_string()) else {
        return command;
    };
    let summary = help.lines().next().unwrap_or_default().to_owned();
    command.about(summary).long_about(help)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let matches = command().try_get_matches().unwrap_or_else(|error| {
        let hint = endpoint_given_as_url(&error);
        // Clap's own report: usage errors on stderr, `--help` on stdout.
        let _ = error.print();
        if hint {
            eprintln!(
                "hint: --url is where the service is (as PETSTORE_URL); the endpoint that \
                 receives the events comes after `add`: petstore webhooks add \
                 https://hooks.example/petstore"
            );
        }
        std::process::exit(error.exit_code())
    });
    let (group, name, arguments) = match matches.subcommand() {
        Some((group, nested)) if Group::NESTED.iter().any(|(_, name, _)| *name == group) => {
            let group = Group::NESTED.iter().find(|(_, name, _)| *name == group);
            let (name, arguments) = nested.subcommand().expect("clap requires a subcommand");
            (group.expect("a group").0, name, arguments)
        }
        Some((name, arguments)) => (Group::Top, name, arguments),
        None => unreachable!("clap requires a subcommand"),
    };
    let (operation, place) = CliCommand::iter()
        .flat_map(|operation| {
            places(operation)
                .iter()
                .map(move |place| (operation, place))
        })
        .find(|(_, place)| place.group == group && place.name == name)
        .expect("every subcommand is an operation");
    run(operation, place, &matches, arguments)
        .await
        .exit_code(operation)
}

/// Whether `error` is `webhooks add` without its endpoint while `--url` is
/// on the command line: most likely the endpoint given as `--url` (the
/// body's field is `url`), which set the service's URL instead.
fn endpoint_given_as_url(error: &clap::Error) -> bool {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let endpoint_missing = error.kind() == ErrorKind::MissingRequiredArgument
        && matches!(
            error.get(ContextKind::InvalidArg),
            Some(ContextValue::Strings(missing)) if missing.iter().any(|arg| arg == "<ENDPOINT>")
        );
    endpoint_missing
        && std::env::args_os()
            .any(|arg| arg == "--url" || arg.to_string_lossy().starts_with("--url="))
}

/// Runs `operation` with its `arguments` against the service named in
/// `matches`.
async fn run(
    operation: CliCommand,
    place: &Place,
    matches: &ArgMatches,
    arguments: &ArgMatches,
) -> Outcome {
    if let Some((parameter, _, _)) = place.fixed
        && arguments.value_source(parameter) != Some(clap::parser::ValueSource::DefaultValue)
    {
        return Outcome::Usage(format!("`{}` sets --{parameter} itself", typed(place)));
    }
    // An empty `PETSTORE_URL` counts as unset.
    let url = matches
        .get_one::<String>(SERVICE_URL)
        .filter(|url| !url.is_empty())
        .map_or(DEFAULT_URL, String::as_str);
    let base_url = match base_url(url) {
        Ok(base_url) => base_url,
        Err(message) => return Outcome::Usage(message),
    };
    let key = match std::env::var(API_KEY_VARIABLE) {
        Ok(key) if !key.is_empty() => Some(key),
        Ok(_) | Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => {
            return Outcome::Usage(format!("{API_KEY_VARIABLE} is not valid UTF-8"));
        }
    };
    // `events list --wait N` is answered up to N seconds later than others.
    let wait = arguments.try_get_one::<i32>("wait").ok().flatten();
    let wait = Duration::from_secs(wait.map_or(0, |wait| wait.unsigned_abs().into()));
    // Without a key, the service answers 401, which is reported with a hint.
    let client = match client(&base_url, key.as_deref(), DEFAULT_TIMEOUT + wait) {
        Ok(client) => client,
        Err(BuildError::InvalidApiKey) => {
            return Outcome::Usage(format!("{API_KEY_VARIABLE}: {}", BuildError::InvalidApiKey));
        }
        Err(e) => return Outcome::NoAnswer(format!("cannot start an HTTP client: {e}")),
    };
    if let Some(note) = operation.deprecation() {
        eprintln!(
            "warning: `{}` is deprecated: {}",
            typed(place),
            with_command_names(note)
        );
    }

    let result = match operation {
        CliCommand::ListPets if arguments.get_flag("all") => {
            let mut walk = client.walk_pets();
            if let Some(status) = arguments.get_one::<PetStatus>("status") {
                walk = walk.status(*status);
            }
            if let Some(limit) = arguments.get_one::<NonZeroU32>("limit") {
                walk = walk.page_size(limit.get());
            }
            print_all(walk.stream()).await
        }
        CliCommand::ListOrders if arguments.get_flag("all") => {
            let mut walk = client.walk_orders();
            if let Some(status) = arguments.get_one::<OrderStatus>("status") {
                walk = walk.status(*status);
            }
            if let Some(pet_id) = arguments.get_one::<i64>("pet-id") {
                walk = walk.pet_id(*pet_id);
            }
            if let Some(limit) = arguments.get_one::<NonZeroU32>("limit") {
                walk = walk.page_size(limit.get());
            }
            print_all(walk.stream()).await
        }
        CliCommand::ListEvents if place.name == "tail" => tail(&client, arguments).await,
        _ => {
            Cli::new(client, Json::default())
                .execute(operation, arguments)
                .await
        }
    };
    match result {
        Ok(()) => Outcome::Success,
        Err(error) => Outcome::from_error(error, &base_url, key.is_some()),
    }
}

/// Prints every item of `items` as one JSON array, as it comes.
async fn print_all<T: serde::Serialize + std::fmt::Debug>(
    mut items: impl futures::Stream<Item = Result<T, petstore_client::Error<types::Error>>> + Unpin,
) -> anyhow::Result<()> {
    use futures::TryStreamExt;

    let json = Json::default();
    json.list_start::<T>();
    loop {
        match items.try_next().await {
            Ok(Some(item)) => json.list_item(&item),
            Ok(None) => {
                json.list_end_success::<T>();
                return Ok(());
            }
            Err(error) => {
                json.list_end_error(&error);
                return Err(error.into());
            }
        }
    }
}

/// Follows the feed, printing each event as one line of JSON as it comes,
/// until the follower ends, which it does only with an error.
async fn tail(client: &Client, arguments: &ArgMatches) -> anyhow::Result<()> {
    use futures::TryStreamExt;

    let mut follow = client.follow_events();
    if let Some(after) = arguments.get_one::<types::ListEventsAfter>("after") {
        follow = follow.after(after.clone());
    }
    if let Some(types) = arguments.get_many::<EventType>("types") {
        follow = follow.types(&types.copied().collect::<Vec<_>>());
    }
    let mut events = follow.stream();
    while let Some(event) = events.try_next().await? {
        output::json_line(&event);
    }
    Ok(())
}

/// A client that sends `key`, if any, as [`Client::try_with_api_key`] does,
/// and waits `timeout` for each answer (that one waits
/// [`DEFAULT_TIMEOUT`], less than a long poll may take).
fn client(base_url: &str, key: Option<&str>, timeout: Duration) -> Result<Client, BuildError> {
    let mut headers = HeaderMap::new();
    if let Some(key) = key {
        let mut authorization = HeaderValue::try_from(format!("Bearer {key}"))
            .map_err(|_| BuildError::InvalidApiKey)?;
        authorization.set_sensitive(true);
        headers.insert(AUTHORIZATION, authorization);
    }
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(DEFAULT_TIMEOUT)
        .timeout(timeout)
        .build()
        .map_err(BuildError::Http)?;
    Ok(Client::new_with_client(base_url, http))
}

/// The client's base URL for `url`: `/v1` is added when it has no path.
fn base_url(url: &str) -> Result<String, String> {
    let shown = output::without_password(url);
    let wrong = |why: &str| format!("--url {shown:?}: {why}");
    let suggestion = || {
        wrong(&format!(
            "expected an http:// or https:// URL, e.g. http://{}",
            output::without_password(url.trim_start_matches("//"))
        ))
    };
    let mut parsed = match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => parsed,
        // `localhost:8080` parses with the scheme `localhost`.
        Ok(_) => return Err(suggestion()),
        Err(_) if !url.contains("://") => return Err(suggestion()),
        Err(e) => return Err(wrong(&e.to_string())),
    };
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(wrong(
            "the service's URL takes no query (?…) or fragment (#…)",
        ));
    }
    let path = parsed.path().trim_end_matches('/').to_owned();
    parsed.set_path(if path.is_empty() { API_PREFIX } else { &path });
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

/// `note` (a deprecation note from the contract, which names operations as
/// the client's methods) with each operation named as its command.
fn with_command_names(note: &str) -> String {
    CliCommand::iter().fold(note.to_owned(), |note, operation| {
        note.replace(
            operation.operation_id(),
            &format!("`{}`", typed(&places(operation)[0])),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn a_url_without_a_path_gets_the_api_prefix() {
        assert_eq!(
            base_url("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(
            base_url("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(
            base_url("https://example.com/v1/").unwrap(),
            "https://example.com/v1"
        );
        assert_eq!(
            base_url("https://example.com/store/v1").unwrap(),
            "https://example.com/store/v1"
        );
        assert!(
            base_url("example.com")
                .unwrap_err()
                .contains("http://example.com")
        );
        assert!(
            base_url("localhost:8080")
                .unwrap_err()
                .contains("http://localhost:8080")
        );
        assert!(
            base_url("127.0.0.1:8080")
                .unwrap_err()
                .contains("http://127.0.0.1:8080")
        );
        assert!(base_url("ftp://example.com").is_err());
        assert!(base_url("http://h:1?x=1").unwrap_err().contains("no query"));
        assert!(
            base_url("http://h:1/#top")
                .unwrap_err()
                .contains("no query")
        );
        let secret = base_url("http://user:hunter2@h:1?x").unwrap_err();
        assert!(!secret.contains("hunter2"), "{secret}");
    }

    #[test]
    fn deprecation_notes_name_commands() {
        assert_eq!(
            with_command_names("use list_pets with the status filter instead"),
            "use `petstore pets list` with the status filter instead"
        );
    }
}
