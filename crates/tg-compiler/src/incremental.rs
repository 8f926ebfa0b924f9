//! `incremental`: from a model written as a pure function of a whole sequence, derive the
//! graph of one run that is given only the rows appended since the previous run, and
//! decide which intermediate values to keep between runs so that the old rows are never
//! recomputed. For a causal transformer this derives the KV cache (and, with it, reuse of
//! a shared prompt prefix): the model definition has no cache code.
//!
//! # The model of change
//! The full graph is built for a sequence of `C` rows (the *capacity*). The sequence input
//! (e.g. `tokens`) grows by appending: a run sees rows `0..m`, of which rows `0..pos` are
//! unchanged since the previous run and rows `pos..m` (`k = m − pos` of them) are new.
//! `pos` is a run-time input ([`POS_INPUT`]), so one derived graph serves every position:
//! a one-token plan is compiled once, not once per length. Axes of extent `C` that carry
//! the sequence are found by a forward analysis (from the sequence input, and from iotas
//! over positions).
//!
//! # Demands and rules
//! Every value is asked for in one of two ways per sequence axis: its **new** rows
//! (`pos..m`, extent `k`) or **all** rows (extent `C`, of which `0..m` are meaningful). A
//! demand is rewritten into operand demands by one rule per op kind ([`RULES`]):
//! row-wise ops need the same rows of their operands, a product contracting the sequence
//! needs all rows of one side, positions become `iota + pos`, the last-row slice becomes
//! the last new row. A demand for *all* rows of a value that depends on the input can be
//! met two ways, and this is the decision the pass makes with the kernel cost model:
//! - **cache**: keep the value in a state ([`tg_ir::Op::State`]) across runs and append its
//!   new rows in place ([`tg_ir::Op::StoreRows`] at `pos`), or
//! - **recompute**: apply the op's rule to all rows, which demands all rows of its operands.
//!
//! The cheapest choice is taken for each demand (a dynamic programme over the demands,
//! which form a DAG); if the chosen states exceed the memory budget, the state whose bytes
//! buy the least time is dropped and the choice redone, until they fit.
//!
//! # Why rows past `m` are harmless
//! A demand for all rows computes `C` rows, and rows `m..C` hold zeros or rows of an older,
//! longer sequence: finite values that must not reach a result. They only meet the
//! results through products and reductions over a sequence axis, and every such product
//! or reduction is checked to be *causal*: its operand is proven, from how it is built, to
//! be −∞ (for max) or 0 (for sums and products) wherever the column is past the row (a
//! `where(j ≤ i, x, −∞)` mask, then `+`, `−`, `exp`, `·`, `÷`). A graph where this cannot be
//! shown (a mean over the sequence, a bidirectional mask) is refused with an error.
use crate::CompileError;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tg_egraph::{CostModel, Operand};
use tg_ir::{BinaryOp, CmpOp, DType, Graph, GraphBuilder, NodeId, Op, ReduceOp, Tensor, UnaryOp};

/// Name of the run-time input holding `pos`, the index of the first new row (i32, `[1]`).
pub const POS_INPUT: &str = "tg.pos";

/// The rewrite rules of the pass, with their algebra (`N` = the new rows `pos..pos+k`, `A`
/// = all rows `0..C`, `[r]` = rows `r` of a value along each sequence axis).
pub const RULES: &[(&str, &str)] = &[
    ("static", "x[r] = x when x depends on no sequence axis (weights, constants, tables)"),
    ("input-new", "tokens[N] = the run's input of k rows"),
    ("iota-shift", "iota[N] = iota_k + pos; iota[A] = iota_C"),
    ("rowwise", "f(x, y)[r] = f(x[r], y[r]) for elementwise f (broadcast axes stay whole)"),
    ("reduce-row", "reduce_d(x)[r] = reduce_d(x[r]) over a non-sequence axis d"),
    ("reduce-causal", "max_j(x)[i] = max_j(x[i, A]) and sum_j(x)[i] = sum_j(x[i, A]) when x is −∞ / 0 for j > i"),
    ("matmul-rows", "(a·b)[i, j] = a[i]·b[j] over a contraction that is not a sequence axis"),
    ("matmul-causal", "(p·v)[i] = p[i, A]·v[A] when p is 0 for j > i"),
    ("view-rows", "reshape/permute/expand/slice/concat(x)[r] = same op(x[r']) with the sequence axis mapped"),
    ("last-row", "x[C−1..C] = x[N][k−1..k]: the last row of the sequence is the last new row"),
    ("gather-rows", "table[ids][r] = table[ids[r]]"),
    ("cache", "x[A] = store_rows(state_x, x[N], pos): rows 0..pos kept from earlier runs"),
];

