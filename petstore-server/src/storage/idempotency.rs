//! Creates a client can retry safely: what the backends need to know of an
//! idempotency key, and what a create with one can come to.
//!
//! A record of the first `201` for a key is committed in the same
//! transaction as the pet, so no crash can leave one without the other. The
//! record keeps a copy of the response (the pet as it was created), so that
//! a replay answers exactly what the first request was answered.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use petstore_api::auth::Identity;
use petstore_api::model::{NewPet, Pet};

/// How many expired records one purge call deletes at most: small enough
/// that a purge never holds the database for long.
pub const PURGE_BATCH: usize = 1000;

/// A create made with an idempotency key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idempotency {
    /// Whose idempotency key it is: the identity of the API key that sent
    /// it, so that one client can neither replay nor block another's. (The
    /// databases' column for it is named `scope`, from before scopes meant
    /// permissions: renaming it would break older instances still running
    /// during a rolling upgrade.)
    pub caller: Identity,
    /// The client's idempotency key, as sent.
    pub key: String,
    /// The request body's fingerprint, to tell a retry (the same body)
    /// from a reuse of the key (another body).
    pub fingerprint: Fingerprint,
    /// When the request came (Unix seconds): the time its record is made.
    pub now: i64,
    /// Records made at or before this time (Unix seconds) have expired:
    /// their key is free again.
    pub expired_at_or_before: i64,
}

impl Idempotency {
    /// The idempotency of a request whose body has `fingerprint` (see
    /// [`fingerprint`], [`order_fingerprint`]), made with `key`, sent by
    /// `caller`, at `now`, records being kept as `retention` says.
    pub fn new(
        caller: Identity,
        key: String,
        fingerprint: Fingerprint,
        now: i64,
        retention: Retention,
    ) -> Idempotency {
        Idempotency {
            caller,
            key,
            fingerprint,
            now,
            expired_at_or_before: retention.expired_at_or_before(now),
        }
    }

    /// Whether a record made at `created_at` still holds the key.
    pub fn is_live(&self, created_at: i64) -> bool {
        created_at > self.expired_at_or_before
    }

    /// A 64-bit name for the caller's key (PostgreSQL's advisory locks
    /// take one): the first 8 bytes of a SHA-256 of both. Two keys sharing
    /// it only make each other wait (409), never share a record.
    pub fn lock_id(&self) -> i64 {
        lock_id(&[&self.caller.0, self.key.as_bytes()])
    }

    /// [`Idempotency::lock_id`] for `placeOrder`, whose keys are apart from
    /// `createPet`'s: the same key may be in use for both at once.
    pub fn order_lock_id(&self) -> i64 {
        lock_id(&[b"placeOrder ", &self.caller.0, self.key.as_bytes()])
    }
}

/// The first 8 bytes of the SHA-256 of `parts`.
fn lock_id(parts: &[&[u8]]) -> i64 {
    let digest = sha256(parts);
    i64::from_be_bytes(digest[..8].try_into().expect("a SHA-256 has 32 bytes"))
}

/// The SHA-256 of `parts`, one after the other.
fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut hash = Sha256::new();
    parts.iter().for_each(|part| hash.update(part));
    hash.finalize().into()
}

/// How long idempotency records hold their keys, and what follows from it:
/// when a record has expired, when it may be deleted, how often to look.
///
/// A record holds its key for the retention and a grace more — a minute,
/// or the retention itself when that is shorter (tests of expiry) — since
/// its time is its request's arrival in whole seconds and its `201` may
/// leave a little later, yet the key must hold for the whole retention
/// after it. It is deleted only past twice the grace, since a request that
/// arrived a little before the purge's clock may still count it as live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    secs: i64,
}

impl Retention {
    /// Records kept for `retention`.
    pub fn new(retention: Duration) -> Retention {
        Retention {
            secs: i64::try_from(retention.as_secs()).unwrap_or(i64::MAX),
        }
    }

    fn grace(self) -> i64 {
        self.secs.clamp(1, 60)
    }

    /// Records made at or before this time (Unix seconds) have expired at
    /// `now`.
    pub fn expired_at_or_before(self, now: i64) -> i64 {
        now.saturating_sub(self.secs).saturating_sub(self.grace())
    }

    /// Records made before this time (Unix seconds) may be deleted at `now`.
    pub fn purge_before(self, now: i64) -> i64 {
        now.saturating_sub(self.secs)
            .saturating_sub(2 * self.grace())
    }

    /// How often to look for records to delete: as often as they can
    /// expire, at most once a minute.
    pub fn purge_interval(self) -> Duration {
        Duration::from_secs(self.grace().unsigned_abs())
    }
}

