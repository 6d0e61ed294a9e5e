//! A user of `petstore-client` tests its own code against the crate's
//! generated mocks (feature `mock`): no server, only the public API of the
//! client and of `httpmock`, as a downstream crate would write it. The
//! contract's types are `#[non_exhaustive]` (a minor version may add a
//! field), so, as there, the answers the mocks give are built with their
//! builders, not struct literals.

use httpmock::MockServer;
use petstore_client::mock::MockServerExt;
use petstore_client::{Client, Error, NewPet, Pet, PetStatus, types};

/// The user's code: an available pet named `name`, the first one listed if
/// there is one, else a new one.
async fn available_pet(client: &Client, name: &str) -> Result<Pet, Error<types::Error>> {
    let listed = client
        .list_pets()
        .status(PetStatus::Available)
        .limit(std::num::NonZeroU32::new(1).unwrap())
        .send()
        .await?;
    if let Some(pet) = listed.into_inner().into_iter().next() {
        return Ok(pet);
    }
    let new_pet = NewPet::builder()
        .name(name)
        .category_id(7)
        .status(PetStatus::Available);
    Ok(client.create_pet().body(new_pet).send().await?.into_inner())
}

/// The user's code: a line about the pet with id `id`, or why there is none.
async fn describe(client: &Client, id: i64) -> Result<String, Error<types::Error>> {
    #[allow(deprecated)] // The user still reads one pet by id.
    let found = client.get_pet().pet_id(id).send().await;
    match found {
        Ok(pet) => Ok(format!("{} is {:?}", pet.name.as_str(), pet.status)),
        Err(Error::ErrorResponse(error)) if error.status() == 404 => {
            Ok(format!("no pet {id}: {}", error.message))
        }
        Err(other) => Err(other),
    }
}

fn pet(id: i64, name: &str) -> Pet {
    Pet::builder()
        .id(id)
        .name(name)
        .category_id(7)
        .status(PetStatus::Available)
        .try_into()
        .unwrap()
}

/// The service's error body.
fn error(status: i32, code: &str, message: &str) -> types::Error {
    types::Error::builder()
        .status(status)
        .code(code)
        .message(message)
        .try_into()
        .unwrap()
}

/// The user's async code, run to completion.
fn run<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn client(server: &MockServer) -> Client {
    // The mocks match the contract's paths without `/v1`.
    Client::with_api_key(&server.base_url(), "test-key")
}

#[test]
fn an_available_pet_that_is_listed_is_taken_without_creating_one() {
    let server = MockServer::start();
    let listed = server.list_pets(|when, then| {
        when.status(PetStatus::Available)
            .limit(std::num::NonZeroU32::new(1));
        then.ok(&vec![pet(3, "Rex")]);
    });
    let created = server.create_pet(|_, then| {
        then.created(&pet(4, "Max"));
    });
    let found = run(available_pet(&client(&server), "Max")).unwrap();
    assert_eq!(found, pet(3, "Rex"));
    listed.assert_calls(1);
    created.assert_calls(0);
}

#[test]
fn with_none_listed_one_is_created_with_the_contract_s_body() {
    let server = MockServer::start();
    let listed = server.list_pets(|when, then| {
        when.status(PetStatus::Available);
        then.ok(&vec![]);
    });
    let expected = NewPet::builder()
        .name("Max")
        .category_id(7)
        .status(PetStatus::Available)
        .try_into()
        .unwrap();
    let created = server.create_pet(|when, then| {
        when.body(&expected);
        then.created(&pet(4, "Max"));
    });
    let found = run(available_pet(&client(&server), "Max")).unwrap();
    assert_eq!(found, pet(4, "Max"));
    listed.assert_calls(1);
    created.assert_calls(1);
}

#[test]
fn a_typed_404_is_told_apart_from_other_errors() {
    let server = MockServer::start();
    server.get_pet(|when, then| {
        when.pet_id(42);
        then.not_found(&error(404, "not_found", "no pet has id 42"));
    });
    server.get_pet(|when, then| {
        when.pet_id(3);
        then.ok(&pet(3, "Rex"));
    });
    server.list_pets(|_, then| {
        then.service_unavailable(&error(
            503,
            "service_unavailable",
            "the database is unavailable; retry later",
        ));
    });
    let client = client(&server);
    assert_eq!(
        run(describe(&client, 42)).unwrap(),
        "no pet 42: no pet has id 42"
    );
    assert_eq!(run(describe(&client, 3)).unwrap(), "Rex is Some(Available)");
    // Any other declared error reaches the user's caller, typed.
    match run(available_pet(&client, "Max")) {
        Err(Error::ErrorResponse(error)) => {
            assert_eq!(
                (error.status().as_u16(), error.code.as_str()),
                (503, "service_unavailable")
            );
        }
        other => panic!("{other:?}"),
    }
}

/// The user's code: orders the animal `pet_id` and tells whether it got it
/// (someone else's order is not an error to this caller).
async fn try_to_buy(
    client: &Client,
    pet_id: i64,
) -> Result<Option<types::Order>, Error<types::Error>> {
    match client.place_order_once(pet_id).send().await {
        Ok(placed) => Ok(Some(placed.order)),
        Err(Error::ErrorResponse(error)) if error.code == "pet_not_available" => Ok(None),
        Err(other) => Err(other),
    }
}

fn order(id: i64, pet_id: i64) -> types::Order {
    types::Order::builder()
        .id(id)
        .pet_id(pet_id)
        .status(types::OrderStatus::Placed)
        .placed_at(
            "2026-11-24T10:00:00.123456Z"
                .parse::<chrono::DateTime<chrono::Utc>>()
                .unwrap(),
        )
        .try_into()
        .unwrap()
}

fn new_order(pet_id: i64) -> types::NewOrder {
    types::NewOrder::builder()
        .pet_id(pet_id)
        .try_into()
        .unwrap()
}

#[test]
fn an_order_is_placed_once_and_a_taken_animal_is_told_apart() {
    let server = MockServer::start();
    let placed = server.place_order(|when, then| {
        when.body(&new_order(3));
        then.created(&order(10, 3));
    });
    let taken = server.place_order(|when, then| {
        when.body(&new_order(4));
        then.conflict(&error(
            409,
            "pet_not_available",
            "pet 4 is pending; only an available animal can be ordered",
        ));
    });
    let client = client(&server);
    assert_eq!(run(try_to_buy(&client, 3)).unwrap(), Some(order(10, 3)));
    assert_eq!(run(try_to_buy(&client, 4)).unwrap(), None);
    placed.assert_calls(1);
    // Not retried: the animal is taken, and no retry can change that.
    taken.assert_calls(1);

    let inventory = server.get_inventory(|_, then| {
        then.ok(&types::Inventory::builder()
            .available(1)
            .pending(2)
            .sold(3)
            .try_into()
            .unwrap());
    });
    let counted = run(client.get_inventory().send()).unwrap().into_inner();
    assert_eq!(
        (counted.available, counted.pending, counted.sold),
        (1, 2, 3)
    );
    inventory.assert_calls(1);
}
