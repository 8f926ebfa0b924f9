//! Any ONNX file as a [`Model`]: the graph's inputs and outputs as declared in the file,
//! imported ([`tg_onnx::import`]) and compiled once per input signature, plans cached like
//! the other models' (in memory and in the plan store).
//!
//! A signature is every input's shape, plus the values of the inputs the graph needs to
//! know at import (a `Reshape` target, `Slice` bounds given as graph inputs): when the
//! import of a shape says a value is "computed at run time", the small integer inputs and
//! the scalars are bound as constants and that shape's plans are keyed by their values too.

use crate::plans::PlanCache;
use crate::{check_inputs, CompileTimes, Detect, Dim, ElemType, Model, ModelError, ModelKind, OpenOptions, TensorSpec};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tg_compiler::{CompileOptions, CompileReport};
use tg_ir::{HostData, HostTensor};
use tg_onnx::{OnnxError, OnnxModel, Value, ValueData};
use tg_runtime::Device;

/// The registry entry ([`crate::KINDS`]): a file named `*.onnx`.
pub const KIND: ModelKind = ModelKind { name: "onnx", what: "an ONNX model file (*.onnx)", detect, open: open_model, decoder: None };

fn detect(path: &Path) -> Detect {
    let onnx = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
    if onnx && !path.is_dir() {
        Detect::Yes
    } else {
        Detect::No
    }
}

fn open_model(path: &Path, o: OpenOptions) -> Result<Box<dyn Model>, ModelError> {
    let mut m = Onnx::open(path, o.devices)?;
    m.set_compile_options(o.compile);
    Ok(Box::new(m))
}

/// A loaded ONNX model.
pub struct Onnx {
    model: OnnxModel,
    path: PathBuf,
    /// The graph inputs (not initializers), with their ONNX type codes.
    inputs: Vec<(TensorSpec, i32)>,
    outputs: Vec<TensorSpec>,
    /// Per input-shape key: the inputs bound as values at import.
    bound: HashMap<String, Vec<String>>,
    plans: PlanCache<String>,
}

/// The declared dimensions of a graph input or output (`None`: no shape declared); an
/// unnamed dynamic dimension gets a name of its own (`input.axis`).
fn declared(v: &tg_onnx::proto::ValueInfoProto, name: &str) -> Option<Vec<Dim>> {
    use tg_onnx::proto::{tensor_shape_proto::dimension::Value as D, type_proto::Value as T};
    let Some(T::TensorType(t)) = v.r#type.as_ref()?.value.as_ref() else { return None };
    let dims = &t.shape.as_ref()?.dim;
    if dims.is_empty() {
        return None;
    }
    Some(
        dims.iter()
            .enumerate()
            .map(|(i, d)| match &d.value {
                Some(D::DimValue(x)) if *x >= 0 => Dim::Fixed(*x as usize),
                Some(D::DimParam(p)) if !p.is_empty() => Dim::free(p, None),
                _ => Dim::free(&format!("{name}.{i}"), None),
            })
            .collect(),
    )
}

fn spec(v: &tg_onnx::proto::ValueInfoProto, path: &Path, what: &str) -> Result<(TensorSpec, i32), ModelError> {
    let name = v.name.clone().unwrap_or_default();
    let bad = |detail: String| ModelError::Architecture { file: path.display().to_string(), detail };
    let (_, ty) = tg_onnx::tensor_type(v).ok_or_else(|| bad(format!("{what} '{name}' is not a tensor (sequences, maps and optionals are not supported)")))?;
    let elem = ElemType::from_onnx(ty).ok_or_else(|| bad(format!("{what} '{name}': ONNX element type {ty} is not supported (float, int32, int64, bool are)")))?;
    Ok((TensorSpec { dims: declared(v, &name), name, elem }, ty))
}

