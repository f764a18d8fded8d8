//! A strict HTTP/1.1 client for the e2e run: one connection per request, and an answer counts
//! only when it arrived whole (its `content-length`, or a chunked body through its last
//! chunk). A connection refused, reset or closed early is an `Err`, never a short body, so the
//! load can tell a request to retry from one answered wrong.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub use crate::common::Response;

pub type Result<T> = std::result::Result<T, String>;

pub fn get(port: u16, path: &str) -> Result<Response> {
    request(port, "GET", path, &[], b"")
}

pub fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<Response> {
    request(port, "POST", path, headers, body)
}

pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response> {
    let raw = exchange(port, method, path, headers, body)?;
    parse(&raw)
}

/// Sends the request and reads until the server closes; returns the raw bytes read, even if
/// the connection then failed (`Err` only when nothing at all came back).
pub fn exchange(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<u8>> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if method != "GET" {
        head.push_str("content-type: application/json\r\n");
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream
        .write_all(&request)
        .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if raw.is_empty() => return Err(format!("read: {e}")),
            // A reset after bytes came: `parse` decides whether the answer was whole.
            Err(_) => break,
        }
    }
    if raw.is_empty() {
        return Err("closed without an answer".to_owned());
    }
    Ok(raw)
}

/// Parses a whole response; a head without its end, or a body shorter than announced, is an
/// `Err` naming what was cut.
pub fn parse(raw: &[u8]) -> Result<Response> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the response head was cut")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let find = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let body = if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(rest)?
    } else if let Some(length) = find("content-length") {
        let length: usize = length.parse().map_err(|_| "bad content-length")?;
        if rest.len() < length {
            return Err(format!("body cut at {} of {length} bytes", rest.len()));
        }
        rest[..length].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// A chunked body, which must end with its last (empty) chunk.
fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunked body cut before its last chunk")?;
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let end = eol + 2 + size;
        if data.len() < end + 2 {
            return Err("chunked body cut inside a chunk".to_owned());
        }
        out.extend_from_slice(&data[eol + 2..end]);
        data = &data[end + 2..];
    }
}

#[test]
fn cut_answers_are_errors() {
    let whole = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    assert_eq!(parse(whole).unwrap().body, b"abc");
    let cut = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n";
    assert!(parse(cut).is_err());
    let short = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nabc";
    assert!(parse(short).is_err());
    assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-le").is_err());
}
