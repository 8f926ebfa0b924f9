//! Extraction: one node per e-class, chosen by a cost model.
//!
//! [`Extractor`] is the interface (the planner's search will implement it);
//! [`GreedyDagExtractor`] is the current implementation and [`KernelCost`] the current cost
//! estimate.

use crate::convert::Choice;
use crate::{ENode, EgraphError, Operand, TEGraph};
use egg::Id;
use std::collections::HashMap;
use tg_ir::{DType, Graph, Op};

/// Estimated cost of running one node.
pub trait CostModel {
    /// A short name for reports.
    fn name(&self) -> String;
    /// Cost of `op` producing `out` from operands `ins` (shape and dtype each). Must be
    /// non-negative, and positive for every op with operands.
    fn node_cost(&self, op: &Op, out: (&[usize], DType), ins: &[Operand]) -> f64;
}

/// Kernel cost estimate in nanoseconds: a launch overhead, plus the bytes the node's kernel
/// moves over a bandwidth, plus its flops over a throughput — the kernel and its work are the
/// registry's (`tg_runtime::select`, `tg_runtime::work`), the same the measured cost model
/// and the profile's fallbacks use. Views (reshape, expand, slice, permute) cost a nominal
/// amount — a permute slightly more, as it usually makes its reader copy. Fused ops read and
/// write their operands once, so they come out cheaper than their parts.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct KernelCost {
    /// Fixed cost of one kernel launch (ns).
    pub launch_ns: f64,
    /// Memory bandwidth (bytes per ns = GB/s).
    pub bytes_per_ns: f64,
    /// Arithmetic throughput (flops per ns = GFLOP/s).
    pub flops_per_ns: f64,
    /// Cost of a view (ns).
    pub view_ns: f64,
}

impl Default for KernelCost {
    fn default() -> Self {
        KernelCost { launch_ns: 500.0, bytes_per_ns: 20.0, flops_per_ns: 50.0, view_ns: 1.0 }
    }
}

fn numel(s: &[usize]) -> f64 {
    s.iter().product::<usize>() as f64
}

/// Bytes of a tensor of shape `s` and dtype `d` (quantized rows at their block size).
pub(crate) fn bytes(s: &[usize], d: DType) -> f64 {
    match d {
        DType::Quant(t) => {
            let rows: usize = s[..s.len().saturating_sub(1)].iter().product();
            (rows * t.row_bytes(*s.last().unwrap_or(&0)).unwrap_or(0)) as f64
        }
        DType::F32 | DType::I32 => 4.0 * numel(s),
        DType::Bool => numel(s),
    }
}

impl CostModel for KernelCost {
    fn name(&self) -> String {
        "kernel-cost".into()
    }

    fn node_cost(&self, op: &Op, (os, od): (&[usize], DType), ins: &[Operand]) -> f64 {
        match op {
            Op::Input { .. } | Op::Weight { .. } | Op::State { .. } => 0.0,
            Op::Constant { .. } => self.launch_ns * 0.1,
            Op::Reshape | Op::Expand | Op::Slice { .. } => self.view_ns,
            Op::Permute { .. } => 2.0 * self.view_ns,
            // Every other op is the kernel lowering gives it (`tg_runtime::select`), sized by
            // the work formula all cost models share (`tg_runtime::work`).
            _ => match tg_runtime::select(op, ins, os, false) {
                Some((k, layouts)) => {
                    let w = tg_runtime::work(&k, &layouts, &tg_runtime::Layout::contiguous(os, od));
                    self.launch_ns + w.bytes / self.bytes_per_ns + w.flops / self.flops_per_ns
                }
                // No kernel implements it on these operands (the fusion guards keep such
                // nodes out): never the cheaper choice.
                None => f64::MAX / 1e6,
            },
        }
    }
}

/// The cost of a whole graph (its live nodes) under a model.
pub fn graph_cost(g: &Graph, model: &dyn CostModel) -> f64 {
    let live = g.live_mask();
    g.nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| live[*i])
        .map(|(_, n)| {
            let ins: Vec<Operand> =
                n.inputs.iter().map(|&x| Operand { shape: &g.nodes[x].shape, dtype: g.nodes[x].dtype, weight: matches!(g.nodes[x].op, Op::Weight { .. }) }).collect();
            model.node_cost(&n.op, (&n.shape, n.dtype), &ins)
        })
        .sum()
}

