//! Extraction by the planner: the e-graph becomes a `tg_planner::Problem` (one CPU device,
//! every node a kernel option timed by the cost model, inputs and weights as sources) and the
//! planner's search picks the nodes, with a proven lower bound on the cost.

use std::collections::HashMap;

use egg::Id;
use tg_ir::{DType, Op};

use crate::extract::{CostModel, Extraction, Extractor, KernelCost, Proof};
use crate::{EgraphError, TEGraph};

/// The planner's search behind the [`Extractor`] interface.
#[derive(Debug, Clone)]
pub struct PlannerExtractor<C> {
    /// Kernel times (ns, rounded up to whole ns, at least 1).
    pub cost: C,
    /// Search budgets.
    pub limits: tg_planner::Limits,
}

impl Default for PlannerExtractor<KernelCost> {
    fn default() -> Self {
        // Extraction only needs the makespan: always take the one-device reduction. 250 ms:
        // graphs proven at all are proven in ~10 ms; on one-row decode graphs (unit dims make
        // many equal-cost view alternatives) a 2 s search found no better plan than 250 ms.
        PlannerExtractor {
            cost: KernelCost::default(),
            limits: tg_planner::Limits { time: std::time::Duration::from_millis(250), single_device_min_nodes: 0, ..Default::default() },
        }
    }
}

fn class_bytes(shape: &[usize], dtype: DType) -> u64 {
    (crate::extract::bytes(shape, dtype) as u64).max(1)
}

/// The e-graph's classes in a fixed order, each one's index, and the planner's class table
/// (bytes; nothing cacheable) — shared by both problem builders.
fn class_table(egraph: &TEGraph) -> (Vec<Id>, HashMap<Id, usize>, Vec<tg_planner::Class>) {
    let ids: Vec<Id> = egraph.classes().map(|c| c.id).collect();
    let index = ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let classes = ids.iter().map(|&c| tg_planner::Class { bytes: class_bytes(&egraph[c].data.shape, egraph[c].data.dtype), cacheable: false }).collect();
    (ids, index, classes)
}

/// The planner's source kind of an op (inputs and weights), if it is one.
fn source_of(op: &Op) -> Option<tg_planner::Source> {
    match op {
        Op::Input { .. } => Some(tg_planner::Source::Input),
        Op::Weight { .. } => Some(tg_planner::Source::Weight),
        _ => None,
    }
}

/// The planning problem of an e-graph with roots `roots`: class ids in `ids` order.
pub fn planning_problem(egraph: &TEGraph, roots: &[Id], model: &dyn CostModel) -> (tg_planner::Problem, Vec<Id>) {
    let (ids, index, classes) = class_table(egraph);
    let mut nodes = Vec::new();
    for &c in &ids {
        let class = &egraph[c];
        for n in &class.nodes {
            let source = source_of(&n.op);
            let children: Vec<usize> = n.children.iter().map(|&ch| index[&egraph.find(ch)]).collect();
            let options = if source.is_some() {
                Vec::new()
            } else {
                let ins = crate::operands(egraph, n);
                let t = model.node_cost(&n.op, (&class.data.shape, class.data.dtype), &ins);
                vec![tg_planner::ImplOption { kernel: n.op.name().to_string(), device: 0, time: (t.ceil() as u64).clamp(1, tg_planner::problem::MAX_TIME), alias: false }]
            };
            nodes.push(tg_planner::Node { class: index[&c], children: if source.is_some() { Vec::new() } else { children }, source, options });
        }
    }
    let devices = vec![tg_planner::Device { name: "cpu".into(), capacity: u64::MAX / 8, cache_budget: 0 }];
    let roots = roots.iter().map(|r| index[&egraph.find(*r)]).collect();
    (tg_planner::Problem { devices, home: 0, links: Vec::new(), classes, nodes, roots }, ids)
}

impl<C: CostModel> Extractor for PlannerExtractor<C> {
    fn name(&self) -> String {
        format!("planner over {}", self.cost.name())
    }

