//! API keys: their format, their digests, and the set a server accepts.
//!
//! - **Format.** A key made by `petstore-server keys create` is
//!   `pst_` + 30 random base62 characters (178 bits) + a 6-character base62
//!   CRC-32 of them, in the manner of GitHub's tokens: secret scanners can
//!   recognise a leaked key by its prefix, and a mistyped key is refused by
//!   its checksum before it is looked up. Keys from `PETSTORE_API_KEYS` may
//!   be any bearer token (for development and bootstrapping).
//! - **Digests only.** Keys are held, stored and compared only as SHA-256
//!   digests. A plain fast hash is enough here: the keys are random and
//!   long, so there is nothing to guess that a slow hash would protect.
//! - **Found by digest.** A presented key is hashed once and its digest
//!   looked up in a hash table of the accepted digests: the same work
//!   whatever the number of keys. How long the lookup takes may say
//!   something about the stored digests near the presented one, but a
//!   digest is no use to an attacker, who would need a key that hashes to
//!   it (a SHA-256 preimage); a presented key itself is only ever hashed.

use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use http::HeaderMap;
use http::header::AUTHORIZATION;
use petstore_api::auth::Identity;
use petstore_api::scopes::Scopes;
use sha2::{Digest, Sha256};

use crate::budget::KeyLimits;

/// The prefix of every key `keys create` makes.
pub const KEY_PREFIX: &str = "pst_";
const RANDOM_CHARS: usize = 30;
const CHECKSUM_CHARS: usize = 6;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The SHA-256 digest of a key: all that is ever kept of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyDigest(pub [u8; 32]);

/// A digest is already uniformly spread, so its first eight bytes are its
/// hash: hashing it again (SipHash, the default) was a measurable part of
/// each request's key check. Which bucket a presented key falls in cannot
/// slow a lookup down beyond the stored keys' own collisions, and those are
/// the operator's, not a client's.
impl std::hash::Hash for KeyDigest {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (head, _) = self.0.split_first_chunk::<8>().expect("32 bytes");
        state.write_u64(u64::from_le_bytes(*head));
    }
}

impl nohash_hasher::IsEnabled for KeyDigest {}

impl KeyDigest {
    /// The digest of `key`.
    ///
    /// A request's key is digested twice, by the rate limiter and by the
    /// gatekeeper, on the same thread in the same poll, and a client sends
    /// the same key request after request; so the last digest of each
    /// thread is kept, found again by a keyed 64-bit hash of the key (the
    /// key itself is not kept). A wrong key matching it would need that
    /// hash, under a key random to this thread, to equal the last key's: a
    /// chance of 2^-64 a try, far below guessing a key. SHA-256 of a key is
    /// most of what authenticating costs (BENCHMARKS.md, issue 26).
    pub fn of(key: &str) -> KeyDigest {
        thread_local! {
            static LAST: RefCell<(RandomState, Option<(u64, KeyDigest)>)> =
                RefCell::new((RandomState::new(), None));
        }
        LAST.with_borrow_mut(|(hasher, last)| {
            let hash = hasher.hash_one(key);
            match last {
                Some((seen, digest)) if *seen == hash => *digest,
                _ => {
                    let digest = KeyDigest(Sha256::digest(key.as_bytes()).into());
                    *last = Some((hash, digest));
                    digest
                }
            }
        })
    }

    /// The key's identity: its digest, which never reveals the key.
    pub fn identity(self) -> Identity {
        Identity(self.0)
    }
}

impl std::fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyDigest(…)")
    }
}

/// A new random key in the `pst_` format.
pub fn generate() -> Result<String, getrandom::Error> {
    let mut random = String::with_capacity(RANDOM_CHARS);
    let mut bytes = [0u8; 64];
    while random.len() < RANDOM_CHARS {
        getrandom::fill(&mut bytes)?;
        // 248 = 4 × 62: rejecting bytes above it keeps every character
        // equally likely.
        random.extend(
            bytes
                .iter()
                .filter(|&&b| b < 248)
                .map(|&b| BASE62[usize::from(b % 62)] as char)
                .take(RANDOM_CHARS - random.len()),
        );
    }
    Ok(format!("{KEY_PREFIX}{random}{}", checksum(&random)))
}

