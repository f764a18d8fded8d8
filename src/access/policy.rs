//! The `access` section, compiled once in `on_configure` into a [`Policy`], shared by every
//! request; [`Policy::grant`] picks the rules that apply to one caller.

use super::config::{AccessConfig, Denied, Effect, Mode, RuleConfig, UnknownPaths};
use super::grant::Grant;
use super::identity::{Caller, Source, claim_at, claim_values, source, split_values};
use super::judge::Ledger;
use super::{Hint, hint};
use crate::glob::Glob;
use serde_json::Value;
use std::rc::Rc;

/// A configuration error in `access`: the field's path and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub why: String,
}

fn field_error(field: impl Into<String>, why: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        why: why.into(),
    }
}

/// A rule, compiled.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    pub(super) name: Option<String>,
    pub(super) when: Vec<Glob>,
    pub(super) allow: Vec<Glob>,
    pub(super) deny: Vec<Glob>,
    pub(super) deny_annotations: Vec<(Hint, bool)>,
    /// The tools whose arguments the rule restricts, and how.
    pub(super) arguments: Vec<(Glob, Vec<Allowed>)>,
}

/// An argument and the values (patterns) a call may pass for it.
pub(super) type Allowed = (String, Vec<Glob>);

impl Rule {
    fn applies_to(&self, caller: &Caller) -> bool {
        self.when
            .iter()
            .any(|w| w.as_str() == "*" || caller.values().iter().any(|v| w.matches(v)))
    }
}

/// The `access` section, compiled: built once in `on_configure`, shared by every request.
#[derive(Debug, Clone)]
pub struct Policy {
    sources: Vec<Source>,
    pub(super) default: Effect,
    pub(super) rules: Vec<Rule>,
    pub denied: Denied,
    pub(super) mode: Mode,
    /// `access_shadow`: a second policy decided beside this one, never enforced.
    shadow: Option<Rc<Policy>>,
    /// `"unknown_paths": "deny"`: the status an unrecognised path is answered with.
    unknown_paths: Option<u16>,
}

impl Policy {
    /// Checks and compiles `access`; an error names the field (`rules[2].deny[0]`, relative to
    /// the section).
    pub fn new(config: &AccessConfig) -> Result<Policy, FieldError> {
        let mut sources = Vec::new();
        for (i, s) in config.identity.iter().enumerate() {
            sources.push(
                source(s)
                    .map_err(|(field, why)| field_error(format!("identity[{i}]{field}"), why))?,
            );
        }
        let mut rules: Vec<Rule> = Vec::new();
        for (i, r) in config.rules.iter().enumerate() {
            let compiled =
                rule(r).map_err(|(field, why)| field_error(format!("rules[{i}].{field}"), why))?;
            if let Some(name) = &compiled.name {
                if rules.iter().any(|other| other.name.as_ref() == Some(name)) {
                    return Err(field_error(
                        format!("rules[{i}].name"),
                        format!("`{name}` names another rule too: names must be unique"),
                    ));
                }
            }
            rules.push(compiled);
        }
        let unknown_paths = match (config.unknown_paths, config.unknown_paths_status) {
            (_, Some(status)) if status != 403 && status != 404 => {
                return Err(field_error(
                    "unknown_paths_status",
                    format!("{status}: 404 or 403"),
                ));
            }
            (UnknownPaths::Pass, Some(_)) => {
                return Err(field_error(
                    "unknown_paths_status",
                    "goes with `\"unknown_paths\": \"deny\"`",
                ));
            }
            (UnknownPaths::Pass, None) => None,
            (UnknownPaths::Deny, status) => Some(status.unwrap_or(404)),
        };
        Ok(Policy {
            sources,
            default: config.default,
            rules,
            denied: config.denied,
            mode: config.mode,
            shadow: None,
            unknown_paths,
        })
    }

    /// This policy with `access_shadow` (`shadow`) decided beside it. A shadow that reads no
    /// identity of its own reads this policy's; one in `audit` mode is refused (a shadow is
    /// never enforced), the error's field relative to the shadow's section.
    pub fn with_shadow(mut self, shadow: &AccessConfig) -> Result<Policy, FieldError> {
        if shadow.mode == Mode::Audit {
            return Err(field_error(
                "mode",
                "a shadow policy is never enforced: leave `mode` out",
            ));
        }
        if shadow.unknown_paths != UnknownPaths::Pass {
            return Err(field_error(
                "unknown_paths",
                "a shadow policy answers no request: set it in `access`",
            ));
        }
        let mut compiled = Policy::new(shadow)?;
        if compiled.sources.is_empty() {
            compiled.sources = self.sources.clone();
        }
        self.shadow = Some(Rc::new(compiled));
        Ok(self)
    }

