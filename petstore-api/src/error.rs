//! The contract's one error body, `{code, message, status}`, for every error
//! the operations return — including the ones dropshot's extractors raise
//! (malformed JSON, bad query or path parameters, oversized bodies) and its
//! router's (no such path, a method the path does not allow, a path that
//! cannot be decoded; through our dropshot patch 0002), which reach us
//! through `From<HttpError>`, headers and all (`Allow`, `WWW-Authenticate`;
//! patch 0001 sends them).

use crate::scopes::Scope;
use dropshot::{ErrorStatusCode, HttpError, HttpResponseError};
use http::header::{ALLOW, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue};
use schemars::JsonSchema;
use serde::Serialize;
use strum::VariantArray;

/// The body of every error response.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ApiError {
    /// Machine-readable error code: `bad_request`, `unauthorized`,
    /// `insufficient_scope`, `not_found`, `method_not_allowed`,
    /// `request_timeout`, `idempotency_key_in_use`, `pet_not_available`,
    /// `invalid_transition`, `payload_too_large`, `idempotency_key_reused`,
    /// `pet_not_found`, `cursor_expired`, `webhook_not_found`,
    /// `webhook_target_refused`, `invalid_replay_range`, `rate_limited`, `internal_error` or
    /// `service_unavailable`.
    pub code: String,
    /// Human-readable description.
    pub message: String,
    /// The HTTP status code of the response.
    pub status: i32,
    /// What the log records; may say more than `message`.
    #[serde(skip)]
    internal_message: String,
    #[serde(skip)]
    status_code: ErrorStatusCode,
    /// Sent with the body (patch 0001): `Allow`, `WWW-Authenticate`,
    /// `Retry-After`. Boxed, as `HttpError`'s are: most errors have none,
    /// and every `Result` of a handler is as large as its error.
    #[serde(skip)]
    headers: Option<Box<HeaderMap>>,
}

/// An operation an `Idempotency-Key` makes happen at most once; its keys
/// are apart from the other's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keyed {
    /// `createPet`.
    CreatePet,
    /// `placeOrder`.
    PlaceOrder,
}

impl Keyed {
    /// What the operation does, as "nothing was …" says it.
    fn done(self) -> &'static str {
        match self {
            Keyed::CreatePet => "created",
            Keyed::PlaceOrder => "ordered",
        }
    }
}

/// The contract's error codes. Each error names its own: a status never
/// decides a code, since several codes share one (409, 422).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the request is malformed or a value is out of range.
    BadRequest,
    /// 401: the API key is missing or refused.
    Unauthorized,
    /// 403: the key lacks the operation's scope.
    InsufficientScope,
    /// 404: no such resource, or no operation at the path.
    NotFound,
    /// 405: the path has operations, but none for this method (`Allow`
    /// lists them).
    MethodNotAllowed,
    /// 408: the request body did not arrive in time.
    RequestTimeout,
    /// 409: another request with the idempotency key is in progress.
    IdempotencyKeyInUse,
    /// 409: the animal cannot be ordered now.
    PetNotAvailable,
    /// 409: the order cannot change so.
    InvalidTransition,
    /// 413: the body is too large.
    PayloadTooLarge,
    /// 422: the idempotency key was used for another body.
    IdempotencyKeyReused,
    /// 422: an order names an animal that does not exist.
    PetNotFound,
    /// 410: the feed's cursor is older than its retention.
    CursorExpired,
    /// 404: no webhook subscription of the key has the id.
    WebhookNotFound,
    /// 422: a webhook's `url` is no endpoint deliveries may be sent to.
    WebhookTargetRefused,
    /// 422: a replay's range ends before it starts.
    InvalidReplayRange,
    /// 429: the key (or, without one, the client address) is over its
    /// budget; `Retry-After` says when to try again.
    RateLimited,
    /// 500: a bug in us or corrupt data.
    InternalError,
    /// 503: the database is unavailable.
    ServiceUnavailable,
}

impl ErrorCode {
    /// The code as the body spells it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The most characters of a message sent (and logged): messages that name
/// what the client sent are cut here, so that a 15,000-character field
/// name or a 7,000-digit id is not sent back whole.
const MESSAGE_MAX_CHARS: usize = 1000;

/// `message`, cut after [`MESSAGE_MAX_CHARS`] characters, saying so.
fn cut(message: String) -> String {
    match message.char_indices().nth(MESSAGE_MAX_CHARS) {
        None => message,
        Some((at, _)) => format!(
            "{}… (cut: the message has {} characters)",
            &message[..at],
            message.chars().count()
        ),
    }
}

impl ApiError {
    fn new(status_code: ErrorStatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        let message = cut(message.into());
        ApiError {
            code: code.as_str().to_owned(),
            status: i32::from(status_code.as_u16()),
            internal_message: message.clone(),
            message,
            status_code,
            headers: None,
        }
    }

