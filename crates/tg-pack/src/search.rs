//! The exact search: depth-first branch and bound over *canonical* packings.
//!
//! # Why canonical packings suffice
//!
//! Among all packings of height ≤ C, take one whose sum of offsets is smallest. In it no
//! buffer can move down: each sits at 0 or on the top of a conflicting buffer (rounded up
//! to its alignment), and no buffer fits into a hole below itself. List its buffers by
//! (offset, static rank). Then each buffer's offset equals its *minimum offset* given the
//! buffers listed before it — the highest top among them that it conflicts with, aligned
//! (conflicting buffers below it are listed before it; none shares its offset). So the
//! search only ever places the next buffer at its current minimum offset, and only in
//! non-decreasing (offset, rank) order; it finds every such listing, hence a packing
//! whenever one exists.
//!
//! # Pruning (each rule keeps the listing above)
//!
//! - **Order.** A candidate whose (minimum offset, rank) is below the last placement's
//!   is skipped now (its minimum may rise later).
//! - **Dominance.** Placing at an offset ≥ `minoff(c) + size(c)` of some unplaced `c`
//!   would leave `c`'s slot free forever: `c` could move down, so the offset sum was not
//!   minimal. Such placements are not tried.
//! - **Dead buffers.** An unplaced buffer with no unplaced conflicts (nothing can raise
//!   its minimum any more) whose key is below the last placement's can never be placed:
//!   the node fails. For the same reason, when such a *hatless* candidate's branch fails,
//!   its siblings are not tried (each would make it dead).
//! - **Section bound.** In each section (buffers all live together), the unplaced
//!   buffers stack above both the lowest of their minimum offsets and the last placed
//!   offset: that plus their total size must fit under C. A candidate is dropped before
//!   placing it when the fullest section cannot stack above its offset; after placing
//!   it, only the sections whose lowest minimum offset moved are rechecked.
//! - **Capacity.** A buffer whose minimum offset plus size exceeds C fails the branch.
//! - **Decomposition.** When no unplaced buffer spans the boundary between two sections,
//!   the two sides share nothing any more and are solved separately, each with a fresh
//!   rank order but still above the last placed offset (the listing's remaining buffers
//!   all are); one failing side fails the node.
//!
//! Restarts: the search runs with a node budget under several static rank orders in
//! turn, doubling the budget each round, until one run finishes (packing found, or none
//! exists — a proof from any order is a proof).

use crate::prep::{align_up, Prep};
use std::time::Instant;

/// Result of a (sub)search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Res {
    Found,
    NotFound,
    Stop,
}

/// Why a search stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopReason {
    /// This attempt's node budget (the restart schedule moves on).
    Budget,
    /// The caller's time limit.
    Time,
    /// The caller's node limit.
    Nodes,
}

/// Static rank criteria, compared in order, larger first.
#[derive(Clone, Copy, Debug)]
enum Crit {
    /// Lifetime length.
    Width,
    /// Size × lifetime.
    Area,
    /// The largest unplaced load among the buffer's sections.
    Total,
}

/// The rank orders the restarts cycle through.
const ORDERS: [[Crit; 3]; 3] = [[Crit::Width, Crit::Area, Crit::Total], [Crit::Total, Crit::Area, Crit::Width], [Crit::Total, Crit::Width, Crit::Area]];

/// A set of unplaced buffers confined to sections `lo..hi`, in rank order.
struct Part {
    members: Vec<u32>,
    lo: u32,
    hi: u32,
}

/// The search state for one capacity; `place` and `undo` keep it incremental.
pub(crate) struct Engine<'p> {
    p: &'p Prep,
    cap: u64,
    placed: Vec<bool>,
    /// For unplaced buffers: the lowest offset allowed by the placed ones.
    minoff: Vec<u64>,
    /// Number of unplaced conflicting buffers.
    hat: Vec<u32>,
    /// Per section: total size of its unplaced buffers.
    total: Vec<u64>,
    /// Per section: lowest `minoff` of its unplaced buffers (`u64::MAX` if none).
    floor: Vec<u64>,
    /// Per section: how many unplaced buffers have `minoff == floor`.
    at_floor: Vec<u32>,
    /// Per boundary `s | s + 1`: unplaced buffers live in both sections.
    cuts: Vec<u32>,
    minoff_trail: Vec<(u32, u64)>,
    /// `(section, floor, at_floor)` before a change.
    floor_trail: Vec<(u32, u64, u32)>,
    /// Sections whose floor must be recomputed.
    dirty: Vec<u32>,
    /// Sections whose floor changed in the latest `place`.
    changed: Vec<u32>,
    is_dirty: Vec<bool>,
    /// Candidate lists of all open nodes, stacked.
    cand: Vec<(u64, u32)>,
    /// The last offset written for each buffer; a packing after `Res::Found`.
    pub offsets: Vec<u64>,
    /// Nodes visited (all attempts).
    pub nodes: u64,
    /// Nodes that failed.
    pub backtracks: u64,
    /// Attempts started.
    pub attempts: u32,
    budget_end: u64,
    node_limit: u64,
    deadline: Option<Instant>,
    order: usize,
    stop: Option<StopReason>,
}

