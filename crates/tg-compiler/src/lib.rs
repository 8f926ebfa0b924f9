//! The Tensor Graphs compiler.
//!
//! [`compile`] runs named stages over a graph and returns a [`tg_runtime::Plan`] plus a
//! report of what each stage did:
//!
//! | stage      | what it does                                                        | switch off |
//! |------------|---------------------------------------------------------------------|------------|
//! | `verify`   | IR invariants (always on, also between stages)                       | no         |
//! | `dce`      | drops nodes no output depends on                                    | yes        |
//! | `rewrite`  | e-graph rewriting ([`tg_egraph`]): views collapsed, scalars simplified, primitive patterns fused (RMSNorm, RoPE, GELU, softmax, attention); the cheapest equivalent graph is extracted | yes; single rule families or rules with `rewrite:<family or rule>` |
//! | `lower`    | one implementation per node: a kernel on a device, or a view        | no         |
//! | `views`    | reshape/permute/slice/expand as strided views instead of copies     | yes        |
//! | `schedule` | step order (topological, in node order)                             | no         |
//! | `memory`   | arena offsets: greedy first-fit over buffer lifetimes               | yes (then every buffer gets its own space) |
//! | `validate` | the independent [`validate`] checker on the finished plan           | yes        |
//!
//! The baseline picks one implementation per op. The `rewrite` stage picks among
//! equivalent graphs with a greedy DAG extractor over a kernel cost estimate; the
//! branch-and-bound planner of a later milestone replaces that extraction and
//! `lower`/`schedule`/`memory`, not the whole.
#![warn(missing_docs)]

pub mod cost;
pub mod incremental;
mod lower;
pub mod memory;
mod place;
mod rewrite;
pub mod store;
pub mod timeline;
pub mod validate;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;
use tg_ir::{Graph, IrError};
use tg_runtime::{Device, Plan};
use thiserror::Error;

pub use tg_egraph::{CostModel, KernelCost, RewriteOptions, RewriteReport};

pub use cost::{CostSource, MeasuredCost, RooflineCost};
pub use store::{compile_cached, CacheOutcome, PlanStore};
pub use validate::validate;

/// Errors from compilation.
#[derive(Debug, Error)]
pub enum CompileError {
    /// The graph failed verification.
    #[error("graph verification failed: {0}")]
    Ir(#[from] IrError),
    /// The incremental version of a graph cannot be derived (see [`incremental`]).
    #[error("incremental derivation: {0}")]
    Incremental(String),
    /// No device can run a node.
    #[error("node {node} ({op}): no implementation: {reason}")]
    Unsupported {
        /// Node id.
        node: usize,
        /// Op name.
        op: String,
        /// Why not.
        reason: String,
    },
    /// The finished plan failed validation (a compiler bug).
    #[error("plan validation failed: {0}")]
    Invalid(String),
    /// Options name an unknown stage or disable a required one.
    #[error("options: {0}")]
    Options(String),
}

/// Compiler options.
#[derive(Debug, Clone)]
pub struct CompileOptions {
    /// Names of stages to skip (see the crate docs for which may be skipped).
    pub disabled: BTreeSet<String>,
    /// Byte alignment of arena buffers.
    pub alignment: usize,
    /// Arithmetic of quantized matmuls: [`Numerics::Exact`] (f32 activations, the default)
    /// or [`Numerics::Q8Activations`] (activations rounded to 8-bit blocks).
    pub numerics: Numerics,
    /// Options of the `rewrite` stage: rule families switched off, saturation limits.
    pub rewrite: RewriteOptions,
    /// Kernel times the planner optimises: the built-in estimate (the default here) or a
    /// profile measured on this machine ([`CostSource::for_this_machine`], which the CLI and
    /// the model loaders use).
    pub cost: CostSource,
    /// With more than one device: ops pinned to a device, and the planner's budget.
    pub placement: PlaceOptions,
    /// Bytes the values kept between runs (states) may take on each device (`None`: no
    /// limit). Where the graph offers keeping a value or recomputing it
    /// ([`tg_ir::Op::Alternatives`], as [`incremental`] derives them), the `rewrite` stage's
    /// extraction chooses under it (see [`tg_egraph::StateBudget`]).
    pub cache_budget: Option<usize>,
}

/// How the planner places work when a graph is compiled for more than one device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlaceOptions {
    /// Ops pinned to a device, in order (the first matching pin wins).
    pub pins: Vec<PlacePin>,
    /// Wall-clock budget of the planner's search over devices.
    pub budget: std::time::Duration,
    /// Kept states (`Op::State`, by name) that must live on a given device (by name): the
    /// plans of one session share their states, so the first plan's choice binds the rest.
    /// A state not listed is placed by the planner with its update.
    pub states: std::collections::BTreeMap<String, String>,
    /// What a device other than home without measured kernel times is offered for: only
    /// pinned ops ([`FirstUse::Off`], the default), or everything, priced by its roofline
    /// measured on first use ([`FirstUse::Measure`]).
    pub first_use: FirstUse,
}

