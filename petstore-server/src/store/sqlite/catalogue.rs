//! The SQLite store's in-memory copy of the committed catalogue.
//!
//! Pets are only ever appended (the API neither changes nor deletes them),
//! in ascending id order, so the copy is a set of append-only columns — about
//! 21 bytes plus the name per pet, a fraction of what one allocation per pet
//! would take. Per status, the positions of that status's pets are kept in
//! order (4 bytes per pet). Since ids ascend with positions, a page after a
//! cursor is found by binary search — in the ids, or in one status's
//! positions — so a page costs O(log n + limit) at any depth, for any
//! status, however rare.
//!
//! What changing or deleting pets would take: a status change moves a
//! position from one status list to another (an insertion in the middle of
//! a sorted `Vec`: O(n); a B-tree set of positions instead would keep it
//! O(log n)); a deletion needs a tombstone per position (skipped by pages
//! and `get`) and, for the per-status lists, the same removal. Both stay
//! append-only on disk as SQLite rows, and the writer applies them to this
//! copy after the commit, as it appends today.

use crate::store::{ListQuery, Page};
use petstore_api::model::{Pet, PetArrayWriter, PetStatus};

/// The committed pets, in id order.
#[derive(Default)]
pub struct Catalogue {
    ids: Ids,
    category_ids: Vec<i64>,
    statuses: Vec<Option<PetStatus>>,
    /// Where each name ends in `names`.
    name_ends: Vec<usize>,
    names: String,
    /// The positions of the pets of each status, ascending.
    by_status: [Vec<u32>; 3],
}

impl Catalogue {
    /// Appends a newly committed pet; its id is larger than any before.
    pub fn push(&mut self, pet: &Pet) {
        assert!(
            self.ids.last().is_none_or(|last| last < pet.id),
            "ids must ascend"
        );
        if let Some(status) = pet.status {
            // Positions fit in u32 up to four billion pets.
            let position = u32::try_from(self.ids.len()).expect("fewer than 2^32 pets");
            self.by_status[status as usize].push(position);
        }
        self.ids.push(pet.id);
        self.category_ids.push(pet.category_id);
        self.statuses.push(pet.status);
        self.names.push_str(&pet.name);
        self.name_ends.push(self.names.len());
    }

    /// The page `query` asks for: up to `limit` pets after the cursor, of
    /// the status if one is given, encoded straight from the columns, and
    /// whether more follow.
    pub fn page(&self, query: ListQuery) -> Page {
        let limit = query.limit as usize;
        let after = query.after.unwrap_or(i64::MIN);
        let mut pets = PetArrayWriter::with_capacity(limit);
        let more = match query.status {
            None => {
                let start = self.ids.first_after(after);
                let end = (start + limit).min(self.ids.len());
                (start..end).for_each(|at| self.encode(at, &mut pets));
                end < self.ids.len()
            }
            Some(status) => {
                let positions = &self.by_status[status as usize];
                let start = positions.partition_point(|&at| self.ids.at(at as usize) <= after);
                let end = (start + limit).min(positions.len());
                for &at in &positions[start..end] {
                    self.encode(at as usize, &mut pets);
                }
                end < positions.len()
            }
        };
        Page {
            pets: pets.finish(),
            more,
        }
    }

    /// How many pets there are.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The pet with identifier `id`.
    pub fn get(&self, id: i64) -> Option<Pet> {
        self.ids.position(id).map(|at| self.pet(at))
    }

    fn pet(&self, at: usize) -> Pet {
        Pet {
            id: self.ids.at(at),
            name: self.name(at).to_owned(),
            category_id: self.category_ids[at],
            status: self.statuses[at],
        }
    }

    fn encode(&self, at: usize, pets: &mut PetArrayWriter) {
        let (id, category_id) = (self.ids.at(at), self.category_ids[at]);
        pets.push(id, self.name(at), category_id, self.statuses[at]);
    }

