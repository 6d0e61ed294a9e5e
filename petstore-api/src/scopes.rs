//! Scopes (since contract 1.4.0): what an API key may do.
//!
//! Each operation is admitted by any one of a few scopes (the contract's
//! `x-petstore-scopes`); [`admitting`] is that table, and the bearer check
//! refuses a key holding none of them with `403 insufficient_scope`. Which
//! scopes a key holds is the implementation's business (its gatekeeper
//! hands them over with the caller). Ownership of orders (`orders:place`
//! sees only its own) is decided by the implementation too, from the same
//! set.

use std::fmt;
use std::str::FromStr;

use enumset::{EnumSet, EnumSetType};

/// One scope. Its bit in a stored [`Scopes`] is its discriminant, which
/// never changes.
#[derive(Debug, Hash, PartialOrd, Ord, EnumSetType)]
#[enumset(repr = "u8")]
#[derive(strum::IntoStaticStr, strum::Display, strum::EnumString)]
#[strum(parse_err_fn = unknown_scope, parse_err_ty = UnknownScope)]
pub enum Scope {
    /// `pets:read`: list and read animals.
    #[strum(serialize = "pets:read")]
    PetsRead = 0,
    /// `pets:write`: add animals.
    #[strum(serialize = "pets:write")]
    PetsWrite = 1,
    /// `orders:place`: place orders, read and cancel one's own (a customer).
    #[strum(serialize = "orders:place")]
    OrdersPlace = 2,
    /// `orders:manage`: read, deliver and cancel every order (staff).
    #[strum(serialize = "orders:manage")]
    OrdersManage = 3,
    /// `inventory:read`: read the inventory.
    #[strum(serialize = "inventory:read")]
    InventoryRead = 4,
    /// `events:read`: read the feed of events (since 1.6.0); which events
    /// follows the key's other scopes.
    #[strum(serialize = "events:read")]
    EventsRead = 5,
    /// `webhooks:manage`: subscribe to events, and manage the key's own
    /// webhook subscriptions (since 1.7.0); which events follows the key's
    /// other scopes, as for `events:read`.
    #[strum(serialize = "webhooks:manage")]
    WebhooksManage = 6,
}

impl Scope {
    /// Every scope, in the contract's order.
    pub const ALL: [Scope; 7] = [
        Scope::PetsRead,
        Scope::PetsWrite,
        Scope::OrdersPlace,
        Scope::OrdersManage,
        Scope::InventoryRead,
        Scope::EventsRead,
        Scope::WebhooksManage,
    ];

    /// The scope's name in the contract.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

fn unknown_scope(name: &str) -> UnknownScope {
    UnknownScope(name.to_owned())
}

/// A name that is no scope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a scope; the scopes are pets:read, pets:write, orders:place, orders:manage, \
     inventory:read, events:read, webhooks:manage (or all)"
)]
pub struct UnknownScope(pub String);

/// A set of scopes.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Scopes(EnumSet<Scope>);

impl Scopes {
    /// Every scope: what keys made before 1.4.0 hold.
    pub const ALL: Scopes = Scopes(EnumSet::all());

    /// No scope.
    pub const NONE: Scopes = Scopes(EnumSet::empty());

    /// Whether `scope` is in the set.
    pub fn contains(self, scope: Scope) -> bool {
        self.0.contains(scope)
    }

    /// The set with `scope` added.
    #[must_use]
    pub fn with(self, scope: Scope) -> Scopes {
        Scopes(self.0 | scope)
    }

    /// The scopes in the set, in the contract's order.
    pub fn iter(self) -> impl Iterator<Item = Scope> {
        self.0.iter()
    }

    /// The set as stored: its bits (stable: a scope's bit never changes).
    pub fn bits(self) -> u8 {
        self.0.as_repr()
    }

    /// The set stored as `bits`; bits of no scope are dropped.
    pub fn from_bits(bits: u8) -> Scopes {
        Scopes(EnumSet::from_repr_truncated(bits))
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(scopes: I) -> Scopes {
        Scopes(scopes.into_iter().collect())
    }
}

/// Comma-separated names, `all` for every scope.
impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Scopes::ALL {
            return f.write_str("all");
        }
        let names: Vec<&str> = self.iter().map(Scope::as_str).collect();
        f.write_str(&names.join(","))
    }
}

/// Comma-separated names (spaces around them allowed), or `all`.
impl FromStr for Scopes {
    type Err = UnknownScope;

    fn from_str(list: &str) -> Result<Scopes, UnknownScope> {
        if list.trim() == "all" {
            return Ok(Scopes::ALL);
        }
        list.split(',').map(|name| name.trim().parse()).collect()
    }
}

impl fmt::Debug for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scopes({self})")
    }
}

/// The scopes any one of which admits the operation `operation_id` (the
/// contract's `x-petstore-scopes`); empty for an operation this table does
/// not know, which no key is then admitted to.
pub fn admitting(operation_id: &str) -> &'static [Scope] {
    match operation_id {
        "listPets" | "getPet" => &[Scope::PetsRead],
        "createPet" => &[Scope::PetsWrite],
        "placeOrder" => &[Scope::OrdersPlace],
        "listOrders" | "getOrder" | "updateOrder" => &[Scope::OrdersPlace, Scope::OrdersManage],
        "getInventory" => &[Scope::InventoryRead],
        "listEvents" => &[Scope::EventsRead],
        "createWebhook"
        | "listWebhooks"
        | "getWebhook"
        | "deleteWebhook"
        | "rotateWebhookSecret"
        | "listWebhookDeliveries"
        | "replayWebhook" => &[Scope::WebhooksManage],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sets_round_trip() {
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse(), Ok(scope));
        }
        let customer: Scopes = "pets:read, orders:place".parse().unwrap();
        assert!(customer.contains(Scope::OrdersPlace) && !customer.contains(Scope::OrdersManage));
        assert_eq!(customer.to_string(), "pets:read,orders:place");
        assert_eq!(customer.to_string().parse(), Ok(customer));
        assert_eq!("all".parse(), Ok(Scopes::ALL));
        assert_eq!(Scopes::ALL.to_string(), "all");
        assert_eq!(Scopes::from_bits(customer.bits()), customer);
        assert_eq!(
            "pets:read,orders:delete".parse::<Scopes>(),
            Err(UnknownScope("orders:delete".into()))
        );
    }

    #[test]
    fn every_scope_has_its_own_stable_bit() {
        // Stored in databases: a scope's bit must never change.
        let bits: Vec<u8> = Scope::ALL
            .iter()
            .map(|&s| Scopes::NONE.with(s).bits())
            .collect();
        assert_eq!(bits, [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(Scope::ALL.into_iter().collect::<Scopes>(), Scopes::ALL);
    }
}
