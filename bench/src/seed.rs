//! Filling a fresh database with pets, straight through the storage layer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use petstore_api::model::{NewPet, PetStatus};
use petstore_server::storage::{self, DatabaseUrl};

/// Creates kept in flight at once. The SQLite store commits every create
/// waiting for its writer in one transaction (one fsync), so many in flight
/// means few, large transactions.
const IN_FLIGHT: usize = 2000;

/// Names the seeded pets cycle through (with a number, so they differ).
const NAMES: [&str; 8] = [
    "Rex", "Bella", "Milo", "Luna", "Charlie", "Daisy", "Oscar", "Coco",
];

/// The `i`-th seeded pet (from 0). Statuses come in a fixed mix — 50 %
/// available, 25 % pending, 20 % sold, 5 % none — spread evenly over the id
/// range, so every filter finds matches everywhere.
pub fn new_pet(i: u64) -> NewPet {
    let status = match i % 20 {
        0..10 => Some(PetStatus::Available),
        10..15 => Some(PetStatus::Pending),
        15..19 => Some(PetStatus::Sold),
        _ => None,
    };
    NewPet {
        name: format!("{} {}", NAMES[(i % NAMES.len() as u64) as usize], i + 1),
        category_id: (i % 10) as i64 + 1,
        status,
    }
}

/// Stores `count` pets in the (fresh) database at `url`, in ids `1..=count`,
/// and returns how long it took. Progress is printed for big datasets.
pub async fn seed(url: &DatabaseUrl, count: u64) -> anyhow::Result<Duration> {
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let storage = storage::open(
        url,
        &log,
        storage::FatalSender::new(None),
        Default::default(),
    )
    .await
    .with_context(|| format!("opening {url} to seed it"))?;
    let started = Instant::now();
    let step = (count / 10).max(100_000);
    let created = futures::stream::iter(0..count)
        .map(|i| storage.pets.create(new_pet(i)))
        .buffer_unordered(IN_FLIGHT)
        .map_err(|e| anyhow::anyhow!("seeding: {e}"))
        .try_fold(0u64, |done, _| async move {
            if (done + 1).is_multiple_of(step) {
                println!(
                    "bench:   {} pets stored ({:.0?})",
                    done + 1,
                    started.elapsed()
                );
            }
            Ok(done + 1)
        })
        .await;
    let elapsed = started.elapsed();
    storage.pets.close().await;
    created?;
    Ok(elapsed)
}

/// Stores `count` pets through `POST /v1/pets` of the (fresh) server at
/// `addr`, one after the other, so that they get ids `1..=count` as the
/// seeding of our own store gives them; fails when an id differs (the
/// datasets would not be the same). Returns how long it took.
pub async fn seed_over_http(addr: SocketAddr, key: &str, count: u64) -> anyhow::Result<Duration> {
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/pets");
    let started = Instant::now();
    for i in 0..count {
        let response = client
            .post(&url)
            .bearer_auth(key)
            .json(&new_pet(i))
            .send()
            .await
            .with_context(|| format!("POST {url}"))?;
        let status = response.status();
        let body: serde_json::Value = response
            .json()
            .await
            .with_context(|| format!("POST {url}: {status}, not a JSON body"))?;
        if status != reqwest::StatusCode::CREATED || body["id"] != i + 1 {
            bail!(
                "POST {url} of pet {}: {status} {body} (expected 201 and id {})",
                i + 1,
                i + 1
            );
        }
    }
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_mix_is_half_available_a_quarter_pending_a_fifth_sold() {
        let mut counts = [0; 4];
        for i in 0..1000 {
            let slot = match new_pet(i).status {
                Some(PetStatus::Available) => 0,
                Some(PetStatus::Pending) => 1,
                Some(PetStatus::Sold) => 2,
                None => 3,
            };
            counts[slot] += 1;
        }
        assert_eq!(counts, [500, 250, 200, 50]);
    }

    #[test]
    fn seeded_pets_are_valid_new_pets() {
        for i in [0, 19, 999_999] {
            let pet = new_pet(i);
            let json = serde_json::to_string(&pet).unwrap();
            let back: NewPet = serde_json::from_str(&json).unwrap();
            assert_eq!(back, pet);
        }
    }
}
