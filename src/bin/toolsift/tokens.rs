//! Real token counts, from OpenAI's BPE vocabularies (embedded in `tiktoken-rs`, no download).

use crate::Failure;
use clap::ValueEnum;
use tiktoken_rs::CoreBPE;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TokenizerName {
    /// o200k_base: GPT-4o, GPT-4.1, o-series.
    #[value(name = "o200k", alias = "o200k_base")]
    O200k,
    /// cl100k_base: GPT-4, GPT-3.5.
    #[value(name = "cl100k", alias = "cl100k_base")]
    Cl100k,
}

impl TokenizerName {
    pub fn name(self) -> &'static str {
        match self {
            TokenizerName::O200k => "o200k",
            TokenizerName::Cl100k => "cl100k",
        }
    }
}

pub struct Tokenizer {
    pub name: TokenizerName,
    bpe: CoreBPE,
}

impl Tokenizer {
    pub fn load(name: TokenizerName) -> Result<Tokenizer, Failure> {
        let bpe = match name {
            TokenizerName::O200k => tiktoken_rs::o200k_base(),
            TokenizerName::Cl100k => tiktoken_rs::cl100k_base(),
        }
        .map_err(|e| Failure(format!("cannot load the {} tokenizer: {e}", name.name())))?;
        Ok(Tokenizer { name, bpe })
    }

    /// Tokens of `text` as plain text (special-token markers count as text).
    pub fn count(&self, text: &str) -> usize {
        self.bpe.encode_ordinary(text).len()
    }
}
