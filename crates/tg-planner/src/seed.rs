//! Incumbents before the branch and bound (`docs/planner.md`, *Seeds*):
//! - **one-device plans**: for each device, DAG-cost extraction over the options on that
//!   device only (`tg_extract`), so the search starts no worse than the best plan that runs
//!   every kernel on one device (inputs copied there, roots copied home, weights uploaded);
//! - **copy-aware list schedules** (HEFT, Topcuoglu et al. 2002, in our own terms): the
//!   node choice of one of those extractions, classes taken by decreasing upward rank, each
//!   placed on the option that finishes it first given where its operands are, the copies
//!   that placement implies and the time each device and link becomes free.
//!
//! Each candidate's steps are then timed by [`list_schedule`] (earliest start first), which
//! is a plan of the definition; the search packs the best one.

use std::time::Duration;

use crate::config::Config;
use crate::problem::{Problem, Source};

const INF: u64 = u64::MAX / 4;

/// Complete decisions (no class kept) for [`Config::build`].
#[derive(Clone, Debug)]
pub(crate) struct Decisions {
    pub needed: Vec<bool>,
    pub keep: Vec<Option<usize>>,
    pub choice: Vec<Option<usize>>,
    pub option: Vec<Option<usize>>,
}

/// An extraction over the options `allowed` admits (cheapest allowed option per node);
/// `None` when no acyclic extraction exists.
fn extract_with(p: &Problem, time: Duration, allowed: impl Fn(usize) -> bool) -> Option<Decisions> {
    let (g, back) = crate::single::extraction_graph_with(p, false, |o| allowed(o.device).then_some(o.time as f64))?;
    let x = tg_extract::extract(&g, &tg_extract::Options { time_limit: time, ..Default::default() }).ok()?;
    let nc = p.classes.len();
    let mut d = Decisions { needed: vec![false; nc], keep: vec![None; nc], choice: vec![None; nc], option: vec![None; nc] };
    for &(c, n) in &x.choices {
        let (node, k) = *back.get(n.index())?;
        if node == usize::MAX {
            return None;
        }
        d.needed[c.index()] = true;
        d.choice[c.index()] = Some(node);
        if p.nodes[node].source.is_none() {
            d.option[c.index()] = Some(k);
        }
    }
    Some(d)
}

/// The one-device extraction for each device (`None` where some needed class has no
/// option on it).
pub(crate) fn one_device(p: &Problem, time: Duration) -> Vec<Option<Decisions>> {
    // One extraction per device, side by side (each is a few milliseconds on a model), on
    // threads with the stack the search itself gets (`search::solve`).
    let stack = ((p.classes.len() + p.nodes.len()) * 4 + 1024).saturating_mul(2048).clamp(8 << 20, 1 << 30);
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            (0..p.devices.len()).map(|d| (d, std::thread::Builder::new().stack_size(stack).spawn_scoped(scope, move || extract_with(p, time, |x| x == d)))).collect();
        handles
            .into_iter()
            .map(|(d, h)| match h {
                Ok(h) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
                // No thread available: extract on this one.
                Err(_) => extract_with(p, time, |x| x == d),
            })
            .collect()
    })
}

