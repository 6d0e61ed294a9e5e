//! The SQLite store's in-memory copy of the committed catalogue.
//!
//! Pets are only ever appended (the API neither changes nor deletes them),
//! in ascending id order, so the copy is a set of append-only columns — about
//! 17 bytes plus the name per pet, a fraction of what one allocation per pet
//! would take. And since no list returns more than `LIST_MAX` pets and
//! there is no pagination, every list is a prefix: of all pets, or of the
//! pets with one status. Those prefixes never change once full, so per
//! status only the positions of the first `LIST_MAX` pets are kept.

use super::LIST_MAX;
use crate::model::{Pet, PetStatus};

/// The longest prefix a list can ask for.
const PREFIX: usize = LIST_MAX as usize;

/// The committed pets, in id order.
#[derive(Default)]
pub struct Catalogue {
    ids: Ids,
    category_ids: Vec<i64>,
    statuses: Vec<Option<PetStatus>>,
    /// Where each name ends in `names`.
    name_ends: Vec<usize>,
    names: String,
    /// Positions of the first `PREFIX` pets with each status.
    first_by_status: [Vec<u32>; 3],
}

impl Catalogue {
    /// Appends a newly committed pet; its id is larger than any before.
    pub fn push(&mut self, pet: &Pet) {
        assert!(
            self.ids.last().is_none_or(|last| last < pet.id),
            "ids must ascend"
        );
        if let Some(status) = pet.status {
            let first = &mut self.first_by_status[status as usize];
            if first.len() < PREFIX {
                // Positions fit in u32 up to four billion pets.
                first.push(u32::try_from(self.ids.len()).expect("fewer than 2^32 pets"));
            }
        }
        self.ids.push(pet.id);
        self.category_ids.push(pet.category_id);
        self.statuses.push(pet.status);
        self.names.push_str(&pet.name);
        self.name_ends.push(self.names.len());
    }

    /// The first `limit` pets (at most `LIST_MAX`), only those with
    /// `status` when it is given.
    pub fn first(&self, limit: u32, status: Option<PetStatus>) -> Vec<Pet> {
        let limit = (limit as usize).min(PREFIX);
        match status {
            None => (0..self.ids.len().min(limit))
                .map(|at| self.pet(at))
                .collect(),
            Some(status) => self.first_by_status[status as usize]
                .iter()
                .take(limit)
                .map(|&at| self.pet(at as usize))
                .collect(),
        }
    }

    /// The pet with identifier `id`.
    pub fn get(&self, id: i64) -> Option<Pet> {
        self.ids.position(id).map(|at| self.pet(at))
    }

    fn pet(&self, at: usize) -> Pet {
        let start = if at == 0 { 0 } else { self.name_ends[at - 1] };
        Pet {
            id: self.ids.at(at),
            name: self.names[start..self.name_ends[at]].to_owned(),
            category_id: self.category_ids[at],
            status: self.statuses[at],
        }
    }
}

/// The ids, ascending. SQLite's AUTOINCREMENT hands out consecutive ids
/// when nothing is deleted, so they are usually a range and cost nothing
/// per pet; after the first gap they are listed.
enum Ids {
    Range { first: i64, len: usize },
    Listed(Vec<i64>),
}

impl Default for Ids {
    fn default() -> Ids {
        Ids::Range { first: 0, len: 0 }
    }
}

impl Ids {
    fn len(&self) -> usize {
        match self {
            Ids::Range { len, .. } => *len,
            Ids::Listed(ids) => ids.len(),
        }
    }

    fn last(&self) -> Option<i64> {
        self.len().checked_sub(1).map(|at| self.at(at))
    }

    fn at(&self, at: usize) -> i64 {
        match self {
            Ids::Range { first, .. } => first + at as i64,
            Ids::Listed(ids) => ids[at],
        }
    }

    fn position(&self, id: i64) -> Option<usize> {
        match self {
            Ids::Range { first, len } => {
                let at = usize::try_from(id.checked_sub(*first)?).ok()?;
                (at < *len).then_some(at)
            }
            Ids::Listed(ids) => ids.binary_search(&id).ok(),
        }
    }

    fn push(&mut self, id: i64) {
        match self {
            Ids::Range { len: 0, .. } => *self = Ids::Range { first: id, len: 1 },
            Ids::Range { first, len } if first.checked_add(*len as i64) == Some(id) => *len += 1,
            Ids::Range { first, len } => {
                let mut ids: Vec<i64> = (0..*len as i64).map(|at| *first + at).collect();
                ids.push(id);
                *self = Ids::Listed(ids);
            }
            Ids::Listed(ids) => ids.push(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pet(id: i64, status: Option<PetStatus>) -> Pet {
        Pet {
            id,
            name: format!("pet-{id}-ü"),
            category_id: -id,
            status,
        }
    }

    #[test]
    fn pets_come_back_exactly_as_pushed() {
        let mut catalogue = Catalogue::default();
        let pets: Vec<Pet> = (1..=5)
            .map(|id| pet(id * 10, PetStatus::ALL.get(id as usize % 4).copied()))
            .collect();
        for pet in &pets {
            catalogue.push(pet);
        }
        for pet in &pets {
            assert_eq!(catalogue.get(pet.id).as_ref(), Some(pet));
        }
        assert_eq!(catalogue.get(11), None);
        assert_eq!(catalogue.get(i64::MIN), None);
        assert_eq!(catalogue.first(100, None), pets);
        assert_eq!(catalogue.first(2, None), pets[..2]);
    }

    #[test]
    fn status_prefixes_keep_id_order_and_stop_at_the_limit_max() {
        let mut catalogue = Catalogue::default();
        let mut sold = Vec::new();
        for id in 1..=1000 {
            let status = if id % 3 == 0 {
                Some(PetStatus::Sold)
            } else {
                None
            };
            let pet = pet(id, status);
            catalogue.push(&pet);
            if status.is_some() {
                sold.push(pet);
            }
        }
        assert_eq!(catalogue.first(100, Some(PetStatus::Sold)), sold[..100]);
        assert_eq!(catalogue.first(1000, Some(PetStatus::Sold)), sold[..100]);
        assert_eq!(catalogue.first(7, Some(PetStatus::Sold)), sold[..7]);
        assert!(catalogue.first(100, Some(PetStatus::Pending)).is_empty());
        assert_eq!(catalogue.first(100, None).len(), 100);
    }

    #[test]
    fn consecutive_and_gapped_ids_are_both_found() {
        let mut catalogue = Catalogue::default();
        for id in [1, 2, 3, 7, 8, i64::MAX] {
            catalogue.push(&pet(id, None));
        }
        for id in [1, 2, 3, 7, 8, i64::MAX] {
            assert_eq!(catalogue.get(id).map(|pet| pet.id), Some(id));
        }
        for id in [0, 4, 6, 9, i64::MIN, i64::MAX - 1] {
            assert_eq!(catalogue.get(id), None, "{id}");
        }
        let mut consecutive = Catalogue::default();
        for id in 5..10 {
            consecutive.push(&pet(id, None));
        }
        assert!(matches!(consecutive.ids, Ids::Range { first: 5, len: 5 }));
        assert_eq!(consecutive.get(i64::MIN), None);
        assert_eq!(consecutive.get(10), None);
        assert_eq!(consecutive.get(9).map(|pet| pet.id), Some(9));
    }

    #[test]
    #[should_panic(expected = "ids must ascend")]
    fn ids_must_ascend() {
        let mut catalogue = Catalogue::default();
        catalogue.push(&pet(2, None));
        catalogue.push(&pet(1, None));
    }
}
