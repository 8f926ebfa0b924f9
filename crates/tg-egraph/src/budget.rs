//! Extraction under a cache budget per device: which values are kept between runs is an
//! extraction choice like any other (a class holding a kept state's update, `Op::StoreRows`,
//! next to the nodes that recompute the value; see `tg_ir::Op::Alternatives`), but the kept
//! states' bytes on each device must fit that device's budget.
//!
//! [`StateBudget`] wraps an extractor: it extracts; if the kept states on some device take
//! more than its budget, it takes away the update of the state there whose bytes buy the
//! least time (the tree cost of recomputing its value, per byte), several at once until
//! the device fits, and extracts again; the extractor may then keep other states. Each
//! round removes at least one update, so the rounds are bounded by the number of states.
//! The rounds can use a faster extractor ([`StateBudget::quick`]) until its choice fits (or
//! cannot be made to fit: its devices are a guess); the chosen extraction is always the
//! inner one's, and only the inner one's choice is refused as over budget.

use crate::plan::updated_state;
use crate::{CostModel, EgraphError, Extraction, Extractor, TEGraph};
use egg::Id;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use tg_ir::Op;

/// A state kept by an extraction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptState {
    /// The state's name (`Op::State`).
    pub name: String,
    /// The class its update computes (canonical).
    pub class: Id,
    /// Bytes.
    pub bytes: u64,
    /// The device it lives on.
    pub device: usize,
}

/// What [`StateBudget`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BudgetReport {
    /// Extractions run (1: everything the first one kept fitted).
    pub rounds: usize,
    /// States taken away to fit, in order, with their device.
    pub dropped: Vec<(String, usize)>,
    /// The states the final extraction keeps.
    pub kept: Vec<KeptState>,
}

/// An extractor under a cache budget per device (see the module docs).
pub struct StateBudget<'a> {
    /// The extractor that chooses.
    pub inner: &'a dyn Extractor,
    /// A faster extractor for the rounds that only find what to take away: used until its
    /// choice fits, then `inner` chooses (and rounds go on with `inner` if that does not
    /// fit). `None`: every round is `inner`'s.
    pub quick: Option<&'a dyn Extractor>,
    /// Bytes the kept states may take on each device (index = device; missing or `None`:
    /// no limit).
    pub budgets: Vec<Option<u64>>,
    /// The device each chosen class's node runs on, asked after each inner extraction
    /// (`None`: the only device, 0).
    pub device_of: Option<&'a dyn Fn(Id) -> usize>,
    /// Prices the recomputation a dropped state costs (for choosing which to drop).
    pub cost: &'a dyn CostModel,
    /// Filled by `extract`.
    pub report: RefCell<BudgetReport>,
}