impl Default for PlaceOptions {
    fn default() -> Self {
        PlaceOptions { pins: Vec::new(), budget: std::time::Duration::from_millis(1000), states: Default::default(), first_use: FirstUse::Off }
    }
}

/// A device other than home that the cost source has no kernel times for (no profile, or
/// none measured on it under its current fingerprint), in a compile for several devices.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum FirstUse {
    /// Offer it only for ops pinned to it: the planner has no basis to move work there.
    /// The default, so that a plan never depends on measurements taken while compiling.
    #[default]
    Off,
    /// Measure its roofline (launch overhead, bandwidth, f32 throughput) and its links with
    /// home once ([`tg_profile::first_use`]: about 1–2 s, once per process, cached per
    /// device fingerprint in `dir`, default [`tg_profile::default_dir`]`/first-use`), say so
    /// on stderr, and offer it for every op, priced by [`cost::RooflineCost`] and the
    /// measured links, until `tg profile --device` has measured its kernels.
    Measure {
        /// Directory of the cache files (`None`: the default, which follows `TG_CACHE_DIR`).
        dir: Option<std::path::PathBuf>,
    },
}

impl FirstUse {
    /// What the front ends plan with (alongside [`CostSource::for_this_machine`]):
    /// [`FirstUse::Measure`] in the default directory, unless `TG_FIRST_USE=off` (or
    /// `TG_PROFILE=off`, which plans with the built-in estimate throughout).
    pub fn for_this_machine() -> FirstUse {
        let off = |v: &str| std::env::var(v).is_ok_and(|x| x.eq_ignore_ascii_case("off"));
        if off("TG_FIRST_USE") || off("TG_PROFILE") {
            FirstUse::Off
        } else {
            FirstUse::Measure { dir: None }
        }
    }

    /// Where the first-use measurement is cached and how it is taken; `None` when off.
    pub fn options(&self) -> Option<tg_profile::FirstUseOptions> {
        match self {
            FirstUse::Off => None,
            FirstUse::Measure { dir: None } => Some(tg_profile::FirstUseOptions::default()),
            FirstUse::Measure { dir: Some(d) } => Some(tg_profile::FirstUseOptions::in_dir(d.clone())),
        }
    }
}

/// `OP_PATTERN=DEVICE`: every op whose name matches the pattern (`*` matches any run of
/// characters; names as `tg plan` prints them: `matmul`, `attention`, `rms_norm`, ...) runs on
/// the device named (`opencl`, `opencl:0`, `cpu`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlacePin {
    /// Op-name pattern.
    pub pattern: String,
    /// Device name, or a device kind standing for the first device of that kind.
    pub device: String,
}

impl std::str::FromStr for PlacePin {
    type Err = CompileError;
    fn from_str(s: &str) -> Result<PlacePin, CompileError> {
        match s.split_once('=') {
            Some((p, d)) if !p.trim().is_empty() && !d.trim().is_empty() => Ok(PlacePin { pattern: p.trim().to_string(), device: d.trim().to_string() }),
            _ => Err(CompileError::Options(format!("--place '{s}': expected OP_PATTERN=DEVICE, e.g. 'attention*=opencl'"))),
        }
    }
}

/// How quantized matmuls treat their activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Numerics {
    /// f32 activations times exactly dequantized weights: agrees with the f64 reference.
    #[default]
    Exact,
    /// Activation rows quantized to Q8_0 / Q8_K (the block formats llama.cpp's CPU backend
    /// uses) and integer block dot products: about 2x faster matmuls, NMSE ~1e-5 per matmul
    /// against the exact product.
    Q8Activations,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            disabled: BTreeSet::new(),
            alignment: 64,
            numerics: Numerics::Exact,
            rewrite: RewriteOptions::default(),
            cost: CostSource::Estimate,
            placement: PlaceOptions::default(),
            cache_budget: None,
        }
    }
}

