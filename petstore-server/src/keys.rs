//! API keys and the bearer credential.
//!
//! Keys are held only as SHA-256 digests; a presented key is hashed and
//! compared with every configured digest in constant time, so neither the
//! keys nor their prefixes can be learned from timing, and nothing in memory
//! or in the logs holds a key in clear after start-up.

use http::HeaderMap;
use http::header::AUTHORIZATION;
use sha2::{Digest, Sha256};

/// The set of API keys the server accepts, as digests.
#[derive(Clone)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.digests.len())
    }
}

/// Why a configured key list is unusable.
#[derive(Debug, thiserror::Error)]
pub enum KeyConfigError {
    /// No key at all: the server would reject every request.
    #[error("no API key configured: set PETSTORE_API_KEYS to a comma-separated list of keys")]
    NoKeys,
    /// A key that no client could send in a bearer header.
    #[error(
        "API key number {position} in PETSTORE_API_KEYS is not a valid bearer token \
         (allowed: letters, digits and - . _ ~ + /, optionally followed by =)"
    )]
    InvalidKey {
        /// 1-based position in the list; the key itself is never echoed.
        position: usize,
    },
}

impl ApiKeys {
    /// Parses a comma-separated key list, as in `PETSTORE_API_KEYS`.
    /// Surrounding whitespace and empty entries are ignored.
    pub fn parse(list: &str) -> Result<ApiKeys, KeyConfigError> {
        let mut digests = Vec::new();
        for (index, key) in list.split(',').map(str::trim).enumerate() {
            if key.is_empty() {
                continue;
            }
            if !is_token68(key) {
                return Err(KeyConfigError::InvalidKey {
                    position: index + 1,
                });
            }
            digests.push(digest(key));
        }
        if digests.is_empty() {
            return Err(KeyConfigError::NoKeys);
        }
        Ok(ApiKeys { digests })
    }

    /// Whether `key` is one of the configured keys. Takes the same time
    /// whichever key (if any) matches.
    pub fn accepts(&self, key: &str) -> bool {
        let presented = digest(key);
        self.digests.iter().fold(false, |found, known| {
            found | constant_time_eq(known, &presented)
        })
    }

    /// Checks the `Authorization` header of a request.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        let key = bearer_token(headers)?;
        if self.accepts(key) {
            Ok(())
        } else {
            Err("invalid API key")
        }
    }
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
fn bearer_token(headers: &HeaderMap) -> Result<&str, &'static str> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(MISSING)?;
    if values.next().is_some() {
        return Err("more than one Authorization header");
    }
    let value = value
        .to_str()
        .map_err(|_| "the Authorization header is not ASCII")?;
    let (scheme, key) = value.trim().split_once(' ').ok_or(MISSING)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("the Authorization scheme must be Bearer");
    }
    let key = key.trim_start_matches(' ');
    if is_token68(key) {
        Ok(key)
    } else {
        Err("invalid API key")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn accepts_any_configured_key_and_nothing_else() {
        let keys = ApiKeys::parse(" alpha , beta,").unwrap();
        assert!(keys.accepts("alpha"));
        assert!(keys.accepts("beta"));
        assert!(!keys.accepts("gamma"));
        assert!(!keys.accepts("alph"));
        assert!(!keys.accepts(""));
    }

    #[test]
    fn refuses_empty_or_unsendable_key_lists() {
        assert!(matches!(ApiKeys::parse(""), Err(KeyConfigError::NoKeys)));
        assert!(matches!(ApiKeys::parse(" , "), Err(KeyConfigError::NoKeys)));
        assert!(matches!(
            ApiKeys::parse("good,bad key"),
            Err(KeyConfigError::InvalidKey { position: 2 })
        ));
    }

    #[test]
    fn the_scheme_word_is_case_insensitive() {
        let keys = ApiKeys::parse("k1").unwrap();
        for value in ["Bearer k1", "bearer k1", "BEARER k1", "bEaReR   k1"] {
            assert_eq!(keys.authenticate(&headers(&[value])), Ok(()), "{value}");
        }
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let keys = ApiKeys::parse("k1").unwrap();
        assert_eq!(keys.authenticate(&HeaderMap::new()), Err(MISSING));
        for value in [
            "k1",
            "Basic k1",
            "Bearer",
            "Bearer ",
            "Bearer k1 extra",
            "Bearerk1",
        ] {
            assert!(keys.authenticate(&headers(&[value])).is_err(), "{value}");
        }
        assert!(
            keys.authenticate(&headers(&["Bearer k1", "Bearer k1"]))
                .is_err()
        );
    }

    #[test]
    fn debug_output_hides_keys() {
        let keys = ApiKeys::parse("supersecret").unwrap();
        assert!(!format!("{keys:?}").contains("supersecret"));
    }
}
