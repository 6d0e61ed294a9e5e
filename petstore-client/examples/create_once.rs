//! Adds an animal exactly once, however the network behaves: an
//! idempotency key, retried with backoff until the service answers 201.
//!
//! ```sh
//! PETSTORE_URL=http://127.0.0.1:8080/v1 PETSTORE_API_KEY=dev-key \
//!     cargo run -p petstore-client --example create_once -- Rex 1
//! ```

use petstore_client::{Client, NewPet, PetStatus, RetryPolicy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "Rex".to_owned());
    let category_id: i64 = args.next().map_or(Ok(1), |c| c.parse())?;
    let url =
        std::env::var("PETSTORE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080/v1".to_owned());
    let key = std::env::var("PETSTORE_API_KEY").map_err(|_| "set PETSTORE_API_KEY")?;
    let client = Client::try_with_api_key(&url, &key)?;

    let pet: NewPet = NewPet::builder()
        .name(name)
        .category_id(category_id)
        .status(PetStatus::Available)
        .try_into()?;
    let create = client
        .create_pet_once(pet)
        .retry(RetryPolicy::with_max_attempts(20));
    // Keep the key with the work it belongs to: a retry after a crash of
    // this program, with the same key and body, still creates only once.
    eprintln!("idempotency key: {}", create.key());
    let created = create.send().await?;
    println!(
        "stored {} as id {} after {} attempt(s){}",
        created.pet.name.as_str(),
        created.pet.id,
        created.attempts,
        if created.replayed {
            " (an earlier attempt had stored it)"
        } else {
            ""
        }
    );
    Ok(())
}