/// Names of all stages, in order.
pub const STAGES: [&str; 8] = ["verify", "dce", "rewrite", "lower", "views", "schedule", "memory", "validate"];
const OPTIONAL: [&str; 5] = ["dce", "rewrite", "views", "memory", "validate"];

impl CompileOptions {
    /// Options with the given stages disabled; errors for unknown or required stages.
    /// `rewrite:<family>` or `rewrite:<rule>` switches off one rule family (`layout`,
    /// `simplify`, `fusion`, `fusion.rmsnorm`, `fusion.rope`, `fusion.gelu`,
    /// `fusion.softmax`, `fusion.attention`) or one rule of the `rewrite` stage.
    pub fn disabling(names: &[&str]) -> Result<Self, CompileError> {
        let mut o = CompileOptions::default();
        for n in names {
            if let Some(rule) = n.strip_prefix(rewrite::PREFIX) {
                o.rewrite.disable(rule).map_err(|e| CompileError::Options(e.to_string()))?;
                continue;
            }
            if !STAGES.contains(n) {
                return Err(CompileError::Options(format!("unknown stage '{n}' (stages: {})", STAGES.join(", "))));
            }
            if !OPTIONAL.contains(n) {
                return Err(CompileError::Options(format!("stage '{n}' cannot be switched off")));
            }
            o.disabled.insert(n.to_string());
        }
        Ok(o)
    }

    fn on(&self, stage: &str) -> bool {
        !self.disabled.contains(stage)
    }
}

/// What one stage did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StageReport {
    /// Stage name.
    pub name: String,
    /// Whether it ran.
    pub ran: bool,
    /// Wall time in microseconds.
    pub micros: u64,
    /// One-line summary.
    pub summary: String,
}

/// The report of a compilation.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CompileReport {
    /// One entry per stage, in order.
    pub stages: Vec<StageReport>,
    /// The `rewrite` stage's report (saturation and extraction), when it ran.
    pub rewrite: Option<RewriteReport>,
    /// Where the planner's kernel times came from.
    pub cost_source: String,
    /// The plan's run time predicted step by step from the profile (with a profile only).
    pub prediction: Option<PlanPrediction>,
    /// Where the plan came from or went in the plan store ([`compile_cached`]).
    pub cache: Option<String>,
    /// With more than one device: where the planner put the work.
    pub placement: Option<PlacementReport>,
    /// The finished plan's simulated timeline (with a profile or more than one device).
    pub timeline: Option<timeline::Timeline>,
}

/// What the planner decided across devices.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlacementReport {
    /// Per device, in the plan's order: name, kernel steps, transfer steps into it.
    pub devices: Vec<(String, usize, usize)>,
    /// The planner's simulated makespan (ns) of the extracted graph.
    pub makespan_ns: u64,
    /// Its proven lower bound (ns).
    pub lower_bound_ns: u64,
    /// What the planner was told about each device and link (measured or not).
    pub notes: Vec<String>,
    /// Kept states per device (plan order): how many and their bytes.
    pub states: Vec<(usize, usize)>,
}

/// A plan's run time as the profile predicts it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlanPrediction {
    /// Sum over the steps (ns); with several devices, the work of all of them (the plan's
    /// run time is the timeline's makespan, [`CompileReport::timeline`]).
    pub total_ns: f64,
    /// Part resting on fallbacks (fitted or roofline estimates, not measurements).
    pub fallback_ns: f64,
    /// Steps predicted by a fallback.
    pub fallback_steps: usize,
    /// Per step, in plan order: predicted ns and whether it was measured.
    pub steps: Vec<(f64, bool)>,
}