    /// `access_shadow`, compiled, if configured.
    pub fn shadow(&self) -> Option<&Rc<Policy>> {
        self.shadow.as_ref()
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The status a request on a path toolsift does not recognise is answered with
    /// (`"unknown_paths": "deny"`; in audit mode never); `None`: it passes.
    pub fn unknown_path_status(&self) -> Option<u16> {
        self.unknown_paths.filter(|_| self.mode == Mode::Enforce)
    }

    /// The names of the named rules, in order (their counters are defined at configure time).
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().filter_map(|r| r.name.as_deref())
    }

    /// What logs call rule `rule`: its `name`, `#N` when it has none, `default` for `None`.
    pub fn rule_label(&self, rule: Option<usize>) -> String {
        match rule {
            None => "default".to_owned(),
            Some(i) => match self.rules.get(i).and_then(|r| r.name.as_deref()) {
                Some(name) => name.to_owned(),
                None => format!("#{i}"),
            },
        }
    }

    /// Where the caller's identity comes from.
    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    /// The caller of a request: the values of every identity source. `header` gives a request
    /// header's bytes (a value that is not UTF-8 gives nothing); `payloads` the JWT payloads
    /// in a dynamic-metadata namespace (all of them, or the one under `key`).
    pub fn caller<'h>(
        &self,
        header: impl Fn(&str) -> Option<&'h [u8]>,
        mut payloads: impl FnMut(&str, Option<&str>) -> Vec<Value>,
    ) -> Caller {
        let mut values = Vec::new();
        for source in &self.sources {
            match source {
                Source::Header {
                    name,
                    prefix,
                    split,
                } => {
                    if let Some(text) = header(name).and_then(|v| std::str::from_utf8(v).ok()) {
                        split_values(text, prefix, *split, &mut values);
                    }
                }
                Source::Claim {
                    namespace,
                    key,
                    claim,
                    prefix,
                    split,
                } => {
                    for payload in payloads(namespace, key.as_deref()) {
                        if let Some(value) = claim_at(&payload, claim) {
                            claim_values(value, prefix, *split, &mut values);
                        }
                    }
                }
            }
        }
        Caller::new(values)
    }

    /// Whether the configuration reads an identity (and so requires one).
    pub fn requires_identity(&self) -> bool {
        !self.sources.is_empty()
    }

    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// What `caller` may do: the rules that apply to it, picked once per request (and, with
    /// `access_shadow`, the shadow's for the same caller).
    pub fn grant(self: &Rc<Self>, caller: &Caller) -> Grant {
        self.grant_with(caller, None)
    }

    /// [`Policy::grant`], the shadow's rules picked for `shadow_caller` when the shadow reads
    /// an identity of its own (`None`: the same caller).
    pub fn grant_with(self: &Rc<Self>, caller: &Caller, shadow_caller: Option<&Caller>) -> Grant {
        let mut grant = self.bare_grant(caller);
        if let Some(shadow) = &self.shadow {
            grant.shadow = Some(Rc::new(shadow.bare_grant(shadow_caller.unwrap_or(caller))));
        }
        grant
    }

    fn bare_grant(self: &Rc<Self>, caller: &Caller) -> Grant {
        let identified = caller.is_identified() || !self.requires_identity();
        let applicable = if identified {
            (0..self.rules.len())
                .filter(|&i| self.rules.get(i).is_some_and(|r| r.applies_to(caller)))
                .collect()
        } else {
            Vec::new()
        };
        Grant {
            policy: Rc::clone(self),
            applicable: applicable.into(),
            identified,
            shadow: None,
            ledger: Ledger::default(),
        }
    }
}

fn globs(field: &str, patterns: &[String]) -> Result<Vec<Glob>, (String, String)> {
    patterns
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if p.is_empty() {
                Err((format!("{field}[{i}]"), "empty pattern".to_owned()))
            } else {
                Ok(Glob::new(p))
            }
        })
        .collect()
}

