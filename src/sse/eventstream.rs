//! AWS's binary event-stream framing (`application/vnd.amazon.eventstream`), in which Bedrock's
//! `ConverseStream` answers: <https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream>
//! and the AWS SDKs' `eventstream` decoders.
//!
//! A message is a prelude (total length u32 BE, headers length u32 BE, CRC-32 of those eight
//! bytes), the headers (each: name length u8, name, value type u8, value), the payload, and the
//! CRC-32 of everything before it (CRC-32/ISO-HDLC, as zlib computes it). The AWS SDKs check
//! both CRCs, so every message written here carries correct ones.
//!
//! Inside toolsift an event stream is handled as its transcription into [`Frame`]s (see
//! [`frame_of`]): the dialect's codec reads and edits frames as it does SSE events, and
//! [`message_of`] writes them back.

use super::Frame;

/// The content type of an event stream.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// The prelude (12 bytes) and the message CRC (4): the size of a message with no headers and no
/// payload.
const OVERHEAD: usize = 16;
/// The AWS SDKs' limits: headers up to 128 KiB, a payload up to 16 MiB.
const MAX_HEADERS: usize = 128 * 1024;
const MAX_MESSAGE: usize = OVERHEAD + MAX_HEADERS + 16 * 1024 * 1024;

/// Why bytes are not an event-stream message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// A length out of bounds (the prelude's, or a header's past the headers' end).
    Length,
    /// The prelude's CRC does not match.
    PreludeCrc,
    /// The message's CRC does not match.
    MessageCrc,
    /// A header of unknown type, or a string header that is not UTF-8.
    Header,
}

/// One header value, of every type the framing defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Types 0 (true) and 1 (false): no value bytes.
    Bool(bool),
    /// Type 2.
    Byte(i8),
    /// Type 3.
    Short(i16),
    /// Type 4.
    Integer(i32),
    /// Type 5.
    Long(i64),
    /// Type 6: u16 length, bytes.
    Bytes(Vec<u8>),
    /// Type 7: u16 length, UTF-8 bytes.
    String(String),
    /// Type 8: milliseconds since the epoch.
    Timestamp(i64),
    /// Type 9: 16 bytes.
    Uuid([u8; 16]),
}

/// One message: its headers in order, and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub headers: Vec<(String, Value)>,
    pub payload: Vec<u8>,
}

impl Message {
    /// The value of string header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|(n, v)| match v {
            Value::String(s) if n == name => Some(s.as_str()),
            _ => None,
        })
    }
}

/// The CRC-32/ISO-HDLC table (reflected polynomial 0xEDB88320), built at compile time (an
/// index out of bounds here would fail the build, never run).
#[allow(clippy::indexing_slicing)]
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut crc = n as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[n] = crc;
        n += 1;
    }
    table
};

/// CRC-32 as zlib computes it.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0_u32;
    for &byte in bytes {
        let slot = usize::from((crc as u8) ^ byte);
        crc = (crc >> 8) ^ CRC_TABLE.get(slot).copied().unwrap_or_default();
    }
    !crc
}

/// A cursor over bytes that never reads past their end.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.bytes.len() {
            return Err(Error::Length);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        self.take(N)?.try_into().map_err(|_| Error::Length)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(u8::from_be_bytes(self.array()?))
    }

    fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.array()?))
    }
}

