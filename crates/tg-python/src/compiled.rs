//! `compile` and `Compiled`: a graph compiled for the CPU device and bound to its
//! constants, run on dicts of numpy arrays.

use crate::convert::{dtype_name, tensor_to_numpy};
use crate::errors::{self, err, guard, Kind};
use crate::graph::{collect_inputs, GraphCore, InputSpec};
use crate::json::to_py;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use tg_compiler::{CompileOptions, CompileReport, Numerics};
use tg_ir::Graph;
use tg_runtime::{CpuDevice, Device, Executable, Plan};

/// CPU devices shared by every compiled graph with the same thread count (each owns a
/// thread pool; one per compiled graph would be wasteful).
pub(crate) fn cpu_device(threads: usize) -> PyResult<Arc<dyn Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<dyn Device>>>> = OnceLock::new();
    let mut map = DEVICES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = map.get(&threads) {
        return Ok(d.clone());
    }
    let d: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).map_err(|e| err(Kind::Execution, e))?);
    map.insert(threads, d.clone());
    Ok(d)
}

/// Placement options from `place` strings (`OP_PATTERN=DEVICE`); a device without measured
/// kernel times is measured on first use (roofline and links, cached) unless
/// `TG_FIRST_USE=off`.
pub(crate) fn place_options(place: &[String]) -> PyResult<tg_compiler::PlaceOptions> {
    let mut o = tg_compiler::PlaceOptions { first_use: tg_compiler::FirstUse::for_this_machine(), ..Default::default() };
    for p in place {
        o.pins.push(p.parse().map_err(errors::compile)?);
    }
    Ok(o)
}

/// Devices opened so far, by (name, threads).
type Opened = HashMap<(String, usize), Arc<dyn Device>>;

/// The devices named in `names` (`cpu`, `opencl`, `opencl:N`, `cuda`, `cuda:N`), each opened once per process
/// and thread count and shared (an OpenCL device builds its kernel program when opened).
/// An unknown or absent device is an `OptionsError` listing the devices present.
pub(crate) fn devices_named(names: &[String], threads: usize) -> PyResult<Vec<Arc<dyn Device>>> {
    static OPEN: OnceLock<Mutex<Opened>> = OnceLock::new();
    if names.is_empty() {
        return Err(err(Kind::Options, format!("devices is empty (present: {})", tg_devices::present())).into());
    }
    let mut out = Vec::new();
    for n in names {
        if n == "cpu" {
            out.push(cpu_device(threads)?);
            continue;
        }
        let mut map = OPEN.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let key = (n.clone(), threads);
        let d = match map.get(&key) {
            Some(d) => d.clone(),
            None => {
                let d = tg_devices::open(n, threads).map_err(|e| err(Kind::Options, e.to_string()))?;
                map.insert(key, d.clone());
                d
            }
        };
        out.push(d);
    }
    Ok(out)
}

/// The number of worker threads `threads=0` means (all cores).
#[pyfunction]
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

pub(crate) fn parse_numerics(s: &str) -> PyResult<Numerics> {
    match s {
        "exact" => Ok(Numerics::Exact),
        "q8" => Ok(Numerics::Q8Activations),
        _ => Err(err(Kind::Options, format!("unknown numerics '{s}' (use 'exact' or 'q8')")).into()),
    }
}

/// Compiles the graph of `core` for the CPU with `threads` workers (0 = all cores),
/// skipping the stages named in `disable`, and binds it to the graph's constants.
#[pyfunction]
#[pyo3(signature = (core, disable=Vec::new(), numerics="exact", alignment=64, threads=0, devices=vec!["cpu".to_string()], place=Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn compile(
    py: Python<'_>,
    core: &GraphCore,
    disable: Vec<String>,
    numerics: &str,
    alignment: usize,
    threads: usize,
    devices: Vec<String>,
    place: Vec<String>,
) -> PyResult<Compiled> {
    let names: Vec<&str> = disable.iter().map(String::as_str).collect();
    let mut opts = CompileOptions::disabling(&names).map_err(errors::compile)?;
    opts.placement = place_options(&place)?;
    opts.numerics = parse_numerics(numerics)?;
    // This machine's kernel profile (`tg profile`) when there is one; kernels it did not
    // measure are estimated by its fitted fallbacks.
    opts.cost = tg_compiler::CostSource::for_this_machine().0;
    if alignment == 0 || !alignment.is_power_of_two() {
        return Err(err(Kind::Options, format!("alignment must be a power of two, got {alignment}")).into());
    }
    opts.alignment = alignment;
    let (graph, weights, specs) = {
        let s = core.lock();
        (s.graph.clone(), s.weights.clone(), s.inputs())
    };
    if graph.outputs.is_empty() {
        return Err(err(Kind::Graph, "the graph has no outputs (mark some with Graph.output)").into());
    }
    let devs = devices_named(&devices, threads)?;
    let (compiled, exe) = py.detach(|| {
        guard(|| {
            let c = tg_compiler::compile(&graph, &devs, &opts).map_err(errors::compile)?;
            let exe = Executable::new(c.plan.clone(), devs.clone(), Arc::new(weights)).map_err(errors::runtime)?;
            Ok((c, exe))
        })
    })?;
    let input_keys = specs.iter().map(|(n, _, _)| PyString::intern(py, n).unbind()).collect();
    let outputs = compiled.plan.outputs.iter().map(|(n, _)| (n.clone(), PyString::intern(py, n).unbind())).collect();
    Ok(Compiled {
        exe: Mutex::new(exe),
        specs,
        input_keys,
        outputs,
        report: compiled.report,
        summary: Summary::new(&graph, &compiled.plan),
        disabled: disable,
        numerics: numerics.to_string(),
        threads: if threads == 0 { default_threads() } else { threads },
    })
}

