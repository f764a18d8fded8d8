//! What became of an LLM request, as the `x-toolsift` response header and the access log's
//! `toolsift` filter state say it. Decided while the request is read; said once its answer's
//! headers come.

use crate::embeddings::Fallback;
use crate::mcp::llm::Gated;
use crate::pipeline::{Skipped, header_safe, header_value};

/// What happened to the request, for the response headers.
// One per request, kept until its answer's headers: boxing the large variant would only add an
// allocation to the request's path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Filtered {
        kept: usize,
        total: usize,
        ranked: Ranked,
        /// `search` (the meta-tool was added) or `native` (the provider's own search).
        search: Option<&'static str>,
        /// Kept tools in rank order (with their channels when hybrid), for the debug header.
        kept_names: String,
        /// Under access rules: the function tools the caller may not see.
        denied: Option<usize>,
        /// Tools the loop guard took out (`loop=evicted:a,b`).
        evicted: Vec<String>,
        /// With `report_only`, tools it found looping and left in (`loop=detected:a,b`).
        detected: Vec<String>,
        /// Search mode: tools shown because the session's memory offered them
        /// (`remembered=a,b`).
        remembered: Vec<String>,
        /// Those whose latest result the upstream received with the guidance note
        /// (`noted=a`).
        noted: Vec<String>,
        /// Filter mode: tools the model called in its latest turn that the request does not
        /// carry (`unknown=x`).
        unknown: Vec<String>,
        /// Shadowed: how many tools the selection would have kept (`shadow=would_keep:5`).
        shadow: Option<usize>,
        /// `auto_k`: the k the selection had and where it came from (`k=auto:12`).
        auto_k: Option<crate::auto_k::Chosen>,
        /// A question the ranking could not read ([`crate::weak_query`]): of its content
        /// terms, how many the catalog has (`weak=0/9`).
        weak: Option<String>,
        /// Kept tools the ranking alone would not have kept, brought in by the fleet's
        /// transitions after the history's calls (`next=cat,diff`).
        next: Vec<String>,
    },
    Skipped(Skipped),
    /// Refused whole by access rules (HTTP 403).
    Denied {
        total: usize,
        denied: usize,
    },
    /// Under access rules with `"unknown_paths": "deny"`: refused (404 or 403) because its
    /// path is none toolsift governs (`access=refused refused=unknown_path`).
    UnknownPath,
}

/// How a request was ranked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ranked {
    /// `ranking: keyword`.
    Keyword,
    Hybrid,
    /// `ranking: hybrid`, ranked by keyword because the embeddings call failed.
    Fallback(Fallback),
    /// `ranking: hybrid`, ranked by keyword while a new catalog's vectors come in.
    Incomplete,
}

impl Ranked {
    /// What the `x-toolsift` header adds: nothing for keyword ranking.
    fn header_suffix(self) -> String {
        match self {
            Ranked::Keyword => String::new(),
            Ranked::Hybrid => " ranking=hybrid".to_owned(),
            Ranked::Fallback(f) => format!(" ranking=keyword fallback={}", f.name()),
            Ranked::Incomplete => " ranking=keyword fallback=incomplete".to_owned(),
        }
    }
}

impl Outcome {
    /// `kept` of `total` tools went on, ranked by keyword, with nothing else to say (`denied`:
    /// under access rules, those the caller may not see).
    pub fn filtered(kept: usize, total: usize, denied: Option<usize>) -> Outcome {
        Outcome::Filtered {
            kept,
            total,
            ranked: Ranked::Keyword,
            search: None,
            kept_names: String::new(),
            denied,
            evicted: Vec::new(),
            detected: Vec::new(),
            remembered: Vec::new(),
            noted: Vec::new(),
            unknown: Vec::new(),
            shadow: None,
            auto_k: None,
            weak: None,
            next: Vec::new(),
        }
    }

