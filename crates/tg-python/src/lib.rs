//! Python bindings of Tensor Graphs: the native half of the `tensor_graphs` package.
//!
//! The extension module `tensor_graphs._native` exposes:
//!
//! - [`graph::GraphCore`]: a graph under construction, node by node, with every node's shape
//!   and dtype inferred and checked by `tg_ir::infer` as it is added (the same checks
//!   `tg_ir::GraphBuilder` makes), plus an in-memory weight store holding the constants
//!   created from numpy arrays. The numpy-flavoured `Graph`/`Tensor` API is pure Python
//!   (`python/tensor_graphs/_graph.py`) on top of it.
//! - [`compiled::compile`] and [`compiled::Compiled`]: `tg_compiler::compile` for the CPU
//!   device and a `tg_runtime::Executable`, run on dicts of numpy arrays with the GIL
//!   released.
//! - [`graph::reference_eval`]: the f64 reference interpreter of `tg_ir::interp`.
//! - [`planner::plan_problem`]: the planner (`tg_planner`) on a JSON problem, for the oracle
//!   suite.
//! - [`models`]: Gemma 3 (GGUF) generation, tokenization and logits; EmbeddingGemma
//!   embeddings.
//! - [`session::load_model`] and [`session::ModelSession`]: any model the registry opens
//!   (`tg_models::open`) through the one model interface (`tensor_graphs.load`, and
//!   `tensor_graphs.onnx.load` as its ONNX kind).
//!
//! Errors are raised as the exception classes of `tensor_graphs.errors` (see
//! [`errors::Kind`]); a panic inside the engine becomes `ExecutionError`, never an
//! interpreter crash.
#![warn(missing_docs)]

mod compiled;
mod convert;
mod errors;
mod graph;
mod json;
mod media;
mod models;
mod planner;
mod session;

use pyo3::prelude::*;

/// The extension module `tensor_graphs._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<graph::GraphCore>()?;
    m.add_class::<compiled::Compiled>()?;
    m.add_class::<models::PyLanguageModel>()?;
    m.add_class::<models::PyEmbeddingGemma>()?;
    m.add_class::<media::PyTerrainDiffusion>()?;
    m.add_class::<media::PyAudioEmbedder>()?;
    m.add_class::<models::TokenStream>()?;
    m.add_class::<models::Token>()?;
    m.add_class::<session::ModelSession>()?;
    m.add_function(wrap_pyfunction!(session::load_model, m)?)?;
    m.add_function(wrap_pyfunction!(compiled::compile, m)?)?;
    m.add_function(wrap_pyfunction!(graph::reference_eval, m)?)?;
    m.add_function(wrap_pyfunction!(compiled::default_threads, m)?)?;
    m.add_function(wrap_pyfunction!(planner::plan_problem, m)?)?;
    m.add("STAGES", tg_compiler::STAGES.to_vec())?;
    m.add("MODEL_KINDS", tg_models::KINDS.iter().map(|k| (k.name, k.what)).collect::<Vec<_>>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
