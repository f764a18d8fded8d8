//! Selection: which function tools survive, and why each one did or did not.
//!
//! The kept set is the union of the `top_k` best-ranked tools and the pinned tools (named by
//! `tool_choice`, already called in the conversation, or matching `always_include`): a pinned
//! tool never displaces a ranked one. A pinned tool that ranks within `top_k` fills its own slot,
//! so when the model calls one of the tools it was shown, the next turn of the agent loop gets
//! the same tools array and the provider's prompt cache still hits. Ranked tools are taken in
//! rank order up to `top_k`, skipping those under `min_score` and stopping at the token budget,
//! but never leaving the request with no tool at all: some APIs reject an empty tools array, and
//! `tool_choice: required` needs something to call.

use crate::config::Config;
use crate::dialects::{Choice, Entry};
use crate::rank::{Catalog, Scored};
use std::fmt;

/// Why a tool was kept or dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Dropped: the caller may not see it (`access`). Nothing pins a denied tool.
    Denied,
    /// Dropped: the agent is calling it in a loop (`loop_guard`). Only `tool_choice` keeps it.
    Evicted,
    /// Kept: the request has `min_tools` allowed tools or fewer, and each one stays.
    FewTools,
    /// Kept: within `top_k` by rank.
    Ranked,
    /// Kept: named by `tool_choice` or its dialect's equivalent.
    ToolChoice,
    /// Kept: the conversation already called it.
    Called,
    /// Kept: matches `always_include`.
    AlwaysInclude,
    /// Dropped: ranked below `top_k`.
    BelowTopK,
    /// Dropped: scored under `min_score`.
    BelowMinScore,
    /// Dropped: would exceed `max_tool_tokens`.
    OverBudget,
    /// Kept: shadow ranking forwards every tool its caller may see; the selection it measures
    /// is kept beside (see [`crate::shadow`]).
    Shadow,
}

impl Verdict {
    pub fn kept(self) -> bool {
        matches!(
            self,
            Verdict::Ranked
                | Verdict::ToolChoice
                | Verdict::Called
                | Verdict::AlwaysInclude
                | Verdict::FewTools
                | Verdict::Shadow
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Denied => "denied by access rules",
            Verdict::Evicted => "evicted by the loop guard",
            Verdict::FewTools => "few tools",
            Verdict::Ranked => "ranked",
            Verdict::ToolChoice => "pinned by tool_choice",
            Verdict::Called => "called in history",
            Verdict::AlwaysInclude => "always_include",
            Verdict::BelowTopK => "below top_k",
            Verdict::BelowMinScore => "below min_score",
            Verdict::OverBudget => "over budget",
            Verdict::Shadow => "forwarded uncut (shadow)",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One function tool's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub entry: usize,
    /// 1-based place in the ranking.
    pub rank: usize,
    pub score: f32,
    pub verdict: Verdict,
}

/// The outcome for a whole catalog.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Per function tool, in rank order.
    pub decisions: Vec<Decision>,
    /// Per catalog entry: whether it goes upstream (built-ins always do).
    pub keep: Vec<bool>,
}

impl Selection {
    pub fn kept_count(&self) -> usize {
        self.decisions.iter().filter(|d| d.verdict.kept()).count()
    }