/// The base62 CRC-32 of a key's random part, 6 characters.
fn checksum(random: &str) -> String {
    let mut value = crc32fast::hash(random.as_bytes());
    let mut digits = [b'0'; CHECKSUM_CHARS];
    for digit in digits.iter_mut().rev() {
        *digit = BASE62[(value % 62) as usize];
        value /= 62;
    }
    String::from_utf8_lossy(&digits).into_owned()
}

/// Whether a `pst_` key is well formed and its checksum matches. Other
/// tokens are not `pst_` keys and are not judged here.
fn pst_key_is_intact(key: &str) -> bool {
    let Some(rest) = key.strip_prefix(KEY_PREFIX) else {
        return true;
    };
    rest.len() == RANDOM_CHARS + CHECKSUM_CHARS
        && rest.bytes().all(|b| b.is_ascii_alphanumeric())
        && checksum(&rest[..RANDOM_CHARS]) == rest[RANDOM_CHARS..]
}

/// Why a request was refused. The message is the 401's, and names nothing
/// of any key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization` header, or no key in it.
    Missing,
    /// The header names another scheme than `Bearer` (`Basic`, say): no
    /// bearer key was sent.
    OtherScheme,
    /// The header is not `Bearer <token>`.
    Malformed(&'static str),
    /// A `pst_` key whose checksum does not match: a typo or a truncation.
    Checksum,
    /// No accepted key has this digest.
    Unknown,
    /// The key was accepted until its expiry, which has passed.
    Expired,
}

impl AuthFailure {
    /// Whether a bearer credential was sent (then it was wrong, expired or
    /// revoked: RFC 6750's `invalid_token`). A request that sent none, or
    /// used another scheme, gets no error code (RFC 6750 §3.1).
    pub fn credential_sent(self) -> bool {
        !matches!(self, AuthFailure::Missing | AuthFailure::OtherScheme)
    }

    /// The message the client gets.
    pub fn message(self) -> &'static str {
        match self {
            AuthFailure::Missing => MISSING,
            AuthFailure::OtherScheme => "the Authorization scheme must be Bearer",
            AuthFailure::Malformed(reason) => reason,
            AuthFailure::Checksum => {
                "invalid API key: its checksum does not match (mistyped or truncated?)"
            }
            AuthFailure::Unknown => "invalid API key",
            AuthFailure::Expired => "the API key has expired",
        }
    }

    /// Why, in short: for the log and the metrics.
    pub fn reason(self) -> AuthReason {
        match self {
            AuthFailure::Missing => AuthReason::Missing,
            AuthFailure::OtherScheme | AuthFailure::Malformed(_) => AuthReason::Malformed,
            AuthFailure::Checksum => AuthReason::Checksum,
            AuthFailure::Unknown => AuthReason::Unknown,
            AuthFailure::Expired => AuthReason::Expired,
        }
    }
}

/// An [`AuthFailure`]'s kind, without its details: a metric's label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
#[allow(missing_docs)]
pub enum AuthReason {
    Missing,
    Malformed,
    Checksum,
    Unknown,
    Expired,
}

/// One key a server accepts.
#[derive(Debug)]
pub struct AcceptedKey {
    /// The key's name, as the access log shows it.
    pub name: Arc<str>,
    /// Its digest.
    pub digest: KeyDigest,
    /// When it stops being accepted (Unix seconds), if ever.
    pub expires_at: Option<i64>,
    /// What it may do.
    pub scopes: Scopes,
    /// What it sets of its own budget (the rest is the configured default).
    pub limits: KeyLimits,
    /// When it was last accepted (Unix seconds; 0 for never), shared across
    /// reloads of the key set and flushed to the database in batches.
    pub last_used: Arc<AtomicI64>,
}

/// The keys a server accepts at one moment. Replaced as a whole when the
/// stored keys change; never changed in place.
#[derive(Debug, Default)]
pub struct KeySet {
    keys: Vec<AcceptedKey>,
    /// Where each digest's key is in `keys` (the last, should two keys be
    /// the same).
    by_digest: nohash_hasher::IntMap<KeyDigest, usize>,
    /// How many stored keys were left out as revoked (for monitoring).
    revoked: usize,
}

