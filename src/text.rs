//! Text → terms, the same way for tool text and for the user's query.
//!
//! Tool names are identifiers (`send_slack_message`, `getStockQuote`, `HTTPRequest`), so words are
//! split at `_`, `-`, digits and case changes as well as at spaces and punctuation. Terms are
//! lowercased, function words and the verbs of asking are dropped, and plurals are folded lightly
//! so "messages" meets "message" without a stemmer's surprises.

/// Words that say nothing about which tool is meant: function words, and the verbs of asking
/// ("help", "tell", "want", "looking") that fill a user's request but never name a
/// tool's purpose. Words such as "get", "find", "list" or "create" carry intent in tool names and
/// stay. Dropping the request words lifted Recall@5 on all three shared datasets
/// (`docs/tuning-notes.md`).
const STOP_WORDS: &[&str] = &[
    "a", "about", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but",
    "by", "can", "could", "did", "do", "does", "doing", "each", "for", "from", "give", "had",
    "has", "have", "he", "help", "her", "here", "him", "his", "how", "i", "if", "in", "into", "is",
    "it", "its", "just", "know", "let", "like", "looking", "m", "may", "me", "might", "more",
    "most", "must", "my", "need", "no", "not", "now", "of", "on", "only", "or", "other", "our",
    "out", "own", "please", "provide", "same", "shall", "she", "should", "so", "some", "such",
    "tell", "than", "that", "the", "their", "them", "then", "there", "these", "this", "those",
    "to", "too", "up", "us", "very", "want", "was", "we", "were", "what", "when", "where", "which",
    "who", "whom", "why", "will", "with", "would", "yes", "you", "your",
];

const LONGEST_STOP_WORD: usize = 7;

/// Splits `text` into normalised terms and calls `emit` for each, in order. Each term is
/// written into one reused buffer and lent to `emit`: a new tool's text is tokenised without a
/// `String` per term (callers hash the term in place, see [`crate::index::term_id`]).
pub fn for_each_term(text: &str, emit: impl FnMut(&str)) {
    // Tool text is mostly ASCII: its bytes are its characters, no UTF-8 decoding needed.
    if text.is_ascii() {
        split_ascii(text.as_bytes(), emit);
    } else {
        split(text.chars(), emit);
    }
}

/// [`split`] for ASCII text, byte by byte: the same boundaries (ASCII has no caseless letters
/// and no ideographs), each word's end found by scanning and then copied lowercased into the
/// buffer at once. In Envoy's V8, which runs this baseline-compiled, the generic loop's
/// iterator steps cost a call per character.
fn split_ascii(bytes: &[u8], mut emit: impl FnMut(&str)) {
    let class = |b: u8| {
        ASCII_CLASSES
            .get(usize::from(b))
            .copied()
            .unwrap_or(Class::Other)
    };
    let mut word = String::with_capacity(32);
    let mut i = 0;
    while i < bytes.len() {
        // Skip to a word's first character.
        let Some(start) = bytes
            .get(i..)
            .and_then(|rest| rest.iter().position(|&b| class(b) != Class::Other))
            .map(|p| i + p)
        else {
            break;
        };
        // The word runs while no boundary comes: into another class but for a capital
        // followed by lower case letters ("Http" of "HTTPServer" starts at its "S").
        let mut end = start + 1;
        let mut prev = bytes.get(start).map_or(Class::Other, |&b| class(b));
        while let Some(&b) = bytes.get(end) {
            let next = class(b);
            let boundary = match (prev, next) {
                (_, Class::Other) => true,
                (Class::Lower, Class::Upper) => true,
                (Class::Upper, Class::Upper) => bytes
                    .get(end + 1)
                    .is_some_and(|&n| class(n) == Class::Lower),
                (Class::Lower | Class::Upper, Class::Digit) => true,
                (Class::Digit, Class::Lower | Class::Upper) => true,
                _ => false,
            };
            if boundary {
                break;
            }
            prev = next;
            end += 1;
        }
        word.clear();
        word.extend(
            bytes
                .get(start..end)
                .unwrap_or_default()
                .iter()
                .map(|b| char::from(b.to_ascii_lowercase())),
        );
        flush(&mut word, &mut emit);
        i = end;
    }
}

