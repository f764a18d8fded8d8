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

/// Splits `text` into normalised terms and calls `emit` for each, in order. A term is lent to
/// `emit` as a slice of `text` where normalising leaves its bytes as they are (most words of
/// ASCII tool text: lower case, no plural, or a plural that folds by cutting), else from one
/// reused buffer: a new tool's text is tokenised without a `String` per term (callers hash
/// the term in place, see [`crate::index::term_id`]).
pub fn for_each_term(text: &str, mut emit: impl FnMut(&str)) {
    // Tool text is mostly ASCII: its bytes are its characters, no UTF-8 decoding needed.
    if text.is_ascii() {
        split_ascii(text, &mut emit);
    } else {
        split(text.chars(), emit);
    }
}

/// [`split`] for ASCII text, byte by byte: the same boundaries (ASCII has no caseless letters
/// and no ideographs). Each word's end is found by scanning; the word is then lent as a slice
/// of `text` when it has no capital letter, or lowercased into the buffer. In Envoy's V8,
/// which runs this baseline-compiled, every step of the generic loop (an iterator step, a
/// character pushed into the buffer) is a call of its own: copying each word into the buffer
/// was most of the time tokenising took.
fn split_ascii(text: &str, emit: &mut impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let class = |b: u8| {
        ASCII_CLASSES
            .get(usize::from(b))
            .copied()
            .unwrap_or(Class::Other)
    };
    // Only words with a capital letter, and plurals in "-ies", are written here.
    let mut buffer = String::new();
    let mut i = 0;
    loop {
        // Skip to a word's first character.
        while bytes.get(i).is_some_and(|&b| class(b) == Class::Other) {
            i += 1;
        }
        let Some(&first) = bytes.get(i) else {
            break;
        };
        let start = i;
        let mut prev = class(first);
        let mut capitals = prev == Class::Upper;
        i += 1;
        // The word runs while no boundary comes: into another class but for a capital
        // followed by lower case letters ("Http" of "HTTPServer" starts at its "S").
        while let Some(&b) = bytes.get(i) {
            // Most of tool text: lower case after lower case, never a boundary.
            if prev == Class::Lower {
                let run = bytes.get(i..).map_or(0, |rest| {
                    rest.iter().take_while(|b| b.is_ascii_lowercase()).count()
                });
                if run > 0 {
                    i += run;
                    continue;
                }
            }
            let next = class(b);
            let boundary = match (prev, next) {
                (_, Class::Other) => true,
                (Class::Lower, Class::Upper) => true,
                (Class::Upper, Class::Upper) => {
                    bytes.get(i + 1).is_some_and(|&n| class(n) == Class::Lower)
                }
                (Class::Lower | Class::Upper, Class::Digit) => true,
                (Class::Digit, Class::Lower | Class::Upper) => true,
                _ => false,
            };
            if boundary {
                break;
            }
            capitals |= next == Class::Upper;
            prev = next;
            i += 1;
        }
        let word = text.get(start..i).unwrap_or_default();
        if capitals {
            buffer.clear();
            buffer.push_str(word);
            buffer.make_ascii_lowercase();
            flush(&mut buffer, emit);
        } else {
            lend(word, &mut buffer, emit);
        }
    }
}

/// [`flush`] for a lower-case ASCII word that is not in a buffer: lent as it is, or cut, and
/// written to `buffer` only when its plural folds into another letter ("queries" → "query").
fn lend(word: &str, buffer: &mut String, emit: &mut impl FnMut(&str)) {
    if word.len() <= LONGEST_STOP_WORD && is_stop_word(word) {
        return;
    }
    match plural(word.as_bytes()) {
        Fold::Cut(len) => emit(word.get(..len).unwrap_or_default()),
        Fold::IesToY(len) => {
            buffer.clear();
            buffer.push_str(word.get(..len).unwrap_or_default());
            buffer.push('y');
            emit(buffer);
        }
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

/// [`Class::of`] each ASCII character, looked up rather than matched; 256 entries, so that a
/// byte's lookup needs no bounds check (the bytes past ASCII are never looked up).
// Evaluated by the compiler: an index out of range would fail the build, never a request.
#[allow(clippy::indexing_slicing)]
const ASCII_CLASSES: [Class; 256] = {
    let mut table = [Class::Other; 256];
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
        if c.is_ascii() {
            return ASCII_CLASSES
                .get(c as usize)
                .copied()
                .unwrap_or(Class::Other);
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
    // [`packed`], in registers: writing the bytes to memory to load them as one number stalled
    // the load (a third of tokenising, natively).
    let word = word
        .bytes()
        .fold(0u64, |packed, b| (packed << 8) | u64::from(b))
        << (8 * (8 - word.len()));
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
    if !w.is_ascii() {
        return;
    }
    match plural(w.as_bytes()) {
        Fold::Cut(len) => w.truncate(len),
        Fold::IesToY(len) => {
            w.truncate(len);
            w.push('y');
        }
    }
}

/// How an ASCII word's plural folds.
enum Fold {
    /// To its first `len` bytes (all of them when it is no plural).
    Cut(usize),
    /// To its first `len` bytes and a "y".
    IesToY(usize),
}

/// [`fold_plural`]'s decision for an ASCII word.
fn plural(w: &[u8]) -> Fold {
    let n = w.len();
    if n <= 3 {
        return Fold::Cut(n);
    }
    // Suffixes compared byte by byte (slice patterns), not with a string comparison each.
    match w {
        [.., b'i', b'e', b's'] if n >= 5 => Fold::IesToY(n - 3),
        [.., b's', b's', b'e', b's']
        | [.., b'x', b'e', b's']
        | [.., b'c' | b's', b'h', b'e', b's'] => Fold::Cut(n - 2),
        [.., b's' | b'u' | b'i', b's'] => Fold::Cut(n),
        [.., b's'] => Fold::Cut(n - 1),
        _ => Fold::Cut(n),
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
        for t in [
            "send_slack_message",
            "getHTTPServerError2xx",
            "HTTPServer ABCdef aB Ab 9a a9 __x__ A",
            "Please tell me the weather in Paris! v2.0-beta S3Bucket",
            "",
            "   ",
            "X",
            "queries, boxes; addresses ABCs",
            "QUERIES Queries TIES ties ies IES the THE The AbOut yours Yes",
        ] {
            assert_eq!(by_ascii(t), by_chars(t), "{t}");
        }
    }

    fn by_chars(t: &str) -> Vec<String> {
        let mut out = Vec::new();
        split(t.chars(), |w| out.push(w.to_owned()));
        out
    }

    fn by_ascii(t: &str) -> Vec<String> {
        let mut out = Vec::new();
        split_ascii(t, &mut |w: &str| out.push(w.to_owned()));
        out
    }

    proptest::proptest! {
        /// Any ASCII text (letters of both cases, digits, separators, stop words and plural
        /// endings over-represented) splits the same by bytes as by characters.
        #[test]
        fn ascii_path_matches_the_character_path(
            t in "([a-cA-CsSyY0-9 _.-]|ies|IES|es|ches|sses|xes|us|the|The|HTTP|Ab){0,24}"
        ) {
            proptest::prop_assert_eq!(by_ascii(&t), by_chars(&t));
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
