//! The caller's identity under access rules, read once per request in the headers phase: the
//! configured request headers, and the JWT payloads Envoy's `jwt_authn` left in the dynamic
//! metadata (one read of the whole `metadata` property, decoded by [`crate::metadata`]).

use super::host;
use super::shared::Shared;
use crate::access::{Caller, Grant};
use crate::pairs::HeaderMap;

/// What the request's caller may do, and who it is; `None` without access rules.
pub(super) fn grant(shared: &Shared, headers: &HeaderMap) -> Option<(Grant, Caller)> {
    let engine = shared.engine.try_borrow().ok()?;
    let policy = engine.policy()?;
    let mut metadata: Option<Vec<u8>> = None;
    let mut payloads = |namespace: &str, key: Option<&str>| {
        // No token: Envoy has no metadata to give, and the read answers nothing.
        let bytes =
            metadata.get_or_insert_with(|| host::property(&["metadata"]).unwrap_or_default());
        crate::metadata::payloads(bytes, namespace, key)
    };
    let caller = policy.caller(|name| headers.get(name), &mut payloads);
    // `access_shadow` with an identity of its own reads it too.
    let shadow_caller = policy
        .shadow()
        .filter(|s| s.sources() != policy.sources())
        .map(|s| s.caller(|name| headers.get(name), &mut payloads));
    Some((policy.grant_with(&caller, shadow_caller.as_ref()), caller))
}