fn split(chars: impl Iterator<Item = char>, mut emit: impl FnMut(&str)) {
    let mut word = String::with_capacity(32);
    let mut prev = Class::Other;
    let mut chars = chars.peekable();
    while let Some(c) = chars.next() {
        let class = Class::of(c);
        if class == Class::Other {
            flush(&mut word, &mut emit);
            prev = Class::Other;
            continue;
        }
        if class == Class::Ideograph {
            // CJK text has no spaces: each ideograph is a term of its own.
            flush(&mut word, &mut emit);
            emit(c.encode_utf8(&mut [0u8; 4]));
            prev = Class::Other;
            continue;
        }
        let boundary = match (prev, class) {
            (Class::Lower, Class::Upper) => true,
            // "HTTPServer": the last capital of a run starts the next word.
            (Class::Upper, Class::Upper) => {
                chars.peek().is_some_and(|n| Class::of(*n) == Class::Lower)
            }
            (Class::Lower | Class::Upper | Class::Letter, Class::Digit) => true,
            (Class::Digit, Class::Lower | Class::Upper | Class::Letter) => true,
            _ => false,
        };
        if boundary {
            flush(&mut word, &mut emit);
        }
        if c.is_ascii() {
            word.push(c.to_ascii_lowercase());
        } else {
            word.extend(c.to_lowercase());
        }
        prev = class;
    }
    flush(&mut word, &mut emit);
}

/// What a character is to the splitter. ASCII is decided without Unicode tables: tool text is
/// mostly ASCII, and this runs over every tool of every new catalog.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Lower,
    Upper,
    /// A letter without case (most scripts other than Latin, Greek, Cyrillic).
    Letter,
    Digit,
    Ideograph,
    Other,
}

/// [`Class::of`] each ASCII character, looked up rather than matched.
// Evaluated by the compiler: an index out of range would fail the build, never a request.
#[allow(clippy::indexing_slicing)]
const ASCII_CLASSES: [Class; 128] = {
    let mut table = [Class::Other; 128];
    let mut c = 0;
    while c < 128 {
        table[c] = match c as u8 {
            b'a'..=b'z' => Class::Lower,
            b'A'..=b'Z' => Class::Upper,
            b'0'..=b'9' => Class::Digit,
            _ => Class::Other,
        };
        c += 1;
    }
    table
};

impl Class {
    fn of(c: char) -> Class {
        if let Some(&class) = ASCII_CLASSES.get(c as usize) {
            return class;
        }
        if is_cjk(c) {
            Class::Ideograph
        } else if c.is_lowercase() {
            Class::Lower
        } else if c.is_uppercase() {
            Class::Upper
        } else if c.is_alphabetic() {
            Class::Letter
        } else if c.is_numeric() {
            Class::Digit
        } else if c.is_alphanumeric() {
            Class::Letter
        } else {
            Class::Other
        }
    }
}

/// Splits `text` into normalised terms.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_owned()));
    out
}

fn flush(word: &mut String, emit: &mut impl FnMut(&str)) {
    if word.is_empty() {
        return;
    }
    // Most terms are longer than any stop word: skip the search for them.
    if word.len() > LONGEST_STOP_WORD || !is_stop_word(word) {
        fold_plural(word);
        emit(word);
    }
    word.clear();
}

/// A word of at most 8 bytes as one number: its bytes big-endian, zero-padded. Words never hold
/// a zero byte, so two words differ exactly when their numbers do (and no word is 0).
const fn packed(word: &[u8]) -> u64 {
    let mut out = 0u64;
    let mut rest = word;
    let mut i = 0;
    while i < 8 {
        out <<= 8;
        if let [first, tail @ ..] = rest {
            out |= *first as u64;
            rest = tail;
        }
        i += 1;
    }
    out
}

/// Slots of [`STOP_TABLE`]: a power of two over twice the stop words, so a probe rarely goes
/// past its first slot.
const STOP_SLOTS: usize = 256;

