//! `StrictJson<T>`: a JSON request body, read and checked more strictly than
//! dropshot's `TypedBody`.
//!
//! - A body whose declared `Content-Length` exceeds the limit is refused
//!   with 413 *before* any of it is read: no `100 Continue` is sent for it,
//!   and a client that declared more than it sends is not waited for.
//! - A body that grows past the limit while being read is 413 as well.
//! - The body must be a JSON object, as every request body of the contract
//!   is: an array is 400, where serde's derived structs would take it and
//!   match its elements to the fields by position (`["Rex", 1]` as a
//!   `NewPet`).
//! - After the JSON value, only whitespace may follow: `{…}{…}` or
//!   `{…} trailing` is 400, where `TypedBody` silently drops the rest.
//! - A body that has not all arrived within the server's body-read timeout
//!   ([`ApiContext::body_read_timeout`]) is 408 `request_timeout`: a client
//!   that stalls mid-body does not hold its connection and its request
//!   for ever.
//!
//! Its metadata is `TypedBody<T>`'s, so the emitted OpenAPI document (and
//! the drift check) cannot tell the two apart.

use std::any::Any;
use std::time::Duration;

use dropshot::{
    ApiEndpointBodyContentType, ErrorStatusCode, ExclusiveExtractor, ExtractorMetadata, HttpError,
    RequestContext, ServerContext, TypedBody,
};
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::auth::ApiContext;
use crate::error::ErrorCode;

/// A request body parsed as JSON into `T`, with nothing after it.
#[derive(Debug)]
pub struct StrictJson<T>(T);

impl<T> StrictJson<T> {
    /// The parsed body.
    pub fn into_inner(self) -> T {
        self.0
    }
}

#[async_trait::async_trait]
impl<T> ExclusiveExtractor for StrictJson<T>
where
    T: JsonSchema + DeserializeOwned + Send + Sync + 'static,
{
    async fn from_request<Context: ServerContext>(
        rqctx: &RequestContext<Context>,
        request: http::Request<dropshot::Body>,
    ) -> Result<StrictJson<T>, HttpError> {
        let max = rqctx.request_body_max_bytes();
        let (parts, body) = request.into_parts();
        check_declared_length(&parts.headers, max)?;
        check_content_type(&parts.headers)?;
        check_content_encoding(&parts.headers)?;
        let read = Limited::new(body, max).collect();
        // The extractor is generic over the context: the timeout is found by
        // downcasting to the API's.
        let context: &dyn Any = rqctx.context();
        let timeout = context
            .downcast_ref::<ApiContext>()
            .and_then(ApiContext::body_read_timeout);
        let read = match timeout {
            Some(timeout) => tokio::time::timeout(timeout, read)
                .await
                .map_err(|_| timed_out(timeout))?,
            None => read.await,
        };
        let bytes = read
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    too_large(max)
                } else {
                    HttpError::for_bad_request(None, format!("reading the request body: {e}"))
                }
            })?
            .to_bytes();
        parse(&bytes).map(StrictJson)
    }

    fn metadata(content_type: ApiEndpointBodyContentType) -> ExtractorMetadata {
        <TypedBody<T> as ExclusiveExtractor>::metadata(content_type)
    }
}

fn timed_out(timeout: Duration) -> HttpError {
    let message = format!(
        "the request body did not arrive within {} s",
        timeout.as_secs_f64()
    );
    ErrorCode::RequestTimeout.http_error(ErrorStatusCode::REQUEST_TIMEOUT, message.clone(), message)
}

fn too_large(max: usize) -> HttpError {
    let message = format!("the request body is larger than the limit of {max} bytes");
    ErrorCode::PayloadTooLarge.http_error(
        ErrorStatusCode::PAYLOAD_TOO_LARGE,
        message.clone(),
        message,
    )
}

/// 413 for a declared length over `max`, before anything is read.
fn check_declared_length(headers: &HeaderMap, max: usize) -> Result<(), HttpError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    match declared {
        Some(length) if length > max as u64 => Err(too_large(max)),
        _ => Ok(()),
    }
}

/// The body must be JSON: `Content-Type` absent (taken as JSON, as dropshot
/// does) or `application/json`, with any parameters.
fn check_content_type(headers: &HeaderMap) -> Result<(), HttpError> {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return Ok(());
    };
    let value = value
        .to_str()
        .map_err(|e| HttpError::for_bad_request(None, format!("invalid content type: {e}")))?;
    let mime_type = value.split(';').next().unwrap_or_default().trim();
    if mime_type.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(HttpError::for_bad_request(
            None,
            format!("expected content type \"application/json\", got \"{mime_type}\""),
        ))
    }
}

