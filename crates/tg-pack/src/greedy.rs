//! Instant heuristics: place buffers one by one, each in a free gap among the already
//! placed buffers it conflicts with. Several orders × two gap rules; the best packing wins.

use crate::prep::{align_up, Prep};

/// Which free gap a buffer goes into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The lowest gap that holds it.
    First,
    /// The gap that holds it with the least room to spare (the open top counts as
    /// unbounded room); the lowest such gap on ties.
    Best,
}

/// The orders tried, as `(name, key)`: buffers are placed in increasing key order.
fn orders(p: &Prep) -> Vec<(&'static str, Vec<usize>)> {
    let n = p.n();
    let by = |key: &dyn Fn(usize) -> (u128, u128, u128)| {
        let mut v: Vec<usize> = (0..n).collect();
        v.sort_by_key(|&b| (std::cmp::Reverse(key(b)), b));
        v
    };
    let load: Vec<u64> = (0..n).map(|b| p.max_load_of(b)).collect();
    vec![
        ("size", by(&|b| (p.size[b] as u128, p.width[b] as u128, 0))),
        ("lifetime", by(&|b| (p.width[b] as u128, p.size[b] as u128, 0))),
        ("area", by(&|b| (p.size[b] as u128 * p.width[b] as u128, p.size[b] as u128, 0))),
        ("load", by(&|b| (load[b] as u128, p.size[b] as u128, p.width[b] as u128))),
        ("start", {
            let mut v: Vec<usize> = (0..n).collect();
            v.sort_by_key(|&b| (p.lower[b], std::cmp::Reverse(p.size[b]), b));
            v
        }),
    ]
}

/// Places `order` greedily; `fixed` offsets (from hints) are placed first when they
/// are aligned and collide with nothing fixed before them. Returns offsets per active
/// buffer and the height.
pub(crate) fn place(p: &Prep, order: &[usize], fit: Fit, fixed: &[Option<u64>]) -> (Vec<u64>, u64) {
    let n = p.n();
    let mut off: Vec<Option<u64>> = vec![None; n];
    let mut height = 0u64;
    let mut busy: Vec<(u64, u64)> = Vec::new();
    // Hinted buffers first, lowest hint first.
    let mut hinted: Vec<(u64, usize)> = (0..n).filter_map(|b| fixed.get(b).copied().flatten().map(|o| (o, b))).collect();
    hinted.sort_unstable();
    for &(o, b) in &hinted {
        let ok = o % p.align[b] == 0
            && p.conflicts(b).iter().all(|&c| match off[c as usize] {
                Some(oc) => oc + p.size[c as usize] <= o || o + p.size[b] <= oc,
                None => true,
            });
        if ok {
            off[b] = Some(o);
            height = height.max(o + p.size[b]);
        }
    }
    for &b in order {
        if off[b].is_some() {
            continue;
        }
        busy.clear();
        busy.extend(p.conflicts(b).iter().filter_map(|&c| off[c as usize].map(|o| (o, o + p.size[c as usize]))));
        busy.sort_unstable();
        let (size, align) = (p.size[b], p.align[b]);
        let mut reach = 0u64;
        let mut chosen: Option<(u64, u64)> = None; // (slack, offset)
        for &(start, end) in &busy {
            let o = align_up(reach, align);
            if start > reach && o + size <= start {
                let slack = start - (o + size);
                match fit {
                    Fit::First => {
                        chosen = Some((slack, o));
                        break;
                    }
                    Fit::Best => {
                        if chosen.is_none_or(|(s, _)| slack < s) {
                            chosen = Some((slack, o));
                        }
                    }
                }
            }
            reach = reach.max(end);
        }
        let o = match chosen {
            Some((_, o)) => o,
            None => align_up(reach, align),
        };
        off[b] = Some(o);
        height = height.max(o + size);
    }
    (off.into_iter().map(|o| o.unwrap_or(0)).collect(), height)
}

/// Runs every order with both gap rules (and the hints, if any) and returns the lowest
/// packing: offsets per active buffer, its height, and the name of the winning rule.
pub(crate) fn best(p: &Prep, hints: &[Option<u64>]) -> (Vec<u64>, u64, String) {
    let mut best: Option<(Vec<u64>, u64, String)> = None;
    let none = vec![None; p.n()];
    let with_hints = hints.iter().any(Option::is_some);
    for (name, order) in orders(p) {
        for fit in [Fit::First, Fit::Best] {
            let runs: &[(&[Option<u64>], bool)] = if with_hints { &[(&none, false), (hints, true)] } else { &[(&none, false)] };
            for &(fixed, hinted) in runs {
                let (off, h) = place(p, &order, fit, fixed);
                if best.as_ref().is_none_or(|b| h < b.1) {
                    let label = format!("greedy {}-fit by {name}{}", if fit == Fit::First { "first" } else { "best" }, if hinted { " after hints" } else { "" });
                    best = Some((off, h, label));
                }
            }
        }
    }
    best.unwrap_or_else(|| (Vec::new(), 0, "empty".to_string()))
}