/// A request body's SHA-256, in a fixed encoding of what it asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The 32 bytes, as stored.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The fingerprint of a new pet's fields in a fixed encoding: the same pet
/// gives the same fingerprint however its JSON was formatted or ordered.
pub fn fingerprint(pet: &NewPet) -> Fingerprint {
    let encoded = serde_json::to_vec(pet).expect("a NewPet always serialises");
    Fingerprint(sha256(&[&encoded]))
}

/// The fingerprint of an order's body (its animal's id), to tell a retry
/// from a reuse of the key.
pub fn order_fingerprint(pet_id: i64) -> Fingerprint {
    Fingerprint(sha256(&[b"placeOrder ", &pet_id.to_be_bytes()]))
}

/// What a create with an idempotency key came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The pet was created, and the key's record with it.
    Created(Pet),
    /// The key already had a record for the same pet: nothing was created;
    /// this is the pet the first request was answered with.
    Replayed(Pet),
    /// The key already had a record for another pet: nothing was created.
    KeyReused,
    /// Another request with the key is still being processed: nothing was
    /// created.
    KeyInUse,
}

/// The keys whose requests a backend is processing now, for a backend that is
/// the only writer of its database (SQLite): the second request with a key
/// in flight is told so (409) instead of waiting.
#[derive(Default)]
pub struct Claims(Mutex<HashSet<(Identity, String)>>);

impl Claims {
    /// Claims the key of `idempotency` until the returned claim is dropped;
    /// `None` when a request holds it already.
    pub fn claim(self: &Arc<Claims>, idempotency: &Idempotency) -> Option<Claim> {
        let entry = (idempotency.caller, idempotency.key.clone());
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !held.insert(entry.clone()) {
            return None;
        }
        Some(Claim {
            claims: Arc::clone(self),
            entry,
        })
    }
}

/// A key claimed by one request; released when dropped.
pub struct Claim {
    claims: Arc<Claims>,
    entry: (Identity, String),
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut held = self.claims.0.lock().unwrap_or_else(|e| e.into_inner());
        held.remove(&self.entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use petstore_api::model::PetStatus;

    fn pet(name: &str) -> NewPet {
        NewPet {
            name: name.into(),
            category_id: 1,
            status: Some(PetStatus::Sold),
        }
    }

    #[test]
    fn the_same_pet_has_the_same_fingerprint_however_it_was_written() {
        let a: NewPet =
            serde_json::from_str(r#"{"name":"Rex","categoryId":1,"status":"sold"}"#).unwrap();
        let b: NewPet =
            serde_json::from_str(r#"{ "status": "sold", "categoryId": 1, "name": "Rex" }"#)
                .unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&pet("Rexx")));
        let no_status = NewPet {
            status: None,
            ..pet("Rex")
        };
        assert_ne!(fingerprint(&a), fingerprint(&no_status));
    }

    #[test]
    fn records_live_for_the_retention_and_no_longer() {
        let retention = Retention::new(Duration::from_secs(100));
        let once = Idempotency::new(
            Identity([0; 32]),
            "k".into(),
            fingerprint(&pet("Rex")),
            1_000,
            retention,
        );
        // 100 s of retention and 60 s of grace; deleted past twice that.
        assert!(once.is_live(1_000));
        assert!(once.is_live(841));
        assert!(!once.is_live(840));
        assert_eq!(retention.purge_before(1_000), 780);
        assert_eq!(retention.purge_interval(), Duration::from_secs(60));
        let short = Retention::new(Duration::from_secs(1));
        assert_eq!(short.expired_at_or_before(1_000), 998);
        assert_eq!(short.purge_interval(), Duration::from_secs(1));
    }

    /// A create of Rex with `key` by the caller whose identity is `caller`.
    fn once(caller: u8, key: &str) -> Idempotency {
        let retention = Retention::new(Duration::ZERO);
        let caller = Identity([caller; 32]);
        Idempotency::new(caller, key.into(), fingerprint(&pet("Rex")), 0, retention)
    }

    #[test]
    fn lock_ids_differ_by_caller_and_key() {
        assert_eq!(once(1, "a").lock_id(), once(1, "a").lock_id());
        assert_ne!(once(1, "a").lock_id(), once(2, "a").lock_id());
        assert_ne!(once(1, "a").lock_id(), once(1, "b").lock_id());
    }

    #[test]
    fn a_claimed_key_is_refused_until_released() {
        let claims = Arc::new(Claims::default());
        let first = claims.claim(&once(1, "a")).expect("free");
        assert!(claims.claim(&once(1, "a")).is_none());
        let other_caller = claims.claim(&once(2, "a")).expect("another client's");
        drop(first);
        assert!(claims.claim(&once(1, "a")).is_some());
        drop(other_caller);
    }
}
