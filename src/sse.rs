//! Response streams as frames: server-sent events, newline-delimited JSON (Ollama), and the
//! JSON-array stream Gemini sends without `alt=sse`, and AWS's binary event stream (Bedrock's
//! `converse-stream`, [`eventstream`]). A dialect's codec says which framing its streams use
//! ([`Framing`]).
//!
//! Streams are read and edited as text: a binary event stream as its transcription into SSE
//! events (each message's type as the event name, its payload as the data), turned back into
//! messages only where bytes reach the client ([`Framing::wire_frames`], [`Framing::wire_text`],
//! [`Framing::to_wire`]).

pub mod eventstream;

/// How a response stream is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events.
    Sse,
    /// One JSON object per line (`application/x-ndjson`).
    Ndjson,
    /// AWS's binary event stream (`application/vnd.amazon.eventstream`), as text: its SSE
    /// transcription (see [`eventstream::frame_of`]).
    EventStream,
}

impl Framing {
    /// The complete events at the start of `text`, and how many bytes they span.
    pub fn frames(self, text: &str) -> (Vec<Frame>, usize) {
        let (framed, consumed) = self.frames_with_ends(text);
        (
            framed.into_iter().map(|(frame, _)| frame).collect(),
            consumed,
        )
    }

    /// [`Framing::frames`], each with the byte offset where it ends in `text`.
    pub fn frames_with_ends(self, text: &str) -> (Vec<(Frame, usize)>, usize) {
        match self {
            Framing::Sse | Framing::EventStream => frames_with_ends(text),
            Framing::Ndjson => lines_with_ends(text),
        }
    }

    /// Every frame written in this framing.
    pub fn write_all(self, frames: &[Frame]) -> String {
        match self {
            Framing::Sse | Framing::EventStream => write_all(frames),
            Framing::Ndjson => frames.iter().map(|f| format!("{}\n", f.data)).collect(),
        }
    }

    /// The complete events at the start of the bytes a stream came in, and how many bytes they
    /// span; `None` if they are not this framing (not UTF-8, a malformed or damaged message).
    pub fn wire_frames(self, bytes: &[u8]) -> Option<(Vec<Frame>, usize)> {
        match self {
            Framing::EventStream => eventstream::frames(bytes),
            _ => Some(self.frames(utf8_prefix(bytes)?)),
        }
    }

    /// A whole stream as it came in, as text; `None` if it is not this framing, or ends inside
    /// a message.
    pub fn wire_text(self, bytes: Vec<u8>) -> Option<String> {
        match self {
            Framing::EventStream => {
                let (frames, used) = eventstream::frames(&bytes)?;
                (used == bytes.len()).then(|| write_all(&frames))
            }
            _ => String::from_utf8(bytes).ok(),
        }
    }

    /// A stream's text as the client gets it; `None` if it is not whole events of this
    /// framing.
    pub fn to_wire(self, text: &str) -> Option<Vec<u8>> {
        match self {
            Framing::EventStream => {
                let (frames, used) = self.frames(text);
                if used != text.len() {
                    return None;
                }
                eventstream::write_all(&frames)
            }
            _ => Some(text.as_bytes().to_vec()),
        }
    }

    /// `stream` after its first `n` events, byte for byte.
    pub fn after_events(self, stream: &str, n: usize) -> &str {
        if n == 0 {
            return stream;
        }
        let (frames, _) = self.frames_with_ends(stream);
        let cut = frames.get(n - 1).map_or(stream.len(), |(_, end)| *end);
        stream.get(cut..).unwrap_or_default()
    }
}

/// The complete lines of a newline-delimited JSON stream, each a frame (blank lines skipped),
/// with the offset after its newline; a line without its newline yet waits for the next chunk.
fn lines_with_ends(text: &str) -> (Vec<(Frame, usize)>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((line, _)) = text.get(at..).and_then(|rest| rest.split_once('\n')) {
        at += line.len() + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !line.trim().is_empty() {
            out.push((Frame::data(line), at));
        }
    }
    (out, at)
}

/// One event of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The `event:` field (Anthropic and OpenAI Responses name their events).
    pub event: Option<String>,
    /// The `data:` lines, joined with newlines.
    pub data: String,
}

impl Frame {
    pub fn data(data: impl Into<String>) -> Frame {
        Frame {
            event: None,
            data: data.into(),
        }
    }

    pub fn named(event: &str, data: impl Into<String>) -> Frame {
        Frame {
            event: Some(event.to_owned()),
            data: data.into(),
        }
    }

