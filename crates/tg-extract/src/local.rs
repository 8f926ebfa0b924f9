//! Local search on a total choice map (a node for every class; the extraction is what the
//! roots reach). A move switches one extracted class to another of its nodes; classes
//! that become needed keep the node the map already gives them. A move is kept when the
//! induced extraction stays acyclic and gets cheaper by more than the tolerance. Passes
//! repeat until none improves or the deadline passes.
//!
//! Moves are evaluated incrementally, not by walking the whole extraction again. The
//! extraction keeps a reference count per class (its extracted parents, plus one for a
//! root); a class is extracted iff its count is positive. Moving class `c` from node `o`
//! to node `n`:
//!
//! - *release* `o`: decrement its child classes; a class reaching zero leaves the
//!   extraction and releases its own children (its cost is *freed*). Only classes below
//!   `c` are touched, and `c` is not among them (the extraction is acyclic);
//! - *acquire* `n`: increment its child classes; a class at zero joins (its cost is
//!   *added*) and acquires its own children, depth first. The new extraction is the old
//!   one, minus the freed classes, plus the added ones, with `c`'s cost changed, so its
//!   cost is `cur − w(o) + w(n) − freed + added` exactly (classes freed and added again
//!   count on both sides).
//!
//! The new extraction is acyclic iff `c` is not reachable from `n`'s children: the old
//! extraction was acyclic and only `c`'s edges changed. The acquiring walk sees every
//! added class; a cycle among added classes shows as a class met again while on the walk's
//! stack, and reaching `c` itself is a cycle. A class that was already extracted (and
//! stays so) reaches `c` only along old choices, inside the old extraction, and then comes
//! after `c` in the old extraction's post-order and is higher above the leaves; otherwise a
//! depth-first search over old choices, pruned by those two necessary conditions, decides.
//!
//! Release is done once per class and shared by its candidate nodes; every counter change
//! is logged and undone unless the move is kept. A kept move rebuilds the counts, order and
//! exact cost with one walk from the roots, and is undone if the walk disagrees (so no move
//! is kept on rounding). The moves tried, their order and the acceptance rule are those of
//! walking the whole extraction for every move, at a cost proportional to the part of the
//! extraction that a move changes.

use crate::greedy::Walk;
use crate::problem::Problem;
use std::time::Instant;

/// Improves `choice` in place; returns the cost of its induced extraction.
pub(crate) fn improve(p: &Problem, choice: &mut [u32], rel_tol: f64, deadline: Instant) -> f64 {
    let mut st = State::new(p);
    let Some(mut cur) = st.rebuild(p, choice) else {
        return f64::INFINITY;
    };
    let mut classes: Vec<u32> = Vec::new();
    loop {
        let mut improved = false;
        classes.clear();
        classes.extend_from_slice(&st.walk.order);
        for &c in &classes {
            if Instant::now() >= deadline {
                return cur;
            }
            let c = c as usize;
            // A class no longer extracted: no move changes the cost.
            if st.refs[c] == 0 || p.nodes_of(c).len() < 2 {
                continue;
            }
            let old = choice[c] as usize;
            let freed = st.release(p, choice, old);
            let mut kept = false;
            for n in p.nodes_of(c) {
                if n == old {
                    continue;
                }
                let added = st.acquire(p, choice, c, n);
                st.undo_acquire();
                let Some(added) = added else { continue };
                let v = cur - p.cost[old] + p.cost[n] - freed + added;
                if v < cur - rel_tol * cur.abs() {
                    st.undo_release();
                    choice[c] = n as u32;
                    match st.rebuild(p, choice) {
                        Some(exact) if exact < cur - rel_tol * cur.abs() => {
                            cur = exact;
                            kept = true;
                            break;
                        }
                        _ => {
                            choice[c] = old as u32;
                            st.rebuild(p, choice);
                            st.release(p, choice, old);
                        }
                    }
                }
            }
            if kept {
                improved = true;
            } else {
                st.undo_release();
            }
        }
        if !improved {
            return cur;
        }
    }
}

/// The incremental view of the extraction a choice map induces (see the module doc).
struct State {
    walk: Walk,
    /// Extracted parents of each class (plus one for a root).
    refs: Vec<u32>,
    /// Position in the walk's post-order (children first), for extracted classes.
    pos: Vec<u32>,
    /// Longest chain of extracted classes below (leaves 0), for extracted classes.
    height: Vec<u32>,
    /// Classes decremented by the last release, to undo it.
    released: Vec<u32>,
    /// Classes incremented by the last acquire, to undo it.
    acquired: Vec<u32>,
    /// Per class: the stamp of the acquire that added it (`color` 1 while on its stack,
    /// 2 when done), or of the reachability search that visited it.
    seen: Vec<u32>,
    color: Vec<u8>,
    stamp: u32,
    stack: Vec<(u32, u32)>,
    dfs: Vec<u32>,
}