impl<'p> Engine<'p> {
    /// A fresh search state for capacity `cap`.
    pub fn new(p: &'p Prep, cap: u64, deadline: Option<Instant>, node_limit: u64) -> Self {
        let n = p.n();
        let ns = p.sections();
        let mut hat = vec![0u32; n];
        for (b, h) in hat.iter_mut().enumerate() {
            *h = p.conflicts(b).len() as u32;
        }
        let mut cuts = vec![0u32; ns.saturating_sub(1)];
        for b in 0..n {
            for s in p.sec_lo[b]..p.sec_hi[b] - 1 {
                cuts[s as usize] += 1;
            }
        }
        Engine {
            p,
            cap,
            placed: vec![false; n],
            minoff: vec![0; n],
            hat,
            total: p.load.clone(),
            floor: vec![0; ns],
            at_floor: (0..ns).map(|s| p.members(s).len() as u32).collect(),
            cuts,
            minoff_trail: Vec::new(),
            floor_trail: Vec::new(),
            dirty: Vec::new(),
            changed: Vec::new(),
            is_dirty: vec![false; ns],
            cand: Vec::new(),
            offsets: vec![0; n],
            nodes: 0,
            backtracks: 0,
            attempts: 0,
            budget_end: u64::MAX,
            node_limit,
            deadline,
            order: 0,
            stop: None,
        }
    }

    /// Runs the restart schedule. `Found`: `self.offsets` is a packing within the
    /// capacity. `NotFound`: none exists. `Stop`: the time or node limit ran out.
    pub fn run(&mut self) -> Res {
        let n = self.p.n() as u64;
        let mut budget = 2 * n.max(8);
        loop {
            for order in 0..ORDERS.len() {
                self.order = order;
                self.attempts += 1;
                self.stop = None;
                self.budget_end = self.nodes.saturating_add(budget);
                let all = (0..self.p.n() as u32).collect();
                let res = self.solve_region(all, 0, self.p.sections() as u32, 0);
                match res {
                    Res::Stop if self.stop == Some(StopReason::Budget) => continue,
                    r => return r,
                }
            }
            budget = budget.saturating_mul(2);
        }
    }

