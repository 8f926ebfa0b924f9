//! Large-neighbourhood search: repeatedly frees a connected region of classes around a
//! random extracted class, restricts every other class to the node the incumbent's choice
//! map gives it, and lets the exact branch and bound ([`Search`]) find the best extraction
//! of that restricted problem within a node budget. Improvements replace the incumbent.
//! The region grows while regions are searched completely without gain and shrinks when
//! the budget runs out.

use crate::greedy::{induced, Walk};
use crate::problem::Problem;
use crate::search::Search;
use std::collections::VecDeque;
use std::time::Instant;

const NONE: u32 = u32::MAX;

/// A small deterministic generator (xorshift64*), so that runs are reproducible.
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n.max(1) as u64) as usize
    }
}

/// Statistics of a run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LnsStats {
    pub rounds: u64,
    pub improvements: u64,
    pub nodes: u64,
    /// A round left every class free and finished: the incumbent is optimal.
    pub proven: bool,
}

/// Improves the total choice map `choice` (and returns its induced cost) until `deadline`.
pub(crate) fn run(p: &Problem, search: &mut Search<'_>, choice: &mut [u32], mut cost: f64, rel_tol: f64, deadline: Instant, stats: &mut LnsStats) -> f64 {
    let nc = p.num_classes();
    // Undirected class adjacency.
    let mut adj: Vec<Vec<u32>> = vec![Vec::new(); nc];
    for n in 0..p.num_nodes() {
        let c = p.node_class[n];
        for &d in p.kids(n) {
            adj[c as usize].push(d);
            adj[d as usize].push(c);
        }
    }
    for a in &mut adj {
        a.sort_unstable();
        a.dedup();
    }
    let multi: Vec<bool> = (0..nc).map(|c| p.nodes_of(c).len() > 1).collect();
    let n_multi = multi.iter().filter(|&&m| m).count();
    if n_multi == 0 {
        stats.proven = true;
        return cost;
    }
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut walk = Walk::default();
    let mut size = 8usize;
    let mut fixed = vec![NONE; nc];
    let mut mark = vec![0u32; nc];
    let mut epoch = 0u32;
    let mut queue = VecDeque::new();
    let mut seeds: Vec<u32> = Vec::new();
    let budget = 4000u64;
    while Instant::now() < deadline {
        stats.rounds += 1;
        // Seeds: extracted classes with a choice to make.
        if induced(p, choice, &mut walk).is_none() {
            break;
        }
        seeds.clear();
        seeds.extend(walk.order.iter().copied().filter(|&c| multi[c as usize]));
        if seeds.is_empty() {
            break;
        }
        // Every other round, start from a class whose node the relaxation does not favour.
        if stats.rounds.is_multiple_of(2) {
            let favoured = |c: &u32| search.gap(choice[*c as usize] as usize) <= 1e-12;
            seeds.retain(|c| !favoured(c));
            if seeds.is_empty() {
                seeds.extend(walk.order.iter().copied().filter(|&c| multi[c as usize]));
            }
        }
        let seed = seeds[rng.below(seeds.len())];
        // Breadth-first region with `size` multi-node classes, neighbours in random order.
        epoch += 1;
        queue.clear();
        queue.push_back(seed);
        mark[seed as usize] = epoch;
        let mut taken = 0;
        for (c, f) in fixed.iter_mut().enumerate() {
            *f = choice[c];
        }
        while let Some(c) = queue.pop_front() {
            if multi[c as usize] {
                fixed[c as usize] = NONE;
                taken += 1;
                if taken >= size {
                    break;
                }
            }
            let a = &adj[c as usize];
            let start = rng.below(a.len());
            for i in 0..a.len() {
                let d = a[(start + i) % a.len()];
                if mark[d as usize] != epoch {
                    mark[d as usize] = epoch;
                    queue.push_back(d);
                }
            }
        }
        let out = search.run(cost, rel_tol * cost.abs(), deadline, budget, Some(&fixed));
        stats.nodes += out.nodes;
        if let Some((sel, c)) = out.best {
            for (k, &n) in sel.iter().enumerate() {
                if n != NONE {
                    choice[k] = n;
                }
            }
            cost = induced(p, choice, &mut walk).unwrap_or(c);
            stats.improvements += 1;
        } else if out.complete {
            if taken == n_multi {
                stats.proven = true;
                break;
            }
            size = (size + size / 4 + 1).min(nc);
        } else {
            size = (size * 4 / 5).max(2);
        }
    }
    cost
}
