//! `--embeddings-url` and `--embeddings-model`, shared by `explain` and `eval`: hybrid ranking
//! with vectors from an OpenAI-compatible embeddings service (http:// or https://), got through
//! the filter's own code (`toolsift::offline::eval::Embedder`). A service that fails is an error (exit 2),
//! never a silent fall back to keyword ranking. Credentials go in headers
//! (`--embeddings-header`, or the API key in `TOOLSIFT_EMBEDDINGS_API_KEY`) and are never
//! printed.

use crate::Failure;
use crate::http::{Client, normalize_url, parse_header};
use toolsift::config::{Config, Ranking};
use toolsift::offline::eval::Embedder;

/// Tool texts per embeddings call while a catalog is embedded.
pub const BATCH: usize = 64;

/// The embeddings API key, sent as `authorization: Bearer KEY` (an environment variable, so
/// that it is not in the command line, where other users of the machine can read it).
pub const API_KEY_VARIABLE: &str = "TOOLSIFT_EMBEDDINGS_API_KEY";

#[derive(clap::Args, Debug, Clone, Default)]
pub struct EmbeddingArgs {
    /// Rank as the filter does with `ranking: hybrid` (keyword channels and embeddings, fused by
    /// the configuration's `rrf_k` and `channel_weights`), with vectors from this
    /// OpenAI-compatible embeddings endpoint, e.g. http://127.0.0.1:18100/v1/embeddings or
    /// https://api.openai.com/v1/embeddings (no path means /v1/embeddings). Any failure of
    /// the service is an error. The API key is read from TOOLSIFT_EMBEDDINGS_API_KEY (sent as
    /// `authorization: Bearer KEY`).
    #[arg(long, value_name = "URL", requires = "embeddings_model")]
    pub embeddings_url: Option<String>,
    /// The `model` of the embeddings requests, e.g. all-MiniLM-L6-v2.
    #[arg(long, value_name = "NAME", requires = "embeddings_url")]
    pub embeddings_model: Option<String>,
    /// A header for every embeddings call, `name: value` (repeatable), e.g.
    /// `api-key: …` for Azure OpenAI. Overrides the configuration's `embeddings.headers` and
    /// the API key's `authorization` of the same name.
    #[arg(long, value_name = "NAME: VALUE", requires = "embeddings_url")]
    pub embeddings_header: Vec<String>,
    /// PEM file of the CA certificates to trust for an https:// service, instead of the
    /// Mozilla roots (a private CA, a self-signed certificate).
    #[arg(long, value_name = "PEM", requires = "embeddings_url")]
    pub embeddings_ca_cert: Option<std::path::PathBuf>,
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
        let url = normalize_url(url_text).map_err(|e| Failure(format!("--embeddings-url {e}")))?;
        let embeddings = config.embeddings.as_ref();
        // The configuration's headers, then the API key, then the flags; a later one replaces an
        // earlier one of the same name.
        let mut headers: Vec<(String, String)> = embeddings
            .map(|e| {
                e.headers
                    .iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut set = |name: String, value: String| {
            headers.retain(|(k, _)| *k != name);
            headers.push((name, value));
        };
        if let Ok(key) = std::env::var(API_KEY_VARIABLE) {
            let key = key.trim();
            if !key.is_empty() {
                set("authorization".to_owned(), format!("Bearer {key}"));
            }
        }
        for text in &self.embeddings_header {
            let (name, value) =
                parse_header(text).map_err(|e| Failure(format!("--embeddings-header: {e}")))?;
            set(name, value);
        }
        let ca =
            match &self.embeddings_ca_cert {
                None => None,
                Some(path) => Some(std::fs::read(path).map_err(|e| {
                    Failure(format!("--embeddings-ca-cert {}: {e}", path.display()))
                })?),
            };
        let client = Client::new(url, headers, ca.as_deref()).map_err(Failure)?;
        let dimensions = embeddings.and_then(|e| e.dimensions);
        let post = move |body: &str| {
            on_call();
            client.post_json(body)
        };
        Ok(Some(
            Embedder::new(url_text, model, dimensions, BATCH, capacity, Box::new(post))
                .with_settings(embeddings),
        ))
    }
}
