//! `getPet` through the client: deprecated (calling it needs
//! `#[allow(deprecated)]`) but still working, with typed 404 and 400.
#![allow(deprecated)]

use petstore_client::{Client, PetStatus};
use petstore_tests::{KEY, TestServer};

use crate::{client, create, error_response};

#[tokio::test]
async fn the_deprecated_get_still_returns_the_pet_and_announces_its_sunset() {
    let server = TestServer::start().await;
    let client = client(&server);
    let pet = create(&client, "Rex", 9, Some(PetStatus::Pending)).await;
    let response = client.get_pet().pet_id(pet.id).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers();
    assert_eq!(headers["deprecation"], "@1795305600");
    assert_eq!(headers["sunset"], "Thu, 05 Dec 2030 00:00:00 GMT");
    assert_eq!(headers["link"], "</v1/pets>; rel=\"successor-version\"");
    assert_eq!(response.into_inner(), pet);

    let no_status = create(&client, "Tom", 1, None).await;
    let read = client.get_pet().pet_id(no_status.id).send().await.unwrap();
    assert_eq!(*read, no_status);
}

#[tokio::test]
async fn an_unknown_id_is_a_typed_404() {
    let server = TestServer::start().await;
    let client = client(&server);
    let pet = create(&client, "Rex", 1, None).await;
    for id in [pet.id + 1, 0, -1, i64::MAX, i64::MIN] {
        let error = error_response(client.get_pet().pet_id(id).send().await, 404, "not_found");
        assert!(error.message.contains(&id.to_string()), "{error:?}");
    }
}

#[tokio::test]
async fn an_id_that_is_not_an_int64_is_a_typed_400() {
    // The client only sends int64 ids. To reach the server's 400 through
    // `get_pet`'s own response handling, put a malformed id in the base URL
    // and push the generated path into the query string (which the server
    // ignores): the request is `GET /v1/pets/not-a-number?/pets/1`.
    let server = TestServer::start().await;
    let client = Client::with_api_key(&server.url("/pets/not-a-number?"), KEY);
    let error = error_response(client.get_pet().pet_id(1).send().await, 400, "bad_request");
    assert!(!error.message.is_empty());
}
