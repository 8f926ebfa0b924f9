//! Exact depth-first branch and bound over the choice of node per class.
//!
//! A search node fixes the chosen node of some classes; the decided classes form a
//! sub-graph hanging from the roots, and the *open* classes are those that are needed (a
//! root's mandatory class, a child of a decided node, or mandatory below a needed class)
//! but not yet decided. A branch decides one open class (the one with the fewest nodes, or
//! in the neighbourhood search the one of largest regret), trying its nodes in order of
//! reduced cost. A node that would close a cycle through decided classes is skipped (only
//! classes of one strongly connected component can form a cycle, so only those are
//! walked). Open classes with a single allowed node are decided without branching.
//!
//! The bound is the Lagrangian of [`crate::lagrange`], maintained incrementally per class:
//! a decided class contributes its node's reduced cost, a needed class its smallest reduced
//! cost, a free class `min(0, ·)` of it, and a class that can no longer be needed (every
//! node naming it as a child is excluded) contributes 0. A node is *excluded* once its class
//! is decided otherwise or can no longer be needed; its constraints `x_m <= a_d` then hold
//! trivially, so their multipliers are dropped from the relaxation of the sub-tree: the
//! child classes stop being credited with them (their reduced costs rise by the dropped
//! amount, the *shift*). Any non-negative multipliers give a valid bound, so this only
//! tightens it. A search node is cut when its bound reaches the incumbent minus the
//! tolerance.

use crate::lagrange::{Dual, Relaxation};
use crate::problem::Problem;
use std::time::Instant;

const NONE: u32 = u32::MAX;

/// Which open class a search node branches on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Branching {
    /// The class with the fewest nodes (first fail): best for proving.
    FewestNodes,
    /// The class whose two best nodes differ most in reduced cost: best inside the
    /// neighbourhood search.
    LargestRegret,
}

enum Undo {
    Decide(u32),
    Need(u32),
    Pp(u32),
    Kill(u32),
    Shift(u32, f64),
}

struct Frame {
    class: u32,
    next: u32,
    trail: usize,
    bound: f64,
    cost: f64,
}

/// Result of a search.
pub(crate) struct SearchOutcome {
    /// The best extraction found below the target (chosen node per class, `NONE` for
    /// classes not extracted), with its cost.
    pub best: Option<(Vec<u32>, f64)>,
    /// The whole tree was explored: nothing cheaper than the target minus the tolerance
    /// exists except what `best` holds.
    pub complete: bool,
    /// Search nodes visited.
    pub nodes: u64,
}

/// Branch and bound state (see the module doc).
pub(crate) struct Search<'a> {
    p: &'a Problem,
    red: &'a [f64],
    lam: &'a [f64],
    base_minr: &'a [f64],
    always: &'a [bool],
    /// Class-level constraints leaving each class: `(target, multiplier)`.
    mand_first: Vec<u32>,
    mand: Vec<(u32, f64)>,
    pp_init: Vec<u32>,
    /// Smallest reduced cost over the allowed nodes of each class.
    minr: Vec<f64>,
    /// Node a class is restricted to (`NONE`: any of its nodes).
    fixed: Vec<u32>,
    scc: Vec<u32>,
    /// Options of each class, sorted by reduced cost (node indices, class ranges).
    options: Vec<u32>,
    regret: Vec<f64>,
    sel: Vec<u32>,
    need: Vec<u32>,
    pp: Vec<u32>,
    dead: Vec<bool>,
    shift: Vec<f64>,
    open: Vec<u32>,
    open_pos: Vec<u32>,
    trail: Vec<Undo>,
    bound: f64,
    cost: f64,
    stamp: Vec<u32>,
    epoch: u32,
    walk: Vec<u32>,
    kill_stack: Vec<u32>,
    need_stack: Vec<u32>,
    /// A class became needed after it could no longer be needed: the state is infeasible.
    conflict: bool,
    branching: Branching,
}