/// The result of extraction: one node per class reachable from the roots.
#[derive(Debug, Clone)]
pub struct Extraction {
    /// The chosen node of every reachable class (keys are canonical class ids).
    pub choice: Choice,
    /// Total cost of the chosen DAG (each class paid once).
    pub cost: f64,
    /// What the extractor proved about it, if it searches with bounds.
    pub proof: Option<Proof>,
}

/// A searching extractor's account of its result.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Proof {
    /// Proven lower bound on the cost of any extraction.
    pub lower_bound: f64,
    /// The cost equals the bound.
    pub optimal: bool,
    /// Search nodes explored.
    pub nodes: u64,
    /// Time to the first complete choice (ms).
    pub first_plan_ms: f64,
    /// Total search time (ms).
    pub millis: f64,
}

/// Picks one node per e-class so that the roots are computed at low cost.
pub trait Extractor {
    /// A short name for reports.
    fn name(&self) -> String;
    /// Chooses nodes for every class reachable from `roots`; the choice must be acyclic.
    fn extract(&self, egraph: &TEGraph, roots: &[Id]) -> Result<Extraction, EgraphError>;
}

/// DAG-aware greedy extraction.
///
/// 1. Bottom-up greedy: every class takes the node minimising its own cost plus the costs
///    of its (distinct) operand classes, to a fixpoint. This tree cost counts a shared
///    operand once per path, so it is only a starting point.
/// 2. Refinement under the true DAG cost (every reachable class paid once): for each
///    reachable class, each alternative node is tried; the switch is kept when the total
///    DAG cost drops (classes that become unreachable stop being paid, newly reachable
///    ones start). Passes repeat until nothing improves (at most `max_passes`).
///
/// This is what makes the second reader of a fused intermediate count: keeping the
/// unfused form is free where the intermediate is computed anyway.
#[derive(Debug, Clone)]
pub struct GreedyDagExtractor<C> {
    /// The cost model.
    pub cost: C,
    /// Maximum refinement passes.
    pub max_passes: usize,
}

impl<C: CostModel> GreedyDagExtractor<C> {
    /// An extractor using `cost`.
    pub fn new(cost: C) -> Self {
        GreedyDagExtractor { cost, max_passes: 8 }
    }
}

impl Default for GreedyDagExtractor<KernelCost> {
    fn default() -> Self {
        Self::new(KernelCost::default())
    }
}

/// Dense view of the e-graph for extraction.
struct Dense {
    ids: Vec<Id>,
    /// Per class, per node: own cost and distinct operand classes (dense indices).
    nodes: Vec<Vec<(f64, Vec<usize>)>>,
}

impl Dense {
    fn new(eg: &TEGraph, model: &dyn CostModel) -> Dense {
        let ids: Vec<Id> = eg.classes().map(|c| c.id).collect();
        let index: HashMap<Id, usize> = ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        let nodes = ids
            .iter()
            .map(|&c| {
                let class = &eg[c];
                class
                    .nodes
                    .iter()
                    .map(|n| {
                        let ins = crate::operands(eg, n);
                        let own = model.node_cost(&n.op, (&class.data.shape, class.data.dtype), &ins);
                        let mut kids: Vec<usize> = n.children.iter().map(|&ch| index[&eg.find(ch)]).collect();
                        kids.sort_unstable();
                        kids.dedup();
                        (own, kids)
                    })
                    .collect()
            })
            .collect();
        Dense { ids, nodes }
    }
}

/// Reference counts of the classes in the chosen DAG, with an undo log.
struct Dag<'a> {
    d: &'a Dense,
    choice: Vec<usize>,
    refs: Vec<u32>,
    total: f64,
    log: Vec<(usize, u32)>,
}

impl Dag<'_> {
    fn own(&self, c: usize) -> f64 {
        self.d.nodes[c][self.choice[c]].0
    }

    fn add_ref(&mut self, c: usize) {
        let mut stack = vec![c];
        while let Some(c) = stack.pop() {
            self.log.push((c, self.refs[c]));
            self.refs[c] += 1;
            if self.refs[c] == 1 {
                self.total += self.own(c);
                stack.extend(self.d.nodes[c][self.choice[c]].1.iter().copied());
            }
        }
    }

    fn remove_ref(&mut self, c: usize) {
        let mut stack = vec![c];
        while let Some(c) = stack.pop() {
            self.log.push((c, self.refs[c]));
            self.refs[c] -= 1;
            if self.refs[c] == 0 {
                self.total -= self.own(c);
                stack.extend(self.d.nodes[c][self.choice[c]].1.iter().copied());
            }
        }
    }

    /// True when `target` is reachable from the operands of node `j` of class `c`
    /// following the current choices (so choosing it would make a cycle).
    fn reaches(&self, c: usize, j: usize, target: usize, seen: &mut [u32], stamp: u32) -> bool {
        let mut stack: Vec<usize> = self.d.nodes[c][j].1.clone();
        while let Some(x) = stack.pop() {
            if x == target {
                return true;
            }
            if seen[x] == stamp {
                continue;
            }
            seen[x] = stamp;
            stack.extend(self.d.nodes[x][self.choice[x]].1.iter().copied());
        }
        false
    }
}