/// What `explain()` reports besides the stages.
struct Summary {
    nodes: usize,
    ops: Vec<(String, usize)>,
    steps: usize,
    buffers: usize,
    arena_bytes: usize,
    kernels: BTreeMap<String, usize>,
    step_lines: Vec<String>,
    devices: Vec<String>,
}

impl Summary {
    fn new(g: &Graph, p: &Plan) -> Summary {
        let mut kernels = BTreeMap::new();
        for s in &p.steps {
            *kernels.entry(s.kernel.name()).or_insert(0) += 1;
        }
        let step_lines = p
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let ins: Vec<String> = s.inputs.iter().map(|t| format!("b{}{:?}", t.buffer, t.layout.shape)).collect();
                let dev = p.devices.get(s.device).map_or("?", |d| d.as_str());
                format!("{i:5} {dev:<9} {:<14} node {:5} ({}) -> b{}{:?}", s.kernel.name(), s.node, ins.join(", "), s.output.buffer, s.output.layout.shape)
            })
            .collect();
        Summary {
            nodes: g.nodes.len(),
            ops: g.op_histogram(),
            steps: p.steps.len(),
            buffers: p.buffers.len(),
            arena_bytes: p.arenas.iter().map(|a| a.bytes).sum(),
            kernels,
            step_lines,
            devices: p.devices.clone(),
        }
    }
}

/// A compiled graph, ready to run. Create it with `tensor_graphs.compile(graph)`.
///
/// `run()` may be called from several Python threads; runs of one compiled graph are
/// serialized (they share its memory arena), runs of different compiled graphs proceed in
/// parallel, and the GIL is released while the engine works.
#[pyclass(module = "tensor_graphs", name = "Compiled", frozen)]
pub struct Compiled {
    exe: Mutex<Executable>,
    specs: Vec<InputSpec>,
    input_keys: Vec<Py<PyString>>,
    outputs: Vec<(String, Py<PyString>)>,
    report: CompileReport,
    summary: Summary,
    disabled: Vec<String>,
    numerics: String,
    threads: usize,
}

impl Compiled {
    /// The plan report page (`tg_report`).
    fn html(&self) -> PyResult<String> {
        let exe = self.exe.lock().unwrap_or_else(|e| e.into_inner());
        let plan = exe.plan();
        let measured = exe.step_times().filter(|t| t.len() == plan.steps.len() && plan.devices.len() == 1).map(|t| tg_report::Measured::Durations(t.to_vec()));
        let input = tg_report::ReportInput {
            title: format!("compiled graph: {} steps on {}", plan.steps.len(), plan.devices.join(" + ")),
            command: "tensor_graphs.compile(...).explain(format=\"html\")".into(),
            plan,
            report: &self.report,
            threads: exe.devices().iter().map(|d| d.threads()).collect(),
            measured,
            derivation: None,
        };
        tg_report::render(&input).map_err(|e| err(Kind::Execution, e.to_string()).into())
    }
}