/// An input as the importer binds it.
fn value(t: &HostTensor, onnx_type: i32) -> Value {
    let data = match &t.data {
        HostData::F32(v) => ValueData::F32(v.clone()),
        HostData::I32(v) => ValueData::I64(v.iter().map(|&x| x as i64).collect()),
        HostData::Bool(v) => ValueData::Bool(v.iter().map(|&b| b != 0).collect()),
    };
    Value { shape: t.shape.clone(), data, onnx_type }
}

impl Onnx {
    /// Reads `path` (memory-mapped) and its declared inputs and outputs; plans are compiled
    /// for `devices` (home first) on first use of each input signature.
    pub fn open(path: impl AsRef<Path>, devices: Vec<Arc<dyn Device>>) -> Result<Onnx, ModelError> {
        if devices.is_empty() {
            return Err(ModelError::Request("no devices to run on".into()));
        }
        Self::from_model(OnnxModel::open(path.as_ref())?, devices)
    }

    /// A decoded (possibly edited) model, as [`Onnx::open`] makes one of a file.
    pub fn from_model(model: OnnxModel, devices: Vec<Arc<dyn Device>>) -> Result<Onnx, ModelError> {
        if devices.is_empty() {
            return Err(ModelError::Request("no devices to run on".into()));
        }
        let path = model.path.clone();
        let inputs = model.inputs().into_iter().map(|v| spec(v, &path, "input")).collect::<Result<_, _>>()?;
        let outputs = model.graph().output.iter().map(|v| spec(v, &path, "output").map(|s| s.0)).collect::<Result<_, _>>()?;
        Ok(Onnx { model, path, inputs, outputs, bound: HashMap::new(), plans: PlanCache::new(devices) })
    }

    /// The decoded file.
    pub fn model(&self) -> &OnnxModel {
        &self.model
    }

    /// Where compiled plans are kept across processes (`None`: compile every plan here).
    pub fn set_plan_store(&mut self, store: Option<tg_compiler::PlanStore>) {
        self.plans.set_store(store);
    }

    /// Number of cached plans.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }

    fn specs(&self) -> Vec<TensorSpec> {
        self.inputs.iter().map(|(s, _)| s.clone()).collect()
    }

