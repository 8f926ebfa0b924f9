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

use crate::problem::{Infeasible, Problem};

/// `M(c)` for every class (sorted, containing `c`).
pub(crate) fn mandatory(p: &Problem) -> Vec<Vec<u32>> {
    let (_, comps) = p.sccs();
    let nc = p.num_classes();
    let mut m: Vec<Vec<u32>> = (0..nc as u32).map(|c| vec![c]).collect();
    let mut scratch = Vec::new();
    for comp in &comps {
        loop {
            let mut changed = false;
            for &c in comp {
                let new = mandatory_of(p, c as usize, &m, &mut scratch);
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
    m
}

fn mandatory_of(p: &Problem, c: usize, m: &[Vec<u32>], scratch: &mut Vec<u32>) -> Vec<u32> {
    let mut inter: Option<Vec<u32>> = None;
    for n in p.nodes_of(c) {
        scratch.clear();
        for &d in p.kids(n) {
            scratch.extend_from_slice(&m[d as usize]);
        }
        scratch.sort_unstable();
        scratch.dedup();
        inter = Some(match inter {
            None => scratch.clone(),
            Some(prev) => intersect(&prev, scratch),
        });
        if inter.as_ref().is_some_and(|v| v.is_empty()) {
            break;
        }
    }
    let mut out = inter.unwrap_or_default();
    if let Err(pos) = out.binary_search(&(c as u32)) {
        out.insert(pos, c as u32);
    }
    out
}

fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// True when every child of `m` is mandatory below some child of `n`.
fn covered(p: &Problem, m: usize, n: usize, mand: &[Vec<u32>]) -> bool {
    p.kids(m).iter().all(|&e| p.kids(n).iter().any(|&d| mand[d as usize].binary_search(&e).is_ok()))
}

/// Statistics of [`reduce`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PrepStats {
    pub rounds: usize,
    pub cycle_nodes: usize,
    pub dominated_nodes: usize,
}

/// Applies the removals of the module doc until nothing changes.
pub(crate) fn reduce(mut p: Problem, stats: &mut PrepStats) -> Result<Problem, Infeasible> {
    loop {
        stats.rounds += 1;
        let mand = mandatory(&p);
        let mut keep = vec![true; p.num_nodes()];
        let mut removed = 0;
        for (n, k) in keep.iter_mut().enumerate() {
            let c = p.node_class[n];
            if p.kids(n).iter().any(|&d| mand[d as usize].binary_search(&c).is_ok()) {
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
            return Ok(p);
        }
        p = p.retain(&keep)?;
    }
}
