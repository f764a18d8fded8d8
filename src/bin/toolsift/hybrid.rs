//! `--embeddings-url` and `--embeddings-model`, shared by `explain` and `eval`: hybrid ranking
//! with vectors from an OpenAI-compatible embeddings service over plain HTTP, got through the
//! filter's own code (`toolsift::eval::Embedder`). A service that fails is an error (exit 2),
//! never a silent fall back to keyword ranking.

use crate::Failure;
use crate::http::{Url, post_json};
use toolsift::config::{Config, Ranking};
use toolsift::eval::Embedder;

/// Tool texts per embeddings call while a catalog is embedded.
pub const BATCH: usize = 64;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct EmbeddingArgs {
    /// Rank as the filter does with `ranking: hybrid` (keyword channels and embeddings, fused by
    /// the configuration's `rrf_k` and `channel_weights`), with vectors from this
    /// OpenAI-compatible embeddings endpoint, e.g. http://127.0.0.1:18100/v1/embeddings
    /// (http:// only; no path means /v1/embeddings). Any failure of the service is an error.
    #[arg(long, value_name = "URL", requires = "embeddings_model")]
    pub embeddings_url: Option<String>,
    /// The `model` of the embeddings requests, e.g. all-MiniLM-L6-v2.
    #[arg(long, value_name = "NAME", requires = "embeddings_url")]
    pub embeddings_model: Option<String>,
}

impl EmbeddingArgs {
    /// The embedder the flags ask for, if any. The configuration's `embeddings.headers` go with
    /// every call and its `embeddings.dimensions` is asked for and checked, as in the filter.
    /// `on_call` is called before each call.
    pub fn embedder<'a>(
        &self,
        config: &Config,
        capacity: usize,
        mut on_call: impl FnMut() + 'a,
    ) -> Result<Option<Embedder<'a>>, Failure> {
        let (Some(url_text), Some(model)) = (&self.embeddings_url, &self.embeddings_model) else {
            if config.ranking == Ranking::Hybrid {
                eprintln!(
                    "toolsift: note: the configuration ranks hybrid, but without \
                     --embeddings-url and --embeddings-model this is keyword ranking (what the \
                     filter does when the embeddings service does not answer)"
                );
            }
            return Ok(None);
        };
        if model.trim().is_empty() {
            return Err(Failure("--embeddings-model: must not be empty".to_owned()));
        }
        let url = Url::parse(url_text).map_err(|e| Failure(format!("--embeddings-url {e}")))?;
        let embeddings = config.embeddings.as_ref();
        let headers: Vec<(String, String)> = embeddings
            .map(|e| {
                e.headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let dimensions = embeddings.and_then(|e| e.dimensions);
        let post = move |body: &str| {
            on_call();
            let refs: Vec<(&str, &str)> = headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            post_json(&url, &refs, body)
        };
        Ok(Some(Embedder::new(
            url_text,
            model,
            dimensions,
            BATCH,
            capacity,
            Box::new(post),
        )))
    }
}
