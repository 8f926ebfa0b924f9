//! Bottom-up heuristics that give a choice for *every* class, acyclic by construction.
//!
//! Both work like Dijkstra's algorithm generalised to e-graphs (Knuth's "superior
//! functions"): a node is priced once all its child classes are settled; classes settle in
//! order of the price of their cheapest priced node. A node's children are settled before
//! its class, so following the choices from any class never returns to it.
//!
//! - [`greedy_dag`] prices a node by the DAG cost of its extraction given the settled
//!   choices below it: its own cost plus the distinct classes reached through its children,
//!   each counted once. A price is never below any child's price, which makes settling in
//!   price order sound: no node priced later can undercut a class already settled. This is
//!   the idea of extraction-gym's faster-greedy-dag, without its stale cost sets. The
//!   classes below each settled class are kept as bitsets over settling order ([`Below`]),
//!   so a price is the most expensive child's settled cost plus the classes the other
//!   children add to it, found word by word, instead of a walk over everything below
//!   (Gemma: 8 ms → 0.25 ms); above [`MAX_SET_CLASSES`] classes it walks.
//! - [`greedy_tree`] prices a node by tree cost (shared classes counted per use); it gives
//!   the optimal tree extraction.
//!
//! [`greedy_dag_fixpoint`] is the other classic form of the DAG greedy, closer to
//! extraction-gym's faster-greedy-dag: every class keeps the cheapest *cost set* seen so
//! far (the classes below it with their node costs), and a class that improves sends its
//! parents back to a work queue. Sets may go stale, so its choice map can be cyclic; the
//! caller checks.

use crate::problem::Problem;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;

#[derive(PartialEq)]
struct Item(f64, u32);
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    // Min-heap on (price, node).
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

/// Which price [`settle`] uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Price {
    /// DAG cost, the classes below kept as prefix bitsets ([`Below`]).
    Dag,
    /// DAG cost, the classes below found by walking the settled choices.
    DagWalk,
    Tree,
    Path,
}

/// Above this many classes [`greedy_dag`] walks instead of keeping [`Below`]'s sets (about
/// `n² / 128` words: 4 MiB at 8 192 classes, 64 MiB at this limit).
const MAX_SET_CLASSES: usize = 1 << 15;

/// The classes extracted below each settled class, as bitsets over *settling order*: the
/// `k`-th class to settle has only earlier ones below it, so its set is a prefix of
/// `k / 64 + 1` words (all sets together about `n² / 128` words). Pricing a node then
/// takes its most expensive child's settled DAG cost and adds the classes of the other
/// children's sets that are missing from that child's: word operations over the other
/// children's prefixes, plus one addition per missing class. The walk it replaces visits
/// every class below the node.
struct Below {
    /// Settling index of each class (`u32::MAX` until settled).
    index: Vec<u32>,
    /// Cost of the chosen node of each settled class, by settling index.
    chosen_cost: Vec<f64>,
    /// Set of the `k`-th settled class: `words[first[k]..first[k + 1]]`.
    first: Vec<usize>,
    words: Vec<u64>,
    /// Dense scratch, zero between uses.
    acc: Vec<u64>,
}

impl Below {
    fn new(nc: usize) -> Below {
        Below { index: vec![u32::MAX; nc], chosen_cost: Vec::with_capacity(nc), first: vec![0], words: Vec::new(), acc: vec![0; nc.div_ceil(64) + 1] }
    }

    /// Where the set of class `c` lies in `words`.
    fn range(&self, c: u32) -> std::ops::Range<usize> {
        let k = self.index[c as usize] as usize;
        self.first[k]..self.first[k + 1]
    }

