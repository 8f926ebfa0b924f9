//! Tokenizers built from GGUF metadata, token-for-token compatible with
//! llama.cpp's: SentencePiece (`tokenizer.ggml.model = "llama"`, Gemma) and
//! byte-level BPE (`"gpt2"`, Qwen 2 / Llama 3 / GPT-2), behind one
//! [`Tokenizer`] type ([`Tokenizer::model_kind`] says which); chat templates
//! ([`ChatTemplate`]); and Hugging Face `tokenizer.json` files
//! ([`HfTokenizer`]).
//!
//! The SentencePiece pipeline for [`Tokenizer::encode`] is:
//!
//! 1. **Special-token partitioning.** Every control, unknown and user-defined
//!    token is a candidate; candidates are tried longest first and each one
//!    splits the still-raw text fragments at its left-to-right, non-overlapping
//!    occurrences. With `parse_special = false` control and unknown tokens are
//!    not candidates, but user-defined tokens still are (Gemma's newline, tab
//!    and space-run tokens, HTML tags, ...).
//! 2. **Whitespace escaping.** In each raw fragment, `' '` becomes `▁` (U+2581).
//!    With `add_space_prefix` a space is first prepended to raw fragments that
//!    start the text or follow a special token.
//! 3. **Bigram merging.** The fragment is split into characters; adjacent pairs
//!    whose concatenation is a vocabulary entry are merged, best score first,
//!    ties going to the leftmost pair, until no pair merges.
//! 4. **Byte fallback.** A final symbol that is not a vocabulary entry is
//!    emitted as its UTF-8 bytes through the `<0xNN>` byte tokens.
//!
//! Decoding maps `▁` back to a space and byte tokens to raw bytes; control
//! and unknown tokens are rendered (as their text) only when asked.
//! [`StreamDecoder`] does the same one token at a time, holding back the
//! bytes of incomplete UTF-8 characters.
//!
//! **Byte-level BPE** shares step 1 (the same special-token partitioning)
//! and decoding's handling of control tokens; each raw fragment then goes
//! through a `tokenizers` pipeline: the regex list llama.cpp uses for the
//! file's `tokenizer.ggml.pre` (`qwen2`, `llama-bpe`, `gpt-2`, `default`,
//! ...; each regex a `Split` with isolated matches), the byte-level
//! alphabet, and a BPE model over the file's vocabulary and merges. Tokens
//! decode to raw bytes (a character can be split over several tokens, which
//! [`StreamDecoder`] holds back until complete).
//!
//! Like llama.cpp, a few tokens are reclassified by their text when the
//! vocabulary is loaded (end-of-generation and fill-in-the-middle markers
//! become control tokens). For Gemma 3 this affects `</s>`: a user-defined
//! token in the file, it is treated as a control token that ends generation.
//!
//! [`HfTokenizer`] is a second, independent tokenizer for models shipped as
//! Hugging Face folders (EmbeddingGemma-300M): a thin wrapper over the
//! `tokenizers` crate that loads a `tokenizer.json` and encodes and decodes
//! with it, with this crate's errors, per-call options and id checks.
//! Settings that would change a single encoding's length or make it random
//! (truncation, fixed padding, BPE dropout) are refused at load with
//! [`TokenizerError::HfUnsupported`].
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let gguf = tg_gguf::GgufFile::open("model.gguf")?;
//! let tok = tg_tokenizer::Tokenizer::from_gguf(&gguf)?;
//! let ids = tok.encode("Hello world", true, false);
//! assert_eq!(tok.decode(&ids, false)?, "Hello world");
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod bpe;
mod chat;
mod compat;
mod decode;
mod error;
mod fxhash;
mod gguf;
mod hf;
mod index;
mod special;
mod spm;
mod tokenizer;
mod vocab;

#[cfg(test)]
mod bpe_tests;
#[cfg(test)]
mod tests;

pub use chat::{parse_messages, ChatTemplate, Message};
pub use decode::StreamDecoder;
pub use error::TokenizerError;
pub use gguf::keys;
pub use hf::{EncodeOptions, HfTokenizer};
pub use tokenizer::{ModelKind, Tokenizer};
pub use vocab::{BpeVocab, TokenType, Vocab};
