//! JWT payloads in Envoy's dynamic metadata, where `jwt_authn`'s `payload_in_metadata` puts
//! them: read from the bytes Envoy gives for the `metadata` property.
//!
//! That property is the whole `envoy.config.core.v3.Metadata` message, protobuf-encoded. Its
//! deeper paths (`metadata.filter_metadata.<ns>.<key>.<claim>`) come back in the host's pairs
//! encoding with no types (a string and a number look alike), and a payload holding one JSON
//! `null` anywhere fails to serialise at every level above it: one read of the message, decoded
//! here, is the only form that always works (measured with Envoy 1.40).
//!
//! ```text
//! Metadata:  1 filter_metadata: map<string, Struct>      (map entry: 1 key, 2 value)
//! Struct:    1 fields: map<string, Value>
//! Value:     1 null_value | 2 number_value (double) | 3 string_value | 4 bool_value
//!            | 5 struct_value (Struct) | 6 list_value (ListValue: 1 repeated Value)
//! ```
//!
//! Malformed input yields what could be read before it, never a panic; nesting deeper than
//! [`MAX_DEPTH`] reads as null.

use serde_json::{Map, Number, Value};

/// Nesting read at most: a payload is a JWT's claims, never this deep.
pub const MAX_DEPTH: usize = 32;

/// One field of a protobuf message.
enum Wire<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(&'a [u8]),
    Fixed32,
}

/// The fields of a message in order; ends at the first malformed byte.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn fields(bytes: &[u8]) -> Fields<'_> {
    Fields { bytes, at: 0 }
}

fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }
}

impl<'a> Iterator for Fields<'a> {
    /// (field number, value).
    type Item = (u64, Wire<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let key = varint(self.bytes, &mut self.at)?;
        let wire = match key & 7 {
            0 => Wire::Varint(varint(self.bytes, &mut self.at)?),
            1 => Wire::Fixed64(self.take(8)?.try_into().ok()?),
            2 => {
                let len = usize::try_from(varint(self.bytes, &mut self.at)?).ok()?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed32
            }
            _ => return None,
        };
        Some((key >> 3, wire))
    }
}

/// A map entry's key (field 1, text) and value (field 2, a message).
fn entry(bytes: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let (mut key, mut value): (Option<&[u8]>, &[u8]) = (None, &[]);
    for field in fields(bytes) {
        match field {
            (1, Wire::Bytes(k)) => key = Some(k),
            (2, Wire::Bytes(v)) => value = v,
            _ => {}
        }
    }
    (key, value)
}

/// The (key, value message) entries of a map field `number` of a message.
fn map_entries(message: &[u8], number: u64) -> impl Iterator<Item = (&[u8], &[u8])> {
    fields(message).filter_map(move |field| match field {
        (n, Wire::Bytes(e)) if n == number => match entry(e) {
            (Some(k), v) => Some((k, v)),
            (None, _) => None,
        },
        _ => None,
    })
}

/// A `google.protobuf.Struct` as a JSON object.
fn object(message: &[u8], depth: usize) -> Value {
    let mut out = Map::new();
    for (key, value) in map_entries(message, 1) {
        out.insert(
            String::from_utf8_lossy(key).into_owned(),
            self::value(value, depth),
        );
    }
    Value::Object(out)
}

