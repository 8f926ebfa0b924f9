//! The independent plan validator: it knows nothing of the search and rechecks a [`Plan`]
//! against `docs/planner.md` from the problem and the plan alone — the needed classes and
//! their acyclic choice, the implied copies (exactly those), every step's time and its start
//! "as early as its order allows", the weight uploads, lifetimes, offsets, capacities and
//! the cache budget, and the makespan and peak the result claims.

use std::collections::{BTreeMap, BTreeSet};

use crate::problem::{Problem, Source};
use crate::result::{BufferKind, Plan, PlanStep};

/// A rule of the definition that a plan breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid plan: {0}")]
pub struct Invalid(pub String);

/// A device `(0, d, 0)` or a link `(1, from, to)`.
type Resource = (u8, usize, usize);

fn fail<T>(msg: String) -> Result<T, Invalid> {
    Err(Invalid(msg))
}

/// What the validator recomputed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Makespan.
    pub makespan: u64,
    /// Peak live bytes summed over devices.
    pub peak: u64,
}

/// Where a needed class lives, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Where {
    /// A source; `true` for a weight (uploaded to the other devices that read it).
    Source(bool),
    Kept(usize),
    Kernel(usize),
    Alias(usize, usize),
}

/// Check `plan` for `p`; returns the recomputed makespan and peak.
pub fn validate(p: &Problem, plan: &Plan) -> Result<Checked, Invalid> {
    let nc = p.classes.len();
    let nd = p.devices.len();
    // Keep.
    let mut kept_bytes = vec![0u64; nd];
    for (&c, &d) in &plan.keep {
        if c >= nc || d >= nd {
            return fail(format!("keep {c} -> {d}: no such class or device"));
        }
        if !p.classes[c].cacheable {
            return fail(format!("class {c} is kept but not cacheable"));
        }
        kept_bytes[d] += p.classes[c].bytes;
    }
    for (d, (&kept, dev)) in kept_bytes.iter().zip(&p.devices).enumerate() {
        if kept > dev.cache_budget {
            return fail(format!("device {d}: kept {kept} bytes over the cache budget {}", dev.cache_budget));
        }
    }
    // Needed classes from the roots.
    let mut wh: BTreeMap<usize, Where> = BTreeMap::new();
    let mut stack: Vec<usize> = p.roots.clone();
    while let Some(c) = stack.pop() {
        if wh.contains_key(&c) {
            continue;
        }
        if let Some(&d) = plan.keep.get(&c) {
            wh.insert(c, Where::Kept(d));
            continue;
        }
        let Some(&n) = plan.choice.get(&c) else {
            return fail(format!("needed class {c} has no choice"));
        };
        if n >= p.nodes.len() || p.nodes[n].class != c {
            return fail(format!("class {c}: node {n} is not one of its nodes"));
        }
        let node = &p.nodes[n];
        if node.source.is_some() {
            if plan.option.contains_key(&c) {
                return fail(format!("class {c} is a source and has no option"));
            }
            wh.insert(c, Where::Source(node.source == Some(Source::Weight)));
            continue;
        }
        let Some(&k) = plan.option.get(&c) else {
            return fail(format!("class {c}: no option chosen"));
        };
        let Some(o) = node.options.get(k) else {
            return fail(format!("class {c}: node {n} has no option {k}"));
        };
        wh.insert(c, if o.alias { Where::Alias(node.children[0], o.device) } else { Where::Kernel(o.device) });
        stack.extend(node.children.iter().copied());
    }
    for c in plan.choice.keys().chain(plan.option.keys()).chain(plan.keep.keys()) {
        if !wh.contains_key(c) {
            return fail(format!("class {c} is decided but not needed"));
        }
    }
    // Acyclic: depth-first with colours over the selected children.
    let mut colour: BTreeMap<usize, u8> = BTreeMap::new();
    fn visit(c: usize, p: &Problem, plan: &Plan, wh: &BTreeMap<usize, Where>, colour: &mut BTreeMap<usize, u8>) -> bool {
        match colour.get(&c) {
            Some(1) => return false,
            Some(2) => return true,
            _ => {}
        }
        colour.insert(c, 1);
        if matches!(wh[&c], Where::Kernel(_) | Where::Alias(..)) {
            for &ch in &p.nodes[plan.choice[&c]].children {
                if !visit(ch, p, plan, wh, colour) {
                    return false;
                }
            }
        }
        colour.insert(c, 2);
        true
    }
    for &c in wh.keys() {
        if !visit(c, p, plan, &wh, &mut colour) {
            return fail(format!("the selected nodes form a cycle through class {c}"));
        }
    }
    let loc = |c: usize| -> usize {
        match wh[&c] {
            Where::Source(_) => p.home,
            Where::Kept(d) | Where::Kernel(d) | Where::Alias(_, d) => d,
        }
    };
    let is_weight = |c: usize| wh[&c] == Where::Source(true);
    // Required copies, and weight uploads (a weight read on another device is uploaded once
    // at load time: a persistent buffer there, no copy step).
    let mut copies: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut uploads: BTreeSet<(usize, usize)> = BTreeSet::new();
    for (&c, &w) in &wh {
        let dev = match w {
            Where::Kernel(d) | Where::Alias(_, d) => d,
            _ => continue,
        };
        for &ch in &p.nodes[plan.choice[&c]].children {
            if loc(ch) != dev {
                if is_weight(ch) {
                    uploads.insert((ch, dev));
                } else {
                    copies.insert((ch, dev));
                }
            }
        }
    }
    for &r in &p.roots {
        if loc(r) != p.home {
            copies.insert((r, p.home));
        }
    }
    // Steps: exactly the kernels and copies implied, with the right times.
    let mut kernel_at: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    let mut copy_at: BTreeMap<(usize, usize), (u64, u64)> = BTreeMap::new();
    // (resource, start, end, what) for the order checks.
    let mut by_res: BTreeMap<Resource, Vec<(u64, u64, String)>> = BTreeMap::new();
    for st in &plan.steps {
        match *st {
            PlanStep::Kernel { class, node, option, device, start, end } => {
                if wh.get(&class) != Some(&Where::Kernel(device)) || plan.choice.get(&class) != Some(&node) || plan.option.get(&class) != Some(&option) {
                    return fail(format!("kernel step of class {class} does not match the decisions"));
                }
                let t = p.nodes[node].options[option].time;
                if end != start + t {
                    return fail(format!("kernel of class {class}: end {end} != start {start} + time {t}"));
                }
                if kernel_at.insert(class, (start, end)).is_some() {
                    return fail(format!("class {class} is computed twice"));
                }
                by_res.entry((0, device, 0)).or_default().push((start, end, format!("kernel {class}")));
            }
            PlanStep::Copy { class, from, to, start, end } => {
                if !copies.contains(&(class, to)) || !wh.contains_key(&class) || from != loc(class) {
                    return fail(format!("copy of class {class} {from} -> {to} is not implied by the decisions"));
                }
                let Some(l) = p.link(from, to) else {
                    return fail(format!("copy of class {class}: no link {from} -> {to}"));
                };
                let t = l.copy_time(p.classes[class].bytes);
                if end != start + t {
                    return fail(format!("copy of class {class}: end {end} != start {start} + time {t}"));
                }
                if copy_at.insert((class, to), (start, end)).is_some() {
                    return fail(format!("class {class} is copied to {to} twice"));
                }
                by_res.entry((1, from, to)).or_default().push((start, end, format!("copy {class} -> {to}")));
            }
        }
    }
    for (&c, &w) in &wh {
        if matches!(w, Where::Kernel(_)) && !kernel_at.contains_key(&c) {
            return fail(format!("class {c} has no kernel step"));
        }
    }
    for cp in &copies {
        if !copy_at.contains_key(cp) {
            return fail(format!("missing copy of class {} to device {}", cp.0, cp.1));
        }
    }
    // Availability of a class on a device.
    fn avail(
        c: usize,
        d: usize,
        wh: &BTreeMap<usize, Where>,
        loc: &dyn Fn(usize) -> usize,
        kernel_at: &BTreeMap<usize, (u64, u64)>,
        copy_at: &BTreeMap<(usize, usize), (u64, u64)>,
    ) -> u64 {
        if loc(c) != d {
            // A weight's upload is there from the start.
            return if wh[&c] == Where::Source(true) { 0 } else { copy_at[&(c, d)].1 };
        }
        match wh[&c] {
            Where::Source(_) | Where::Kept(_) => 0,
            Where::Kernel(_) => kernel_at[&c].1,
            Where::Alias(ch, dev) => avail(ch, dev, wh, loc, kernel_at, copy_at),
        }
    }
    let ready_kernel = |c: usize| -> u64 {
        let Where::Kernel(d) = wh[&c] else { return 0 };
        p.nodes[plan.choice[&c]].children.iter().map(|&ch| avail(ch, d, &wh, &loc, &kernel_at, &copy_at)).max().unwrap_or(0)
    };
    // Resources: no overlap, and each step starts as early as its order allows.
    for (res, v) in by_res.iter_mut() {
        v.sort();
        let mut prev_end = 0u64;
        for (start, end, what) in v.iter() {
            if *start < prev_end {
                return fail(format!("{what} starts at {start} while its {} is busy until {prev_end}", if res.0 == 0 { "device" } else { "link" }));
            }
            let ready = if let Some(rest) = what.strip_prefix("kernel ") {
                ready_kernel(rest.parse().unwrap_or(usize::MAX))
            } else {
                let c: usize = what[5..].split(' ').next().and_then(|x| x.parse().ok()).unwrap_or(usize::MAX);
                avail(c, loc(c), &wh, &loc, &kernel_at, &copy_at)
            };
            if *start != ready.max(prev_end) {
                return fail(format!("{what} starts at {start}, but its operands are ready at {ready} and its resource is free at {prev_end}"));
            }
            prev_end = *end;
        }
    }
    let makespan = p.roots.iter().map(|&r| avail(r, p.home, &wh, &loc, &kernel_at, &copy_at)).max().unwrap_or(0);
    // Buffers: which exist, who reads them.
    // key (class, device, kind) -> (writer start, writer end)
    let mut expect: BTreeMap<(usize, usize, BufferKind), (u64, u64)> = BTreeMap::new();
    for (&c, &(s, e)) in &kernel_at {
        expect.insert((c, loc(c), BufferKind::Output), (s, e));
    }
    for (&(c, d), &(s, e)) in &copy_at {
        expect.insert((c, d, BufferKind::Copy), (s, e));
    }
    for (&c, &d) in &plan.keep {
        if wh.contains_key(&c) {
            expect.insert((c, d, BufferKind::Kept), (0, 0));
        }
    }
    for &(c, d) in &uploads {
        expect.insert((c, d, BufferKind::Weight), (0, 0));
    }
    // The buffer a class uses on a device.
    fn buffer_of(c: usize, d: usize, wh: &BTreeMap<usize, Where>, loc: &dyn Fn(usize) -> usize) -> Option<(usize, usize, BufferKind)> {
        if loc(c) != d {
            let kind = if wh[&c] == Where::Source(true) { BufferKind::Weight } else { BufferKind::Copy };
            return Some((c, d, kind));
        }
        match wh[&c] {
            Where::Source(_) => None,
            Where::Kept(_) => Some((c, d, BufferKind::Kept)),
            Where::Kernel(_) => Some((c, d, BufferKind::Output)),
            Where::Alias(ch, dev) => buffer_of(ch, dev, wh, loc),
        }
    }
    let mut last_use: BTreeMap<(usize, usize, BufferKind), u64> = expect.iter().map(|(k, &(_, e))| (*k, e)).collect();
    let mut bump = |b: Option<(usize, usize, BufferKind)>, t: u64| {
        if let Some(b) = b {
            if let Some(x) = last_use.get_mut(&b) {
                *x = (*x).max(t);
            }
        }
    };
    for (&c, &(_, e)) in &kernel_at {
        for &ch in &p.nodes[plan.choice[&c]].children {
            bump(buffer_of(ch, loc(c), &wh, &loc), e);
        }
    }
    for (&(c, _), &(_, e)) in &copy_at {
        bump(buffer_of(c, loc(c), &wh, &loc), e);
    }
    for &r in &p.roots {
        bump(buffer_of(r, p.home, &wh, &loc), makespan);
    }
    if plan.buffers.len() != expect.len() {
        return fail(format!("{} buffers listed, {} implied", plan.buffers.len(), expect.len()));
    }
    let mut listed = BTreeSet::new();
    for b in &plan.buffers {
        let key = (b.class, b.device, b.kind);
        let Some(&(s, _)) = expect.get(&key) else {
            return fail(format!("buffer {key:?} is not implied"));
        };
        if !listed.insert(key) {
            return fail(format!("buffer {key:?} listed twice"));
        }
        if b.bytes != p.classes[b.class].bytes {
            return fail(format!("buffer {key:?}: {} bytes, class has {}", b.bytes, p.classes[b.class].bytes));
        }
        let persistent = matches!(b.kind, BufferKind::Kept | BufferKind::Weight);
        let want = if persistent { (0, None) } else { (s, Some(last_use[&key])) };
        if (b.start, b.end) != want {
            return fail(format!("buffer {key:?}: live {:?}, recomputed {:?}", (b.start, b.end), want));
        }
        if b.offset.checked_add(b.bytes).is_none_or(|top| top > p.devices[b.device].capacity) {
            return fail(format!("buffer {key:?}: [{}, +{}) outside the arena of {} bytes", b.offset, b.bytes, p.devices[b.device].capacity));
        }
    }
    // Memory: conflicting buffers are disjoint.
    let live = |b: &crate::result::PlanBuffer| (b.start, b.end.unwrap_or(u64::MAX));
    for (i, a) in plan.buffers.iter().enumerate() {
        for b in &plan.buffers[..i] {
            if a.device != b.device {
                continue;
            }
            let ((s1, e1), (s2, e2)) = (live(a), live(b));
            if s1 < e2 && s2 < e1 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes {
                return fail(format!("buffers of classes {} and {} on device {} overlap in time and memory", a.class, b.class, a.device));
            }
        }
    }
    // Peak.
    let mut peak = 0u64;
    for d in 0..nd {
        let mut kept = 0u64;
        let mut times: Vec<u64> = Vec::new();
        for b in plan.buffers.iter().filter(|b| b.device == d) {
            match b.end {
                None => kept += b.bytes,
                Some(_) => times.push(b.start),
            }
        }
        let mut best = 0u64;
        for &t in &times {
            let load: u64 = plan.buffers.iter().filter(|b| b.device == d && b.end.is_some_and(|e| b.start <= t && t < e)).map(|b| b.bytes).sum();
            best = best.max(load);
        }
        peak += kept + best;
    }
    Ok(Checked { makespan, peak })
}