/// What the caller says about the run and the memory the pass may use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IncrementalSpec {
    /// The sequence input; its axis 0 is the sequence, and its extent is the capacity.
    pub input: String,
    /// Rows appended by each run (`k`).
    pub new_rows: usize,
    /// Most bytes the kept states may take (`None`: no limit).
    pub budget: Option<usize>,
    /// Keep exactly these states (names from an earlier derivation of the same model at any
    /// `k`: plans of one session must share their states); `None` lets the pass choose.
    pub states: Option<BTreeSet<String>>,
    /// With `states: None`, offer both ways of every all-rows demand that can be met either
    /// way (keep a state, or recompute), as [`Op::Alternatives`], for the compiler's
    /// planner to choose under measured costs and each device's cache budget
    /// (`CompileOptions::cache_budget`; `budget` is then not applied). The pass's own
    /// choice, without a budget, is each first way (what the graph computes when nothing
    /// chooses).
    pub alternatives: bool,
}

/// One value kept between runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CachedValue {
    /// State name (`cache.n<node>`).
    pub name: String,
    /// The node of the full graph whose value it holds.
    pub node: NodeId,
    /// That node's op, for reports.
    pub op: String,
    /// Shape of the state (the value at capacity `C`).
    pub shape: Vec<usize>,
    /// The sequence axis rows are appended along.
    pub axis: usize,
    /// Bytes.
    pub bytes: usize,
}

/// The derived graph and what the pass decided.
#[derive(Debug, Clone)]
pub struct Incremental {
    /// Inputs: the sequence input with `k` rows, [`POS_INPUT`], the full graph's other
    /// inputs; outputs: the full graph's outputs restricted to the new rows.
    pub graph: Graph,
    /// `C`.
    pub capacity: usize,
    /// `k`.
    pub new_rows: usize,
    /// The kept values, in node order: with alternatives, those of the first ways (the
    /// pass's own choice; the compiler's is in its plan's state buffers).
    pub states: Vec<CachedValue>,
    /// Every value offered as a state (`states` and the states of the other ways), in node
    /// order; `states` when nothing is offered both ways.
    pub candidates: Vec<CachedValue>,
    /// All-rows demands offered both ways ([`IncrementalSpec::alternatives`]).
    pub alternatives: usize,
    /// Demands for all rows of a value that depends on the input met by recomputing them.
    pub recomputed: usize,
    /// Times each rule was applied.
    pub rules: BTreeMap<&'static str, usize>,
    /// Estimated cost of one run (the cost model's units).
    pub cost: f64,
}

impl Incremental {
    /// Total bytes of the kept states.
    pub fn state_bytes(&self) -> usize {
        self.states.iter().map(|s| s.bytes).sum()
    }

    /// The state names (for [`IncrementalSpec::states`] of the session's other plans).
    pub fn state_names(&self) -> BTreeSet<String> {
        self.states.iter().map(|s| s.name.clone()).collect()
    }

    /// One line for reports.
    pub fn summary(&self) -> String {
        let rules: Vec<String> = self.rules.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        let offered =
            if self.alternatives > 0 { format!(", {} offered both ways to the planner ({} candidate states)", self.alternatives, self.candidates.len()) } else { String::new() };
        format!(
            "k={} of capacity {}: {} states ({} KiB), {} all-row demands recomputed{offered}; rules [{}]",
            self.new_rows,
            self.capacity,
            self.states.len(),
            self.state_bytes() / 1024,
            self.recomputed,
            rules.join(" ")
        )
    }
}

/// Per-axis demand: 0 = not a sequence axis, [`NEW`] or [`ALL`].
type Req = Vec<u8>;
const NEW: u8 = 1;
const ALL: u8 = 2;

/// Zero pattern of a value's last two axes (rows `i`, columns `j`, both sequence axes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tri {
    /// −∞ wherever `j > i`.
    NegInfAbove,
    /// 0 wherever `j > i`.
    ZeroAbove,
}

/// What the forward analysis knows of a node.
#[derive(Debug, Clone, Default)]
struct Info {
    /// Which axes carry the sequence.
    seq: Vec<bool>,
    /// Depends on the sequence input (not only on positions).
    dep: bool,
    tri: Option<Tri>,
    /// For a reshape: (input axis, output axis) of each sequence axis.
    reshape_map: Vec<(usize, usize)>,
    /// Why no demand can be derived for this node (reported only if it is demanded).
    bad: Option<String>,
}

fn err(msg: String) -> CompileError {
    CompileError::Incremental(msg)
}

/// True if `cond` (a bool value whose last two axes are rows `i` and columns `j`) is false
/// wherever `j > i`.
fn implies_causal(g: &Graph, cond: NodeId) -> bool {
    let n = &g.nodes[cond];
    // An iota along the node's column / row axis, aligned from the right with `n`.
    let iota_axis = |x: NodeId| -> Option<isize> {
        match &g.nodes[x].op {
            Op::Iota { axis } => Some(*axis as isize - g.nodes[x].shape.len() as isize),
            _ => None,
        }
    };
    match &n.op {
        Op::Compare(c) if n.shape.len() >= 2 => {
            let (a, b) = (iota_axis(n.inputs[0]), iota_axis(n.inputs[1]));
            matches!((c, a, b), (CmpOp::Le | CmpOp::Lt, Some(-1), Some(-2)) | (CmpOp::Ge | CmpOp::Gt, Some(-2), Some(-1)))
        }
        Op::Binary(BinaryOp::And) => implies_causal(g, n.inputs[0]) || implies_causal(g, n.inputs[1]),
        _ => false,
    }
}

