//! Models for Tensor Graphs.
//!
//! A model here is a *pure function of its inputs written as a graph of primitive ops*:
//! [`gemma3::build_graph`] returns the whole Gemma 3 forward pass for a token sequence,
//! with no cache code and no fused ops (fusion and caching come from compiler rewrites).
//! The layers it is built from ([`layers`]: norms, RoPE, masks, attention, gated FFN,
//! convolution blocks) are shared by every model.
//! [`LanguageModel`] is the generation engine for every decoder architecture (Gemma 3, …):
//! it loads a GGUF file, compiles the architecture's graph per sequence length, derives the
//! incremental plans that keep the KV cache, samples and generates.
//! [`EmbeddingGemma`] runs the same layers as a bidirectional encoder with the
//! sentence-transformers pooling, dense and normalisation modules, from safetensors.
//! [`onnx::Onnx`] runs any ONNX file through the importer; [`terrain`] samples terrain
//! heightmaps with the diffusion UNet and [`audio`] embeds speech and scores wake words
//! with openwakeword's models, both on top of it.
//!
//! Every model is also a [`Model`] (named tensors in, named tensors out, plans compiled per
//! input shape), and [`open`] finds the kind of a path in [`KINDS`]: the front ends
//! (`tg run`, `tg info`, `tensor_graphs.load`) go through these only.
//!
//! **Adding a model** touches its own file (its config, graph function, loader, `impl
//! Model` and a `pub const KIND: ModelKind`) and this file (`pub mod` and one line in
//! [`KINDS`]); a decoder LLM architecture only its config and graph function
//! ([`DecoderArch`]) and its `KIND` with `decoder: Some(..)`; see `docs/models.md`.
#![warn(missing_docs)]

pub mod audio;
pub mod cache;
pub mod decoder;
pub mod embedding_gemma;
pub mod gemma3;
mod generate;
pub mod layers;
pub mod llama;
mod model;
pub mod onnx;
pub mod terrain;
mod plans;
mod registry;
mod session;
pub mod synth;
mod weights;

pub use model::{capabilities, check_inputs, input_error, CompileTimes, Dim, ElemType, Embed, Generate, InputProblem, Model, TensorSpec};
pub use registry::{head, known_kinds, open, open_kind, Detect, ModelKind, OpenFn, OpenOptions};

/// Every kind of model [`open`] recognises, asked in this order (the first that claims a
/// path opens it). One line per model.
pub const KINDS: &[ModelKind] = &[gemma3::KIND, llama::LLAMA, llama::QWEN2, llama::QWEN3, embedding_gemma::KIND, onnx::KIND];

pub use embedding_gemma::{EmbeddingConfig, EmbeddingGemma, Embeddings};
pub use decoder::{DecoderArch, LanguageModel};
pub use gemma3::{Gemma3Config, Logits};
pub use llama::LlamaConfig;
pub use generate::{argmax, cut_at_stop, GenTimings, Sampler, SamplingParams};
pub use plans::PlanView;
pub use session::SessionInfo;
pub use tg_tokenizer::{parse_messages, ChatTemplate, Message, StreamDecoder, Tokenizer};
pub use weights::{GgufWeights, SafetensorsWeights};

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
    /// An input of [`Model::run`] that does not fit the model (missing, unknown, wrong type
    /// or shape, a value it cannot take).
    #[error("{model}: {detail}")]
    Input {
        /// The model's file or folder.
        model: String,
        /// What kind of mismatch.
        problem: InputProblem,
        /// What is wrong, naming the input.
        detail: String,
    },
    /// An ONNX file could not be read or imported.
    #[error(transparent)]
    Onnx(#[from] tg_onnx::OnnxError),
    /// No file or folder at the path.
    #[error("{0}: no such file or folder")]
    NotFound(String),
    /// No registered kind of model takes the path.
    #[error("{path}: {detail}")]
    UnknownKind {
        /// The path.
        path: String,
        /// Why, and the kinds there are.
        detail: String,
    },
}
