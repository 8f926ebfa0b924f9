//! Plan reports: a compiled plan and the report of how it was made, as one self-contained
//! HTML file (inline SVG drawn by a little JavaScript from the data embedded in the page; no
//! network, no external fonts) that opens in any browser from disk.
//!
//! The page has three views:
//! - **Schedule**: a Gantt chart with one lane per device queue, each step a bar from its
//!   start to its end — predicted (the compiler's simulated timeline) and, when the plan was
//!   run with profiling, measured — transfers drawn between lanes, the critical path
//!   highlighted; hovering a bar shows the kernel, the node, shapes, dtypes, times and, for a
//!   fused op, the rewrite rules that make such ops. Zoom with the wheel, pan by dragging, or
//!   pick one layer (steps are grouped by the `blk.N` weights they read).
//! - **Memory**: per arena, offset against step index, one rectangle per buffer over its
//!   lifetime (the packer's: [`tg_compiler::memory::lifetimes`]); the arena size, the peak
//!   and the live-bytes lower bound marked; kept states and weights listed apart, with their
//!   bytes per device.
//! - **Summary**: the compiler's stages and timings, the e-graph report, the fused ops, the
//!   planner's objective, bound and gap, the profile used, and the incremental derivation.
//!
//! The element classes are a contract the browser test checks: `rect.bar[data-step]` (one
//! per step), `rect.mbar` (measured), `rect.buf[data-arena][data-x0][data-x1][data-y0]
//! [data-y1]` (one per arena buffer), `g.lane[data-device]`, `line.transfer`, `#legend`, and
//! `body[data-ready]` once drawn.

use serde::Serialize;
use std::collections::HashMap;
use tg_compiler::CompileReport;
use tg_runtime::{Kernel, Plan, Storage};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Measured times that do not belong to this plan.
    #[error("measured times: {0}")]
    Measured(String),
    /// The data could not be serialised (a bug).
    #[error("report data: {0}")]
    Data(#[from] serde_json::Error),
    /// Writing the file failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Step times measured by the runtime's profiling.
#[derive(Debug, Clone)]
pub enum Measured {
    /// One device, one thread: each step's duration (ns, plan order), run back to back.
    Durations(Vec<u64>),
    /// Several devices: each step's start and end (ns on one clock, plan order).
    Spans(Vec<(u64, u64)>),
}

/// What a report is made of.
pub struct ReportInput<'a> {
    /// Title (the model and what was compiled).
    pub title: String,
    /// The command that made it, shown on the page.
    pub command: String,
    /// The plan.
    pub plan: &'a Plan,
    /// How it was made.
    pub report: &'a CompileReport,
    /// Worker threads of each device (plan order), for step times when the report has no
    /// simulated timeline.
    pub threads: Vec<usize>,
    /// Measured step times, if the plan was run with profiling.
    pub measured: Option<Measured>,
    /// For an incremental plan: the derivation's summary.
    pub derivation: Option<String>,
}

#[derive(Serialize)]
struct StepData {
    kernel: String,
    family: &'static str,
    device: usize,
    /// For a transfer: the source device.
    from: Option<usize>,
    node: usize,
    inputs: Vec<String>,
    output: String,
    start: f64,
    end: f64,
    measured: Option<(f64, f64)>,
    layer: Option<usize>,
    critical: bool,
    /// Rewrite rules that make this fused op (applied ones, with their algebra).
    rules: Vec<String>,
}

#[derive(Serialize)]
struct BufData {
    buffer: usize,
    node: usize,
    offset: usize,
    bytes: usize,
    x0: usize,
    x1: usize,
    /// The kernel that writes it (or "input"), and its family.
    writer: String,
    family: &'static str,
}

#[derive(Serialize)]
struct ArenaData {
    device: usize,
    bytes: usize,
    peak: usize,
    live_bound: usize,
    buffers: Vec<BufData>,
}

#[derive(Serialize)]
struct Page<'a> {
    title: &'a str,
    command: &'a str,
    devices: &'a [String],
    steps: Vec<StepData>,
    makespan: f64,
    predicted_from: String,
    measured_total: Option<f64>,
    arenas: Vec<ArenaData>,
    states: Vec<(String, String, usize)>,
    weights: Vec<(String, usize, usize)>,
    layers: Vec<(usize, f64, f64)>,
    /// Every rewrite rule: name, family, algebra.
    rules: Vec<(&'static str, &'static str, &'static str)>,
    report: &'a CompileReport,
    derivation: Option<&'a str>,
}

const FUSED: [&str; 10] =
    ["rms_norm", "rope_neox", "rms_norm_rope_neox", "gelu_tanh", "gated_gelu", "softmax", "attention", "attention_seq_major", "add_rms_norm", "matmul_quant_add"];

