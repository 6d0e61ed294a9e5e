//! The client sends `Authorization: Bearer <key>` with every request; a
//! missing or wrong key is a typed 401 for every operation, before anything
//! else about the request is looked at.
#![allow(deprecated)]

use petstore_client::{Client, NewPet, PetStatus};
use petstore_tests::{OTHER_KEY, TestServer};

use crate::{client, create, error_response};

#[tokio::test]
async fn a_wrong_key_is_a_typed_401_for_every_operation() {
    let server = TestServer::start().await;
    let pet = create(&client(&server), "Rex", 1, None).await;
    let intruder = Client::with_api_key(&server.url(""), "not-the-key");

    error_response(intruder.list_pets().send().await, 401, "unauthorized");
    error_response(
        intruder
            .create_pet()
            .body(NewPet::builder().name("Sneaky").category_id(1))
            .send()
            .await,
        401,
        "unauthorized",
    );
    error_response(
        intruder.get_pet().pet_id(pet.id).send().await,
        401,
        "unauthorized",
    );

    let listed = client(&server)
        .list_pets()
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed, [pet], "the rejected create stored nothing");
}

#[tokio::test]
async fn no_key_at_all_is_a_typed_401() {
    let server = TestServer::start().await;
    // progenitor's own constructor sends no credentials.
    let anonymous = Client::new(&server.url(""));
    error_response(anonymous.list_pets().send().await, 401, "unauthorized");
    error_response(
        anonymous.get_pet().pet_id(1).send().await,
        401,
        "unauthorized",
    );
}

#[tokio::test]
async fn authentication_comes_before_validation() {
    let server = TestServer::start().await;
    let intruder = Client::with_api_key(&server.url(""), "not-the-key");
    error_response(
        intruder.list_pets().limit(101).send().await,
        401,
        "unauthorized",
    );
}

#[tokio::test]
async fn every_configured_key_works() {
    let server = TestServer::start().await;
    let other = Client::with_api_key(&server.url(""), OTHER_KEY);
    let pet = create(&other, "Rex", 1, Some(PetStatus::Sold)).await;
    let read = other.get_pet().pet_id(pet.id).send().await.unwrap();
    assert_eq!(*read, pet);
    // A trailing slash on the base URL is accepted too.
    let slashed = Client::with_api_key(&server.url("/"), OTHER_KEY);
    assert_eq!(*slashed.list_pets().send().await.unwrap(), [pet]);
}
