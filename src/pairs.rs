//! The proxy-wasm serialisation of a header map, as bytes: a little-endian `u32` count, then a
//! (`u32` name length, `u32` value length) pair per header, then each name and value followed by
//! a NUL. The SDK decodes it with `String::from_utf8(..).unwrap()` and unchecked indexing; a
//! header value is client data, so here it stays bytes and a short or inconsistent map reads as
//! empty instead of panicking.

/// One header, name and value as the host gave them.
pub type Pair = (Vec<u8>, Vec<u8>);

/// Reads a serialised header map. Anything that does not add up (a count or a length past the
/// end) reads as an empty map: the host wrote it, so that never happens, but it must not trap.
pub fn decode(bytes: &[u8]) -> Vec<Pair> {
    decode_checked(bytes).unwrap_or_default()
}

fn decode_checked(bytes: &[u8]) -> Option<Vec<Pair>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let word = |at: usize| -> Option<usize> {
        let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(b)).ok()
    };
    let count = word(0)?;
    // Each header needs at least its two lengths and two NULs: a count beyond that is garbage.
    if count > bytes.len() / 10 {
        return None;
    }
    let mut at = 4usize.checked_add(count.checked_mul(8)?)?;
    let mut pairs = Vec::with_capacity(count);
    for n in 0..count {
        let lengths = 4 + n * 8;
        let (name_len, value_len) = (word(lengths)?, word(lengths + 4)?);
        let mut part = |len: usize| -> Option<Vec<u8>> {
            let end = at.checked_add(len)?;
            let text = bytes.get(at..end)?.to_vec();
            // Each part ends with a NUL.
            (bytes.get(end) == Some(&0)).then_some(())?;
            at = end + 1;
            Some(text)
        };
        let name = part(name_len)?;
        let value = part(value_len)?;
        pairs.push((name, value));
    }
    Some(pairs)
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

#[cfg(test)]
mod tests {
    use super::*;

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