    /// 400: the request is malformed or a value is out of range.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorStatusCode::BAD_REQUEST, ErrorCode::BadRequest, message)
    }

    /// 401: the API key is missing or invalid.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(
            ErrorStatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            message,
        )
    }

    /// 401 of a request admitted with a key that was revoked or expired
    /// before it was answered (a long poll of the feed): refused as the
    /// key's next request is, with RFC 6750's `invalid_token`.
    pub fn key_withdrawn_while_waiting() -> ApiError {
        let mut error =
            ApiError::unauthorized("this API key was revoked or expired while the request waited");
        error
            .headers
            .get_or_insert_default()
            .insert(WWW_AUTHENTICATE, invalid_token_challenge());
        error
    }

    /// 403: the key has none of `needed`, one of which `operation` needs.
    pub fn insufficient_scope(operation: &str, needed: &[Scope]) -> ApiError {
        let message = match needed {
            [scope] => {
                format!("this API key does not have the scope `{scope}`, which {operation} needs")
            }
            _ => {
                let names: Vec<String> = needed.iter().map(|s| format!("`{s}`")).collect();
                format!(
                    "this API key has none of the scopes {}, one of which {operation} needs",
                    names.join(", ")
                )
            }
        };
        let mut error = ApiError::new(
            ErrorStatusCode::FORBIDDEN,
            ErrorCode::InsufficientScope,
            message,
        );
        error
            .headers
            .get_or_insert_default()
            .insert(WWW_AUTHENTICATE, insufficient_scope_challenge(needed));
        error
    }

    /// 404: no such resource.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorStatusCode::NOT_FOUND, ErrorCode::NotFound, message)
    }

    /// 429: over budget; `message` says which and when to retry. The
    /// rate limiter sends it before any operation runs (it is not an
    /// operation's answer, so the API trait declares it nowhere).
    pub fn rate_limited(message: impl Into<String>) -> ApiError {
        ApiError::new(
            ErrorStatusCode::TOO_MANY_REQUESTS,
            ErrorCode::RateLimited,
            message,
        )
    }

    /// 409: another request with the same idempotency key is in progress.
    pub fn idempotency_key_in_use(operation: Keyed) -> ApiError {
        ApiError::new(
            ErrorStatusCode::CONFLICT,
            ErrorCode::IdempotencyKeyInUse,
            format!(
                "another request with this Idempotency-Key is still being processed; nothing was \
                 {}: retry later with the same key and body",
                operation.done()
            ),
        )
    }

    /// 422: the idempotency key was used for another body.
    pub fn idempotency_key_reused(operation: Keyed) -> ApiError {
        let (used_for, new) = match operation {
            Keyed::CreatePet => ("a create with a different body", "a new animal"),
            Keyed::PlaceOrder => ("an order of another animal", "a new order"),
        };
        ApiError::new(
            ErrorStatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::IdempotencyKeyReused,
            format!(
                "this Idempotency-Key was already used for {used_for}; nothing was {}: use a new \
                 key for {new}",
                operation.done()
            ),
        )
    }

    /// 409 `pet_not_available`: the animal cannot be ordered now.
    pub fn pet_not_available(pet_id: i64, status: Option<&str>) -> ApiError {
        let status = status.map_or("has no status".to_owned(), |s| format!("is {s}"));
        ApiError::new(
            ErrorStatusCode::CONFLICT,
            ErrorCode::PetNotAvailable,
            format!("pet {pet_id} {status}; only an available animal can be ordered"),
        )
    }

    /// 422 `pet_not_found`: an order names an animal that does not exist.
    pub fn pet_not_found(pet_id: i64) -> ApiError {
        ApiError::new(
            ErrorStatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::PetNotFound,
            format!("no pet has id {pet_id}"),
        )
    }

    /// 410 `cursor_expired`: the events after `after` were purged (every
    /// event up to `floor` may be gone).
    pub fn cursor_expired(after: i64, floor: i64) -> ApiError {
        ApiError::new(
            ErrorStatusCode::GONE,
            ErrorCode::CursorExpired,
            format!(
                "the events after {after} were purged (the feed keeps events for its \
                 retention, and has purged every event up to {floor}); read the feed again \
                 without after, from the oldest event it keeps"
            ),
        )
    }

    /// 410 `cursor_expired` of a replay: its range starts at `from`, but
    /// every event up to `floor` was purged.
    pub fn replay_range_expired(from: i64, floor: i64) -> ApiError {
        ApiError::new(
            ErrorStatusCode::GONE,
            ErrorCode::CursorExpired,
            format!(
                "the events up to {floor} were purged (the feed keeps events for its retention), \
                 so a replay from {from} cannot be made; replay from an event after {floor}"
            ),
        )
    }

    /// 422 `invalid_replay_range`: a replay's `from` is after its `to`.
    pub fn invalid_replay_range(from: i64, to: i64) -> ApiError {
        ApiError::new(
            ErrorStatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidReplayRange,
            format!("the range from {from} to {to} is empty; from must not be greater than to"),
        )
    }

    /// 404 `webhook_not_found`: no webhook subscription has the id `id`,
    /// or it is another key's (which is not said).
    pub fn webhook_not_found(id: i64) -> ApiError {
        ApiError::new(
            ErrorStatusCode::NOT_FOUND,
            ErrorCode::WebhookNotFound,
            format!("no webhook subscription has id {id}"),
        )
    }

    /// 422 `webhook_target_refused`: deliveries may not be sent to the
    /// `url`; `reason` says why, for the client (`"it is not an https
    /// URL"`, `"hooks.example.com resolves to 10.0.0.7, which is not a
    /// public address"`).
    pub fn webhook_target_refused(reason: &str) -> ApiError {
        ApiError::new(
            ErrorStatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::WebhookTargetRefused,
            format!("the webhook url is refused: {reason}"),
        )
    }

    /// 409 `invalid_transition`: an order cannot go from `from` to `to`.
    pub fn invalid_transition(order_id: i64, from: &str, to: &str) -> ApiError {
        ApiError::new(
            ErrorStatusCode::CONFLICT,
            ErrorCode::InvalidTransition,
            format!(
                "order {order_id} is {from} and cannot become {to}; only a placed order can be \
                 delivered or cancelled"
            ),
        )
    }

    /// 503: the database is unavailable. The client sees a generic message;
    /// the cause, with its whole chain of sources, goes to the log only.
    pub fn service_unavailable(cause: &dyn std::error::Error) -> ApiError {
        let mut error = ApiError::new(
            ErrorStatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
            "the database is unavailable; retry later",
        );
        error.internal_message = format!("database unavailable: {}", chain(cause));
        error.headers.get_or_insert_default().insert(
            RETRY_AFTER,
            HeaderValue::from(SERVICE_UNAVAILABLE_RETRY_AFTER_SECS),
        );
        error
    }

    /// 503 `service_unavailable` for a reason other than the database
    /// (`message` says it to the client, and the log), with the same
    /// `Retry-After` as every 503: a part of the service that is not
    /// configured, or not there yet.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        let mut error = ApiError::new(
            ErrorStatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
            message,
        );
        error.headers.get_or_insert_default().insert(
            RETRY_AFTER,
            HeaderValue::from(SERVICE_UNAVAILABLE_RETRY_AFTER_SECS),
        );
        error
    }

    /// 500: a bug in us or corrupt data; retrying will not help. The client
    /// sees a generic message; the cause, with its whole chain of sources,
    /// goes to the log only.
    pub fn internal(cause: &dyn std::error::Error) -> ApiError {
        let mut error = ApiError::new(
            ErrorStatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            "internal error; the server logged the cause",
        );
        error.internal_message = format!("internal error: {}", chain(cause));
        error
    }
}

