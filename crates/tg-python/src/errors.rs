//! Errors: an internal [`Error`] (a [`Kind`] and a message) that becomes an instance of the
//! matching exception class of `tensor_graphs.errors` when it reaches Python, and the
//! mapping of every engine error type onto those kinds.
//!
//! The exception classes are defined in Python (so they can inherit from both
//! `TensorGraphsError` and a builtin such as `ValueError` or `KeyError`) and looked up once.

use pyo3::exceptions;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tg_compiler::CompileError;
use tg_ir::IrError;
use tg_models::{InputProblem, ModelError};
use tg_runtime::RuntimeError;

/// Which exception class an error becomes (the names of `tensor_graphs.errors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An invalid graph: wrong operand count, bad reference, unknown op name.
    Graph,
    /// Shapes that do not fit an op, or an input of the wrong shape.
    Shape,
    /// Dtypes that do not fit an op, or an input of the wrong dtype.
    DType,
    /// A name declared twice (input, output, weight).
    DuplicateName,
    /// `run()` without a required input.
    MissingInput,
    /// An input or output name the graph does not have.
    UnknownName,
    /// The compiler could not compile the graph.
    Compile,
    /// Bad compiler options (unknown or required stage, unknown numerics).
    Options,
    /// Execution failed (kernel error, allocation, interpreter) or the engine panicked.
    Execution,
    /// A model file that cannot be used.
    Model,
    /// A model file or folder that does not exist.
    ModelNotFound,
    /// A request a model cannot serve (bad sampling parameters, empty or too long prompt).
    Request,
}

const KINDS: [Kind; 12] = [
    Kind::Graph,
    Kind::Shape,
    Kind::DType,
    Kind::DuplicateName,
    Kind::MissingInput,
    Kind::UnknownName,
    Kind::Compile,
    Kind::Options,
    Kind::Execution,
    Kind::Model,
    Kind::ModelNotFound,
    Kind::Request,
];

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Graph => "GraphError",
            Kind::Shape => "ShapeError",
            Kind::DType => "DTypeError",
            Kind::DuplicateName => "DuplicateNameError",
            Kind::MissingInput => "MissingInputError",
            Kind::UnknownName => "UnknownNameError",
            Kind::Compile => "CompileError",
            Kind::Options => "OptionsError",
            Kind::Execution => "ExecutionError",
            Kind::Model => "ModelError",
            Kind::ModelNotFound => "ModelNotFoundError",
            Kind::Request => "RequestError",
        }
    }

    /// The builtin the class derives from, used if `tensor_graphs.errors` cannot be imported.
    fn fallback(self, py: Python<'_>) -> Bound<'_, PyType> {
        match self {
            Kind::Graph | Kind::Shape | Kind::DuplicateName | Kind::Options | Kind::Request => py.get_type::<exceptions::PyValueError>(),
            Kind::DType => py.get_type::<exceptions::PyTypeError>(),
            Kind::MissingInput | Kind::UnknownName => py.get_type::<exceptions::PyKeyError>(),
            Kind::ModelNotFound => py.get_type::<exceptions::PyFileNotFoundError>(),
            Kind::Compile | Kind::Execution | Kind::Model => py.get_type::<exceptions::PyRuntimeError>(),
        }
    }

    fn class(self, py: Python<'_>) -> Bound<'_, PyType> {
        static CLASSES: [PyOnceLock<Py<PyType>>; 12] = [const { PyOnceLock::new() }; 12];
        let i = KINDS.iter().position(|&k| k == self).unwrap_or(0);
        let found = CLASSES[i].get_or_try_init(py, || -> PyResult<Py<PyType>> {
            let m = py.import("tensor_graphs.errors")?;
            Ok(m.getattr(self.class_name())?.cast_into::<PyType>()?.unbind())
        });
        match found {
            Ok(c) => c.bind(py).clone(),
            Err(_) => self.fallback(py),
        }
    }
}

/// An error on its way to Python.
#[derive(Debug, Clone)]
pub(crate) struct Error {
    pub kind: Kind,
    pub msg: String,
}

/// Shorthand for an [`Error`].
pub(crate) fn err(kind: Kind, msg: impl Into<String>) -> Error {
    Error { kind, msg: msg.into() }
}

/// Result with an [`Error`].
pub(crate) type Res<T> = Result<T, Error>;

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        Python::attach(|py| PyErr::from_type(e.kind.class(py), (e.msg,)))
    }
}

