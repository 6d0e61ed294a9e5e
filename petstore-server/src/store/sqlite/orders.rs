//! The SQLite store's in-memory copy of the committed orders, kept as the
//! catalogue is (see `catalogue.rs`): append-only columns in id order, the
//! status written in place, a bitmap of positions per status, and each
//! animal's orders (an animal has few: one live at most, and the cancelled
//! ones before it).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use roaring::RoaringBitmap;

use super::catalogue::walk;
use super::ids::Ids;
use crate::store::{OrderPage, OrderQuery};
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
}

impl OrderBook {
    /// Appends a newly committed order; its id is larger than any before.
    pub fn push(&mut self, order: &Order) {
        let position = u32::try_from(self.ids.len()).expect("fewer than 2^32 orders");
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

    /// The order with identifier `id`.
    pub fn get(&self, id: i64) -> Option<Order> {
        self.ids.position(id).map(|at| self.order(at))
    }

    /// The page `query` asks for, and whether more follow.
    pub fn page(&self, query: OrderQuery) -> OrderPage {
        let start = self.ids.first_after(query.after.unwrap_or(i64::MIN));
        let limit = query.limit as usize;
        let mut orders = Vec::with_capacity(limit);
        let more = match (query.pet_id, query.status) {
            // An animal has few orders: its list, then the status filter.
            (Some(pet_id), status) => {
                let of_pet = self.by_pet.get(&pet_id).map_or(&[][..], Vec::as_slice);
                let from = of_pet.partition_point(|&at| (at as usize) < start);
                let mut matching = of_pet[from..]
                    .iter()
                    .map(|&at| at as usize)
                    .filter(|&at| status.is_none_or(|s| self.statuses[at] == s));
                orders.extend(matching.by_ref().take(limit).map(|at| self.order(at)));
                matching.next().is_some()
            }
            (None, Some(status)) => walk(&self.by_status[status as usize], start, limit, |at| {
                orders.push(self.order(at))
            }),
            (None, None) => {
                let end = (start + limit).min(self.ids.len());
                orders.extend((start..end).map(|at| self.order(at)));
                end < self.ids.len()
            }
        };
        OrderPage { orders, more }
    }

    fn order(&self, at: usize) -> Order {
        Order {
            id: self.ids.at(at),
            pet_id: self.pet_ids[at],
            status: self.statuses[at],
            placed_at: self.placed_at[at],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: i64, pet_id: i64, status: OrderStatus) -> Order {
        Order {
            id,
            pet_id,
            status,
            placed_at: DateTime::from_timestamp(1_800_000_000 + id, 0).unwrap(),
        }
    }

    fn query(status: Option<OrderStatus>, pet_id: Option<i64>, after: Option<i64>) -> OrderQuery {
        OrderQuery {
            limit: 3,
            status,
            pet_id,
            after,
        }
    }

    fn walk(book: &OrderBook, status: Option<OrderStatus>, pet_id: Option<i64>) -> Vec<Order> {
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let page = book.page(query(status, pet_id, after));
            seen.extend(page.orders.iter().cloned());
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
            book.push(&placed);
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
        assert_eq!(book.get(6).unwrap().status, OrderStatus::Cancelled);
        assert_eq!(book.get(7), None);
        let last = book.page(query(None, None, Some(78)));
        assert_eq!((last.orders.len(), last.more), (1, false));
    }
}