fn rule(r: &RuleConfig) -> Result<Rule, (String, String)> {
    if r.when.is_empty() {
        return Err((
            "when".into(),
            "must name at least one identity value (`*`: every caller)".into(),
        ));
    }
    if r.allow.is_empty()
        && r.deny.is_empty()
        && r.deny_annotations.is_empty()
        && r.arguments.is_empty()
    {
        return Err((
            "allow".into(),
            "a rule needs `allow`, `deny`, `deny_annotations` or `arguments`".into(),
        ));
    }
    let deny_annotations = r
        .deny_annotations
        .iter()
        .enumerate()
        .map(|(i, a)| {
            hint(a).ok_or_else(|| {
                (
                    format!("deny_annotations[{i}]"),
                    format!(
                        "`{a}` is not an MCP tool annotation: destructiveHint, readOnlyHint, \
                         openWorldHint or idempotentHint, optionally `: true` or `: false`"
                    ),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    let mut arguments = Vec::new();
    for (tool, constraints) in &r.arguments {
        if tool.is_empty() {
            return Err(("arguments".into(), "empty tool pattern".into()));
        }
        let mut compiled = Vec::new();
        for (argument, values) in constraints {
            let at = format!("arguments.{tool}.{argument}");
            if argument.is_empty() {
                return Err((format!("arguments.{tool}"), "empty argument name".into()));
            }
            if values.is_empty() {
                return Err((at, "must list at least one allowed value".into()));
            }
            compiled.push((argument.clone(), globs(&at, values)?));
        }
        arguments.push((Glob::new(tool), compiled));
    }
    if let Some(name) = &r.name {
        let fits = |b: u8| b.is_ascii_alphanumeric() || b"_-.".contains(&b);
        if name.is_empty() || !name.bytes().all(fits) {
            return Err((
                "name".into(),
                "letters, digits, `_`, `-` and `.` only (it becomes part of metric names)".into(),
            ));
        }
    }
    Ok(Rule {
        name: r.name.clone(),
        when: globs("when", &r.when)?,
        allow: globs("allow", &r.allow)?,
        deny: globs("deny", &r.deny)?,
        deny_annotations,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_paths_are_denied_with_404_or_403() {
        let status = |json: &str| {
            let config: AccessConfig = serde_json::from_str(json).unwrap();
            Policy::new(&config).map(|p| p.unknown_path_status())
        };
        assert_eq!(status("{}"), Ok(None));
        assert_eq!(status(r#"{"unknown_paths":"deny"}"#), Ok(Some(404)));
        assert_eq!(
            status(r#"{"unknown_paths":"deny","unknown_paths_status":403}"#),
            Ok(Some(403))
        );
        assert_eq!(
            status(r#"{"unknown_paths":"deny","mode":"audit"}"#),
            Ok(None),
            "audit mode denies nothing"
        );
        let field = |json: &str| status(json).unwrap_err().field;
        assert_eq!(
            field(r#"{"unknown_paths":"deny","unknown_paths_status":500}"#),
            "unknown_paths_status"
        );
        assert_eq!(
            field(r#"{"unknown_paths_status":403}"#),
            "unknown_paths_status"
        );
        let shadow: AccessConfig = serde_json::from_str(r#"{"unknown_paths":"deny"}"#).unwrap();
        let base = Policy::new(&serde_json::from_str("{}").unwrap()).unwrap();
        assert_eq!(
            base.with_shadow(&shadow).unwrap_err().field,
            "unknown_paths"
        );
    }

    #[test]
    fn errors_name_the_field() {
        let err = |json: &str| {
            let config: AccessConfig = serde_json::from_str(json).unwrap();
            let e = Policy::new(&config).unwrap_err();
            format!("{}: {}", e.field, e.why)
        };
        assert!(
            err(r#"{"rules":[{"when":["a"],"allow":["x",""]}]}"#)
                .starts_with("rules[0].allow[1]: ")
        );
        assert!(err(r#"{"rules":[{"when":[],"allow":["x"]}]}"#).starts_with("rules[0].when: "));
        assert!(err(r#"{"rules":[{"when":["a"]}]}"#).starts_with("rules[0].allow: "));
        assert!(
            err(r#"{"rules":[{"when":["a"],"deny_annotations":["scaryHint"]}]}"#)
                .starts_with("rules[0].deny_annotations[0]: ")
        );
        assert!(
            err(r#"{"rules":[{"when":["a"],"arguments":{"t":{"c":[]}}}]}"#)
                .starts_with("rules[0].arguments.t.c: ")
        );
        assert!(err(r#"{"identity":[{"metadata":"m"}]}"#).starts_with("identity[0].claim: "));
        assert!(
            err(r#"{"identity":[{"header":"x","metadata":"m","claim":"c"}]}"#)
                .starts_with("identity[0]: ")
        );
        assert!(err(r#"{"identity":[{}]}"#).starts_with("identity[0]: "));
        assert!(err(r#"{"identity":[{"header":"x y"}]}"#).starts_with("identity[0].header: "));
    }
}