/// Children of `n` without repeats, in order.
fn distinct(children: &[usize]) -> Vec<usize> {
    let mut v = children.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

/// The best option of a class so far in [`heft`].
struct Placement {
    /// Finish time, with the way home for a root.
    eval: u64,
    option: usize,
    /// Finish time on its device.
    finish: u64,
    /// Copies it makes: (class, link, end).
    copies: Vec<(usize, usize, u64)>,
}

/// The copy-aware list schedule (HEFT) over the node choice of `base`: re-decides every
/// computed class's option. `None` when some class has no option it can reach (no link).
pub(crate) fn heft(p: &Problem, base: &Decisions) -> Option<Decisions> {
    let nc = p.classes.len();
    let nd = p.devices.len();
    let needed: Vec<usize> = (0..nc).filter(|&c| base.needed[c]).collect();
    // Readers (parents) of each class in the chosen graph, and a topological order.
    let mut parents: Vec<Vec<usize>> = vec![Vec::new(); nc];
    let mut missing = vec![0usize; nc];
    for &c in &needed {
        let n = base.choice[c]?;
        for ch in distinct(&p.nodes[n].children) {
            parents[ch].push(c);
            missing[c] += 1;
        }
    }
    let mut topo: Vec<usize> = needed.iter().copied().filter(|&c| missing[c] == 0).collect();
    let mut left = missing.clone();
    let mut i = 0;
    while i < topo.len() {
        let c = topo[i];
        for &q in &parents[c] {
            left[q] -= 1;
            if left[q] == 0 {
                topo.push(q);
            }
        }
        i += 1;
    }
    if topo.len() != needed.len() {
        return None;
    }
    // Mean time of each class over its node's kernel options; upward rank to the roots.
    let mean = |c: usize| -> u64 {
        let node = &p.nodes[base.choice[c].expect("needed")];
        let k: Vec<u64> = node.options.iter().filter(|o| !o.alias).map(|o| o.time).collect();
        if node.source.is_some() || k.len() < node.options.len() {
            0
        } else {
            k.iter().sum::<u64>() / k.len() as u64
        }
    };
    let mut rank = vec![0u64; nc];
    for &c in topo.iter().rev() {
        rank[c] = mean(c) + parents[c].iter().map(|&q| rank[q]).max().unwrap_or(0);
    }
    let is_root: Vec<bool> = (0..nc).map(|c| p.roots.contains(&c)).collect();
    let link_of = |a: usize, b: usize| p.links.iter().position(|l| l.from == a && l.to == b);
    // State: where each class is available (time per device, INF = not there), its home
    // device, and when each device and link is free.
    let mut avail = vec![vec![INF; nd]; nc];
    let mut loc = vec![p.home; nc];
    let mut dev_free = vec![0u64; nd];
    let mut link_free = vec![0u64; p.links.len()];
    let mut out = base.clone();
    let mut ready: Vec<usize> = needed.iter().copied().filter(|&c| missing[c] == 0).collect();
    while !ready.is_empty() {
        let (ri, &c) = ready.iter().enumerate().max_by_key(|&(_, &c)| (rank[c], std::cmp::Reverse(c))).expect("non-empty");
        ready.swap_remove(ri);
        let n = base.choice[c].expect("needed");
        let node = &p.nodes[n];
        match node.source {
            Some(Source::Weight) => avail[c] = vec![0; nd],
            Some(Source::Input) => avail[c][p.home] = 0,
            None => {
                let kids = distinct(&node.children);
                let mut best: Option<Placement> = None;
                for (k, o) in node.options.iter().enumerate() {
                    let d = o.device;
                    let mut lf = link_free.clone();
                    let mut copies = Vec::new();
                    let mut ready_at = 0u64;
                    let mut ok = true;
                    for &ch in &kids {
                        if avail[ch][d] < INF {
                            ready_at = ready_at.max(avail[ch][d]);
                            continue;
                        }
                        let Some(li) = link_of(loc[ch], d) else {
                            ok = false;
                            break;
                        };
                        let s = avail[ch][loc[ch]].max(lf[li]);
                        let e = s + p.links[li].copy_time(p.classes[ch].bytes);
                        lf[li] = e;
                        copies.push((ch, li, e));
                        ready_at = ready_at.max(e);
                    }
                    if !ok {
                        continue;
                    }
                    let finish = if o.alias { ready_at } else { ready_at.max(dev_free[d]) + o.time };
                    let mut eval = finish;
                    if is_root[c] && d != p.home {
                        let Some(li) = link_of(d, p.home) else { continue };
                        eval = finish.max(lf[li]) + p.links[li].copy_time(p.classes[c].bytes);
                    }
                    if best.as_ref().is_none_or(|b| (eval, copies.len()) < (b.eval, b.copies.len())) {
                        best = Some(Placement { eval, option: k, finish, copies });
                    }
                }
                let Placement { option: k, finish, copies, .. } = best?;
                let o = &node.options[k];
                for (ch, li, e) in copies {
                    link_free[li] = e;
                    avail[ch][o.device] = e;
                }
                if !o.alias {
                    dev_free[o.device] = finish;
                }
                avail[c][o.device] = finish;
                loc[c] = o.device;
                out.option[c] = Some(k);
            }
        }
        for &q in &parents[c] {
            missing[q] -= 1;
            if missing[q] == 0 {
                ready.push(q);
            }
        }
    }
    Some(out)
}

/// Start times of `cfg`'s steps by the list schedule that always starts next the step that
/// can start earliest (ties: the longer tail, then the step key), each as early as its
/// operands and its resource allow: a plan of the definition.
pub(crate) fn list_schedule(p: &Problem, cfg: &Config) -> Vec<u64> {
    let n = cfg.steps.len();
    let mut tail = vec![0u64; n];
    // Steps in an order where successors come first for the tails.
    let mut indeg: Vec<usize> = cfg.deps.iter().map(Vec::len).collect();
    let mut topo: Vec<usize> = (0..n).filter(|&s| indeg[s] == 0).collect();
    let mut i = 0;
    while i < topo.len() {
        for &t in &cfg.succs[topo[i]] {
            indeg[t] -= 1;
            if indeg[t] == 0 {
                topo.push(t);
            }
        }
        i += 1;
    }
    for &s in topo.iter().rev() {
        tail[s] = cfg.time[s] + cfg.succs[s].iter().map(|&t| tail[t]).max().unwrap_or(0);
    }
    let mut missing: Vec<usize> = cfg.deps.iter().map(Vec::len).collect();
    let mut dep_ready = vec![0u64; n];
    let mut res_free = vec![0u64; Config::n_resources(p)];
    let mut start = vec![0u64; n];
    let mut ready: Vec<usize> = (0..n).filter(|&s| missing[s] == 0).collect();
    while !ready.is_empty() {
        let (ri, &s) = ready.iter().enumerate().min_by_key(|&(_, &s)| (dep_ready[s].max(res_free[cfg.resource[s]]), std::cmp::Reverse(tail[s]), cfg.key[s])).expect("non-empty");
        ready.swap_remove(ri);
        let st = dep_ready[s].max(res_free[cfg.resource[s]]);
        start[s] = st;
        let end = st + cfg.time[s];
        res_free[cfg.resource[s]] = end;
        for &t in &cfg.succs[s] {
            dep_ready[t] = dep_ready[t].max(end);
            missing[t] -= 1;
            if missing[t] == 0 {
                ready.push(t);
            }
        }
    }
    start
}