/// The message at the start of `bytes` and how many bytes it spans; `Ok(None)` when `bytes`
/// holds only its beginning (the rest is still to come).
pub fn decode(bytes: &[u8]) -> Result<Option<(Message, usize)>, Error> {
    let mut prelude = Reader { bytes };
    let (Ok(total), Ok(headers_len), Ok(prelude_crc)) =
        (prelude.u32(), prelude.u32(), prelude.u32())
    else {
        return Ok(None);
    };
    if crc32(bytes.get(..8).ok_or(Error::Length)?) != prelude_crc {
        return Err(Error::PreludeCrc);
    }
    let total = usize::try_from(total).map_err(|_| Error::Length)?;
    let headers_len = usize::try_from(headers_len).map_err(|_| Error::Length)?;
    if !(OVERHEAD..=MAX_MESSAGE).contains(&total)
        || headers_len > MAX_HEADERS
        || headers_len > total - OVERHEAD
    {
        return Err(Error::Length);
    }
    let Some(message) = bytes.get(..total) else {
        return Ok(None);
    };
    let (covered, crc) = message.split_at(total - 4);
    let crc: [u8; 4] = crc.try_into().map_err(|_| Error::Length)?;
    if crc32(covered) != u32::from_be_bytes(crc) {
        return Err(Error::MessageCrc);
    }
    let mut body = Reader {
        bytes: covered.get(12..).ok_or(Error::Length)?,
    };
    let mut headers = Reader {
        bytes: body.take(headers_len)?,
    };
    let mut parsed = Vec::new();
    while !headers.bytes.is_empty() {
        parsed.push(header(&mut headers)?);
    }
    Ok(Some((
        Message {
            headers: parsed,
            payload: body.bytes.to_vec(),
        },
        total,
    )))
}

/// One header.
fn header(r: &mut Reader) -> Result<(String, Value), Error> {
    let name_len = usize::from(r.u8()?);
    let name = std::str::from_utf8(r.take(name_len)?).map_err(|_| Error::Header)?;
    let value = match r.u8()? {
        0 => Value::Bool(true),
        1 => Value::Bool(false),
        2 => Value::Byte(i8::from_be_bytes(r.array()?)),
        3 => Value::Short(i16::from_be_bytes(r.array()?)),
        4 => Value::Integer(i32::from_be_bytes(r.array()?)),
        5 => Value::Long(i64::from_be_bytes(r.array()?)),
        6 => {
            let len = usize::from(r.u16()?);
            Value::Bytes(r.take(len)?.to_vec())
        }
        7 => {
            let len = usize::from(r.u16()?);
            let text = std::str::from_utf8(r.take(len)?).map_err(|_| Error::Header)?;
            Value::String(text.to_owned())
        }
        8 => Value::Timestamp(i64::from_be_bytes(r.array()?)),
        9 => Value::Uuid(r.array()?),
        _ => return Err(Error::Header),
    };
    Ok((name.to_owned(), value))
}

/// `message` as bytes, CRCs included; `None` if a length does not fit the framing (a name over
/// 255 bytes, a value over 64 KiB, a message over the limits).
pub fn encode(message: &Message) -> Option<Vec<u8>> {
    let mut headers = Vec::new();
    for (name, value) in &message.headers {
        headers.push(u8::try_from(name.len()).ok()?);
        headers.extend_from_slice(name.as_bytes());
        match value {
            Value::Bool(b) => headers.push(if *b { 0 } else { 1 }),
            Value::Byte(v) => {
                headers.push(2);
                headers.extend_from_slice(&v.to_be_bytes());
            }
            Value::Short(v) => {
                headers.push(3);
                headers.extend_from_slice(&v.to_be_bytes());
            }
            Value::Integer(v) => {
                headers.push(4);
                headers.extend_from_slice(&v.to_be_bytes());
            }
            Value::Long(v) => {
                headers.push(5);
                headers.extend_from_slice(&v.to_be_bytes());
            }
            Value::Bytes(bytes) => {
                headers.push(6);
                headers.extend_from_slice(&u16::try_from(bytes.len()).ok()?.to_be_bytes());
                headers.extend_from_slice(bytes);
            }
            Value::String(text) => {
                headers.push(7);
                headers.extend_from_slice(&u16::try_from(text.len()).ok()?.to_be_bytes());
                headers.extend_from_slice(text.as_bytes());
            }
            Value::Timestamp(v) => {
                headers.push(8);
                headers.extend_from_slice(&v.to_be_bytes());
            }
            Value::Uuid(bytes) => {
                headers.push(9);
                headers.extend_from_slice(bytes);
            }
        }
    }
    let total = OVERHEAD + headers.len() + message.payload.len();
    if headers.len() > MAX_HEADERS || total > MAX_MESSAGE {
        return None;
    }
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&u32::try_from(total).ok()?.to_be_bytes());
    out.extend_from_slice(&u32::try_from(headers.len()).ok()?.to_be_bytes());
    let prelude_crc = crc32(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&headers);
    out.extend_from_slice(&message.payload);
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    Some(out)
}

