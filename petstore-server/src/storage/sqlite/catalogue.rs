//! The SQLite storage's in-memory copy of the committed catalogue.
//!
//! Pets are only ever appended, in ascending id order, and never deleted, so
//! the copy is a set of append-only columns — about 21 bytes plus the name
//! per pet, a fraction of what one allocation per pet would take. Only a
//! status changes (when the animal is ordered, delivered or its order
//! cancelled): the status column is written in place, and the pet's position
//! moves from one status's set to another's. The sets are compressed bitmaps
//! of positions (`roaring`: about a bit per pet, where sorted position lists
//! took 4 bytes and an O(n) insertion for each change). Since ids ascend
//! with positions, a page after a cursor starts at the cursor's position —
//! found by binary search in the ids — and walks the status's bitmap from
//! there: O(log n + limit) at any depth, for any status, however rare.
//! Counting a status's pets is counting its bitmap: a sum over its
//! containers (one per 65,536 positions), exact and cheap at any size.
//!
//! No operation deletes a pet. Should one ever, the columns could stay
//! append-only: the deleted positions would leave every status's bitmap
//! (so pages, counts and the inventory skip them) and go into a bitmap of
//! their own that `get` checks; the ids stay sorted, so a cursor is still
//! found by binary search.

use roaring::RoaringBitmap;

use super::ids::Ids;
use crate::storage::{ListQuery, Page};
use petstore_api::model::{Inventory, Pet, PetArrayWriter, PetStatus};

/// The committed pets, in id order.
#[derive(Default)]
pub struct Catalogue {
    ids: Ids,
    category_ids: Vec<i64>,
    statuses: Vec<Option<PetStatus>>,
    /// Where each name ends in `names`.
    name_ends: Vec<usize>,
    names: String,
    /// The positions of the pets of each status.
    by_status: [RoaringBitmap; 3],
}

impl Catalogue {
    /// Appends a newly committed pet; its id is larger than any before.
    pub fn push(&mut self, pet: &Pet) {
        // Positions fit in u32 up to four billion pets.
        let position = u32::try_from(self.ids.len()).expect("fewer than 2^32 pets");
        self.ids.push(pet.id);
        if let Some(status) = pet.status {
            self.by_status[status as usize].insert(position);
        }
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
                let start = self.ids.first_after(after);
                let positions = &self.by_status[status as usize];
                walk(positions, start, limit, |at| self.encode(at, &mut pets))
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

    /// How many pets have each status.
    pub fn inventory(&self) -> Inventory {
        let count = |status: PetStatus| self.by_status[status as usize].len() as i64;
        Inventory {
            available: count(PetStatus::Available),
            pending: count(PetStatus::Pending),
            sold: count(PetStatus::Sold),
        }
    }

    /// The status of the pet `id`: `None` when there is no such pet,
    /// `Some(None)` when it has no status.
    pub fn status(&self, id: i64) -> Option<Option<PetStatus>> {
        self.ids.position(id).map(|at| self.statuses[at])
    }

    /// Gives the committed pet `id` the status `status`.
    pub fn set_status(&mut self, id: i64, status: PetStatus) {
        let at = self.ids.position(id).expect("a committed pet is in memory");
        if let Some(old) = self.statuses[at] {
            self.by_status[old as usize].remove(at as u32);
        }
        self.by_status[status as usize].insert(at as u32);
        self.statuses[at] = Some(status);
    }

    /// The pet with identifier `id`.
    pub fn get(&self, id: i64) -> Option<Pet> {
        self.ids.position(id).map(|at| self.pet(at))
    }

    /// The name and category of the pet `id`.
    pub fn name_and_category(&self, id: i64) -> Option<(&str, i64)> {
        self.ids
            .position(id)
            .map(|at| (self.name(at), self.category_ids[at]))
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

/// Calls `each` with the first `limit` positions of `positions` from
/// `start` on, in order; says whether more follow. Run by run: positions of
/// one status often come in runs, and a run costs the bitmap's iterator one
/// step, not one per position.
pub(super) fn walk(
    positions: &RoaringBitmap,
    start: usize,
    limit: usize,
    mut each: impl FnMut(usize),
) -> bool {
    let Ok(start) = u32::try_from(start) else {
        return false;
    };
    let mut runs = positions.range(start..);
    let mut left = limit;
    while left > 0 {
        let Some(run) = runs.next_range() else {
            return false;
        };
        let (first, last) = (*run.start() as usize, *run.end() as usize);
        let end = last.min(first + left - 1);
        (first..=end).for_each(&mut each);
        left -= end + 1 - first;
        if left == 0 {
            return end < last || runs.next().is_some();
        }
    }
    runs.next().is_some()
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
    fn a_status_change_moves_the_pet_between_pages_and_counts() {
        let mut catalogue = Catalogue::default();
        for id in 1..=300 {
            catalogue.push(&pet(id, Some(PetStatus::Available)));
        }
        catalogue.push(&pet(301, None));
        // 100 pending: 2, 5, 8, …, 299.
        for id in (2..=300).step_by(3) {
            catalogue.set_status(id, PetStatus::Pending);
        }
        catalogue.set_status(5, PetStatus::Sold);
        catalogue.set_status(5, PetStatus::Available);
        catalogue.set_status(8, PetStatus::Sold);
        assert_eq!(
            catalogue.inventory(),
            Inventory {
                available: 201,
                pending: 98,
                sold: 1
            }
        );
        let pending = walk(&catalogue, 7, Some(PetStatus::Pending));
        assert_eq!(pending.len(), 98);
        assert!(pending.iter().all(|p| p.status == Some(PetStatus::Pending)));
        assert!(!pending.iter().any(|p| p.id == 5 || p.id == 8));
        let available = walk(&catalogue, 100, Some(PetStatus::Available));
        assert_eq!(available.len(), 201);
        assert!(available.iter().any(|p| p.id == 5));
        assert_eq!(catalogue.get(8).unwrap().status, Some(PetStatus::Sold));
        assert_eq!(catalogue.status(301), Some(None));
        assert_eq!(catalogue.status(302), None);
    }

    #[test]
    #[should_panic(expected = "ids must ascend")]
    fn ids_must_ascend() {
        let mut catalogue = Catalogue::default();
        catalogue.push(&pet(2, None));
        catalogue.push(&pet(1, None));
    }
}
