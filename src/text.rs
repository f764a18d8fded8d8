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

/// Splits `text` into normalised terms and calls `emit` for each, in order.
pub fn for_each_term(text: &str, mut emit: impl FnMut(String)) {
    let mut word = String::with_capacity(32);
    let mut prev = Class::Other;
    let mut chars = text.chars().peekable();
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
            emit(c.to_string());
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

impl Class {
    fn of(c: char) -> Class {
        if c.is_ascii() {
            return match c {
                'a'..='z' => Class::Lower,
                'A'..='Z' => Class::Upper,
                '0'..='9' => Class::Digit,
                _ => Class::Other,
            };
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
    for_each_term(text, |t| out.push(t));
    out
}

fn flush(word: &mut String, emit: &mut impl FnMut(String)) {
    if word.is_empty() {
        return;
    }
    // Most terms are longer than any stop word: skip the search for them.
    if word.len() > LONGEST_STOP_WORD || STOP_WORDS.binary_search(&word.as_str()).is_err() {
        emit(fold_plural(word.clone()));
    }
    word.clear();
}

/// "queries" → "query", "messages" → "message", "addresses" → "address"; leaves "status",
/// "analysis", "class" and short words alone.
fn fold_plural(mut w: String) -> String {
    if w.len() <= 3 || !w.is_ascii() {
        return w;
    }
    if let Some(stem) = w.strip_suffix("ies") {
        if stem.len() >= 2 {
            return format!("{stem}y");
        }
    }
    if w.ends_with("sses") || w.ends_with("xes") || w.ends_with("ches") || w.ends_with("shes") {
        w.truncate(w.len() - 2);
        return w;
    }
    if w.ends_with('s') && !(w.ends_with("ss") || w.ends_with("us") || w.ends_with("is")) {
        w.pop();
    }
    w
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
    fn stop_words_are_sorted_for_binary_search() {
        assert_eq!(
            STOP_WORDS.iter().map(|w| w.len()).max(),
            Some(LONGEST_STOP_WORD)
        );
        let mut sorted = STOP_WORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOP_WORDS);
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