    fn extract(&self, egraph: &TEGraph, roots: &[Id]) -> Result<Extraction, EgraphError> {
        let (problem, ids) = planning_problem(egraph, roots, &self.cost);
        // Diagnostics: `TG_DUMP_PLANNING=DIR` writes every extraction's planning problem there
        // (`docs/planner.md` JSON; `cargo run -p tg-extract --example bench -- FILE` times it).
        if let Some(dir) = std::env::var_os("TG_DUMP_PLANNING") {
            let path = std::path::Path::new(&dir).join(format!("problem-{}-{}.json", problem.classes.len(), problem.nodes.len()));
            if let Ok(text) = serde_json::to_string(&problem) {
                let _ = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, text));
            }
        }
        // Node index -> e-node.
        let mut enodes = Vec::with_capacity(problem.nodes.len());
        for &c in &ids {
            enodes.extend(egraph[c].nodes.iter().cloned());
        }
        let out = tg_planner::solve(&problem, &self.limits);
        let Some(best) = &out.best else {
            return Err(EgraphError::Internal(format!("the planner found no plan for the e-graph ({:?})", out.status)));
        };
        let plan = best.to_plan();
        tg_planner::validate(&problem, &plan).map_err(|e| EgraphError::Internal(e.to_string()))?;
        let choice = plan.choice.iter().map(|(&c, &n)| (ids[c], enodes[n].clone())).collect();
        let makespan = best.makespan() as f64;
        Ok(Extraction {
            choice,
            cost: makespan,
            proof: Some(Proof {
                lower_bound: out.lower_bound as f64,
                optimal: out.lower_bound == best.makespan(),
                nodes: out.nodes,
                first_plan_ms: out.first_plan.map_or(0.0, |d| d.as_secs_f64() * 1e3),
                millis: out.elapsed.as_secs_f64() * 1e3,
            }),
        })
    }
}

/// One device the planner may place work on: its kernel registry decides which e-nodes it
/// can run, `cost` what they take there.
pub struct PlaceTarget<'a> {
    /// The device (name, registry, memory).
    pub device: std::sync::Arc<dyn tg_runtime::Device>,
    /// Kernel times on it (ns).
    pub cost: &'a dyn CostModel,
    /// Whether the planner may choose it for ops nobody pinned there (a device without
    /// measured kernel times is offered only for pinned ops).
    pub offered: bool,
}

/// An op pinned to a device: e-nodes whose op name matches `pattern` (`*` matches any run of
/// characters: `attention*`, `matmul`) get only `device`'s option.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Pin {
    /// Op-name pattern.
    pub pattern: String,
    /// Index of the device among the targets.
    pub device: usize,
}

impl Pin {
    /// Whether `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        glob(self.pattern.as_bytes(), name.as_bytes())
    }
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some((&c, rest)) => s.first() == Some(&c) && glob(rest, &s[1..]),
    }
}

/// Where the planner put one class: device, start and end (ns, simulated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Placed {
    /// Index of the device among the targets.
    pub device: usize,
    /// Simulated start (ns).
    pub start: u64,
    /// Simulated end (ns).
    pub end: u64,
}

/// The planner's placement of an extraction: a device and simulated times for every chosen
/// class that runs a kernel (views included), and the copies between devices.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Per canonical class id.
    pub classes: HashMap<Id, Placed>,
    /// Copies: (class, from, to) and when the plan runs them.
    pub copies: Vec<(Id, usize, usize, Placed)>,
    /// The simulated makespan (ns).
    pub makespan: u64,
    /// One line per target device: what the planner was told about it.
    pub notes: Vec<String>,
}

/// The planner over several devices: every e-node gets an option on each target whose
/// registry implements its kernel (views and states: see [`planning_problem_on`]), priced by
/// that target's cost model, with copies priced by `links`.
pub struct PlacingExtractor<'a> {
    /// The devices, in the plan's order (the first is home: inputs arrive and outputs leave there).
    pub targets: Vec<PlaceTarget<'a>>,
    /// Copy links between targets (planner units: ns and bytes per µs).
    pub links: Vec<tg_planner::Link>,
    /// Ops pinned to a device.
    pub pins: Vec<Pin>,
    /// Kept states (`Op::State`, by name) that must live on a given target (its index);
    /// others are placed with their update.
    pub state_devices: std::collections::BTreeMap<String, usize>,
    /// Quantized matmuls round activations (the kernel each device would run).
    pub quantize_activations: bool,
    /// Search budgets.
    pub limits: tg_planner::Limits,
    /// Filled by [`Extractor::extract`]: where everything went.
    pub placement: std::cell::RefCell<Option<Placement>>,
}

