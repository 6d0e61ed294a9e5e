//! `createPet` through the client: 201 with the stored pet; names checked
//! against the contract before anything is sent.

use petstore_client::{NewPet, PetStatus};
use petstore_tests::TestServer;

use crate::{client, create, invalid_request};

#[tokio::test]
async fn returns_the_stored_pet_with_the_assigned_id() {
    let server = TestServer::start().await;
    let client = client(&server);
    let rex = create(&client, "Rex", 9, Some(PetStatus::Pending)).await;
    assert_eq!(rex.name.as_str(), "Rex");
    assert_eq!(rex.category_id, 9);
    assert_eq!(rex.status, Some(PetStatus::Pending));

    let tom = create(&client, "Tom", -3, Some(PetStatus::Sold)).await;
    assert!(tom.id > rex.id, "ids grow in creation order");

    let listed = client.list_pets().send().await.unwrap().into_inner();
    assert_eq!(listed, [rex, tom]);
}

#[tokio::test]
async fn an_omitted_status_stays_absent() {
    let server = TestServer::start().await;
    let client = client(&server);
    let pet = client
        .create_pet()
        .body_map(|body| body.name("Nameless status").category_id(i64::MAX))
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pet.status, None);
    assert_eq!(pet.category_id, i64::MAX);
    let listed = client.list_pets().send().await.unwrap().into_inner();
    assert_eq!(listed, [pet]);
}

#[tokio::test]
async fn names_at_the_bounds_round_trip() {
    let server = TestServer::start().await;
    let client = client(&server);
    let longest = "é".repeat(255);
    for name in ["R", "Ünïcødé 🐕", "  spaced  ", longest.as_str()] {
        let pet = create(&client, name, 1, Some(PetStatus::Available)).await;
        assert_eq!(pet.name.as_str(), name);
    }
}

#[tokio::test]
async fn bodies_the_contract_forbids_are_refused_before_sending() {
    let server = TestServer::start().await;
    let client = client(&server);
    let too_long = "a".repeat(256);
    for name in [
        "",
        too_long.as_str(),
        "a\nb",
        "tab\there",
        "a\u{7f}b",
        "a\u{85}b",
    ] {
        let message = invalid_request(
            client
                .create_pet()
                .body(NewPet::builder().name(name).category_id(1))
                .send()
                .await,
        );
        assert!(message.contains("name"), "{name:?}: {message}");
    }
    // A required field left out.
    let message = invalid_request(
        client
            .create_pet()
            .body(NewPet::builder().name("Rex"))
            .send()
            .await,
    );
    assert!(message.contains("category_id"), "{message}");

    let listed = client.list_pets().send().await.unwrap().into_inner();
    assert!(listed.is_empty(), "nothing reached the server: {listed:?}");
}