/// A `google.protobuf.Value` as JSON. A whole number comes out as an integer (JSON numbers
/// travel as doubles): a numeric claim `3` reads `3`, not `3.0`.
fn value(message: &[u8], depth: usize) -> Value {
    if depth >= MAX_DEPTH {
        return Value::Null;
    }
    let mut out = Value::Null;
    for field in fields(message) {
        out = match field {
            (1, _) => Value::Null,
            (2, Wire::Fixed64(bits)) => {
                let n = f64::from_le_bytes(bits);
                if n.fract() == 0.0 && n.abs() < 9.0e15 {
                    Value::Number(Number::from(n as i64))
                } else {
                    Number::from_f64(n).map_or(Value::Null, Value::Number)
                }
            }
            (3, Wire::Bytes(text)) => Value::String(String::from_utf8_lossy(text).into_owned()),
            (4, Wire::Varint(flag)) => Value::Bool(flag != 0),
            (5, Wire::Bytes(inner)) => object(inner, depth + 1),
            (6, Wire::Bytes(list)) => Value::Array(
                fields(list)
                    .filter_map(|item| match item {
                        (1, Wire::Bytes(v)) => Some(self::value(v, depth + 1)),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => continue,
        };
    }
    out
}

/// The JWT payloads in namespace `namespace` of a `metadata` property's bytes: the one under
/// `key`, or all of them when `key` is `None` (Istio names each after its issuer). No bytes (no
/// token) and anything unreadable give none.
pub fn payloads(metadata: &[u8], namespace: &str, key: Option<&str>) -> Vec<Value> {
    let Some((_, payloads)) = map_entries(metadata, 1).find(|(ns, _)| *ns == namespace.as_bytes())
    else {
        return Vec::new();
    };
    map_entries(payloads, 1)
        .filter(|(k, _)| key.is_none_or(|want| want.as_bytes() == *k))
        .map(|(_, payload)| value(payload, 0))
        .filter(Value::is_object)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "envoy.filters.http.jwt_authn";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The `metadata` property Envoy 1.40 gave a filter after `jwt_authn` verified a token
    /// (payload_in_metadata "jwt_payload"), captured by a probe filter.
    const CAPTURED: &str = "0a95020a1c656e766f792e66696c746572732e687474702e6a77745f617574686e12f4010af1010a0b6a77745f7061796c6f616412e1012ade010a0e0a0373756212071a05616c6963650a100a036e756d12091100000000000008400a0a0a04666c6167120220010a1d0a0667726f757073121332110a051a037372650a081a0661646d696e730a110a03617564120a1a08746f6f6c736966740a230a066e657374656412192a170a150a05726f6c6573120c320a0a031a01610a031a01620a1c0a0369737312151a1368747470733a2f2f6973737565722e746573740a150a0573636f7065120c1a0a726561642077726974650a100a036578701209110000808c8bc1da410a100a0674656e616e7412061a0461636d65";

    #[test]
    fn reads_what_envoy_gives() {
        let metadata = hex(CAPTURED);
        let found = payloads(&metadata, NS, Some("jwt_payload"));
        assert_eq!(found.len(), 1);
        let p = &found[0];
        assert_eq!(p["groups"], serde_json::json!(["sre", "admins"]));
        assert_eq!(p["tenant"], "acme");
        assert_eq!(p["scope"], "read write");
        assert_eq!(p["nested"]["roles"], serde_json::json!(["a", "b"]));
        assert_eq!(p["num"], 3);
        assert_eq!(p["flag"], true);
        assert_eq!(p["iss"], "https://issuer.test");
        assert!(payloads(&metadata, NS, Some("https://issuer.test")).is_empty());
        assert_eq!(payloads(&metadata, NS, None).len(), 1);
        assert!(payloads(&metadata, "other", None).is_empty());
        assert!(payloads(&[], NS, None).is_empty());
    }

    #[test]
    fn a_cut_or_garbled_message_reads_what_it_can() {
        let metadata = hex(CAPTURED);
        for end in 0..metadata.len() {
            let _ = payloads(&metadata[..end], NS, None);
        }
        let mut garbled = metadata.clone();
        for i in 0..garbled.len() {
            garbled[i] ^= 0x5a;
            let _ = payloads(&garbled, NS, None);
            garbled[i] ^= 0x5a;
        }
    }

    #[test]
    fn deep_nesting_stops_at_the_bound() {
        fn varint(mut n: usize, out: &mut Vec<u8>) {
            while n >= 0x80 {
                out.push((n as u8) | 0x80);
                n >>= 7;
            }
            out.push(n as u8);
        }
        // A Value holding a list holding a list … 10,000 deep: read to the bound, then null.
        let mut v: Vec<u8> = vec![0x1a, 0x01, b'x'];
        for _ in 0..10_000 {
            let mut list = vec![0x0a];
            varint(v.len(), &mut list);
            list.extend_from_slice(&v);
            let mut outer = vec![0x32];
            varint(list.len(), &mut outer);
            outer.extend_from_slice(&list);
            v = outer;
        }
        let mut read = value(&v, 0);
        let mut depth = 0;
        while let Value::Array(mut items) = read {
            read = items.pop().unwrap();
            depth += 1;
        }
        assert_eq!((depth, read), (MAX_DEPTH, Value::Null));
    }
}