    /// DAG cost of node `n` of cost `w` given the settled choices below its children
    /// (`total`: their settled DAG costs); returns it and the words visited.
    fn price(&mut self, kids: &[u32], w: f64, total: &[f64]) -> (f64, usize) {
        let Some(&big) = kids.iter().max_by(|&&a, &&b| total[a as usize].total_cmp(&total[b as usize])) else {
            return (w, 0);
        };
        let mut t = w + total[big as usize];
        let mut len = 0;
        for &d in kids {
            if d != big {
                let s = &self.words[self.range(d)];
                for (a, &x) in self.acc.iter_mut().zip(s) {
                    *a |= x;
                }
                len = len.max(s.len());
            }
        }
        let bs = &self.words[self.range(big)];
        for i in 0..len {
            let mut b = std::mem::take(&mut self.acc[i]) & !bs.get(i).copied().unwrap_or(0);
            while b != 0 {
                t += self.chosen_cost[(i << 6) | b.trailing_zeros() as usize];
                b &= b - 1;
            }
        }
        (t, len + 1)
    }

    /// Settles class `c` with node `n` (children `kids`, cost `w`).
    fn settle(&mut self, c: usize, kids: &[u32], w: f64) {
        let k = self.chosen_cost.len();
        self.index[c] = k as u32;
        self.chosen_cost.push(w);
        let len = k / 64 + 1;
        let start = self.words.len();
        self.words.resize(start + len, 0);
        for &d in kids {
            let j = self.index[d as usize] as usize;
            let (lo, hi) = (self.first[j], self.first[j + 1]);
            for i in 0..hi - lo {
                let x = self.words[lo + i];
                self.words[start + i] |= x;
            }
        }
        self.words[start + (k >> 6)] |= 1u64 << (k & 63);
        self.first.push(self.words.len());
    }
}

/// For every class, a lower bound on the DAG cost of any acyclic extraction of it: the
/// least over its nodes of the node's cost plus the largest bound of its children. A child's
/// extraction lies inside the parent's and does not contain the parent's node (acyclicity),
/// so the bound holds; settling bottom-up in price order never uses a cyclic derivation.
pub(crate) fn path_bounds(p: &Problem) -> Vec<f64> {
    settle(p, &p.cost, Price::Path, None).map_or_else(Vec::new, |s| s.1)
}

/// For every class `c`, a lower bound on the cost of the classes an extraction needs
/// *above* `c`: the cheapest chain of nodes from a root down to a node with child `c`
/// (shortest paths from the roots, a node's cost on each edge to its children). The
/// classes of such a chain are ancestors of `c`, so they lie outside `c`'s own
/// sub-extraction. Infinite for classes no root reaches.
pub(crate) fn ancestor_bounds(p: &Problem) -> Vec<f64> {
    let nc = p.num_classes();
    let mut g = vec![f64::INFINITY; nc];
    let mut done = vec![false; nc];
    let mut heap = BinaryHeap::new();
    for &r in &p.roots {
        g[r as usize] = 0.0;
        heap.push(Item(0.0, r));
    }
    while let Some(Item(t, c)) = heap.pop() {
        let c = c as usize;
        if done[c] {
            continue;
        }
        done[c] = true;
        for n in p.nodes_of(c) {
            let v = t + p.cost[n];
            for &d in p.kids(n) {
                if v < g[d as usize] {
                    g[d as usize] = v;
                    heap.push(Item(v, d));
                }
            }
        }
    }
    g
}

/// Greedy DAG extraction with the given node costs. Returns the chosen node of every class
/// (every class of a [`Problem`] has an acyclic extraction), or `None` if `deadline`
/// passes first (pricing a node walks the extraction below it, so this can be quadratic).
pub(crate) fn greedy_dag(p: &Problem, cost: &[f64], deadline: Option<Instant>) -> Option<Vec<u32>> {
    let price = if p.num_classes() <= MAX_SET_CLASSES { Price::Dag } else { Price::DagWalk };
    settle(p, cost, price, deadline).map(|s| s.0)
}

/// [`greedy_dag`] pricing by walks only (the reference for its bitsets).
#[cfg(test)]
pub(crate) fn greedy_dag_walk(p: &Problem, cost: &[f64]) -> Vec<u32> {
    settle(p, cost, Price::DagWalk, None).map_or_else(Vec::new, |s| s.0)
}