/// Whether `device` can run e-node `n` of class data `out`, and why not.
fn runs_on(egraph: &TEGraph, n: &crate::ENode, out: &crate::ClassData, device: &dyn tg_runtime::Device, q8: bool) -> bool {
    match &n.op {
        // Views are strided layouts on any device (a reader that needs them contiguous gets a
        // copy, which every registry has).
        Op::Reshape | Op::Expand | Op::Slice { .. } | Op::Permute { .. } => true,
        op => {
            let ins = crate::operands(egraph, n);
            match tg_runtime::select(op, &ins, &out.shape, q8) {
                Some((k, layouts)) => device.registry().check(&k, &layouts, &tg_runtime::Layout::contiguous(&out.shape, out.dtype)).is_ok(),
                None => false,
            }
        }
    }
}

/// The name of the state an `Op::StoreRows` e-node updates (its first child's `Op::State`).
pub(crate) fn updated_state(egraph: &TEGraph, n: &crate::ENode) -> Option<String> {
    let c = *n.children.first()?;
    egraph[c].nodes.iter().find_map(|m| match &m.op {
        Op::State { name } => Some(name.clone()),
        _ => None,
    })
}

/// The planning problem of an e-graph over several devices, and the e-node of every problem
/// node. Inputs and weights are sources. A kept state's in-place update (`Op::StoreRows`)
/// stands for the state too: its node does not read the state's class (the update writes the
/// state's own buffer, so the two cannot be apart), and the state lives wherever the planner
/// puts the update — on the device `state_devices` names for it, if it does, else on any
/// device that runs it; readers elsewhere pay for copying the whole state. An e-node with no
/// device that runs it is left out; a pinned op gets only its pinned device's option (an
/// error when that device cannot run it).
pub fn planning_problem_on(
    egraph: &TEGraph,
    roots: &[Id],
    targets: &[PlaceTarget],
    links: &[tg_planner::Link],
    pins: &[Pin],
    state_devices: &std::collections::BTreeMap<String, usize>,
    q8: bool,
) -> Result<(tg_planner::Problem, Vec<Id>, Vec<crate::ENode>), EgraphError> {
    let (ids, index, classes) = class_table(egraph);
    let mut nodes = Vec::new();
    let mut enodes = Vec::new();
    for &c in &ids {
        let class = &egraph[c];
        for n in &class.nodes {
            let source = source_of(&n.op);
            let mut children: Vec<usize> = n.children.iter().map(|&ch| index[&egraph.find(ch)]).collect();
            if source.is_some() {
                nodes.push(tg_planner::Node { class: index[&c], children: Vec::new(), source, options: Vec::new() });
                enodes.push(n.clone());
                continue;
            }
            let name = n.op.name();
            let pinned = pins.iter().find(|p| p.matches(&name));
            let state_pin = match n.op {
                Op::StoreRows { .. } => {
                    children.remove(0);
                    updated_state(egraph, n).and_then(|s| state_devices.get(&s).copied())
                }
                _ => None,
            };
            let ins = crate::operands(egraph, n);
            let mut options = Vec::new();
            for (d, t) in targets.iter().enumerate() {
                let allowed = match (&n.op, pinned, state_pin) {
                    (Op::StoreRows { .. }, _, Some(sd)) => d == sd,
                    (_, Some(p), _) => p.device == d,
                    _ => t.offered,
                };
                if !allowed {
                    continue;
                }
                let ok = matches!(n.op, Op::State { .. }) || runs_on(egraph, n, &class.data, &*t.device, q8);
                if !ok {
                    continue;
                }
                let time = t.cost.node_cost(&n.op, (&class.data.shape, class.data.dtype), &ins);
                options.push(tg_planner::ImplOption { kernel: name.to_string(), device: d, time: (time.ceil() as u64).clamp(1, tg_planner::problem::MAX_TIME), alias: false });
            }
            if options.is_empty() {
                if let Some(p) = pinned {
                    if !runs_on(egraph, n, &class.data, &*targets[p.device].device, q8) && !matches!(n.op, Op::State { .. }) {
                        return Err(EgraphError::Options(format!(
                            "{name} is pinned to {} ('{}'), which cannot run it on {:?} {}",
                            targets[p.device].device.name(),
                            p.pattern,
                            class.data.shape,
                            class.data.dtype
                        )));
                    }
                }
                continue;
            }
            nodes.push(tg_planner::Node { class: index[&c], children, source: None, options });
            enodes.push(n.clone());
        }
    }
    let devices = targets
        .iter()
        .map(|t| {
            let info = t.device.info();
            tg_planner::Device { name: info.name, capacity: info.memory_bytes.unwrap_or(u64::MAX / 8).min(u64::MAX / 8), cache_budget: 0 }
        })
        .collect();
    let roots = roots.iter().map(|r| index[&egraph.find(*r)]).collect();
    let problem = tg_planner::Problem { devices, home: 0, links: links.to_vec(), classes, nodes, roots };
    Ok((problem, ids, enodes))
}

