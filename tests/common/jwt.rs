//! Real caller identity for the Envoy tests: an ES256 key pair made in the test, its JWKS,
//! tokens signed with it (JWS compact form, as any identity provider issues them), and the
//! Envoy filters that verify them (`envoy.filters.http.jwt_authn` with a local JWKS) or strip
//! a header from the client's request (`envoy.filters.http.header_mutation`), placed in the
//! chain before toolsift.

use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

/// The issuer of the tokens the tests sign (Istio names the metadata key after it).
pub const ISSUER: &str = "https://issuer.toolsift.test";

/// The audience the tokens carry and `jwt_authn` requires.
pub const AUDIENCE: &str = "toolsift-tests";

/// The dynamic-metadata namespace `jwt_authn` writes payloads into.
pub const NAMESPACE: &str = "envoy.filters.http.jwt_authn";

/// base64url without padding (RFC 7515 §2).
pub fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// An ES256 (ECDSA P-256, SHA-256) signing key made for one test run.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
    pub kid: String,
}

impl SigningKey {
    pub fn generate(kid: &str) -> SigningKey {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        SigningKey {
            pair,
            rng,
            kid: kid.to_owned(),
        }
    }

    /// The public key as a JWK (RFC 7518 §6.2: the uncompressed point's x and y).
    pub fn jwk(&self) -> Value {
        let point = self.pair.public_key().as_ref();
        assert_eq!(
            (point.len(), point[0]),
            (65, 4),
            "an uncompressed P-256 point"
        );
        json!({
            "kty": "EC",
            "crv": "P-256",
            "x": base64url(&point[1..33]),
            "y": base64url(&point[33..65]),
            "kid": self.kid,
            "alg": "ES256",
            "use": "sig",
        })
    }

    /// A token over `claims`: `header.payload.signature`, the signature the fixed-size r||s
    /// that JWS uses for ES256 (RFC 7518 §3.4).
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": self.kid});
        let signing_input = format!(
            "{}.{}",
            base64url(header.to_string().as_bytes()),
            base64url(claims.to_string().as_bytes())
        );
        let signature = self.pair.sign(&self.rng, signing_input.as_bytes()).unwrap();
        format!("{signing_input}.{}", base64url(signature.as_ref()))
    }

    /// A token for the tests' issuer and audience, valid for an hour, with `claims` added.
    pub fn token(&self, claims: Value) -> String {
        self.sign(&claims_with(ISSUER, claims))
    }
}

/// `claims` with `iss`, `aud`, `iat` and `exp` (an hour on) added.
pub fn claims_with(issuer: &str, claims: Value) -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut all = json!({"iss": issuer, "aud": AUDIENCE, "iat": now, "exp": now + 3600});
    for (k, v) in claims.as_object().expect("claims are an object") {
        all[k] = v.clone();
    }
    all
}

/// A JWKS holding the public keys of `keys`.
pub fn jwks(keys: &[&SigningKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
}

/// One `jwt_authn` provider: a local JWKS, the payload in metadata under `payload_key`.
pub fn provider(issuer: &str, keys: &[&SigningKey], payload_key: &str) -> Value {
    json!({
        "issuer": issuer,
        "audiences": [AUDIENCE],
        "local_jwks": {"inline_string": jwks(keys)},
        "payload_in_metadata": payload_key,
        "forward": true,
    })
}

/// The `jwt_authn` filter's config: `providers` by name, required on every path, a request
/// without a token let through (`allow_missing`: toolsift then sees no identity), a bad token
/// answered 401 by the filter.
pub fn jwt_authn(providers: &[(&str, Value)]) -> Value {
    let mut any: Vec<Value> = providers
        .iter()
        .map(|(name, _)| json!({"provider_name": name}))
        .collect();
    any.push(json!({"allow_missing": {}}));
    json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        "providers": providers.iter().map(|(n, p)| ((*n).to_owned(), p.clone())).collect::<serde_json::Map<String, Value>>(),
        "rules": [{"match": {"prefix": "/"}, "requires": {"requires_any": {"requirements": any}}}],
    })
}

/// Envoy's `header_mutation` filter removing `headers` from the request.
pub fn strip_request_headers(headers: &[&str]) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
        "mutations": {"request_mutations": headers.iter().map(|h| json!({"remove": h})).collect::<Vec<_>>()},
    })
}

/// The rendered Envoy YAML with `filters` (name, typed_config) inserted, in order, before
/// toolsift in the HTTP filter chain. The typed configs go in as JSON, which YAML reads.
pub fn before_toolsift(yaml: &str, filters: &[(&str, Value)]) -> String {
    let at = yaml
        .find("- name: toolsift\n")
        .expect("the toolsift filter in the Envoy config");
    let line_start = yaml[..at].rfind('\n').map_or(0, |i| i + 1);
    let indent = &yaml[line_start..at];
    let mut inserted = String::new();
    for (name, config) in filters {
        inserted.push_str(&format!(
            "- name: {name}\n{indent}  typed_config: {config}\n{indent}"
        ));
    }
    format!("{}{inserted}{}", &yaml[..at], &yaml[at..])
}

/// An identity provider's JWKS endpoint: answers every request with the JWKS of `keys` (what
/// `jwt_authn`'s `remote_jwks` fetches), on a free port, for the rest of the test process.
pub struct JwksServer {
    pub port: u16,
    /// Requests answered.
    pub fetches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl JwksServer {
    pub fn start(keys: &[&SigningKey]) -> JwksServer {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let body = jwks(keys);
        let fetches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&fetches);
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                // One request per connection: read its head, answer, close.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        JwksServer { port, fetches }
    }
}