    /// The `x-toolsift` value (and the access log's `toolsift`), with what `_tool_gating` did
    /// when it had its say.
    pub fn header_value(&self, gated: Option<&Gated>) -> String {
        match self {
            Outcome::Filtered {
                kept,
                total,
                ranked,
                search,
                denied,
                evicted,
                detected,
                remembered,
                noted,
                unknown,
                shadow,
                auto_k,
                weak,
                next,
                ..
            } => {
                let mode = search.map(|s| format!(" search={s}")).unwrap_or_default();
                let gating = gated.map(Gated::header_suffix).unwrap_or_default();
                let denied = denied.map(|n| format!(" denied={n}")).unwrap_or_default();
                // Tool names are client data: percent-encoded, as everywhere in the header.
                let list = |names: &[String]| {
                    let safe: Vec<_> = names.iter().map(|n| header_safe(n)).collect();
                    safe.join(",")
                };
                let evicted = match (evicted.as_slice(), detected.as_slice()) {
                    ([], []) => String::new(),
                    ([], names) => format!(" loop=detected:{}", list(names)),
                    (names, _) => format!(" loop=evicted:{}", list(names)),
                };
                let evicted = match noted.as_slice() {
                    [] => evicted,
                    names => format!("{evicted} noted={}", list(names)),
                };
                let mut made_up: Vec<String> = Vec::new();
                for name in unknown {
                    if !made_up.contains(name) {
                        made_up.push(name.clone());
                    }
                }
                let unknown = match made_up.as_slice() {
                    [] => String::new(),
                    names => format!(" unknown={}", list(names)),
                };
                let remembered = match remembered.as_slice() {
                    [] => String::new(),
                    names => format!(" remembered={}", list(names)),
                };
                let shadow = shadow
                    .map(|n| format!(" shadow=would_keep:{n}"))
                    .unwrap_or_default();
                let auto_k = auto_k.map(|c| c.header_suffix()).unwrap_or_default();
                let next = match next.as_slice() {
                    [] => String::new(),
                    names => format!(" next={}", list(names)),
                };
                let weak = weak
                    .as_ref()
                    .map(|w| format!(" weak={w}"))
                    .unwrap_or_default();
                header_value(*kept, *total, None)
                    + &weak
                    + &auto_k
                    + &next
                    + &denied
                    + &evicted
                    + &unknown
                    + &ranked.header_suffix()
                    + &mode
                    + &remembered
                    + &gating
                    + &shadow
            }
            Outcome::Denied { total, denied } => {
                header_value(0, *total, None) + &format!(" denied={denied} access=refused")
            }
            // `access=refused` stays, so that readers which know no `refused=` count it as a
            // refusal still.
            Outcome::UnknownPath => {
                header_value(0, 0, None) + " access=refused refused=unknown_path"
            }
            Outcome::Skipped(skipped) => {
                let n = skipped.tools;
                header_value(n.unwrap_or(0), n.unwrap_or(0), Some(skipped))
            }
        }
    }

    /// The kept tools' names for `x-toolsift-tools` (debug), when there are any.
    pub fn kept_names(&self) -> Option<&str> {
        match self {
            // Search mode ranks nothing up front: no empty header.
            Outcome::Filtered { kept_names, .. } if !kept_names.is_empty() => Some(kept_names),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Skip;

    fn filtered() -> Outcome {
        Outcome::filtered(2, 9, None)
    }

    #[test]
    fn filtered_says_kept_and_total() {
        assert_eq!(filtered().header_value(None), "kept=2 total=9");
        assert_eq!(filtered().kept_names(), None);
    }

    #[test]
    fn every_part_in_its_place() {
        let outcome = Outcome::Filtered {
            kept: 1,
            total: 3,
            ranked: Ranked::Fallback(Fallback::Timeout),
            search: Some("search"),
            kept_names: "a".to_owned(),
            denied: Some(1),
            evicted: vec!["loop y".to_owned()],
            detected: vec!["ignored".to_owned()],
            remembered: vec!["r".to_owned()],
            noted: vec!["n".to_owned()],
            unknown: vec!["x".to_owned(), "x".to_owned()],
            shadow: Some(5),
            auto_k: None,
            weak: None,
            next: vec!["cat".to_owned(), "a b".to_owned()],
        };
        let gated = Gated {
            excluded: 2,
            claimed: None,
        };
        assert_eq!(
            outcome.header_value(Some(&gated)),
            "kept=1 total=3 next=cat,a%20b denied=1 loop=evicted:loop%20y noted=n unknown=x ranking=keyword \
             fallback=timeout search=search remembered=r gating=excluded:2 shadow=would_keep:5"
        );
        assert_eq!(outcome.kept_names(), Some("a"));
    }

    #[test]
    fn refused_and_skipped() {
        let denied = Outcome::Denied {
            total: 4,
            denied: 4,
        };
        assert_eq!(
            denied.header_value(None),
            "kept=0 total=4 denied=4 access=refused"
        );
        assert_eq!(
            Outcome::UnknownPath.header_value(None),
            "kept=0 total=0 access=refused refused=unknown_path"
        );
        let skipped = Outcome::Skipped(Skipped {
            reason: Skip::TooLarge,
            tools: None,
        });
        assert_eq!(
            skipped.header_value(None),
            format!("skipped={}", Skip::TooLarge.name())
        );
    }
}