fn stop_slot(word: u64) -> usize {
    (word.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % STOP_SLOTS
}

/// [`STOP_WORDS`], [`packed`], in an open-addressing table (linear probing, 0 for empty): a
/// word is looked up with one multiplication and, most often, one comparison. The search ran
/// for most words of every new tool; a binary search over the strings was a sixth of the time
/// to read a new tool.
// Evaluated by the compiler: an index out of range would fail the build, never a request.
#[allow(clippy::indexing_slicing)]
const STOP_TABLE: [u64; STOP_SLOTS] = {
    let mut table = [0u64; STOP_SLOTS];
    let mut i = 0;
    while i < STOP_WORDS.len() {
        let word = packed(STOP_WORDS[i].as_bytes());
        let mut slot = (word.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % STOP_SLOTS;
        while table[slot] != 0 {
            slot = (slot + 1) % STOP_SLOTS;
        }
        table[slot] = word;
        i += 1;
    }
    table
};

fn is_stop_word(word: &str) -> bool {
    if word.is_empty() || word.len() > LONGEST_STOP_WORD {
        return false;
    }
    let word = packed(word.as_bytes());
    let mut slot = stop_slot(word);
    for _ in 0..STOP_SLOTS {
        match STOP_TABLE.get(slot) {
            Some(&w) if w == word => return true,
            Some(0) | None => return false,
            Some(_) => slot = (slot + 1) % STOP_SLOTS,
        }
    }
    false
}

/// "queries" → "query", "messages" → "message", "addresses" → "address"; leaves "status",
/// "analysis", "class" and short words alone. In place.
fn fold_plural(w: &mut String) {
    let n = w.len();
    if n <= 3 || !w.is_ascii() {
        return;
    }
    // Suffixes compared byte by byte (slice patterns), not with a string comparison each.
    match w.as_bytes() {
        [.., b'i', b'e', b's'] if n >= 5 => {
            w.truncate(n - 3);
            w.push('y');
        }
        [.., b's', b's', b'e', b's']
        | [.., b'x', b'e', b's']
        | [.., b'c' | b's', b'h', b'e', b's'] => {
            w.truncate(n - 2);
        }
        [.., b's' | b'u' | b'i', b's'] => {}
        [.., b's'] => {
            w.pop();
        }
        _ => {}
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF) // CJK Compatibility Ideographs
}

/// The sentences of a request that asks for several things ("Geocode the address. Then find
/// parking nearby."), each trimmed; empty when there is only one. Hybrid ranking embeds each as
/// well as the whole request, so every step of a multi-step task can find its tool.
pub fn sentences(text: &str, max: usize) -> Vec<&str> {
    let parts: Vec<&str> = text
        .split(['.', '?', '!', ';', '\n', '。', '？', '！', '；'])
        .map(str::trim)
        .filter(|s| s.split_whitespace().count() >= 2)
        .take(max)
        .collect();
    if parts.len() < 2 { Vec::new() } else { parts }
}

/// Cuts `text` to at most `max` bytes, keeping its head and its tail (the ask is usually at one
/// end of a long message), each cut on a character boundary.
pub fn bounded(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// Like [`bounded`] but keeps the first and the last `max / 2` bytes.
pub fn head_and_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let half = max / 2;
    let head = bounded(text, half);
    let mut start = text.len().saturating_sub(half);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let tail = text.get(start..).unwrap_or_default();
    format!("{head} {tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_all_found_and_only_they() {
        assert_eq!(
            STOP_WORDS.iter().map(|w| w.len()).max(),
            Some(LONGEST_STOP_WORD)
        );
        let mut sorted = STOP_WORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOP_WORDS);
        assert_eq!(
            STOP_TABLE.iter().filter(|&&w| w != 0).count(),
            STOP_WORDS.len()
        );
        for word in STOP_WORDS {
            assert!(is_stop_word(word), "{word}");
        }
        for word in ["", "ab", "abouts", "aboutt", "z", "yours", "zzzzzzz", "ü"] {
            assert!(!is_stop_word(word), "{word}");
        }
    }

    #[test]
    fn splits_identifiers_and_sentences() {
        assert_eq!(terms("send_slack_message"), ["send", "slack", "message"]);
        assert_eq!(terms("getStockQuote"), ["get", "stock", "quote"]);
        assert_eq!(terms("HTTPServerError"), ["http", "server", "error"]);
        assert_eq!(terms("s3-bucket v2"), ["s", "3", "bucket", "v", "2"]);
        assert_eq!(
            terms("Please tell me the weather in Paris!"),
            ["weather", "paris"]
        );
    }

    #[test]
    fn ascii_text_splits_as_any_text_does() {
        // The same text through the byte path and through the character path.
        let by_chars = |t: &str| {
            let mut out = Vec::new();
            split(t.chars(), |w| out.push(w.to_owned()));
            out
        };
        for t in [
            "send_slack_message",
            "getHTTPServerError2xx",
            "HTTPServer ABCdef aB Ab 9a a9 __x__ A",
            "Please tell me the weather in Paris! v2.0-beta S3Bucket",
            "",
            "   ",
            "X",
            "queries, boxes; addresses ABCs",
        ] {
            let mut ascii = Vec::new();
            split_ascii(t.as_bytes(), |w| ascii.push(w.to_owned()));
            assert_eq!(ascii, by_chars(t), "{t}");
        }
    }

    #[test]
    fn folds_plurals_lightly() {
        assert_eq!(
            terms("messages queries issues"),
            ["message", "query", "issue"]
        );
        assert_eq!(
            terms("status analysis class boxes"),
            ["status", "analysis", "class", "box"]
        );
        assert_eq!(terms("addresses branches"), ["address", "branch"]);
    }

    #[test]
    fn cjk_characters_are_terms() {
        assert_eq!(
            terms("查询天气 weather"),
            ["查", "询", "天", "气", "weather"]
        );
    }

    #[test]
    fn bounds_on_char_boundaries() {
        let s = "héllo wörld";
        assert_eq!(bounded(s, 2), "h");
        assert_eq!(bounded(s, 100), s);
        let long = "ab".repeat(100) + "ü" + &"cd".repeat(100);
        let cut = head_and_tail(&long, 50);
        assert!(cut.starts_with("abab") && cut.ends_with("cdcd"));
        assert!(cut.len() <= 51);
    }
}
