//! `Client::walk_pets`: every animal, optionally of one status, exactly
//! once and in id order, page by page, whatever the page size — on both
//! backends, over more than 1,000 animals.

use futures::TryStreamExt;
use petstore_client::{Pet, PetStatus};
use petstore_tests::on_every_backend;

use super::client;

/// The pets the server returned on creation, as the client's type.
fn as_pets(created: &[serde_json::Value]) -> Vec<Pet> {
    created
        .iter()
        .map(|pet| serde_json::from_value(pet.clone()).unwrap())
        .collect()
}

on_every_backend! {
    async fn walking_sees_every_animal_once_in_order_at_every_page_size(server) {
        let all = as_pets(&server.create_many(1_050).await);
        let client = client(&server);
        for page_size in [1_000, 100, 37, 20] {
            let seen: Vec<Pet> = client
                .walk_pets()
                .page_size(page_size)
                .stream()
                .try_collect()
                .await
                .unwrap();
            assert_eq!(seen, all, "page size {page_size}");
        }
        for status in [PetStatus::Available, PetStatus::Pending, PetStatus::Sold] {
            let expected: Vec<Pet> = all.iter().filter(|p| p.status == Some(status)).cloned().collect();
            assert!(expected.len() > 100, "{status:?}: more than a page");
            for page_size in [100, 9] {
                let seen: Vec<Pet> = client
                    .walk_pets()
                    .status(status)
                    .page_size(page_size)
                    .stream()
                    .try_collect()
                    .await
                    .unwrap();
                assert_eq!(seen, expected, "{status:?}, page size {page_size}");
            }
        }
    }
}
