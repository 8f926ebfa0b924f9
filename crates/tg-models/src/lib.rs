//! Models for Tensor Graphs.
//!
//! A model here is a *pure function of its inputs written as a graph of primitive ops*:
//! [`gemma3::build_graph`] returns the whole Gemma 3 forward pass for a token sequence,
//! with no cache code and no fused ops (fusion and caching come from compiler rewrites).
//! [`Gemma3`] loads a GGUF file, compiles that graph per sequence length and runs it.
//! [`EmbeddingGemma`] runs the same layers as a bidirectional encoder with the
//! sentence-transformers pooling, dense and normalisation modules, from safetensors.
#![warn(missing_docs)]

pub mod cache;
pub mod embedding_gemma;
pub mod gemma3;
mod generate;
mod plans;
mod session;
mod weights;

pub use gemma3::{Gemma3, Gemma3Config, Logits};
pub use plans::PlanView;
pub use session::SessionInfo;
pub use generate::{argmax, GenTimings, Sampler, SamplingParams};
pub use embedding_gemma::{EmbeddingConfig, EmbeddingGemma, Embeddings};
pub use weights::{GgufWeights, SafetensorsWeights};
pub use tg_tokenizer::{StreamDecoder, Tokenizer};

use thiserror::Error;

/// Errors raised while loading or running a model.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] tg_gguf::GgufError),
    /// A safetensors file could not be read.
    #[error(transparent)]
    Safetensors(#[from] tg_safetensors::SafetensorsError),
    /// The tokenizer metadata is unusable.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] tg_tokenizer::TokenizerError),
    /// The file is a valid GGUF but not the model we expect (architecture, shapes).
    #[error("{file}: {detail}")]
    Architecture {
        /// File name.
        file: String,
        /// What does not match.
        detail: String,
    },
    /// Graph construction failed.
    #[error("graph: {0}")]
    Ir(#[from] tg_ir::IrError),
    /// Compilation failed.
    #[error("compile: {0}")]
    Compile(#[from] tg_compiler::CompileError),
    /// Execution failed.
    #[error("runtime: {0}")]
    Runtime(#[from] tg_runtime::RuntimeError),
    /// A request the model cannot serve (prompt longer than the context, empty prompt...).
    #[error("{0}")]
    Request(String),
}
