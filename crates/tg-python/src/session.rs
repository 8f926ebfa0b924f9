//! `tensor_graphs.load(path)`: any model the registry opens (`tg_models::open`: an ONNX
//! file, a Gemma 3 GGUF file, an EmbeddingGemma folder) as one session type, through the
//! `tg_models::Model` interface only: its inputs and outputs, `run(output_names, feeds)` on
//! numpy arrays, and the capabilities the model has (`generate`, `embed`).
//! `tensor_graphs.onnx.load` is this session opened as the `onnx` kind.
//!
//! Every call releases the GIL; calls from several threads are served one after another.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tg_ir::{HostData, HostTensor};
use tg_models::{Dim, ElemType, Model, OpenOptions, SamplingParams, TensorSpec};

use crate::compiled::devices_named;
use crate::convert::tensor_to_numpy;
use crate::errors::{self, err, guard, Kind, Res};
use crate::json::to_py;

/// A loaded model. Create it with `tensor_graphs.load(path)`.
#[pyclass(module = "tensor_graphs._native", name = "ModelSession", frozen)]
pub struct ModelSession {
    model: Arc<Mutex<Box<dyn Model>>>,
    kind: &'static str,
    path: String,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    capabilities: Vec<&'static str>,
}

fn lock(m: &Mutex<Box<dyn Model>>) -> MutexGuard<'_, Box<dyn Model>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A spec as Python sees it: `(name, shape, dtype, dim_names, limits)`: `shape` lists the
/// fixed sizes with `None` for a free dimension (`None` altogether when the model declares
/// no shape), `dim_names` the free dimensions' names (`None` for a fixed one), `limits` the
/// largest size of the free dimensions that have one.
type SpecTuple = (String, Option<Vec<Option<usize>>>, String, Option<Vec<Option<String>>>, HashMap<String, usize>);

fn spec_tuple(s: &TensorSpec) -> SpecTuple {
    let shape = s.dims.as_ref().map(|d| {
        d.iter()
            .map(|d| match d {
                Dim::Fixed(n) => Some(*n),
                Dim::Free { .. } => None,
            })
            .collect()
    });
    let names = s.dims.as_ref().map(|d| {
        d.iter()
            .map(|d| match d {
                Dim::Fixed(_) => None,
                Dim::Free { name, .. } => Some(name.clone()),
            })
            .collect()
    });
    let limits = s
        .dims
        .iter()
        .flatten()
        .filter_map(|d| match d {
            Dim::Free { name, max: Some(m) } => Some((name.clone(), *m)),
            _ => None,
        })
        .collect();
    (s.name.clone(), shape, s.elem.name().to_string(), names, limits)
}

fn copy<T: numpy::Element + Copy>(a: &Bound<'_, PyArrayDyn<T>>) -> Vec<T> {
    let ro = a.readonly();
    match ro.as_slice() {
        Ok(s) if a.is_c_contiguous() => s.to_vec(),
        _ => ro.as_array().iter().copied().collect(),
    }
}

/// A numpy array fed for input `s` (float32 for float; int32 or int64 for an integer input,
/// int64 values range-checked into the engine's i32; bool for bool).
fn input_tensor(obj: &Bound<'_, PyAny>, s: &TensorSpec) -> Res<HostTensor> {
    let name = &s.name;
    let arr = obj.cast::<PyUntypedArray>().map_err(|_| err(Kind::DType, format!("input '{name}': expected a numpy array")))?;
    let shape = arr.shape().to_vec();
    let got = obj.getattr("dtype").and_then(|d| d.str()).map(|s| s.to_string()).unwrap_or_default();
    let mismatch = || err(Kind::DType, format!("input '{name}': the model takes {}, got a {got} array", s.elem));
    let data = match s.elem {
        ElemType::F32 => HostData::F32(copy(obj.cast::<PyArrayDyn<f32>>().map_err(|_| mismatch())?)),
        ElemType::I32 | ElemType::I64 => {
            if let Ok(a) = obj.cast::<PyArrayDyn<i32>>() {
                HostData::I32(copy(a))
            } else {
                let v = copy(obj.cast::<PyArrayDyn<i64>>().map_err(|_| mismatch())?);
                HostData::I32(
                    v.into_iter()
                        .map(|x| i32::try_from(x).map_err(|_| err(Kind::DType, format!("input '{name}': value {x} does not fit the engine's int32"))))
                        .collect::<Res<_>>()?,
                )
            }
        }
        ElemType::Bool => HostData::Bool(copy(obj.cast::<PyArrayDyn<bool>>().map_err(|_| mismatch())?).into_iter().map(u8::from).collect()),
    };
    HostTensor::new(&shape, data).map_err(errors::ir)
}

