//! The lower bound: a Lagrangian relaxation of the extraction integer program.
//!
//! Variables: `x_n` (node `n` chosen), `a_c` (class `c` extracted), `a_c = Σ_{n ∈ c} x_n`.
//! Constraints of every acyclic extraction:
//! - `a_c = 1` for every class in `A`, the classes mandatory for some root;
//! - `x_n <= a_d` for every child class `d` of node `n` (multiplier `λ_{n,d} >= 0`);
//! - `a_c <= a_d` for `d ∈ M(c)` (mandatory below `c`; multiplier `μ_{c,d} >= 0`), a
//!   cover of `M(c)` suffices since the relation chains.
//!
//! Moving the `<=` constraints into the objective leaves one independent problem per
//! class. With the *reduced cost* `r_n = w_n + Σ_d λ_{n,d} + Σ_d μ_{c,d} − Λ_c`, where
//! `Λ_c` sums the multipliers of the constraints whose right side is `a_c`, the bound is
//!
//! `L(λ, μ) = Σ_{c ∈ A} min_n r_n + Σ_{c ∉ A} min(0, min_n r_n)`.
//!
//! For any non-negative multipliers, `L` is at most the cost of every acyclic extraction:
//! on an extraction the added terms `λ (x_n − a_d)` are `<= 0`, and the per-class minima
//! range over a superset of what the extraction chooses. Its maximum equals the linear
//! relaxation's optimum (with the class-level constraints). The multipliers are improved by
//! projected subgradient steps (Polyak step towards the incumbent).
//!
//! The search re-evaluates `L` with the same multipliers under its decisions: a decided
//! class contributes the reduced cost of its node, a needed class `min r`, a class that can
//! no longer be needed `0`.

use crate::graph::{ClassId, NodeId};
use crate::prep::Mandatory;
use crate::problem::Problem;
use std::collections::HashMap;
use std::time::Instant;

/// Non-zero multipliers keyed by original ids, to warm-start the relaxation of a reduced
/// problem.
#[derive(Default)]
pub(crate) struct WarmStart {
    lam: HashMap<(NodeId, ClassId), f64>,
    mu: HashMap<(ClassId, ClassId), f64>,
}

/// The relaxation's structure for one problem.
#[derive(Clone)]
pub(crate) struct Relaxation {
    /// Class is in `A` (always extracted).
    pub always: Vec<bool>,
    edge_src: Vec<u32>,
    in_first: Vec<u32>,
    in_edges: Vec<u32>,
    /// Class-level constraints `a_from <= a_to`.
    pub mand_from: Vec<u32>,
    pub mand_to: Vec<u32>,
}

/// Multipliers and what they give.
#[derive(Clone)]
pub(crate) struct Dual {
    pub lam: Vec<f64>,
    pub mu: Vec<f64>,
    /// Reduced cost of every node.
    pub red: Vec<f64>,
    /// Smallest reduced cost in every class.
    pub minr: Vec<f64>,
    /// The bound.
    pub bound: f64,
}

impl Relaxation {
    /// The relaxation of `p` with the mandatory sets `mand`. Covering the sets takes time
    /// proportional to their total size (quadratic on a deep DAG); when `deadline` passes
    /// the remaining classes get no `a_c <= a_d` constraints, which only weakens the bound.
    pub fn new(p: &Problem, mand: &Mandatory, deadline: Option<Instant>) -> Relaxation {
        let nc = p.num_classes();
        let mut always = vec![false; nc];
        for &r in &p.roots {
            for d in mand.iter(r as usize) {
                always[d as usize] = true;
            }
        }
        let mut edge_src = vec![0u32; p.children.len()];
        for n in 0..p.num_nodes() {
            for e in p.child_first[n]..p.child_first[n + 1] {
                edge_src[e as usize] = n as u32;
            }
        }
        let mut in_first = vec![0u32; nc + 1];
        for &d in &p.children {
            in_first[d as usize + 1] += 1;
        }
        for c in 0..nc {
            in_first[c + 1] += in_first[c];
        }
        let mut fill = in_first.clone();
        let mut in_edges = vec![0u32; p.children.len()];
        for (e, &d) in p.children.iter().enumerate() {
            in_edges[fill[d as usize] as usize] = e as u32;
            fill[d as usize] += 1;
        }
        // A small cover of each M(c) \ {c}: largest sets first.
        let mut mand_from = Vec::new();
        let mut mand_to = Vec::new();
        let mut covered = vec![u32::MAX; nc];
        let mut cand: Vec<u32> = Vec::new();
        let len: Vec<usize> = (0..nc).map(|c| mand.len(c)).collect();
        let mut work = 0usize;
        for c in 0..nc {
            if always[c] {
                continue;
            }
            if work >= 1 << 14 {
                work = 0;
                if deadline.is_some_and(|t| Instant::now() >= t) {
                    break;
                }
            }
            work += len[c];
            cand.clear();
            cand.extend(mand.iter(c).filter(|&d| d as usize != c && !always[d as usize]));
            cand.sort_by_key(|&d| std::cmp::Reverse(len[d as usize]));
            for &d in &cand {
                if covered[d as usize] == c as u32 {
                    continue;
                }
                mand_from.push(c as u32);
                mand_to.push(d);
                for e in mand.iter(d as usize) {
                    covered[e as usize] = c as u32;
                }
            }
        }
        Relaxation { always, edge_src, in_first, in_edges, mand_from, mand_to }
    }