/// The `Retry-After` of a `503`, in seconds: how long a database failover
/// or restart usually leaves us without one, and short enough that a client
/// waiting it out loses little.
pub const SERVICE_UNAVAILABLE_RETRY_AFTER_SECS: u16 = 2;

/// `error: its source: that one's source …`, for the log. Many errors
/// print their source in their own text and return it as their source too
/// (tokio-postgres', deadpool's, io's wrappers): a source whose text the
/// chain already ends with is not said again.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// The code of an extractor's error: the one it named (ours do, in
/// [`HttpError::error_code`]); dropshot's own extractors name none and
/// refuse a request with 400, or 413 for a body too large, so those get
/// the generic code of their status.
fn extractor_code(error: &HttpError) -> ErrorCode {
    let named = error.error_code.as_deref().and_then(|name| {
        ErrorCode::VARIANTS
            .iter()
            .copied()
            .find(|code| code.as_str() == name)
    });
    named.unwrap_or(match error.status_code.as_u16() {
        404 => ErrorCode::NotFound,
        405 => ErrorCode::MethodNotAllowed,
        408 => ErrorCode::RequestTimeout,
        413 => ErrorCode::PayloadTooLarge,
        429 => ErrorCode::RateLimited,
        503 => ErrorCode::ServiceUnavailable,
        500..=599 => ErrorCode::InternalError,
        _ => ErrorCode::BadRequest,
    })
}

