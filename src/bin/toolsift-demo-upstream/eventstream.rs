//! AWS's binary event-stream framing (`application/vnd.amazon.eventstream`), in which Bedrock's
//! `ConverseStream` answers: each message is a prelude (total length, headers length, CRC-32 of
//! those eight bytes), string headers, the payload, and the CRC-32 of everything before it.
//! The AWS SDKs check both CRCs, so the demo must get them right for boto3 to read its streams.

use bytes::Bytes;

pub(crate) const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// One `event` message: `:event-type` `event_type`, a JSON payload (the event's member, e.g.
/// `{"role":"assistant"}` for `messageStart`).
pub(crate) fn event(event_type: &str, payload: &[u8]) -> Bytes {
    let mut headers = Vec::new();
    for (name, value) in [
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ] {
        // Header names are at most 255 bytes and string values 32 KiB: these are short.
        headers.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        headers.extend_from_slice(name.as_bytes());
        headers.push(7); // string
        headers.extend_from_slice(&u16::try_from(value.len()).unwrap_or(u16::MAX).to_be_bytes());
        headers.extend_from_slice(value.as_bytes());
    }
    let total = 12 + headers.len() + payload.len() + 4;
    let mut message = Vec::with_capacity(total);
    message.extend_from_slice(&u32::try_from(total).unwrap_or(u32::MAX).to_be_bytes());
    message.extend_from_slice(
        &u32::try_from(headers.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    let prelude_crc = crc32(&message);
    message.extend_from_slice(&prelude_crc.to_be_bytes());
    message.extend_from_slice(&headers);
    message.extend_from_slice(payload);
    let message_crc = crc32(&message);
    message.extend_from_slice(&message_crc.to_be_bytes());
    Bytes::from(message)
}

/// CRC-32 (IEEE 802.3, as zlib computes it).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0_u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn frames_messages_as_bedrock_does() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        // The first message of a recorded Bedrock stream, byte for byte.
        let recorded = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
                "../shared/conformance/bedrock-converse/text-stream-after-tool-result.response.eventstream",
            ),
        )
        .unwrap();
        let first = event("messageStart", br#"{"p":"abcde","role":"assistant"}"#);
        assert_eq!(first[..], recorded[..first.len()]);
    }
}