impl ModelSession {
    /// The feeds as host tensors (names the model does not have are `UnknownNameError`;
    /// a missing input is left for the model's own check, which names it).
    fn feeds(&self, feeds: &Bound<'_, PyDict>) -> PyResult<HashMap<String, HostTensor>> {
        let mut out = HashMap::new();
        for (k, v) in feeds.iter() {
            let k = k.str()?.to_string();
            let Some(s) = self.inputs.iter().find(|s| s.name == k) else {
                let names: Vec<&str> = self.inputs.iter().map(|s| s.name.as_str()).collect();
                return Err(err(Kind::UnknownName, format!("{}: unknown input '{k}' (the model's inputs are: {})", self.path, names.join(", "))).into());
            };
            out.insert(k, input_tensor(&v, s)?);
        }
        Ok(out)
    }

    /// Runs `f` on the model's generate capability with the GIL released.
    #[allow(clippy::result_large_err)]
    fn generating(&self, py: Python<'_>, f: impl FnOnce(&mut dyn tg_models::Generate) -> Result<String, tg_models::ModelError> + Send) -> PyResult<String> {
        let model = self.model.clone();
        Ok(py.detach(move || {
            guard(|| {
                let mut m = lock(&model);
                let g = m.as_generator().ok_or_else(|| err(Kind::Request, "the model does not generate text"))?;
                f(g).map_err(errors::model)
            })
        })?)
    }

    fn unsupported(&self, what: &str) -> PyErr {
        err(Kind::Request, format!("{}: a {} model does not {what} (it can: {})", self.path, self.kind, self.capabilities.join(", "))).into()
    }
}

#[pymethods]
impl ModelSession {
    /// The kind of model (`gemma3`, `embedding-gemma`, `onnx`).
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// The file or folder it was loaded from.
    #[getter]
    fn path(&self) -> String {
        self.path.clone()
    }

