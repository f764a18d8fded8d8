//! Who is asking: the caller's identity values ([`Caller`]), read from JWT claims or headers
//! as the `identity` sources ([`Source`]) say.

use super::config::{IdentitySource, Split};
use serde_json::Value;

/// The caller's identity values, sorted and without repeats.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Caller {
    values: Vec<String>,
}

impl Caller {
    pub fn new(values: impl IntoIterator<Item = String>) -> Caller {
        let mut values: Vec<String> = values.into_iter().filter(|v| !v.is_empty()).collect();
        values.sort_unstable();
        values.dedup();
        Caller { values }
    }

    /// A caller with no identity values.
    pub fn anonymous() -> Caller {
        Caller::default()
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    pub fn is_identified(&self) -> bool {
        !self.values.is_empty()
    }

    /// The identity as text (a JSON array), for cache keys that must never cross callers.
    pub fn key(&self) -> String {
        serde_json::to_string(&self.values).unwrap_or_default()
    }
}

/// The identity values a claim holds: a string (split as `split` says; by default at spaces
/// and commas, as OAuth scopes are written), or an array whose every string is one value,
/// spaces and commas included (a group "contractors admins" is not `admins`); numbers and
/// booleans as their JSON text.
pub fn claim_values(claim: &Value, prefix: &str, split: Split, out: &mut Vec<String>) {
    match claim {
        Value::String(s) => split_values(s, prefix, split, out),
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::String(s) => out.push(format!("{prefix}{s}")),
                    Value::Number(_) | Value::Bool(_) => out.push(format!("{prefix}{item}")),
                    _ => {}
                }
            }
        }
        Value::Number(_) | Value::Bool(_) => out.push(format!("{prefix}{claim}")),
        _ => {}
    }
}

/// The values of a header or claim string, split as `split` says; empty values are none.
pub fn split_values(text: &str, prefix: &str, split: Split, out: &mut Vec<String>) {
    let separators: &[char] = match split {
        Split::None => &[],
        Split::Space => &[' ', '\t'],
        Split::Comma => &[','],
        Split::Both => &[' ', ',', '\t'],
    };
    out.extend(
        text.split(separators)
            .map(|v| v.trim_matches([' ', '\t']))
            .filter(|v| !v.is_empty())
            .map(|v| format!("{prefix}{v}")),
    );
}

/// The claim at a dot-separated `path` in a JWT payload.
pub fn claim_at<'a>(payload: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(payload, |at, key| at.get(key))
}

/// Where one identity source reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A claim of the JWT payloads in a dynamic-metadata namespace.
    Claim {
        namespace: String,
        key: Option<String>,
        claim: String,
        prefix: String,
        split: Split,
    },
    /// A request header (lower-case name).
    Header {
        name: String,
        prefix: String,
        split: Split,
    },
}