impl KeySet {
    /// A set of exactly these keys, `revoked` more having been left out.
    pub fn new(keys: Vec<AcceptedKey>, revoked: usize) -> KeySet {
        let by_digest = keys
            .iter()
            .enumerate()
            .map(|(index, key)| (key.digest, index))
            .collect();
        KeySet {
            keys,
            by_digest,
            revoked,
        }
    }

    /// How many stored keys were left out as revoked.
    pub fn revoked(&self) -> usize {
        self.revoked
    }

    /// The keys.
    pub fn keys(&self) -> &[AcceptedKey] {
        &self.keys
    }

    /// The key with digest `digest`, if it is accepted at `now`; else why
    /// not (unknown, which a revoked key is, or expired).
    pub fn accepted(&self, digest: KeyDigest, now: i64) -> Result<&AcceptedKey, AuthFailure> {
        let key = self
            .by_digest
            .get(&digest)
            .map(|index| &self.keys[*index])
            .ok_or(AuthFailure::Unknown)?;
        match key.expires_at.is_none_or(|at| at > now) {
            true => Ok(key),
            false => Err(AuthFailure::Expired),
        }
    }

    /// How many keys are accepted at `now` (not expired).
    pub fn usable_at(&self, now: i64) -> usize {
        self.keys
            .iter()
            .filter(|key| key.expires_at.is_none_or(|at| at > now))
            .count()
    }

    /// Checks a request's `Authorization` header at time `now` (Unix
    /// seconds) and says which key it carries: one digest and one lookup,
    /// however many keys there are. Records the use.
    pub fn authenticate(&self, headers: &HeaderMap, now: i64) -> Result<&AcceptedKey, AuthFailure> {
        let token = bearer_token(headers)?;
        if !pst_key_is_intact(token) {
            return Err(AuthFailure::Checksum);
        }
        let index = self.by_digest.get(&KeyDigest::of(token));
        let key = index
            .map(|&index| &self.keys[index])
            .ok_or(AuthFailure::Unknown)?;
        if key.expires_at.is_some_and(|at| at <= now) {
            return Err(AuthFailure::Expired);
        }
        // Written once a second at most: most requests only read it.
        if key.last_used.load(Ordering::Relaxed) < now {
            key.last_used.fetch_max(now, Ordering::Relaxed);
        }
        Ok(key)
    }
}

/// The keys given in `PETSTORE_API_KEYS`, as digests, named
/// `PETSTORE_API_KEYS[1]`, `PETSTORE_API_KEYS[2]`, … in the access log.
#[derive(Clone, Default)]
pub struct ApiKeys {
    digests: Vec<KeyDigest>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.digests.len())
    }
}

/// Why a configured key list is unusable.
#[derive(Debug, thiserror::Error)]
pub enum KeyConfigError {
    /// A key that no client could send in a bearer header.
    #[error(
        "API key number {position} in PETSTORE_API_KEYS is not a valid bearer token \
         (allowed: letters, digits and - . _ ~ + /, optionally followed by =)"
    )]
    InvalidKey {
        /// 1-based position in the list; the key itself is never echoed.
        position: usize,
    },
    /// A `pst_` key whose checksum does not match: it would never be accepted.
    #[error(
        "API key number {position} in PETSTORE_API_KEYS starts with pst_ but its checksum \
         does not match; was it copied whole?"
    )]
    Checksum {
        /// 1-based position in the list.
        position: usize,
    },
}

impl ApiKeys {
    /// Parses a comma-separated key list, as in `PETSTORE_API_KEYS`.
    /// Surrounding whitespace and empty entries are ignored; the list may be
    /// empty (keys may all be stored in the database).
    pub fn parse(list: &str) -> Result<ApiKeys, KeyConfigError> {
        let mut digests = Vec::new();
        for (index, key) in list.split(',').map(str::trim).enumerate() {
            if key.is_empty() {
                continue;
            }
            let position = index + 1;
            if !is_token68(key) {
                return Err(KeyConfigError::InvalidKey { position });
            }
            if !pst_key_is_intact(key) {
                return Err(KeyConfigError::Checksum { position });
            }
            digests.push(KeyDigest::of(key));
        }
        Ok(ApiKeys { digests })
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// How many keys the list holds.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// The keys as accepted keys that never expire.
    pub fn accepted(&self) -> impl Iterator<Item = AcceptedKey> + '_ {
        self.digests
            .iter()
            .enumerate()
            .map(|(index, digest)| AcceptedKey {
                name: format!("PETSTORE_API_KEYS[{}]", index + 1).into(),
                digest: *digest,
                expires_at: None,
                scopes: Scopes::ALL,
                limits: KeyLimits::default(),
                last_used: Arc::default(),
            })
    }
}

