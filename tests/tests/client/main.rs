//! The generated client, `petstore-client`, against the real server: every
//! operation and every declared error through the typed API, as a user of the
//! crate would write it. `declared_errors` covers the statuses the real server
//! cannot be made to return (413 from the client, 500, 503) with a stub.
//! `mocked` is code of a user of the crate, tested against the crate's
//! generated `httpmock` mocks (feature `mock`) instead of a server. `orders`
//! is the Store: `place_order_once`, `walk_orders`, updates and the inventory.
//! `throttled` is the retries on `429` and `503`: the `Retry-After` waited
//! for, within the `RetryPolicy`'s bounds, against a stub. `events` is
//! `follow_events`, the feed followed live, against the mocks and the server.

mod authentication;
mod create_pet;
mod declared_errors;
mod events;
mod get_pet;
mod list_pets;
mod mocked;
mod orders;
mod stub;
mod throttled;
mod walk;

use std::fmt::Debug;

use petstore_client::{Client, Error, NewPet, Pet, PetStatus, types};
use petstore_tests::{KEY, TestServer};

/// A client for `server` with the key it accepts.
fn client(server: &TestServer) -> Client {
    Client::with_api_key(&server.url(""), KEY)
}

/// Creates a pet through the client, insisting on 201.
async fn create(client: &Client, name: &str, category_id: i64, status: Option<PetStatus>) -> Pet {
    let response = client
        .create_pet()
        .body(
            NewPet::builder()
                .name(name)
                .category_id(category_id)
                .status(status),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("creating {name:?}: {e}"));
    assert_eq!(response.status(), 201);
    response.into_inner()
}

/// The typed error body of `result`, which must be the declared error
/// response `status` with code `code`.
fn error_response<T: Debug>(
    result: Result<T, Error<types::Error>>,
    status: u16,
    code: &str,
) -> types::Error {
    match result {
        Err(Error::ErrorResponse(response)) => {
            assert_eq!(response.status(), status, "{response:?}");
            assert_eq!(response.code, code, "{response:?}");
            assert_eq!(response.status, i32::from(status), "{response:?}");
            assert!(!response.message.is_empty(), "{response:?}");
            response.into_inner()
        }
        other => panic!("expected a typed {status} ({code}), got {other:?}"),
    }
}

/// The message of `result`, which must be an `InvalidRequest`: refused by the
/// client, never sent.
fn invalid_request<T: Debug>(result: Result<T, Error<types::Error>>) -> String {
    match result {
        Err(Error::InvalidRequest(message)) => message,
        other => panic!("expected the client to refuse the request, got {other:?}"),
    }
}