fn squash(s: &str) -> String {
    s.chars().filter(|c| c.is_ascii_alphanumeric()).collect()
}

/// The layer `blk.N.` of a weight name.
fn weight_layer(name: &str) -> Option<usize> {
    let rest = name.split("blk.").nth(1)?;
    rest.split('.').next()?.parse().ok()
}

fn layout_str(l: &tg_runtime::Layout) -> String {
    format!("{:?} {}", l.shape, l.dtype)
}

/// The report's data: steps with their times, arenas with their buffers.
fn page<'a>(input: &'a ReportInput<'a>) -> Result<Page<'a>, ReportError> {
    let plan = input.plan;
    let n = plan.steps.len();
    // Predicted times: the compiler's simulated timeline, else the roofline guess per step.
    let (times, predicted_from) = match &input.report.timeline {
        Some(t) if t.steps.len() == n => (t.clone(), if input.report.prediction.is_some() { "the profile's kernel times" } else { "kernel time estimates" }.to_string()),
        _ => {
            let threads: Vec<usize> = (0..plan.devices.len()).map(|d| input.threads.get(d).copied().unwrap_or(1)).collect();
            let costs = tg_compiler::timeline::step_costs(plan, None, &threads);
            (tg_compiler::timeline::simulate(plan, &costs), "roofline estimates (no profile)".to_string())
        }
    };
    let measured: Option<Vec<(f64, f64)>> = match &input.measured {
        None => None,
        Some(Measured::Durations(d)) => {
            if d.len() != n {
                return Err(ReportError::Measured(format!("{} step times for a plan of {n} steps", d.len())));
            }
            let mut t = 0.0;
            Some(
                d.iter()
                    .map(|&x| {
                        let s = t;
                        t += x as f64;
                        (s, t)
                    })
                    .collect(),
            )
        }
        Some(Measured::Spans(s)) => {
            if s.len() != n {
                return Err(ReportError::Measured(format!("{} step spans for a plan of {n} steps", s.len())));
            }
            Some(s.iter().map(|&(a, b)| (a as f64, b as f64)).collect())
        }
    };
    // Who writes each buffer (the last writer before a step is its producer).
    let mut writer: HashMap<usize, usize> = HashMap::new();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut last_on: HashMap<usize, usize> = HashMap::new();
    let mut layer: Vec<Option<usize>> = vec![None; n];
    for (i, s) in plan.steps.iter().enumerate() {
        for t in &s.inputs {
            if let Some(&w) = writer.get(&t.buffer) {
                preds[i].push(w);
                layer[i] = layer[i].max(layer[w]);
            }
            if let Storage::Weight { name, .. } = &plan.buffers[t.buffer].storage {
                layer[i] = layer[i].max(weight_layer(name));
            }
        }
        if let Some(&p) = last_on.get(&s.device) {
            preds[i].push(p);
        }
        last_on.insert(s.device, i);
        writer.insert(s.output.buffer, i);
    }
    // Critical path: back from the last step to end, through the predecessor that ends last.
    let mut critical = vec![false; n];
    if let Some(mut at) = (0..n).max_by(|&a, &b| times.steps[a].1.total_cmp(&times.steps[b].1)) {
        loop {
            critical[at] = true;
            match preds[at].iter().copied().max_by(|&a, &b| times.steps[a].1.total_cmp(&times.steps[b].1)) {
                Some(p) => at = p,
                None => break,
            }
        }
    }
    let applied: Vec<(&str, usize, &str)> = match &input.report.rewrite {
        Some(r) => tg_egraph::catalog().iter().filter_map(|info| r.saturation.applications.get(info.name).filter(|&&k| k > 0).map(|&k| (info.name, k, info.algebra))).collect(),
        None => Vec::new(),
    };
    let rules_for = |family: &str| -> Vec<String> {
        if !FUSED.contains(&family) {
            return Vec::new();
        }
        let f = squash(family);
        applied
            .iter()
            .filter(|(name, _, _)| {
                let r = squash(name.trim_start_matches("fuse-"));
                r.contains(&f) || f.contains(&r)
            })
            .map(|(name, k, alg)| format!("{name} ({k}×): {alg}"))
            .collect()
    };
    let steps: Vec<StepData> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let from = match s.kernel {
                Kernel::Transfer { from } => Some(from),
                _ => None,
            };
            StepData {
                kernel: s.kernel.name(),
                family: s.kernel.family(),
                device: s.device,
                from,
                node: s.node,
                inputs: s.inputs.iter().map(|t| layout_str(&t.layout)).collect(),
                output: layout_str(&s.output.layout),
                start: times.steps[i].0,
                end: times.steps[i].1,
                measured: measured.as_ref().map(|m| m[i]),
                layer: layer[i],
                critical: critical[i],
                rules: rules_for(s.kernel.family()),
            }
        })
        .collect();
    // Arenas: buffers over the packer's lifetimes, the peak and the live-bytes bound.
    let spans = tg_compiler::memory::lifetimes(&plan.steps, &plan.outputs, plan.buffers.len());
    let mut arenas: Vec<ArenaData> = plan.arenas.iter().map(|a| ArenaData { device: a.device, bytes: a.bytes, peak: 0, live_bound: 0, buffers: Vec::new() }).collect();
    let mut first_writer: HashMap<usize, usize> = HashMap::new();
    for (i, s) in plan.steps.iter().enumerate() {
        first_writer.entry(s.output.buffer).or_insert(i);
    }
    for (b, desc) in plan.buffers.iter().enumerate() {
        if let Storage::Arena { arena, offset } = desc.storage {
            if let Some(a) = arenas.get_mut(arena) {
                let (x0, x1) = spans[b];
                let (writer, family) = first_writer.get(&b).map_or(("input".to_string(), "input"), |&i| (plan.steps[i].kernel.name(), plan.steps[i].kernel.family()));
                a.buffers.push(BufData { buffer: b, node: desc.node, offset, bytes: desc.bytes, x0, x1, writer, family });
            }
        }
    }
    for a in &mut arenas {
        let mut live = vec![0usize; n + 1];
        let mut top = vec![0usize; n + 1];
        for b in &a.buffers {
            for t in b.x0..=b.x1.min(n) {
                live[t] += b.bytes;
                top[t] = top[t].max(b.offset + b.bytes);
            }
        }
        a.live_bound = live.into_iter().max().unwrap_or(0);
        a.peak = top.into_iter().max().unwrap_or(0);
    }
    let mut states = Vec::new();
    let mut weights: HashMap<(String, usize), usize> = HashMap::new();
    for b in &plan.buffers {
        match &b.storage {
            Storage::State { name, device } => states.push((name.clone(), plan.devices.get(*device).cloned().unwrap_or_default(), b.bytes)),
            Storage::Weight { name, device } => {
                let e = weights.entry((name.clone(), *device)).or_insert(0);
                *e = (*e).max(b.bytes);
            }
            Storage::Arena { .. } => {}
        }
    }
    states.sort();
    let mut weights: Vec<(String, usize, usize)> = weights.into_iter().map(|((n, d), b)| (n, d, b)).collect();
    weights.sort();
    // Each layer's predicted time range.
    let mut ranges: std::collections::BTreeMap<usize, (f64, f64)> = Default::default();
    for s in &steps {
        if let Some(l) = s.layer {
            // Predicted: measured times may differ from them by any factor (a device slower
            // than its profile), and a union of both would show most of the run.
            let e = ranges.entry(l).or_insert((f64::INFINITY, 0.0));
            e.0 = e.0.min(s.start);
            e.1 = e.1.max(s.end);
        }
    }
    let measured_total = measured.as_ref().map(|m| m.iter().map(|x| x.1).fold(0.0, f64::max));
    Ok(Page {
        title: &input.title,
        command: &input.command,
        devices: &plan.devices,
        steps,
        makespan: times.makespan_ns,
        predicted_from,
        measured_total,
        arenas,
        states,
        weights,
        layers: ranges.into_iter().map(|(l, (a, b))| (l, a, b)).collect(),
        rules: tg_egraph::catalog().iter().map(|r| (r.name, r.family, r.algebra)).collect(),
        report: input.report,
        derivation: input.derivation.as_deref(),
    })
}

const TEMPLATE: &str = include_str!("page.html");

/// The report as one HTML document.
pub fn render(input: &ReportInput) -> Result<String, ReportError> {
    let data = serde_json::to_string(&page(input)?)?;
    // Inside a <script> element nothing may close it.
    let data = data.replace("</", "<\\/");
    let title = input.title.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    Ok(TEMPLATE.replacen("{{TITLE}}", &title, 1).replacen("{{DATA}}", &data, 1))
}

/// [`render`] into `path`, written whole to a temporary file next to it and renamed, so an
/// existing report is never left half-written.
pub fn write(input: &ReportInput, path: &std::path::Path) -> Result<usize, ReportError> {
    let html = render(input)?;
    let io = |source| ReportError::Io { path: path.display().to_string(), source };
    let tmp = path.with_extension("html.tmp");
    if let Err(e) = std::fs::write(&tmp, &html).and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(html.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_come_from_weight_names() {
        assert_eq!(weight_layer("blk.12.attn_q.weight"), Some(12));
        assert_eq!(weight_layer("token_embd.weight"), None);
        assert_eq!(weight_layer("blk.x.attn_q"), None);
    }
}