    /// The non-zero multipliers of `d` keyed by original ids.
    pub fn export(&self, p: &Problem, d: &Dual) -> WarmStart {
        let mut w = WarmStart::default();
        for (e, &l) in d.lam.iter().enumerate() {
            if l > 0.0 {
                let n = self.edge_src[e] as usize;
                w.lam.insert((p.orig_node[n], p.orig_class[p.children[e] as usize]), l);
            }
        }
        for (k, &m) in d.mu.iter().enumerate() {
            if m > 0.0 {
                let key = (p.orig_class[self.mand_from[k] as usize], p.orig_class[self.mand_to[k] as usize]);
                w.mu.insert(key, m);
            }
        }
        w
    }

    /// Multipliers taken from `w` where the constraint still exists (zero elsewhere).
    pub fn warm(&self, p: &Problem, w: &WarmStart) -> Dual {
        let mut d = self.zero(p);
        for (e, l) in d.lam.iter_mut().enumerate() {
            let n = self.edge_src[e] as usize;
            let key = (p.orig_node[n], p.orig_class[p.children[e] as usize]);
            *l = w.lam.get(&key).copied().unwrap_or(0.0);
        }
        for (k, m) in d.mu.iter_mut().enumerate() {
            let key = (p.orig_class[self.mand_from[k] as usize], p.orig_class[self.mand_to[k] as usize]);
            *m = w.mu.get(&key).copied().unwrap_or(0.0);
        }
        self.evaluate(p, &mut d);
        d
    }

    /// Zero multipliers.
    pub fn zero(&self, p: &Problem) -> Dual {
        let mut d = Dual { lam: vec![0.0; p.children.len()], mu: vec![0.0; self.mand_from.len()], red: vec![0.0; p.num_nodes()], minr: vec![0.0; p.num_classes()], bound: 0.0 };
        self.evaluate(p, &mut d);
        d
    }

    /// Recomputes reduced costs, minima and the bound from the multipliers.
    pub fn evaluate(&self, p: &Problem, d: &mut Dual) {
        let nc = p.num_classes();
        let mut inflow: Vec<f64> = self
            .in_first
            .windows(2)
            .map(|w| {
                let edges = &self.in_edges[w[0] as usize..w[1] as usize];
                edges.iter().map(|&e| d.lam[e as usize]).sum()
            })
            .collect();
        let mut outflow = vec![0.0f64; nc];
        for (k, &m) in d.mu.iter().enumerate() {
            outflow[self.mand_from[k] as usize] += m;
            inflow[self.mand_to[k] as usize] += m;
        }
        let mut bound = 0.0;
        for c in 0..nc {
            let mut best = f64::INFINITY;
            for n in p.nodes_of(c) {
                let a = p.child_first[n] as usize;
                let b = p.child_first[n + 1] as usize;
                let r = p.cost[n] + d.lam[a..b].iter().sum::<f64>() + outflow[c] - inflow[c];
                d.red[n] = r;
                best = best.min(r);
            }
            d.minr[c] = best;
            bound += if self.always[c] { best } else { best.min(0.0) };
        }
        d.bound = bound;
    }

    /// Projected subgradient ascent from `d`, aiming at `ub`. Keeps the best multipliers
    /// in `d`. Stops once the bound reaches `stop_at` (where the caller has its proof), at
    /// `deadline`, after `max_iter` steps, or when the step size has shrunk to nothing.
    pub fn ascend(&self, p: &Problem, d: &mut Dual, ub: f64, stop_at: f64, max_iter: usize, deadline: Instant) {
        let mut a = Ascent::new(d);
        self.resume(p, &mut a, d, ub, stop_at, max_iter, deadline);
    }