fn is_neg_inf(g: &Graph, x: NodeId) -> bool {
    matches!(g.nodes[x].op, Op::Constant { bits } if f64::from_bits(bits) == f64::NEG_INFINITY)
}

/// The forward analysis: sequence axes, input dependence, causal zero patterns.
fn analyse(g: &Graph, input: &str, cap: usize) -> Result<Vec<Info>, CompileError> {
    let mut info: Vec<Info> = Vec::with_capacity(g.nodes.len());
    for n in &g.nodes {
        let r = n.shape.len();
        let mut i = Info { seq: vec![false; r], ..Default::default() };
        // Axis `j` of operand `x` aligned from the right with an output of rank `r`.
        let aligned = |info: &[Info], x: NodeId, out: &mut Vec<bool>, bad: &mut Option<String>| {
            let xs = &g.nodes[x].shape;
            let off = r - xs.len().min(r);
            for (j, &s) in info[x].seq.iter().enumerate() {
                if s && off + j < r {
                    out[off + j] = true;
                }
            }
            // An operand with extent C on a sequence axis of the output that it does not
            // carry as a sequence: ambiguous (a feature axis as long as the capacity).
            for (j, &d) in xs.iter().enumerate() {
                if d == cap && !info[x].seq[j] && off + j < r {
                    *bad = Some(format!("axis {j} of node {x} has the capacity's extent {cap} but does not carry the sequence; choose another capacity"));
                }
            }
        };
        match &n.op {
            Op::Input { name } if name == input => {
                if n.shape.first() != Some(&cap) {
                    return Err(err(format!("sequence input '{input}' has shape {:?}; its axis 0 must be the capacity {cap}", n.shape)));
                }
                i.seq[0] = true;
                i.dep = true;
            }
            Op::Input { .. } | Op::Weight { .. } | Op::Constant { .. } => {}
            Op::State { .. } | Op::StoreRows { .. } => return Err(err("the graph already keeps state; derive from the pure full-sequence model".into())),
            Op::Iota { .. } => {
                for (j, &d) in n.shape.iter().enumerate() {
                    i.seq[j] = d == cap;
                }
            }
            Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Cast { .. } | Op::Expand => {
                let mut seq = vec![false; r];
                let mut bad = None;
                for &x in &n.inputs {
                    aligned(&info, x, &mut seq, &mut bad);
                }
                // An axis is a sequence axis of the output only if some operand carries it; an
                // expand must not create one.
                if matches!(n.op, Op::Expand) && seq.iter().zip(&n.shape).any(|(s, d)| *d == cap && !*s) {
                    bad = Some("expand to the capacity's extent along a new axis".into());
                }
                i.seq = seq;
                i.bad = bad;
                let t = |x: usize| info[n.inputs[x]].tri;
                let last2 = |x: usize| {
                    let s = &info[n.inputs[x]].seq;
                    s.len() >= 2 && s[s.len() - 1] && s[s.len() - 2]
                };
                i.tri = match &n.op {
                    Op::Where if is_neg_inf(g, n.inputs[2]) && implies_causal(g, n.inputs[0]) => Some(Tri::NegInfAbove),
                    Op::Binary(BinaryOp::Add) if (t(0) == Some(Tri::NegInfAbove) && last2(0)) || (t(1) == Some(Tri::NegInfAbove) && last2(1)) => Some(Tri::NegInfAbove),
                    Op::Binary(BinaryOp::Sub) if t(0) == Some(Tri::NegInfAbove) && last2(0) => Some(Tri::NegInfAbove),
                    Op::Unary(UnaryOp::Exp) if t(0) == Some(Tri::NegInfAbove) => Some(Tri::ZeroAbove),
                    Op::Binary(BinaryOp::Mul) if (t(0) == Some(Tri::ZeroAbove) && last2(0)) || (t(1) == Some(Tri::ZeroAbove) && last2(1)) => Some(Tri::ZeroAbove),
                    Op::Binary(BinaryOp::Div) if t(0) == Some(Tri::ZeroAbove) && last2(0) => Some(Tri::ZeroAbove),
                    _ => None,
                };
                if i.tri.is_some() && !(r >= 2 && i.seq[r - 1] && i.seq[r - 2]) {
                    i.tri = None;
                }
            }
            Op::Reduce { op, axis } => {
                let x = n.inputs[0];
                i.seq = info[x].seq.clone();
                if info[x].seq[*axis] {
                    i.seq[*axis] = false;
                    let causal = *axis + 1 == r
                        && r >= 2
                        && info[x].seq[r - 2]
                        && matches!((op, info[x].tri), (ReduceOp::Max, Some(Tri::NegInfAbove)) | (ReduceOp::Sum, Some(Tri::ZeroAbove)));
                    if !causal {
                        i.bad = Some(format!("{} over the sequence axis is not causal", n.op.name()));
                    }
                }
            }
            Op::MatMul { transpose_rhs } => {
                let (a, b) = (n.inputs[0], n.inputs[1]);
                let (sa, sb) = (&info[a].seq, &info[b].seq);
                let (ra, rb) = (sa.len(), sb.len());
                // Batch axes aligned from the right of the batch part.
                let nb = r - 2;
                for (j, s) in sa[..ra - 2].iter().enumerate() {
                    if *s {
                        i.seq[nb - (ra - 2) + j] = true;
                    }
                }
                for (j, s) in sb[..rb - 2].iter().enumerate() {
                    if *s {
                        i.seq[nb - (rb - 2) + j] = true;
                    }
                }
                i.seq[r - 2] = sa[ra - 2];
                i.seq[r - 1] = if *transpose_rhs { sb[rb - 2] } else { sb[rb - 1] };
                let contracted_seq = sa[ra - 1] || if *transpose_rhs { sb[rb - 1] } else { sb[rb - 2] };
                if contracted_seq && !(sa[ra - 1] && sa[ra - 2] && info[a].tri == Some(Tri::ZeroAbove)) {
                    i.bad = Some("a product over the sequence axis whose weights are not shown to be causal".into());
                }
            }
            Op::Reshape => {
                let x = n.inputs[0];
                let xs = &g.nodes[x].shape;
                for (p, &s) in info[x].seq.iter().enumerate() {
                    if !s {
                        continue;
                    }
                    let before: usize = xs[..p].iter().product();
                    let q = (0..r).find(|&q| n.shape[q] == xs[p] && n.shape[..q].iter().product::<usize>() == before);
                    match q {
                        Some(q) => {
                            i.seq[q] = true;
                            i.reshape_map.push((p, q));
                        }
                        None => i.bad = Some(format!("reshape {xs:?} -> {:?} splits or merges the sequence axis", n.shape)),
                    }
                }
            }
            Op::Permute { perm } => {
                let x = n.inputs[0];
                i.seq = perm.iter().map(|&p| info[x].seq[p]).collect();
            }
            Op::Slice { axis, start, end } => {
                let x = n.inputs[0];
                i.seq = info[x].seq.clone();
                if info[x].seq[*axis] {
                    i.seq[*axis] = false;
                    if !(*start + 1 == cap && *end == cap) {
                        i.bad = Some(format!("slice {start}..{end} of the sequence axis (only the last row can be taken)"));
                    }
                }
            }
            Op::Concat { axis } => {
                for &x in &n.inputs {
                    for (j, &s) in info[x].seq.iter().enumerate() {
                        i.seq[j] |= s;
                    }
                }
                if i.seq[*axis] {
                    i.bad = Some("concatenation along the sequence axis".into());
                }
            }
            Op::Gather => {
                let (t, ids) = (n.inputs[0], n.inputs[1]);
                if info[t].seq.iter().any(|&s| s) || info[t].dep {
                    i.bad = Some("gather from a table that depends on the sequence".into());
                }
                i.seq[..r - 1].copy_from_slice(&info[ids].seq);
            }
            op if op.is_fused() => return Err(err(format!("fused op {} in the full graph: derive before the rewrite stage", op.name()))),
            op => return Err(err(format!("op {} has no incremental rule", op.name()))),
        }
        i.dep = i.dep || n.inputs.iter().any(|&x| info[x].dep);
        info.push(i);
    }
    Ok(info)
}

