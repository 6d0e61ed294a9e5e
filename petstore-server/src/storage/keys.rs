//! Stored API keys: names, digests and their lifecycle.
//!
//! Only a key's SHA-256 digest is stored, never the key. Names are unique
//! for ever (a revoked key keeps its name), so that a name in the access log
//! always means one key.

use petstore_api::scopes::Scopes;

use super::StorageError;
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

/// A key's stored scopes: NULL (a key made before scopes existed) is every
/// scope.
pub(super) fn stored_scopes(bits: Option<i64>) -> Scopes {
    bits.map_or(Scopes::ALL, |bits| Scopes::from_bits(bits as u8))
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

    /// Records that each named key was used at the time given (Unix
    /// seconds); a time earlier than the one stored is ignored.
    async fn record_key_use(&self, uses: Vec<(String, i64)>) -> Result<(), StorageError>;
}