    /// [`Relaxation::ascend`] continued from the state `a` it stopped in (with `d` the best
    /// multipliers it kept): with the same `ub`, two calls take exactly the steps one
    /// uninterrupted call would.
    #[allow(clippy::too_many_arguments)]
    pub fn resume(&self, p: &Problem, a: &mut Ascent, d: &mut Dual, ub: f64, stop_at: f64, max_iter: usize, deadline: Instant) {
        // Step-size schedule: Polyak steps `theta (ub - L) / |g|^2`, `theta` halved after
        // `PATIENCE` steps without a better bound. Long patience and large first steps
        // matter on large instances (bert: 0.20 with 30 / 1.0, 0.58 with 200 / 2.0).
        const PATIENCE: usize = 200;
        if a.finished {
            return;
        }
        let nc = p.num_classes();
        let Ascent { cur, theta, since_best, finished } = a;
        let mut active = vec![false; nc];
        let mut pick = vec![u32::MAX; nc];
        let mut g_lam = vec![0.0f64; cur.lam.len()];
        let mut g_mu = vec![0.0f64; cur.mu.len()];
        // Read the clock about every 64k nodes and edges of work (every step on large
        // problems, every 16 on small ones, where reading it would be a visible share).
        let every = ((1usize << 16) / (p.num_nodes() + p.children.len() + 1)).clamp(1, 16);
        for it in 0..max_iter {
            if d.bound >= ub.min(stop_at) || (it % every == 0 && Instant::now() >= deadline) {
                break;
            }
            // The relaxed solution.
            for c in 0..nc {
                let on = self.always[c] || cur.minr[c] < 0.0;
                active[c] = on;
                pick[c] = u32::MAX;
                if on {
                    let r = p.nodes_of(c);
                    let mut best = r.start;
                    for n in r {
                        if cur.red[n] < cur.red[best] {
                            best = n;
                        }
                    }
                    pick[c] = best as u32;
                }
            }
            // Subgradient, projected on the non-negative orthant.
            let mut norm = 0.0;
            let mut raw = 0.0;
            for (e, g) in g_lam.iter_mut().enumerate() {
                let n = self.edge_src[e] as usize;
                let x = (pick[p.node_class[n] as usize] == n as u32) as u8 as f64;
                let a = active[p.children[e] as usize] as u8 as f64;
                raw += (x - a) * (x - a);
                let mut v = x - a;
                if v < 0.0 && cur.lam[e] <= 0.0 {
                    v = 0.0;
                }
                *g = v;
                norm += v * v;
            }
            for (k, g) in g_mu.iter_mut().enumerate() {
                let v0 = active[self.mand_from[k] as usize] as u8 as f64 - active[self.mand_to[k] as usize] as u8 as f64;
                raw += v0 * v0;
                let mut v = v0;
                if v < 0.0 && cur.mu[k] <= 0.0 {
                    v = 0.0;
                }
                *g = v;
                norm += v * v;
            }
            if raw == 0.0 {
                // The relaxed solution satisfies every relaxed constraint with equality.
                *finished = true;
                break;
            }
            if norm == 0.0 {
                // No constraint is violated and every slack one has a zero multiplier: the
                // relaxed solution is optimal for the relaxation.
                *finished = true;
                break;
            }
            let gap = (ub - cur.bound).max(1e-12 * ub.abs().max(1.0));
            let step = *theta * gap / norm;
            for (l, g) in cur.lam.iter_mut().zip(&g_lam) {
                *l = (*l + step * g).max(0.0);
            }
            for (m, g) in cur.mu.iter_mut().zip(&g_mu) {
                *m = (*m + step * g).max(0.0);
            }
            self.evaluate(p, cur);
            if cur.bound > d.bound {
                if cur.bound > d.bound + 1e-9 * d.bound.abs().max(1e-9) {
                    *since_best = 0;
                }
                d.clone_from(cur);
            } else {
                *since_best += 1;
            }
            if *since_best >= PATIENCE {
                *theta *= 0.5;
                *since_best = 0;
                if *theta < 1e-5 {
                    *finished = true;
                    break;
                }
            }
            if d.bound >= ub.min(stop_at) {
                break;
            }
        }
    }
}

/// The first step factor of an ascent (see [`Relaxation::resume`]).
const THETA0: f64 = 2.0;

/// The state of a subgradient ascent between calls (see [`Relaxation::resume`]).
pub(crate) struct Ascent {
    /// The current multipliers (not necessarily the best).
    cur: Dual,
    /// Step factor.
    theta: f64,
    /// Steps since the bound last improved.
    since_best: usize,
    /// The ascent has converged or stalled for good.
    finished: bool,
}

impl Ascent {
    /// An ascent starting from `d`.
    pub fn new(d: &Dual) -> Ascent {
        Ascent { cur: d.clone(), theta: THETA0, since_best: 0, finished: false }
    }
}
