//! A whole catalog at once: which of its tools a grant lets the caller see ([`Grant::mask`]),
//! from what each rule says of each tool ([`RuleMatches`]), worked out once per catalog.

use super::config::Effect;
use super::policy::Rule;
use super::{Annotations, Grant};
use std::cell::RefCell;
use std::rc::Rc;

impl Grant {
    /// Per tool of a catalog of `n` entries, whether the caller may see it: `tool(e)` gives
    /// entry `e`'s name and annotations, `None` for what access rules do not govern (provider
    /// built-ins: always kept). The same decisions as [`Grant::tool`] one by one, from what each
    /// applicable rule says of every tool, worked out once per catalog in `matches`.
    pub fn mask<'a>(
        &self,
        n: usize,
        tool: impl Fn(usize) -> Option<(&'a str, Annotations)>,
        matches: &RuleMatches,
    ) -> Vec<bool> {
        let words = n.div_ceil(64);
        let (mut allow, mut deny) = (vec![0u64; words], vec![0u64; words]);
        if self.identified {
            for (i, rule) in self.rules() {
                let bits = matches.bits(i, rule, n, &tool);
                for (w, b) in allow.iter_mut().zip(bits.allow.iter()) {
                    *w |= b;
                }
                for (w, b) in deny.iter_mut().zip(bits.deny.iter()) {
                    *w |= b;
                }
            }
        }
        let bit = |set: &[u64], e: usize| set.get(e / 64).is_some_and(|w| w >> (e % 64) & 1 == 1);
        let default_allow = self.policy.default == Effect::Allow;
        (0..n)
            .map(|e| match tool(e) {
                None => true,
                Some(_) => self.identified && !bit(&deny, e) && (default_allow || bit(&allow, e)),
            })
            .collect()
    }
}

/// What each rule says of each tool of one catalog: worked out the first time a request needs
/// the rule, kept with the catalog. It depends only on the rules and the tools' public text,
/// never on who asks, so every caller shares it, and a grant's mask is then a few word
/// operations per applicable rule (for 50 rules over 1,000 tools, 12.5 KB at most).
#[derive(Debug, Default)]
pub struct RuleMatches {
    rules: RefCell<Vec<Option<Rc<RuleBits>>>>,
}

/// One rule over one catalog: the tools it denies (by name or annotation) and allows, one bit
/// per entry.
#[derive(Debug)]
struct RuleBits {
    /// Entries covered: a [`RuleMatches`] belongs to one catalog, but a mismatch is recomputed
    /// rather than trusted.
    n: usize,
    deny: Box<[u64]>,
    allow: Box<[u64]>,
}

impl RuleMatches {
    fn bits<'a>(
        &self,
        index: usize,
        rule: &Rule,
        n: usize,
        tool: &impl Fn(usize) -> Option<(&'a str, Annotations)>,
    ) -> Rc<RuleBits> {
        let known = self
            .rules
            .try_borrow()
            .ok()
            .and_then(|r| r.get(index).cloned());
        if let Some(known) = known.flatten().filter(|k| k.n == n) {
            return known;
        }
        let words = n.div_ceil(64);
        let (mut deny, mut allow) = (vec![0u64; words], vec![0u64; words]);
        for e in 0..n {
            let Some((name, annotations)) = tool(e) else {
                continue;
            };
            let set = |bits: &mut [u64]| {
                if let Some(w) = bits.get_mut(e / 64) {
                    *w |= 1 << (e % 64);
                }
            };
            let denied = rule.deny.iter().any(|p| p.matches(name))
                || rule
                    .deny_annotations
                    .iter()
                    .any(|(hint, value)| annotations.get(*hint) == Some(*value));
            if denied {
                set(&mut deny);
            }
            if rule.allow.iter().any(|p| p.matches(name)) {
                set(&mut allow);
            }
        }
        let bits = Rc::new(RuleBits {
            n,
            deny: deny.into(),
            allow: allow.into(),
        });
        if let Ok(mut rules) = self.rules.try_borrow_mut() {
            if rules.len() <= index {
                rules.resize(index + 1, None);
            }
            if let Some(slot) = rules.get_mut(index) {
                *slot = Some(Rc::clone(&bits));
            }
        }
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Hint;
    use crate::access::testing::{ISSUE_EXAMPLE, caller, policy};

    #[test]
    fn masks_decide_as_one_by_one() {
        let p = policy(ISSUE_EXAMPLE);
        let names = [
            "k8s_get_pods",
            "k8s_delete_pod",
            "get_weather",
            "invoice_create",
            "drop_table",
            "k8s_restart",
            "send_email",
        ];
        let destructive = Annotations::default().with(Hint::Destructive, true);
        let tool = |e: usize| -> Option<(&str, Annotations)> {
            // Every third entry a built-in, the restart tool destructive.
            if e % 3 == 2 {
                return None;
            }
            let name = names[e % names.len()];
            let a = if name == "k8s_restart" {
                destructive
            } else {
                Annotations::default()
            };
            Some((name, a))
        };
        let matches = RuleMatches::default();
        for who in [
            &["sre"][..],
            &["finance"],
            &["sre", "finance"],
            &["nobody"],
            &[],
        ] {
            let grant = p.grant(&caller(who));
            for n in [0, 1, 7, 64, 65, 130] {
                let mask = grant.mask(n, tool, &matches);
                let one_by_one: Vec<bool> = (0..n)
                    .map(|e| tool(e).is_none_or(|(name, a)| grant.tool(name, &a).allowed()))
                    .collect();
                assert_eq!(mask, one_by_one, "{who:?} n={n}");
            }
        }
    }
}
