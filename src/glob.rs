//! Name patterns: `*` matches any run of characters, `?` one character, everything else
//! itself. Configuration compiles each pattern once into a [`Glob`], whose common shapes
//! (`name`, `prefix*`, `*suffix`, `*part*`, `*`) match without a walk; matching never
//! allocates, since access rules run it for every tool of every request.

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    shape: Shape,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// `*` (or `**`…): everything.
    Any,
    /// No wildcard: the text itself.
    Exact,
    /// `lit*`: the literal is the pattern without its last byte.
    Prefix,
    /// `*lit`.
    Suffix,
    /// `*lit*`.
    Contains,
    /// Anything else: walked by [`matches`].
    General,
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        let wild = |c: char| c == '*' || c == '?';
        let inner = |s: &str| !s.is_empty() && !s.contains(wild);
        let shape = if !pattern.is_empty() && pattern.chars().all(|c| c == '*') {
            Shape::Any
        } else if !pattern.contains(wild) {
            Shape::Exact
        } else if pattern
            .strip_suffix('*')
            .and_then(|p| p.strip_prefix('*'))
            .is_some_and(inner)
        {
            Shape::Contains
        } else if pattern.strip_suffix('*').is_some_and(inner) {
            Shape::Prefix
        } else if pattern.strip_prefix('*').is_some_and(inner) {
            Shape::Suffix
        } else {
            Shape::General
        };
        Glob {
            pattern: pattern.to_owned(),
            shape,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the pattern has no wildcard: it names one text, itself.
    pub fn is_exact(&self) -> bool {
        self.shape == Shape::Exact
    }

    /// Whether some text that starts with `prefix` matches: the pattern can speak of names
    /// under it (`mcp:github/*`, `*delete*` and `*` can speak of `mcp:github/…`;
    /// `mcp:gitlab/*` and `get_*` cannot).
    pub fn may_match_under(&self, prefix: &str) -> bool {
        // Any position left can be finished by some text.
        self.after(prefix).iter().any(|reached| *reached)
    }

    /// Whether every text that starts with `prefix` and goes on matches (`mcp:github/*`,
    /// `mcp:git*` and `*` cover `mcp:github/…`; `mcp:github/get_*` does not).
    pub fn covers_all_under(&self, prefix: &str) -> bool {
        let rest_is_star = |i: usize| {
            let rest = self.pattern.chars().skip(i);
            rest.clone().next().is_some() && rest.into_iter().all(|c| c == '*')
        };
        self.after(prefix)
            .iter()
            .enumerate()
            .any(|(i, reached)| *reached && rest_is_star(i))
    }

    /// The pattern's positions (in characters) reachable after reading `prefix`.
    fn after(&self, prefix: &str) -> Vec<bool> {
        let pattern: Vec<char> = self.pattern.chars().collect();
        let mut at = vec![false; pattern.len() + 1];
        let close = |at: &mut Vec<bool>| {
            for i in 0..pattern.len() {
                if at.get(i) == Some(&true) && pattern.get(i) == Some(&'*') {
                    if let Some(next) = at.get_mut(i + 1) {
                        *next = true;
                    }
                }
            }
        };
        if let Some(first) = at.first_mut() {
            *first = true;
        }
        close(&mut at);
        for c in prefix.chars() {
            let mut next = vec![false; pattern.len() + 1];
            for (i, p) in pattern.iter().enumerate() {
                if at.get(i) != Some(&true) {
                    continue;
                }
                let to = match p {
                    '*' => i,
                    '?' => i + 1,
                    p if *p == c => i + 1,
                    _ => continue,
                };
                if let Some(slot) = next.get_mut(to) {
                    *slot = true;
                }
            }
            close(&mut next);
            at = next;
        }
        at
    }

    pub fn matches(&self, text: &str) -> bool {
        let p = self.pattern.as_str();
        match self.shape {
            Shape::Any => true,
            Shape::Exact => p == text,
            Shape::Prefix => p.get(..p.len() - 1).is_some_and(|l| text.starts_with(l)),
            Shape::Suffix => p.get(1..).is_some_and(|l| text.ends_with(l)),
            Shape::Contains => p.get(1..p.len() - 1).is_some_and(|l| text.contains(l)),
            Shape::General => matches(p, text),
        }
    }
}

