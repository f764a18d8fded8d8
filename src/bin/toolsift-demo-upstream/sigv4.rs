//! AWS Signature Version 4, checked as Bedrock checks it, so that a gateway that changes a
//! signed request (its body, or a header the client signed) gets the 403 real Bedrock gives.
//!
//! A Bedrock request with `authorization: AWS4-HMAC-SHA256 Credential=…` is verified against
//! the demo's own credentials ([`ACCESS_KEY_ID`], [`SECRET_ACCESS_KEY`]: clients in the tests
//! sign with these); another access key is refused as an unknown one. Unsigned requests are
//! accepted, as everywhere in the demo. The payload hash is that of the body received.
//! Query strings are compared as sent, sorted (Bedrock's Converse calls have none).

use hyper::StatusCode;
use hyper::header::{AUTHORIZATION, HOST, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Response, header::HeaderName};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::report::sha256_hex;
use crate::{ReplyBody, json_response};

/// The demo's credentials (not secret: they open nothing but this stand-in).
pub(crate) const ACCESS_KEY_ID: &str = "AKIDTOOLSIFTDEMO";
pub(crate) const SECRET_ACCESS_KEY: &str = "toolsift-demo-secret-access-key";

const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const SIGNATURE_MISMATCH: &str = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";

/// Why a signed request is refused: Bedrock's error type and message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    kind: &'static str,
    message: &'static str,
}

impl Refusal {
    /// Bedrock's 403.
    pub(crate) fn response(&self) -> Response<ReplyBody> {
        let body = json!({ "message": self.message });
        let mut response = json_response(StatusCode::FORBIDDEN, &body);
        response
            .headers_mut()
            .insert("x-amzn-errortype", HeaderValue::from_static(self.kind));
        response
    }
}

/// Accepts an unsigned request or one whose signature holds.
pub(crate) fn check(parts: &Parts, body: &[u8]) -> Result<(), Refusal> {
    let Some(authorization) = parts.headers.get(AUTHORIZATION) else {
        return Ok(());
    };
    let Some(fields) = authorization
        .to_str()
        .ok()
        .and_then(|text| text.strip_prefix(ALGORITHM))
    else {
        return Ok(());
    };
    let field = |name: &str| {
        fields
            .split(',')
            .find_map(|part| part.trim().strip_prefix(name)?.strip_prefix('='))
    };
    let (Some(credential), Some(signed_headers), Some(signature)) = (
        field("Credential"),
        field("SignedHeaders"),
        field("Signature"),
    ) else {
        return Err(refusal(
            "IncompleteSignatureException",
            "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters.",
        ));
    };
    let Some((key_id, scope)) = credential.split_once('/') else {
        return Err(refusal(
            "IncompleteSignatureException",
            "Credential must have the form KeyId/date/region/service/aws4_request.",
        ));
    };
    if key_id != ACCESS_KEY_ID {
        return Err(refusal(
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ));
    }
    let date_time = parts
        .headers
        .get("x-amz-date")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let expected = signature_of(parts, body, signed_headers, date_time, scope);
    if expected.as_deref() == Some(signature) {
        Ok(())
    } else {
        Err(refusal("InvalidSignatureException", SIGNATURE_MISMATCH))
    }
}

fn refusal(kind: &'static str, message: &'static str) -> Refusal {
    Refusal { kind, message }
}

/// The signature the demo's secret gives the request; `None` if the scope is malformed.
fn signature_of(
    parts: &Parts,
    body: &[u8],
    signed_headers: &str,
    date_time: &str,
    scope: &str,
) -> Option<String> {
    let mut scope_parts = scope.split('/');
    let (date, region, service) = (
        scope_parts.next()?,
        scope_parts.next()?,
        scope_parts.next()?,
    );
    let canonical = canonical_request(parts, body, signed_headers);
    let to_sign = format!(
        "{ALGORITHM}\n{date_time}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let mut key = hmac(
        format!("AWS4{SECRET_ACCESS_KEY}").as_bytes(),
        date.as_bytes(),
    );
    for step in [region, service, "aws4_request"] {
        key = hmac(&key, step.as_bytes());
    }
    Some(hex(&hmac(&key, to_sign.as_bytes())))
}