/// The body must be sent as it is: a `Content-Encoding` (gzip, say) would
/// otherwise be read as JSON text, and a body that happened to parse would
/// be stored as something the client did not mean. `identity` is no coding.
fn check_content_encoding(headers: &HeaderMap) -> Result<(), HttpError> {
    for value in headers.get_all(CONTENT_ENCODING) {
        let codings = value.to_str().unwrap_or("(not ASCII)");
        let coded = codings
            .split(',')
            .map(str::trim)
            .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"));
        if coded {
            return Err(HttpError::for_bad_request(
                None,
                format!(
                    "Content-Encoding \"{codings}\" is not supported: send the JSON body \
                     uncompressed"
                ),
            ));
        }
    }
    Ok(())
}

/// One JSON value of type `T`, not an array, with only whitespace after it.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, HttpError> {
    let bad = |e: &dyn std::fmt::Display| {
        HttpError::for_bad_request(None, format!("unable to parse JSON body: {e}"))
    };
    // Any other value that is not an object gets serde's own "invalid type"
    // (a struct takes only a map or a sequence).
    let first = bytes
        .iter()
        .find(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'));
    if first == Some(&b'[') {
        return Err(bad(&"invalid type: array, expected a JSON object"));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| bad(&e))?;
    deserializer.end().map_err(|e| bad(&e))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Thing {
        a: i32,
    }

    #[test]
    fn one_value_with_trailing_whitespace_parses() {
        assert_eq!(parse::<Thing>(b" {\"a\":1} \n").unwrap(), Thing { a: 1 });
    }

    #[test]
    fn an_array_is_refused_even_where_its_elements_would_fill_the_fields() {
        for body in [&b"[1]"[..], b" \n[1]", b"[]"] {
            let error = parse::<Thing>(body).unwrap_err();
            assert_eq!(error.status_code.as_u16(), 400);
            assert_eq!(
                error.external_message,
                "unable to parse JSON body: invalid type: array, expected a JSON object"
            );
        }
    }

    /// What makes refusing arrays right for every `StrictJson` body.
    #[test]
    fn every_request_body_of_the_contract_is_an_object() {
        let document = crate::openapi_document();
        let mut bodies = 0;
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let Some(body) = operation.get("requestBody") else {
                    continue;
                };
                let reference = body["content"]["application/json"]["schema"]["$ref"]
                    .as_str()
                    .unwrap_or_else(|| {
                        panic!("{method} {path}: a body that is not a named schema")
                    });
                let name = reference.trim_start_matches("#/components/schemas/");
                let schema = &document["components"]["schemas"][name];
                assert_eq!(schema["type"], "object", "{method} {path}: {name}");
                bodies += 1;
            }
        }
        assert_eq!(
            bodies, 5,
            "createPet, placeOrder, updateOrder, createWebhook, replayWebhook"
        );
    }

    #[test]
    fn anything_after_the_value_is_refused() {
        for body in [
            &b"{\"a\":1}{\"a\":2}"[..],
            b"{\"a\":1} trailing",
            b"{\"a\":1},",
        ] {
            let error = parse::<Thing>(body).unwrap_err();
            assert_eq!(error.status_code.as_u16(), 400);
            assert!(
                error.external_message.contains("trailing"),
                "{}",
                error.external_message
            );
        }
    }

    #[test]
    fn a_declared_length_over_the_limit_is_413_before_reading() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("16385"));
        let error = check_declared_length(&headers, 16384).unwrap_err();
        assert_eq!(error.status_code.as_u16(), 413);
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("16384"));
        assert!(check_declared_length(&headers, 16384).is_ok());
    }

    #[test]
    fn only_json_is_accepted() {
        let mut headers = HeaderMap::new();
        assert!(check_content_type(&headers).is_ok());
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert!(check_content_type(&headers).is_ok());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert_eq!(
            check_content_type(&headers)
                .unwrap_err()
                .status_code
                .as_u16(),
            400
        );
    }

    #[test]
    fn a_coded_body_is_refused_and_identity_is_no_coding() {
        let mut headers = HeaderMap::new();
        assert!(check_content_encoding(&headers).is_ok());
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("identity"));
        assert!(check_content_encoding(&headers).is_ok());
        for coding in ["gzip", "identity, br", "x-unknown"] {
            headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding));
            let error = check_content_encoding(&headers).unwrap_err();
            assert_eq!(error.status_code.as_u16(), 400, "{coding}");
            assert!(error.external_message.contains(coding), "{coding}");
        }
    }
}