/// An `identity` source, checked and compiled; an error is a field (relative to the source)
/// and why.
pub(super) fn source(s: &IdentitySource) -> Result<Source, (String, String)> {
    let nonempty = |field: &str, v: &Option<String>| -> Result<Option<String>, (String, String)> {
        match v {
            Some(v) if v.trim().is_empty() => {
                Err((format!(".{field}"), "must not be empty".into()))
            }
            other => Ok(other.clone()),
        }
    };
    let metadata = nonempty("metadata", &s.metadata)?;
    let claim = nonempty("claim", &s.claim)?;
    let key = nonempty("key", &s.key)?;
    let header = nonempty("header", &s.header)?;
    match (metadata, header) {
        (Some(namespace), None) => {
            let claim = claim.ok_or_else(|| {
                (
                    ".claim".to_owned(),
                    "required with `metadata`: the claim's path in the JWT payload".to_owned(),
                )
            })?;
            if claim.split('.').any(str::is_empty) {
                return Err((
                    ".claim".into(),
                    "a dot-separated path of claim names".into(),
                ));
            }
            Ok(Source::Claim {
                namespace,
                key,
                claim,
                prefix: s.prefix.clone(),
                split: s.split,
            })
        }
        (None, Some(name)) => {
            if claim.is_some() || key.is_some() {
                return Err((
                    String::new(),
                    "`claim` and `key` go with `metadata`, not `header`".into(),
                ));
            }
            if !crate::pairs::is_header_name(&name) {
                return Err((".header".into(), "not a valid header name".into()));
            }
            Ok(Source::Header {
                name: name.to_ascii_lowercase(),
                prefix: s.prefix.clone(),
                split: s.split,
            })
        }
        (Some(_), Some(_)) => Err((
            String::new(),
            "one of `metadata` (with `claim`) or `header`, not both".into(),
        )),
        (None, None) => Err((
            String::new(),
            "needs `metadata` (with `claim`) or `header`".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::testing::{ISSUE_EXAMPLE, caller, policy};
    use crate::access::{Annotations, Policy};

    #[test]
    fn split_keeps_values_whole_as_configured() {
        let split = |text: &str, split: Split| {
            let mut out = Vec::new();
            split_values(text, "t:", split, &mut out);
            out
        };
        let text = " acme corp,beta gamma ,, ";
        assert_eq!(split(text, Split::None), ["t:acme corp,beta gamma ,,"]);
        assert_eq!(
            split(text, Split::Space),
            ["t:acme", "t:corp,beta", "t:gamma", "t:,,"]
        );
        assert_eq!(split(text, Split::Comma), ["t:acme corp", "t:beta gamma"]);
        assert_eq!(
            split(text, Split::Both),
            ["t:acme", "t:corp", "t:beta", "t:gamma"]
        );
        assert!(split("  ", Split::None).is_empty());
        // A claim string is split the same way; an array's strings never are.
        let mut out = Vec::new();
        claim_values(&serde_json::json!("acme corp"), "", Split::None, &mut out);
        claim_values(&serde_json::json!(["x y"]), "", Split::Both, &mut out);
        assert_eq!(out, ["acme corp", "x y"]);
        // Through the policy: the header `x-tenant: acme corp` is one tenant.
        let policy = Policy::new(
            &serde_json::from_str(
                r#"{"identity":[{"header":"x-tenant","split":"none"},
                               {"metadata":"jwt","claim":"org","split":"comma"}],
                    "rules":[{"when":["acme corp"],"allow":["*"]}]}"#,
            )
            .unwrap(),
        )
        .unwrap();
        let org = serde_json::json!({"org": "north, south wing"});
        let caller = policy.caller(
            |name| (name == "x-tenant").then_some(&b"acme corp"[..]),
            |_, _| vec![org.clone()],
        );
        assert_eq!(caller.values(), ["acme corp", "north", "south wing"]);
        let bad = crate::config::Config::from_json(
            br#"{"access":{"identity":[{"header":"x-tenant","split":"tabs"}]}}"#,
        );
        let why = bad.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(why.contains("access.identity[0].split"), "{why}");
    }

    #[test]
    fn identity_values_from_claims_and_headers() {
        let payload: Value = serde_json::from_str(
            r#"{"groups":["sre","admins"],"scope":"read write","tenant":"acme","realm":{"roles":["x"]},"n":3}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        let both = Split::Both;
        claim_values(claim_at(&payload, "groups").unwrap(), "", both, &mut out);
        claim_values(
            claim_at(&payload, "scope").unwrap(),
            "scope:",
            both,
            &mut out,
        );
        claim_values(
            claim_at(&payload, "realm.roles").unwrap(),
            "",
            both,
            &mut out,
        );
        claim_values(claim_at(&payload, "n").unwrap(), "", both, &mut out);
        assert!(claim_at(&payload, "missing").is_none());
        split_values("acme, beta", "tenant:", both, &mut out);
        assert_eq!(
            Caller::new(out).values(),
            [
                "3",
                "admins",
                "scope:read",
                "scope:write",
                "sre",
                "tenant:acme",
                "tenant:beta",
                "x"
            ]
        );
        // An array's strings are whole values: no group the token does not list.
        let mut out = Vec::new();
        let groups = serde_json::json!(["contractors admins", "a,b", "", 7]);
        claim_values(&groups, "", Split::None, &mut out);
        assert_eq!(
            Caller::new(out).values(),
            ["7", "a,b", "contractors admins"]
        );
        let p = policy(ISSUE_EXAMPLE);
        let none = Annotations::default();
        let contractor = p.grant(&caller(&["contractors admins"]));
        assert!(!contractor.tool("k8s_get_pods", &none).allowed());
    }
}
