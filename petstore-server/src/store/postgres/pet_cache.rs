//! Pets read by id, kept in memory (PostgreSQL).
//!
//! A pet never changes once it is created: the contract has no operation
//! that updates or deletes one (the test below fails the day it has). So a
//! pet read once is that pet for good, on every instance, and serving it
//! again from memory can never be stale. Only pets found are kept: an id not
//! found is asked of the database every time, so a pet another instance has
//! just created is found at once.
//!
//! Lists are never served from here: a list must include every pet any
//! instance has acknowledged, which only the database knows.
//!
//! The cache holds at most [`PetCache::CAPACITY`] pets; when full it is
//! emptied and fills again with what is read next. A kept pet is served
//! during a database outage too.

use std::collections::HashMap;
use std::sync::RwLock;

use petstore_api::model::Pet;

/// The pets read by id so far.
#[derive(Debug, Default)]
pub(super) struct PetCache {
    pets: RwLock<HashMap<i64, Pet>>,
}

impl PetCache {
    /// The most pets kept: about 100 bytes each with a short name, up to
    /// about 1 KB with the longest (255 characters of 4 bytes).
    pub const CAPACITY: usize = 100_000;

    /// Pet `id`, if it has been kept.
    pub fn get(&self, id: i64) -> Option<Pet> {
        self.pets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    /// Keeps `pet`, as read from the database.
    pub fn keep(&self, pet: &Pet) {
        let mut pets = self.pets.write().unwrap_or_else(|e| e.into_inner());
        if pets.len() >= PetCache::CAPACITY {
            pets.clear();
        }
        pets.insert(pet.id, pet.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pet(id: i64) -> Pet {
        Pet {
            id,
            name: format!("pet {id}"),
            category_id: 1,
            status: None,
        }
    }

    #[test]
    fn kept_pets_are_served_and_others_are_not() {
        let cache = PetCache::default();
        assert_eq!(cache.get(1), None);
        cache.keep(&pet(1));
        assert_eq!(cache.get(1), Some(pet(1)));
        assert_eq!(cache.get(2), None);
    }

    #[test]
    fn a_full_cache_starts_over() {
        let cache = PetCache::default();
        for id in 0..PetCache::CAPACITY as i64 {
            cache.keep(&pet(id));
        }
        cache.keep(&pet(-1));
        assert_eq!(cache.get(-1), Some(pet(-1)));
        assert_eq!(cache.get(0), None);
    }

    /// The cache (and the SQLite store's in-memory catalogue, which appends
    /// and never rewrites) rely on pets never changing once created. An
    /// operation that changes or removes a pet breaks that: before adding
    /// one, read "Pets never change" in ARCHITECTURE.md.
    #[test]
    fn pets_never_change_once_created() {
        let contract: serde_yaml::Value =
            serde_yaml::from_str(crate::docs::CONTRACT_YAML).expect("the contract parses");
        let mut changing = Vec::new();
        for (path, item) in contract["paths"].as_mapping().expect("paths") {
            for method in item.as_mapping().expect("a path item").keys() {
                let (path, method) = (path.as_str().unwrap(), method.as_str().unwrap());
                // Reads, and the create; anything else may change a pet.
                let harmless = matches!(method, "get" | "head" | "options" | "parameters")
                    || (method, path) == ("post", "/pets");
                if !harmless {
                    changing.push(format!("{} {path}", method.to_uppercase()));
                }
            }
        }
        assert!(
            changing.is_empty(),
            "{changing:?} may change or remove a pet; the PostgreSQL pet cache and the SQLite \
             catalogue assume pets never change: see \"Pets never change\" in ARCHITECTURE.md"
        );
    }
}