/// The demand on each operand of `v` when `req` is demanded of `v`.
fn operand_reqs(g: &Graph, info: &[Info], v: NodeId, req: &Req) -> Vec<Req> {
    let n = &g.nodes[v];
    let r = n.shape.len();
    let align = |x: NodeId| -> Req {
        let xr = g.nodes[x].shape.len();
        let off = r - xr.min(r);
        info[x].seq.iter().enumerate().map(|(j, &s)| if s { req[off + j] } else { 0 }).collect()
    };
    match &n.op {
        Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Cast { .. } | Op::Expand | Op::Concat { .. } => n.inputs.iter().map(|&x| align(x)).collect(),
        Op::Reduce { axis, .. } => {
            let x = n.inputs[0];
            let mut q = req.clone();
            q[*axis] = if info[x].seq[*axis] { ALL } else { 0 };
            vec![q]
        }
        Op::MatMul { transpose_rhs } => {
            let (a, b) = (n.inputs[0], n.inputs[1]);
            let (ra, rb) = (info[a].seq.len(), info[b].seq.len());
            let qa = matmul_side(&info[a].seq, req, r, ra - 2, r - 2, ra - 1);
            let qb = if *transpose_rhs { matmul_side(&info[b].seq, req, r, rb - 2, r - 1, rb - 1) } else { matmul_side(&info[b].seq, req, r, rb - 1, r - 1, rb - 2) };
            vec![qa, qb]
        }
        Op::Reshape => {
            let x = n.inputs[0];
            let mut q: Req = vec![0; g.nodes[x].shape.len()];
            for &(p, o) in &info[v].reshape_map {
                q[p] = req[o];
            }
            vec![q]
        }
        Op::Permute { perm } => {
            let mut q: Req = vec![0; r];
            for (i, &p) in perm.iter().enumerate() {
                q[p] = req[i];
            }
            vec![q]
        }
        Op::Slice { axis, .. } => {
            let x = n.inputs[0];
            let mut q = req.clone();
            if info[x].seq[*axis] {
                q[*axis] = NEW;
            }
            vec![q]
        }
        Op::Gather => {
            let ids = n.inputs[1];
            vec![vec![0; 2], req[..r - 1].iter().copied().zip(&info[ids].seq).map(|(d, &s)| if s { d } else { 0 }).collect()]
        }
        _ => n.inputs.iter().map(|&x| vec![0; g.nodes[x].shape.len()]).collect(),
    }
}