/// Optimal tree-cost extraction with the given node costs (`O(E log E)`, no deadline).
pub(crate) fn greedy_tree(p: &Problem, cost: &[f64]) -> Vec<u32> {
    settle(p, cost, Price::Tree, None).map_or_else(Vec::new, |s| s.0)
}

/// Settles every class; returns the choices and the settled prices, or `None` when
/// `deadline` passes first.
fn settle(p: &Problem, cost: &[f64], price: Price, deadline: Option<Instant>) -> Option<(Vec<u32>, Vec<f64>)> {
    let nc = p.num_classes();
    let nn = p.num_nodes();
    let mut choice = vec![u32::MAX; nc];
    let mut total = vec![0.0f64; nc];
    let mut missing: Vec<u32> = (0..nn).map(|n| p.kids(n).len() as u32).collect();
    let mut heap = BinaryHeap::new();
    for (n, &m) in missing.iter().enumerate() {
        if m == 0 {
            heap.push(Item(cost[n], n as u32));
        }
    }
    let mut stamp = vec![0u32; nc];
    let mut epoch = 0u32;
    let mut stack = Vec::new();
    let mut below = Below::new(if price == Price::Dag { nc } else { 0 });
    // Classes or words visited by DAG pricing since the clock was last read.
    let mut work = 0usize;
    while let Some(Item(t, n)) = heap.pop() {
        let c = p.node_class[n as usize] as usize;
        if choice[c] != u32::MAX {
            continue;
        }
        choice[c] = n;
        total[c] = t;
        if price == Price::Dag {
            below.settle(c, p.kids(n as usize), cost[n as usize]);
            work += below.chosen_cost.len() / 64 + 1;
        }
        for &q in p.parents_of(c) {
            let q = q as usize;
            missing[q] -= 1;
            if missing[q] != 0 || choice[p.node_class[q] as usize] != u32::MAX {
                continue;
            }
            let t = match price {
                Price::Tree => cost[q] + p.kids(q).iter().map(|&d| total[d as usize]).sum::<f64>(),
                Price::Path => cost[q] + p.kids(q).iter().map(|&d| total[d as usize]).fold(0.0, f64::max),
                Price::Dag => {
                    if work >= 1 << 16 {
                        work = 0;
                        if deadline.is_some_and(|t| Instant::now() >= t) {
                            return None;
                        }
                    }
                    let (t, words) = below.price(p.kids(q), cost[q], &total);
                    work += words;
                    t
                }
                Price::DagWalk => {
                    if work >= 1 << 14 {
                        work = 0;
                        if deadline.is_some_and(|t| Instant::now() >= t) {
                            return None;
                        }
                    }
                    epoch += 1;
                    let mut s = cost[q];
                    stack.clear();
                    for &d in p.kids(q) {
                        if stamp[d as usize] != epoch {
                            stamp[d as usize] = epoch;
                            stack.push(d);
                        }
                    }
                    while let Some(d) = stack.pop() {
                        work += 1;
                        let m = choice[d as usize] as usize;
                        s += cost[m];
                        for &e in p.kids(m) {
                            if stamp[e as usize] != epoch {
                                stamp[e as usize] = epoch;
                                stack.push(e);
                            }
                        }
                    }
                    s
                }
            };
            heap.push(Item(t, q as u32));
        }
    }
    Some((choice, total))
}

