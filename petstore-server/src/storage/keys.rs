//! Stored API keys: names, digests and their lifecycle.
//!
//! Only a key's SHA-256 digest is stored, never the key. Names are unique
//! for ever (a revoked key keeps its name), so that a name in the access log
//! always means one key.

use petstore_api::scopes::Scopes;

use super::StorageError;
use crate::budget::{KeyLimits, LimitsChange, Per, Rate};
use crate::keys::KeyDigest;

/// A key as stored: everything but the key itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredKey {
    /// The operator's name for it.
    pub name: String,
    /// The key's digest.
    pub digest: KeyDigest,
    /// When it was created (Unix seconds).
    pub created_at: i64,
    /// When it stops being accepted (Unix seconds), if ever.
    pub expires_at: Option<i64>,
    /// What it may do (keys stored before scopes existed: every scope).
    pub scopes: Scopes,
    /// What it sets of its own budget (keys stored before budgets existed:
    /// nothing, the configured defaults).
    pub limits: KeyLimits,
    /// When a server last accepted it (Unix seconds; recorded in batches,
    /// so up to a few seconds late).
    pub last_used_at: Option<i64>,
    /// When it was revoked (Unix seconds), if it was.
    pub revoked_at: Option<i64>,
}

/// A stored digest as the 32 bytes it must be; a row holding anything
/// else is reported with the key's name.
pub(super) fn stored_digest(name: &str, bytes: &[u8]) -> Result<KeyDigest, StorageError> {
    <[u8; 32]>::try_from(bytes)
        .map(KeyDigest)
        .map_err(|_| StorageError::BadKey {
            name: name.to_owned(),
            reason: format!("its digest has {} bytes instead of 32", bytes.len()),
        })
}

/// How a key's scopes are stored: every scope as NULL, so that a key made
/// with every scope also has those added later; any other set as its bits.
pub(super) fn scopes_column(scopes: Scopes) -> Option<i64> {
    (scopes != Scopes::ALL).then(|| i64::from(scopes.bits()))
}

/// A key's stored scopes: NULL (a key made before scopes existed, or with
/// every scope) is every scope.
pub(super) fn stored_scopes(bits: Option<i64>) -> Scopes {
    bits.map_or(Scopes::ALL, |bits| Scopes::from_bits(bits as u8))
}

/// A key's stored budget columns (each NULL: the configured default), as
/// [`KeyLimits`]; a row holding anything else is reported with the key's
/// name. A rate is stored as requests and the seconds they are counted
/// over (1, 60 or 3600).
pub(super) fn stored_limits(
    name: &str,
    rate_requests: Option<i64>,
    rate_seconds: Option<i64>,
    burst: Option<i64>,
    in_flight: Option<i64>,
) -> Result<KeyLimits, StorageError> {
    let bad = |what: &str| StorageError::BadKey {
        name: name.to_owned(),
        reason: format!("its {what} is not a valid setting"),
    };
    let positive = |value: Option<i64>, what: &str| {
        value
            .map(|value| {
                u32::try_from(value)
                    .ok()
                    .and_then(std::num::NonZeroU32::new)
                    .ok_or_else(|| bad(what))
            })
            .transpose()
    };
    let rate = match (positive(rate_requests, "rate")?, rate_seconds) {
        (None, None) => None,
        (Some(requests), Some(seconds)) => Some(Rate {
            requests,
            per: Per::of_seconds(seconds).ok_or_else(|| bad("rate's unit"))?,
        }),
        _ => return Err(bad("rate")),
    };
    Ok(KeyLimits {
        rate,
        burst: positive(burst, "burst")?,
        in_flight: positive(in_flight, "in-flight cap")?,
    })
}

/// [`KeyLimits`] as the four columns [`stored_limits`] reads.
pub(super) fn limits_columns(limits: KeyLimits) -> [Option<i64>; 4] {
    [
        limits.rate.map(|rate| i64::from(rate.requests.get())),
        limits.rate.map(|rate| i64::from(rate.per.seconds())),
        limits.burst.map(|burst| i64::from(burst.get())),
        limits.in_flight.map(|cap| i64::from(cap.get())),
    ]
}

/// Why a key operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// `keys create` with a name already taken.
    #[error(
        "a key named {0:?} already exists (names are never reused, even after a revocation); \
         choose another name"
    )]
    DuplicateName(String),
    /// `keys revoke` with a name no key has.
    #[error("no key is named {0:?}; `keys list` shows the names")]
    UnknownName(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StorageError),
}

/// How a revocation went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoked {
    /// Revoked now.
    Now,
    /// It had already been revoked, at this time (Unix seconds).
    Already(i64),
}

/// Where API keys are stored.
#[async_trait::async_trait]
pub trait KeyStorage: Send + Sync + 'static {
    /// Stores a new key.
    async fn create_key(&self, key: StoredKey) -> Result<(), KeyError>;

    /// Every stored key, revoked ones included, by creation time.
    async fn list_keys(&self) -> Result<Vec<StoredKey>, StorageError>;

    /// Revokes the key named `name` at `at` (Unix seconds).
    async fn revoke_key(&self, name: &str, at: i64) -> Result<Revoked, KeyError>;

    /// Gives the key named `name` the scopes `scopes`; returns those it had.
    async fn set_key_scopes(&self, name: &str, scopes: Scopes) -> Result<Scopes, KeyError>;

    /// Changes what the key named `name` sets of its own budget; returns
    /// what it set before and what it sets now.
    async fn set_key_limits(
        &self,
        name: &str,
        change: LimitsChange,
    ) -> Result<(KeyLimits, KeyLimits), KeyError>;

    /// Says that the serving instance `instance` is alive, and how many
    /// instances are (this one included): each enforces its share of every
    /// budget (`ratelimit/`). One SQLite file has one server: always 1.
    async fn heartbeat(&self, instance: &str) -> Result<u32, StorageError>;

    /// Says that `instance` stopped, so that the others take its share at
    /// once rather than when its heartbeat goes stale.
    async fn forget_instance(&self, instance: &str) -> Result<(), StorageError>;

    /// Records that each named key was used at the time given (Unix
    /// seconds); a time earlier than the one stored is ignored.
    async fn record_key_use(&self, uses: Vec<(String, i64)>) -> Result<(), StorageError>;
}