/// Demand on one matmul operand with sequence axes `s`: batch axes aligned from the right
/// of the output's batch part, axis `kept` maps to output axis `out_axis`, the contracted
/// axis is needed whole.
fn matmul_side(s: &[bool], req: &Req, r: usize, kept: usize, out_axis: usize, contracted: usize) -> Req {
    let xr = s.len();
    let mut q: Req = vec![0; xr];
    for j in 0..xr - 2 {
        if s[j] {
            q[j] = req[r - 2 - (xr - 2) + j];
        }
    }
    if s[kept] {
        q[kept] = req[out_axis];
    }
    if s[contracted] {
        q[contracted] = ALL;
    }
    q
}

struct Deriver<'a> {
    g: &'a Graph,
    info: Vec<Info>,
    k: usize,
    model: &'a dyn CostModel,
    /// States that may not be kept (budget), or `Some` set: only these may.
    forbidden: BTreeSet<NodeId>,
    forced: Option<BTreeSet<String>>,
    /// Cost and decision (keep a state?) per demand.
    memo: HashMap<(NodeId, Req), (f64, bool)>,
}

fn state_name(v: NodeId) -> String {
    format!("cache.n{v}")
}

impl Deriver<'_> {
    fn dshape(&self, v: NodeId, req: &Req) -> Vec<usize> {
        self.g.nodes[v].shape.iter().zip(req).map(|(&d, &q)| if q == NEW { self.k } else { d }).collect()
    }

    fn is_static(&self, v: NodeId) -> bool {
        !self.info[v].dep && !self.info[v].seq.iter().any(|&s| s)
    }

    /// Is `(v, req)` the kind of demand a state can meet (all rows along one sequence axis
    /// of a value that depends on the input)?
    fn state_shaped(&self, v: NodeId, req: &Req) -> bool {
        let i = &self.info[v];
        i.dep && i.seq.iter().filter(|&&s| s).count() == 1 && req.contains(&ALL)
    }

    /// May `(v, req)` be met from a state (within the budget's exclusions and the forced set)?
    fn cacheable(&self, v: NodeId, req: &Req) -> bool {
        self.state_shaped(v, req) && !self.forbidden.contains(&v) && self.forced.as_ref().is_none_or(|set| set.contains(&state_name(v)))
    }

    fn new_req(req: &Req) -> Req {
        req.iter().map(|&q| if q == ALL { NEW } else { q }).collect()
    }

    /// Could `(v, req)` be offered to the planner as a state (no forced set; the budget's
    /// exclusions aside)?
    fn keepable(&self, v: NodeId, req: &Req) -> bool {
        self.forced.is_none() && self.state_shaped(v, req)
    }

    /// Cost of meeting `req` on `v` by applying its rule (operands at their cheapest), or
    /// `None` where the rule does not apply (an input's all rows).
    fn recompute_cost(&mut self, v: NodeId, req: &Req) -> Result<Option<f64>, CompileError> {
        let n = &self.g.nodes[v];
        if matches!(n.op, Op::Input { .. }) && req.contains(&ALL) {
            return Ok(None);
        }
        if let Some(b) = &self.info[v].bad {
            return Err(err(format!("node {v} ({}): {b}", n.op.name())));
        }
        let reqs = operand_reqs(self.g, &self.info, v, req);
        let mut total = 0.0;
        let mut ins = Vec::new();
        for (&x, q) in n.inputs.iter().zip(&reqs) {
            total += self.cost(x, q)?.0;
            ins.push((self.dshape(x, q), self.g.nodes[x].dtype, matches!(self.g.nodes[x].op, Op::Weight { .. })));
        }
        let ins_ref: Vec<Operand> = ins.iter().map(|(s, d, w)| Operand { shape: s.as_slice(), dtype: *d, weight: *w }).collect();
        let out = self.dshape(v, req);
        Ok(Some(total + self.model.node_cost(&n.op, (&out, n.dtype), &ins_ref)))
    }

    /// Cheapest cost of meeting `req` on `v`, and whether that keeps a state.
    fn cost(&mut self, v: NodeId, req: &Req) -> Result<(f64, bool), CompileError> {
        if self.is_static(v) {
            return Ok((0.0, false));
        }
        if let Some(&c) = self.memo.get(&(v, req.clone())) {
            return Ok(c);
        }
        let n = &self.g.nodes[v];
        let keep = if self.cacheable(v, req) {
            let nr = Self::new_req(req);
            let (rows, _) = self.cost(v, &nr)?;
            let shape = self.dshape(v, &nr);
            let state = self.dshape(v, req);
            let off = Operand::value(&[1], DType::I32);
            let c = self.model.node_cost(&Op::StoreRows { axis: 0 }, (&state, n.dtype), &[Operand::value(&state, n.dtype), Operand::value(&shape, n.dtype), off]);
            Some(rows + c)
        } else {
            None
        };
        let forced_keep = self.forced.as_ref().is_some_and(|s| s.contains(&state_name(v))) && keep.is_some();
        let recompute = if forced_keep { None } else { self.recompute_cost(v, req)? };
        let best = match (keep, recompute) {
            (Some(c), Some(r)) if c <= r => (c, true),
            (Some(c), None) => (c, true),
            (_, Some(r)) => (r, false),
            (None, None) => return Err(err(format!("all rows of node {v} ({}) are needed but it may not be kept (budget or forced state set)", n.op.name()))),
        };
        self.memo.insert((v, req.clone()), best);
        Ok(best)
    }

    /// Root demands: every output's new rows.
    fn roots(&self) -> Vec<(String, NodeId, Req)> {
        self.g.outputs.iter().map(|(name, o)| (name.clone(), *o, self.info[*o].seq.iter().map(|&s| if s { NEW } else { 0 }).collect())).collect()
    }

    /// The states the current decisions keep, reachable from the roots.
    fn chosen(&mut self) -> Result<BTreeMap<NodeId, Req>, CompileError> {
        Ok(self.decisions()?.0)
    }

    /// The states the current decisions keep, and how many all-rows demands of values that
    /// depend on the input they recompute, reachable from the roots.
    fn decisions(&mut self) -> Result<(BTreeMap<NodeId, Req>, usize), CompileError> {
        let mut out = BTreeMap::new();
        let mut recomputed = 0;
        let mut stack: Vec<(NodeId, Req)> = Vec::new();
        for (_, o, q) in self.roots() {
            self.cost(o, &q)?;
            stack.push((o, q));
        }
        let mut seen = std::collections::HashSet::new();
        while let Some((v, q)) = stack.pop() {
            if self.is_static(v) || !seen.insert((v, q.clone())) {
                continue;
            }
            let (_, keep) = self.cost(v, &q)?;
            if keep {
                out.insert(v, q.clone());
                stack.push((v, Self::new_req(&q)));
            } else {
                if q.contains(&ALL) && !q.contains(&NEW) && self.info[v].dep {
                    recomputed += 1;
                }
                for (&x, qx) in self.g.nodes[v].inputs.iter().zip(operand_reqs(self.g, &self.info, v, &q)) {
                    stack.push((x, qx));
                }
            }
        }
        Ok((out, recomputed))
    }
}