/// Whether `text` matches `pattern`, walked without compiling: iterative, backtracking to the
/// last `*` only, so linear in practice and never recursive.
pub fn matches(pattern: &str, text: &str) -> bool {
    let first = |s: &str, at: usize| s.get(at..).and_then(|rest| rest.chars().next());
    let (mut pi, mut ti) = (0, 0);
    // After a `*`: where the pattern resumes, and the text position it last resumed from.
    let mut star: Option<(usize, usize)> = None;
    while let Some(tc) = first(text, ti) {
        match first(pattern, pi) {
            Some('*') => {
                star = Some((pi + 1, ti));
                pi += 1;
            }
            Some(pc) if pc == '?' || pc == tc => {
                pi += pc.len_utf8();
                ti += tc.len_utf8();
            }
            _ => match star {
                Some((resume, from)) => {
                    // The `*` takes one more character of the text.
                    let taken = first(text, from).map_or(1, char::len_utf8);
                    pi = resume;
                    ti = from + taken;
                    star = Some((resume, ti));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(pi..)
        .is_some_and(|rest| rest.chars().all(|c| c == '*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_like_the_walk() {
        let patterns = [
            "*",
            "**",
            "get_*",
            "*_delete",
            "*delete*",
            "get_pod",
            "g?t_*",
            "*a*b*",
            "?",
            "a*b",
            "",
            "é*",
            "*é",
            "k8s_*_logs",
            "*?",
        ];
        let texts = [
            "",
            "get_pod",
            "get_",
            "pod_delete",
            "undelete_me",
            "delete",
            "got_x",
            "ab",
            "a",
            "aXb",
            "é",
            "éa",
            "aé",
            "k8s_pod_logs",
            "k8s__logs",
            "x",
        ];
        for p in patterns {
            let glob = Glob::new(p);
            for t in texts {
                assert_eq!(glob.matches(t), matches(p, t), "{p:?} on {t:?}");
            }
        }
    }

    #[test]
    fn what_a_pattern_may_match_under_a_prefix() {
        let under = |p: &str, prefix: &str| Glob::new(p).may_match_under(prefix);
        assert!(under("mcp:github/*", "mcp:github/"));
        assert!(under("mcp:github/create_issue", "mcp:github/"));
        assert!(under("*delete*", "mcp:github/"));
        assert!(under("*", "mcp:github/"));
        assert!(under("mcp:*/read_*", "mcp:github/"));
        assert!(under("m?p:git*", "mcp:github/"));
        assert!(!under("mcp:gitlab/*", "mcp:github/"));
        assert!(!under("get_*", "mcp:github/"));
        assert!(!under("mcp:github", "mcp:github/"));
        assert!(!under("mcp:git", "mcp:github/"));
        let covers = |p: &str, prefix: &str| Glob::new(p).covers_all_under(prefix);
        assert!(covers("mcp:github/*", "mcp:github/"));
        assert!(covers("mcp:git*", "mcp:github/"));
        assert!(covers("*", "mcp:github/"));
        assert!(covers("mcp:*/*", "mcp:github/"));
        assert!(!covers("mcp:github/get_*", "mcp:github/"));
        assert!(!covers("*delete*", "mcp:github/"));
        assert!(!covers("mcp:github/", "mcp:github/"));
        assert!(!covers("mcp:gitlab/*", "mcp:github/"));
        // Checked against the walk: a pattern may match under a prefix exactly when it
        // matches the prefix followed by some text of the pattern's own characters.
        for p in ["*a", "a*b", "ab?", "?", "*", "a", "ab*c*"] {
            for prefix in ["", "a", "ab", "abc", "b"] {
                let some = ["", "a", "b", "c", "ab", "bc", "abc", "cab", "x"]
                    .iter()
                    .any(|rest| matches(p, &format!("{prefix}{rest}")));
                assert_eq!(under(p, prefix), some, "{p:?} under {prefix:?}");
            }
        }
    }

    #[test]
    fn the_walk() {
        assert!(matches("*delete*", "bulk_delete_users"));
        assert!(!matches("*delete*", "bulk_remove"));
        assert!(matches("k8s_*", "k8s_get_pods"));
        assert!(matches("a*b*c", "aXXbYYc"));
        assert!(!matches("a*b*c", "aXXbYY"));
        assert!(matches("?é?", "aéb"));
        assert!(matches("", ""));
        assert!(!matches("", "a"));
        assert!(matches("**", ""));
    }
}
