//! Tells apart what can go wrong with a request: the service's declared
//! errors (typed, with its `code` and `message`), a request the contract
//! does not allow (refused before sending), and a service out of reach.
//!
//! ```sh
//! PETSTORE_URL=http://127.0.0.1:8080/v1 PETSTORE_API_KEY=dev-key \
//!     cargo run -p petstore-client --example errors
//! ```

use petstore_client::{Client, Error, NewPet, types};

/// What went wrong, for a person.
fn explain(error: &Error<types::Error>) -> String {
    match error {
        // A status the contract declares, with the service's error body.
        Error::ErrorResponse(response) => match response.code.as_str() {
            "unauthorized" => format!("check the API key: {}", response.message),
            "not_found" => format!("no such animal: {}", response.message),
            "service_unavailable" => format!("try again later: {}", response.message),
            code => format!("{} {code}: {}", response.status(), response.message),
        },
        // Refused by the client before anything was sent.
        Error::InvalidRequest(reason) => format!("not a valid request: {reason}"),
        // The service could not be reached, or the connection broke.
        Error::CommunicationError(e) => format!("cannot reach the service: {e}"),
        // A status the contract does not declare (a proxy's, say).
        Error::UnexpectedResponse(response) => format!("unexpected {}", response.status()),
        other => format!("{other}"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url =
        std::env::var("PETSTORE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080/v1".to_owned());
    let key = std::env::var("PETSTORE_API_KEY").map_err(|_| "set PETSTORE_API_KEY")?;
    let client = Client::try_with_api_key(&url, &key)?;

    #[allow(deprecated)] // `get_pet` is deprecated; here only for its 404.
    let missing = client.get_pet().pet_id(i64::MAX).send().await;
    if let Err(error) = missing {
        println!("get_pet(i64::MAX): {}", explain(&error));
    }

    let wrong_key = Client::try_with_api_key(&url, "not-a-key")?;
    if let Err(error) = wrong_key.list_pets().send().await {
        println!("list_pets with a wrong key: {}", explain(&error));
    }

    // An empty name breaks the contract: the client refuses to send it.
    let nameless = client
        .create_pet()
        .body(NewPet::builder().name("").category_id(1))
        .send()
        .await;
    if let Err(error) = nameless {
        println!("create_pet with an empty name: {}", explain(&error));
    }

    let nowhere = Client::try_with_api_key("http://127.0.0.1:9/v1", &key)?;
    if let Err(error) = nowhere.list_pets().send().await {
        println!("a service that is not there: {}", explain(&error));
    }
    Ok(())
}
