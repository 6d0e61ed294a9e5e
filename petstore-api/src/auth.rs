//! Bearer-key authentication: the interface's half.
//!
//! The contract says that every operation needs an API key and that a
//! missing or refused key is `401` before anything else about the request
//! is looked at. Which keys are accepted is the implementation's business.
//! So the interface defines what it needs of the implementation, a
//! [`Gatekeeper`], and the context type that carries one, [`ApiContext`];
//! the [`Authenticated`] extractor asks it. Since contract 1.4.0 the
//! gatekeeper also says which scopes the key holds, and the extractor
//! answers `403 insufficient_scope` when none of them admits the operation
//! ([`crate::scopes::admitting`]), still before any body or parameter.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use http::header::WWW_AUTHENTICATE;

use dropshot::{
    ApiEndpointBodyContentType, ErrorStatusCode, ExtensionMode, ExtractorMetadata, HttpError,
    RequestContext, ServerContext, SharedExtractor,
};
use http::HeaderMap;

use crate::error::{ApiError, ErrorCode, insufficient_scope_challenge, invalid_token_challenge};
use crate::scopes::{Scope, Scopes, admitting};

/// What the implementation decides about each request's key.
pub trait Gatekeeper: Send + Sync + 'static {
    /// Admits the request or refuses it. It must decide at once, without
    /// waiting on anything: that is what lets its `401` come before any
    /// body or parameter error (see [`Authenticated`]).
    fn admit(&self, request: &Knock<'_>) -> Result<Caller, Refusal>;
}

/// A request asking to be admitted.
#[derive(Debug)]
pub struct Knock<'a> {
    /// The request's headers (the key is in `Authorization`).
    pub headers: &'a HeaderMap,
    /// The operation asked for (its `operationId`).
    pub operation_id: &'a str,
    /// dropshot's id for the request, as its log records name it.
    pub request_id: &'a str,
}

/// Who a key is, as the implementation names it without revealing the key
/// (the server uses the key's SHA-256 digest): whose idempotency keys and
/// whose orders are whose.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity(pub [u8; 32]);

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Identity(…)")
    }
}

/// Who an admitted request comes from.
pub struct Caller {
    /// The key's identity.
    pub identity: Identity,
    /// The key's name, as the operator gave it (never the key): what an
    /// order records of who placed it.
    pub name: Arc<str>,
    /// What the key may do.
    pub scopes: Scopes,
    /// Kept for as long as the request is handled, then dropped: the
    /// implementation counts requests in flight with it.
    pub guard: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// Why a request was refused: a `401`.
#[derive(Debug)]
pub struct Refusal {
    /// What the client is told.
    pub message: &'static str,
    /// What the log records (never the key).
    pub reason: &'static str,
    /// Whether the request sent a credential at all (then it was wrong,
    /// expired or revoked: RFC 6750's `invalid_token`).
    pub credential_sent: bool,
}

/// The state dropshot hands every endpoint of the API: the implementation,
/// seen by the interface only as its [`Gatekeeper`].
pub struct ApiContext {
    gatekeeper: Arc<dyn Gatekeeper>,
    implementation: Arc<dyn Any + Send + Sync>,
    body_read_timeout: Option<Duration>,
}

impl ApiContext {
    /// The context of a server whose state is `implementation`.
    pub fn new<T: Gatekeeper>(implementation: Arc<T>) -> ApiContext {
        ApiContext {
            gatekeeper: Arc::clone(&implementation) as Arc<dyn Gatekeeper>,
            implementation,
            body_read_timeout: None,
        }
    }

    /// Bounds how long a request body may take to arrive: the body
    /// extractor refuses one still incomplete after `timeout` with `408`.
    /// Without it, a body may take as long as its connection lasts.
    pub fn with_body_read_timeout(mut self, timeout: Duration) -> ApiContext {
        self.body_read_timeout = Some(timeout);
        self
    }

    /// How long a request body may take to arrive, if bounded.
    pub fn body_read_timeout(&self) -> Option<Duration> {
        self.body_read_timeout
    }

    /// The implementation's state, if it is a `T`.
    pub fn implementation<T: 'static>(&self) -> Option<&T> {
        self.implementation.downcast_ref()
    }
}

/// Implemented by [`ApiContext`] alone: `PetstoreApi::Context` must be it.
pub trait IsApiContext: sealed::Sealed {}

impl IsApiContext for ApiContext {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ApiContext {}
}

/// Proof that the request carried an accepted API key.
///
/// Every endpoint takes this extractor first. dropshot runs extractors in
/// order, and this one never awaits, so its 401 wins over any error the
/// body or parameter extractors would raise.
#[derive(Debug)]
pub struct Authenticated {
    caller: Caller,
}

impl Authenticated {
    /// The caller's identity (see [`Caller::identity`]).
    pub fn identity(&self) -> Identity {
        self.caller.identity
    }

    /// The key's name (see [`Caller::name`]).
    pub fn name(&self) -> &Arc<str> {
        &self.caller.name
    }

    /// Whether the key holds `scope`.
    pub fn may(&self, scope: Scope) -> bool {
        self.caller.scopes.contains(scope)
    }

    /// Every scope the key holds.
    pub fn scopes(&self) -> Scopes {
        self.caller.scopes
    }
}

#[async_trait::async_trait]
impl SharedExtractor for Authenticated {
    async fn from_request<Context: ServerContext>(
        rqctx: &RequestContext<Context>,
    ) -> Result<Self, HttpError> {
        // The extractor trait is generic over the context type, so the
        // gatekeeper is found by downcasting to the API's context.
        let context: &dyn Any = rqctx.context();
        let Some(context) = context.downcast_ref::<ApiContext>() else {
            return Err(HttpError::for_internal_error(
                "Authenticated used with a context other than ApiContext".into(),
            ));
        };
        let knock = Knock {
            headers: rqctx.request.headers(),
            operation_id: &rqctx.endpoint.operation_id,
            request_id: &rqctx.request_id,
        };
        match context.gatekeeper.admit(&knock) {
            Ok(caller) => {
                // Scopes are checked here, before any body or parameter, so
                // that a key that may not call the operation learns nothing
                // more of it than its 403.
                let needed = admitting(knock.operation_id);
                if needed.iter().any(|scope| caller.scopes.contains(*scope)) {
                    Ok(Authenticated { caller })
                } else {
                    let refused = ApiError::insufficient_scope(knock.operation_id, needed);
                    let logged = format!("key {:?} refused: {}", caller.name, refused.message);
                    let mut error = ErrorCode::InsufficientScope.http_error(
                        ErrorStatusCode::FORBIDDEN,
                        refused.message,
                        logged,
                    );
                    error
                        .headers_mut()
                        .insert(WWW_AUTHENTICATE, insufficient_scope_challenge(needed));
                    Err(error)
                }
            }
            Err(refusal) => {
                let mut error = ErrorCode::Unauthorized.http_error(
                    ErrorStatusCode::UNAUTHORIZED,
                    refusal.message.into(),
                    format!("authentication failed: {}", refusal.reason),
                );
                let challenge = if refusal.credential_sent {
                    invalid_token_challenge()
                } else {
                    HeaderValue::from_static(r#"Bearer realm="petstore""#)
                };
                error.headers_mut().insert(WWW_AUTHENTICATE, challenge);
                Err(error)
            }
        }
    }

    fn metadata(_body_content_type: ApiEndpointBodyContentType) -> ExtractorMetadata {
        ExtractorMetadata {
            extension_mode: ExtensionMode::None,
            parameters: Vec::new(),
        }
    }
}
