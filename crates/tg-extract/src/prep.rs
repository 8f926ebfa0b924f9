//! Preprocessing: facts about every acyclic extraction, and removal of nodes that no
//! optimal extraction needs.
//!
//! **Mandatory classes.** `M(c)` is a set of classes contained in *every* acyclic
//! extraction of class `c`: `M(c) = {c} ∪ ⋂_{n ∈ c} ⋃_{d ∈ ch(n)} M(d)`, computed as the
//! least fixed point from `M(c) = {c}` (components of the class graph children first, cyclic
//! components iterated). Starting from below keeps every set inside the true one, because
//! the true sets satisfy `T(c) ⊇ {c} ∪ ⋂_n ⋃_d T(d)`.
//!
//! **Removals** (each keeps at least one optimal extraction):
//! - a node `n` of class `c` with `c ∈ M(d)` for a child `d`: choosing it closes a cycle;
//! - dominance: node `m` of the same class, `cost(m) <= cost(n)` and every child of `m`
//!   lies in `⋃_{d ∈ ch(n)} M(d)`. In an extraction using `n`, each child of `m` is already
//!   extracted *below* `c`, so switching `c` to `m` adds no class and no cycle, and can only
//!   drop classes. Nodes are visited by (cost, index) and only a kept node removes another,
//!   so every removed node has a kept replacement;
//! - then, via [`Problem::retain`], nodes with a child that has no acyclic extraction, and
//!   classes the roots no longer reach.
//!
//! The rounds repeat until nothing changes.
//!
//! **Representation and time limit.** Sets are sparse bitsets ([`SparseBits`]): on a deep
//! DAG every set holds most classes below it, and word-wise unions keep that ~64 times
//! cheaper than sorted lists. Any intermediate state of the fixed-point iteration from
//! below is itself inside the true sets (the operator is monotone and the true sets are a
//! post-fixed point), and every use of `M` — the two removals, and the relaxation's
//! constraints `a_c <= a_d` — stays valid for any subsets of the true sets. So when the
//! deadline passes the computation stops with the sets it has (unfinished ones `{c}`), and
//! [`reduce`] stops removing: the problem and sets it returns are sound, only weaker.

use crate::bits::{Accum, SparseBits};
use crate::problem::{Infeasible, Problem};
use std::time::Instant;

/// `M(c)` for every class of one problem (each set contains `c`; see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Mandatory {
    sets: Vec<SparseBits>,
}

impl Mandatory {
    /// Whether `d ∈ M(c)`.
    #[inline]
    pub fn contains(&self, c: usize, d: u32) -> bool {
        self.sets[c].contains(d)
    }

    /// The elements of `M(c)` in increasing order.
    pub fn iter(&self, c: usize) -> impl Iterator<Item = u32> + '_ {
        self.sets[c].iter()
    }

    /// `|M(c)|`.
    pub fn len(&self, c: usize) -> usize {
        self.sets[c].len()
    }
}

/// `M(c)` for every class, computed to the end.
#[cfg(test)]
pub(crate) fn mandatory(p: &Problem) -> Mandatory {
    mandatory_until(p, None).0
}

/// `M(c)` for every class, stopping at `deadline` (then some sets are only partly grown,
/// which is sound: see the module doc). Returns the sets and whether they are complete.
pub(crate) fn mandatory_until(p: &Problem, deadline: Option<Instant>) -> (Mandatory, bool) {
    let (_, comps) = p.sccs();
    let nc = p.num_classes();
    let mut m: Vec<SparseBits> = (0..nc as u32).map(SparseBits::singleton).collect();
    let mut acc = Accum::new(nc);
    // Words handled since the clock was last read.
    let mut work = 0usize;
    for comp in &comps {
        loop {
            let mut changed = false;
            for &c in comp {
                if work >= 4096 {
                    work = 0;
                    if deadline.is_some_and(|t| Instant::now() >= t) {
                        return (Mandatory { sets: m }, false);
                    }
                }
                let new = mandatory_of(p, c as usize, &m, &mut acc, &mut work);
                if new != m[c as usize] {
                    m[c as usize] = new;
                    changed = true;
                }
            }
            if !changed || comp.len() == 1 {
                break;
            }
        }
    }
    (Mandatory { sets: m }, true)
}

/// `{c} ∪ ⋂_{n ∈ c} ⋃_{d ∈ ch(n)} m[d]`; adds the words it touched to `work`.
fn mandatory_of(p: &Problem, c: usize, m: &[SparseBits], acc: &mut Accum, work: &mut usize) -> SparseBits {
    let mut inter: Option<SparseBits> = None;
    for n in p.nodes_of(c) {
        for &d in p.kids(n) {
            acc.or(&m[d as usize]);
            *work += m[d as usize].words();
        }
        match &mut inter {
            None => inter = Some(acc.take()),
            Some(prev) => {
                acc.and_into(prev);
                acc.clear();
            }
        }
        if inter.as_ref().is_some_and(SparseBits::is_empty) {
            break;
        }
    }
    let mut out = inter.unwrap_or_default();
    out.insert(c as u32);
    *work += 1;
    out
}

/// True when every child of `m` is mandatory below some child of `n`.
fn covered(p: &Problem, m: usize, n: usize, mand: &Mandatory) -> bool {
    p.kids(m).iter().all(|&e| p.kids(n).iter().any(|&d| mand.contains(d as usize, e)))
}

/// Statistics of [`reduce`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PrepStats {
    pub rounds: usize,
    pub cycle_nodes: usize,
    pub dominated_nodes: usize,
    /// The deadline cut the preprocessing short.
    pub cut_short: bool,
}

/// Applies the removals of the module doc until nothing changes or `deadline` passes;
/// returns the reduced problem and its mandatory sets (complete unless cut short).
pub(crate) fn reduce(mut p: Problem, stats: &mut PrepStats, deadline: Option<Instant>) -> Result<(Problem, Mandatory), Infeasible> {
    loop {
        stats.rounds += 1;
        let (mand, complete) = mandatory_until(&p, deadline);
        if !complete {
            stats.cut_short = true;
            return Ok((p, mand));
        }
        let mut keep = vec![true; p.num_nodes()];
        let mut removed = 0;
        for (n, k) in keep.iter_mut().enumerate() {
            let c = p.node_class[n];
            if p.kids(n).iter().any(|&d| mand.contains(d as usize, c)) {
                *k = false;
                removed += 1;
                stats.cycle_nodes += 1;
            }
        }
        let mut order: Vec<usize> = Vec::new();
        let mut kept: Vec<usize> = Vec::new();
        for c in 0..p.num_classes() {
            let r = p.nodes_of(c);
            if r.len() < 2 {
                continue;
            }
            order.clear();
            order.extend(r.filter(|&n| keep[n]));
            order.sort_by(|&a, &b| p.cost[a].total_cmp(&p.cost[b]).then(a.cmp(&b)));
            kept.clear();
            for &n in &order {
                if kept.iter().any(|&m| covered(&p, m, n, &mand)) {
                    keep[n] = false;
                    removed += 1;
                    stats.dominated_nodes += 1;
                } else {
                    kept.push(n);
                }
            }
        }
        if removed == 0 {
            return Ok((p, mand));
        }
        p = p.retain(&keep)?;
        if deadline.is_some_and(|t| Instant::now() >= t) {
            // The sets of the reduced problem are not computed: return it with `{c}`.
            stats.cut_short = true;
            let sets = (0..p.num_classes() as u32).map(SparseBits::singleton).collect();
            return Ok((p, Mandatory { sets }));
        }
    }
}