    /// Estimated tokens of the kept function tools, and of all function tools.
    pub fn tokens(&self, catalog: &Catalog) -> (usize, usize) {
        let mut kept = 0;
        let mut total = 0;
        for d in &self.decisions {
            let t = catalog.tokens.get(d.entry).copied().unwrap_or(0);
            total += t;
            if d.verdict.kept() {
                kept += t;
            }
        }
        (kept, total)
    }
}

/// Decides, for a ranking of `catalog`, which tools go upstream: the `top_k` best (the
/// configured `top_k`, or `auto_k`'s for the catalog) and the pinned ones. With access rules,
/// `allowed` says per catalog entry whether the caller may see it: a denied tool is never
/// kept, pinned or counted towards `top_k`. An `evicted` tool (the loop guard's) is neither,
/// unless `tool_choice` names it.
#[allow(clippy::too_many_arguments)] // the selection's whole setting, spelled out
pub fn select(
    config: &Config,
    top_k: usize,
    catalog: &Catalog,
    ranking: &[Scored],
    choice: &Choice,
    called: &[String],
    allowed: Option<&[bool]>,
    evicted: &[String],
) -> Selection {
    let excluded = |entry: usize| excluded(catalog, allowed, evicted, entry);
    // Most requests pin nothing: no tool's name need be looked at then.
    let pins_any =
        !choice.named.is_empty() || !called.is_empty() || !config.always_include.is_empty();
    let pin = |entry: usize| -> Option<Verdict> {
        if !pins_any || excluded(entry).is_some() {
            return None;
        }
        let name = catalog.name(entry)?;
        if choice.named.iter().any(|n| n == name) {
            Some(Verdict::ToolChoice)
        } else if called.iter().any(|n| n == name) {
            Some(Verdict::Called)
        } else if config.always_includes(name) {
            Some(Verdict::AlwaysInclude)
        } else {
            None
        }
    };
    let tokens = |entry: usize| catalog.tokens.get(entry).copied().unwrap_or(0);

    let pins: Vec<Option<Verdict>> = ranking.iter().map(|s| pin(s.entry)).collect();
    let mut kept = pins.iter().filter(|p| p.is_some()).count();
    let mut budget_used: usize = ranking
        .iter()
        .zip(&pins)
        .filter(|(_, p)| p.is_some())
        .map(|(s, _)| tokens(s.entry))
        .sum();
    let mut ranked_kept = 0;
    let mut budget_exhausted = false;

    let mut decisions = Vec::with_capacity(ranking.len());
    for (i, (scored, pinned)) in ranking.iter().zip(&pins).enumerate() {
        let verdict = match (*pinned, excluded(scored.entry)) {
            (None, Some(why)) => why,
            (pinned, _) => match pinned {
                Some(v) => {
                    if ranked_kept < top_k {
                        ranked_kept += 1;
                    }
                    v
                }
                None if ranked_kept >= top_k => Verdict::BelowTopK,
                // The first kept tool is exempt from min_score and the budget: never zero tools.
                None if kept > 0 && config.min_score.is_some_and(|m| scored.score < m) => {
                    Verdict::BelowMinScore
                }
                None if kept > 0
                    && (budget_exhausted
                        || config
                            .max_tool_tokens
                            .is_some_and(|max| budget_used + tokens(scored.entry) > max)) =>
                {
                    // Stop at the first tool that does not fit, so rank order is respected.
                    budget_exhausted = true;
                    Verdict::OverBudget
                }
                None => {
                    ranked_kept += 1;
                    kept += 1;
                    budget_used += tokens(scored.entry);
                    Verdict::Ranked
                }
            },
        };
        decisions.push(Decision {
            entry: scored.entry,
            rank: i + 1,
            score: scored.score,
            verdict,
        });
    }

    Selection::of(catalog, decisions, allowed)
}

/// Whether `entry` is out whatever its rank: denied by access rules, or evicted by the loop
/// guard.
fn excluded(
    catalog: &Catalog,
    allowed: Option<&[bool]>,
    evicted: &[String],
    entry: usize,
) -> Option<Verdict> {
    if allowed.is_some_and(|a| !a.get(entry).copied().unwrap_or(false)) {
        return Some(Verdict::Denied);
    }
    let is_evicted = || {
        catalog
            .name(entry)
            .is_some_and(|n| evicted.iter().any(|e| e == n))
    };
    (!evicted.is_empty() && is_evicted()).then_some(Verdict::Evicted)
}

/// Every tool that may go, none dropped by rank: a request with `min_tools` tools or fewer
/// left, whose denied (`allowed`) and `evicted` tools still leave.
pub fn all_allowed(
    catalog: &Catalog,
    ranking: &[Scored],
    allowed: Option<&[bool]>,
    evicted: &[String],
) -> Selection {
    let decisions = ranking
        .iter()
        .enumerate()
        .map(|(i, scored)| Decision {
            entry: scored.entry,
            rank: i + 1,
            score: scored.score,
            verdict: excluded(catalog, allowed, evicted, scored.entry).unwrap_or(Verdict::FewTools),
        })
        .collect();
    Selection::of(catalog, decisions, allowed)
}

impl Selection {
    /// The selection of these decisions: kept function tools go upstream, and every built-in
    /// the caller may use (under access rules, `allowed` says which).
    fn of(catalog: &Catalog, decisions: Vec<Decision>, allowed: Option<&[bool]>) -> Selection {
        let may_use = |e: usize| allowed.is_none_or(|a| a.get(e).copied().unwrap_or(false));
        let mut keep: Vec<bool> = catalog
            .draft
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| matches!(e, Entry::Builtin) && may_use(i))
            .collect();
        for d in decisions.iter().filter(|d| d.verdict.kept()) {
            if let Some(k) = keep.get_mut(d.entry) {
                *k = true;
            }
        }
        Selection { decisions, keep }
    }

    /// Function tools the loop guard took out.
    pub fn evicted_count(&self) -> usize {
        self.decisions
            .iter()
            .filter(|d| d.verdict == Verdict::Evicted)
            .count()
    }

