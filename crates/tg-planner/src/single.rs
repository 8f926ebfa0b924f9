//! One device, nothing kept: the makespan is the DAG cost.
//!
//! On a single device every step starts when the one before it ends (operands are always
//! produced earlier on the same device, sources are ready at 0), so for any order the
//! makespan is the sum of the chosen kernels' times: each chosen node counted once. The
//! choice is then exactly DAG-cost extraction, which `tg_extract` solves with its own
//! proven lower bound; only the order (for memory) and the offsets remain. The order is a
//! memory-aware list schedule; the peak it reaches is proven minimal only when it meets the
//! footprint bound (a kernel's operands and output are live together).

use std::time::Instant;

use tg_extract::{ClassId, EGraphBuilder};

use crate::config::Config;
use crate::memory::Packing;
use crate::problem::{ImplOption, Problem};
use crate::search::{Limits, Outcome, Solution, Status};

/// Whether the reduction applies: one device and no class that could be kept.
pub(crate) fn applies(p: &Problem) -> bool {
    p.devices.len() == 1 && !p.classes.iter().any(|c| c.cacheable && c.bytes <= p.devices[0].cache_budget)
}

/// Solve by extraction; `None` when the extraction's plan does not fit the arena (the
/// general search then decides).
pub(crate) fn solve(p: &Problem, limits: &Limits) -> Option<Outcome> {
    let t0 = Instant::now();
    let (g, back) = extraction_graph(p, false)?;
    let opts = tg_extract::Options { time_limit: limits.time, ..Default::default() };
    let nc = p.classes.len();
    let x = match tg_extract::extract(&g, &opts) {
        Ok(x) => x,
        Err(tg_extract::ExtractError::Infeasible(_)) => {
            return Some(Outcome { status: Status::Infeasible, best: None, lower_bound: 0, nodes: 0, first_plan: None, elapsed: t0.elapsed() });
        }
    };
    let mut needed = vec![false; nc];
    let mut choice = vec![None; nc];
    let mut option = vec![None; nc];
    for &(c, n) in &x.choices {
        let (node, k) = back[n.index()];
        needed[c.index()] = true;
        choice[c.index()] = Some(node);
        if p.nodes[node].source.is_none() {
            option[c.index()] = Some(k);
        }
    }
    let keep = vec![None; nc];
    let cfg = Config::build(p, &needed, &keep, &choice, &option).ok()?;
    let order = memory_order(&cfg);
    let mut start = vec![0u64; cfg.steps.len()];
    let mut t = 0u64;
    for &s in &order {
        start[s] = t;
        t += cfg.time[s];
    }
    let timed = cfg.timed(p, start);
    let offsets = match crate::search::pack_plan(p, &cfg, &timed, limits.pack_nodes, t0 + limits.time) {
        Packing::Fits(o) => o,
        _ => return None,
    };
    let peak_lb = footprint_bound(&cfg);
    let lower_bound = (x.lower_bound - 1e-6).ceil().max(0.0) as u64;
    let makespan = timed.makespan;
    let status = if x.optimal && timed.peak <= peak_lb { Status::Optimal } else { Status::Feasible };
    let elapsed = t0.elapsed();
    Some(Outcome {
        status,
        best: Some(Solution { keep, choice, option, config: cfg, timed, offsets }),
        lower_bound: if x.optimal { makespan } else { lower_bound.min(makespan) },
        nodes: x.nodes_explored,
        first_plan: Some(elapsed),
        elapsed,
    })
}

/// The DAG-cost extraction graph of `p`: one extraction node per planner node, at its
/// cheapest option's time (sources 0); with `free_keep`, one more free leaf for every class
/// that could be kept (cacheable, and some device's cache budget holds it). Returns the
/// graph and, per extraction node below the planner's, the planner node and option it
/// stands for. `None` if the builder rejects it (it cannot for a checked problem).
pub(crate) fn extraction_graph(p: &Problem, free_keep: bool) -> Option<(tg_extract::EGraph, Vec<(usize, usize)>)> {
    extraction_graph_with(p, free_keep, |o| Some(o.time as f64))
}

