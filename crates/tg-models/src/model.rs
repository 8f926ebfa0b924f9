//! One interface for every model: what it takes and gives (named tensors, their element
//! types and which dimensions are free), compiling for given inputs (one plan per input
//! shape, cached), and running on named host tensors. The front ends (`tg run`, `tg info`,
//! `tensor_graphs.load`) use only this interface and [`crate::open`], so a new model adds
//! no branch to any of them; what only some models do (generate text, embed texts) is a
//! capability a front end asks for ([`Model::as_generator`], [`Model::as_embedder`]).

use crate::{Embeddings, GenTimings, ModelError, SamplingParams};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use tg_compiler::{CompileOptions, CompileReport};
use tg_ir::{DType, HostData, HostTensor};
use tg_runtime::Device;

/// The element type of a model's input or output as the model file declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ElemType {
    /// 32-bit float.
    F32,
    /// 32-bit integer.
    I32,
    /// 64-bit integer, as the file declares it (ONNX `int64`, token ids of Hugging Face
    /// exports): front ends read and write int64, the engine computes in i32 (a value
    /// outside its range is an error naming the input).
    I64,
    /// Boolean.
    Bool,
}

impl ElemType {
    /// The dtype of the [`HostTensor`] that carries it.
    pub fn host(self) -> DType {
        match self {
            ElemType::F32 => DType::F32,
            ElemType::I32 | ElemType::I64 => DType::I32,
            ElemType::Bool => DType::Bool,
        }
    }

    /// The numpy name (`float32`, `int32`, `int64`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "float32",
            ElemType::I32 => "int32",
            ElemType::I64 => "int64",
            ElemType::Bool => "bool",
        }
    }

    /// The element type of an ONNX type code, when the engine computes with it.
    pub fn from_onnx(code: i32) -> Option<ElemType> {
        match code {
            1 => Some(ElemType::F32),
            6 => Some(ElemType::I32),
            7 => Some(ElemType::I64),
            9 => Some(ElemType::Bool),
            _ => None,
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension of an input or output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Dim {
    /// Always this size.
    Fixed(usize),
    /// Chosen by the caller (one plan per size); dimensions with the same name take the
    /// same size in every input and output.
    Free {
        /// The dimension's name (`tokens`, `batch`, or the ONNX `dim_param`).
        name: String,
        /// The largest size the model accepts, when it has a limit.
        max: Option<usize>,
    },
}

impl Dim {
    /// A free dimension.
    pub fn free(name: &str, max: Option<usize>) -> Dim {
        Dim::Free { name: name.to_string(), max }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Free { name, max: Some(m) } => write!(f, "{name}<={m}"),
            Dim::Free { name, max: None } => write!(f, "{name}"),
        }
    }
}

/// A named input or output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TensorSpec {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub elem: ElemType,
    /// Its dimensions, outermost first; `None` when the model does not declare a shape (any
    /// shape is taken, the plan is compiled for it).
    pub dims: Option<Vec<Dim>>,
}

impl TensorSpec {
    /// A spec with declared dimensions.
    pub fn new(name: &str, elem: ElemType, dims: Vec<Dim>) -> TensorSpec {
        TensorSpec { name: name.to_string(), elem, dims: Some(dims) }
    }

    /// The shape as text: `[tokens<=32768, 262144]`, or `any` with no declared shape.
    pub fn shape_text(&self) -> String {
        match &self.dims {
            None => "any".into(),
            Some(d) => format!("[{}]", d.iter().map(Dim::to_string).collect::<Vec<_>>().join(", ")),
        }
    }
}

/// The kind of an input that does not fit the model (front ends map each to their own
/// error class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputProblem {
    /// An input the model needs was not given.
    Missing,
    /// A name the model has no input (or output) of.
    Unknown,
    /// The wrong element type.
    DType,
    /// The wrong rank or size.
    Shape,
    /// A value the model cannot take (a token id outside the vocabulary, an empty row).
    Value,
}

/// An [`ModelError::Input`] about `input` of `model`.
pub fn input_error(model: &Path, problem: InputProblem, detail: impl Into<String>) -> ModelError {
    ModelError::Input { model: model.display().to_string(), problem, detail: detail.into() }
}