impl State {
    fn new(p: &Problem) -> State {
        let nc = p.num_classes();
        State {
            walk: Walk::default(),
            refs: vec![0; nc],
            pos: vec![0; nc],
            height: vec![0; nc],
            released: Vec::new(),
            acquired: Vec::new(),
            seen: vec![0; nc],
            color: vec![0; nc],
            stamp: 0,
            stack: Vec::new(),
            dfs: Vec::new(),
        }
    }

    /// Walks the extraction from the roots: counts, post-order positions, heights and the
    /// exact cost (summed as [`crate::greedy::induced`] sums it), or `None` if cyclic or
    /// incomplete.
    fn rebuild(&mut self, p: &Problem, choice: &[u32]) -> Option<f64> {
        let cost = crate::greedy::induced(p, choice, &mut self.walk)?;
        self.refs.fill(0);
        for &r in &p.roots {
            self.refs[r as usize] += 1;
        }
        for (i, &c) in self.walk.order.iter().enumerate() {
            let kids = p.kids(choice[c as usize] as usize);
            let mut h = 0;
            for &d in kids {
                self.refs[d as usize] += 1;
                h = h.max(self.height[d as usize] + 1);
            }
            self.pos[c as usize] = i as u32;
            self.height[c as usize] = h;
        }
        self.released.clear();
        self.acquired.clear();
        Some(cost)
    }

    /// Releases node `o` (the choice of an extracted class); returns the cost freed.
    fn release(&mut self, p: &Problem, choice: &[u32], o: usize) -> f64 {
        self.released.clear();
        let mut freed = 0.0;
        self.dfs.clear();
        self.dfs.extend_from_slice(p.kids(o));
        while let Some(d) = self.dfs.pop() {
            self.released.push(d);
            let r = &mut self.refs[d as usize];
            *r -= 1;
            if *r == 0 {
                let m = choice[d as usize] as usize;
                freed += p.cost[m];
                self.dfs.extend_from_slice(p.kids(m));
            }
        }
        freed
    }

    fn undo_release(&mut self) {
        for &d in &self.released {
            self.refs[d as usize] += 1;
        }
        self.released.clear();
    }

    /// Acquires node `n` for class `c` (after the release of its old node); returns the
    /// cost added, or `None` if the move closes a cycle or needs a class without a choice.
    fn acquire(&mut self, p: &Problem, choice: &[u32], c: usize, n: usize) -> Option<f64> {
        self.stamp += 1;
        let stamp = self.stamp;
        let mut added = 0.0;
        self.acquired.clear();
        self.stack.clear();
        // A pseudo-frame for `n` itself (class `u32::MAX` marks it).
        self.stack.push((u32::MAX, 0));
        while let Some(&mut (x, ref mut i)) = self.stack.last_mut() {
            let kids = if x == u32::MAX { p.kids(n) } else { p.kids(choice[x as usize] as usize) };
            let Some(&d) = kids.get(*i as usize) else {
                if x != u32::MAX {
                    self.color[x as usize] = 2;
                }
                self.stack.pop();
                continue;
            };
            *i += 1;
            let du = d as usize;
            if du == c {
                return None;
            }
            self.acquired.push(d);
            self.refs[du] += 1;
            if self.refs[du] == 1 {
                // Joins the extraction.
                let m = choice[du] as usize;
                if m >= p.num_nodes() {
                    return None;
                }
                added += p.cost[m];
                self.seen[du] = stamp;
                self.color[du] = 1;
                self.stack.push((d, 0));
            } else if self.seen[du] == stamp && self.color[du] != 0 {
                // Added by this acquire: on the stack is a cycle, done is a shared class.
                if self.color[du] == 1 {
                    return None;
                }
            } else if self.reaches(p, choice, du, c, stamp) {
                return None;
            }
        }
        Some(added)
    }

    /// Whether the extracted class `x` reaches `c` along old choices (both extracted in the
    /// last rebuild). Classes visited are stamped (with `color` 0) so that one acquire
    /// searches each at most once.
    fn reaches(&mut self, p: &Problem, choice: &[u32], x: usize, c: usize, stamp: u32) -> bool {
        let (pc, hc) = (self.pos[c], self.height[c]);
        let far = |s: &State, y: usize| s.pos[y] > pc && s.height[y] > hc;
        if !far(self, x) || self.seen[x] == stamp {
            return false;
        }
        self.seen[x] = stamp;
        self.color[x] = 0;
        self.dfs.clear();
        self.dfs.push(x as u32);
        while let Some(y) = self.dfs.pop() {
            for &d in p.kids(choice[y as usize] as usize) {
                let du = d as usize;
                if du == c {
                    return true;
                }
                if self.seen[du] != stamp && far(self, du) {
                    self.seen[du] = stamp;
                    self.color[du] = 0;
                    self.dfs.push(d);
                }
            }
        }
        false
    }