impl<'a> Search<'a> {
    pub fn new(p: &'a Problem, rel: &'a Relaxation, d: &'a Dual, branching: Branching) -> Search<'a> {
        let nc = p.num_classes();
        let red = &d.red[..];
        let (scc, _) = p.sccs();
        let mut options: Vec<u32> = (0..p.num_nodes() as u32).collect();
        let regret: Vec<f64> = (0..nc)
            .map(|c| {
                let o = &mut options[p.nodes_of(c)];
                o.sort_by(|&a, &b| red[a as usize].total_cmp(&red[b as usize]).then(a.cmp(&b)));
                if o.len() >= 2 {
                    red[o[1] as usize] - red[o[0] as usize]
                } else {
                    f64::INFINITY
                }
            })
            .collect();
        let mut pp = vec![0u32; nc];
        for &d in &p.children {
            pp[d as usize] += 1;
        }
        let mut mand_first = vec![0u32; nc + 1];
        for &f in &rel.mand_from {
            mand_first[f as usize + 1] += 1;
        }
        for c in 0..nc {
            mand_first[c + 1] += mand_first[c];
        }
        let mut fill = mand_first.clone();
        let mut mand = vec![(0u32, 0.0f64); rel.mand_from.len()];
        for (k, &f) in rel.mand_from.iter().enumerate() {
            mand[fill[f as usize] as usize] = (rel.mand_to[k], d.mu[k]);
            fill[f as usize] += 1;
        }
        Search {
            p,
            red,
            lam: &d.lam,
            base_minr: &d.minr,
            always: &rel.always,
            mand_first,
            mand,
            pp_init: pp.clone(),
            minr: d.minr.clone(),
            fixed: vec![NONE; nc],
            scc,
            options,
            regret,
            sel: vec![NONE; nc],
            need: vec![0; nc],
            pp,
            dead: vec![false; nc],
            shift: vec![0.0; nc],
            open: Vec::new(),
            open_pos: vec![NONE; nc],
            trail: Vec::new(),
            bound: 0.0,
            cost: 0.0,
            stamp: vec![0; nc],
            epoch: 0,
            walk: Vec::new(),
            kill_stack: Vec::new(),
            need_stack: Vec::new(),
            conflict: false,
            branching,
        }
    }

    /// How much node `n`'s reduced cost exceeds the least of its class.
    pub fn gap(&self, n: usize) -> f64 {
        self.red[n] - self.base_minr[self.p.node_class[n] as usize]
    }

    /// What class `c` adds to the bound in the current state.
    #[inline]
    fn contrib(&self, c: usize) -> f64 {
        if self.dead[c] {
            0.0
        } else if self.sel[c] != NONE {
            self.red[self.sel[c] as usize] + self.shift[c]
        } else if self.need[c] > 0 {
            self.minr[c] + self.shift[c]
        } else {
            (self.minr[c] + self.shift[c]).min(0.0)
        }
    }

    /// Resets the state to the root; `fixed` restricts classes to one node (`NONE`: free).
    fn reset(&mut self, fixed: Option<&[u32]>) {
        let nc = self.p.num_classes();
        match fixed {
            Some(f) => self.fixed.copy_from_slice(f),
            None => self.fixed.iter_mut().for_each(|x| *x = NONE),
        }
        for c in 0..nc {
            self.minr[c] = match self.fixed[c] {
                NONE => self.base_minr[c],
                n => self.red[n as usize],
            };
        }
        self.sel.iter_mut().for_each(|x| *x = NONE);
        self.need.iter_mut().for_each(|x| *x = 0);
        self.pp.copy_from_slice(&self.pp_init);
        self.dead.iter_mut().for_each(|x| *x = false);
        self.shift.iter_mut().for_each(|x| *x = 0.0);
        self.open.clear();
        self.open_pos.iter_mut().for_each(|x| *x = NONE);
        self.trail.clear();
        self.conflict = false;
        self.cost = 0.0;
        self.bound = (0..nc).map(|c| self.contrib(c)).sum();
        for c in 0..nc {
            if self.always[c] {
                self.add_need(c as u32);
            }
        }
        // A fixed class's other nodes can never be chosen.
        for c in 0..nc {
            let f = self.fixed[c];
            if f != NONE {
                for m in self.p.nodes_of(c) {
                    if m as u32 != f {
                        self.exclude(m as u32);
                    }
                }
            }
        }
        for c in 0..nc {
            if self.need[c] == 0 && self.pp[c] == 0 && !self.dead[c] {
                self.kill(c as u32);
            }
        }
        self.trail.clear();
    }

    fn open_insert(&mut self, c: u32) {
        self.open_pos[c as usize] = self.open.len() as u32;
        self.open.push(c);
    }

    fn open_remove(&mut self, c: u32) {
        let i = self.open_pos[c as usize] as usize;
        let last = self.open.pop().unwrap_or(c);
        if last != c {
            self.open[i] = last;
            self.open_pos[last as usize] = i as u32;
        }
        self.open_pos[c as usize] = NONE;
    }

    /// Is class `to` reachable from `from` through decided classes of `to`'s component?
    fn reaches(&mut self, from: u32, to: u32) -> bool {
        let comp = self.scc[to as usize];
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.epoch = 1;
        }
        self.walk.clear();
        self.walk.push(from);
        self.stamp[from as usize] = self.epoch;
        while let Some(c) = self.walk.pop() {
            if c == to {
                return true;
            }
            let n = self.sel[c as usize];
            if n == NONE {
                continue;
            }
            for &d in self.p.kids(n as usize) {
                if self.scc[d as usize] == comp && self.stamp[d as usize] != self.epoch {
                    self.stamp[d as usize] = self.epoch;
                    self.walk.push(d);
                }
            }
        }
        false
    }

