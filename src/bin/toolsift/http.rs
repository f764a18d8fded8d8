//! The embeddings service's HTTP client for `--embeddings-url`: `ureq` (blocking, HTTP/1.1),
//! `http://` or `https://` (rustls, with the Mozilla roots of `webpki-roots`, or the CA
//! certificates of `--embeddings-ca-cert`). Secrets given to it (API keys, header values) are
//! never part of an error: an answer that quotes one has it replaced by `[redacted]`.

use std::time::Duration;

use ureq::Agent;
use ureq::tls::{Certificate, RootCerts, TlsConfig};

/// How long to wait for a connection, and for the whole exchange (a batch of 64 tool texts on
/// a slow CPU model takes seconds; a hosted API, well under one).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(300);
/// Answers larger than this are refused (4,096 vectors of 1,536 floats as JSON fit).
const MAX_BODY: u64 = 256 << 20;

/// An embeddings endpoint: `http(s)://host[:port][/path]`, `/v1/embeddings` when it has no path.
pub fn normalize_url(url: &str) -> Result<String, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("`{url}` is not a URL: expected http(s)://host[:port]/path"))?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!(
            "`{url}`: only http:// and https:// URLs are supported (not {scheme}://)"
        ));
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        // It would be echoed in every message that names the service.
        return Err(
            "credentials in the URL (user:password@) are not supported (and not \
                    shown here); use --embeddings-header or TOOLSIFT_EMBEDDINGS_API_KEY"
                .to_owned(),
        );
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Err(format!("`{url}`: no host"));
    }
    // `host:port` or `[v6]:port`: the port must be one.
    let after_host = authority
        .rsplit_once(']')
        .map_or(authority, |(_, rest)| rest);
    if let Some((_, port)) = after_host.rsplit_once(':') {
        if !port.parse::<u16>().is_ok_and(|p| p > 0) {
            return Err(format!("`{url}`: invalid port `{port}`"));
        }
    }
    let path = match path {
        "" | "/" => "/v1/embeddings".to_owned(),
        p if p.starts_with('?') => format!("/v1/embeddings{p}"),
        p => p.to_owned(),
    };
    let url = format!("{}://{authority}{path}", scheme.to_ascii_lowercase());
    // Let the HTTP crate judge the rest (ports, characters).
    url.parse::<ureq::http::Uri>()
        .map_err(|e| format!("`{url}`: {e}"))?;
    Ok(url)
}

/// A `name: value` header of `--embeddings-header`.
pub fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or("expected `name: value`, e.g. `authorization: Bearer …`")?;
    let name = name.trim().to_ascii_lowercase();
    let value = value.trim().to_owned();
    ureq::http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a header name"))?;
    if value.is_empty() || ureq::http::HeaderValue::from_str(&value).is_err() {
        return Err(format!(
            "the value of `{name}` is empty or not a header value"
        ));
    }
    Ok((name, value))
}

pub struct Client {
    agent: Agent,
    url: String,
    headers: Vec<(String, String)>,
    /// Values that must never appear in an error.
    secrets: Vec<String>,
}