    fn undo_acquire(&mut self) {
        for &d in self.acquired.iter().rev() {
            self.refs[d as usize] -= 1;
        }
        self.acquired.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::greedy::{greedy_tree, induced};
    use crate::tests::random_problem;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The reference: the same moves, each checked by walking the whole extraction.
    fn improve_by_walks(p: &Problem, choice: &mut [u32], rel_tol: f64) -> f64 {
        let mut walk = Walk::default();
        let Some(mut cur) = induced(p, choice, &mut walk) else {
            return f64::INFINITY;
        };
        loop {
            let mut improved = false;
            induced(p, choice, &mut walk);
            let classes = walk.order.clone();
            for &c in &classes {
                let c = c as usize;
                let old = choice[c];
                for n in p.nodes_of(c) {
                    if n as u32 == old {
                        continue;
                    }
                    choice[c] = n as u32;
                    match induced(p, choice, &mut walk) {
                        Some(v) if v < cur - rel_tol * cur.abs() => {
                            cur = v;
                            improved = true;
                            break;
                        }
                        _ => choice[c] = old,
                    }
                }
            }
            if !improved {
                return cur;
            }
        }
    }

    fn random_map(p: &Problem, rng: &mut ChaCha8Rng) -> Vec<u32> {
        (0..p.num_classes()).map(|c| rng.gen_range(p.nodes_of(c)) as u32).collect()
    }

    /// Every move's incremental cost (release, then acquire) equals the cost of walking
    /// the changed map, and a move is rejected exactly when that walk finds a cycle.
    #[test]
    fn incremental_moves_match_walks() {
        let seed = 0x10ca1;
        println!("seed {seed}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut moves, mut cyclic) = (0, 0);
        for _ in 0..1500 {
            let Some(p) = random_problem(&mut rng, 40) else { continue };
            let mut choice = if rng.gen_bool(0.5) { greedy_tree(&p, &p.cost) } else { random_map(&p, &mut rng) };
            let mut st = State::new(&p);
            let mut walk = Walk::default();
            let Some(cur) = st.rebuild(&p, &choice) else { continue };
            for c in st.walk.order.clone() {
                let c = c as usize;
                let old = choice[c] as usize;
                let freed = st.release(&p, &choice, old);
                for n in p.nodes_of(c) {
                    let added = st.acquire(&p, &choice, c, n);
                    st.undo_acquire();
                    choice[c] = n as u32;
                    let exact = induced(&p, &choice, &mut walk);
                    choice[c] = old as u32;
                    let fast = added.map(|a| cur - p.cost[old] + p.cost[n] - freed + a);
                    assert_eq!(fast, exact, "class {c} node {old} -> {n}");
                    moves += 1;
                    cyclic += usize::from(exact.is_none());
                }
                st.undo_release();
                assert_eq!(st.refs, State::new(&p).refs_of(&p, &choice), "counts not restored");
            }
        }
        println!("{moves} moves, {cyclic} cyclic");
        assert!(cyclic > 100 && moves > 10 * cyclic);
    }

    /// `improve` makes the same moves as walking the whole extraction for each.
    #[test]
    fn improve_matches_walks() {
        let seed = 0x10ca2;
        println!("seed {seed}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut changed = 0;
        for _ in 0..1500 {
            let Some(p) = random_problem(&mut rng, 40) else { continue };
            let start = if rng.gen_bool(0.5) { greedy_tree(&p, &p.cost) } else { random_map(&p, &mut rng) };
            let (mut a, mut b) = (start.clone(), start.clone());
            let far = Instant::now() + std::time::Duration::from_secs(60);
            let va = improve(&p, &mut a, 1e-9, far);
            let vb = improve_by_walks(&p, &mut b, 1e-9);
            assert_eq!(va, vb);
            assert_eq!(a, b);
            changed += usize::from(a != start);
        }
        println!("{changed} maps improved");
        assert!(changed > 100);
    }

    impl State {
        /// Counts rebuilt from scratch.
        fn refs_of(mut self, p: &Problem, choice: &[u32]) -> Vec<u32> {
            self.rebuild(p, choice);
            self.refs
        }
    }
}