    /// Chooses node `n` for open class `c`; false (and nothing changed) if it closes a cycle.
    fn decide(&mut self, c: u32, n: u32) -> bool {
        let p = self.p;
        let comp = self.scc[c as usize];
        for &d in p.kids(n as usize) {
            if self.scc[d as usize] == comp && self.sel[d as usize] != NONE && self.reaches(d, c) {
                return false;
            }
        }
        let before = self.contrib(c as usize);
        self.sel[c as usize] = n;
        self.open_remove(c);
        self.trail.push(Undo::Decide(c));
        self.bound += self.contrib(c as usize) - before;
        self.cost += p.cost[n as usize];
        // A restricted class's other nodes were excluded when the search started.
        if self.fixed[c as usize] == NONE {
            for m in p.nodes_of(c as usize) {
                if m as u32 != n {
                    self.exclude(m as u32);
                }
            }
        }
        for &d in p.kids(n as usize) {
            self.add_need(d);
        }
        true
    }

    /// One more reason for class `d` to be extracted; a class that becomes needed makes
    /// its mandatory classes needed too.
    fn add_need(&mut self, d: u32) {
        self.need_stack.push(d);
        while let Some(d) = self.need_stack.pop() {
            let du = d as usize;
            if self.dead[du] {
                self.conflict = true;
            }
            let before = self.contrib(du);
            self.need[du] += 1;
            self.trail.push(Undo::Need(d));
            if self.need[du] == 1 {
                self.bound += self.contrib(du) - before;
                if self.sel[du] == NONE {
                    self.open_insert(d);
                }
                for k in self.mand_first[du]..self.mand_first[du + 1] {
                    self.need_stack.push(self.mand[k as usize].0);
                }
            }
        }
    }

    /// Adds `amount` to the shift of class `d`.
    fn add_shift(&mut self, d: u32, amount: f64) {
        if amount == 0.0 {
            return;
        }
        let du = d as usize;
        let before = self.contrib(du);
        self.trail.push(Undo::Shift(d, self.shift[du]));
        self.shift[du] += amount;
        self.bound += self.contrib(du) - before;
    }

    /// Node `m` can no longer be chosen: drop its constraints, and kill child classes that
    /// nothing else can need.
    fn exclude(&mut self, m: u32) {
        let p = self.p;
        let a = p.child_first[m as usize] as usize;
        let b = p.child_first[m as usize + 1] as usize;
        for e in a..b {
            let d = p.children[e];
            self.pp[d as usize] -= 1;
            self.trail.push(Undo::Pp(d));
            self.add_shift(d, self.lam[e]);
            if self.pp[d as usize] == 0 && self.need[d as usize] == 0 && !self.dead[d as usize] {
                self.kill(d);
            }
        }
    }

    fn kill(&mut self, d: u32) {
        self.kill_stack.push(d);
        while let Some(d) = self.kill_stack.pop() {
            let du = d as usize;
            if self.dead[du] {
                continue;
            }
            let before = self.contrib(du);
            self.dead[du] = true;
            self.trail.push(Undo::Kill(d));
            self.bound += self.contrib(du) - before;
            // `a_d = 0`: its class-level constraints hold trivially.
            for k in self.mand_first[du]..self.mand_first[du + 1] {
                let (t, mu) = self.mand[k as usize];
                self.add_shift(t, mu);
            }
            // Its nodes are excluded now, except those a restriction excluded already (a
            // decided class is never killed: it is needed).
            let p = self.p;
            let nodes = match self.fixed[du] {
                NONE => p.nodes_of(du),
                f => f as usize..f as usize + 1,
            };
            for m in nodes {
                let a = p.child_first[m] as usize;
                let b = p.child_first[m + 1] as usize;
                for e in a..b {
                    let x = p.children[e];
                    self.pp[x as usize] -= 1;
                    self.trail.push(Undo::Pp(x));
                    self.add_shift(x, self.lam[e]);
                    if self.pp[x as usize] == 0 && self.need[x as usize] == 0 {
                        self.kill_stack.push(x);
                    }
                }
            }
        }
    }

