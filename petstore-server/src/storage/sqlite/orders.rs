//! The SQLite storage's in-memory copy of the committed orders, kept as the
//! catalogue is (see `catalogue.rs`): append-only columns in id order, the
//! status written in place, a bitmap of positions per status, and each
//! animal's orders (an animal has few: one live at most, and the cancelled
//! ones before it), and each owner's orders (a customer's key sees only
//! those).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use roaring::RoaringBitmap;

use super::catalogue::walk;
use super::ids::Ids;
use crate::storage::{OrderPage, OrderQuery, OwnerId, StoredOrder};
use petstore_api::model::{Order, OrderStatus};

/// The committed orders, in id order.
#[derive(Default)]
pub struct OrderBook {
    ids: Ids,
    pet_ids: Vec<i64>,
    statuses: Vec<OrderStatus>,
    placed_at: Vec<DateTime<Utc>>,
    /// The positions of the orders of each status.
    by_status: [RoaringBitmap; 3],
    /// The positions of each animal's orders, ascending.
    by_pet: HashMap<i64, Vec<u32>>,
    /// Each order's owner, as an index into `owners` (`NO_OWNER` for
    /// orders placed before owners were recorded).
    owner_of: Vec<u32>,
    /// The owners: the key's digest and name, and their orders' positions,
    /// ascending.
    owners: Vec<OwnerOrders>,
    owner_index: HashMap<OwnerId, u32>,
}

/// An owner's orders.
struct OwnerOrders {
    id: OwnerId,
    name: Arc<str>,
    positions: Vec<u32>,
}

const NO_OWNER: u32 = u32::MAX;

impl OrderBook {
    /// Appends a newly committed order, placed by `owner` (`None` for an
    /// order placed before owners were recorded); its id is larger than any
    /// before.
    pub fn push(&mut self, order: &Order, owner: Option<&OwnerId>) {
        let position = u32::try_from(self.ids.len()).expect("fewer than 2^32 orders");
        let owner = match (owner, &order.placed_by) {
            (Some(id), Some(name)) => {
                let next = u32::try_from(self.owners.len()).expect("fewer than 2^32 owners");
                let index = *self.owner_index.entry(*id).or_insert(next);
                if index == next {
                    self.owners.push(OwnerOrders {
                        id: *id,
                        name: name.as_str().into(),
                        positions: Vec::new(),
                    });
                }
                self.owners[index as usize].positions.push(position);
                index
            }
            _ => NO_OWNER,
        };
        self.owner_of.push(owner);
        self.ids.push(order.id);
        self.pet_ids.push(order.pet_id);
        self.statuses.push(order.status);
        self.placed_at.push(order.placed_at);
        self.by_status[order.status as usize].insert(position);
        self.by_pet.entry(order.pet_id).or_default().push(position);
    }

    /// Gives the committed order `id` the status `status`.
    pub fn set_status(&mut self, id: i64, status: OrderStatus) {
        let at = self
            .ids
            .position(id)
            .expect("a committed order is in memory");
        self.by_status[self.statuses[at] as usize].remove(at as u32);
        self.by_status[status as usize].insert(at as u32);
        self.statuses[at] = status;
    }

    /// The order with identifier `id`, if it is `owner`'s (when given).
    pub fn get(&self, id: i64, owner: Option<OwnerId>) -> Option<StoredOrder> {
        let at = self.ids.position(id)?;
        let owned = |id| {
            self.owners
                .get(self.owner_of[at] as usize)
                .is_some_and(|owner| owner.id == id)
        };
        owner.is_none_or(owned).then(|| self.order(at))
    }

    /// The animal of the order `id` and its owner (when recorded), if
    /// there is such an order.
    pub fn pet_and_owner(&self, id: i64) -> Option<(i64, Option<OwnerId>)> {
        let at = self.ids.position(id)?;
        let owner = self.owners.get(self.owner_of[at] as usize);
        Some((self.pet_ids[at], owner.map(|owner| owner.id)))
    }

    /// When the order `id` was placed, if there is such an order.
    pub fn placed_at(&self, id: i64) -> Option<DateTime<Utc>> {
        self.ids.position(id).map(|at| self.placed_at[at])
    }

    /// The page `query` asks for, and whether more follow.
    pub fn page(&self, query: OrderQuery) -> OrderPage {
        let start = self.ids.first_after(query.after.unwrap_or(i64::MIN));
        let limit = query.limit as usize;
        let mut orders = Vec::with_capacity(limit);
        let matches = |at: usize| {
            query.status.is_none_or(|s| self.statuses[at] == s)
                && query.pet_id.is_none_or(|p| self.pet_ids[at] == p)
        };
        // A list of positions (an animal's, an owner's), then the filters.
        let mut from_list = |positions: &[u32]| {
            let from = positions.partition_point(|&at| (at as usize) < start);
            let mut matching = positions[from..]
                .iter()
                .map(|&at| at as usize)
                .filter(|&at| matches(at));
            orders.extend(matching.by_ref().take(limit).map(|at| self.order(at)));
            matching.next().is_some()
        };
        let more = match (query.owner, query.pet_id, query.status) {
            (Some(id), _, _) => match self.owner_index.get(&id) {
                Some(&index) => from_list(&self.owners[index as usize].positions),
                None => false,
            },
            // An animal has few orders: its list, then the status filter.
            (None, Some(pet_id), _) => {
                from_list(self.by_pet.get(&pet_id).map_or(&[][..], Vec::as_slice))
            }
            (None, None, Some(status)) => {
                walk(&self.by_status[status as usize], start, limit, |at| {
                    orders.push(self.order(at))
                })
            }
            (None, None, None) => {
                let end = (start + limit).min(self.ids.len());
                orders.extend((start..end).map(|at| self.order(at)));
                end < self.ids.len()
            }
        };
        OrderPage { orders, more }
    }