    /// Splits `members` (all unplaced, within sections `lo..hi`) at boundaries no
    /// unplaced buffer crosses and solves each side.
    fn solve_region(&mut self, members: Vec<u32>, lo: u32, hi: u32, floor: u64) -> Res {
        let p = self.p;
        let mut cutpoints = vec![lo];
        for s in lo..hi.saturating_sub(1) {
            if self.cuts[s as usize] == 0 {
                cutpoints.push(s + 1);
            }
        }
        cutpoints.push(hi);
        let mut groups: Vec<Vec<u32>> = vec![Vec::new(); cutpoints.len() - 1];
        for b in members {
            let k = cutpoints.partition_point(|&c| c <= p.sec_lo[b as usize]) - 1;
            groups[k].push(b);
        }
        for (k, mut group) in groups.into_iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            self.rank(&mut group);
            let part = Part { members: group, lo: cutpoints[k], hi: cutpoints[k + 1] };
            let r = self.dfs(&part, (floor, 0));
            if r != Res::Found {
                return r;
            }
        }
        Res::Found
    }

    /// Sorts a group into the current rank order (ties by index).
    fn rank(&self, group: &mut [u32]) {
        let p = self.p;
        let key = |b: u32| -> [u128; 3] {
            let b = b as usize;
            let mut k = [0u128; 3];
            for (slot, c) in k.iter_mut().zip(ORDERS[self.order]) {
                *slot = match c {
                    Crit::Width => p.width[b] as u128,
                    Crit::Area => p.width[b] as u128 * p.size[b] as u128,
                    Crit::Total => (p.sec_lo[b]..p.sec_hi[b]).map(|s| self.total[s as usize]).max().unwrap_or(0) as u128,
                };
            }
            k
        };
        let mut keyed: Vec<([u128; 3], u32)> = group.iter().map(|&b| (key(b), b)).collect();
        keyed.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (slot, (_, b)) in group.iter_mut().zip(keyed) {
            *slot = b;
        }
    }

    fn check_limits(&mut self) -> bool {
        if self.nodes >= self.budget_end {
            self.stop = Some(StopReason::Budget);
            return true;
        }
        if self.nodes >= self.node_limit {
            self.stop = Some(StopReason::Nodes);
            return true;
        }
        if self.nodes & 15 == 0 {
            if let Some(d) = self.deadline {
                if Instant::now() >= d {
                    self.stop = Some(StopReason::Time);
                    return true;
                }
            }
        }
        false
    }

    /// One node: `last` is the (offset, rank) of the latest placement in this part (or
    /// `(floor, 0)` for a fresh part whose buffers must all go at or above `floor`).
    fn dfs(&mut self, part: &Part, last: (u64, u32)) -> Res {
        let p = self.p;
        // Pass 1: dead buffers, the dominance bound, and whether anything is left.
        let mut min_top = u64::MAX;
        let mut any = false;
        for (r, &b) in part.members.iter().enumerate() {
            let b = b as usize;
            if self.placed[b] {
                continue;
            }
            any = true;
            let m = self.minoff[b];
            if self.hat[b] == 0 && (m, r as u32) < last {
                self.backtracks += 1;
                return Res::NotFound;
            }
            min_top = min_top.min(m + p.size[b]);
        }
        if !any {
            return Res::Found;
        }
        // Nodes that get this far count against the budget.
        self.nodes += 1;
        #[cfg(debug_assertions)]
        if self.nodes % 64 == 1 {
            self.check_state();
        }
        if self.check_limits() {
            return Res::Stop;
        }
        let max_total = (part.lo..part.hi).map(|s| self.total[s as usize]).max().unwrap_or(0);
        // Pass 2: the candidates, in (minimum offset, rank) order. Those that fail the
        // section bound before any propagation are dropped here; a hatless one among
        // them cuts off every candidate after it (as its failed branch would).
        let start = self.cand.len();
        let mut cutoff = (u64::MAX, u32::MAX);
        for (r, &b) in part.members.iter().enumerate() {
            let b = b as usize;
            if self.placed[b] {
                continue;
            }
            let key = (self.minoff[b], r as u32);
            if key < last || key.0 >= min_top {
                continue;
            }
            // Every unplaced buffer goes at or above `key.0`, and those of a section
            // stack: the fullest section must fit above it. (`b` itself always fits:
            // a minimum offset is only raised as far as `C − size`.)
            if key.0 + max_total > self.cap {
                if self.hat[b] == 0 {
                    cutoff = cutoff.min(key);
                }
                continue;
            }
            self.cand.push(key);
        }
        self.cand[start..].sort_unstable();
        let end = self.cand.len();
        let mut res = Res::NotFound;
        for i in start..end {
            let key = self.cand[i];
            if key > cutoff {
                break;
            }
            let b = part.members[key.1 as usize] as usize;
            let hatless = self.hat[b] == 0;
            let (mark, ok) = self.place(b, key.0);
            let r = if !ok || !self.bound_ok() {
                Res::NotFound
            } else if self.splits(b) {
                let rest: Vec<u32> = part.members.iter().copied().filter(|&m| !self.placed[m as usize]).collect();
                self.solve_region(rest, part.lo, part.hi, key.0)
            } else {
                self.dfs(part, key)
            };
            self.undo(b, mark);
            if r != Res::NotFound {
                res = r;
                break;
            }
            if hatless {
                break;
            }
        }
        self.cand.truncate(start);
        if res == Res::NotFound {
            self.backtracks += 1;
        }
        res
    }

    /// The section bound after placing at `last`: it held before the placement, and
    /// `last + total(s) ≤ C` was checked for every section, so only sections whose
    /// floor moved can now break `floor + total ≤ C`.
    fn bound_ok(&self) -> bool {
        self.changed.iter().all(|&s| {
            let t = self.total[s as usize];
            t == 0 || self.floor[s as usize] + t <= self.cap
        })
    }

    /// Debug builds: the incremental section state equals a recomputation.
    #[cfg(debug_assertions)]
    fn check_state(&self) {
        for s in 0..self.p.sections() {
            let open: Vec<usize> = self.p.members(s).iter().map(|&m| m as usize).filter(|&m| !self.placed[m]).collect();
            let total: u64 = open.iter().map(|&m| self.p.size[m]).sum();
            assert_eq!(total, self.total[s], "section {s} total");
            if let Some(floor) = open.iter().map(|&m| self.minoff[m]).min() {
                assert_eq!(floor, self.floor[s], "section {s} floor");
                let at = open.iter().filter(|&&m| self.minoff[m] == floor).count() as u32;
                assert_eq!(at, self.at_floor[s], "section {s} count at the floor");
            }
        }
    }

    /// Whether placing `b` left a boundary inside its range uncrossed.
    fn splits(&self, b: usize) -> bool {
        let (lo, hi) = (self.p.sec_lo[b], self.p.sec_hi[b]);
        (lo..hi - 1).any(|s| self.cuts[s as usize] == 0)
    }

    /// Places `b` at `o` and propagates. Returns the trail marks and whether every
    /// unplaced buffer still fits under the capacity.
    fn place(&mut self, b: usize, o: u64) -> ((usize, usize), bool) {
        let p = self.p;
        let mark = (self.minoff_trail.len(), self.floor_trail.len());
        self.changed.clear();
        self.placed[b] = true;
        self.offsets[b] = o;
        let (lo, hi) = (p.sec_lo[b], p.sec_hi[b]);
        let own = self.minoff[b];
        for s in lo..hi {
            self.total[s as usize] -= p.size[b];
            if self.floor[s as usize] == own {
                self.leave_floor(s);
            }
        }
        for s in lo..hi - 1 {
            self.cuts[s as usize] -= 1;
        }
        let top = o + p.size[b];
        let mut ok = true;
        for &u in p.conflicts(b) {
            let u = u as usize;
            self.hat[u] -= 1;
            if self.placed[u] {
                continue;
            }
            let m = align_up(top, p.align[u]);
            let old = self.minoff[u];
            if m > old {
                self.minoff_trail.push((u as u32, old));
                self.minoff[u] = m;
                if m + p.size[u] > self.cap {
                    ok = false;
                }
                for s in p.sec_lo[u]..p.sec_hi[u] {
                    if self.floor[s as usize] == old {
                        self.leave_floor(s);
                    }
                }
            }
        }
        // Sections that lost their last buffer at the floor: recompute (already trailed).
        while let Some(s) = self.dirty.pop() {
            let su = s as usize;
            self.is_dirty[su] = false;
            let (mut f, mut c) = (u64::MAX, 0u32);
            for &m in p.members(su) {
                if !self.placed[m as usize] {
                    let v = self.minoff[m as usize];
                    if v < f {
                        (f, c) = (v, 1);
                    } else if v == f {
                        c += 1;
                    }
                }
            }
            self.floor[su] = f;
            self.at_floor[su] = c;
            self.changed.push(s);
        }
        (mark, ok)
    }

    /// One unplaced buffer at section `s`'s floor left it (placed, or raised).
    #[inline]
    fn leave_floor(&mut self, s: u32) {
        let su = s as usize;
        self.floor_trail.push((s, self.floor[su], self.at_floor[su]));
        self.at_floor[su] -= 1;
        if self.at_floor[su] == 0 && !self.is_dirty[su] {
            self.is_dirty[su] = true;
            self.dirty.push(s);
        }
    }

    /// Reverts `place(b, _)`.
    fn undo(&mut self, b: usize, mark: (usize, usize)) {
        let p = self.p;
        while self.floor_trail.len() > mark.1 {
            if let Some((s, f, c)) = self.floor_trail.pop() {
                self.floor[s as usize] = f;
                self.at_floor[s as usize] = c;
            }
        }
        while self.minoff_trail.len() > mark.0 {
            if let Some((u, m)) = self.minoff_trail.pop() {
                self.minoff[u as usize] = m;
            }
        }
        for &u in p.conflicts(b) {
            self.hat[u as usize] += 1;
        }
        let (lo, hi) = (p.sec_lo[b], p.sec_hi[b]);
        for s in lo..hi {
            self.total[s as usize] += p.size[b];
        }
        for s in lo..hi - 1 {
            self.cuts[s as usize] += 1;
        }
        self.placed[b] = false;
    }
}
