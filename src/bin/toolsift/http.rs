//! A minimal blocking HTTP/1.1 client for the embeddings service of `--embeddings-url`: plain
//! `http://` only, one connection per request (`connection: close`), answers framed by
//! `content-length`, chunked, or the end of the connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long to wait for a connection, and for each read or write.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(300);
/// Answers larger than this are refused (4,096 vectors of 1,536 floats as JSON fit).
const MAX_BODY: usize = 256 << 20;
const MAX_HEAD_LINES: usize = 200;

/// An `http://host[:port][/path]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// The `host[:port]` of the URL, for the `host` header.
    pub authority: String,
    /// The path and query; `/v1/embeddings` when the URL has no path.
    pub path: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("`{url}` is not a URL: expected http://host[:port]/path"))?;
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(format!(
                "`{url}`: only http:// URLs are supported (not {scheme}://); put a local \
                 proxy in front of an https service"
            ));
        }
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (
                rest.get(..i).unwrap_or_default(),
                rest.get(i..).unwrap_or("/"),
            ),
            None => (rest, ""),
        };
        let path = match path {
            "" | "/" => "/v1/embeddings".to_owned(),
            p if p.starts_with('?') => format!("/v1/embeddings{p}"),
            p => p.to_owned(),
        };
        if authority.contains('@') {
            return Err(format!(
                "`{url}`: user information in the URL is not supported"
            ));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            // [v6 address]:port
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| format!("`{url}`: unclosed `[` in the host"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("`{url}`: no host"));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| format!("`{url}`: invalid port `{p}`"))?,
        };
        Ok(Url {
            host: host.to_owned(),
            port,
            authority: authority.to_owned(),
            path,
        })
    }
}

/// A complete response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub reason: String,
    pub body: Vec<u8>,
}

/// Sends one request and reads the whole answer. Errors say what failed (connect, send,
/// read), without the URL: the caller names it.
pub fn request(
    url: &Url,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, String> {
    let mut stream = connect(url)?;
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nhost: {}\r\nuser-agent: toolsift/{}\r\naccept: application/json\r\nconnection: close\r\n",
        url.path,
        url.authority,
        env!("CARGO_PKG_VERSION")
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if method != "GET" || !body.is_empty() {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    stream
        .write_all(&bytes)
        .and_then(|()| stream.flush())
        .map_err(|e| format!("cannot send the request: {e}"))?;
    read_response(BufReader::new(stream), method == "HEAD")
}

/// POSTs a JSON body; the body of a 2xx answer, or an error naming the status and the start
/// of the answer.
pub fn post_json(url: &Url, headers: &[(&str, &str)], body: &str) -> Result<Vec<u8>, String> {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    let response = request(url, "POST", &all, body.as_bytes())?;
    if (200..300).contains(&response.status) {
        return Ok(response.body);
    }
    let text = String::from_utf8_lossy(&response.body);
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let shown: String = flat.chars().take(300).collect();
    Err(format!(
        "answered HTTP {} {}{}",
        response.status,
        response.reason,
        if shown.is_empty() {
            String::new()
        } else {
            format!(": {shown}")
        }
    ))
}

fn connect(url: &Url) -> Result<TcpStream, String> {
    let addresses = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", url.host))?;
    let mut last = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(stream) => {
                stream
                    .set_read_timeout(Some(IO_TIMEOUT))
                    .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
                    .map_err(|e| format!("cannot set timeouts: {e}"))?;
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(format!("cannot connect to {address}: {e}")),
        }
    }
    Err(last.unwrap_or_else(|| format!("{} resolves to no address", url.host)))
}

fn read_line(reader: &mut impl BufRead) -> Result<String, String> {
    let mut line = Vec::new();
    reader
        .take(64 * 1024)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    if line.last() != Some(&b'\n') {
        return Err("the connection closed in the middle of the answer's head".to_owned());
    }
    Ok(String::from_utf8_lossy(&line).trim_end().to_owned())
}

/// Reads a response (skipping `100 Continue` and other interim ones).
pub fn read_response(mut reader: impl BufRead, head_only: bool) -> Result<Response, String> {
    loop {
        let status_line = read_line(&mut reader)?;
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        let status = parts
            .next()
            .and_then(|s| s.parse::<u16>().ok())
            .filter(|_| version.starts_with("HTTP/1."))
            .ok_or_else(|| format!("not an HTTP/1.x answer: `{status_line}`"))?;
        let reason = parts.next().unwrap_or_default().to_owned();
        let mut length: Option<usize> = None;
        let mut chunked = false;
        let mut lines = 0;
        loop {
            let line = read_line(&mut reader)?;
            if line.is_empty() {
                break;
            }
            lines += 1;
            if lines > MAX_HEAD_LINES {
                return Err("the answer's head is too long".to_owned());
            }
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    value
                        .parse()
                        .map_err(|_| format!("invalid content-length `{value}`"))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
            }
        }
        if (100..200).contains(&status) {
            continue;
        }
        let body = if head_only || status == 204 || status == 304 {
            Vec::new()
        } else if chunked {
            read_chunked(&mut reader)?
        } else if let Some(n) = length {
            if n > MAX_BODY {
                return Err(format!("the answer is too large ({n} bytes)"));
            }
            let mut body = vec![0; n];
            reader.read_exact(&mut body).map_err(|e| {
                format!("the answer ended before its content-length of {n} bytes: {e}")
            })?;
            body
        } else {
            let mut body = Vec::new();
            reader
                .take(MAX_BODY as u64 + 1)
                .read_to_end(&mut body)
                .map_err(|e| format!("cannot read the answer: {e}"))?;
            if body.len() > MAX_BODY {
                return Err("the answer is too large".to_owned());
            }
            body
        };
        return Ok(Response {
            status,
            reason,
            body,
        });
    }
}

