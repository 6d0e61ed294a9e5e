//! The Store's half of the storage interface: what placing and updating an
//! order can come to, and which page of orders to list.

use petstore_api::auth::Identity;
use petstore_api::model::{Order, OrderStatus, PetStatus};

/// Which page of orders to list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderQuery {
    /// At most this many orders (at most [`super::LIST_MAX`]).
    pub limit: u32,
    /// Only orders with this status, when given.
    pub status: Option<OrderStatus>,
    /// Only orders for this animal, when given.
    pub pet_id: Option<i64>,
    /// Only orders whose id is greater than this, when given.
    pub after: Option<i64>,
    /// Only the orders of this owner, when given.
    pub owner: Option<OwnerId>,
}

/// Whose an order is (since contract 1.4.0): the identity of the key that
/// placed it, which is what "one's own orders" means. Stored with the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerId(pub [u8; 32]);

impl OwnerId {
    /// The owner of the orders a key with `identity` places.
    pub fn of(identity: Identity) -> OwnerId {
        OwnerId(identity.0)
    }
}

/// Who places an order: the key's owner id and its name (what a key with
/// `orders:manage` reads as `placedBy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Whose the order is.
    pub id: OwnerId,
    /// The key's name.
    pub name: String,
}

/// An order as stored. It knows who placed it, which only some callers may
/// read, so it is not the contract's [`Order`]: [`StoredOrder::answered`]
/// is the one way from the one to the other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredOrder(Order);

/// Whether an answer shows who placed an order (`placedBy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacedBy {
    /// Shown: asked for, by a key that may see it.
    Shown,
    /// Left out, as for every client before 1.4.0.
    Hidden,
}

impl StoredOrder {
    /// The stored order `order`, `placed_by` included when it is known.
    pub fn new(order: Order) -> StoredOrder {
        StoredOrder(order)
    }

    /// The order as answered: who placed it only when `placed_by` says so.
    pub fn answered(self, placed_by: PlacedBy) -> Order {
        let mut order = self.0;
        if placed_by == PlacedBy::Hidden {
            order.placed_by = None;
        }
        order
    }
}

/// Its fields can be read (the storage's and the handlers' own decisions
/// need them); an [`Order`] to answer comes only from
/// [`StoredOrder::answered`].
impl std::ops::Deref for StoredOrder {
    type Target = Order;

    fn deref(&self) -> &Order {
        &self.0
    }
}

/// A page of orders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderPage {
    /// The orders, in ascending id order.
    pub orders: Vec<StoredOrder>,
    /// Whether more orders (matching the query) follow the last one.
    pub more: bool,
}

/// What placing an order came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaceOutcome {
    /// The order was placed and its animal made `pending`, in one
    /// transaction (with the idempotency key's record, if it had one).
    Placed(StoredOrder),
    /// The key already had a record for the same animal: nothing was
    /// ordered; this is the order the first request was answered with.
    Replayed(StoredOrder),
    /// The animal is not `available` (its status, if it has one): nothing
    /// was ordered.
    NotAvailable(Option<PetStatus>),
    /// No animal has the id: nothing was ordered.
    NoSuchPet,
    /// The key already had a record for another animal.
    KeyReused,
    /// Another request with the key is still being processed.
    KeyInUse,
}

/// What asking an order to have a status came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// The order has the status asked for: changed now (and its animal
    /// with it, in one transaction), or it had it already.
    Done(StoredOrder),
    /// No order has the id.
    NoSuchOrder,
    /// The order has a status it cannot leave for the one asked for.
    Invalid(OrderStatus),
}

/// The change `to` makes to an order whose status is `from`: `None` when
/// there is nothing to change, or the error when the change is not allowed.
pub fn transition(from: OrderStatus, to: OrderStatus) -> Result<Option<OrderStatus>, OrderStatus> {
    match (from, to) {
        _ if from == to => Ok(None),
        (OrderStatus::Placed, OrderStatus::Delivered | OrderStatus::Cancelled) => Ok(Some(to)),
        _ => Err(from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OrderStatus::{Cancelled, Delivered, Placed};

    #[test]
    fn only_a_placed_order_changes_and_asking_for_its_status_is_no_change() {
        assert_eq!(transition(Placed, Delivered), Ok(Some(Delivered)));
        assert_eq!(transition(Placed, Cancelled), Ok(Some(Cancelled)));
        for status in OrderStatus::ALL {
            assert_eq!(transition(status, status), Ok(None));
        }
        assert_eq!(transition(Delivered, Cancelled), Err(Delivered));
        assert_eq!(transition(Cancelled, Delivered), Err(Cancelled));
        assert_eq!(transition(Delivered, Placed), Err(Delivered));
    }
}
