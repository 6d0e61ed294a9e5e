//! The `webhook-signature` of a delivery, as the Standard Webhooks spec
//! makes it: `v1,` + base64 of HMAC-SHA256(secret, `{id}.{timestamp}.{body}`),
//! signed by its reference implementation (`standardwebhooks`).

use standardwebhooks::Webhook;

use super::secrets::SigningSecret;

/// The `webhook-signature` header of a delivery: one `v1,…` signature per
/// secret, separated by spaces. During a rotation both the new and the
/// previous secret sign, so a receiver that holds either accepts it.
pub fn signature_header(secrets: &[SigningSecret], id: &str, timestamp: i64, body: &str) -> String {
    secrets
        .iter()
        .map(|secret| sign(secret, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

fn sign(secret: &SigningSecret, id: &str, timestamp: i64, body: &str) -> String {
    Webhook::from_bytes(secret.as_bytes().to_vec())
        .and_then(|webhook| webhook.sign(id, timestamp, body.as_bytes()))
        // `from_bytes` takes any key, and `sign` fails only for a body
        // that is not UTF-8, which a `&str` is.
        .expect("standardwebhooks signs any key and any UTF-8 body")
}

#[cfg(test)]
mod tests {
    use super::*;

    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use http::HeaderMap;

    /// The reference implementation's test vector.
    const VECTOR_SECRET: &str = "C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const VECTOR_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const VECTOR_TIMESTAMP: i64 = 1649367553;
    const VECTOR_BODY: &str = r#"{"email":"test@example.com","username":"test_user"}"#;
    const VECTOR_SIGNATURE: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    /// The vector's secret is 24 bytes, ours 32: `sign` takes the bytes.
    fn vector_sign(id: &str, timestamp: i64, body: &str) -> String {
        let key = BASE64.decode(VECTOR_SECRET).unwrap();
        Webhook::from_bytes(key)
            .unwrap()
            .sign(id, timestamp, body.as_bytes())
            .unwrap()
    }

    #[test]
    fn the_spec_s_vector() {
        assert_eq!(
            vector_sign(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY),
            VECTOR_SIGNATURE
        );
    }

    #[test]
    fn one_signature_per_secret_in_order() {
        let (new, old) = (
            SigningSecret::generate().unwrap(),
            SigningSecret::generate().unwrap(),
        );
        let header = signature_header(&[new.clone(), old.clone()], "42", 1_700_000_000, "{}");
        let signatures: Vec<&str> = header.split(' ').collect();
        assert_eq!(
            signatures,
            [
                signature_header(&[new], "42", 1_700_000_000, "{}"),
                signature_header(&[old], "42", 1_700_000_000, "{}"),
            ]
        );
        assert!(signatures.iter().all(|s| s.starts_with("v1,")));
    }

    /// What a receiver does: verify with the secret it holds (now, since
    /// `verify` checks the timestamp against its clock).
    #[test]
    fn a_receiver_holding_either_secret_accepts_both_signatures() {
        let secrets = [
            SigningSecret::generate().unwrap(),
            SigningSecret::generate().unwrap(),
        ];
        let now = chrono::Utc::now().timestamp();
        let body = r#"{"id":"42"}"#;
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", "42".parse().unwrap());
        headers.insert("webhook-timestamp", now.to_string().parse().unwrap());
        let header = signature_header(&secrets, "42", now, body);
        headers.insert("webhook-signature", header.parse().unwrap());
        for secret in &secrets {
            let receiver = Webhook::new(&secret.to_whsec()).unwrap();
            receiver.verify(body.as_bytes(), &headers).unwrap();
        }
        let stranger = Webhook::new(&SigningSecret::generate().unwrap().to_whsec()).unwrap();
        assert!(stranger.verify(body.as_bytes(), &headers).is_err());
    }
}
