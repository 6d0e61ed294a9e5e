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
use petstore_client::{Client, ClientInfo, Pet, PetStatus};

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
                .value_name("URL")
                .default_value(DEFAULT_URL)
                .global(true)
                .help(format!(
                    "The service, e.g. https://petstore.example or http://127.0.0.1:8080/v1; \
                     {API_PREFIX} is added to a URL without a path"
                )),
        )
        .subcommand(pets)
        .subcommand_required(true)
        .after_help(format!(
            "The API key is read from the {API_KEY_VARIABLE} environment variable (never from \
             a flag).\n\n\
             Exit status: 0 success; 1 the service answered with an error (its code and \
             message are printed); 2 the command line is wrong; 3 no answer from the service, \
             or one the contract does not describe; 4 the service did not accept the key (401)."
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
            .mut_arg("limit", |limit| limit.value_name("N"))
            .mut_arg("after", |after| after.value_name("ID")),
        // `petstore pets get 42`: the path parameter as a positional argument.
        CliCommand::GetPet => command.mut_arg("pet-id", |id| id.long(None).value_name("ID")),
        CliCommand::CreatePet => command,
    }
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
    let url = matches.get_one::<String>("url").expect("it has a default");
    let base_url = match base_url(url) {
        Ok(base_url) => base_url,
        Err(message) => return Outcome::Usage(message),
    };
    let key = std::env::var(API_KEY_VARIABLE)
        .ok()
        .filter(|key| !key.is_empty());
    let client = match &key {
        Some(key) => match Client::try_with_api_key(&base_url, key) {
            Ok(client) => client,
            Err(e) => return Outcome::Usage(format!("{API_KEY_VARIABLE}: {e}")),
        },
        // The service answers 401, which is reported with a hint.
        None => Client::new(&base_url),
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
    if let Some(limit) = arguments.get_one::<std::num::NonZeroU32>("limit") {
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

/// The client's base URL for `url`: `/v1` is added when it has no path.
fn base_url(url: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("--url {url:?}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("--url {url:?}: the scheme must be http or https"));
    }
    let url = url.trim_end_matches('/');
    Ok(match parsed.path() {
        "" | "/" => format!("{url}{API_PREFIX}"),
        _ => url.to_owned(),
    })
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
        assert!(base_url("example.com").is_err());
        assert!(base_url("ftp://example.com").is_err());
    }

    #[test]
    fn deprecation_notes_name_commands() {
        assert_eq!(
            with_command_names("use list_pets with the status filter instead"),
            "use `petstore pets list` with the status filter instead"
        );
    }
}
