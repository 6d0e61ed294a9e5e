//! The `Idempotency-Key` request header of `POST /pets` and the
//! `Idempotent-Replayed` header of its replayed `201`s.
//!
//! The header is read by an extractor of our own rather than dropshot's
//! `Header<T>`: that one turns *every* header of the request into text
//! first, so an unrelated header with a non-ASCII byte would fail the
//! create, and it keeps only the last of repeated headers. Its metadata is
//! `Header<T>`'s, so the emitted document is the same.

use dropshot::{
    ApiEndpointBodyContentType, ExtractorMetadata, Header, HttpError, RequestContext,
    ServerContext, SharedExtractor,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The header's name.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The longest key accepted, in characters (bytes: they are ASCII).
pub const IDEMPOTENCY_KEY_MAX: usize = 255;

/// The header parameter as the contract documents it.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IdempotencyKeyParam {
    /// A key chosen by the client (a UUID v4 is a good choice) that makes
    /// the create safe to retry: 1 to 255 visible ASCII characters.
    #[serde(rename = "Idempotency-Key")]
    #[schemars(length(min = 1, max = 255), regex(pattern = r"^[\x21-\x7E]+$"))]
    pub idempotency_key: Option<String>,
}

/// The request's `Idempotency-Key`, if it sent one; a malformed or repeated
/// header is refused with 400 before the body is read.
#[derive(Debug)]
pub struct IdempotencyKey(Option<String>);

impl IdempotencyKey {
    /// The key, if the request carried one.
    pub fn into_inner(self) -> Option<String> {
        self.0
    }
}

#[async_trait::async_trait]
impl SharedExtractor for IdempotencyKey {
    async fn from_request<Context: ServerContext>(
        rqctx: &RequestContext<Context>,
    ) -> Result<IdempotencyKey, HttpError> {
        parse(rqctx.request.headers())
            .map(IdempotencyKey)
            .map_err(|message| HttpError::for_bad_request(None, message))
    }

    fn metadata(body_content_type: ApiEndpointBodyContentType) -> ExtractorMetadata {
        <Header<IdempotencyKeyParam> as SharedExtractor>::metadata(body_content_type)
    }
}

/// The key in `headers`, checked: sent at most once, 1 to 255 characters
/// from `!` to `~`.
fn parse(headers: &http::HeaderMap) -> Result<Option<String>, String> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let repeated = values.count();
    if repeated > 0 {
        return Err(format!(
            "Idempotency-Key must be sent once, got {} values",
            repeated + 1
        ));
    }
    let bytes = value.as_bytes();
    let rule = "Idempotency-Key must be 1 to 255 visible ASCII characters (! to ~)";
    if bytes.is_empty() {
        return Err(format!("{rule}, got an empty value"));
    }
    if bytes.len() > IDEMPOTENCY_KEY_MAX {
        return Err(format!("{rule}, got {} bytes", bytes.len()));
    }
    if let Some(at) = bytes.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        return Err(format!(
            "{rule}, got byte 0x{:02x} at position {}",
            bytes[at],
            at + 1
        ));
    }
    // Visible ASCII is UTF-8.
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// The headers of a `201` of `POST /pets`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct CreatedHeaders {
    /// `true` when this is the stored response of an earlier request with
    /// the same `Idempotency-Key` and body: nothing was created this time.
    /// Absent otherwise.
    #[serde(
        rename = "Idempotent-Replayed",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "String")]
    pub idempotent_replayed: Option<&'static str>,
}

impl CreatedHeaders {
    /// The headers of a replayed `201`.
    pub fn replayed() -> CreatedHeaders {
        CreatedHeaders {
            idempotent_replayed: Some("true"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    fn key(values: &[&[u8]]) -> Result<Option<String>, String> {
        let mut headers = HeaderMap::new();
        headers.insert("x-other", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        for value in values {
            headers.append(IDEMPOTENCY_KEY, HeaderValue::from_bytes(value).unwrap());
        }
        parse(&headers)
    }

    #[test]
    fn visible_ascii_keys_of_1_to_255_characters_are_accepted() {
        assert_eq!(key(&[]), Ok(None));
        assert_eq!(key(&[b"a"]), Ok(Some("a".into())));
        let uuid = b"7c9e6679-7425-40de-944b-e07fc1f90ae7";
        assert_eq!(key(&[uuid]).unwrap().unwrap().as_bytes(), uuid);
        let all: Vec<u8> = (0x21..=0x7e).collect();
        assert_eq!(key(&[&all]).unwrap().unwrap().as_bytes(), &all[..]);
        assert!(key(&[&[b'k'; 255]]).is_ok());
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        let refused = |values: &[&[u8]], reason: &str| {
            let message = key(values).unwrap_err();
            assert!(message.contains(reason), "{message}");
        };
        refused(&[b""], "empty");
        refused(&[&[b'k'; 256]], "got 256 bytes");
        refused(&[b"a b"], "byte 0x20 at position 2");
        refused(&[b"a\tb"], "byte 0x09");
        refused(&[b"caf\xc3\xa9"], "byte 0xc3 at position 4");
        refused(&[b"a", b"a"], "sent once, got 2 values");
    }
}
