//! The proxy-wasm serialisation of a header map, as bytes: a little-endian `u32` count, then a
//! (`u32` name length, `u32` value length) pair per header, then each name and value followed by
//! a NUL. The SDK decodes it with `String::from_utf8(..).unwrap()` and unchecked indexing; a
//! header value is client data, so here it stays bytes and a short or inconsistent map reads as
//! empty instead of panicking.

/// One header, name and value as the host gave them.
pub type Pair = (Vec<u8>, Vec<u8>);

/// Whether a header name the configuration gives is one (HTTP's token: letters, digits and
/// ``!#$%&'*+-.^_`|~``, at least one); a pseudo-header such as `:path` is not.
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
}

/// [`is_header_name`] as a JSON Schema pattern, for the configuration's schema.
pub const HEADER_NAME_PATTERN: &str = "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";

/// A serialised header map, read in place: every request's headers are screened, and a copy of
/// each name and value (two allocations per header) cost more than the screening itself.
#[derive(Debug, Default)]
pub struct HeaderMap {
    bytes: Vec<u8>,
    /// Headers in `bytes`; 0 when the map does not add up.
    count: usize,
}

impl HeaderMap {
    /// Reads a serialised map. Anything that does not add up (a count or a length past the
    /// end) reads as an empty map: the host wrote it, so that never happens, but it must not
    /// trap.
    pub fn new(bytes: Vec<u8>) -> HeaderMap {
        let count = Self::check(&bytes).unwrap_or(0);
        HeaderMap { bytes, count }
    }

    /// The number of headers, when every length adds up.
    fn check(bytes: &[u8]) -> Option<usize> {
        if bytes.is_empty() {
            return Some(0);
        }
        let count = word(bytes, 0)?;
        // Each header needs at least its two lengths and two NULs: a count beyond that is
        // garbage.
        if count > bytes.len() / 10 {
            return None;
        }
        let mut at = 4usize.checked_add(count.checked_mul(8)?)?;
        for n in 0..count {
            for len in [word(bytes, 4 + n * 8)?, word(bytes, 8 + n * 8)?] {
                let end = at.checked_add(len)?;
                // Each part ends with a NUL.
                (bytes.get(end) == Some(&0)).then_some(())?;
                at = end + 1;
            }
        }
        Some(count)
    }

    /// Every header, in order, as the host gave them.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let bytes = self.bytes.as_slice();
        let mut at = 4 + self.count * 8;
        (0..self.count).map_while(move |n| {
            let mut part = |lengths: usize| {
                let len = word(bytes, lengths)?;
                let text = bytes.get(at..at + len)?;
                at += len + 1;
                Some(text)
            };
            Some((part(4 + n * 8)?, part(8 + n * 8)?))
        })
    }

    /// The first value of header `name` (lower case, as Envoy's names are).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| *n == name.as_bytes())
            .map(|(_, v)| v)
    }

    /// Every header as text, copied; `None` when a name or value is not UTF-8.
    pub fn texts(&self) -> Option<Vec<(String, String)>> {
        let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_owned);
        self.iter()
            .map(|(n, v)| Some((text(n)?, text(v)?)))
            .collect()
    }
}

/// The little-endian `u32` at `at`.
fn word(bytes: &[u8], at: usize) -> Option<usize> {
    let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(b)).ok()
}

/// Serialises `pairs` for the host. A length that does not fit a `u32` (4 GiB) is written as
/// zero, with no bytes: no header is that large.
pub fn encode<N: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(N, V)]) -> Vec<u8> {
    let fits = |b: &[u8]| u32::try_from(b.len()).is_ok();
    let size: usize = pairs
        .iter()
        .map(|(n, v)| n.as_ref().len() + v.as_ref().len() + 10)
        .sum();
    let mut out = Vec::with_capacity(4 + size);
    out.extend_from_slice(&u32::try_from(pairs.len()).unwrap_or(0).to_le_bytes());
    for (name, value) in pairs {
        for part in [name.as_ref(), value.as_ref()] {
            let len = if fits(part) { part.len() as u32 } else { 0 };
            out.extend_from_slice(&len.to_le_bytes());
        }
    }
    for (name, value) in pairs {
        for part in [name.as_ref(), value.as_ref()] {
            if fits(part) {
                out.extend_from_slice(part);
            }
            out.push(0);
        }
    }
    out
}

/// Request headers that belong to one connection or one body: a request the gateway sends
/// itself with a client's headers (search mode's follow-ups, MCP's own calls) never carries them.
pub const PER_CONNECTION: [&str; 7] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
    "expect",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Vec<Pair> {
        let map = HeaderMap::new(bytes.to_vec());
        map.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect()
    }

    #[test]
    fn round_trips_bytes_that_are_not_utf8() {
        let pairs: Vec<Pair> = vec![
            (b":path".to_vec(), b"/v1/chat/completions".to_vec()),
            (
                b"content-type".to_vec(),
                b"application/json; charset=caf\xe9".to_vec(),
            ),
            (b"x-empty".to_vec(), Vec::new()),
        ];
        assert_eq!(decode(&encode(&pairs)), pairs);
        let map = HeaderMap::new(encode(&pairs));
        assert_eq!(map.get("content-type"), Some(&pairs[1].1[..]));
        assert_eq!(map.get("x-empty"), Some(&b""[..]));
        assert_eq!(map.get("x-absent"), None);
    }

    #[test]
    fn an_empty_map_is_empty_both_ways() {
        assert!(decode(&[]).is_empty());
        let none: [(&[u8], &[u8]); 0] = [];
        assert_eq!(decode(&encode(&none)), Vec::<Pair>::new());
    }

    #[test]
    fn short_or_inconsistent_maps_read_as_empty() {
        let good = encode(&[("a", "b"), ("cc", "dd")]);
        for cut in 0..good.len() {
            // Every prefix of a valid map: never a panic, and never a header that was not sent.
            let read = decode(&good[..cut]);
            assert!(read.is_empty(), "prefix of {cut} bytes read as {read:?}");
        }
        let mut huge_count = good.clone();
        huge_count[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge_count).is_empty());
        let mut huge_len = good;
        huge_len[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge_len).is_empty());
    }

    #[test]
    fn matches_the_sdk_layout() {
        // Count, the two lengths, then "k\0v\0": what proxy-wasm's own serialiser writes.
        assert_eq!(
            encode(&[("k", "v")]),
            [1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, b'k', 0, b'v', 0]
        );
    }
}