/// [`extraction_graph`] with each option costed by `cost` (`None`: the option is not
/// allowed). A node keeps its cheapest allowed option (sources cost 0); a node with no
/// allowed option is left out, and a class left with no node gets a node that reads its
/// own class, which no acyclic extraction can use (`back` maps it to `usize::MAX`).
pub(crate) fn extraction_graph_with(p: &Problem, free_keep: bool, cost: impl Fn(&ImplOption) -> Option<f64>) -> Option<(tg_extract::EGraph, Vec<(usize, usize)>)> {
    let mut e = EGraphBuilder::new();
    let classes: Vec<ClassId> = (0..p.classes.len()).map(|c| e.add_class(c.to_string())).collect();
    let mut back = Vec::with_capacity(p.nodes.len());
    let mut has_node = vec![false; p.classes.len()];
    for (i, n) in p.nodes.iter().enumerate() {
        let best = if n.source.is_some() { Some((0, 0.0)) } else { n.options.iter().enumerate().filter_map(|(k, o)| cost(o).map(|t| (k, t))).min_by(|a, b| a.1.total_cmp(&b.1)) };
        let Some((k, t)) = best else { continue };
        e.add_node(classes[n.class], i.to_string(), t, n.children.iter().map(|&c| classes[c])).ok()?;
        back.push((i, k));
        has_node[n.class] = true;
    }
    for (c, &has) in has_node.iter().enumerate() {
        if !has {
            e.add_node(classes[c], format!("none {c}"), 0.0, [classes[c]]).ok()?;
            back.push((usize::MAX, 0));
        }
    }
    if free_keep {
        for (c, class) in p.classes.iter().enumerate() {
            if class.cacheable && p.devices.iter().any(|d| d.cache_budget >= class.bytes) {
                e.add_node(classes[c], format!("keep {c}"), 0.0, []).ok()?;
            }
        }
    }
    for &r in &p.roots {
        e.add_root(classes[r]).ok()?;
    }
    Some((e.build().ok()?, back))
}

/// The largest `output + operand buffers` of any kernel: live at once, so a bound on the peak.
fn footprint_bound(cfg: &Config) -> u64 {
    let (reads, out) = step_io(cfg);
    (0..cfg.steps.len()).map(|s| out[s] + reads[s].iter().map(|&b| cfg.buffers[b].bytes).sum::<u64>()).max().unwrap_or(0)
}

/// Per step: the buffers it reads, and the bytes of the buffer it writes.
fn step_io(cfg: &Config) -> (Vec<Vec<usize>>, Vec<u64>) {
    let n = cfg.steps.len();
    let mut reads: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut out = vec![0u64; n];
    for (b, buf) in cfg.buffers.iter().enumerate() {
        for &r in &buf.readers {
            reads[r].push(b);
        }
        if let Some(w) = buf.writer {
            out[w] = buf.bytes;
        }
    }
    (reads, out)
}

/// A list schedule that keeps live memory low: among the ready steps, run the one that
/// allocates the least net of what it frees (its output minus the operands it reads last).
pub(crate) fn memory_order(cfg: &Config) -> Vec<usize> {
    let n = cfg.steps.len();
    let (reads, out) = step_io(cfg);
    let mut left: Vec<usize> = cfg.buffers.iter().map(|b| b.readers.len() + usize::from(b.holds_root)).collect();
    let mut missing: Vec<usize> = cfg.deps.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..n).filter(|&s| missing[s] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while !ready.is_empty() {
        let (i, &s) = ready
            .iter()
            .enumerate()
            .min_by_key(|&(_, &s)| {
                let freed: u64 = reads[s].iter().filter(|&&b| left[b] == 1).map(|&b| cfg.buffers[b].bytes).sum();
                (out[s] as i128 - freed as i128, s)
            })
            .expect("non-empty");
        ready.swap_remove(i);
        order.push(s);
        for &b in &reads[s] {
            left[b] -= 1;
        }
        for &t in &cfg.succs[s] {
            missing[t] -= 1;
            if missing[t] == 0 {
                ready.push(t);
            }
        }
    }
    order
}