/// The fixed-point DAG greedy of the module doc. Classes never reached keep `u32::MAX`;
/// so do all when `deadline` passes first (the map is then rejected by [`induced`]).
pub(crate) fn greedy_dag_fixpoint(p: &Problem, deadline: Instant) -> Vec<u32> {
    let nc = p.num_classes();
    let nn = p.num_nodes();
    // Cost set of each class: (class, cost of its node) sorted by class.
    let mut sets: Vec<Option<Vec<(u32, f64)>>> = vec![None; nc];
    let mut total = vec![f64::INFINITY; nc];
    let mut choice = vec![u32::MAX; nc];
    let mut queued = vec![false; nn];
    let mut queue: std::collections::VecDeque<u32> = std::collections::VecDeque::new();
    for (n, q) in queued.iter_mut().enumerate() {
        if p.kids(n).is_empty() {
            *q = true;
            queue.push_back(n as u32);
        }
    }
    let mut merged: Vec<(u32, f64)> = Vec::new();
    let mut tmp: Vec<(u32, f64)> = Vec::new();
    let mut work = 0usize;
    while let Some(n) = queue.pop_front() {
        if work >= 1 << 14 {
            work = 0;
            if Instant::now() >= deadline {
                return vec![u32::MAX; nc];
            }
        }
        let n = n as usize;
        queued[n] = false;
        let c = p.node_class[n] as usize;
        if p.kids(n).iter().any(|&d| sets[d as usize].is_none()) {
            continue;
        }
        merged.clear();
        merged.push((c as u32, p.cost[n]));
        for &d in p.kids(n) {
            let Some(s) = &sets[d as usize] else { continue };
            tmp.clear();
            let (mut i, mut j) = (0, 0);
            while i < merged.len() || j < s.len() {
                if j == s.len() || (i < merged.len() && merged[i].0 <= s[j].0) {
                    if j < s.len() && merged[i].0 == s[j].0 {
                        j += 1;
                    }
                    tmp.push(merged[i]);
                    i += 1;
                } else {
                    tmp.push(s[j]);
                    j += 1;
                }
            }
            work += tmp.len();
            std::mem::swap(&mut merged, &mut tmp);
        }
        // A set through the node's own class would be a cycle.
        let own = p.kids(n).iter().any(|&d| sets[d as usize].as_ref().is_some_and(|s| s.binary_search_by_key(&(c as u32), |e| e.0).is_ok()));
        if own {
            continue;
        }
        let t: f64 = merged.iter().map(|e| e.1).sum();
        if t < total[c] {
            total[c] = t;
            choice[c] = n as u32;
            sets[c] = Some(merged.clone());
            for &q in p.parents_of(c) {
                if !queued[q as usize] {
                    queued[q as usize] = true;
                    queue.push_back(q);
                }
            }
        }
    }
    choice
}

/// The DAG cost of the extraction that a choice map induces from the roots (its classes
/// are left in `scratch.order`), or `None` when it has a cycle or reaches a class without
/// a choice.
pub(crate) fn induced(p: &Problem, choice: &[u32], scratch: &mut Walk) -> Option<f64> {
    scratch.run(p, choice)
}

/// Reusable buffers for walking an induced extraction.
#[derive(Default)]
pub(crate) struct Walk {
    state: Vec<u8>,
    /// Classes of the last successful walk, in finishing order.
    pub order: Vec<u32>,
    stack: Vec<(u32, u32)>,
}

impl Walk {
    fn run(&mut self, p: &Problem, choice: &[u32]) -> Option<f64> {
        let nc = p.num_classes();
        self.state.clear();
        self.state.resize(nc, 0);
        self.order.clear();
        let mut cost = 0.0;
        for &r in &p.roots {
            if self.state[r as usize] != 0 {
                continue;
            }
            self.state[r as usize] = 1;
            self.stack.clear();
            self.stack.push((r, 0));
            while let Some(&mut (c, ref mut i)) = self.stack.last_mut() {
                let n = choice[c as usize] as usize;
                if n >= p.num_nodes() {
                    return None;
                }
                let kids = p.kids(n);
                if (*i as usize) < kids.len() {
                    let d = kids[*i as usize];
                    *i += 1;
                    match self.state[d as usize] {
                        0 => {
                            self.state[d as usize] = 1;
                            self.stack.push((d, 0));
                        }
                        1 => return None,
                        _ => {}
                    }
                } else {
                    self.state[c as usize] = 2;
                    cost += p.cost[n];
                    self.order.push(c);
                    self.stack.pop();
                }
            }
        }
        Some(cost)
    }
}