fn read_chunked(reader: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line = read_line(reader)?;
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("invalid chunk size `{size_text}`"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_line(reader)?.is_empty() {}
            return Ok(body);
        }
        if body.len().saturating_add(size) > MAX_BODY {
            return Err("the answer is too large".to_owned());
        }
        let start = body.len();
        body.resize(start + size, 0);
        let chunk = body.get_mut(start..).unwrap_or_default();
        reader
            .read_exact(chunk)
            .map_err(|e| format!("the answer ended inside a chunk: {e}"))?;
        if !read_line(reader)?.is_empty() {
            return Err("a chunk is longer than its size".to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = Url::parse("http://127.0.0.1:18100/v1/embeddings").unwrap();
        assert_eq!(
            (
                u.host.as_str(),
                u.port,
                u.authority.as_str(),
                u.path.as_str()
            ),
            ("127.0.0.1", 18100, "127.0.0.1:18100", "/v1/embeddings")
        );
        let u = Url::parse("HTTP://embed.local").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/v1/embeddings"));
        let u = Url::parse("http://[::1]:9000/embed?x=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 9000, "/embed?x=1")
        );
        for bad in [
            "https://api.openai.com/v1/embeddings",
            "localhost:8080",
            "http://:80/x",
            "http://host:99999/x",
            "http://user@host/x",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
        assert!(
            Url::parse("https://x/y")
                .unwrap_err()
                .contains("only http://")
        );
    }

    #[test]
    fn reads_lengths_chunks_and_closes() {
        let read = |raw: &str| read_response(raw.as_bytes(), false);
        let r = read("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello+extra").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
        let r = read(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
             3;x=y\r\nabc\r\n2\r\nde\r\n0\r\ntrailer: 1\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, b"abcde");
        let r = read("HTTP/1.0 503 Service Unavailable\r\n\r\ndown").unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), r.body.as_slice()),
            (503, "Service Unavailable", &b"down"[..])
        );
        assert!(read("HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort").is_err());
        assert!(read("SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(read("HTTP/1.1 200 OK\r\ncontent-len").is_err());
    }
}
