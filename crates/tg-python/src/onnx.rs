//! `tensor_graphs.onnx`: an ONNX model as a session that runs numpy arrays, in
//! onnxruntime's shape (`run(output_names, {name: array}) -> [array]`). One plan per input
//! signature (shapes, and the values of inputs the graph needs known), compiled on first use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tg_ir::{HostData, HostTensor};
use tg_onnx::{OnnxError, OnnxModel, Value, ValueData};
use tg_runtime::{Device, Executable};

use crate::compiled::devices_named;
use crate::convert::tensor_to_numpy;
use crate::errors::{self, err, guard, Kind};

/// A compiled signature.
struct Plan {
    exe: Executable,
    /// Inputs bound as values at import (not fed at run time).
    bound: Vec<String>,
}

/// An ONNX model ready to run. Create it with `tensor_graphs.onnx.load(path)`.
#[pyclass(module = "tensor_graphs._native", name = "OnnxSession", frozen)]
pub struct OnnxSession {
    model: OnnxModel,
    devices: Vec<Arc<dyn Device>>,
    /// Graph inputs (not initializers): name, declared dims (`None` = dynamic), ONNX type.
    inputs: Vec<(String, Vec<Option<usize>>, i32)>,
    outputs: Vec<(String, i32)>,
    plans: Mutex<HashMap<String, Plan>>,
}

fn onnx_err(e: OnnxError) -> PyErr {
    let kind = match e {
        OnnxError::Io { .. } => Kind::ModelNotFound,
        OnnxError::Unsupported { .. } | OnnxError::UnsupportedType(_) => Kind::Compile,
        _ => Kind::Model,
    };
    err(kind, e.to_string()).into()
}

fn type_name(t: i32) -> &'static str {
    match t {
        1 => "tensor(float)",
        6 => "tensor(int32)",
        7 => "tensor(int64)",
        9 => "tensor(bool)",
        _ => "tensor(unsupported)",
    }
}

/// A numpy array as a value of ONNX type `ty` (int64 kept as i64 for binding at import).
fn array_value(obj: &Bound<'_, PyAny>, name: &str, ty: i32) -> PyResult<Value> {
    let arr = obj.cast::<PyUntypedArray>().map_err(|_| err(Kind::DType, format!("input '{name}': expected a numpy array")))?;
    let shape = arr.shape().to_vec();
    let got = obj.getattr("dtype").and_then(|d| d.str()).map(|s| s.to_string()).unwrap_or_default();
    let mismatch = || -> PyErr { err(Kind::DType, format!("input '{name}': the model takes {}, got a {got} array", type_name(ty))).into() };
    fn copy<T: numpy::Element + Copy>(a: &Bound<'_, PyArrayDyn<T>>) -> Vec<T> {
        let ro = a.readonly();
        ro.as_array().iter().copied().collect()
    }
    let data = match ty {
        1 => ValueData::F32(copy(obj.cast::<PyArrayDyn<f32>>().map_err(|_| mismatch())?)),
        7 => ValueData::I64(copy(obj.cast::<PyArrayDyn<i64>>().map_err(|_| mismatch())?)),
        6 => ValueData::I64(copy(obj.cast::<PyArrayDyn<i32>>().map_err(|_| mismatch())?).into_iter().map(i64::from).collect()),
        9 => ValueData::Bool(copy(obj.cast::<PyArrayDyn<bool>>().map_err(|_| mismatch())?)),
        _ => return Err(mismatch()),
    };
    Ok(Value { shape, data, onnx_type: ty })
}

fn host(v: &Value, name: &str) -> PyResult<HostTensor> {
    let data = match &v.data {
        ValueData::F32(x) => HostData::F32(x.clone()),
        ValueData::I64(x) => HostData::I32(
            x.iter()
                .map(|&i| i32::try_from(i).map_err(|_| PyErr::from(err(Kind::DType, format!("input '{name}': value {i} does not fit the engine's int32")))))
                .collect::<PyResult<_>>()?,
        ),
        ValueData::Bool(x) => HostData::Bool(x.iter().map(|&b| b as u8).collect()),
    };
    HostTensor::new(&v.shape, data).map_err(|e| errors::ir(e).into())
}

impl OnnxSession {
    /// Imports and compiles for these values (binding the small integer inputs and scalars
    /// as values when the graph needs them known).
    fn compile(&self, values: &HashMap<String, Value>) -> PyResult<Plan> {
        let shapes: HashMap<String, Vec<usize>> = values.iter().map(|(k, v)| (k.clone(), v.shape.clone())).collect();
        let mut bound = Vec::new();
        let imported = match tg_onnx::import(&self.model, &shapes) {
            Err(OnnxError::Unsupported { detail, .. }) if detail.contains("run time") => {
                let small: HashMap<String, Value> =
                    values.iter().filter(|(_, v)| v.shape.is_empty() || (matches!(v.data, ValueData::I64(_)) && v.data.len() <= 64)).map(|(k, v)| (k.clone(), v.clone())).collect();
                let rest: HashMap<String, Vec<usize>> = shapes.into_iter().filter(|(k, _)| !small.contains_key(k)).collect();
                bound = small.keys().cloned().collect();
                tg_onnx::import_with(&self.model, &rest, &small).map_err(onnx_err)?
            }
            r => r.map_err(onnx_err)?,
        };
        let opts = tg_compiler::CompileOptions { cost: tg_compiler::CostSource::for_this_machine().0, ..Default::default() };
        let compiled = guard(|| tg_compiler::compile(&imported.graph, &self.devices, &opts).map_err(errors::compile))?;
        let exe = Executable::new(compiled.plan, self.devices.clone(), Arc::new(imported.weights)).map_err(errors::runtime)?;
        Ok(Plan { exe, bound })
    }
}

