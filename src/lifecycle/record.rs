//! An LLM request's one record for the access log: filter state `toolsift`
//! (`%FILTER_STATE(wasm.toolsift:PLAIN)%`). Each filter-state write costs Envoy about 5 µs, so
//! a request writes it once, when its answer's headers come: what `x-toolsift` says, the tools'
//! tokens, and the access verdicts decided so far. What only the answer shows (the access
//! guard's verdicts on its calls, shadow's ranks of them) rewrites the whole value later:
//! Envoy's `set_property` replaces the value of a key already set. The grammar is in
//! docs/report.md ("The record"); `toolsift report` reads it ([`crate::offline::report`]).

use super::proxy::Proxy;

/// The parts of the record, each already in its `key=value` form; written when a part changed.
#[derive(Default)]
pub struct Record {
    /// What `x-toolsift` says, then ` tokens=before/after` when the tools were filtered.
    head: Option<String>,
    /// ` verdicts=item,item`: every access verdict recorded for the request.
    verdicts: String,
    /// ` calls=… missed=… top_k=… tools=… catalog=…`: shadow's measure of the answer.
    shadow: String,
    /// A part changed since the record was last written.
    changed: bool,
}

impl Record {
    /// What the request's answer's headers report, with the tools' tokens (`before/after`) when
    /// the tools were filtered.
    pub fn set_head(&mut self, header: &str, tokens: Option<(usize, usize)>) {
        let mut head = String::with_capacity(header.len() + 24);
        head.push_str(header);
        if let Some((before, after)) = tokens {
            head.push_str(&format!(" tokens={before}/{after}"));
        }
        self.head = Some(head);
        self.changed = true;
    }

    /// Every access verdict recorded for the request, as [`super::audit`] writes each item.
    pub fn set_verdicts(&mut self, items: &[String]) {
        self.verdicts = format!(" verdicts={}", items.join(","));
        self.changed = true;
    }

    /// Shadow's fields ([`crate::shadow::Record::fields`]).
    pub fn set_shadow(&mut self, fields: &str) {
        self.shadow = format!(" {fields}");
        self.changed = true;
    }

    /// The value as the access log gets it.
    pub fn value(&self) -> String {
        let head = self.head.as_deref().unwrap_or_default();
        let value = format!("{head}{}{}", self.verdicts, self.shadow);
        // Without a head the first field would start with a space.
        match value.strip_prefix(' ') {
            Some(rest) => rest.to_owned(),
            None => value,
        }
    }

    /// Writes the record if a part changed since it was last written (one filter-state write).
    pub fn flush<P: Proxy>(&mut self, proxy: &P) {
        if !self.changed {
            return;
        }
        self.changed = false;
        proxy.record("toolsift", &self.value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_in_their_order_each_once() {
        let mut record = Record::default();
        record.set_head("kept=5 total=80", Some((5210, 340)));
        assert_eq!(record.value(), "kept=5 total=80 tokens=5210/340");
        record.set_shadow("calls=a@1 missed=0 top_k=5 tools=80 catalog=3fa2b1c0");
        record.set_verdicts(&["deny:call:default:b".to_owned(), "deny:call:r:c".to_owned()]);
        assert_eq!(
            record.value(),
            "kept=5 total=80 tokens=5210/340 verdicts=deny:call:default:b,deny:call:r:c \
             calls=a@1 missed=0 top_k=5 tools=80 catalog=3fa2b1c0"
        );
    }

    #[test]
    fn verdicts_without_a_head_start_the_record() {
        let mut record = Record::default();
        record.set_verdicts(&["would_deny:request:r:-".to_owned()]);
        assert_eq!(record.value(), "verdicts=would_deny:request:r:-");
        let mut skipped = Record::default();
        skipped.set_head("skipped=compressed", None);
        assert_eq!(skipped.value(), "skipped=compressed");
    }
}
