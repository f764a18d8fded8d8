//! Tools written as text tags inside a message (the convention of WSO2's semantic tool
//! filtering): `<toolname>get_weather</toolname><tooldescription>Current weather for a
//! city</tooldescription>`, optionally followed by `<toolparameters>{JSON Schema or
//! text}</toolparameters>`, and the question as `<userq>…</userq>`.
//!
//! The tags are searched in the decoded text of a JSON string ([`Decoded`]), so escapes in the
//! body (`\"`, `\n`, `\u00e9`, even `\u003c` for `<`) read as the characters they stand for;
//! what is cut out of the text is mapped back to the string's raw bytes, so a rewritten string
//! keeps every other byte, escapes included, as the client wrote it.

use std::ops::Range;

pub const TOOL_NAME: Tag = Tag("<toolname>", "</toolname>");
pub const TOOL_DESCRIPTION: Tag = Tag("<tooldescription>", "</tooldescription>");
pub const TOOL_PARAMETERS: Tag = Tag("<toolparameters>", "</toolparameters>");
pub const QUESTION: Tag = Tag("<userq>", "</userq>");
const ALL: [Tag; 4] = [TOOL_NAME, TOOL_DESCRIPTION, TOOL_PARAMETERS, QUESTION];

/// An opening and a closing tag. Tags are matched exactly (case included), as WSO2 does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag(pub &'static str, pub &'static str);

/// One tool found in a text: byte ranges in that text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// From `<toolname>` to the end of its last tag.
    pub span: Range<usize>,
    /// What is removed when the tool is dropped: the span and the line break right after it,
    /// so that a tool on a line of its own leaves no empty line.
    pub removal: Range<usize>,
    /// The contents of each tag, trimmed.
    pub name: Range<usize>,
    pub description: Option<Range<usize>>,
    pub parameters: Option<Range<usize>>,
}

/// Every tool block of `text`, in order. A block is `<toolname>NAME</toolname>`, then (after
/// white space, if any) an optional `<tooldescription>…</tooldescription>`, then an optional
/// `<toolparameters>…</toolparameters>`. A tag without its closing tag is text, as is a
/// `<toolname>` whose name is empty; of nested `<toolname>`s the innermost is the tool.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut at = 0;
    // Where the optional tags' last closing tags are: past them no search can succeed, so a
    // text of many unclosed tags is read in one pass, not one pass per tag.
    let last_close = |tag: Tag| text.rfind(tag.1);
    let closes = [last_close(TOOL_DESCRIPTION), last_close(TOOL_PARAMETERS)];
    while let Some(open) = find(text, TOOL_NAME.0, at) {
        let name_start = open + TOOL_NAME.0.len();
        let Some(close) = find(text, TOOL_NAME.1, name_start) else {
            // No `</toolname>` follows: no later `<toolname>` can be closed either.
            break;
        };
        // Nested: the last `<toolname>` before the closing tag is the tool's.
        if let Some(inner) = text
            .get(name_start..close)
            .and_then(|name| name.rfind(TOOL_NAME.0))
        {
            at = name_start + inner;
            continue;
        }
        let name = trimmed(text, name_start..close);
        let mut end = close + TOOL_NAME.1.len();
        if name.is_empty() {
            at = end;
            continue;
        }
        let [description_close, parameters_close] = closes;
        let description = optional(text, &mut end, TOOL_DESCRIPTION, description_close);
        let parameters = optional(text, &mut end, TOOL_PARAMETERS, parameters_close);
        let rest = text.get(end..).unwrap_or_default();
        let line_break = if rest.starts_with("\r\n") {
            2
        } else {
            usize::from(rest.starts_with('\n'))
        };
        out.push(Block {
            span: open..end,
            removal: open..end + line_break,
            name,
            description,
            parameters,
        });
        at = end;
    }
    out
}

/// The tag `tag` right after `*end` (white space between allowed) and closed: its trimmed
/// contents; `*end` moves past it. `last_close`: where the text's last closing tag starts.
fn optional(
    text: &str,
    end: &mut usize,
    tag: Tag,
    last_close: Option<usize>,
) -> Option<Range<usize>> {
    let rest = text.get(*end..)?;
    let start = *end + (rest.len() - rest.trim_start().len());
    if !text.get(start..)?.starts_with(tag.0) {
        return None;
    }
    let inner = start + tag.0.len();
    if last_close.is_none_or(|last| last < inner) {
        return None;
    }
    let close = find(text, tag.1, inner)?;
    *end = close + tag.1.len();
    Some(trimmed(text, inner..close))
}