    /// The plan key of these inputs and the inputs bound at import, compiling when the plan
    /// is not cached. Returns the import time (ms) of a compilation.
    fn plan_key(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<(String, Vec<String>, f64), ModelError> {
        check_inputs(&self.path, &self.specs(), inputs)?;
        let shape_key = self.shape_key(inputs);
        let bound_key = |bound: &[String]| -> String { bound.iter().map(|b| format!("{b}={:?};", inputs[b].data)).collect() };
        if let Some(bound) = self.bound.get(&shape_key) {
            let key = format!("{shape_key}{}", bound_key(bound));
            if self.plans.contains(&key) {
                return Ok((key, bound.clone(), 0.0));
            }
        }
        let t = Instant::now();
        let (imported, bound) = self.import_for(inputs, &shape_key)?;
        let import_ms = t.elapsed().as_secs_f64() * 1e3;
        let key = format!("{shape_key}{}", bound_key(&bound));
        self.bound.insert(shape_key, bound.clone());
        let graph = imported.graph;
        self.plans.get_or_compile(key.clone(), Arc::new(imported.weights), || Ok(graph))?;
        Ok((key, bound, import_ms))
    }

    /// Bytes of working memory (arenas) of the plan for these inputs, compiling it when it
    /// is not cached.
    pub fn plan_bytes(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<usize, ModelError> {
        let (key, _, _) = self.plan_key(inputs)?;
        self.plans.get_mut(&key).map(|e| e.arena_bytes()).ok_or_else(|| ModelError::Request("internal: the plan just compiled is not cached".into()))
    }

    /// The key of these inputs' shapes (the cache of which inputs are bound).
    fn shape_key(&self, inputs: &HashMap<String, HostTensor>) -> String {
        self.inputs.iter().map(|(s, _)| format!("{}{:?};", s.name, inputs[&s.name].shape)).collect()
    }

    /// Imports the graph for these (checked) inputs: their shapes bound, and the values of
    /// the inputs the graph needs at compile time (found by a first import that fails on
    /// them, then remembered per shape key). Returns the import and the bound inputs.
    fn import_for(&self, inputs: &HashMap<String, HostTensor>, shape_key: &str) -> Result<(tg_onnx::Imported, Vec<String>), ModelError> {
        let shapes: HashMap<String, Vec<usize>> = inputs.iter().map(|(k, v)| (k.clone(), v.shape.clone())).collect();
        let values: HashMap<String, Value> = self.inputs.iter().map(|(s, ty)| (s.name.clone(), value(&inputs[&s.name], *ty))).collect();
        let small = |bound: &[String]| -> (HashMap<String, Vec<usize>>, HashMap<String, Value>) {
            let vals: HashMap<String, Value> = values.iter().filter(|(k, _)| bound.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
            (shapes.iter().filter(|(k, _)| !bound.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect(), vals)
        };
        Ok(match self.bound.get(shape_key) {
            Some(bound) => {
                let (s, v) = small(bound);
                (tg_onnx::import_with(&self.model, &s, &v)?, bound.clone())
            }
            None => match tg_onnx::import(&self.model, &shapes) {
                Err(OnnxError::Unsupported { detail, .. }) if detail.contains("run time") => {
                    let mut bound: Vec<String> =
                        values.iter().filter(|(_, v)| v.shape.is_empty() || (matches!(v.data, ValueData::I64(_)) && v.data.len() <= 64)).map(|(k, _)| k.clone()).collect();
                    bound.sort();
                    let (s, v) = small(&bound);
                    (tg_onnx::import_with(&self.model, &s, &v)?, bound)
                }
                r => (r?, Vec::new()),
            },
        })
    }
}

/// An ONNX file as a [`Model`]: its graph inputs and outputs as declared (an `int64` input
/// is fed as int64 by the front ends and computed in i32).
impl Model for Onnx {
    fn kind(&self) -> &'static str {
        KIND.name
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn inputs(&self) -> Vec<TensorSpec> {
        self.specs()
    }

    fn outputs(&self) -> Vec<TensorSpec> {
        self.outputs.clone()
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.plans.devices().to_vec()
    }

    fn set_compile_options(&mut self, options: CompileOptions) {
        self.plans.set_options(options);
    }

    fn compile(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<CompileTimes, ModelError> {
        let before = self.plans.stats();
        let (_, _, import_ms) = self.plan_key(inputs)?;
        let mut times = self.plans.stats().since(before);
        times.graph_ms += import_ms;
        Ok(times)
    }

    fn graphs(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<tg_ir::Graph>, ModelError> {
        check_inputs(&self.path, &self.specs(), inputs)?;
        let shape_key = self.shape_key(inputs);
        let (imported, bound) = self.import_for(inputs, &shape_key)?;
        self.bound.insert(shape_key, bound);
        Ok(vec![imported.graph])
    }

    fn run(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, ModelError> {
        let (key, bound, _) = self.plan_key(inputs)?;
        let exe = self.plans.get_mut(&key).ok_or_else(|| ModelError::Request("internal: the plan just compiled is not cached".into()))?;
        let mut outs = if bound.is_empty() {
            exe.run(inputs)?
        } else {
            let feed: HashMap<String, HostTensor> = inputs.iter().filter(|(k, _)| !bound.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
            exe.run(&feed)?
        };
        self.outputs
            .iter()
            .map(|o| {
                outs.remove(&o.name).map(|t| (o.name.clone(), t)).ok_or_else(|| ModelError::Request(format!("{}: the plan produced no output '{}'", self.path.display(), o.name)))
            })
            .collect()
    }

    fn last_report(&self) -> Option<&CompileReport> {
        self.plans.last_report()
    }

    fn config(&self) -> serde_json::Value {
        let p = self.model.proto();
        serde_json::json!({
            "opset": self.model.opset,
            "producer": p.producer_name.clone().unwrap_or_default(),
            "nodes": self.model.graph().node.len(),
            "initializers": self.model.graph().initializer.len(),
        })
    }
}