    /// Function tools dropped because the caller may not see them.
    pub fn denied_count(&self) -> usize {
        self.decisions
            .iter()
            .filter(|d| d.verdict == Verdict::Denied)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialects::Dialect;
    use crate::rank::FieldWeights;

    /// A catalog of `n` Anthropic tools `t0…`, each `size` bytes of JSON or so.
    fn catalog(names: &[&str]) -> Catalog {
        let tools: Vec<String> = names
            .iter()
            .map(|n| format!(r#"{{"name":"{n}","description":"tool {n}"}}"#))
            .collect();
        Catalog::build(
            Dialect::Anthropic,
            &format!("[{}]", tools.join(",")),
            FieldWeights::default(),
        )
        .unwrap()
    }

    fn kept_names(c: &Catalog, s: &Selection) -> Vec<String> {
        let mut names: Vec<String> = s
            .decisions
            .iter()
            .filter(|d| d.verdict.kept())
            .map(|d| c.name(d.entry).unwrap().to_owned())
            .collect();
        names.sort();
        names
    }

    fn config(json: &str) -> Config {
        Config::from_json(json.as_bytes()).unwrap()
    }

    /// The selection of `ranking` with nothing pinned, nothing denied or evicted.
    fn unpinned(cfg: &Config, c: &Catalog, ranking: &[crate::rank::Scored]) -> Selection {
        select(
            cfg,
            cfg.top_k,
            c,
            ranking,
            &Choice::default(),
            &[],
            None,
            &[],
        )
    }

    #[test]
    fn top_k_plus_pins() {
        let c = catalog(&[
            "alpha",
            "beta",
            "gamma",
            "delta",
            "search_web",
            "search_docs",
        ]);
        let ranking = c.index.rank("gamma delta");
        let choice = Choice {
            named: vec!["alpha".into()],
        };
        let s = select(
            &config(r#"{"top_k":2,"always_include":["search_*"]}"#),
            2,
            &c,
            &ranking,
            &choice,
            &["beta".into()],
            None,
            &[],
        );
        // Pins ranked outside the top 2 come on top of gamma and delta.
        assert_eq!(
            kept_names(&c, &s),
            [
                "alpha",
                "beta",
                "delta",
                "gamma",
                "search_docs",
                "search_web"
            ]
        );
        let verdict = |name: &str| {
            s.decisions
                .iter()
                .find(|d| c.name(d.entry) == Some(name))
                .unwrap()
                .verdict
        };
        assert_eq!(verdict("alpha"), Verdict::ToolChoice);
        assert_eq!(verdict("beta"), Verdict::Called);
        assert_eq!(verdict("search_web"), Verdict::AlwaysInclude);
        assert_eq!(verdict("gamma"), Verdict::Ranked);
    }

    #[test]
    fn a_pin_within_top_k_fills_its_own_slot() {
        let c = catalog(&["alpha", "beta", "gamma", "delta"]);
        let ranking = c.index.rank("gamma delta");
        let cfg = config(r#"{"top_k":2}"#);
        let before = unpinned(&cfg, &c, &ranking);
        // The model calls one of the tools it was shown: the next turn keeps the same tools.
        let after = select(
            &cfg,
            cfg.top_k,
            &c,
            &ranking,
            &Choice::default(),
            &["gamma".into()],
            None,
            &[],
        );
        assert_eq!(kept_names(&c, &before), ["delta", "gamma"]);
        assert_eq!(kept_names(&c, &after), ["delta", "gamma"]);
        assert_eq!(after.decisions[0].verdict, Verdict::Called);
    }

    #[test]
    fn an_evicted_tool_is_neither_pinned_nor_ranked_and_its_slot_goes_to_the_next() {
        let c = catalog(&["alpha", "beta", "gamma", "delta"]);
        let ranking = c.index.rank("gamma delta");
        let cfg = config(r#"{"top_k":2,"always_include":["gamma"]}"#);
        let evicted = ["gamma".to_owned()];
        let called = ["gamma".to_owned()];
        let s = select(
            &cfg,
            cfg.top_k,
            &c,
            &ranking,
            &Choice::default(),
            &called,
            None,
            &evicted,
        );
        assert_eq!(kept_names(&c, &s), ["alpha", "delta"]);
        assert_eq!(s.evicted_count(), 1);
    }

    #[test]
    fn min_score_never_leaves_zero_tools() {
        let c = catalog(&["alpha", "beta", "gamma"]);
        let ranking = c.index.rank("nothing relevant");
        let s = select(
            &config(r#"{"min_score":5}"#),
            5,
            &c,
            &ranking,
            &Choice::default(),
            &[],
            None,
            &[],
        );
        assert_eq!(s.kept_count(), 1);
        assert_eq!(s.decisions[0].verdict, Verdict::Ranked);
        assert_eq!(s.decisions[1].verdict, Verdict::BelowMinScore);
    }

    #[test]
    fn budget_stops_at_first_tool_that_does_not_fit() {
        let c = catalog(&["alpha", "bravo", "gamma", "delta"]);
        let each = c.tokens[0];
        let ranking = c.index.rank("delta gamma");
        let cfg = config(&format!(r#"{{"max_tool_tokens":{}}}"#, each * 2));
        let s = unpinned(&cfg, &c, &ranking);
        let verdicts: Vec<Verdict> = s.decisions.iter().map(|d| d.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Ranked,
                Verdict::Ranked,
                Verdict::OverBudget,
                Verdict::OverBudget
            ]
        );
        assert_eq!(s.keep, [false, false, true, true]);
        let (kept, total) = s.tokens(&c);
        assert_eq!((kept, total), (each * 2, each * 4));
    }
}