/// The prefix of a frame's event name that marks an exception message.
const EXCEPTION: &str = "exception:";

/// `message` transcribed as a frame: `event` is its `:event-type` (`exception:` and the
/// `:exception-type` for an exception), `data` its payload (JSON text). `None` for a message
/// the transcription cannot carry: another message type, a payload that is not UTF-8, or text
/// that SSE lines would not give back as it is (a carriage return).
pub fn frame_of(message: &Message) -> Option<Frame> {
    let event = match message.header(":message-type")? {
        "event" => message.header(":event-type")?.to_owned(),
        "exception" => format!("{EXCEPTION}{}", message.header(":exception-type")?),
        _ => return None,
    };
    let data = std::str::from_utf8(&message.payload).ok()?;
    if event.contains(['\r', '\n']) || event.starts_with(' ') || data.contains('\r') {
        return None;
    }
    Some(Frame::named(&event, data))
}

/// The message a frame transcribes (see [`frame_of`]), with the headers Bedrock writes, in its
/// order: the type, `:content-type` `application/json`, `:message-type`.
pub fn message_of(frame: &Frame) -> Message {
    let event = frame.event.as_deref().unwrap_or_default();
    let (kind_header, kind, message_type) = match event.strip_prefix(EXCEPTION) {
        Some(kind) => (":exception-type", kind, "exception"),
        None => (":event-type", event, "event"),
    };
    let text = |s: &str| Value::String(s.to_owned());
    Message {
        headers: vec![
            (kind_header.to_owned(), text(kind)),
            (":content-type".to_owned(), text("application/json")),
            (":message-type".to_owned(), text(message_type)),
        ],
        payload: frame.data.as_bytes().to_vec(),
    }
}

/// The complete messages at the start of `bytes` as frames, and how many bytes they span;
/// `None` if a message is malformed or cannot be transcribed.
pub fn frames(bytes: &[u8]) -> Option<(Vec<Frame>, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((message, len)) = decode(bytes.get(at..)?).ok()? {
        out.push(frame_of(&message)?);
        at += len;
    }
    Some((out, at))
}

