//! The store every worker of a VM shares (proxy-wasm shared data), as the core sees it: a
//! key-value store with compare-and-swap, and an in-memory one with the same semantics for the
//! CLI and the tests. A leaf module, so that any part of the core may keep state there.

use std::cell::RefCell;
use std::collections::HashMap;

/// A key-value store shared by every worker (proxy-wasm shared data), with compare-and-swap.
pub trait SharedBytes {
    /// The value and its version.
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Writes if the version is still `cas` (any version when `None`); false when another
    /// writer came first or the store refused.
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool;
}

impl<T: SharedBytes + ?Sized> SharedBytes for &T {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        (**self).get(key)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        (**self).set(key, value, cas)
    }
}

/// A [`SharedBytes`] in memory with proxy-wasm shared data's semantics (a version per key,
/// bumped on each write): the CLI's store, and the tests'.
#[derive(Default)]
pub struct MemoryBytes(RefCell<HashMap<String, (Vec<u8>, u32)>>);

impl MemoryBytes {
    /// How many keys, and how many value bytes in all, it holds.
    pub fn size(&self) -> (usize, usize) {
        self.0.try_borrow().map_or((0, 0), |m| {
            (m.len(), m.values().map(|(v, _)| v.len()).sum())
        })
    }
}

impl SharedBytes for MemoryBytes {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self.0.try_borrow().ok().and_then(|m| m.get(key).cloned()) {
            Some((value, cas)) => (Some(value), Some(cas)),
            None => (None, None),
        }
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        let Ok(mut map) = self.0.try_borrow_mut() else {
            return false;
        };
        let current = map.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != current {
            return false;
        }
        let version = current.unwrap_or(0).wrapping_add(1);
        map.insert(key.to_owned(), (value.to_vec(), version));
        true
    }
}

/// A store seen by one plugin of a VM: with a `stat_prefix`, its keys are kept under
/// `<stat_prefix>.`, so that two toolsift plugins sharing a VM (the same `vm_config`) never read
/// each other's search memory, response aliases, `auto_k` tables or vectors; without one, the
/// keys are as they always were.
#[derive(Clone)]
pub struct Namespaced<S> {
    inner: S,
    prefix: Option<std::rc::Rc<str>>,
}

impl<S> Namespaced<S> {
    pub fn new(inner: S, prefix: Option<&str>) -> Namespaced<S> {
        Namespaced {
            inner,
            prefix: prefix.map(std::rc::Rc::from),
        }
    }

    /// The key `key` is stored under.
    pub fn key<'a>(&self, key: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.prefix {
            Some(prefix) => format!("{prefix}.{key}").into(),
            None => key.into(),
        }
    }
}

impl<S: SharedBytes> SharedBytes for Namespaced<S> {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.inner.get(&self.key(key))
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        self.inner.set(&self.key(key), value, cas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_with_a_prefix_keep_their_keys_apart() {
        let store = MemoryBytes::default();
        let (mcp, llm, plain) = (
            Namespaced::new(&store, Some("mcp")),
            Namespaced::new(&store, Some("llm")),
            Namespaced::new(&store, None),
        );
        assert!(mcp.set("toolsift.memory.0", b"mcp's", None));
        assert!(plain.set("toolsift.memory.0", b"plain", None));
        assert_eq!(llm.get("toolsift.memory.0"), (None, None));
        assert_eq!(
            mcp.get("toolsift.memory.0").0.as_deref(),
            Some(&b"mcp's"[..])
        );
        // Without a prefix a key is the one it always was.
        assert_eq!(
            store.get("toolsift.memory.0").0.as_deref(),
            Some(&b"plain"[..])
        );
        assert_eq!(
            store.get("mcp.toolsift.memory.0").0.as_deref(),
            Some(&b"mcp's"[..])
        );
        // A compare-and-swap token is the namespaced key's.
        let (_, cas) = mcp.get("toolsift.memory.0");
        assert!(llm.set("toolsift.memory.0", b"llm's", None));
        assert!(mcp.set("toolsift.memory.0", b"mcp again", cas));
    }
}