impl Extractor for PlacingExtractor<'_> {
    fn name(&self) -> String {
        let names: Vec<String> = self.targets.iter().map(|t| format!("{} ({})", t.device.name(), t.cost.name())).collect();
        format!("planner over {}", names.join(" + "))
    }

    fn extract(&self, egraph: &TEGraph, roots: &[Id]) -> Result<Extraction, EgraphError> {
        let (problem, ids, enodes) = planning_problem_on(egraph, roots, &self.targets, &self.links, &self.pins, &self.state_devices, self.quantize_activations)?;
        let t0 = std::time::Instant::now();
        if let Some(dir) = std::env::var_os("TG_DUMP_PLANNING") {
            let path = std::path::Path::new(&dir).join(format!("problem-{}dev-{}-{}.json", problem.devices.len(), problem.classes.len(), problem.nodes.len()));
            if let Ok(text) = serde_json::to_string(&problem) {
                let _ = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, text));
            }
        }
        // Nothing may go anywhere but home (no other device measured, nothing pinned): the
        // one-device problem, whose makespan is the DAG cost (proven by `tg-extract`).
        if problem.nodes.iter().all(|n| n.options.iter().all(|o| o.device == 0)) {
            let Some((out, (home, back))) = home_only(&problem) else {
                return Err(EgraphError::Options(format!("{} cannot run every op of the graph", problem.devices[0].name)));
            };
            return self.finish(egraph, &home, &ids, &enodes, Some(&back), out, 1, t0);
        }
        // Two searches, the better plan kept:
        // 1. decomposed: the node choice of the relaxed one-device problem (every node at its
        //    fastest allowed device, copies free: DAG-cost extraction with a proven bound),
        //    then the planner places and orders exactly those nodes (half the budget);
        // 2. joint: the planner over every node, device and order (the rest).
        let relaxed = relax(&problem);
        let rel = tg_planner::solve(&relaxed, &PlannerExtractor::default().limits);
        let mut limits = self.limits.clone();
        limits.time = self.limits.time / 2;
        let decomposed = rel.best.as_ref().map(|b| {
            let (restricted, back) = restrict(&problem, &b.to_plan().choice);
            (tg_planner::solve(&restricted, &limits), restricted, back)
        });
        limits.time = self.limits.time.saturating_sub(t0.elapsed());
        let joint = tg_planner::solve(&problem, &limits);
        // The relaxation's bound is one on the total work of any plan; the devices share it
        // at best evenly.
        let relaxed_bound = rel.lower_bound / problem.devices.len() as u64;
        // Running several queues costs the host what the model does not see (a thread per
        // device, hand-offs at every crossing; a device sharing the host's cores, as PoCL
        // does, slows the CPU beside it): a placed plan must beat the home-only plan by
        // HOME_MARGIN of its makespan, else the home-only plan is kept.
        let placed = [decomposed.as_ref().and_then(|d| d.0.best.as_ref().map(|b| b.makespan())), joint.best.as_ref().map(|b| b.makespan())].into_iter().flatten().min();
        if let (Some(m), Some((home, home_problem))) = (placed, home_only(&problem)) {
            if let Some(h) = home.best.as_ref().map(|b| b.makespan()) {
                if m as f64 > h as f64 * (1.0 - HOME_MARGIN) {
                    let mut home = home;
                    home.nodes += joint.nodes + rel.nodes;
                    // The bound stays the multi-device problem's.
                    home.lower_bound = joint.lower_bound.max(relaxed_bound).min(h);
                    return self.finish(egraph, &home_problem.0, &ids, &enodes, Some(&home_problem.1), home, 4, t0);
                }
            }
        }
        match decomposed {
            Some((d, restricted, back)) if d.best.as_ref().is_some_and(|b| joint.best.as_ref().is_none_or(|j| b.makespan() < j.makespan())) => {
                let mut d = d;
                d.lower_bound = joint.lower_bound.max(relaxed_bound).min(d.best.as_ref().map_or(u64::MAX, |b| b.makespan()));
                d.nodes += joint.nodes + rel.nodes;
                self.finish(egraph, &restricted, &ids, &enodes, Some(&back), d, 2, t0)
            }
            _ => {
                let mut j = joint;
                j.lower_bound = j.lower_bound.max(relaxed_bound).min(j.best.as_ref().map_or(u64::MAX, |b| b.makespan()));
                self.finish(egraph, &problem, &ids, &enodes, None, j, 3, t0)
            }
        }
    }
}