struct Builder<'a, 'b> {
    d: &'b mut Deriver<'a>,
    b: GraphBuilder,
    memo: HashMap<(NodeId, Req), Tensor>,
    statics: HashMap<NodeId, Tensor>,
    pos: Option<Tensor>,
    /// The sequence input (its `k` new rows).
    seq_input: Option<Tensor>,
    rules: BTreeMap<&'static str, usize>,
    states: Vec<CachedValue>,
    /// Offer both ways where both are possible ([`IncrementalSpec::alternatives`]).
    offer: bool,
    alternatives: usize,
}

impl Builder<'_, '_> {
    fn bump(&mut self, rule: &'static str) {
        *self.rules.entry(rule).or_default() += 1;
    }

    fn pos(&mut self) -> Result<Tensor, CompileError> {
        if let Some(p) = self.pos {
            return Ok(p);
        }
        let p = self.b.input(POS_INPUT, &[1], DType::I32)?;
        self.pos = Some(p);
        Ok(p)
    }

    fn copy_static(&mut self, v: NodeId) -> Result<Tensor, CompileError> {
        if let Some(&t) = self.statics.get(&v) {
            return Ok(t);
        }
        let n = &self.d.g.nodes[v];
        let ins: Vec<Tensor> = n.inputs.iter().map(|&x| self.copy_static(x)).collect::<Result<_, _>>()?;
        let t = match &n.op {
            Op::Input { name } => self.b.input(name, &n.shape, n.dtype)?,
            Op::Weight { name } => self.b.weight(name, &n.shape, n.dtype)?,
            op => self.b.push(op.clone(), &ins, tg_egraph::takes_declared_type(op).then(|| (n.shape.clone(), n.dtype)))?,
        };
        self.statics.insert(v, t);
        Ok(t)
    }

