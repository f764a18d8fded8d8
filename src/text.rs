//! Text → terms, the same way for tool text and for the user's query.
//!
//! Tool names are identifiers (`send_slack_message`, `getStockQuote`, `HTTPRequest`), so words are
//! split at `_`, `-`, digits and case changes as well as at spaces and punctuation. Terms are
//! lowercased, function words and the verbs of asking are dropped, and plurals are folded lightly
//! so "messages" meets "message" without a stemmer's surprises.

use std::cell::Cell;

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
    // Taken, not borrowed: an `emit` that tokenises too finds it empty and makes its own.
    let mut buffer = BUFFER.take();
    // Tool text is mostly ASCII: its bytes are its characters, no UTF-8 decoding needed.
    if text.is_ascii() {
        split_ascii(text, &mut buffer, &mut emit);
    } else {
        split_mixed(text, &mut buffer, &mut emit);
    }
    if buffer.capacity() <= KEPT_BUFFER {
        buffer.clear();
        BUFFER.set(buffer);
    }
}

thread_local! {
    /// The buffer words are lowercased and folded in, kept from one text to the next: one
    /// allocated (and freed) per text that has a capital letter took tokenise+hash of 1,000 new
    /// tools from 1.76 to 1.71 ms in Liftoff. One thread per worker, so one buffer.
    static BUFFER: Cell<String> = const { Cell::new(String::new()) };
}

/// The largest [`BUFFER`] kept (a word longer than this is rare, and its bytes are not held
/// on to after its text).
const KEPT_BUFFER: usize = 256;

/// Text that is not all ASCII: only the stretches around its other characters go through the
/// character path ([`split_into`]), the rest through the byte path. An ASCII separator ends
/// every word and leaves the character path as it began, so the text can be cut just after
/// one (before a stretch) and at one (after it) with the same terms out. A long English
/// description with one "⚠️" or "≤" in it went character by character: an eighth of the
/// text of 1,000 shared tools. Splitting around the stretches took their tokenise+hash from
/// 1.59 to 1.51 ms in Liftoff, 1.73 to 1.13 ms in V8's optimising tier.
fn split_mixed(text: &str, buffer: &mut String, emit: &mut impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let separator =
        |b: &u8| b.is_ascii() && ASCII_CLASSES.get(usize::from(*b)).copied() == Some(Class::Other);
    let mut done = 0;
    while let Some(wide) = bytes
        .get(done..)
        .and_then(|rest| rest.iter().position(|b| !b.is_ascii()))
        .map(|at| done + at)
    {
        let start = bytes
            .get(done..wide)
            .and_then(|ascii| ascii.iter().rposition(separator))
            .map_or(done, |at| done + at + 1);
        let end = bytes
            .get(wide..)
            .and_then(|rest| rest.iter().position(separator))
            .map_or(bytes.len(), |at| wide + at);
        split_ascii(text.get(done..start).unwrap_or_default(), buffer, emit);
        buffer.clear();
        split_into(
            text.get(start..end).unwrap_or_default().chars(),
            buffer,
            &mut *emit,
        );
        done = end;
    }
    split_ascii(text.get(done..).unwrap_or_default(), buffer, emit);
}

