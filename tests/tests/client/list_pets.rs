//! `listPets` through the client: ascending ids, the default and bounds of
//! `limit`, the `status` filter.

use petstore_client::{Pet, PetStatus};
use petstore_tests::TestServer;

use crate::{client, create, error_response, invalid_request};

/// 25 pets with statuses cycling through available, pending, sold and none.
async fn catalogue(client: &petstore_client::Client) -> Vec<Pet> {
    let statuses = [
        Some(PetStatus::Available),
        Some(PetStatus::Pending),
        Some(PetStatus::Sold),
        None,
    ];
    let mut pets = Vec::new();
    for i in 0..25 {
        let status = statuses[i % statuses.len()];
        pets.push(create(client, &format!("pet-{i}"), i as i64, status).await);
    }
    pets
}

#[tokio::test]
async fn an_empty_catalogue_lists_nothing() {
    let server = TestServer::start().await;
    let listed = client(&server).list_pets().send().await.unwrap();
    assert_eq!(listed.status(), 200);
    assert!(listed.is_empty());
}

#[tokio::test]
async fn limit_defaults_to_20_and_pets_come_in_ascending_id_order() {
    let server = TestServer::start().await;
    let client = client(&server);
    let pets = catalogue(&client).await;
    let listed = client.list_pets().send().await.unwrap().into_inner();
    assert_eq!(listed, pets[..20]);
    assert!(listed.windows(2).all(|w| w[0].id < w[1].id));
}

#[tokio::test]
async fn limit_is_between_1_and_100() {
    let server = TestServer::start().await;
    let client = client(&server);
    let pets = catalogue(&client).await;

    let one = client.list_pets().limit(1).send().await.unwrap();
    assert_eq!(*one, pets[..1]);
    let hundred = client.list_pets().limit(100u32).send().await.unwrap();
    assert_eq!(*hundred, pets);

    // Out of range above: the client sends it, the server answers 400.
    for limit in [101u32, 1000] {
        let error = error_response(
            client.list_pets().limit(limit).send().await,
            400,
            "bad_request",
        );
        assert!(error.message.contains("limit"), "{error:?}");
    }
    // Past int32 (the client's type is a non-zero u32): still a typed 400.
    error_response(
        client.list_pets().limit(u32::MAX).send().await,
        400,
        "bad_request",
    );
    // Zero does not fit the parameter's type (a non-zero `u32`): refused
    // before sending.
    let message = invalid_request(client.list_pets().limit(0).send().await);
    assert!(message.contains("limit"), "{message}");
}

#[tokio::test]
async fn status_filters_and_combines_with_limit() {
    let server = TestServer::start().await;
    let client = client(&server);
    let pets = catalogue(&client).await;
    for status in [PetStatus::Available, PetStatus::Pending, PetStatus::Sold] {
        let expected: Vec<&Pet> = pets.iter().filter(|p| p.status == Some(status)).collect();
        let listed = client
            .list_pets()
            .status(status)
            .send()
            .await
            .unwrap()
            .into_inner();
        assert_eq!(listed.iter().collect::<Vec<_>>(), expected, "{status}");

        let first_two = client
            .list_pets()
            .limit(2)
            .status(status)
            .send()
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            first_two.iter().collect::<Vec<_>>(),
            expected[..2],
            "{status}"
        );
    }
}