#[pymethods]
impl OnnxSession {
    /// Input names, declared dims (`None` for a dynamic one) and types, in the model's order.
    fn inputs(&self) -> Vec<(String, Vec<Option<usize>>, String)> {
        self.inputs.iter().map(|(n, d, t)| (n.clone(), d.clone(), type_name(*t).to_string())).collect()
    }

    /// Output names and types, in the model's order.
    fn outputs(&self) -> Vec<(String, String)> {
        self.outputs.iter().map(|(n, t)| (n.clone(), type_name(*t).to_string())).collect()
    }

    /// Runs the model: `feeds` maps every input name to a numpy array of its type (float32,
    /// int64, int32 or bool); returns the outputs named (all, in order, for `None`) as new
    /// numpy arrays (int64 outputs as int64).
    #[pyo3(signature = (output_names, feeds))]
    fn run<'py>(&self, py: Python<'py>, output_names: Option<Vec<String>>, feeds: &Bound<'py, PyDict>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut values = HashMap::new();
        for (name, _, ty) in &self.inputs {
            let v = feeds.get_item(name)?.ok_or_else(|| {
                let names: Vec<&str> = self.inputs.iter().map(|i| i.0.as_str()).collect();
                PyErr::from(err(Kind::MissingInput, format!("missing input '{name}' (the model's inputs are: {})", names.join(", "))))
            })?;
            values.insert(name.clone(), array_value(&v, name, *ty)?);
        }
        if feeds.len() != values.len() {
            for k in feeds.keys() {
                let k = k.str()?.to_string();
                if !values.contains_key(&k) {
                    return Err(err(Kind::UnknownName, format!("unknown input '{k}'")).into());
                }
            }
        }
        let wanted: Vec<usize> = match &output_names {
            None => (0..self.outputs.len()).collect(),
            Some(names) => names
                .iter()
                .map(|n| self.outputs.iter().position(|o| &o.0 == n).ok_or_else(|| PyErr::from(err(Kind::UnknownName, format!("unknown output '{n}'")))))
                .collect::<PyResult<_>>()?,
        };
        // The signature: every input's shape, and the values of those bound at import.
        let shape_key: String = self.inputs.iter().map(|(n, ..)| format!("{n}{:?};", values[n].shape)).collect();
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let key = {
            let bound_key = |p: &Plan| -> String { p.bound.iter().map(|b| format!("{b}={:?};", values[b].data)).collect() };
            plans.keys().find(|k| k.starts_with(&shape_key) && plans.get(*k).is_some_and(|p| k[shape_key.len()..] == bound_key(p))).cloned()
        };
        let key = match key {
            Some(k) => k,
            None => {
                let plan = self.compile(&values)?;
                let k = format!("{shape_key}{}", plan.bound.iter().map(|b| format!("{b}={:?};", values[b].data)).collect::<String>());
                plans.insert(k.clone(), plan);
                k
            }
        };
        let plan = plans.get_mut(&key).ok_or_else(|| PyErr::from(err(Kind::Execution, "internal: plan not cached")))?;
        let mut feed = HashMap::new();
        for (name, v) in &values {
            if !plan.bound.contains(name) {
                feed.insert(name.clone(), host(v, name)?);
            }
        }
        let mut outs = py.detach(|| guard(|| plan.exe.run(&feed).map_err(errors::runtime)))?;
        let mut result = Vec::new();
        for i in wanted {
            let (name, ty) = &self.outputs[i];
            let t = outs.remove(name).ok_or_else(|| PyErr::from(err(Kind::Execution, format!("the engine did not produce output '{name}'"))))?;
            let a = tensor_to_numpy(py, t)?;
            result.push(if *ty == 7 { a.call_method1("astype", ("int64",))? } else { a });
        }
        Ok(result)
    }
}

/// Opens an ONNX model on `devices` (names, as for `compile`).
#[pyfunction]
#[pyo3(signature = (path, devices=vec!["cpu".to_string()], threads=0))]
pub(crate) fn onnx_load(path: &str, devices: Vec<String>, threads: usize) -> PyResult<OnnxSession> {
    let model = OnnxModel::open(path).map_err(onnx_err)?;
    let mut inputs = Vec::new();
    for v in model.inputs() {
        let name = v.name.clone().unwrap_or_default();
        let (dims, ty) = tg_onnx::tensor_type(v).ok_or_else(|| PyErr::from(err(Kind::Model, format!("{path}: input '{name}' is not a tensor"))))?;
        inputs.push((name, dims, ty));
    }
    let outputs = model.graph().output.iter().map(|v| (v.name.clone().unwrap_or_default(), tg_onnx::tensor_type(v).map_or(0, |t| t.1))).collect();
    let devices = devices_named(&devices, threads)?;
    Ok(OnnxSession { model, devices, inputs, outputs, plans: Mutex::new(HashMap::new()) })
}