impl std::fmt::Display for CompileReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for s in &self.stages {
            if s.ran {
                writeln!(f, "{:<9} {:>8.3} ms  {}", s.name, s.micros as f64 / 1000.0, s.summary)?;
            } else {
                writeln!(f, "{:<9} {:>11}  (switched off)", s.name, "-")?;
            }
        }
        if let Some(r) = &self.rewrite {
            for line in r.to_string().lines() {
                writeln!(f, "  {line}")?;
            }
        }
        writeln!(f, "  costs: {}", self.cost_source)?;
        if let Some(c) = &self.cache {
            writeln!(f, "  plan cache: {c}")?;
        }
        if let Some(p) = &self.placement {
            let per: Vec<String> = p.devices.iter().map(|(n, k, t)| format!("{n}: {k} kernels, {t} transfers in")).collect();
            let gap = if p.lower_bound_ns > 0 { (p.makespan_ns as f64 - p.lower_bound_ns as f64) / p.lower_bound_ns as f64 * 100.0 } else { 0.0 };
            writeln!(f, "  placement: {}; simulated makespan {:.3} ms, bound {:.3} ms, gap {gap:.1}%", per.join("; "), p.makespan_ns as f64 / 1e6, p.lower_bound_ns as f64 / 1e6)?;
            if p.states.iter().any(|s| s.0 > 0) {
                let per: Vec<String> = p.devices.iter().zip(&p.states).map(|((n, _, _), (k, b))| format!("{n} {k} ({} KiB)", b / 1024)).collect();
                writeln!(f, "  kept states: {}", per.join(", "))?;
            }
            for n in &p.notes {
                writeln!(f, "    {n}")?;
            }
            if let Some(t) = &self.timeline {
                let busy: Vec<String> = p.devices.iter().zip(&t.busy_ns).map(|((d, _, _), b)| format!("{d} busy {:.3} ms", b / 1e6)).collect();
                writeln!(f, "  timeline: the plan's steps simulated on one queue per device: {:.3} ms ({})", t.makespan_ns / 1e6, busy.join(", "))?;
            }
        }
        if let Some(p) = &self.prediction {
            writeln!(
                f,
                "  predicted run time {:.3} ms; {:.1}% of it from fallback estimates ({} of {} steps not measured)",
                p.total_ns / 1e6,
                if p.total_ns > 0.0 { 100.0 * p.fallback_ns / p.total_ns } else { 0.0 },
                p.fallback_steps,
                p.steps.len()
            )?;
        }
        Ok(())
    }
}

/// A compiled plan and the report of how it was made.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The plan.
    pub plan: Plan,
    /// Per-stage report.
    pub report: CompileReport,
}

struct Timer(Instant);