    fn order(&self, at: usize) -> StoredOrder {
        StoredOrder::new(Order {
            id: self.ids.at(at),
            pet_id: self.pet_ids[at],
            status: self.statuses[at],
            placed_at: self.placed_at[at],
            placed_by: self
                .owners
                .get(self.owner_of[at] as usize)
                .map(|owner| owner.name.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::PlacedBy;

    fn order(id: i64, pet_id: i64, status: OrderStatus) -> Order {
        Order {
            id,
            pet_id,
            status,
            placed_at: DateTime::from_timestamp(1_800_000_000 + id, 0).unwrap(),
            placed_by: None,
        }
    }

    fn query(status: Option<OrderStatus>, pet_id: Option<i64>, after: Option<i64>) -> OrderQuery {
        OrderQuery {
            limit: 3,
            status,
            pet_id,
            after,
            owner: None,
        }
    }

    /// The orders as a key that may see who placed them reads them.
    fn shown(orders: &[StoredOrder]) -> Vec<Order> {
        let shown = |order: &StoredOrder| order.clone().answered(PlacedBy::Shown);
        orders.iter().map(shown).collect()
    }

    fn walk(book: &OrderBook, status: Option<OrderStatus>, pet_id: Option<i64>) -> Vec<Order> {
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let page = book.page(query(status, pet_id, after));
            seen.extend(shown(&page.orders));
            match page.orders.last() {
                Some(last) if page.more => after = Some(last.id),
                _ => return seen,
            }
        }
    }

    #[test]
    fn pages_of_orders_by_status_and_animal_follow_every_change() {
        let mut book = OrderBook::default();
        let mut all = Vec::new();
        for id in 1..=40 {
            let placed = order(id * 2, id % 5, OrderStatus::Placed);
            book.push(&placed, None);
            all.push(placed);
        }
        for changed in all.iter_mut().filter(|o| o.id % 3 == 0) {
            changed.status = OrderStatus::Cancelled;
            book.set_status(changed.id, OrderStatus::Cancelled);
        }
        assert_eq!(walk(&book, None, None), all);
        for status in OrderStatus::ALL {
            for pet_id in [None, Some(0), Some(3), Some(99)] {
                let expected: Vec<Order> = all
                    .iter()
                    .filter(|o| o.status == status && pet_id.is_none_or(|p| o.pet_id == p))
                    .cloned()
                    .collect();
                assert_eq!(
                    walk(&book, Some(status), pet_id),
                    expected,
                    "{status:?} {pet_id:?}"
                );
            }
        }
        assert_eq!(book.get(6, None).unwrap().status, OrderStatus::Cancelled);
        assert_eq!(book.get(7, None), None);
        let last = book.page(query(None, None, Some(78)));
        assert_eq!((last.orders.len(), last.more), (1, false));
    }

    #[test]
    fn an_owner_pages_through_its_own_orders_only() {
        let mut book = OrderBook::default();
        let (alice, bob) = (OwnerId([1; 32]), OwnerId([2; 32]));
        let mut theirs: [Vec<Order>; 2] = Default::default();
        for id in 1..=30 {
            let (owner, name, mine) = match id % 3 {
                0 => (Some(&alice), "alice", Some(0)),
                1 => (Some(&bob), "bob", Some(1)),
                _ => (None, "", None),
            };
            let mut placed = order(id, id % 4, OrderStatus::Placed);
            placed.placed_by = owner.map(|_| name.to_owned());
            book.push(&placed, owner);
            if let Some(mine) = mine {
                theirs[mine].push(placed);
            }
        }
        for (owner, expected) in [(alice, &theirs[0]), (bob, &theirs[1])] {
            let (mut seen, mut after) = (Vec::new(), None);
            loop {
                let page = book.page(OrderQuery {
                    owner: Some(owner),
                    ..query(None, None, after)
                });
                seen.extend(shown(&page.orders));
                match page.orders.last() {
                    Some(last) if page.more => after = Some(last.id),
                    _ => break,
                }
            }
            assert_eq!(&seen, expected);
            let of_pet = book.page(OrderQuery {
                owner: Some(owner),
                limit: 100,
                ..query(None, Some(1), None)
            });
            let expected_of_pet: Vec<Order> =
                expected.iter().filter(|o| o.pet_id == 1).cloned().collect();
            assert_eq!(shown(&of_pet.orders), expected_of_pet);
        }
        assert_eq!(
            book.get(3, Some(alice)).unwrap().placed_by.as_deref(),
            Some("alice")
        );
        assert_eq!(book.get(3, Some(bob)), None);
        assert_eq!(
            book.get(2, Some(alice)),
            None,
            "an order without an owner is no one's"
        );
        assert!(book.get(2, None).unwrap().placed_by.is_none());
        let nobody = book.page(OrderQuery {
            owner: Some(OwnerId([9; 32])),
            ..query(None, None, None)
        });
        assert_eq!((nobody.orders.len(), nobody.more), (0, false));
    }
}