fn canonical_request(parts: &Parts, body: &[u8], signed_headers: &str) -> String {
    let mut query: Vec<&str> = parts
        .uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .collect();
    query.sort_unstable();
    let mut headers = String::new();
    for name in signed_headers.split(';') {
        let values: Vec<String> = match HeaderName::from_bytes(name.as_bytes()) {
            // HTTP/2 carries the host in `:authority`.
            Ok(header) if header == HOST && !parts.headers.contains_key(HOST) => parts
                .uri
                .authority()
                .map(|authority| vec![authority.to_string()])
                .unwrap_or_default(),
            Ok(header) => parts
                .headers
                .get_all(header)
                .iter()
                .map(|value| {
                    String::from_utf8_lossy(value.as_bytes())
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        headers.push_str(name);
        headers.push(':');
        headers.push_str(&values.join(","));
        headers.push('\n');
    }
    format!(
        "{}\n{}\n{}\n{headers}\n{signed_headers}\n{}",
        parts.method,
        uri_encode_path(parts.uri.path()),
        query.join("&"),
        sha256_hex(body)
    )
}

/// Every byte but RFC 3986's unreserved characters and `/` percent-encoded (services other
/// than S3 encode the already encoded path once more).
fn uri_encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// HMAC-SHA256 (RFC 2104).
fn hmac(key: &[u8], message: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 64;
    let mut block = [0_u8; BLOCK];
    if key.len() > BLOCK {
        let digest = Sha256::digest(key);
        block
            .iter_mut()
            .zip(digest.iter())
            .for_each(|(b, k)| *b = *k);
    } else {
        block.iter_mut().zip(key).for_each(|(b, k)| *b = *k);
    }
    let pad = |byte: u8| block.iter().map(|k| k ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2.
        assert_eq!(
            hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        assert_eq!(
            hex(&hmac(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    /// Signs a request of `body`, lets `tamper` change it, and checks it as received with
    /// `received` for a body.
    fn signed(
        path: &str,
        body: &str,
        received: &str,
        tamper: impl FnOnce(&mut Parts),
    ) -> Result<(), u16> {
        let request = hyper::Request::builder()
            .method("POST")
            .uri(path)
            .header("host", "bedrock-runtime.us-east-1.amazonaws.com")
            .header("content-type", "application/json")
            .header("x-amz-date", "20260101T000000Z")
            .body(())
            .unwrap();
        let (mut parts, ()) = request.into_parts();
        let signed_headers = "content-type;host;x-amz-date";
        let scope = "20260101/us-east-1/bedrock/aws4_request";
        let signature = signature_of(
            &parts,
            body.as_bytes(),
            signed_headers,
            "20260101T000000Z",
            scope,
        )
        .unwrap();
        let authorization = format!(
            "{ALGORITHM} Credential={ACCESS_KEY_ID}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
        );
        parts
            .headers
            .insert(AUTHORIZATION, HeaderValue::try_from(authorization).unwrap());
        tamper(&mut parts);
        check(&parts, received.as_bytes()).map_err(|refused| refused.response().status().as_u16())
    }

    #[test]
    fn accepts_what_was_signed_and_refuses_changes() {
        let path = "/model/anthropic.claude-3%3A0/converse";
        assert_eq!(signed(path, "{}", "{}", |_| {}), Ok(()));
        // The body is hashed into the signature.
        assert_eq!(signed(path, "{}", "{ }", |_| {}), Err(403));
        let unsigned = hyper::Request::builder().uri(path).body(()).unwrap();
        assert!(check(&unsigned.into_parts().0, b"{}").is_ok());
        assert_eq!(
            signed(path, "{}", "{}", |parts| {
                parts.headers.insert(
                    "content-type",
                    HeaderValue::from_static("application/json; charset=utf-8"),
                );
            }),
            Err(403)
        );
        assert_eq!(
            signed(path, "{}", "{}", |parts| {
                let value = parts.headers.get(AUTHORIZATION).unwrap().to_str().unwrap();
                let other = value.replace(ACCESS_KEY_ID, "AKIDOTHER");
                parts
                    .headers
                    .insert(AUTHORIZATION, HeaderValue::try_from(other).unwrap());
            }),
            Err(403)
        );
        // Unsigned headers may change.
        assert_eq!(
            signed(path, "{}", "{}", |parts| {
                parts
                    .headers
                    .insert("x-forwarded-proto", HeaderValue::from_static("http"));
            }),
            Ok(())
        );
        assert_eq!(
            uri_encode_path(path),
            "/model/anthropic.claude-3%253A0/converse"
        );
    }
}