/// [`split_into`] for ASCII text, byte by byte: the same boundaries (ASCII has no caseless letters
/// and no ideographs). A word's class is decided by its first byte; its end is then found eight
/// bytes at a time ([`Chunks`]): a word that starts lower case ends where its lower-case run
/// does, one that starts with a capital ends after its capitals and the lower-case run behind
/// them (or one capital early: "Http" of "HTTPServer" starts at its "S"), a number where its
/// digits end. The word is lent as a slice of `text` when it has no capital letter, or
/// lowercased into the buffer. In Envoy's V8, which runs this baseline-compiled, every
/// instruction per byte counts: a byte-by-byte scan with a class per byte (and before it, a
/// character pushed into the buffer per byte) was most of the time tokenising took; finding
/// runs eight bytes at a time took tokenise+hash of 1,000 new tools from 2.26 to 1.83 ms in
/// Liftoff (1.27 to 1.10 ms natively).
fn split_ascii(text: &str, buffer: &mut String, emit: &mut impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let chunks = Chunks::new(bytes);
    // `buffer`: only words with a capital letter, and plurals in "-ies", are written there.
    let mut i = 0;
    while let Some(&first) = bytes.get(i) {
        let start = i;
        let class = ASCII_CLASSES
            .get(usize::from(first))
            .copied()
            .unwrap_or(Class::Other);
        match class {
            Class::Lower => {
                // Lower case runs until anything else: every other class starts a new word.
                let chunk = chunks.at(start);
                let run = run_of(chunk, b'a', b'z');
                let packed = if run < 8 {
                    i = start + run;
                    chunk & low_bytes(run)
                } else {
                    i = chunks.run_end(start + 8, b'a', b'z');
                    0
                };
                let word = text.get(start..i).unwrap_or_default();
                lend(word, packed, buffer, emit);
            }
            Class::Upper => {
                let chunk = chunks.at(start);
                let capitals = run_of(chunk, b'A', b'Z');
                i = if capitals == 1 {
                    // "Http": one capital, then lower case.
                    chunks.run_end(start + 1, b'a', b'z')
                } else {
                    let end = if capitals < 8 {
                        start + capitals
                    } else {
                        chunks.run_end(start + 8, b'A', b'Z')
                    };
                    // "HTTPServer": the last capital before lower case starts the next word.
                    if bytes.get(end).is_some_and(u8::is_ascii_lowercase) {
                        end - 1
                    } else {
                        end
                    }
                };
                let word = text.get(start..i).unwrap_or_default();
                if word.len() <= LONGEST_STOP_WORD {
                    // Letters only: setting each byte's 0x20 bit lowercases it.
                    let packed = (chunk | (ONES * 0x20)) & low_bytes(word.len());
                    if is_stop_packed(packed) {
                        continue;
                    }
                }
                // Tried, and no faster in Liftoff (tokenise+hash of 1,000 new tools, 1.51 ms
                // this way in the same session): the word lowercased on the stack and checked
                // with `str::from_utf8` (1.62), `push_str` then `make_ascii_lowercase` (1.57),
                // the whole text lowercased once into a second kept buffer and the word lent
                // from it (1.80).
                buffer.clear();
                // `& 0x7F` changes no letter but tells the compiler each char is one byte.
                buffer.extend(word.bytes().map(|b| char::from((b | 0x20) & 0x7F)));
                if matches!(buffer.as_bytes(), [_, _, _, .., b's']) {
                    fold_ascii(buffer);
                }
                emit(buffer);
            }
            Class::Digit => {
                // A number is never a stop word, nor has a plural.
                i = chunks.run_end(start + 1, b'0', b'9');
                emit(text.get(start..i).unwrap_or_default());
            }
            _ => i += 1,
        }
    }
}

/// Every byte of a `u64` set to 1.
const ONES: u64 = 0x0101_0101_0101_0101;
/// The high bit of every byte.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `chunk` that lies in `lo..=hi`, for bytes below 0x80 (ASCII,
/// and the zeros past a text's end) and `0 < lo <= hi < 0x80`. Adding `0x80 - lo` to a byte
/// sets its high bit exactly when it is at least `lo`, adding `0x7F - hi` when it is above
/// `hi`; neither carries into the next byte.
const fn within(chunk: u64, lo: u8, hi: u8) -> u64 {
    let at_least_lo = chunk.wrapping_add(ONES * (0x80 - lo) as u64);
    let above_hi = chunk.wrapping_add(ONES * (0x7F - hi) as u64);
    at_least_lo & !above_hi & HIGH
}

/// How many of `chunk`'s bytes, from its first (lowest), lie in `lo..=hi`: 0 to 8.
fn run_of(chunk: u64, lo: u8, hi: u8) -> usize {
    (!within(chunk, lo, hi) & HIGH).trailing_zeros() as usize / 8
}

/// The lowest `n` bytes set, for `n` in 0..=7.
fn low_bytes(n: usize) -> u64 {
    !u64::MAX.wrapping_shl((n as u32).wrapping_mul(8))
}

/// An ASCII text read eight bytes at a time, as `u64`s (little-endian: the first byte lowest),
/// zeros past its end. A zero byte is in no class, so it ends every run at the text's end.
struct Chunks<'a> {
    bytes: &'a [u8],
    /// The text's last eight bytes (all of it, zero-padded, when shorter), from `last_at`.
    last: u64,
    last_at: usize,
}