    fn name(&self, at: usize) -> &str {
        let start = if at == 0 { 0 } else { self.name_ends[at - 1] };
        &self.names[start..self.name_ends[at]]
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

    /// The position of the first id greater than `after`.
    fn first_after(&self, after: i64) -> usize {
        match self {
            Ids::Range { first, len } => {
                let past = i128::from(after) - i128::from(*first) + 1;
                past.clamp(0, *len as i128) as usize
            }
            Ids::Listed(ids) => ids.partition_point(|&id| id <= after),
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

    fn query(limit: u32, status: Option<PetStatus>, after: Option<i64>) -> ListQuery {
        ListQuery {
            limit,
            status,
            after,
        }
    }

    /// A page as a client reads it.
    struct Decoded {
        pets: Vec<Pet>,
        more: bool,
    }

    fn decoded(catalogue: &Catalogue, query: ListQuery) -> Decoded {
        let page = catalogue.page(query);
        let pets = serde_json::from_slice(&page.pets.into_bytes()).expect("a JSON array of pets");
        Decoded {
            pets,
            more: page.more,
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
        let all = decoded(&catalogue, query(100, None, None));
        assert_eq!((all.pets, all.more), (pets.clone(), false));
        let first = decoded(&catalogue, query(2, None, None));
        assert_eq!((first.pets, first.more), (pets[..2].to_vec(), true));
    }

    /// Walks every page of `status` (or all) with `limit`, from the start.
    fn walk(catalogue: &Catalogue, limit: u32, status: Option<PetStatus>) -> Vec<Pet> {
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = decoded(catalogue, query(limit, status, after));
            assert!(page.pets.len() <= limit as usize);
            seen.extend(page.pets.iter().cloned());
            match page.pets.last() {
                Some(last) if page.more => after = Some(last.id),
                _ => {
                    assert!(!page.more, "more follow an empty page");
                    return seen;
                }
            }
        }
    }

    #[test]
    fn pages_walk_every_pet_of_a_status_once_in_order_at_any_depth() {
        for gapped in [false, true] {
            let mut catalogue = Catalogue::default();
            let mut all = Vec::new();
            for i in 1..=1000 {
                let id = if gapped { i * 3 } else { i };
                // 1 in 100 pending: a rare status.
                let status = match i {
                    _ if i % 100 == 0 => Some(PetStatus::Pending),
                    _ if i % 3 == 0 => Some(PetStatus::Sold),
                    _ if i % 3 == 1 => None,
                    _ => Some(PetStatus::Available),
                };
                let pet = pet(id, status);
                catalogue.push(&pet);
                all.push(pet);
            }
            for limit in [1, 7, 20, 100] {
                assert_eq!(walk(&catalogue, limit, None), all);
                for status in PetStatus::ALL {
                    let expected: Vec<Pet> = all
                        .iter()
                        .filter(|p| p.status == Some(status))
                        .cloned()
                        .collect();
                    assert_eq!(
                        walk(&catalogue, limit, Some(status)),
                        expected,
                        "{status:?}"
                    );
                }
            }
            // A cursor deep in a rare status, before the first, past the last.
            let deep = decoded(
                &catalogue,
                query(3, Some(PetStatus::Pending), Some(all[949].id)),
            );
            assert_eq!(
                deep.pets.iter().map(|p| p.id).collect::<Vec<_>>(),
                [all[999].id],
                "after the 950th pet, only the 1000th is pending"
            );
            assert!(!deep.more);
            assert_eq!(
                decoded(&catalogue, query(1, None, Some(i64::MIN))).pets[0],
                all[0]
            );
            assert_eq!(
                decoded(&catalogue, query(1, None, Some(-5))).pets[0],
                all[0]
            );
            let end = decoded(&catalogue, query(5, None, Some(all[999].id)));
            assert!(end.pets.is_empty() && !end.more);
            let beyond = decoded(&catalogue, query(5, Some(PetStatus::Sold), Some(i64::MAX)));
            assert!(beyond.pets.is_empty() && !beyond.more);
            if gapped {
                let between = decoded(&catalogue, query(1, None, Some(4)));
                assert_eq!(between.pets[0].id, 6);
            }
        }
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