#[pymethods]
impl Compiled {
    /// Runs the compiled graph.
    ///
    /// `inputs` maps every input name of the graph to a numpy array of exactly its dtype
    /// and shape (inputs may also be given as keyword arguments). Lists and Python scalars
    /// are converted with `numpy.asarray(value, dtype)`; an *array* of another dtype is a
    /// `DTypeError` (no silent float64 → float32 rounding). Returns a dict from output name
    /// to a new numpy array that the caller owns (never a view of engine memory).
    #[pyo3(signature = (inputs=None, /, **kwargs))]
    fn run<'py>(&self, py: Python<'py>, inputs: Option<&Bound<'py, PyDict>>, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyDict>> {
        let host = if self.specs.is_empty() && inputs.is_none_or(|d| d.is_empty()) && kwargs.is_none_or(|d| d.is_empty()) {
            HashMap::new()
        } else {
            collect_inputs(py, &self.specs, inputs, kwargs)?
        };
        let mut outs = py.detach(|| {
            guard(|| {
                let mut exe = self.exe.lock().unwrap_or_else(|e| e.into_inner());
                exe.run(&host).map_err(errors::runtime)
            })
        })?;
        let d = PyDict::new(py);
        for (name, key) in &self.outputs {
            let t = outs.remove(name).ok_or_else(|| err(Kind::Execution, format!("the engine did not produce output '{name}'")))?;
            d.set_item(key.bind(py), tensor_to_numpy(py, t)?)?;
        }
        Ok(d)
    }

    /// What the compiler did.
    ///
    /// `format="dict"` (default): a dict with `stages` (one entry per stage: `name`, `ran`,
    /// `micros`, `summary`), `graph` (`nodes`, `ops`) and `plan` (`steps`, `buffers`,
    /// `arena_bytes`, `kernels`, and with `steps=True` every step). `format="text"`: the
    /// same as a printable report. `format="html"`: the plan report (schedule per device,
    /// memory map per arena, how the plan was made) as one self-contained HTML page, with
    /// the last run's measured step times if it was profiled.
    #[pyo3(signature = (format="dict", steps=false))]
    fn explain<'py>(&self, py: Python<'py>, format: &str, steps: bool) -> PyResult<Bound<'py, PyAny>> {
        let s = &self.summary;
        match format {
            "dict" => {
                let mut v = serde_json::json!({
                    "stages": serde_json::to_value(&self.report.stages).map_err(|e| err(Kind::Execution, e.to_string()))?,
                    "graph": { "nodes": s.nodes, "ops": s.ops.iter().cloned().collect::<BTreeMap<String, usize>>() },
                    "plan": { "steps": s.steps, "buffers": s.buffers, "arena_bytes": s.arena_bytes, "kernels": s.kernels, "devices": s.devices },
                    "options": { "disabled": self.disabled, "numerics": self.numerics, "threads": self.threads },
                });
                if steps {
                    v["plan"]["step_list"] = serde_json::json!(s.step_lines);
                }
                to_py(py, &v)
            }
            "text" => {
                let mut t = format!("graph: {} nodes; ops: {}\n", s.nodes, s.ops.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(" "));
                t.push_str(&self.report.to_string());
                t.push_str(&format!(
                    "plan:  {} steps, {} buffers, arena {} bytes; kernels: {}\n",
                    s.steps,
                    s.buffers,
                    s.arena_bytes,
                    s.kernels.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(" ")
                ));
                if steps {
                    for l in &s.step_lines {
                        t.push_str(l);
                        t.push('\n');
                    }
                }
                Ok(PyString::new(py, &t).into_any())
            }
            "html" => Ok(PyString::new(py, &self.html()?).into_any()),
            _ => Err(err(Kind::Options, format!("explain(format={format:?}): use 'dict', 'text' or 'html'")).into()),
        }
    }

    /// The plan report as HTML for Jupyter: the page of `explain(format="html")` in an
    /// isolated frame.
    fn _repr_html_(&self) -> PyResult<String> {
        let page = self.html()?;
        let escaped = page.replace('&', "&amp;").replace('"', "&quot;");
        Ok(format!("<iframe srcdoc=\"{escaped}\" style=\"width: 100%; height: 720px; border: 1px solid #ccc\"></iframe>"))
    }

    /// Declared inputs: `{name: (shape, dtype)}` in declaration order.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for ((_, shape, dtype), key) in self.specs.iter().zip(&self.input_keys) {
            d.set_item(key.bind(py), (pyo3::types::PyTuple::new(py, shape)?, dtype_name(*dtype)))?;
        }
        Ok(d)
    }

    /// Output names in declaration order.
    #[getter]
    fn output_names(&self) -> Vec<String> {
        self.outputs.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Bytes of the memory arena the plan runs in.
    #[getter]
    fn arena_bytes(&self) -> usize {
        self.summary.arena_bytes
    }

    /// Worker threads of the CPU device.
    #[getter]
    fn threads(&self) -> usize {
        self.threads
    }

    fn __repr__(&self) -> String {
        format!(
            "Compiled(inputs=[{}], outputs=[{}], steps={}, arena_bytes={})",
            name_list(&self.specs),
            self.outputs.iter().map(|(n, _)| format!("'{n}'")).collect::<Vec<_>>().join(", "),
            self.summary.steps,
            self.summary.arena_bytes
        )
    }
}

fn name_list(specs: &[InputSpec]) -> String {
    specs.iter().map(|(n, _, _)| format!("'{n}'")).collect::<Vec<_>>().join(", ")
}
