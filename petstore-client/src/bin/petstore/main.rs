//! `petstore`: the pet store service from the command line.
//!
//! The commands, their flags and their help are progenitor's CLI generator
//! output for the contract (`generated.rs`, written by `cargo xtask client
//! generate`). This file only arranges them as `petstore pets <command>`,
//! adds what the contract cannot say (where the service is, the key, `--all`)
//! and turns answers into output and exit codes.

#[rustfmt::skip]
#[allow(deprecated, missing_docs, unused, clippy::all)]
mod generated;
mod output;

use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, Command};
use generated::{Cli, CliCommand, CliConfig};
use output::{Json, Outcome};
use std::num::NonZeroU32;

use petstore_client::{
    BuildError, Client, ClientInfo, DEFAULT_TIMEOUT, PAGE_SIZE_MAX, Pet, PetStatus,
};

/// Where the key comes from: never a flag, which would leave it in shell
/// histories and process listings.
const API_KEY_VARIABLE: &str = "PETSTORE_API_KEY";

/// The service's address when neither `--url` nor `PETSTORE_URL` gives one.
const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The contract's path prefix, added to a URL that has no path.
const API_PREFIX: &str = "/v1";

/// The `pets` command that runs each operation of the contract. The match is
/// exhaustive, so an operation added to the contract does not compile until
/// it is given a name here.
fn command_name(operation: CliCommand) -> &'static str {
    match operation {
        CliCommand::ListPets => "list",
        CliCommand::CreatePet => "create",
        CliCommand::GetPet => "get",
    }
}

/// The whole command line.
fn command() -> Command {
    let mut pets = Command::new("pets")
        .about("The catalogue of animals")
        .subcommand_required(true);
    for operation in CliCommand::iter() {
        let generated = Cli::<Json>::get_command(operation).name(command_name(operation));
        pets = pets.subcommand(adapt(operation, generated));
    }
    Command::new("petstore")
        .version(format!(
            "{} (contract {})",
            env!("CARGO_PKG_VERSION"),
            <Client as ClientInfo<()>>::api_version()
        ))
        .about("The pet store service from the command line: every answer is printed as JSON")
        .arg(
            Arg::new("url")
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
        .subcommand(pets)
        .subcommand_required(true)
        .after_help(format!(
            "The API key is read from the {API_KEY_VARIABLE} environment variable (never from \
             a flag).\n\n\
             Exit status: 0 success; 1 the service answered with an error (its code and \
             message are printed); 2 the command line is wrong; 3 no answer from the service, \
             or one the contract does not describe; 4 the service did not accept the key (401); \
             5 the answer could not be written out."
        ))
}

/// What this command line adds to a generated command.
fn adapt(operation: CliCommand, command: Command) -> Command {
    let command = summary_first(command);
    match operation {
        CliCommand::ListPets => command
            .arg(
                Arg::new("all")
                    .long("all")
                    .action(ArgAction::SetTrue)
                    .conflicts_with("after")
                    .help(
                        "Every animal (of the status, if given), walking page by page; \
                         --limit is then the page size",
                    ),
            )
            // The contract's bounds, which progenitor does not check.
            .mut_arg("limit", |limit| {
                limit.value_name("N").value_parser(page_size)
            })
            .mut_arg("after", |after| {
                after.value_name("ID").allow_negative_numbers(true)
            }),
        // `petstore pets get 42`: the path parameter as a positional argument.
        CliCommand::GetPet => command.mut_arg("pet-id", |id| {
            id.long(None).value_name("ID").allow_negative_numbers(true)
        }),
        CliCommand::CreatePet => command
            .mut_arg("category-id", |id| id.allow_negative_numbers(true))
            .mut_arg("status", |status| status.help("The animal's status."))
            // The file is the whole body: flags beside it would be ignored.
            .mut_arg("json-body", |body| {
                body.conflicts_with_all(["name", "category-id", "status"])
            }),
    }
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
    let matches = command().get_matches();
    let Some(("pets", pets)) = matches.subcommand() else {
        unreachable!("clap requires the `pets` subcommand");
    };
    let Some((name, arguments)) = pets.subcommand() else {
        unreachable!("clap requires a `pets` subcommand");
    };
    let operation = CliCommand::iter()
        .find(|operation| command_name(*operation) == name)
        .expect("every subcommand is an operation");
    run(operation, &matches, arguments).await.exit_code()
}

/// Runs `operation` with its `arguments` against the service named in
/// `matches`.
async fn run(operation: CliCommand, matches: &ArgMatches, arguments: &ArgMatches) -> Outcome {
    // An empty `PETSTORE_URL` counts as unset.
    let url = matches
        .get_one::<String>("url")
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
    let client = match &key {
        Some(key) => Client::try_with_api_key(&base_url, key),
        // The service answers 401, which is reported with a hint.
        None => anonymous_client(&base_url),
    };
    let client = match client {
        Ok(client) => client,
        Err(BuildError::InvalidApiKey) => {
            return Outcome::Usage(format!("{API_KEY_VARIABLE}: {}", BuildError::InvalidApiKey));
        }
        Err(e) => return Outcome::NoAnswer(format!("cannot start an HTTP client: {e}")),
    };
    if let Some(note) = operation.deprecation() {
        eprintln!(
            "warning: `petstore pets {}` is deprecated: {}",
            command_name(operation),
            with_command_names(note)
        );
    }

    let result = match operation {
        CliCommand::ListPets if arguments.get_flag("all") => {
            walk(&client, arguments).await.map_err(anyhow::Error::new)
        }
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

/// Prints every animal (of `--status`) as one JSON array, fetching `--limit`
/// per request.
async fn walk(
    client: &Client,
    arguments: &ArgMatches,
) -> Result<(), petstore_client::Error<petstore_client::types::Error>> {
    use futures::TryStreamExt;

    let mut walk = client.walk_pets();
    if let Some(status) = arguments.get_one::<PetStatus>("status") {
        walk = walk.status(*status);
    }
    if let Some(limit) = arguments.get_one::<NonZeroU32>("limit") {
        walk = walk.page_size(limit.get());
    }
    let mut pets = walk.stream();
    let json = Json::default();
    json.list_start::<Pet>();
    loop {
        match pets.try_next().await {
            Ok(Some(pet)) => json.list_item(&pet),
            Ok(None) => {
                json.list_end_success::<Pet>();
                return Ok(());
            }
            Err(error) => {
                json.list_end_error(&error);
                return Err(error);
            }
        }
    }
}

/// A client that sends no key, with [`Client::with_api_key`]'s timeouts.
fn anonymous_client(base_url: &str) -> Result<Client, BuildError> {
    let http = reqwest::Client::builder()
        .connect_timeout(DEFAULT_TIMEOUT)
        .timeout(DEFAULT_TIMEOUT)
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
            &format!("`petstore pets {}`", command_name(operation)),
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