impl PlacingExtractor<'_> {
    /// The extraction and placement of the planner's outcome on `problem` (whose nodes map
    /// to `enodes` through `back` when it is a restriction). `how`: 1 one device, 2
    /// decomposed, 3 joint.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        egraph: &TEGraph,
        problem: &tg_planner::Problem,
        ids: &[Id],
        enodes: &[crate::ENode],
        back: Option<&[usize]>,
        out: tg_planner::Outcome,
        how: u8,
        t0: std::time::Instant,
    ) -> Result<Extraction, EgraphError> {
        let Some(best) = &out.best else {
            return Err(EgraphError::Options(match out.status {
                tg_planner::Status::Infeasible => infeasible_reason(problem),
                s => format!("the planner found no plan within its budget ({s:?})"),
            }));
        };
        let plan = best.to_plan();
        tg_planner::validate(problem, &plan).map_err(|e| EgraphError::Internal(e.to_string()))?;
        let node = |n: usize| back.map_or(n, |b| b[n]);
        let mut choice: crate::Choice = plan.choice.iter().map(|(&c, &n)| (ids[c], enodes[node(n)].clone())).collect();
        // A state's update stands for the state in the problem: the state's class gets its
        // `Op::State` node back.
        let states: Vec<Id> = choice.values().filter(|n| matches!(n.op, Op::StoreRows { .. })).filter_map(|n| n.children.first().map(|&c| egraph.find(c))).collect();
        for c in states {
            if let Some(st) = egraph[c].nodes.iter().find(|m| matches!(m.op, Op::State { .. })) {
                choice.entry(c).or_insert_with(|| st.clone());
            }
        }
        let mut placement = Placement { makespan: best.makespan(), ..Default::default() };
        placement.notes.push(
            match how {
                1 => "one device can run anything: DAG-cost extraction",
                4 => "kept home: no placed plan beat the home-only plan by the 5% a multi-device run must win",
                2 => "decomposed search won: the relaxed extraction's nodes, placed by the planner",
                _ => "joint search won: nodes, devices and order searched together",
            }
            .to_string(),
        );
        for s in &plan.steps {
            match *s {
                tg_planner::result::PlanStep::Kernel { class, device, start, end, .. } => {
                    placement.classes.insert(ids[class], Placed { device, start, end });
                }
                tg_planner::result::PlanStep::Copy { class, from, to, start, end } => placement.copies.push((ids[class], from, to, Placed { device: to, start, end })),
            }
        }
        *self.placement.borrow_mut() = Some(placement);
        Ok(Extraction {
            choice,
            cost: best.makespan() as f64,
            proof: Some(Proof {
                lower_bound: out.lower_bound as f64,
                optimal: out.lower_bound >= best.makespan(),
                nodes: out.nodes,
                first_plan_ms: out.first_plan.map_or(0.0, |d| d.as_secs_f64() * 1e3),
                millis: t0.elapsed().as_secs_f64() * 1e3,
            }),
        })
    }
}

/// Share of the home-only makespan a placed plan must save to be taken.
pub const HOME_MARGIN: f64 = 0.05;