/// The trimmed contents of the first closed `<userq>…</userq>` of `text`.
pub fn question(text: &str) -> Option<&str> {
    let open = find(text, QUESTION.0, 0)?;
    let inner = open + QUESTION.0.len();
    let close = find(text, QUESTION.1, inner)?;
    text.get(trimmed(text, inner..close))
}

/// Every tag of the convention in `text`, closed or not: what `strip_tags` removes.
pub fn markup(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(open) = find(text, "<", at) {
        let rest = text.get(open..).unwrap_or_default();
        let tag = ALL
            .iter()
            .flat_map(|t| [t.0, t.1])
            .find(|t| rest.starts_with(t));
        match tag {
            Some(tag) => {
                out.push(open..open + tag.len());
                at = open + tag.len();
            }
            None => at = open + 1,
        }
    }
    out
}

fn find(text: &str, needle: &str, from: usize) -> Option<usize> {
    text.get(from..)?.find(needle).map(|i| from + i)
}

fn trimmed(text: &str, range: Range<usize>) -> Range<usize> {
    let inner = text.get(range.clone()).unwrap_or_default();
    let start = range.start + (inner.len() - inner.trim_start().len());
    start..start + inner.trim().len()
}

/// A JSON string literal decoded, with where each escape sat in the literal: positions in the
/// decoded text map back to the literal's bytes.
#[derive(Debug)]
pub struct Decoded {
    pub text: String,
    /// Each escape: (its position in `text`, its bytes in `text`, its start in the literal,
    /// its bytes in the literal).
    escapes: Vec<(usize, usize, usize, usize)>,
    /// The literal's length, quotes included.
    literal_len: usize,
}

impl Decoded {
    /// Decodes `literal`, a JSON string with its quotes. `None` when it is not one (or holds a
    /// lone surrogate, which no Rust string can).
    pub fn new(literal: &str) -> Option<Decoded> {
        let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
        let mut text = String::with_capacity(inner.len());
        let mut escapes = Vec::new();
        let bytes = inner.as_bytes();
        let mut i = 0;
        let mut run = 0;
        while i < bytes.len() {
            let b = *bytes.get(i)?;
            if b == b'"' || b < 0x20 {
                return None;
            }
            if b != b'\\' {
                i += 1;
                continue;
            }
            text.push_str(inner.get(run..i)?);
            let (c, len) = escape(inner.get(i..)?)?;
            escapes.push((text.len(), c.len_utf8(), 1 + i, len));
            text.push(c);
            i += len;
            run = i;
        }
        text.push_str(inner.get(run..)?);
        Some(Decoded {
            text,
            escapes,
            literal_len: literal.len(),
        })
    }

    /// Where the character at (or the end at) `pos` of the text starts in the literal.
    pub fn literal_offset(&self, pos: usize) -> usize {
        // The last escape at or before `pos`.
        let i = self.escapes.partition_point(|e| e.0 <= pos);
        match i.checked_sub(1).and_then(|i| self.escapes.get(i)) {
            None => 1 + pos,
            Some(&(at, _, raw, _)) if at == pos => raw,
            Some(&(at, len, raw, raw_len)) => raw + raw_len + pos.saturating_sub(at + len),
        }
        .min(self.literal_len - 1)
    }

    /// The literal's byte range of the text's `range`.
    pub fn literal_range(&self, range: Range<usize>) -> Range<usize> {
        self.literal_offset(range.start)..self.literal_offset(range.end)
    }
}

/// The escape at the start of `s`: the character it stands for and its length.
fn escape(s: &str) -> Option<(char, usize)> {
    let c = match s.as_bytes().get(1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let unit = hex(s.get(2..6)?)?;
            if (0xD800..0xDC00).contains(&unit) {
                let low = s.get(6..12).filter(|l| l.starts_with("\\u"))?;
                let low = hex(low.get(2..)?)?;
                if !(0xDC00..0xE000).contains(&low) {
                    return None;
                }
                let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                return Some((char::from_u32(c)?, 12));
            }
            return Some((char::from_u32(unit)?, 6));
        }
        _ => return None,
    };
    Some((c, 2))
}