impl ErrorCode {
    /// An extractor's error with this code: what [`ApiError`] becomes from
    /// it.
    pub fn http_error(
        self,
        status_code: ErrorStatusCode,
        external_message: String,
        internal_message: String,
    ) -> HttpError {
        HttpError {
            status_code,
            error_code: Some(self.as_str().to_owned()),
            external_message,
            internal_message,
            headers: None,
        }
    }
}

impl From<HttpError> for ApiError {
    fn from(error: HttpError) -> ApiError {
        let code = extractor_code(&error);
        let headers = error.headers;
        let message = match code {
            // dropshot's router says only "Not Found" and "Method Not
            // Allowed"; say what the client can do about it.
            ErrorCode::NotFound if error.error_code.is_none() => {
                "no operation of the API has this path; the contract (openapi.yaml) lists them"
                    .to_owned()
            }
            ErrorCode::MethodNotAllowed => format!(
                "this path has no operation for the method; it allows {}",
                allowed(headers.as_deref())
            ),
            _ => error.external_message,
        };
        let mut api_error = ApiError::new(error.status_code, code, message);
        api_error.internal_message = cut(error.internal_message);
        api_error.headers = headers;
        api_error
    }
}

/// The methods an `Allow` header lists, for a message.
fn allowed(headers: Option<&HeaderMap>) -> String {
    let methods: Vec<&str> = headers
        .into_iter()
        .flat_map(|headers| headers.get_all(ALLOW))
        .filter_map(|value| value.to_str().ok())
        .collect();
    methods.join(", ")
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.internal_message)
    }
}

impl std::error::Error for ApiError {}

impl HttpResponseError for ApiError {
    fn status_code(&self) -> ErrorStatusCode {
        self.status_code
    }

    fn headers(&self) -> HeaderMap {
        self.headers.as_deref().cloned().unwrap_or_default()
    }
}