/// The home-only problem (every node's options on device 0; nodes without one dropped) and
/// the planner's answer to it, with the index in `p` of every node kept; `None` when some
/// class has no node home can run.
fn home_only(p: &tg_planner::Problem) -> Option<(tg_planner::Outcome, (tg_planner::Problem, Vec<usize>))> {
    let mut r = p.clone();
    r.devices.truncate(1);
    r.links.clear();
    r.nodes.clear();
    let mut back = Vec::new();
    let mut has = vec![false; p.classes.len()];
    for (i, n) in p.nodes.iter().enumerate() {
        let options: Vec<tg_planner::ImplOption> = n.options.iter().filter(|o| o.device == 0).cloned().collect();
        if n.source.is_some() || !options.is_empty() {
            r.nodes.push(tg_planner::Node { options, ..n.clone() });
            back.push(i);
            has[n.class] = true;
        }
    }
    if has.iter().any(|&h| !h) {
        return None;
    }
    let out = tg_planner::solve(&r, &PlannerExtractor::default().limits);
    Some((out, (r, back)))
}

/// The one-device relaxation of a multi-device problem: every node at its fastest option,
/// copies free. Its makespan (the DAG cost) is a lower bound on the total work of any plan,
/// not on the multi-device makespan; its node choice is a good one to place.
fn relax(p: &tg_planner::Problem) -> tg_planner::Problem {
    let mut r = p.clone();
    r.devices.truncate(1);
    r.links.clear();
    for n in r.nodes.iter_mut() {
        if let Some(o) = n.options.iter().min_by_key(|o| o.time).cloned() {
            n.options = vec![tg_planner::ImplOption { device: 0, ..o }];
        }
    }
    r
}

/// `p` with only the chosen node of every class in `choice` (others keep all their nodes),
/// and the index in `p` of every node kept.
fn restrict(p: &tg_planner::Problem, choice: &std::collections::BTreeMap<usize, usize>) -> (tg_planner::Problem, Vec<usize>) {
    let mut r = p.clone();
    r.nodes.clear();
    let mut back = Vec::new();
    for (i, n) in p.nodes.iter().enumerate() {
        if choice.get(&n.class).is_none_or(|&c| c == i) {
            r.nodes.push(n.clone());
            back.push(i);
        }
    }
    (r, back)
}

/// Why a multi-device problem has no plan, in the user's terms: the largest single kernel
/// footprint against each device's memory.
fn infeasible_reason(p: &tg_planner::Problem) -> String {
    let mut worst: Vec<u64> = vec![0; p.devices.len()];
    for n in &p.nodes {
        for o in &n.options {
            let bytes: u64 = p.classes[n.class].bytes + n.children.iter().map(|&c| p.classes[c].bytes).sum::<u64>();
            worst[o.device] = worst[o.device].max(bytes);
        }
    }
    let parts: Vec<String> = p.devices.iter().zip(&worst).map(|(d, w)| format!("{}: {} bytes of memory, kernels need up to {w} bytes at once", d.name, d.capacity)).collect();
    format!("no plan fits the devices' memory ({})", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A problem whose only kernel needs more memory than either device has: the planner
    /// proves it infeasible and the message names each device's memory and the bytes needed.
    #[test]
    fn infeasible_memory_is_stated_with_devices_and_bytes() {
        let p = tg_planner::Problem {
            devices: vec![
                tg_planner::Device { name: "cpu".into(), capacity: 1000, cache_budget: 0 },
                tg_planner::Device { name: "opencl:0".into(), capacity: 1500, cache_budget: 0 },
            ],
            home: 0,
            links: vec![tg_planner::Link { from: 0, to: 1, latency: 10, bytes_per_us: 1000 }, tg_planner::Link { from: 1, to: 0, latency: 10, bytes_per_us: 1000 }],
            classes: vec![tg_planner::Class { bytes: 800, cacheable: false }, tg_planner::Class { bytes: 1200, cacheable: false }],
            nodes: vec![
                tg_planner::Node { class: 0, children: vec![], source: Some(tg_planner::Source::Input), options: vec![] },
                tg_planner::Node {
                    class: 1,
                    children: vec![0],
                    source: None,
                    options: vec![
                        tg_planner::ImplOption { kernel: "k".into(), device: 0, time: 5, alias: false },
                        tg_planner::ImplOption { kernel: "k".into(), device: 1, time: 2, alias: false },
                    ],
                },
            ],
            roots: vec![1],
        };
        let out = tg_planner::solve(&p, &tg_planner::Limits::default());
        assert_eq!(out.status, tg_planner::Status::Infeasible, "{:?}", out.status);
        let why = infeasible_reason(&p);
        assert!(why.contains("cpu: 1000 bytes") && why.contains("opencl:0: 1500 bytes") && why.contains("2000 bytes"), "{why}");
    }
}