    /// The frame as SSE text, ending with the blank line.
    pub fn write(&self, out: &mut String) {
        if let Some(event) = &self.event {
            out.push_str("event: ");
            out.push_str(event);
            out.push('\n');
        }
        for line in self.data.split('\n') {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
}

/// Every frame of `frames` written as SSE.
pub fn write_all(frames: &[Frame]) -> String {
    let mut out = String::new();
    for frame in frames {
        frame.write(&mut out);
    }
    out
}

/// The complete events at the start of `text`, and how many bytes they span (a partial event
/// at the end is left for the next chunk). Comments (`:`) and unknown fields are skipped;
/// events without data are dropped, as the SSE specification says.
pub fn frames(text: &str) -> (Vec<Frame>, usize) {
    let (framed, consumed) = frames_with_ends(text);
    (
        framed.into_iter().map(|(frame, _)| frame).collect(),
        consumed,
    )
}

/// [`frames`], each with the byte offset where it ends in `text` (after its blank line), so
/// a stream can be cut between events without writing them again.
pub fn frames_with_ends(text: &str) -> (Vec<(Frame, usize)>, usize) {
    let mut out = Vec::new();
    let mut consumed = 0;
    let mut event: Option<String> = None;
    let mut data: Option<String> = None;
    let mut at = 0;
    while at < text.len() {
        let Some((line, _)) = text.get(at..).and_then(|rest| rest.split_once('\n')) else {
            break;
        };
        let end = line.len();
        let line = line.strip_suffix('\r').unwrap_or(line);
        at += end + 1;
        if line.is_empty() {
            if let Some(data) = data.take() {
                let frame = Frame {
                    event: event.take(),
                    data,
                };
                out.push((frame, at));
            }
            event = None;
            consumed = at;
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    (out, consumed)
}

/// The text of `bytes` up to a character that a chunk boundary cut (its first bytes wait for
/// the next chunk); `None` if they are not UTF-8.
pub fn utf8_prefix(bytes: &[u8]) -> Option<&str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Some(text),
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(bytes.get(..e.valid_up_to())?).ok()
        }
        Err(_) => None,
    }
}

/// The elements of a complete JSON-array stream (Gemini's `streamGenerateContent` without
/// `alt=sse`) as frames; `None` if it is not a complete array.
pub fn array_frames(text: &str) -> Option<Vec<Frame>> {
    let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(text).ok()?;
    Some(items.iter().map(|i| Frame::data(i.get())).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_up_to_a_cut_character() {
        let text = "data: é\n\n".as_bytes();
        assert_eq!(utf8_prefix(text), Some("data: é\n\n"));
        // "é" is two bytes: a chunk that ends after the first waits for the second.
        assert_eq!(utf8_prefix(&text[..7]), Some("data: "));
        assert_eq!(utf8_prefix(b"data: \xff\n"), None);
    }

    #[test]
    fn cut_after_events() {
        let stream = ": hi\n\nevent: a\ndata: 1\n\ndata: 2\r\n\r\ndata: 3\n\n";
        let after = |n| Framing::Sse.after_events(stream, n);
        assert_eq!(after(0), stream);
        assert_eq!(after(1), "data: 2\r\n\r\ndata: 3\n\n");
        assert_eq!(after(2), "data: 3\n\n");
        assert_eq!(after(3), "");
        assert_eq!(after(9), "");
        let (framed, _) = frames_with_ends(stream);
        assert_eq!(framed[0].0, Frame::named("a", "1"));
    }

    use super::*;

    #[test]
    fn splits_events_and_keeps_the_partial_tail() {
        let text = "event: a\ndata: {\"x\":1}\n\n: comment\ndata: 1\ndata: 2\r\n\r\ndata: par";
        let (frames, used) = frames(text);
        assert_eq!(
            frames,
            [Frame::named("a", "{\"x\":1}"), Frame::data("1\n2")]
        );
        assert_eq!(&text[used..], "data: par");
        assert_eq!(
            write_all(&frames),
            "event: a\ndata: {\"x\":1}\n\ndata: 1\ndata: 2\n\n"
        );
    }

    #[test]
    fn reads_json_array_streams() {
        let frames = array_frames("[{\"a\":1}\n,\r\n{\"b\":[2]}]").unwrap();
        assert_eq!(
            frames,
            [Frame::data("{\"a\":1}"), Frame::data("{\"b\":[2]}")]
        );
        assert_eq!(array_frames("[{\"a\":1}"), None);
    }

    #[test]
    fn splits_json_lines_and_keeps_the_partial_tail() {
        let text = "{\"a\":1}\r\n\n{\"b\":2}\n{\"c\"";
        let (frames, used) = Framing::Ndjson.frames(text);
        assert_eq!(frames, [Frame::data("{\"a\":1}"), Frame::data("{\"b\":2}")]);
        assert_eq!(&text[used..], "{\"c\"");
        assert_eq!(Framing::Ndjson.write_all(&frames), "{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(Framing::Ndjson.after_events(text, 1), "\n{\"b\":2}\n{\"c\"");
    }
}