/// Every frame written as a message; `None` if one does not fit the framing.
pub fn write_all(frames: &[Frame]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for frame in frames {
        out.extend(encode(&message_of(frame))?);
    }
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

    use super::*;
    use std::path::PathBuf;

    /// The recorded Bedrock streams: (name, bytes, the decoded messages as recorded).
    pub(crate) fn recorded() -> Vec<(String, Vec<u8>, String)> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/conformance/bedrock-converse");
        let mut out: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".eventstream"))
            .map(|p| {
                let decoded = format!("{}.decoded.jsonl", p.display());
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (
                    name,
                    std::fs::read(&p).unwrap(),
                    std::fs::read_to_string(decoded).unwrap(),
                )
            })
            .collect();
        out.sort();
        assert!(out.len() >= 4, "{out:?}");
        out
    }

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn recorded_streams_decode_as_recorded_and_encode_byte_for_byte() {
        for (name, bytes, decoded) in recorded() {
            let mut at = 0;
            let mut lines = decoded.lines();
            while at < bytes.len() {
                let (message, len) = decode(&bytes[at..]).unwrap().unwrap();
                assert_eq!(encode(&message).unwrap(), &bytes[at..at + len], "{name}");
                let want: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
                let headers: serde_json::Map<String, serde_json::Value> = message
                    .headers
                    .iter()
                    .map(|(n, v)| match v {
                        Value::String(s) => (n.clone(), s.clone().into()),
                        other => panic!("{name}: {other:?}"),
                    })
                    .collect();
                assert_eq!(
                    serde_json::Value::Object(headers),
                    want["headers"],
                    "{name}"
                );
                let payload: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
                assert_eq!(payload, want["payload"], "{name}");
                // Bedrock writes the headers the transcription writes back, in its order.
                let frame = frame_of(&message).unwrap();
                assert_eq!(message_of(&frame), message, "{name}");
                at += len;
            }
            assert_eq!(lines.next(), None, "{name}");
            let (frames, used) = frames(&bytes).unwrap();
            assert_eq!(used, bytes.len());
            assert_eq!(write_all(&frames).unwrap(), bytes, "{name}");
            // A message cut anywhere is incomplete, never an error.
            for cut in 0..bytes.len() {
                let (some, used) = super::frames(&bytes[..cut]).unwrap();
                assert!(used <= cut && some.len() <= frames.len());
            }
        }
    }

    #[test]
    fn every_header_type_round_trips() {
        let message = Message {
            headers: vec![
                ("t".into(), Value::Bool(true)),
                ("f".into(), Value::Bool(false)),
                ("b".into(), Value::Byte(-2)),
                ("s".into(), Value::Short(-300)),
                ("i".into(), Value::Integer(70_000)),
                ("l".into(), Value::Long(-1 << 40)),
                ("y".into(), Value::Bytes(vec![0, 255, 7])),
                ("x".into(), Value::String("é".into())),
                ("ts".into(), Value::Timestamp(1_700_000_000_000)),
                ("u".into(), Value::Uuid([9; 16])),
            ],
            payload: b"\x00\xff".to_vec(),
        };
        let bytes = encode(&message).unwrap();
        assert_eq!(decode(&bytes), Ok(Some((message.clone(), bytes.len()))));
        // Not a frame: no message type, and a payload that is not text.
        assert_eq!(frame_of(&message), None);
    }

    #[test]
    fn damaged_messages_are_errors() {
        let frame = Frame::named("messageStart", r#"{"role":"assistant"}"#);
        let bytes = write_all(std::slice::from_ref(&frame)).unwrap();
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(decode(&bad).is_err() || decode(&bad) == Ok(None), "{at}");
        }
        let mut bad = bytes.clone();
        let wrong = crc32(&bad[..8]).wrapping_add(1);
        bad[8..12].copy_from_slice(&wrong.to_be_bytes());
        assert_eq!(decode(&bad), Err(Error::PreludeCrc));
        let last = bytes.len() - 1;
        let mut bad = bytes.clone();
        bad[last] ^= 1;
        assert_eq!(decode(&bad), Err(Error::MessageCrc));
        // Lengths out of bounds, with a valid prelude CRC.
        for (total, headers) in [(15u32, 0u32), (16, 1), (u32::MAX, 0), (100, 200_000)] {
            let mut prelude = [total.to_be_bytes(), headers.to_be_bytes()].concat();
            prelude.extend_from_slice(&crc32(&prelude).to_be_bytes());
            assert_eq!(decode(&prelude), Err(Error::Length), "{total} {headers}");
        }
        // A header running past the headers' end.
        let message = Message {
            headers: vec![("a".into(), Value::String("b".into()))],
            payload: Vec::new(),
        };
        let mut bytes = encode(&message).unwrap();
        bytes[14] = 9; // the name's length
        let len = bytes.len();
        let crc = crc32(&bytes[..len - 4]);
        bytes[len - 4..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(decode(&bytes), Err(Error::Length));
        // Exceptions are frames; other message types are not.
        let exception = message_of(&Frame::named("exception:throttlingException", "{}"));
        assert_eq!(exception.header(":message-type"), Some("exception"));
        assert_eq!(
            frame_of(&exception).unwrap().event.as_deref(),
            Some("exception:throttlingException")
        );
    }
}