impl Timer {
    fn start() -> Timer {
        Timer(Instant::now())
    }
    fn us(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
}

/// Removes nodes no output depends on, renumbering the rest (order kept).
pub fn dead_code_elimination(g: &Graph) -> Graph {
    let live = g.live_mask();
    let mut map = vec![usize::MAX; g.nodes.len()];
    let mut out = Graph::default();
    for (i, n) in g.nodes.iter().enumerate() {
        if live[i] {
            let mut n = n.clone();
            n.inputs = n.inputs.iter().map(|&x| map[x]).collect();
            map[i] = out.nodes.len();
            out.nodes.push(n);
        }
    }
    out.outputs = g.outputs.iter().map(|(name, o)| (name.clone(), map[*o])).collect();
    out
}

/// The kernel keys planning `graph` asks about: every e-node the `rewrite` stage's
/// extraction costs (every alternative, chosen or not) and every step of the finished plan
/// (copies included), each on the device that would run it. This is what `tg profile`
/// measures.
pub fn planning_keys(graph: &Graph, devices: &[Arc<dyn Device>], opts: &CompileOptions) -> Result<Vec<tg_profile::ProfileKey>, CompileError> {
    if devices.is_empty() {
        return Err(CompileError::Options("no devices to compile for".into()));
    }
    let mut keys = Vec::new();
    let plan = compile_inner(graph, devices, opts, Some(&mut keys))?.plan;
    for s in plan.steps.iter().filter(|s| !matches!(s.kernel, tg_runtime::Kernel::Transfer { .. })) {
        keys.push(tg_profile::ProfileKey::from_step(&plan, s, devices.get(s.device).map_or(1, |d| d.threads())));
    }
    let mut seen = std::collections::HashSet::new();
    keys.retain(|k| seen.insert(k.clone()));
    Ok(keys)
}

/// The home device: graph inputs arrive and outputs leave there, and with one device (or
/// the `rewrite` stage off) every step runs there.
const TARGET: usize = 0;

/// Compiles `graph` for `devices`, fused ops where a kernel registry implements them. With
/// one device every step runs on it; with several the planner places each op on a device
/// (kernel times measured on each, copies priced by the measured links; see
/// [`CompileOptions::placement`]), the plan gets a transfer step at every cross-device edge and
/// the steps are ordered by the planner's start times.
pub fn compile(graph: &Graph, devices: &[Arc<dyn Device>], opts: &CompileOptions) -> Result<Compiled, CompileError> {
    compile_inner(graph, devices, opts, None)
}

/// [`compile`], also collecting into `record` the kernel key of every e-node the `rewrite`
/// stage's extraction costs.
fn compile_inner(graph: &Graph, devices: &[Arc<dyn Device>], opts: &CompileOptions, record: Option<&mut Vec<tg_profile::ProfileKey>>) -> Result<Compiled, CompileError> {
    let mut report = CompileReport { cost_source: opts.cost.describe(), ..Default::default() };
    let skipped = |name: &str| StageReport { name: name.into(), ran: false, micros: 0, summary: String::new() };
    let target = devices.get(TARGET).ok_or_else(|| CompileError::Options("no devices to compile for".into()))?;
    for p in &opts.placement.pins {
        place::resolve_device(devices, &p.device)?;
    }

    let t = Timer::start();
    tg_ir::verify(graph)?;
    report.stages.push(StageReport { name: "verify".into(), ran: true, micros: t.us(), summary: format!("{} nodes, {} outputs", graph.nodes.len(), graph.outputs.len()) });

    let g;
    let graph = if opts.on("dce") {
        let t = Timer::start();
        g = dead_code_elimination(graph);
        tg_ir::verify(&g)?;
        report.stages.push(StageReport { name: "dce".into(), ran: true, micros: t.us(), summary: format!("{} -> {} nodes", graph.nodes.len(), g.nodes.len()) });
        &g
    } else {
        report.stages.push(skipped("dce"));
        graph
    };

    let rewritten;
    let mut place = None;
    // The profile the finished plan's timeline is simulated with, when the placement priced
    // devices by first-use measurements (see `place::rewrite_placed`).
    let mut timeline_profile: Option<tg_profile::Profile> = None;
    let graph = if opts.on("rewrite") {
        let t = Timer::start();
        let q8 = opts.numerics == Numerics::Q8Activations;
        let (dev, threads) = (target.name(), target.threads());
        let estimate = tg_egraph::KernelCost::default();
        let measured;
        let base: &dyn tg_egraph::CostModel = match &opts.cost {
            CostSource::Estimate => &estimate,
            // Measurements of another device, driver or kernel build under this device's name.
            CostSource::Profile(p) if p.device_fingerprint(dev).is_some_and(|f| f != target.fingerprint()) => {
                report.cost_source = format!("kernel cost estimate: the profile's {dev} measurements are of another device or kernel build (run `tg profile --device {dev}`)");
                &estimate
            }
            CostSource::Profile(p) => {
                measured = MeasuredCost::new(p.clone(), dev, threads, q8);
                &measured
            }
        };
        let mut ropts = opts.rewrite.clone();
        ropts.targets = tg_egraph::Targets(devices.to_vec());
        let (g, r, classes, kept, placement) = if devices.len() > 1 {
            let (g, r, classes, kept, placement, first_use) = place::rewrite_placed(graph, devices, opts, base, &ropts, record)?;
            timeline_profile = first_use;
            (g, r, classes, kept, placement)
        } else {
            let recording = record.is_some().then(|| cost::Recording { inner: base, device: dev, threads, quantize_activations: q8, keys: Default::default() });
            let (g, r, classes, kept) = rewrite::run(graph, &ropts, recording.as_ref().map_or(base, |r| r as &dyn tg_egraph::CostModel), opts.cache_budget)?;
            if let (Some(out), Some(rec)) = (record, recording) {
                out.extend(rec.keys.into_inner().unwrap_or_default());
            }
            (g, r, classes, kept, None)
        };
        let names: Vec<String> = devices.iter().map(|d| d.name().to_string()).collect();
        let kept_line = rewrite::kept_summary(&kept, opts.cache_budget, &names);
        // State updates are effects seen by the next run: extraction must keep every one
        // that runs whatever reads it (where the graph offers alternatives, the others are
        // chosen with their readers).
        let required = graph.effect_roots().iter().filter(|&&r| r).count();
        let kept = g.nodes.iter().filter(|n| matches!(n.op, tg_ir::Op::StoreRows { .. })).count();
        if kept < required {
            return Err(CompileError::Invalid(format!("rewriting kept {kept} of {required} state updates")));
        }
        if let Some((pl, rep)) = placement {
            place = Some(place::node_placement(&g, &classes, &pl));
            report.placement = Some(rep);
        }
        rewritten = g;
        report.stages.push(StageReport { name: "rewrite".into(), ran: true, micros: t.us(), summary: format!("{}{kept_line}", rewrite::summary(&r)) });
        report.rewrite = Some(r);
        &rewritten
    } else {
        report.stages.push(skipped("rewrite"));
        if graph.has_alternatives() {
            // Nothing chooses: each alternatives node is its first way.
            rewritten = graph.resolve_alternatives();
            if let Some(b) = opts.cache_budget {
                let bytes: usize =
                    rewritten.nodes.iter().filter(|n| matches!(n.op, tg_ir::Op::State { .. })).map(|n| n.dtype.bytes_for(n.shape.iter().product()).unwrap_or(usize::MAX)).sum();
                if bytes > b {
                    return Err(CompileError::Options(format!(
                        "the first ways of the graph's alternatives keep {bytes} bytes of states, over the cache budget of {b}; the budget is met by the rewrite stage's extraction, which is switched off"
                    )));
                }
            }
            &rewritten
        } else {
            graph
        }
    };

    let t = Timer::start();
    let views = opts.on("views");
    let place = place.unwrap_or_else(|| lower::NodePlacement::single(graph, TARGET));
    let prog = lower::lower(graph, devices, &place, views, opts.numerics == Numerics::Q8Activations)?;
    report.stages.push(StageReport { name: "lower".into(), ran: true, micros: t.us(), summary: prog.summary() });
    report.stages.push(if views {
        StageReport {
            name: "views".into(),
            ran: true,
            micros: 0,
            summary: format!("{} ops became views, {} copies inserted, {} transfers between devices", prog.n_views, prog.n_copies, prog.n_transfers),
        }
    } else {
        skipped("views")
    });
    let order = if devices.len() > 1 { "in the planner's start order" } else { "in topological order" };
    report.stages.push(StageReport { name: "schedule".into(), ran: true, micros: 0, summary: format!("{} steps {order}", prog.steps.len()) });
    if let Some(p) = report.placement.as_mut() {
        for (d, entry) in p.devices.iter_mut().enumerate() {
            entry.1 = prog.steps.iter().filter(|s| s.device == d && !matches!(s.kernel, tg_runtime::Kernel::Transfer { .. })).count();
            entry.2 = prog.steps.iter().filter(|s| s.device == d && matches!(s.kernel, tg_runtime::Kernel::Transfer { .. })).count();
        }
    }

    let t = Timer::start();
    let (plan, pack) = memory::assign(prog, devices, opts.alignment, opts.on("memory"));
    if let Some(p) = report.placement.as_mut() {
        p.states = vec![(0, 0); devices.len()];
        for b in &plan.buffers {
            if let tg_runtime::Storage::State { device, .. } = b.storage {
                if let Some(e) = p.states.get_mut(device) {
                    e.0 += 1;
                    e.1 += b.bytes;
                }
            }
        }
    }
    let arena: usize = plan.arenas.iter().map(|a| a.bytes).sum();
    let total: usize = plan.buffers.iter().filter(|b| matches!(b.storage, tg_runtime::Storage::Arena { .. })).map(|b| b.bytes).sum();
    report.stages.push(if opts.on("memory") {
        StageReport {
            name: "memory".into(),
            ran: true,
            micros: t.us(),
            summary: format!(
                "arena {} KiB for {} KiB of buffers ({:.1}x reuse); lower bound {} KiB{}, first-fit {} KiB",
                arena / 1024,
                total / 1024,
                total as f64 / arena.max(1) as f64,
                pack.lower_bound / 1024,
                if pack.optimal { " (proven minimal)" } else { "" },
                pack.first_fit / 1024
            ),
        }
    } else {
        skipped("memory")
    });

    if opts.on("validate") {
        let t = Timer::start();
        validate(&plan, devices).map_err(|e| CompileError::Invalid(e.to_string()))?;
        report.stages.push(StageReport { name: "validate".into(), ran: true, micros: t.us(), summary: "plan valid".into() });
    } else {
        report.stages.push(skipped("validate"));
    }
    let profile = match &opts.cost {
        CostSource::Profile(p) => Some(&**p),
        CostSource::Estimate => None,
    };
    if profile.is_some() || devices.len() > 1 {
        let threads: Vec<usize> = devices.iter().map(|d| d.threads()).collect();
        let costs = timeline::step_costs(&plan, timeline_profile.as_ref().or(profile), &threads);
        report.timeline = Some(timeline::simulate(&plan, &costs));
        if profile.is_some() {
            let mut pred = PlanPrediction { total_ns: 0.0, fallback_ns: 0.0, fallback_steps: 0, steps: costs };
            for &(ns, measured) in &pred.steps {
                pred.total_ns += ns;
                if !measured {
                    pred.fallback_ns += ns;
                    pred.fallback_steps += 1;
                }
            }
            report.prediction = Some(pred);
        }
    }
    Ok(Compiled { plan, report })
}
