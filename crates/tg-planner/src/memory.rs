//! Offsets for the buffers of one device: does a packing into the arena exist, and which.
//!
//! The packing itself is `tg_pack`'s (the solver behind `tg pack`): best-fit heuristics,
//! then an exact branch and bound under a node budget and the deadline. This module adapts
//! the planner's buffers to it; its test checks the verdicts against an enumeration of every
//! offset vector.

use std::time::Instant;

/// One buffer to place: live on `[start, end)` (`end = u64::MAX` for kept buffers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// First instant it is live.
    pub start: u64,
    /// First instant it is dead.
    pub end: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Do two items overlap in time?
pub fn conflict(a: &Item, b: &Item) -> bool {
    a.start < b.end && b.start < a.end
}

/// The answer of [`pack`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packing {
    /// Offsets, one per item, all within the capacity.
    Fits(Vec<u64>),
    /// Proven: no packing fits.
    Infeasible,
    /// The budget ran out before either was shown.
    Unknown,
}

/// Place `items` into `capacity` bytes: first-fit by start time when that fits (linear in
/// the items times the buffers live at once, which on model plans with ample arenas is all
/// it takes), else `tg_pack` (heuristics, then its exact search under `node_budget` nodes
/// and the deadline).
pub fn pack(items: &[Item], capacity: u64, node_budget: u64, deadline: Option<Instant>) -> Packing {
    if items.is_empty() {
        return Packing::Fits(Vec::new());
    }
    if let Some(offsets) = first_fit(items, capacity) {
        return Packing::Fits(offsets);
    }
    let clamp = |t: u64| t.min(i64::MAX as u64) as i64;
    let buffers: Vec<tg_pack::Buffer> = items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let lower = clamp(it.start);
            let upper = clamp(it.end).max(lower + 1);
            tg_pack::Buffer::new(i.to_string(), lower, upper, it.bytes)
        })
        .collect();
    let Ok(problem) = tg_pack::Problem::new(buffers) else {
        return Packing::Unknown;
    };
    let time = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let limits = tg_pack::Limits { time, nodes: Some(node_budget) };
    match tg_pack::solve(&problem, capacity, &limits) {
        Ok(out) => match out.verdict {
            tg_pack::Verdict::Feasible(sol) => Packing::Fits(sol.offsets),
            tg_pack::Verdict::Infeasible => Packing::Infeasible,
            tg_pack::Verdict::Unknown { .. } => Packing::Unknown,
        },
        Err(_) => Packing::Unknown,
    }
}

/// Items by start time, each at the lowest offset clear of the placed items still live at
/// its start (those are the only ones it can conflict with: every placed item starts no
/// later); `None` when one would end above `capacity`.
fn first_fit(items: &[Item], capacity: u64) -> Option<Vec<u64>> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| (items[i].start, std::cmp::Reverse(items[i].bytes), i));
    let mut offsets = vec![0u64; items.len()];
    // Placed items live at the current start: (offset, end offset, item).
    let mut active: Vec<(u64, u64, usize)> = Vec::new();
    for &i in &order {
        let it = items[i];
        // Placed items ending by this start end before every later one starts too.
        active.retain(|&(_, _, j)| items[j].end > it.start);
        active.sort_unstable();
        let mut x = 0u64;
        for &(lo, hi, _) in active.iter().filter(|_| it.start < it.end) {
            if x.checked_add(it.bytes)? <= lo {
                break;
            }
            x = x.max(hi);
        }
        let top = x.checked_add(it.bytes)?;
        if top > capacity {
            return None;
        }
        offsets[i] = x;
        if it.start < it.end {
            active.push((x, top, i));
        }
    }
    Some(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(items: &[Item], cap: u64) -> bool {
        // Every offset vector with offsets in [0, cap - bytes].
        fn rec(items: &[Item], cap: u64, offs: &mut Vec<u64>) -> bool {
            let k = offs.len();
            if k == items.len() {
                return true;
            }
            let it = items[k];
            if it.bytes > cap {
                return false;
            }
            for o in 0..=cap - it.bytes {
                let ok = (0..k).all(|j| !conflict(&items[j], &it) || offs[j] + items[j].bytes <= o || o + it.bytes <= offs[j]);
                if ok {
                    offs.push(o);
                    if rec(items, cap, offs) {
                        return true;
                    }
                    offs.pop();
                }
            }
            false
        }
        rec(items, cap, &mut Vec::new())
    }

    #[test]
    fn exact_packing_equals_brute_force() {
        use rand::{Rng, SeedableRng};
        let seed = 0x5eed_0001u64;
        eprintln!("seed {seed:#x}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (mut fits, mut infeasible) = (0, 0);
        for case in 0..3000 {
            let n = rng.gen_range(1..=6);
            let items: Vec<Item> = (0..n)
                .map(|_| {
                    let s = rng.gen_range(0..6);
                    let kept = rng.gen_bool(0.1);
                    Item { start: if kept { 0 } else { s }, end: if kept { u64::MAX } else { s + rng.gen_range(1..5) }, bytes: rng.gen_range(1..5) }
                })
                .collect();
            let cap = rng.gen_range(1..10);
            let want = brute(&items, cap);
            match pack(&items, cap, u64::MAX, None) {
                Packing::Fits(offs) => {
                    assert!(want, "case {case}: packed what brute force cannot: {items:?} cap {cap}");
                    for i in 0..n {
                        assert!(offs[i] + items[i].bytes <= cap);
                        for j in 0..i {
                            assert!(!conflict(&items[i], &items[j]) || offs[i] + items[i].bytes <= offs[j] || offs[j] + items[j].bytes <= offs[i], "case {case}: overlap");
                        }
                    }
                    fits += 1;
                }
                Packing::Infeasible => {
                    assert!(!want, "case {case}: missed a packing: {items:?} cap {cap}");
                    infeasible += 1;
                }
                Packing::Unknown => panic!("no budget was set"),
            }
        }
        eprintln!("{fits} packed, {infeasible} infeasible");
        assert!(fits > 300 && infeasible > 300);
    }
}
