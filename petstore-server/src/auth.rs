//! Bearer-key authentication as a dropshot extractor.

use dropshot::{
    ApiEndpointBodyContentType, ExtensionMode, ExtractorMetadata, HttpError, RequestContext,
    ServerContext, SharedExtractor,
};

use crate::context::{ApiContext, InFlight};
use crate::keys::KeyDigest;

/// Proof that the request carried a valid API key.
///
/// Every endpoint takes this extractor first. dropshot polls extractors in
/// order, and this one never awaits, so its 401 wins over any error the
/// body or parameter extractors would raise: authentication is checked
/// before anything else about the request.
///
/// It also counts the request as in flight until the handler is done with
/// it (or the request is dropped), so that a shutdown can say how many
/// requests it had to cut, and notes the operation and the key's name for
/// the access log and the metrics (see `observe.rs`).
#[derive(Debug)]
pub struct Authenticated {
    digest: KeyDigest,
    _in_flight: InFlight,
}

impl Authenticated {
    /// The digest of the key the request carried: the scope of its
    /// idempotency key.
    pub fn key_digest(&self) -> KeyDigest {
        self.digest
    }
}

#[async_trait::async_trait]
impl SharedExtractor for Authenticated {
    async fn from_request<Context: ServerContext>(
        rqctx: &RequestContext<Context>,
    ) -> Result<Self, HttpError> {
        // The extractor trait is generic over the context type, so the keys
        // are found by downcasting to the server's context.
        let context: &dyn std::any::Any = rqctx.context();
        let Some(context) = context.downcast_ref::<ApiContext>() else {
            return Err(HttpError::for_internal_error(
                "Authenticated used with a context other than ApiContext".into(),
            ));
        };
        let operation = &rqctx.endpoint.operation_id;
        match context.keys.authenticate(rqctx.request.headers()) {
            Ok(caller) => {
                context
                    .notes
                    .note(&rqctx.request_id, operation, Some(caller.name));
                Ok(Authenticated {
                    digest: caller.digest,
                    _in_flight: context.requests.start(),
                })
            }
            Err(failure) => {
                context.notes.note(&rqctx.request_id, operation, None);
                if let Some(metrics) = &context.metrics {
                    metrics.auth_rejected(failure.reason());
                }
                Err(HttpError {
                    status_code: dropshot::ErrorStatusCode::UNAUTHORIZED,
                    error_code: None,
                    external_message: failure.message().into(),
                    internal_message: format!("authentication failed: {}", failure.reason()),
                    headers: None,
                })
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
