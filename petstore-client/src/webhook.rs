//! [`verify_webhook`]: what a receiver of the service's webhooks (since
//! contract 1.7.0) does with each delivery — check that the service sent
//! it, then read its event.
//!
//! A delivery is a `POST` whose body is an event exactly as the feed gives
//! it ([`types::Event`], `Content-Type: application/cloudevents+json`),
//! signed as the [Standard Webhooks](https://www.standardwebhooks.com/)
//! specification says: `webhook-id` (the event's id), `webhook-timestamp`
//! (when it was sent, Unix seconds) and `webhook-signature` (`v1,` and an
//! HMAC-SHA256 of the three under the subscription's `whsec_…` secret; one
//! per secret, space-separated, while a rotated secret is still valid).
//! The check is the specification's reference implementation
//! (the `standardwebhooks` crate).

use std::fmt;

use http::HeaderMap;
use standardwebhooks::Webhook;

use crate::types;

/// The prefix of the secrets the service gives.
const WHSEC_PREFIX: &str = "whsec_";

/// The event of a webhook delivery, if it is signed with `secret` (the
/// subscription's `whsec_…` secret) and was sent within the last 5 minutes
/// (or is dated at most 5 minutes ahead, for clocks set apart).
///
/// `headers` and `body` are the request's, as received: the signature is
/// over the body's bytes, so pass them before any parsing.
///
/// Deliveries are made at least once: the same event may come again (after
/// a timeout, or from another instance of the service). Handle each once by
/// remembering the ids handled (`event.id`, which is also `webhook-id`).
/// Answer with a `2xx` status quickly, and do the work after: any other
/// status, or no answer within 15 seconds (or the limit the service's
/// operator set), is a failed delivery that the service tries again later;
/// `410 Gone` disables the subscription.
///
/// # Example
///
/// A receiver, whatever the web framework (with axum, a handler taking a
/// `HeaderMap` and `Bytes`):
///
/// ```no_run
/// use petstore_client::{EventType, verify_webhook};
/// # fn handled_before(_id: &str) -> bool { false }
///
/// /// Answers a delivery: the status to send back.
/// fn receive(secret: &str, headers: &http::HeaderMap, body: &[u8]) -> u16 {
///     let event = match verify_webhook(secret, headers, body) {
///         Ok(event) => event,
///         // Not from the service, or too old to trust: refuse it.
///         Err(error) => {
///             eprintln!("refused a delivery: {error}");
///             return 401;
///         }
///     };
///     // At least once: an event may come again.
///     if handled_before(&event.id) {
///         return 204;
///     }
///     match event.event_type() {
///         Some(EventType::OrderPlaced) => {
///             let order = event.order().expect("an order.placed event carries an order");
///             println!("order {} placed for pet {}", order.id, order.pet_id);
///         }
///         // Other types, and types added since this version: skip them.
///         _ => {}
///     }
///     204
/// }
/// ```
pub fn verify_webhook(
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<types::Event, WebhookError> {
    verify_webhook_any(&[secret], headers, body)
}

/// Like [`verify_webhook`], for a receiver in the middle of a rotation of
/// the secret: the delivery is accepted if it is signed with any of
/// `secrets`. (During a rotation the service signs with both the new and
/// the previous secret, so a receiver that still has only the previous
/// one accepts deliveries too.)
///
/// Every secret must be a valid one: an invalid secret is
/// [`WebhookError::InvalidSecret`], as is an empty list.
pub fn verify_webhook_any(
    secrets: &[&str],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<types::Event, WebhookError> {
    let webhooks = secrets
        .iter()
        .map(|secret| webhook(secret))
        .collect::<Result<Vec<_>, _>>()?;
    // The headers and the timestamp fail alike for every secret; a
    // signature may match only one.
    let mut verified = Err(WebhookError::InvalidSecret);
    for webhook in &webhooks {
        verified = webhook
            .verify(body, headers)
            .map_err(WebhookError::from_reference);
        if verified.is_ok() {
            break;
        }
    }
    verified?;
    serde_json::from_slice(body).map_err(WebhookError::NotAnEvent)
}

/// The verifier of `secret`, if it is a secret: base64 (after `whsec_`),
/// not empty.
fn webhook(secret: &str) -> Result<Webhook, WebhookError> {
    if secret
        .strip_prefix(WHSEC_PREFIX)
        .unwrap_or(secret)
        .is_empty()
    {
        return Err(WebhookError::InvalidSecret);
    }
    Webhook::new(secret).map_err(|_| WebhookError::InvalidSecret)
}

/// Why a webhook delivery is not accepted by [`verify_webhook`].
#[derive(Debug)]
#[non_exhaustive]
pub enum WebhookError {
    /// A secret given to check with is not one the service gives: `whsec_`
    /// followed by base64. (The secret itself is not repeated here.)
    InvalidSecret,
    /// A header of the signature (`webhook-id`, `webhook-timestamp` or
    /// `webhook-signature`, named here) is missing or malformed.
    InvalidHeader(&'static str),
    /// No signature of the delivery is made with the secret: the body or a
    /// header was altered, or it was signed with another secret.
    SignatureMismatch,
    /// The delivery is dated more than 5 minutes from the receiver's clock:
    /// a replay of an old delivery, or a clock set wrong.
    TimestampOutOfTolerance,
    /// The body is signed, but it is not an event this version can read.
    NotAnEvent(serde_json::Error),
}

impl WebhookError {
    /// The reference implementation's error, as ours (a function, not a
    /// `From`: its type stays out of this crate's API).
    fn from_reference(error: standardwebhooks::WebhookError) -> WebhookError {
        use standardwebhooks::WebhookError as Reference;
        match error {
            Reference::InvalidSecret(_) => WebhookError::InvalidSecret,
            Reference::MissingHeader(name) | Reference::InvalidHeader(name) => {
                WebhookError::InvalidHeader(header_name(name))
            }
            Reference::InvalidTimestamp => {
                WebhookError::InvalidHeader(standardwebhooks::HEADER_WEBHOOK_TIMESTAMP)
            }
            Reference::TimestampTooOldError | Reference::FutureTimestampError => {
                WebhookError::TimestampOutOfTolerance
            }
            // The reference signs only UTF-8 bodies: a body that is not has
            // no valid signature.
            Reference::InvalidSignature | Reference::InvalidPayload => {
                WebhookError::SignatureMismatch
            }
        }
    }
}

/// The header the reference implementation's short name (`id`,
/// `timestamp`, `signature`) stands for.
fn header_name(short: &str) -> &'static str {
    match short {
        "id" => standardwebhooks::HEADER_WEBHOOK_ID,
        "timestamp" => standardwebhooks::HEADER_WEBHOOK_TIMESTAMP,
        _ => standardwebhooks::HEADER_WEBHOOK_SIGNATURE,
    }
}

impl fmt::Display for WebhookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WebhookError::InvalidSecret => {
                f.write_str("the webhook secret is not a whsec_ secret (base64 after whsec_)")
            }
            WebhookError::InvalidHeader(name) => write!(f, "the {name} header is missing or malformed"),
            WebhookError::SignatureMismatch => f.write_str(
                "no signature of the webhook is made with the secret: altered, or signed with another secret",
            ),
            WebhookError::TimestampOutOfTolerance => f.write_str(
                "the webhook is dated more than 5 minutes from this clock: a replay, or a clock set wrong",
            ),
            WebhookError::NotAnEvent(_) => f.write_str("the webhook's body is signed but not an event"),
        }
    }
}

