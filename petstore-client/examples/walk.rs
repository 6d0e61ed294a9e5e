//! Walks the whole catalogue, or one status, page by page.
//!
//! ```sh
//! PETSTORE_URL=http://127.0.0.1:8080/v1 PETSTORE_API_KEY=dev-key \
//!     cargo run -p petstore-client --example walk -- [available|pending|sold]
//! ```

use futures::TryStreamExt;
use petstore_client::{Client, PetStatus};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = client_from_env()?;
    let mut walk = client.walk_pets().page_size(100);
    if let Some(status) = std::env::args().nth(1) {
        walk = walk.status(status.parse::<PetStatus>()?);
    }
    let mut pets = walk.stream();
    let mut count = 0;
    while let Some(pet) = pets.try_next().await? {
        let status = pet.status.map_or("-".to_owned(), |s| s.to_string());
        println!("{:>8}  {:<10}  {}", pet.id, status, pet.name.as_str());
        count += 1;
    }
    println!("{count} animals");
    Ok(())
}

/// A client for `PETSTORE_URL` (default `http://127.0.0.1:8080/v1`) with the
/// key in `PETSTORE_API_KEY`.
fn client_from_env() -> Result<Client, Box<dyn std::error::Error>> {
    let url =
        std::env::var("PETSTORE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080/v1".to_owned());
    let key = std::env::var("PETSTORE_API_KEY").map_err(|_| "set PETSTORE_API_KEY")?;
    Ok(Client::try_with_api_key(&url, &key)?)
}