/// RFC 6750 `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
fn is_token68(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

const MISSING: &str = "missing API key: send the header `Authorization: Bearer <API_KEY>`";

/// The key of an `Authorization: Bearer <key>` header. The scheme word is
/// case-insensitive (RFC 6750 §2.1 via RFC 7235).
fn bearer_token(headers: &HeaderMap) -> Result<&str, AuthFailure> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(AuthFailure::Missing)?;
    if values.next().is_some() {
        return Err(AuthFailure::Malformed("more than one Authorization header"));
    }
    let value = value
        .to_str()
        .map_err(|_| AuthFailure::Malformed("the Authorization header is not ASCII"))?;
    let (scheme, key) = value.trim().split_once(' ').ok_or(AuthFailure::Missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthFailure::OtherScheme);
    }
    let key = key.trim_start_matches(' ');
    if is_token68(key) {
        Ok(key)
    } else {
        Err(AuthFailure::Unknown)
    }
}

/// How many keys of each state the server holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyCounts {
    /// Accepted now.
    pub usable: usize,
    /// Stored, not revoked, past their expiry.
    pub expired: usize,
    /// Stored and revoked.
    pub revoked: usize,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_digest_is_the_keys_sha256_whatever_came_before_it_on_the_thread() {
        let sha = |key: &str| KeyDigest(Sha256::digest(key.as_bytes()).into());
        for key in ["pst_a", "pst_a", "pst_b", "pst_a", "", "pst_b", "pst_b"] {
            assert_eq!(KeyDigest::of(key), sha(key), "{key:?}");
        }
    }

    use super::*;
    use http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn set(list: &str) -> KeySet {
        KeySet::new(ApiKeys::parse(list).unwrap().accepted().collect(), 0)
    }

    fn check(keys: &KeySet, key: &str) -> Result<String, AuthFailure> {
        keys.authenticate(&headers(&[&format!("Bearer {key}")]), 1_000)
            .map(|key| key.name.to_string())
    }

    #[test]
    fn generated_keys_have_the_prefix_the_length_and_a_matching_checksum() {
        let key = generate().unwrap();
        assert!(key.starts_with("pst_"), "{key}");
        assert_eq!(key.len(), 4 + 30 + 6);
        assert!(pst_key_is_intact(&key));
        assert_ne!(key, generate().unwrap());
    }

    #[test]
    fn a_mistyped_pst_key_fails_its_checksum() {
        let key = generate().unwrap();
        let mut typo = key.clone().into_bytes();
        typo[10] = if typo[10] == b'a' { b'b' } else { b'a' };
        let typo = String::from_utf8(typo).unwrap();
        assert!(!pst_key_is_intact(&typo));
        assert!(!pst_key_is_intact(&key[..key.len() - 1]));
        let keys = set(&key);
        assert_eq!(check(&keys, &typo), Err(AuthFailure::Checksum));
        assert_eq!(check(&keys, &key).unwrap(), "PETSTORE_API_KEYS[1]");
    }

    #[test]
    fn accepts_any_configured_key_by_name_and_nothing_else() {
        let keys = set(" alpha , beta,");
        assert_eq!(check(&keys, "alpha").unwrap(), "PETSTORE_API_KEYS[1]");
        assert_eq!(check(&keys, "beta").unwrap(), "PETSTORE_API_KEYS[2]");
        assert_eq!(check(&keys, "gamma"), Err(AuthFailure::Unknown));
        assert_eq!(check(&keys, "alph"), Err(AuthFailure::Unknown));
    }

    #[test]
    fn an_expired_key_is_refused_as_expired_and_uses_are_recorded() {
        let key = AcceptedKey {
            name: "ci".into(),
            digest: KeyDigest::of("k1"),
            expires_at: Some(2_000),
            scopes: Scopes::ALL,
            limits: KeyLimits::default(),
            last_used: Arc::default(),
        };
        let keys = KeySet::new(vec![key], 0);
        let request = headers(&["Bearer k1"]);
        assert!(keys.authenticate(&request, 1_999).is_ok());
        assert_eq!(keys.keys()[0].last_used.load(Ordering::Relaxed), 1_999);
        assert_eq!(
            keys.authenticate(&request, 2_000).unwrap_err(),
            AuthFailure::Expired
        );
        assert_eq!(keys.usable_at(1_999), 1);
        assert_eq!(keys.usable_at(2_000), 0);
    }

    #[test]
    fn among_thousands_of_keys_each_is_found_and_no_other() {
        const NOW: i64 = 1_000;
        let keys: Vec<String> = (0..5_000).map(|_| generate().unwrap()).collect();
        // Every tenth key expired at NOW.
        let expired = |index: usize| index.is_multiple_of(10);
        let accepted = keys.iter().enumerate().map(|(index, key)| AcceptedKey {
            name: format!("key-{index}").into(),
            digest: KeyDigest::of(key),
            expires_at: Some(if expired(index) { NOW } else { NOW + 1 }),
            scopes: Scopes::ALL,
            limits: KeyLimits::default(),
            last_used: Arc::default(),
        });
        let set = KeySet::new(accepted.collect(), 0);
        assert_eq!(set.usable_at(NOW), 4_500);
        for (index, key) in keys.iter().enumerate() {
            let found = set.authenticate(&headers(&[&format!("Bearer {key}")]), NOW);
            if expired(index) {
                assert_eq!(found.unwrap_err(), AuthFailure::Expired, "{index}");
            } else {
                assert_eq!(&*found.unwrap().name, format!("key-{index}"));
            }
        }
        let used = |index: usize| set.keys()[index].last_used.load(Ordering::Relaxed);
        assert_eq!((used(0), used(1), used(4_999)), (0, NOW, NOW));
        for _ in 0..100 {
            assert_eq!(check(&set, &generate().unwrap()), Err(AuthFailure::Unknown));
        }
        let mut typo = keys[1].clone().into_bytes();
        typo[10] = if typo[10] == b'a' { b'b' } else { b'a' };
        let typo = String::from_utf8(typo).unwrap();
        assert_eq!(check(&set, &typo), Err(AuthFailure::Checksum));
    }

    #[test]
    fn the_last_of_two_equal_keys_is_the_one_accepted() {
        let named = |name: &str| AcceptedKey {
            name: name.into(),
            digest: KeyDigest::of("same"),
            expires_at: None,
            scopes: Scopes::ALL,
            limits: KeyLimits::default(),
            last_used: Arc::default(),
        };
        let set = KeySet::new(vec![named("first"), named("second")], 0);
        assert_eq!(check(&set, "same").unwrap(), "second");
    }

    #[test]
    fn refuses_unsendable_or_broken_key_lists() {
        assert!(ApiKeys::parse(" , ").unwrap().is_empty());
        assert!(matches!(
            ApiKeys::parse("good,bad key"),
            Err(KeyConfigError::InvalidKey { position: 2 })
        ));
        assert!(matches!(
            ApiKeys::parse("good,pst_123"),
            Err(KeyConfigError::Checksum { position: 2 })
        ));
    }

    #[test]
    fn the_scheme_word_is_case_insensitive() {
        let keys = set("k1");
        for value in ["Bearer k1", "bearer k1", "BEARER k1", "bEaReR   k1"] {
            assert!(keys.authenticate(&headers(&[value]), 0).is_ok(), "{value}");
        }
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let keys = set("k1");
        assert_eq!(
            keys.authenticate(&HeaderMap::new(), 0).unwrap_err(),
            AuthFailure::Missing
        );
        for value in [
            "k1",
            "Basic k1",
            "Bearer",
            "Bearer ",
            "Bearer k1 extra",
            "Bearerk1",
        ] {
            assert!(keys.authenticate(&headers(&[value]), 0).is_err(), "{value}");
        }
        assert!(
            keys.authenticate(&headers(&["Bearer k1", "Bearer k1"]), 0)
                .is_err()
        );
    }

    #[test]
    fn debug_output_hides_keys() {
        let keys = ApiKeys::parse("supersecret").unwrap();
        assert!(!format!("{keys:?}").contains("supersecret"));
        assert!(!format!("{:?}", set("supersecret")).contains("supersecret"));
    }
}