    /// What the model can do: `run` (every model), `generate`, `embed`.
    #[getter]
    fn capabilities(&self) -> Vec<&'static str> {
        self.capabilities.clone()
    }

    /// The inputs: `(name, shape, dtype, dim_names, limits)` each, in the model's order.
    fn inputs(&self) -> Vec<SpecTuple> {
        self.inputs.iter().map(spec_tuple).collect()
    }

    /// The outputs, as `inputs()` gives them.
    fn outputs(&self) -> Vec<SpecTuple> {
        self.outputs.iter().map(spec_tuple).collect()
    }

    /// The configuration read from the model's files, as a dict (or `None`).
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let model = self.model.clone();
        let c = py.detach(move || lock(&model).config());
        to_py(py, &c)
    }

    /// Runs the model: `feeds` maps every input name to a numpy array; returns the outputs
    /// named (all, in order, for `None`) as new numpy arrays (int64 outputs as int64).
    #[pyo3(signature = (output_names, feeds))]
    fn run<'py>(&self, py: Python<'py>, output_names: Option<Vec<String>>, feeds: &Bound<'py, PyDict>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let wanted: Vec<usize> = match &output_names {
            None => (0..self.outputs.len()).collect(),
            Some(names) => names
                .iter()
                .map(|n| {
                    self.outputs.iter().position(|o| &o.name == n).ok_or_else(|| {
                        let all: Vec<&str> = self.outputs.iter().map(|o| o.name.as_str()).collect();
                        PyErr::from(err(Kind::UnknownName, format!("{}: unknown output '{n}' (the model's outputs are: {})", self.path, all.join(", "))))
                    })
                })
                .collect::<PyResult<_>>()?,
        };
        let inputs = self.feeds(feeds)?;
        let model = self.model.clone();
        let mut outs = py.detach(move || guard(|| lock(&model).run(&inputs).map_err(errors::model)))?;
        let mut result = Vec::new();
        for i in wanted {
            let o = &self.outputs[i];
            let k = outs.iter().position(|(n, _)| n == &o.name).ok_or_else(|| PyErr::from(err(Kind::Execution, format!("the engine did not produce output '{}'", o.name))))?;
            let (_, t) = outs.swap_remove(k);
            let a = tensor_to_numpy(py, t)?;
            result.push(if o.elem == ElemType::I64 { a.call_method1("astype", ("int64",))? } else { a });
        }
        Ok(result)
    }

    /// Compiles the plans `run` needs for these feeds (only their shapes matter, except for
    /// inputs the graph must know at compile time); returns `{graph_ms, compile_ms, plans}`.
    fn compile<'py>(&self, py: Python<'py>, feeds: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyAny>> {
        let inputs = self.feeds(feeds)?;
        let model = self.model.clone();
        let t = py.detach(move || guard(|| lock(&model).compile(&inputs).map_err(errors::model)))?;
        to_py(py, &serde_json::to_value(t).map_err(|e| err(Kind::Execution, e.to_string()))?)
    }

    /// Generates text after `prompt` (the `generate` capability; see `LanguageModel.generate`).
    #[pyo3(signature = (prompt, max_tokens=32, temperature=0.0, top_k=40, top_p=0.95, seed=0, min_p=0.05, repeat_penalty=1.0, stop=Vec::new()))]
    #[allow(clippy::too_many_arguments, clippy::result_large_err)]
    fn generate(&self, py: Python<'_>, prompt: String, max_tokens: usize, temperature: f32, top_k: usize, top_p: f32, seed: u64, min_p: f32, repeat_penalty: f32, stop: Vec<String>) -> PyResult<String> {
        if !self.capabilities.contains(&"generate") {
            return Err(self.unsupported("generate text"));
        }
        let params = SamplingParams { temperature, top_k, top_p, min_p, repeat_penalty, stop, seed, ..Default::default() };
        self.generating(py, move |g| g.generate_text(&prompt, max_tokens, &params))
    }

    /// The assistant's reply to `messages` (a list of `{"role", "content"}` dicts) through
    /// the model's chat template (the `generate` capability; see `LanguageModel.chat`).
    #[pyo3(signature = (messages, max_tokens=256, temperature=0.0, top_k=40, top_p=0.95, seed=0, min_p=0.05, repeat_penalty=1.0, stop=Vec::new()))]
    #[allow(clippy::too_many_arguments, clippy::result_large_err)]
    fn chat(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, max_tokens: usize, temperature: f32, top_k: usize, top_p: f32, seed: u64, min_p: f32, repeat_penalty: f32, stop: Vec<String>) -> PyResult<String> {
        if !self.capabilities.contains(&"generate") {
            return Err(self.unsupported("chat"));
        }
        let msgs = crate::models::messages(py, messages)?;
        let params = SamplingParams { temperature, top_k, top_p, min_p, repeat_penalty, stop, seed, ..Default::default() };
        self.generating(py, move |g| g.chat(&msgs, max_tokens, &params))
    }

    /// Embeds texts (the `embed` capability; see `EmbeddingGemma.embed`): float32
    /// `(len(texts), dim)`.
    #[pyo3(signature = (texts, prompt_name=None, dim=None))]
    fn embed<'py>(&self, py: Python<'py>, texts: Vec<String>, prompt_name: Option<String>, dim: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
        if !self.capabilities.contains(&"embed") {
            return Err(self.unsupported("embed texts"));
        }
        let model = self.model.clone();
        let e = py.detach(move || {
            guard(|| {
                let mut m = lock(&model);
                let e = m.as_embedder().ok_or_else(|| err(Kind::Request, "the model does not embed texts"))?;
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                e.embed(&refs, prompt_name.as_deref(), dim).map_err(errors::model)
            })
        })?;
        let a = Array2::from_shape_vec((e.len(), e.dim), e.data).map_err(|x| err(Kind::Execution, x.to_string()))?;
        Ok(a.into_pyarray(py).into_any())
    }

    /// The compiler's report for the most recently compiled plan, or `None`.
    fn explain<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let model = self.model.clone();
        let r = py.detach(move || lock(&model).last_report().map(|r| serde_json::to_value(&r.stages)));
        match r {
            Some(Ok(stages)) => Ok(Some(to_py(py, &serde_json::json!({ "stages": stages }))?)),
            Some(Err(e)) => Err(err(Kind::Execution, e.to_string()).into()),
            None => Ok(None),
        }
    }

    fn __repr__(&self) -> String {
        format!("Session(kind='{}', path='{}')", self.kind, self.path)
    }
}

/// Opens the model at `path` on `devices` (names, as for `compile`): as the kind `kind`
/// when given, else whichever kind the registry finds.
#[pyfunction]
#[pyo3(signature = (path, devices=vec!["cpu".to_string()], threads=0, kind=None))]
pub(crate) fn load_model(py: Python<'_>, path: std::path::PathBuf, devices: Vec<String>, threads: usize, kind: Option<String>) -> PyResult<ModelSession> {
    let devs = devices_named(&devices, threads)?;
    let p = path.clone();
    let mut m = py.detach(move || {
        guard(|| {
            let mut o = OpenOptions::on(devs);
            // The planner uses this machine's kernel profile (`tg profile`) when there is one.
            o.compile.cost = tg_compiler::CostSource::for_this_machine().0;
            o.compile.placement.first_use = tg_compiler::FirstUse::for_this_machine();
            let r = match &kind {
                Some(k) => tg_models::open_kind(k, &p, o),
                None => tg_models::open(&p, o),
            };
            r.map_err(|e| {
                let e = errors::model(e);
                // A load failure that is not about a missing file is about the model.
                if e.kind == Kind::Request {
                    err(Kind::Model, e.msg)
                } else {
                    e
                }
            })
        })
    })?;
    let capabilities = tg_models::capabilities(&mut *m);
    Ok(ModelSession { kind: m.kind(), path: path.display().to_string(), inputs: m.inputs(), outputs: m.outputs(), capabilities, model: Arc::new(Mutex::new(m)) })
}