/// Checks `inputs` against `specs`: every input given, no other name, each of its element
/// type and shape (fixed dimensions equal, free ones within their limit and equal to the
/// other dimensions of their name). Returns the size of every free dimension.
pub fn check_inputs(model: &Path, specs: &[TensorSpec], inputs: &HashMap<String, HostTensor>) -> Result<BTreeMap<String, usize>, ModelError> {
    for s in specs {
        if !inputs.contains_key(&s.name) {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            return Err(input_error(model, InputProblem::Missing, format!("missing input '{}' (the model's inputs are: {})", s.name, names.join(", "))));
        }
    }
    let mut extra: Vec<&String> = inputs.keys().filter(|k| !specs.iter().any(|s| &s.name == *k)).collect();
    extra.sort();
    if let Some(k) = extra.first() {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        return Err(input_error(model, InputProblem::Unknown, format!("unknown input '{k}' (the model's inputs are: {})", names.join(", "))));
    }
    let mut free: BTreeMap<String, usize> = BTreeMap::new();
    for s in specs {
        let t = &inputs[&s.name];
        if t.dtype() != s.elem.host() {
            return Err(input_error(model, InputProblem::DType, format!("input '{}': the model takes {}, got {}", s.name, s.elem, host_type_name(&t.data))));
        }
        let Some(dims) = &s.dims else { continue };
        let bad = || input_error(model, InputProblem::Shape, format!("input '{}': shape {:?} does not match the model's {}", s.name, t.shape, s.shape_text()));
        if t.shape.len() != dims.len() {
            return Err(bad());
        }
        for (&n, d) in t.shape.iter().zip(dims) {
            match d {
                Dim::Fixed(m) if n != *m => return Err(bad()),
                Dim::Fixed(_) => {}
                Dim::Free { name, max } => {
                    if max.is_some_and(|m| n > m) {
                        return Err(input_error(model, InputProblem::Shape, format!("input '{}': {name} = {n} exceeds the model's limit of {}", s.name, max.unwrap_or(0))));
                    }
                    if let Some(&prev) = free.get(name) {
                        if prev != n {
                            return Err(input_error(model, InputProblem::Shape, format!("input '{}': {name} = {n}, but {prev} in another input", s.name)));
                        }
                    }
                    free.insert(name.clone(), n);
                }
            }
        }
    }
    Ok(free)
}

fn host_type_name(d: &HostData) -> &'static str {
    match d {
        HostData::F32(_) => "float32",
        HostData::I32(_) => "int32",
        HostData::Bool(_) => "bool",
    }
}

/// What one [`Model::compile`] call cost, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CompileTimes {
    /// Building (or importing) the graphs.
    pub graph_ms: f64,
    /// Compiling them (or loading them from the plan store).
    pub compile_ms: f64,
    /// Plans compiled by this call (0 when every plan was cached).
    pub plans: usize,
}

/// A loaded model, whatever its kind: named tensors in, named tensors out.
///
/// `run` is the model as a pure function of its inputs (what the graph computes); the
/// task-level APIs stay on the concrete types (`Gemma3::generate_tokens`,
/// `EmbeddingGemma::embed`) and are reachable through the capabilities.
pub trait Model: Send {
    /// The registry name of its kind (`gemma3`, `embedding-gemma`, `onnx`).
    fn kind(&self) -> &'static str;

    /// The file or folder it was loaded from.
    fn path(&self) -> &Path;

    /// The named inputs [`Model::run`] takes, in order.
    fn inputs(&self) -> Vec<TensorSpec>;

    /// The named outputs [`Model::run`] gives, in order.
    fn outputs(&self) -> Vec<TensorSpec>;

    /// The devices its plans are compiled for, home first.
    fn devices(&self) -> Vec<Arc<dyn Device>>;

    /// Compiler options for plans compiled from now on (clears the cached plans).
    fn set_compile_options(&mut self, options: CompileOptions);

