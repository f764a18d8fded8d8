//! Server-sent events, and the JSON-array stream Gemini sends without `alt=sse`, as frames.

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
                out.push(Frame {
                    event: event.take(),
                    data,
                });
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

/// The elements of a complete JSON-array stream (Gemini's `streamGenerateContent` without
/// `alt=sse`) as frames; `None` if it is not a complete array.
pub fn array_frames(text: &str) -> Option<Vec<Frame>> {
    let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(text).ok()?;
    Some(items.iter().map(|i| Frame::data(i.get())).collect())
}

#[cfg(test)]
mod tests {
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
}