    fn undo_to(&mut self, len: usize) {
        while self.trail.len() > len {
            match self.trail.pop() {
                Some(Undo::Decide(c)) => {
                    self.sel[c as usize] = NONE;
                    self.open_insert(c);
                }
                Some(Undo::Need(d)) => {
                    self.need[d as usize] -= 1;
                    if self.need[d as usize] == 0 && self.open_pos[d as usize] != NONE {
                        self.open_remove(d);
                    }
                }
                Some(Undo::Pp(d)) => self.pp[d as usize] += 1,
                Some(Undo::Kill(d)) => self.dead[d as usize] = false,
                Some(Undo::Shift(d, old)) => self.shift[d as usize] = old,
                None => break,
            }
        }
    }

    /// Decides every open class that has a single allowed node; false on a cycle or a
    /// conflict.
    fn propagate(&mut self) -> bool {
        loop {
            if self.conflict {
                return false;
            }
            let mut found = None;
            for &c in &self.open {
                if self.fixed[c as usize] != NONE {
                    found = Some((c, self.fixed[c as usize]));
                    break;
                }
                if self.p.nodes_of(c as usize).len() == 1 {
                    found = Some((c, self.p.class_first[c as usize]));
                    break;
                }
            }
            match found {
                None => return true,
                Some((c, n)) => {
                    if !self.decide(c, n) {
                        return false;
                    }
                }
            }
        }
    }

    fn select(&self) -> u32 {
        let mut best = self.open[0];
        for &c in &self.open[1..] {
            let better = match self.branching {
                Branching::FewestNodes => {
                    let (lc, lb) = (self.p.nodes_of(c as usize).len(), self.p.nodes_of(best as usize).len());
                    lc < lb || (lc == lb && c < best)
                }
                Branching::LargestRegret => {
                    let (rc, rb) = (self.regret[c as usize], self.regret[best as usize]);
                    rc > rb || (rc == rb && c < best)
                }
            };
            if better {
                best = c;
            }
        }
        best
    }

    /// Searches for extractions cheaper than `ub - tol` until `deadline` or `node_limit`
    /// search nodes, with the classes of `fixed` restricted to one node.
    pub fn run(&mut self, mut ub: f64, tol: f64, deadline: Instant, node_limit: u64, fixed: Option<&[u32]>) -> SearchOutcome {
        self.reset(fixed);
        let mut out = SearchOutcome { best: None, complete: false, nodes: 0 };
        let mut stack: Vec<Frame> = Vec::new();
        let mut fresh = true;
        loop {
            if fresh {
                out.nodes += 1;
                if out.nodes >= node_limit || (out.nodes.is_multiple_of(256) && Instant::now() >= deadline) {
                    return out;
                }
                if self.propagate() && !self.conflict && self.bound < ub - tol {
                    if self.open.is_empty() {
                        if self.cost < ub - tol {
                            ub = self.cost;
                            out.best = Some((self.sel.clone(), self.cost));
                        }
                    } else {
                        let c = self.select();
                        stack.push(Frame { class: c, next: 0, trail: self.trail.len(), bound: self.bound, cost: self.cost });
                    }
                }
            }
            // Next branch.
            fresh = false;
            while let Some(f) = stack.last_mut() {
                let (c, trail, bound, cost) = (f.class, f.trail, f.bound, f.cost);
                let r = self.p.nodes_of(c as usize);
                let k = r.start + f.next as usize;
                if k >= r.end {
                    stack.pop();
                    continue;
                }
                f.next += 1;
                self.undo_to(trail);
                self.bound = bound;
                self.cost = cost;
                self.conflict = false;
                let n = self.options[k];
                // Options are sorted: once one cannot beat the incumbent, none can.
                if bound + self.red[n as usize] - self.minr[c as usize] >= ub - tol {
                    stack.pop();
                    continue;
                }
                if self.decide(c, n) {
                    fresh = true;
                    break;
                }
            }
            if !fresh {
                out.complete = true;
                return out;
            }
        }
    }
}