/// The states an extraction keeps: its chosen `StoreRows` nodes.
pub fn kept_states(egraph: &TEGraph, ex: &Extraction, device_of: Option<&dyn Fn(Id) -> usize>) -> Vec<KeptState> {
    let mut out: Vec<KeptState> = ex
        .choice
        .iter()
        .filter(|(_, n)| matches!(n.op, Op::StoreRows { .. }))
        .filter_map(|(&c, n)| {
            let name = updated_state(egraph, n)?;
            let d = &egraph[c].data;
            Some(KeptState { name, class: c, bytes: crate::extract::bytes(&d.shape, d.dtype) as u64, device: device_of.map_or(0, |f| f(c)) })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Bottom-up tree cost of every class (each class's cheapest node plus its children's),
/// to a fixpoint: a cheap, consistent estimate of what computing a value costs.
fn tree_costs(egraph: &TEGraph, cost: &dyn CostModel) -> HashMap<Id, f64> {
    let mut best: HashMap<Id, f64> = HashMap::new();
    let mut changed = true;
    while changed {
        changed = false;
        for class in egraph.classes() {
            for n in &class.nodes {
                let ins = crate::operands(egraph, n);
                let mut t = cost.node_cost(&n.op, (&class.data.shape, class.data.dtype), &ins);
                for &ch in &n.children {
                    t += best.get(&egraph.find(ch)).copied().unwrap_or(f64::INFINITY);
                }
                let t = t.min(1e300);
                if t < best.get(&class.id).copied().unwrap_or(f64::INFINITY) {
                    best.insert(class.id, t);
                    changed = true;
                }
            }
        }
    }
    best
}

impl Extractor for StateBudget<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn extract(&self, egraph: &TEGraph, roots: &[Id]) -> Result<Extraction, EgraphError> {
        let mut report = BudgetReport::default();
        let mut pruned: Option<TEGraph> = None;
        let mut tree: Option<HashMap<Id, f64>> = None;
        let mut quick = self.quick;
        loop {
            let eg = pruned.as_ref().unwrap_or(egraph);
            let ex = quick.unwrap_or(self.inner).extract(eg, roots)?;
            report.rounds += 1;
            let kept = kept_states(eg, &ex, self.device_of);
            let mut per: BTreeMap<usize, u64> = BTreeMap::new();
            for k in &kept {
                *per.entry(k.device).or_default() += k.bytes;
            }
            let over: Vec<(usize, u64, u64)> = per.iter().filter_map(|(&d, &b)| self.budgets.get(d).copied().flatten().filter(|&lim| b > lim).map(|lim| (d, b, lim))).collect();
            if over.is_empty() && quick.take().is_some() {
                // What to take away is found: now the extractor that chooses.
                continue;
            }
            if over.is_empty() {
                report.kept = kept;
                *self.report.borrow_mut() = report;
                return Ok(ex);
            }
            // What recomputing each kept value would cost (its cheapest node other than
            // the update), per byte of the state.
            let tree = tree.get_or_insert_with(|| tree_costs(egraph, self.cost));
            let recompute = |c: Id| -> f64 {
                eg[c]
                    .nodes
                    .iter()
                    .filter(|n| !matches!(n.op, Op::StoreRows { .. }))
                    .map(|n| {
                        let ins = crate::operands(eg, n);
                        let own = self.cost.node_cost(&n.op, (&eg[c].data.shape, eg[c].data.dtype), &ins);
                        own + n.children.iter().map(|&ch| tree.get(&eg.find(ch)).copied().unwrap_or(f64::INFINITY)).sum::<f64>()
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let mut drop: HashSet<Id> = HashSet::new();
            let mut unmet = None;
            for (d, mut bytes, lim) in over {
                let mut here: Vec<(f64, &KeptState)> = kept.iter().filter(|k| k.device == d).map(|k| (recompute(k.class) / k.bytes.max(1) as f64, k)).collect();
                here.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
                for (per_byte, k) in here {
                    if bytes <= lim {
                        break;
                    }
                    if !per_byte.is_finite() {
                        // Only kept: the budget cannot be met without it.
                        continue;
                    }
                    bytes -= k.bytes;
                    drop.insert(k.class);
                    report.dropped.push((k.name.clone(), d));
                }
                if bytes > lim {
                    unmet.get_or_insert((d, bytes, lim));
                }
            }
            if let Some((d, bytes, lim)) = unmet {
                if quick.take().is_some() {
                    // The quick rounds see no placement (every state on the home device, or
                    // the last one's): what they cannot fit, the placing extractor may (the
                    // states spread over devices, as pinned). It chooses from here, with
                    // nothing of this round taken away.
                    continue;
                }
                return Err(EgraphError::Options(format!(
                    "the kept states on device {d} need at least {bytes} bytes (values that cannot be recomputed), over its cache budget of {lim}"
                )));
            }
            let mut g = pruned.take().unwrap_or_else(|| egraph.clone());
            for c in drop {
                g[c].nodes.retain(|n| !matches!(n.op, Op::StoreRows { .. }));
            }
            pruned = Some(g);
        }
    }
}