impl Client {
    /// `ca_pem`: PEM CA certificates to trust instead of the Mozilla roots. Every header value
    /// counts as a secret.
    pub fn new(
        url: String,
        headers: Vec<(String, String)>,
        ca_pem: Option<&[u8]>,
    ) -> Result<Client, String> {
        let roots = match ca_pem {
            None => RootCerts::WebPki,
            Some(pem) => {
                let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(pem)
                    .filter_map(|item| match item {
                        Ok(ureq::tls::PemItem::Certificate(cert)) => Some(Ok(cert)),
                        Ok(_) => None,
                        Err(e) => Some(Err(e)),
                    })
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--embeddings-ca-cert: {e}"))?;
                if certs.is_empty() {
                    return Err("--embeddings-ca-cert: no PEM certificate in the file".into());
                }
                RootCerts::new_with_certs(&certs)
            }
        };
        let agent: Agent = Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false)
            .user_agent(format!("toolsift/{}", env!("CARGO_PKG_VERSION")))
            .tls_config(TlsConfig::builder().root_certs(roots).build())
            .build()
            .into();
        let secrets = headers
            .iter()
            .flat_map(|(_, value)| {
                // `Bearer KEY`: the key alone may be quoted too.
                let last = value.rsplit(' ').next().unwrap_or(value);
                [value.clone(), last.to_owned()]
            })
            .filter(|s| s.len() >= 8)
            .collect();
        Ok(Client {
            agent,
            url,
            headers,
            secrets,
        })
    }

    /// POSTs a JSON body; the answer's body when the status is 2xx.
    pub fn post_json(&self, body: &str) -> Result<Vec<u8>, String> {
        self.exchange(body).map_err(|e| self.redact(e))
    }

    fn exchange(&self, body: &str) -> Result<Vec<u8>, String> {
        let mut request = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json");
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let mut response = request.send(body).map_err(describe)?;
        let status = response.status();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| format!("cannot read the answer: {}", describe(e)))?;
        if status.is_success() {
            return Ok(bytes);
        }
        let text = String::from_utf8_lossy(&bytes);
        let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let shown: String = flat.chars().take(300).collect();
        Err(format!(
            "answered HTTP {} {}{}",
            status.as_u16(),
            status.canonical_reason().unwrap_or_default(),
            if shown.is_empty() {
                String::new()
            } else {
                format!(": {shown}")
            }
        ))
    }

    fn redact(&self, mut message: String) -> String {
        for secret in &self.secrets {
            message = message.replace(secret.as_str(), "[redacted]");
        }
        message
    }
}

fn describe(error: ureq::Error) -> String {
    match error {
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            format!("cannot connect: {e}")
        }
        ureq::Error::HostNotFound => "cannot connect: host not found".to_owned(),
        ureq::Error::ConnectionFailed => "cannot connect".to_owned(),
        ureq::Error::Timeout(what) => format!("timed out ({what})"),
        ureq::Error::Tls(e) => format!("TLS: {e}"),
        ureq::Error::Rustls(e) => format!("TLS: {e}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_urls() {
        assert_eq!(
            normalize_url("http://127.0.0.1:18100").unwrap(),
            "http://127.0.0.1:18100/v1/embeddings"
        );
        assert_eq!(
            normalize_url("HTTPS://api.openai.com/v1/embeddings").unwrap(),
            "https://api.openai.com/v1/embeddings"
        );
        assert_eq!(
            normalize_url("http://h?api-version=1").unwrap(),
            "http://h/v1/embeddings?api-version=1"
        );
        for bad in [
            "ftp://h/x",
            "h:80/x",
            "http:///x",
            "https://user:secret@h/x",
            "http://h:99999/x",
        ] {
            assert!(normalize_url(bad).is_err(), "{bad}");
        }
        assert!(
            !normalize_url("https://user:secret@h/x")
                .unwrap_err()
                .contains("secret@")
        );
    }

    #[test]
    fn parses_headers() {
        assert_eq!(
            parse_header("Authorization: Bearer sk-1").unwrap(),
            ("authorization".to_owned(), "Bearer sk-1".to_owned())
        );
        assert_eq!(
            parse_header("x-api-key:k:with:colons").unwrap().1,
            "k:with:colons"
        );
        for bad in ["no colon", ": value", "bad name: v", "x-empty:  "] {
            assert!(parse_header(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_never_quote_secrets() {
        let client = Client::new(
            "http://127.0.0.1:1/v1/embeddings".to_owned(),
            vec![(
                "authorization".to_owned(),
                "Bearer sk-secret-12345".to_owned(),
            )],
            None,
        )
        .unwrap();
        let quoted = client.redact("Incorrect API key provided: sk-secret-12345.".to_owned());
        assert_eq!(quoted, "Incorrect API key provided: [redacted].");
    }
}