impl std::error::Error for WebhookError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WebhookError::NotAnEvent(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's example secret, and another.
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const OTHER: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    const BODY: &str = r#"{"specversion":"1.0","id":"281479271743490","source":"/v1","type":"order.placed","subject":"store/orders/7","time":"2026-11-24T09:30:00.123456Z","datacontenttype":"application/json","data":{"id":7,"petId":1,"status":"placed","placedAt":"2026-11-24T09:30:00.123456Z"}}"#;
    const ID: &str = "281479271743490";

    fn now() -> i64 {
        chrono::Utc::now().timestamp()
    }

    fn sign(secret: &str, timestamp: i64, body: &str) -> String {
        Webhook::new(secret)
            .unwrap()
            .sign(ID, timestamp, body.as_bytes())
            .unwrap()
    }

    /// The headers of a delivery with `signature`, sent at `timestamp`.
    fn headers(timestamp: i64, signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", ID.parse().unwrap());
        headers.insert("webhook-timestamp", timestamp.to_string().parse().unwrap());
        headers.insert("webhook-signature", signature.parse().unwrap());
        headers
    }

    #[test]
    fn a_signed_delivery_is_verified_and_its_event_read() {
        let at = now();
        let event = verify_webhook(
            SECRET,
            &headers(at, &sign(SECRET, at, BODY)),
            BODY.as_bytes(),
        )
        .unwrap();
        assert_eq!(event.id, ID);
        assert_eq!(event.event_type(), Some(crate::EventType::OrderPlaced));
        assert_eq!(event.order().unwrap().pet_id, 1);
    }

    #[test]
    fn an_altered_body_is_refused() {
        let at = now();
        let altered = BODY.replace(r#""petId":1"#, r#""petId":2"#);
        let error = verify_webhook(
            SECRET,
            &headers(at, &sign(SECRET, at, BODY)),
            altered.as_bytes(),
        )
        .unwrap_err();
        assert!(matches!(error, WebhookError::SignatureMismatch), "{error}");
    }

    #[test]
    fn another_secret_is_refused() {
        let at = now();
        let error = verify_webhook(
            OTHER,
            &headers(at, &sign(SECRET, at, BODY)),
            BODY.as_bytes(),
        )
        .unwrap_err();
        assert!(matches!(error, WebhookError::SignatureMismatch), "{error}");
    }

    #[test]
    fn a_delivery_dated_over_five_minutes_away_is_refused() {
        for at in [now() - 6 * 60, now() + 6 * 60] {
            let error = verify_webhook(
                SECRET,
                &headers(at, &sign(SECRET, at, BODY)),
                BODY.as_bytes(),
            )
            .unwrap_err();
            assert!(
                matches!(error, WebhookError::TimestampOutOfTolerance),
                "{at}: {error}"
            );
        }
        // Within the tolerance.
        let at = now() - 4 * 60;
        assert!(
            verify_webhook(
                SECRET,
                &headers(at, &sign(SECRET, at, BODY)),
                BODY.as_bytes()
            )
            .is_ok()
        );
    }

    /// During a rotation the service signs with both secrets: a receiver
    /// holding either accepts it.
    #[test]
    fn a_delivery_signed_with_two_secrets_is_accepted_with_each() {
        let at = now();
        let both = format!("{} {}", sign(OTHER, at, BODY), sign(SECRET, at, BODY));
        let headers = headers(at, &both);
        for secret in [SECRET, OTHER] {
            assert!(
                verify_webhook(secret, &headers, BODY.as_bytes()).is_ok(),
                "{secret}"
            );
        }
        let third = "whsec_dGhpcmQgc2VjcmV0IG9mIHRoZSB0ZXN0";
        assert!(verify_webhook(third, &headers, BODY.as_bytes()).is_err());
    }

    #[test]
    fn any_of_the_receiver_s_secrets_may_match() {
        let at = now();
        let headers = headers(at, &sign(SECRET, at, BODY));
        assert!(verify_webhook_any(&[OTHER, SECRET], &headers, BODY.as_bytes()).is_ok());
        let error = verify_webhook_any(&[OTHER], &headers, BODY.as_bytes()).unwrap_err();
        assert!(matches!(error, WebhookError::SignatureMismatch), "{error}");
        let error = verify_webhook_any(&[], &headers, BODY.as_bytes()).unwrap_err();
        assert!(matches!(error, WebhookError::InvalidSecret), "{error}");
    }

    #[test]
    fn bad_secrets_headers_and_bodies_say_what_is_wrong() {
        let at = now();
        let signed = headers(at, &sign(SECRET, at, BODY));
        for secret in ["whsec_", "", "whsec_not base64!"] {
            let error = verify_webhook(secret, &signed, BODY.as_bytes()).unwrap_err();
            assert!(
                matches!(error, WebhookError::InvalidSecret),
                "{secret:?}: {error}"
            );
        }

        for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            let mut missing = signed.clone();
            missing.remove(name);
            let error = verify_webhook(SECRET, &missing, BODY.as_bytes()).unwrap_err();
            assert!(
                matches!(error, WebhookError::InvalidHeader(n) if n == name),
                "{error}"
            );
            assert!(error.to_string().contains(name), "{error}");
        }
        let mut garbled = signed.clone();
        garbled.insert("webhook-timestamp", "yesterday".parse().unwrap());
        let error = verify_webhook(SECRET, &garbled, BODY.as_bytes()).unwrap_err();
        assert!(
            matches!(error, WebhookError::InvalidHeader("webhook-timestamp")),
            "{error}"
        );

        let not_an_event = r#"{"hello":"world"}"#;
        let headers = headers(at, &sign(SECRET, at, not_an_event));
        let error = verify_webhook(SECRET, &headers, not_an_event.as_bytes()).unwrap_err();
        assert!(matches!(error, WebhookError::NotAnEvent(_)), "{error}");
        assert!(std::error::Error::source(&error).is_some());
    }
}