    fn build(&mut self, v: NodeId, req: &Req) -> Result<Tensor, CompileError> {
        if self.d.is_static(v) {
            if !self.statics.contains_key(&v) {
                self.bump("static");
            }
            return self.copy_static(v);
        }
        if let Some(&t) = self.memo.get(&(v, req.clone())) {
            return Ok(t);
        }
        let (_, keep) = self.d.cost(v, req)?;
        // Both ways, when the planner is to choose and both can be built.
        let offer = self.offer && self.d.keepable(v, req) && self.d.cost(v, &Deriver::new_req(req)).is_ok() && matches!(self.d.recompute_cost(v, req), Ok(Some(_)));
        let t = if offer {
            let kept = self.keep_way(v, req)?;
            let recomputed = self.apply(v, req)?;
            self.alternatives += 1;
            self.b.alternatives(&if keep { [kept, recomputed] } else { [recomputed, kept] })?
        } else if keep {
            self.keep_way(v, req)?
        } else {
            self.apply(v, req)?
        };
        self.memo.insert((v, req.clone()), t);
        Ok(t)
    }

    /// `v`'s all rows from its state: the new rows appended in place.
    fn keep_way(&mut self, v: NodeId, req: &Req) -> Result<Tensor, CompileError> {
        let n = &self.d.g.nodes[v];
        let nr = Deriver::new_req(req);
        let rows = self.build(v, &nr)?;
        let shape = self.d.dshape(v, req);
        let axis = req.iter().position(|&q| q == ALL).unwrap_or(0);
        let name = state_name(v);
        let st = self.b.state(&name, &shape, n.dtype)?;
        let pos = self.pos()?;
        self.bump("cache");
        let bytes = shape.iter().product::<usize>() * n.dtype.bytes_for(1).unwrap_or(4);
        self.states.push(CachedValue { name, node: v, op: n.op.name(), shape, axis, bytes });
        Ok(self.b.store_rows(st, rows, pos, axis)?)
    }

    /// The op's rule: derive operands, then the op on them.
    fn apply(&mut self, v: NodeId, req: &Req) -> Result<Tensor, CompileError> {
        let g = self.d.g;
        let n = &g.nodes[v];
        let shape = self.d.dshape(v, req);
        match &n.op {
            Op::Input { name } => {
                self.bump("input-new");
                match self.seq_input {
                    Some(t) if req.iter().all(|&q| q != ALL) => Ok(t),
                    _ => Err(err(format!("input '{name}' demanded with shape {shape:?}"))),
                }
            }
            Op::Iota { axis } => {
                self.bump("iota-shift");
                let t = self.b.iota(&shape, *axis, n.dtype)?;
                if req[*axis] != NEW {
                    return Ok(t);
                }
                let pos = self.pos()?;
                let pos = if n.dtype == DType::I32 { pos } else { self.b.cast(pos, n.dtype)? };
                let ones = vec![1usize; shape.len()];
                let pos = self.b.reshape(pos, &ones)?;
                Ok(self.b.add(t, pos)?)
            }
            _ => {
                let reqs = operand_reqs(g, &self.d.info, v, req);
                let mut ins = Vec::with_capacity(n.inputs.len());
                for (&x, q) in n.inputs.iter().zip(&reqs) {
                    ins.push(self.build(x, q)?);
                }
                let rule = match &n.op {
                    Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Cast { .. } => "rowwise",
                    Op::Reduce { axis, .. } if self.d.info[n.inputs[0]].seq[*axis] => "reduce-causal",
                    Op::Reduce { .. } => "reduce-row",
                    Op::MatMul { .. } if reqs.iter().any(|q| q.contains(&ALL)) && self.d.info[n.inputs[0]].tri.is_some() => "matmul-causal",
                    Op::MatMul { .. } => "matmul-rows",
                    Op::Slice { axis, .. } if self.d.info[n.inputs[0]].seq[*axis] => "last-row",
                    Op::Gather => "gather-rows",
                    _ => "view-rows",
                };
                self.bump(rule);
                let op = match &n.op {
                    Op::Slice { axis, .. } if self.d.info[n.inputs[0]].seq[*axis] => Op::Slice { axis: *axis, start: self.d.k - 1, end: self.d.k },
                    op => op.clone(),
                };
                let declared = tg_egraph::takes_declared_type(&op).then(|| (shape.clone(), n.dtype));
                Ok(self.b.push(op, &ins, declared)?)
            }
        }
    }
}