impl<'a> Chunks<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        let last = match bytes.last_chunk::<8>() {
            Some(chunk) => u64::from_le_bytes(*chunk),
            None => {
                let mut chunk = [0u8; 8];
                for (to, from) in chunk.iter_mut().zip(bytes) {
                    *to = *from;
                }
                u64::from_le_bytes(chunk)
            }
        };
        Chunks {
            bytes,
            last,
            last_at: bytes.len().saturating_sub(8),
        }
    }

    /// The eight bytes from `at`.
    fn at(&self, at: usize) -> u64 {
        if let Some(chunk) = self.bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
            return u64::from_le_bytes(*chunk);
        }
        // Fewer than eight bytes left: the last chunk, shifted.
        u32::try_from(at.wrapping_sub(self.last_at).wrapping_mul(8))
            .ok()
            .and_then(|shift| self.last.checked_shr(shift))
            .unwrap_or(0)
    }

    /// Where the run of bytes in `lo..=hi` that goes on at `at` ends.
    fn run_end(&self, mut at: usize, lo: u8, hi: u8) -> usize {
        loop {
            let run = run_of(self.at(at), lo, hi);
            at += run;
            if run < 8 {
                return at;
            }
        }
    }
}

/// [`flush`] for a lower-case ASCII word that is not in a buffer: lent as it is, or cut, and
/// written to `buffer` only when its plural folds into another letter ("queries" → "query").
/// `packed` is the word [`packed`] when it is no longer than [`LONGEST_STOP_WORD`].
fn lend(word: &str, packed: u64, buffer: &mut String, emit: &mut impl FnMut(&str)) {
    if word.len() <= LONGEST_STOP_WORD && is_stop_packed(packed) {
        return;
    }
    // Most words are no plural: lent without [`plural`], a call of its own in the .wasm, and
    // without cutting (which checks the cut is on a character boundary).
    if !matches!(word.as_bytes(), [_, _, _, .., b's']) {
        emit(word);
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

/// The character path on its own: what every text split the same as, in tests.
#[cfg(test)]
fn split(chars: impl Iterator<Item = char>, emit: impl FnMut(&str)) {
    split_into(chars, &mut String::with_capacity(32), emit);
}

/// Text → terms, character by character, with the words written in `word` (empty at first).
///
/// Scripts written without spaces between words (Han, Hiragana, Katakana, Hangul, Thai:
/// [`is_unspaced`]) have no word boundary to split at: each character of a run is a term, and
/// so is each pair of neighbours ("東京の天気" → 東, 東京, 京, 京の, の, の天, 天, 天気, 気),
/// as Lucene's `CJKBigramFilter` indexes them with `outputUnigrams`. The bigrams carry the
/// words of two characters, the characters the words of one (雨, 株) and the words split
/// otherwise; a bigram that straddles two words only adds a term no tool has. No dictionary
/// in the `.wasm`. On the catalogs described in Chinese and Japanese (`tests/data/languages/`,
/// half 0) characters and bigrams kept Recall@5 .625 / .750 where characters alone kept .625 /
/// .675 and bigrams alone .525 / .700 (`docs/BENCHMARKS.md`). Every other character splits as
/// before.
fn split_into(chars: impl Iterator<Item = char>, word: &mut String, mut emit: impl FnMut(&str)) {
    let mut prev = Class::Other;
    let mut chars = chars.peekable();
    // The last character of the run of unspaced characters so far.
    let mut run: Option<char> = None;
    while let Some(c) = chars.next() {
        let class = Class::of(c);
        if class == Class::Ideograph {
            flush(word, &mut emit);
            if let Some(last) = run {
                emit_pair(last, c, &mut emit);
            }
            emit(c.encode_utf8(&mut [0u8; 4]));
            run = Some(c);
            prev = Class::Other;
            continue;
        }
        run = None;
        if class == Class::Other {
            flush(word, &mut emit);
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
            flush(word, &mut emit);
        }
        if c.is_ascii() {
            word.push(c.to_ascii_lowercase());
        } else {
            word.extend(c.to_lowercase());
        }
        prev = class;
    }
    flush(word, &mut emit);
}

/// Two characters of an unspaced run as one term. Lowercased as any term is (Han and kana
/// have no case; a fullwidth Latin letter inside a run would).
fn emit_pair(first: char, second: char, emit: &mut impl FnMut(&str)) {
    let mut pair = [0u8; 8];
    let a = first.encode_utf8(&mut pair).len();
    let b = second
        .encode_utf8(pair.get_mut(a..).unwrap_or_default())
        .len();
    if let Some(Ok(text)) = pair.get(..a + b).map(std::str::from_utf8) {
        emit(text);
    }
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
    /// A character of a script written without spaces ([`is_unspaced`]).
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
        if is_unspaced(c) {
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

/// A word of at most 8 bytes as one number: its bytes little-endian (the first byte lowest, as
/// [`Chunks`] reads them), zero-padded. Words never hold a zero byte, so two words differ
/// exactly when their numbers do (and no word is 0).
const fn packed(word: &[u8]) -> u64 {
    let mut out = 0u64;
    let mut rest = word;
    let mut shift = 0;
    while let [first, tail @ ..] = rest {
        if shift < 64 {
            out |= (*first as u64) << shift;
        }
        shift += 8;
        rest = tail;
    }
    out
}

/// Slots of [`STOP_TABLE`]: a power of two, nine times the stop words, so that a word that is
/// none (most are) nearly always stops at its first, empty slot. With 256 slots a miss went
/// through two or three; 1,024 (and a cheaper mask of the word's bytes) took tokenise+hash of
/// 1,000 new tools from 1.71 to 1.51 ms in Liftoff (1.06 to 0.90 ms natively).
const STOP_SLOTS: usize = 1024;

/// A slot of [`STOP_TABLE`] is the top bits of the word times a large odd number.
const STOP_SHIFT: u32 = 64 - STOP_SLOTS.trailing_zeros();

fn stop_slot(word: u64) -> usize {
    (word.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> STOP_SHIFT) as usize % STOP_SLOTS
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
        let mut slot =
            (word.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> STOP_SHIFT) as usize % STOP_SLOTS;
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
        .rev()
        .fold(0u64, |packed, b| (packed << 8) | u64::from(b));
    is_stop_packed(word)
}

/// Whether a word [`packed`] is a stop word; 0 (no word) is none.
fn is_stop_packed(word: u64) -> bool {
    let mut slot = stop_slot(word);
    for _ in 0..STOP_SLOTS {
        match STOP_TABLE.get(slot) {
            Some(&w) if w == word => return word != 0,
            Some(0) | None => return false,
            Some(_) => slot = (slot + 1) % STOP_SLOTS,
        }
    }
    false
}

/// "queries" → "query", "messages" → "message", "addresses" → "address"; leaves "status",
/// "analysis", "class" and short words alone. In place.
fn fold_plural(w: &mut String) {
    if w.is_ascii() {
        fold_ascii(w);
    }
}

/// [`fold_plural`] for a word known to be ASCII.
fn fold_ascii(w: &mut String) {
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
    // Most words end in no "s": one comparison says so.
    if n <= 3 || w.last() != Some(&b's') {
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

/// Whether `term` is a bigram of an unspaced script ([`split_into`]): two characters of it. A
/// term that starts with an ASCII byte is decided at its first byte.
pub fn is_unspaced_pair(term: &str) -> bool {
    if term.as_bytes().first().is_none_or(u8::is_ascii) {
        return false;
    }
    let mut chars = term.chars();
    matches!(
        (chars.next(), chars.next(), chars.next()),
        (Some(a), Some(b), None) if is_unspaced(a) && is_unspaced(b)
    )
}

/// Characters of scripts written without spaces between words, tokenised into bigrams
/// ([`split_into`]): the letters of Han, kana, Hangul and Thai (not their digits or
/// punctuation, which split as before).
pub fn is_unspaced(c: char) -> bool {
    matches!(c as u32,
        0x0E01..=0x0E4E      // Thai letters, vowels and tone marks
        | 0x1100..=0x11FF    // Hangul Jamo
        | 0x3005..=0x3007    // 々 〆 〇
        | 0x3040..=0x309F    // Hiragana
        | 0x30A0..=0x30FF    // Katakana (with the prolonged sound mark ー)
        | 0x3131..=0x318E    // Hangul compatibility Jamo
        | 0x31F0..=0x31FF    // Katakana phonetic extensions
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0xFF66..=0xFF9F    // halfwidth Katakana
        | 0x20000..=0x2FA1F) // CJK Extensions B to F, compatibility supplement
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

/// The last at most `max` bytes of `text`, cut on a character boundary.
pub fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.get(start..).unwrap_or_default()
}

/// Like [`bounded`] but keeps the first and the last `max / 2` bytes.
pub fn head_and_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let half = max / 2;
    format!("{} {}", bounded(text, half), tail(text, half))
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
        split_ascii(t, &mut String::new(), &mut |w: &str| out.push(w.to_owned()));
        out
    }

    /// The ASCII path as it was before it read eight bytes at a time (commit 705bed7), kept
    /// as the reference the faster one must agree with, term for term.
    mod reference {
        use super::super::{ASCII_CLASSES, Class, Fold, LONGEST_STOP_WORD, STOP_WORDS};

        pub fn split_ascii(text: &str, emit: &mut impl FnMut(&str)) {
            let bytes = text.as_bytes();
            let class = |b: u8| {
                ASCII_CLASSES
                    .get(usize::from(b))
                    .copied()
                    .unwrap_or(Class::Other)
            };
            let mut buffer = String::new();
            let mut i = 0;
            loop {
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
                while let Some(&b) = bytes.get(i) {
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

        fn flush(word: &mut String, emit: &mut impl FnMut(&str)) {
            if word.is_empty() {
                return;
            }
            if word.len() > LONGEST_STOP_WORD || !is_stop_word(word) {
                if word.is_ascii() {
                    match plural(word.as_bytes()) {
                        Fold::Cut(len) => word.truncate(len),
                        Fold::IesToY(len) => {
                            word.truncate(len);
                            word.push('y');
                        }
                    }
                }
                emit(word);
            }
            word.clear();
        }

        fn is_stop_word(word: &str) -> bool {
            !word.is_empty() && word.len() <= LONGEST_STOP_WORD && STOP_WORDS.contains(&word)
        }

        fn plural(w: &[u8]) -> Fold {
            let n = w.len();
            if n <= 3 {
                return Fold::Cut(n);
            }
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
    }

    fn by_reference(t: &str) -> Vec<String> {
        let mut out = Vec::new();
        reference::split_ascii(t, &mut |w: &str| out.push(w.to_owned()));
        out
    }

    proptest::proptest! {
        /// Any ASCII text, with runs of each class long and short around the eight-byte
        /// chunks, splits into the same terms as the reference did.
        #[test]
        fn ascii_path_matches_the_reference(
            t in "([a-zA-Z0-9 _.,:/\"{}()\t\n-]|ies|IES|es|ches|sses|xes|us|the|The|THE|HTTP|Ab|about|looking|LOOKING|abcdefghi|ABCDEFGHIJ|0123456789|[a-z]{6,18}|[A-Z]{6,18}|[A-Z][a-z]{5,12}s){0,24}"
        ) {
            proptest::prop_assert_eq!(by_ascii(&t), by_reference(&t));
        }

        /// Any ASCII text at all, bytes 0 to 127.
        #[test]
        fn any_ascii_matches_the_reference(t in "[\\x00-\\x7F]{0,40}") {
            proptest::prop_assert_eq!(by_ascii(&t), by_reference(&t));
        }
    }

    proptest::proptest! {
        /// Any text, ASCII mixed with other letters (with and without case, one whose lower
        /// case is two characters, combining marks), digits, ideographs, symbols and emoji,
        /// splits the same as by characters alone.
        #[test]
        fn mixed_text_splits_as_by_characters(
            t in "([a-cA-CsSyY0-9 _.\n-]|ies|The|HTTP|Ab|about|abcdefghij|[äÄßİǅ\u{301}ΣσЖж٣汉字⚠️≤🚨]){0,30}"
        ) {
            let mut out = Vec::new();
            for_each_term(&t, |w| out.push(w.to_owned()));
            proptest::prop_assert_eq!(out, by_chars(&t));
        }
    }

    /// Every string of the shared datasets' tools (names, descriptions, parameter names and
    /// descriptions, enums), and each whole line, as the reference split them (the ASCII
    /// ones) or the character path does (the others).
    #[test]
    fn dataset_tools_split_as_the_reference_did() {
        fn strings<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
            match value {
                serde_json::Value::String(s) => out.push(s),
                serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
                serde_json::Value::Object(fields) => fields.iter().for_each(|(k, v)| {
                    out.push(k);
                    strings(v, out);
                }),
                _ => {}
            }
        }
        // `../shared` beside the main checkout, `../../shared` from a worktree under `wt/`;
        // the shared datasets must sit beside the repository, as the quality floor's test
        // requires too.
        let dir = env!("CARGO_MANIFEST_DIR");
        let root = [
            format!("{dir}/../shared/datasets"),
            format!("{dir}/../../shared/datasets"),
        ]
        .into_iter()
        .find(|root| std::path::Path::new(root).is_dir())
        .expect("the shared datasets beside the repository");
        let mut checked = 0;
        for name in ["livemcpbench", "toolbench", "seal_tools"] {
            let lines = std::fs::read_to_string(format!("{root}/{name}/tools.jsonl"))
                .expect("a shared dataset's tools");
            for line in lines.lines() {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                let mut texts = vec![line];
                strings(&value, &mut texts);
                for t in texts {
                    if t.is_ascii() {
                        assert_eq!(by_ascii(t), by_reference(t), "{t}");
                    } else {
                        let mut out = Vec::new();
                        for_each_term(t, |w| out.push(w.to_owned()));
                        assert_eq!(out, by_chars(t), "{t}");
                    }
                    checked += 1;
                }
            }
        }
        eprintln!("{checked} dataset texts checked");
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
    fn unspaced_scripts_split_into_characters_and_bigrams() {
        assert_eq!(
            terms("查询天气 weather"),
            ["查", "查询", "询", "询天", "天", "天气", "气", "weather"]
        );
        assert_eq!(
            terms("東京の天気"),
            ["東", "東京", "京", "京の", "の", "の天", "天", "天気", "気"]
        );
        // Punctuation and spaces end a run.
        assert_eq!(terms("天，气 雨"), ["天", "气", "雨"]);
        assert_eq!(
            terms("iPhone用の充電器"),
            [
                "phone", "用", "用の", "の", "の充", "充", "充電", "電", "電器", "器"
            ]
        );
        assert_eq!(terms("날씨 알려"), ["날", "날씨", "씨", "알", "알려", "려"]);
        assert_eq!(terms("ยาก"), ["ย", "ยา", "า", "าก", "ก"]);
        // Digits inside a run split it, as elsewhere.
        assert_eq!(terms("第3章"), ["第", "3", "章"]);
    }

    proptest::proptest! {
        /// Text in scripts with spaces, and Latin text around unspaced runs, splits as it
        /// did before bigrams: only the runs themselves gain their bigrams.
        #[test]
        fn only_unspaced_runs_change(
            latin in "([a-zA-Z0-9 _.,-]|ä|é|ß|Ж|ж|σ|ع|ب|ש){0,30}",
            run in "[一-龥ぁ-んァ-ン가-힣]{0,6}"
        ) {
            let before = terms(&latin);
            let around = terms(&format!("{latin} {run} {latin}"));
            let run_terms = terms(&run);
            let expected: Vec<String> = before
                .iter()
                .chain(&run_terms)
                .chain(&before)
                .cloned()
                .collect();
            proptest::prop_assert_eq!(around, expected);
            let n = run.chars().count();
            proptest::prop_assert_eq!(run_terms.len(), (2 * n).saturating_sub(1));
        }
    }

    proptest::proptest! {
        /// Any text at all, unspaced runs among every other class: no panic, every term
        /// non-empty, the same terms twice, and the character path's terms.
        #[test]
        fn any_text_with_unspaced_runs(
            t in r"([a-cA-C0-9 _.\n-]|[一-龥]|[ぁ-ん]|[ァ-ンー]|[가-힣]|[ก-๛]|[ｦ-ﾟ]|\PC){0,40}"
        ) {
            let once = terms(&t);
            proptest::prop_assert!(once.iter().all(|w| !w.is_empty()));
            proptest::prop_assert_eq!(&once, &terms(&t));
            proptest::prop_assert_eq!(once, by_chars(&t));
        }
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