    /// Compiles (or takes from the caches) the plans [`Model::run`] needs for these inputs.
    /// Only their shapes matter, except for inputs a graph needs to know the values of at
    /// compile time (an ONNX `Reshape` target given as a graph input), which are bound.
    fn compile(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<CompileTimes, ModelError>;

    /// The graphs [`Model::compile`] plans for these inputs, before compilation (one per
    /// plan): what `tg profile` asks the planner about, so the kernels it measures are the
    /// ones this model's plans choose between.
    fn graphs(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<tg_ir::Graph>, ModelError>;

    /// Runs the model on `inputs` (compiling first when needed) and returns every output, in
    /// the order of [`Model::outputs`]. Inputs that do not fit are
    /// [`ModelError::Input`] errors naming the model and the input.
    fn run(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, ModelError>;

    /// The report of the most recent compilation.
    fn last_report(&self) -> Option<&CompileReport>;

    /// The configuration read from the file, for `tg info` (JSON; `null` when there is
    /// none to show).
    fn config(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Text generation, if the model does it.
    fn as_generator(&mut self) -> Option<&mut dyn Generate> {
        None
    }

    /// Text embedding, if the model does it.
    fn as_embedder(&mut self) -> Option<&mut dyn Embed> {
        None
    }
}

/// The capabilities a model has, by name (`run` always; `generate`, `embed`).
pub fn capabilities(m: &mut dyn Model) -> Vec<&'static str> {
    let mut v = vec!["run"];
    if m.as_generator().is_some() {
        v.push("generate");
    }
    if m.as_embedder().is_some() {
        v.push("embed");
    }
    v
}

/// A model that generates text, token by token.
pub trait Generate {
    /// Token ids of `text` (BOS first with `add_bos`; control-token text such as
    /// `<start_of_turn>` becomes those tokens).
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, ModelError>;

    /// The text of token ids (control tokens left out).
    fn decode(&self, ids: &[u32]) -> Result<String, ModelError>;

    /// Generates up to `n` tokens after `prompt`, calling `on_token` after each (returning
    /// `false` stops); stops early at an end-of-generation token.
    fn generate(&mut self, prompt: &[u32], n: usize, params: &SamplingParams, on_token: &mut dyn FnMut(u32) -> bool) -> Result<(Vec<u32>, GenTimings), ModelError>;

    /// [`Generate::generate`] from text to text (the prompt tokenized with BOS when the
    /// file asks for one); the text ends before the first stop string.
    fn generate_text(&mut self, prompt: &str, n: usize, params: &SamplingParams) -> Result<String, ModelError> {
        let ids = self.encode(prompt, true)?;
        let (out, _) = self.generate(&ids, n, params, &mut |_| true)?;
        Ok(crate::generate::cut_at_stop(&self.decode(&out)?, &params.stop).to_string())
    }

    /// The prompt for the assistant's next turn after `messages` (the model's chat template,
    /// rendered and tokenized).
    fn chat_prompt(&self, messages: &[tg_tokenizer::Message]) -> Result<Vec<u32>, ModelError> {
        let _ = messages;
        Err(ModelError::Request("this model has no chat template".into()))
    }

    /// The assistant's reply to `messages` ([`Generate::chat_prompt`], then generation), cut
    /// before the first stop string.
    fn chat(&mut self, messages: &[tg_tokenizer::Message], n: usize, params: &SamplingParams) -> Result<String, ModelError> {
        let ids = self.chat_prompt(messages)?;
        let (out, _) = self.generate(&ids, n, params, &mut |_| true)?;
        Ok(crate::generate::cut_at_stop(&self.decode(&out)?, &params.stop).to_string())
    }
}

/// A model that embeds texts as vectors.
pub trait Embed {
    /// Embeds `texts` with the task prompt `prompt_name` (`None`: the model's default),
    /// truncated to `dim` values (`None`: the full width).
    fn embed(&mut self, texts: &[&str], prompt_name: Option<&str>, dim: Option<usize>) -> Result<Embeddings, ModelError>;

    /// Width of the full embedding.
    fn output_dim(&self) -> usize;

    /// Names of the task prompts (`query`, `document`, ...).
    fn prompt_names(&self) -> Vec<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> Vec<TensorSpec> {
        vec![
            TensorSpec::new("ids", ElemType::I64, vec![Dim::free("batch", None), Dim::free("seq", Some(8))]),
            TensorSpec::new("mask", ElemType::I64, vec![Dim::free("batch", None), Dim::free("seq", Some(8))]),
            TensorSpec::new("x", ElemType::F32, vec![Dim::Fixed(3)]),
        ]
    }

    fn feed(pairs: Vec<(&str, HostTensor)>) -> HashMap<String, HostTensor> {
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    #[test]
    fn inputs_are_checked_by_name_type_and_shape() {
        let p = Path::new("m.bin");
        let i = |s: &[usize]| HostTensor::i32(s, vec![0; s.iter().product()]).unwrap();
        let x = HostTensor::f32(&[3], vec![0.0; 3]).unwrap();
        let ok = check_inputs(p, &specs(), &feed(vec![("ids", i(&[2, 5])), ("mask", i(&[2, 5])), ("x", x.clone())])).unwrap();
        assert_eq!(ok.get("batch"), Some(&2));
        assert_eq!(ok.get("seq"), Some(&5));
        let problem = |f: HashMap<String, HostTensor>| match check_inputs(p, &specs(), &f) {
            Err(ModelError::Input { problem, detail, .. }) => (problem, detail),
            other => panic!("{other:?}"),
        };
        let (k, d) = problem(feed(vec![("ids", i(&[2, 5])), ("x", x.clone())]));
        assert!(k == InputProblem::Missing && d.contains("'mask'"), "{d}");
        let (k, d) = problem(feed(vec![("ids", i(&[2, 5])), ("mask", i(&[2, 5])), ("x", x.clone()), ("y", x.clone())]));
        assert!(k == InputProblem::Unknown && d.contains("'y'"), "{d}");
        let (k, d) = problem(feed(vec![("ids", i(&[2, 5])), ("mask", i(&[2, 5])), ("x", i(&[3]))]));
        assert!(k == InputProblem::DType && d.contains("'x'") && d.contains("float32"), "{d}");
        let (k, d) = problem(feed(vec![("ids", i(&[2, 5])), ("mask", i(&[2, 5])), ("x", HostTensor::f32(&[4], vec![0.0; 4]).unwrap())]));
        assert!(k == InputProblem::Shape && d.contains("[3]"), "{d}");
        let (k, d) = problem(feed(vec![("ids", i(&[2, 9])), ("mask", i(&[2, 9])), ("x", x.clone())]));
        assert!(k == InputProblem::Shape && d.contains("limit of 8"), "{d}");
        let (k, d) = problem(feed(vec![("ids", i(&[2, 5])), ("mask", i(&[2, 4])), ("x", x.clone())]));
        assert!(k == InputProblem::Shape && d.contains("seq = 4"), "{d}");
        let e = check_inputs(p, &specs(), &feed(vec![("ids", i(&[2])), ("mask", i(&[2, 4])), ("x", x)])).unwrap_err();
        assert!(e.to_string().starts_with("m.bin: input 'ids'"), "{e}");
    }
}