/// Derives the incremental graph of `full` (the model at capacity `C` = the extent of the
/// sequence input's axis 0) for runs that append `spec.new_rows` rows, choosing the kept
/// states with `model`.
pub fn derive(full: &Graph, spec: &IncrementalSpec, model: &dyn CostModel) -> Result<Incremental, CompileError> {
    tg_ir::verify(full)?;
    let (_, inp) = full.inputs().into_iter().find(|(n, _)| *n == spec.input).ok_or_else(|| err(format!("the graph has no input '{}'", spec.input)))?;
    let cap = *full.nodes[inp].shape.first().ok_or_else(|| err(format!("input '{}' is a scalar", spec.input)))?;
    let k = spec.new_rows;
    if k == 0 || k > cap {
        return Err(err(format!("{k} new rows per run do not fit a capacity of {cap}")));
    }
    if full.inputs().iter().any(|(n, _)| n == POS_INPUT) {
        return Err(err(format!("the graph already has an input named '{POS_INPUT}'")));
    }
    let info = analyse(full, &spec.input, cap)?;
    let mut d = Deriver { g: full, info, k, model, forbidden: BTreeSet::new(), forced: spec.states.clone(), memo: HashMap::new() };
    // With alternatives the budget is the compiler's (`CompileOptions::cache_budget`): the
    // first ways are the pass's choice without one.
    let offering = spec.alternatives && spec.states.is_none();
    let budget = if offering { None } else { spec.budget };
    // Fit the budget: drop the state whose bytes buy the least time, and choose again.
    loop {
        let chosen = d.chosen()?;
        let bytes_of = |d: &Deriver, v: NodeId, q: &Req| d.dshape(v, q).iter().product::<usize>() * d.g.nodes[v].dtype.bytes_for(1).unwrap_or(4);
        let total: usize = chosen.iter().map(|(&v, q)| bytes_of(&d, v, q)).sum();
        match budget {
            Some(b) if total > b && d.forced.is_none() => {
                let mut worst: Option<(f64, NodeId)> = None;
                for (&v, q) in &chosen {
                    let (with, _) = d.cost(v, q)?;
                    d.forbidden.insert(v);
                    d.memo.clear();
                    let without = d.cost(v, q).map(|c| c.0).unwrap_or(f64::INFINITY);
                    d.forbidden.remove(&v);
                    d.memo.clear();
                    let per_byte = (without - with) / bytes_of(&d, v, q).max(1) as f64;
                    if worst.is_none_or(|(w, _)| per_byte < w) {
                        worst = Some((per_byte, v));
                    }
                }
                match worst {
                    Some((_, v)) => {
                        d.forbidden.insert(v);
                        d.memo.clear();
                    }
                    None => return Err(err(format!("no states fit the budget of {b} bytes"))),
                }
            }
            Some(b) if total > b => return Err(err(format!("the session's states take {total} bytes, over the budget of {b}"))),
            _ => break,
        }
    }
    if let Some(set) = &spec.states {
        let chosen: BTreeSet<String> = d.chosen()?.keys().map(|&v| state_name(v)).collect();
        if let Some(missing) = set.difference(&chosen).next() {
            return Err(err(format!("state '{missing}' of the session is not used by this derivation")));
        }
    }
    let roots = d.roots();
    let mut cost = 0.0;
    for (_, o, q) in &roots {
        cost += d.cost(*o, q)?.0;
    }
    let mut bld = Builder {
        d: &mut d,
        b: GraphBuilder::new(),
        memo: HashMap::new(),
        statics: HashMap::new(),
        pos: None,
        seq_input: None,
        rules: BTreeMap::new(),
        states: Vec::new(),
        offer: spec.alternatives && spec.states.is_none(),
        alternatives: 0,
    };
    // The sequence input and the position come first, so plans list them first.
    let mut in_shape = full.nodes[inp].shape.clone();
    in_shape[0] = k;
    bld.seq_input = Some(bld.b.input(&spec.input, &in_shape, full.nodes[inp].dtype)?);
    bld.pos()?;
    let mut outs = Vec::new();
    for (name, o, q) in &roots {
        outs.push((name.clone(), bld.build(*o, q)?));
    }
    for (name, t) in outs {
        bld.b.output(&name, t)?;
    }
    let Builder { b, states: mut candidates, rules, alternatives, .. } = bld;
    let recomputed = d.decisions()?.1;
    let graph = b.finish()?;
    candidates.sort_by_key(|s| s.node);
    // The pass's own choice: the states the first ways keep.
    let states = if alternatives > 0 {
        let first: BTreeSet<String> = graph
            .resolve_alternatives()
            .nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::State { name } => Some(name.clone()),
                _ => None,
            })
            .collect();
        candidates.iter().filter(|c| first.contains(&c.name)).cloned().collect()
    } else {
        candidates.clone()
    };
    Ok(Incremental { graph, capacity: cap, new_rows: k, states, candidates, alternatives, recomputed, rules, cost })
}