impl<C: CostModel> Extractor for GreedyDagExtractor<C> {
    fn name(&self) -> String {
        format!("greedy-dag({})", self.cost.name())
    }

    fn extract(&self, egraph: &TEGraph, roots: &[Id]) -> Result<Extraction, EgraphError> {
        let d = Dense::new(egraph, &self.cost);
        let n = d.ids.len();
        let index: HashMap<Id, usize> = d.ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();

        // Phase 1: bottom-up greedy on tree costs, to a fixpoint. Costs only decrease and
        // every node with operands costs more than each operand, so the choice is acyclic.
        const CAP: f64 = 1e300;
        let mut best = vec![f64::INFINITY; n];
        let mut choice = vec![usize::MAX; n];
        let mut changed = true;
        while changed {
            changed = false;
            for c in 0..n {
                for (j, (own, kids)) in d.nodes[c].iter().enumerate() {
                    let mut t = *own;
                    for &k in kids {
                        t += best[k];
                    }
                    let t = t.min(CAP);
                    if t < best[c] {
                        best[c] = t;
                        choice[c] = j;
                        changed = true;
                    }
                }
            }
        }
        let roots: Vec<usize> = roots.iter().map(|r| index[&egraph.find(*r)]).collect();
        if let Some(&r) = roots.iter().find(|&&r| choice[r] == usize::MAX) {
            return Err(EgraphError::Internal(format!("class {} has no finite-cost node", d.ids[r])));
        }

        // Phase 2: refinement under DAG costs.
        let mut dag = Dag { d: &d, choice, refs: vec![0; n], total: 0.0, log: Vec::new() };
        for &r in &roots {
            dag.add_ref(r);
        }
        let mut seen = vec![0u32; n];
        let mut stamp = 0u32;
        for _ in 0..self.max_passes {
            let mut improved = false;
            for c in 0..n {
                if dag.refs[c] == 0 || d.nodes[c].len() < 2 {
                    continue;
                }
                for j in 0..d.nodes[c].len() {
                    let old = dag.choice[c];
                    if j == old || dag.refs[c] == 0 || d.nodes[c][j].1.iter().any(|&k| dag.choice[k] == usize::MAX) {
                        continue;
                    }
                    stamp += 1;
                    if dag.reaches(c, j, c, &mut seen, stamp) {
                        continue;
                    }
                    let before = dag.total;
                    dag.log.clear();
                    dag.choice[c] = j;
                    dag.total += d.nodes[c][j].0 - d.nodes[c][old].0;
                    for &k in &d.nodes[c][j].1 {
                        dag.add_ref(k);
                    }
                    for &k in &d.nodes[c][old].1 {
                        dag.remove_ref(k);
                    }
                    if dag.total < before - 1e-9 * before.abs().max(1.0) {
                        improved = true;
                    } else {
                        while let Some((k, r)) = dag.log.pop() {
                            dag.refs[k] = r;
                        }
                        dag.choice[c] = old;
                        dag.total = before;
                    }
                }
            }
            if !improved {
                break;
            }
        }

        let mut out = Choice::new();
        let mut cost = 0.0;
        for c in 0..n {
            if dag.refs[c] > 0 {
                out.insert(d.ids[c], egraph[d.ids[c]].nodes[dag.choice[c]].clone());
                cost += dag.own(c);
            }
        }
        Ok(Extraction { choice: out, cost, proof: None })
    }
}

/// The cost of the DAG of `choice` reachable from `roots` under `model`.
pub fn choice_cost(egraph: &TEGraph, roots: &[Id], choice: &Choice, model: &dyn CostModel) -> f64 {
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<Id> = roots.iter().map(|&r| egraph.find(r)).collect();
    let mut total = 0.0;
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        let Some(n): Option<&ENode> = choice.get(&c) else {
            continue;
        };
        let ins = crate::operands(egraph, n);
        total += model.node_cost(&n.op, (&egraph[c].data.shape, egraph[c].data.dtype), &ins);
        stack.extend(n.children.iter().map(|&ch| egraph.find(ch)));
    }
    total
}