fn hex(digits: &str) -> Option<u32> {
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// `literal` without the byte ranges `cuts` (sorted or not, overlapping or not).
pub fn cut(literal: &str, cuts: &[Range<usize>]) -> String {
    let mut cuts: Vec<Range<usize>> = cuts.iter().filter(|c| c.start < c.end).cloned().collect();
    cuts.sort_by_key(|c| c.start);
    let mut out = String::with_capacity(literal.len());
    let mut at = 0;
    for c in cuts {
        if c.start > at {
            out.push_str(literal.get(at..c.start).unwrap_or_default());
        }
        at = at.max(c.end);
    }
    out.push_str(literal.get(at..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<&str> {
        blocks(text).iter().map(|b| &text[b.name.clone()]).collect()
    }

    #[test]
    fn finds_tools_with_and_without_their_optional_tags() {
        let text = "Tools:\n<toolname>get_weather</toolname><tooldescription> Weather now </tooldescription>\n<toolname> send_email </toolname>\n  <tooldescription>Send mail</tooldescription> <toolparameters>{\"type\":\"object\"}</toolparameters>\n<toolname>bare</toolname>\n<userq>hi</userq>";
        let found = blocks(text);
        assert_eq!(names(text), ["get_weather", "send_email", "bare"]);
        assert_eq!(&text[found[0].description.clone().unwrap()], "Weather now");
        assert_eq!(
            &text[found[1].parameters.clone().unwrap()],
            "{\"type\":\"object\"}"
        );
        assert_eq!(found[2].description, None);
        // A block's removal takes its line break: the line goes with it.
        assert_eq!(
            &text[found[0].removal.clone()],
            &text[found[0].span.start..found[1].span.start]
        );
        assert!(text[found[1].removal.clone()].ends_with("</toolparameters>\n"));
        assert_eq!(question(text), Some("hi"));
    }

    #[test]
    fn unclosed_nested_and_empty_tags_are_text() {
        assert!(names("<toolname>never closed").is_empty());
        assert_eq!(
            names("<toolname>outer <toolname>inner</toolname>"),
            ["inner"]
        );
        assert!(names("<toolname>  </toolname>").is_empty());
        // An unclosed description: the tool has none, the tag stays text.
        let text = "<toolname>a</toolname><tooldescription>open";
        let found = blocks(text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].description, None);
        assert_eq!(&text[found[0].span.clone()], "<toolname>a</toolname>");
        // Text between the name and the description: the description is not the tool's.
        let text = "<toolname>a</toolname> and <tooldescription>d</tooldescription>";
        assert_eq!(blocks(text)[0].description, None);
        // A tag inside a description is the description's text.
        let text =
            "<toolname>a</toolname><tooldescription>see <toolname>b</toolname></tooldescription>";
        assert_eq!(names(text), ["a"]);
        assert_eq!(question("<userq>open"), None);
        assert_eq!(question("no question"), None);
    }

    #[test]
    fn many_unclosed_tags_are_read_in_one_pass() {
        let n = 200_000;
        let started = std::time::Instant::now();
        let nested = format!("{}a</toolname>", "<toolname>".repeat(n));
        assert_eq!(names(&nested), ["a"]);
        let open = "<toolname>a</toolname><tooldescription>".repeat(n);
        assert_eq!(blocks(&open).len(), n);
        assert!(blocks(&open).iter().all(|b| b.description.is_none()));
        let params =
            "<toolname>a</toolname><tooldescription>d</tooldescription><toolparameters>".repeat(n);
        assert_eq!(blocks(&params).len(), n);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn markup_is_every_tag_of_the_convention() {
        let text = "<b><userq>q</userq> <toolname>x</toolname><tooldescription>";
        let cut_out: Vec<&str> = markup(text).iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(
            cut_out,
            [
                "<userq>",
                "</userq>",
                "<toolname>",
                "</toolname>",
                "<tooldescription>"
            ]
        );
    }

    #[test]
    fn decodes_json_strings_and_maps_positions_back() {
        let literal = r#""a\"b\n\u00e9<\u003cx>\ud83d\ude00z""#;
        let d = Decoded::new(literal).unwrap();
        assert_eq!(d.text, serde_json::from_str::<String>(literal).unwrap());
        assert_eq!(d.text, "a\"b\né<<x>😀z");
        // Every character boundary maps to the start of what wrote it in the literal.
        for (pos, c) in d.text.char_indices() {
            let at = d.literal_offset(pos);
            let written = &literal[at..d.literal_offset(pos + c.len_utf8())];
            let decoded: String = serde_json::from_str(&format!("\"{written}\"")).unwrap();
            assert_eq!(decoded, c.to_string(), "at {pos}");
        }
        assert_eq!(d.literal_offset(d.text.len()), literal.len() - 1);
        let plain = Decoded::new(r#""héllo""#).unwrap();
        assert_eq!(plain.literal_offset(3), 4);
        for bad in [
            r#""\x""#,
            r#""\ud83d""#,
            r#""\u12""#,
            "\"a\u{1}\"",
            "nope",
            r#""a"b""#,
        ] {
            assert!(Decoded::new(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn cuts_ranges_out() {
        assert_eq!(cut("abcdef", &[3..4, 0..1, 1..2, 5..5]), "cef");
        assert_eq!(cut("abcdef", &[1..4, 2..3]), "aef");
        assert_eq!(cut("abc", &[]), "abc");
    }
}