/// Graph-building and interpreter errors: shape → `ShapeError`, dtype → `DTypeError`,
/// evaluation → `ExecutionError`, the rest (arity, references, names) → `GraphError`.
pub(crate) fn ir(e: IrError) -> Error {
    let kind = match &e {
        IrError::Shape { .. } => Kind::Shape,
        IrError::DType { .. } => Kind::DType,
        IrError::Arity { .. } | IrError::BadReference { .. } | IrError::Inconsistent { .. } | IrError::Name(_) => Kind::Graph,
        IrError::Eval(_) => Kind::Execution,
    };
    err(kind, e.to_string())
}

/// Compiler errors: a graph that fails verification keeps the IR mapping; bad options →
/// `OptionsError`; an unsupported node or an invalid plan → `CompileError`.
pub(crate) fn compile(e: CompileError) -> Error {
    match e {
        CompileError::Ir(ie) => {
            let k = ir(ie.clone()).kind;
            err(k, CompileError::Ir(ie).to_string())
        }
        CompileError::Options(_) => err(Kind::Options, e.to_string()),
        CompileError::Unsupported { .. } | CompileError::Invalid(_) | CompileError::Incremental(_) => err(Kind::Compile, e.to_string()),
    }
}

/// Runtime errors. Inputs are checked before the engine sees them, so an input error here
/// is unexpected; it still maps to the closest kind.
pub(crate) fn runtime(e: RuntimeError) -> Error {
    let kind = match &e {
        RuntimeError::Input { detail, .. } if detail.contains("not supplied") => Kind::MissingInput,
        RuntimeError::Input { .. } => Kind::Shape,
        RuntimeError::Weight { .. }
        | RuntimeError::Kernel { .. }
        | RuntimeError::Plan(_)
        | RuntimeError::Alloc { .. }
        | RuntimeError::State { .. }
        | RuntimeError::Device { .. } => Kind::Execution,
    };
    err(kind, e.to_string())
}

/// Model errors: unreadable or mismatched files → `ModelError`, bad requests →
/// `RequestError`, graph/compile/runtime failures as above.
pub(crate) fn model(e: ModelError) -> Error {
    match e {
        ModelError::Ir(ie) => ir(ie),
        ModelError::Compile(ce) => compile(ce),
        ModelError::Runtime(re) => runtime(re),
        ModelError::Request(m) => err(Kind::Request, m),
        ModelError::Input { problem, .. } => {
            let kind = match problem {
                InputProblem::Missing => Kind::MissingInput,
                InputProblem::Unknown => Kind::UnknownName,
                InputProblem::DType => Kind::DType,
                InputProblem::Shape => Kind::Shape,
                InputProblem::Value => Kind::Request,
            };
            err(kind, e.to_string())
        }
        ModelError::Onnx(oe) => onnx(oe),
        ModelError::NotFound(_) => err(Kind::ModelNotFound, e.to_string()),
        ModelError::UnknownKind { .. } | ModelError::Gguf(_) | ModelError::Safetensors(_) | ModelError::Tokenizer(_) | ModelError::Architecture { .. } => {
            err(Kind::Model, e.to_string())
        }
    }
}

/// ONNX errors: a file that cannot be read → `ModelNotFoundError`, an op or type the
/// importer does not map → `CompileError`, the rest (not ONNX, invalid) → `ModelError`.
pub(crate) fn onnx(e: tg_onnx::OnnxError) -> Error {
    use tg_onnx::OnnxError;
    let kind = match e {
        OnnxError::Io { .. } => Kind::ModelNotFound,
        OnnxError::Unsupported { .. } | OnnxError::UnsupportedType(_) => Kind::Compile,
        _ => Kind::Model,
    };
    err(kind, e.to_string())
}

/// Runs `f`, turning a panic into an `ExecutionError` (an engine bug must not take the
/// interpreter down, and `PanicException` would escape `except Exception`).
pub(crate) fn guard<T>(f: impl FnOnce() -> Res<T>) -> Res<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned()).unwrap_or_else(|| "unknown panic".into());
            Err(err(Kind::Execution, format!("internal error in the engine (please report it): {what}")))
        }
    }
}
