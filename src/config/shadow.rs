//! The `shadow` section: the share of requests shadow ranking samples. Its feature,
//! [`crate::shadow`], sits above `config` in the layers (it measures the pipeline's selection).

use super::{ConfigError, invalid};
use serde::Deserialize;

/// The `shadow` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Shadow {
    /// The share of ranked LLM requests shadowed (0 to 1: 0 never, 1 every one): forwarded with
    /// every tool their caller may see, their answers' calls measured against the cut they
    /// would have had.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0, max = 1)))]
    pub sample: f64,
}

impl Shadow {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if !(self.sample.is_finite() && (0.0..=1.0).contains(&self.sample)) {
            return Err(invalid("shadow.sample", "must be a number from 0 to 1"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn shadow_settings() {
        assert_eq!(Config::default().shadow_sample(), None);
        let c = Config::from_json(br#"{"shadow":{"sample":0.05}}"#).unwrap();
        assert_eq!(c.shadow_sample(), Some(0.05));
        let c = Config::from_json(br#"{"shadow":{"sample":1}}"#).unwrap();
        assert_eq!(c.shadow_sample(), Some(1.0));
        // Search mode cuts nothing by rank: nothing to shadow.
        let c = Config::from_json(br#"{"mode":"search","shadow":{"sample":1}}"#).unwrap();
        assert_eq!(c.shadow_sample(), None);
        let err = |json: &str| Config::from_json(json.as_bytes()).unwrap_err().0;
        for bad in ["1.5", "-0.1", "\"all\""] {
            let e = err(&format!(r#"{{"shadow":{{"sample":{bad}}}}}"#));
            assert!(e.contains("`shadow.sample`"), "{bad}: {e}");
        }
        assert!(err(r#"{"shadow":{}}"#).contains("`shadow`"));
        assert!(err(r#"{"shadow":{"rate":0.5}}"#).contains("unknown field `rate`"));
    }
}