/// The `WWW-Authenticate` of a `401` whose request sent a key, wrong,
/// expired or revoked (RFC 6750's `invalid_token`).
pub(crate) fn invalid_token_challenge() -> HeaderValue {
    HeaderValue::from_static(r#"Bearer realm="petstore", error="invalid_token""#)
}

/// RFC 6750 §3's challenge on a `403 insufficient_scope`: the scopes any one
/// of which would admit the operation, space-separated.
pub(crate) fn insufficient_scope_challenge(needed: &[Scope]) -> HeaderValue {
    let scopes: Vec<&str> = needed.iter().map(|scope| scope.as_str()).collect();
    let challenge = format!(
        r#"Bearer realm="petstore", error="insufficient_scope", scope="{}""#,
        scopes.join(" ")
    );
    // Scope names are fixed ASCII tokens (`pets:read`), always a valid value.
    HeaderValue::try_from(challenge).expect("scope names are header-safe")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that says `text`, and has `source`; `{source}` in `text`
    /// repeats it, as many libraries' errors do.
    #[derive(Debug)]
    struct Said(String, Option<Box<Said>>);

    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Said {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|s| s as _)
        }
    }

    fn said(text: &str, source: Option<Said>) -> Said {
        Said(text.to_owned(), source.map(Box::new))
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        let refused = said("Connection refused (os error 111)", None);
        let connecting = said(
            "error connecting to server: Connection refused (os error 111)",
            Some(refused),
        );
        let storage = said("PostgreSQL, connecting", Some(connecting));
        assert_eq!(
            chain(&storage),
            "PostgreSQL, connecting: error connecting to server: Connection refused (os error 111)"
        );

        let inner = said("disk full", None);
        let outer = said("writing the page", Some(inner));
        assert_eq!(chain(&outer), "writing the page: disk full");
    }

    #[test]
    fn a_message_naming_a_huge_value_is_cut_and_says_so() {
        let huge = format!("unknown field `{}`", "x".repeat(15_000));
        let error = ApiError::bad_request(huge.clone());
        assert!(error.message.starts_with("unknown field `xxx"));
        assert!(
            error
                .message
                .ends_with("… (cut: the message has 15016 characters)"),
            "{}",
            &error.message[990..]
        );
        assert!(error.message.chars().count() < MESSAGE_MAX_CHARS + 50);
        assert_eq!(error.internal_message, error.message);
        let from_dropshot = ApiError::from(HttpError::for_bad_request(None, huge));
        assert_eq!(from_dropshot.message, error.message);
        assert_eq!(from_dropshot.internal_message, error.message);
        let short = ApiError::bad_request("no pet has id 42");
        assert_eq!(short.message, "no pet has id 42");
    }

    #[test]
    fn status_field_matches_http_status() {
        let error: ApiError = HttpError::for_bad_request(None, "bad".into()).into();
        assert_eq!((error.status, error.code.as_str()), (400, "bad_request"));
        assert_eq!(error.status_code().as_u16(), 400);
        let named = ErrorCode::Unauthorized.http_error(
            ErrorStatusCode::UNAUTHORIZED,
            "no key".into(),
            "no key".into(),
        );
        let error = ApiError::from(named);
        assert_eq!((error.status, error.code.as_str()), (401, "unauthorized"));
    }

    #[test]
    fn a_router_405_keeps_its_allow_header_and_names_the_methods() {
        let mut routed = HttpError::for_client_error_with_status(
            None,
            dropshot::ClientErrorStatusCode::METHOD_NOT_ALLOWED,
        );
        routed.add_header(ALLOW, "GET").unwrap();
        routed.add_header(ALLOW, "POST").unwrap();
        let error = ApiError::from(routed);
        assert_eq!(error.code, "method_not_allowed");
        assert!(
            error.message.ends_with("it allows GET, POST"),
            "{}",
            error.message
        );
        let allow: Vec<_> = error.headers().get_all(ALLOW).iter().cloned().collect();
        assert_eq!(allow, ["GET", "POST"]);
    }

    #[test]
    fn a_503_says_when_to_retry() {
        for error in [
            ApiError::service_unavailable(&std::io::Error::other("down")),
            ApiError::unavailable("webhooks are not configured"),
        ] {
            assert_eq!(
                error.headers().get(RETRY_AFTER),
                Some(&HeaderValue::from(SERVICE_UNAVAILABLE_RETRY_AFTER_SECS))
            );
            assert_eq!(
                (error.status, error.code.as_str()),
                (503, "service_unavailable")
            );
        }
    }

    #[test]
    fn webhook_errors_name_their_code_and_say_what_is_wrong() {
        let error = ApiError::webhook_not_found(3);
        assert_eq!(
            (error.status, error.code.as_str()),
            (404, "webhook_not_found")
        );
        assert_eq!(error.message, "no webhook subscription has id 3");
        let error = ApiError::webhook_target_refused("it is not an https URL");
        assert_eq!(
            (error.status, error.code.as_str()),
            (422, "webhook_target_refused")
        );
        assert_eq!(
            error.message,
            "the webhook url is refused: it is not an https URL"
        );
        let error = ApiError::replay_range_expired(7, 41);
        assert_eq!((error.status, error.code.as_str()), (410, "cursor_expired"));
        assert!(
            error.message.contains("replay from an event after 41"),
            "{}",
            error.message
        );
        // An extractor naming the new codes keeps them.
        let named = ErrorCode::WebhookNotFound.http_error(
            ErrorStatusCode::NOT_FOUND,
            "gone".into(),
            "gone".into(),
        );
        assert_eq!(ApiError::from(named).code, "webhook_not_found");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("writing pets")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn internal_causes_stay_out_of_the_body_and_go_to_the_log_whole() {
        let cause = Outer(std::io::Error::other("disk I/O error at /secret/path"));
        for error in [
            ApiError::service_unavailable(&cause),
            ApiError::internal(&cause),
        ] {
            assert!(!error.message.contains("/secret/path"), "{}", error.message);
            assert!(
                error
                    .to_string()
                    .contains("writing pets: disk I/O error at /secret/path"),
                "{error}"
            );
        }
        assert_eq!(ApiError::internal(&cause).status, 500);
        assert_eq!(ApiError::internal(&cause).code, "internal_error");
    }
}
