//! The anytime branch and bound of `docs/planner.md`.
//!
//! Two nested depth-first searches:
//! - the **outer** search decides, top-down from the roots, for each needed class whether
//!   it is kept (and where), else which node and which option compute it; its bounds are the
//!   critical path with the cheapest options, per-device work and the α-weighted work bound
//!   for two devices, and the memory footprint of each decided kernel;
//! - at every complete decision the **inner** search orders the steps it implies (kernels per
//!   device, copies per link) as global sequences whose `(start, key)` increases, bounded by
//!   each step's earliest start plus its tail and by each resource's remaining work; each
//!   improving leaf is packed into the arenas ([`crate::memory`]).
//!
//! Before both, the seeds of [`crate::seed`] (one-device extractions and copy-aware list
//! schedules) give the first incumbent within milliseconds, never worse than the best
//! one-device plan, and its decisions are the outer search's first branches; the search
//! then improves it until the bound meets the incumbent or a budget runs out.

use std::time::{Duration, Instant};

use crate::config::{ClassKind, Config, ConfigError, StepDef, Timed};
use crate::memory::{self, Item, Packing};
use crate::problem::{Problem, Source};

/// Budgets of a search.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Wall-clock budget.
    pub time: Duration,
    /// Search nodes (outer + inner).
    pub nodes: u64,
    /// Node budget of each exact packing.
    pub pack_nodes: u64,
    /// One-device problems with more nodes than this (and nothing to keep) are solved as
    /// DAG-cost extraction, which proves the makespan but not the minimal peak
    /// (see [`crate::single`]); smaller ones get the general search, which proves both.
    pub single_device_min_nodes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { time: Duration::from_secs(10), nodes: u64::MAX, pack_nodes: 200_000, single_device_min_nodes: 40 }
    }
}

/// How a search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The incumbent is proven optimal (makespan, then peak bytes).
    Optimal,
    /// A plan was found; a budget stopped the search before the proof.
    Feasible,
    /// Proven: no plan exists.
    Infeasible,
    /// A budget stopped the search before any plan was found.
    Unknown,
}

/// A complete plan: decisions, times and offsets.
#[derive(Clone, Debug)]
pub struct Solution {
    pub(crate) keep: Vec<Option<usize>>,
    pub(crate) choice: Vec<Option<usize>>,
    pub(crate) option: Vec<Option<usize>>,
    pub(crate) config: Config,
    pub(crate) timed: Timed,
    /// Offset of every buffer of `config`.
    pub(crate) offsets: Vec<u64>,
}

impl Solution {
    /// Makespan, ns.
    pub fn makespan(&self) -> u64 {
        self.timed.makespan
    }
    /// Peak live bytes summed over devices.
    pub fn peak(&self) -> u64 {
        self.timed.peak
    }
}

/// The result of [`solve`].
#[derive(Clone, Debug)]
pub struct Outcome {
    /// How it ended.
    pub status: Status,
    /// The best plan found.
    pub best: Option<Solution>,
    /// Proven lower bound on the makespan.
    pub lower_bound: u64,
    /// Search nodes explored.
    pub nodes: u64,
    /// Time to the first plan.
    pub first_plan: Option<Duration>,
    /// Total time.
    pub elapsed: Duration,
}

const INF: u64 = u64::MAX / 4;

/// Share of the time budget the probing phase may use.
const PROBE_SHARE: f64 = 0.3;
/// Inner-search nodes per decision while probing.
const PROBE_INNER_NODES: u64 = 300;
/// Largest discrepancy count probed.
const PROBE_MAX_DISCREPANCIES: u32 = 6;

/// Static facts about the problem used by the bounds.
struct Pre {
    class_nodes: Vec<Vec<usize>>,
    /// Cheapest way to have the class anywhere (0 for sources, aliases, cacheable classes).
    min_any: Vec<u64>,
    /// Cheapest time on each device (0 when a source, alias or keep exists).
    min_dev: Vec<Vec<u64>>,
    /// Cheapest chain (critical path with the cheapest options, copies at 0).
    cp_min: Vec<u64>,
    /// Classes in top-down order from the roots.
    order: Vec<usize>,
}

fn precompute(p: &Problem) -> Pre {
    let nc = p.classes.len();
    let nd = p.devices.len();
    let class_nodes = p.class_nodes();
    let mut min_any = vec![INF; nc];
    let mut min_dev = vec![vec![INF; nd]; nc];
    for c in 0..nc {
        let keepable = p.classes[c].cacheable && p.devices.iter().any(|d| d.cache_budget >= p.classes[c].bytes);
        if keepable {
            min_any[c] = 0;
            min_dev[c] = vec![0; nd];
        }
        for &n in &class_nodes[c] {
            let node = &p.nodes[n];
            if node.source.is_some() {
                min_any[c] = 0;
                min_dev[c] = vec![0; nd];
            }
            for o in &node.options {
                min_any[c] = min_any[c].min(o.time);
                min_dev[c][o.device] = min_dev[c][o.device].min(o.time);
            }
        }
    }
    let mut cp_min = vec![INF; nc];
    loop {
        let mut changed = false;
        for c in 0..nc {
            let mut best = cp_min[c];
            if p.classes[c].cacheable && p.devices.iter().any(|d| d.cache_budget >= p.classes[c].bytes) {
                best = 0;
            }
            for &n in &class_nodes[c] {
                let node = &p.nodes[n];
                let v = if node.source.is_some() {
                    0
                } else {
                    let t = node.options.iter().map(|o| o.time).min().unwrap_or(INF);
                    let ch = node.children.iter().map(|&x| cp_min[x]).max().unwrap_or(0);
                    if ch >= INF {
                        INF
                    } else {
                        t + ch
                    }
                };
                best = best.min(v);
            }
            if best < cp_min[c] {
                cp_min[c] = best;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut order = Vec::with_capacity(nc);
    let mut seen = vec![false; nc];
    let mut queue: std::collections::VecDeque<usize> = p.roots.iter().copied().collect();
    for &r in &p.roots {
        seen[r] = true;
    }
    while let Some(c) = queue.pop_front() {
        order.push(c);
        for &n in &class_nodes[c] {
            for &ch in &p.nodes[n].children {
                if !seen[ch] {
                    seen[ch] = true;
                    queue.push_back(ch);
                }
            }
        }
    }
    Pre { class_nodes, min_any, min_dev, cp_min, order }
}

/// What was decided for a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dec {
    Keep(usize),
    Node(usize, usize),
}

struct Search<'a> {
    p: &'a Problem,
    pre: Pre,
    limits: Limits,
    t0: Instant,
    deadline: Instant,
    nodes: u64,
    stopped: bool,
    // Outer state.
    need: Vec<u32>,
    dec: Vec<Option<Dec>>,
    work: Vec<u64>,
    kept_bytes: Vec<u64>,
    // Incumbent.
    best: Option<Solution>,
    first_plan: Option<Duration>,
    /// A leaf whose packing ran out of budget: the search cannot claim infeasibility or
    /// optimality.
    pack_unknown: bool,
    /// Probing phase: inner searches stop after this many nodes each, and the probe stops
    /// (without stopping the whole search) at `probe_deadline`.
    probe: Option<(u64, Instant)>,
    /// Inner nodes left in the current probe leaf.
    inner_left: u64,
    /// The probe ran out of time.
    probe_stopped: bool,
    /// The seed plan's decision for each class: the outer search tries it first.
    guide: Vec<Option<Dec>>,
    /// Decided readers of each class per device (computed nodes whose option is there).
    readers: Vec<Vec<u32>>,
}

/// Solve a problem under `limits`.
pub fn solve(p: &Problem, limits: &Limits) -> Outcome {
    // Both searches recurse once per decision and per step (thousands deep on model
    // e-graphs), so they run on a thread with a stack sized for the problem.
    let frames = (p.classes.len() + p.nodes.len()) * 4 + 1024;
    let stack = (frames * 2048).clamp(8 << 20, 1 << 30);
    std::thread::scope(|scope| {
        match std::thread::Builder::new().name("tg-planner".into()).stack_size(stack).spawn_scoped(scope, || solve_here(p, limits)) {
            Ok(h) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
            // No thread available: search on this one.
            Err(_) => solve_here(p, limits),
        }
    })
}

fn solve_here(p: &Problem, limits: &Limits) -> Outcome {
    if p.nodes.len() > limits.single_device_min_nodes && crate::single::applies(p) {
        if let Some(out) = crate::single::solve(p, limits) {
            return out;
        }
    }
    let t0 = Instant::now();
    let pre = precompute(p);
    let nc = p.classes.len();
    let nd = p.devices.len();
    let mut s = Search {
        p,
        pre,
        limits: limits.clone(),
        t0,
        deadline: t0 + limits.time,
        nodes: 0,
        stopped: false,
        need: vec![0; nc],
        dec: vec![None; nc],
        work: vec![0; nd],
        kept_bytes: vec![0; nd],
        best: None,
        first_plan: None,
        pack_unknown: false,
        probe: None,
        inner_left: u64::MAX,
        probe_stopped: false,
        guide: vec![None; nc],
        readers: vec![vec![0; nd]; nc],
    };
    for &r in &p.roots {
        s.need[r] += 1;
    }
    let mut root_lb = s.outer_bound().0;
    if root_lb < INF {
        // Seeds: the one-device plans and copy-aware list schedules, the best one packed
        // as the first incumbent and followed first by the outer search.
        s.seed(limits.time.mul_f64(0.01).min(Duration::from_millis(20)));
        let bound_time = limits.time.mul_f64(0.05).min(Duration::from_secs(1));
        root_lb = root_lb.max(work_bound(p, bound_time));
        if nd == 2 {
            root_lb = root_lb.max(alpha_work_bound(p, bound_time));
        }
        // Probing: limited discrepancy search with cheap inner searches (a few hundred
        // orders per decision) finds good incumbents before the complete search, which would
        // otherwise spend its budget on the orders of the first decisions it meets.
        let probe_deadline = t0 + limits.time.mul_f64(PROBE_SHARE);
        s.probe = Some((PROBE_INNER_NODES, probe_deadline));
        for k in 0..=PROBE_MAX_DISCREPANCIES {
            s.outer(k);
            if s.stopped || s.probe_stopped {
                break;
            }
        }
        s.probe = None;
        s.probe_stopped = false;
        if !s.stopped {
            s.outer(u32::MAX);
        }
    }
    let elapsed = t0.elapsed();
    let complete = !s.stopped && !s.pack_unknown;
    let (status, lower_bound) = match (&s.best, complete) {
        (Some(b), true) => (Status::Optimal, b.makespan()),
        (Some(b), false) => (Status::Feasible, root_lb.min(b.makespan())),
        (None, true) => (Status::Infeasible, root_lb),
        (None, false) => (Status::Unknown, root_lb),
    };
    Outcome { status, best: s.best, lower_bound: if lower_bound >= INF { 0 } else { lower_bound }, nodes: s.nodes, first_plan: s.first_plan, elapsed }
}

impl Search<'_> {
    fn tick(&mut self) -> bool {
        self.nodes += 1;
        if self.nodes >= self.limits.nodes || (self.nodes.is_multiple_of(128) && Instant::now() >= self.deadline) {
            self.stopped = true;
        }
        self.stopped
    }

    fn loc(&self, c: usize) -> Option<usize> {
        match self.dec[c]? {
            Dec::Keep(d) => Some(d),
            Dec::Node(n, k) => {
                let node = &self.p.nodes[n];
                if node.source.is_some() {
                    Some(self.p.home)
                } else {
                    Some(node.options[k].device)
                }
            }
        }
    }

    /// Time every seed candidate (`crate::seed`), offer them best first until one packs,
    /// and take the incumbent's decisions as the guide of the outer search.
    fn seed(&mut self, time: Duration) {
        let p = self.p;
        let mut cands = Vec::new();
        for d in crate::seed::one_device(p, time).into_iter().flatten() {
            if p.devices.len() > 1 {
                if let Some(h) = crate::seed::heft(p, &d) {
                    cands.push(h);
                }
            }
            cands.push(d);
        }
        let mut timed = Vec::new();
        for (i, d) in cands.iter().enumerate() {
            let Ok(cfg) = Config::build(p, &d.needed, &d.keep, &d.choice, &d.option) else { continue };
            let start = crate::seed::list_schedule(p, &cfg);
            let t = cfg.timed(p, start);
            timed.push(((t.makespan, t.peak, i), cfg, t));
        }
        timed.sort_by_key(|x| x.0);
        for ((.., i), cfg, t) in timed {
            let d = &cands[i];
            self.offer(&cfg, t, &d.keep, &d.choice, &d.option);
            if self.best.is_some() {
                break;
            }
        }
        if let Some(b) = &self.best {
            for c in 0..p.classes.len() {
                self.guide[c] = match (b.keep[c], b.choice[c]) {
                    (Some(d), _) => Some(Dec::Keep(d)),
                    (None, Some(n)) => Some(Dec::Node(n, b.option[c].unwrap_or(0))),
                    _ => None,
                };
            }
        }
    }

    /// Copy time implied by deciding `c` on device `d`: to every device where decided nodes
    /// read it (home, for a root), and from where its decided children are (weights are
    /// uploaded, not copied). `INF` when a copy has no link.
    fn copy_charge(&self, c: usize, node: usize, d: usize) -> u64 {
        let p = self.p;
        let mut t = 0u64;
        for (e, &r) in self.readers[c].iter().enumerate() {
            if e != d && (r > 0 || (e == p.home && p.roots.contains(&c))) {
                t = t.saturating_add(p.copy_time(c, d, e).unwrap_or(INF));
            }
        }
        for &ch in &p.nodes[node].children {
            if let Some(l) = self.loc(ch) {
                if l != d && !self.is_weight(ch) {
                    t = t.saturating_add(p.copy_time(ch, l, d).unwrap_or(INF));
                }
            }
        }
        t.min(INF)
    }

    /// Whether `c` is decided as a weight source.
    fn is_weight(&self, c: usize) -> bool {
        matches!(self.dec[c], Some(Dec::Node(n, _)) if self.p.nodes[n].source == Some(Source::Weight))
    }

    fn best_key(&self) -> (u64, u64) {
        self.best.as_ref().map_or((INF, INF), |b| (b.makespan(), b.peak()))
    }

    /// Lower bounds on (makespan, peak) of every completion; `INF` = infeasible.
    fn outer_bound(&self) -> (u64, u64) {
        let p = self.p;
        let nd = p.devices.len();
        let nc = p.classes.len();
        // Work bounds over undecided needed classes.
        let undecided: Vec<usize> = (0..nc).filter(|&c| self.need[c] > 0 && self.dec[c].is_none()).collect();
        let mut lb = *self.work.iter().max().unwrap_or(&0);
        if undecided.iter().any(|&c| self.pre.cp_min[c] >= INF) {
            return (INF, INF);
        }
        let rest: u64 = undecided.iter().map(|&c| self.pre.min_any[c]).sum();
        let total: u64 = self.work.iter().sum::<u64>() + rest;
        lb = lb.max(total.div_ceil(nd as u64));
        if nd == 2 {
            lb = lb.max(alpha_bound(self.work[0], self.work[1], undecided.iter().map(|&c| (self.pre.min_dev[c][0], self.pre.min_dev[c][1]))));
        }
        // Critical path.
        let mut memo = vec![None; nc];
        for &r in &p.roots {
            let mut v = self.avail_lb(r, &mut memo);
            if let Some(l) = self.loc(r) {
                if l != p.home {
                    v += p.copy_time(r, l, p.home).unwrap_or(INF);
                }
            }
            lb = lb.max(v);
        }
        // Memory: every decided kernel needs its output and its arena-resident operands at
        // once, next to the persistent buffers (kept values, and the weights uploaded to a
        // device other than home because a decided node there reads them).
        let mut peak_lb = 0u64;
        for d in 0..nd {
            let mut foot = 0u64;
            let mut uploads: Vec<usize> = Vec::new();
            for c in 0..nc {
                let Some(Dec::Node(n, k)) = self.dec[c] else {
                    continue;
                };
                let node = &p.nodes[n];
                if node.source.is_some() || node.options[k].device != d {
                    continue;
                }
                let alias = node.options[k].alias;
                let mut f = if alias { 0 } else { p.classes[c].bytes };
                let mut counted: Vec<usize> = Vec::new();
                for &ch in &node.children {
                    if counted.contains(&ch) {
                        continue;
                    }
                    counted.push(ch);
                    if self.is_weight(ch) {
                        if d != p.home {
                            uploads.push(ch);
                        }
                        continue;
                    }
                    match self.dec[ch] {
                        Some(Dec::Keep(kd)) if kd == d => {}
                        Some(Dec::Node(cn, ck)) => {
                            let cnode = &p.nodes[cn];
                            let on_home_source = cnode.source.is_some() && d == p.home;
                            let child_alias = cnode.source.is_none() && cnode.options[ck].alias;
                            if !on_home_source && !child_alias {
                                f += p.classes[ch].bytes;
                            }
                        }
                        _ => {}
                    }
                }
                if !alias {
                    foot = foot.max(f);
                }
            }
            uploads.sort_unstable();
            uploads.dedup();
            let persistent = self.kept_bytes[d] + uploads.iter().map(|&c| p.classes[c].bytes).sum::<u64>();
            if persistent + foot > p.devices[d].capacity {
                return (INF, INF);
            }
            peak_lb += persistent + foot;
        }
        (lb, peak_lb)
    }

    /// Earliest availability of `c` at its location, under the decisions so far.
    fn avail_lb(&self, c: usize, memo: &mut Vec<Option<u64>>) -> u64 {
        if let Some(v) = memo[c] {
            return v;
        }
        let v = match self.dec[c] {
            None => self.pre.cp_min[c],
            Some(Dec::Keep(_)) => 0,
            Some(Dec::Node(n, k)) => {
                let node = &self.p.nodes[n];
                if node.source.is_some() {
                    0
                } else {
                    let o = &node.options[k];
                    let mut ready = 0;
                    for &ch in &node.children {
                        let mut a = self.avail_lb(ch, memo);
                        if let Some(l) = self.loc(ch) {
                            // A weight is uploaded at load time: no copy.
                            if l != o.device && !self.is_weight(ch) {
                                a += self.p.copy_time(ch, l, o.device).unwrap_or(INF);
                            }
                        }
                        ready = ready.max(a);
                    }
                    ready + o.time
                }
            }
        };
        memo[c] = Some(v);
        v
    }

    /// Would choosing `node` for `c` close a cycle through decided nodes?
    fn closes_cycle(&self, c: usize, node: usize) -> bool {
        let mut stack: Vec<usize> = self.p.nodes[node].children.clone();
        let mut seen = vec![false; self.p.classes.len()];
        while let Some(x) = stack.pop() {
            if x == c {
                return true;
            }
            if std::mem::replace(&mut seen[x], true) {
                continue;
            }
            if let Some(Dec::Node(n, _)) = self.dec[x] {
                stack.extend(self.p.nodes[n].children.iter().copied());
            }
        }
        false
    }

    fn apply(&mut self, c: usize, d: Dec, sign: bool) {
        let p = self.p;
        match d {
            Dec::Keep(dev) => {
                if sign {
                    self.kept_bytes[dev] += p.classes[c].bytes;
                } else {
                    self.kept_bytes[dev] -= p.classes[c].bytes;
                }
            }
            Dec::Node(n, k) => {
                let node = &p.nodes[n];
                let mut distinct = node.children.clone();
                distinct.sort_unstable();
                distinct.dedup();
                for ch in distinct {
                    if sign {
                        self.need[ch] += 1;
                    } else {
                        self.need[ch] -= 1;
                    }
                }
                if node.source.is_none() {
                    let o = &node.options[k];
                    let mut distinct = node.children.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    for ch in distinct {
                        if sign {
                            self.readers[ch][o.device] += 1;
                        } else {
                            self.readers[ch][o.device] -= 1;
                        }
                    }
                    if !o.alias {
                        if sign {
                            self.work[o.device] += o.time;
                        } else {
                            self.work[o.device] -= o.time;
                        }
                    }
                }
            }
        }
        self.dec[c] = if sign { Some(d) } else { None };
    }

    /// Depth-first over the decisions; `disc` is the number of non-first branches still
    /// allowed on this path (`u32::MAX`: complete search).
    fn outer(&mut self, disc: u32) {
        if self.tick() {
            return;
        }
        if let Some((_, deadline)) = self.probe {
            if self.nodes.is_multiple_of(64) && Instant::now() >= deadline {
                self.probe_stopped = true;
            }
            if self.probe_stopped {
                return;
            }
        }
        let (lb, peak_lb) = self.outer_bound();
        let (bm, bp) = self.best_key();
        if lb >= INF || lb > bm || (lb == bm && peak_lb >= bp) {
            return;
        }
        let next = self.pre.order.iter().copied().find(|&c| self.need[c] > 0 && self.dec[c].is_none());
        let Some(c) = next else {
            self.leaf();
            return;
        };
        // Branches: the seed plan's decision first, then keep (it costs no time), then nodes
        // by their cheapest chain (a loaded device finishes later) plus the copies the
        // choice implies to and from what is decided.
        let mut branches: Vec<((bool, u64), Dec)> = Vec::new();
        let guide = self.guide[c];
        if self.p.classes[c].cacheable {
            for d in 0..self.p.devices.len() {
                if self.kept_bytes[d] + self.p.classes[c].bytes <= self.p.devices[d].cache_budget {
                    branches.push(((guide != Some(Dec::Keep(d)), 0), Dec::Keep(d)));
                }
            }
        }
        for &n in &self.pre.class_nodes[c] {
            let node = &self.p.nodes[n];
            if node.source.is_some() {
                branches.push(((guide != Some(Dec::Node(n, 0)), 0), Dec::Node(n, 0)));
                continue;
            }
            let ch = node.children.iter().map(|&x| self.pre.cp_min[x]).max().unwrap_or(0);
            if ch >= INF {
                continue;
            }
            for (k, o) in node.options.iter().enumerate() {
                let v = (ch + o.time).max(self.work[o.device] + o.time) + self.copy_charge(c, n, o.device);
                branches.push(((guide != Some(Dec::Node(n, k)), v), Dec::Node(n, k)));
            }
        }
        branches.sort_by_key(|&(v, _)| v);
        for (i, (_, d)) in branches.into_iter().enumerate() {
            let cost = u32::from(i > 0);
            if disc != u32::MAX && cost > disc {
                break;
            }
            if let Dec::Node(n, _) = d {
                if self.closes_cycle(c, n) {
                    continue;
                }
            }
            self.apply(c, d, true);
            self.outer(if disc == u32::MAX { disc } else { disc - cost });
            self.apply(c, d, false);
            if self.stopped || self.probe_stopped {
                return;
            }
        }
    }

    /// A complete decision: order its steps.
    fn leaf(&mut self) {
        let p = self.p;
        let nc = p.classes.len();
        let needed: Vec<bool> = (0..nc).map(|c| self.need[c] > 0).collect();
        let mut keep = vec![None; nc];
        let mut choice = vec![None; nc];
        let mut option = vec![None; nc];
        for c in 0..nc {
            match self.dec[c] {
                Some(Dec::Keep(d)) if needed[c] => keep[c] = Some(d),
                Some(Dec::Node(n, k)) if needed[c] => {
                    choice[c] = Some(n);
                    if p.nodes[n].source.is_none() {
                        option[c] = Some(k);
                    }
                }
                _ => {}
            }
        }
        let cfg = match Config::build(p, &needed, &keep, &choice, &option) {
            Ok(c) => c,
            Err(ConfigError::NoLink) => return,
        };
        // While probing, enough inner nodes for the list schedule plus a few hundred more.
        self.inner_left = self.probe.map_or(u64::MAX, |(n, _)| n + cfg.steps.len() as u64 + 1);
        let mut inner = Inner::new(&cfg, p);
        inner.run(self, &cfg, &keep, &choice, &option);
    }

    /// Offer a fully timed leaf as incumbent (packing it first).
    fn offer(&mut self, cfg: &Config, timed: Timed, keep: &[Option<usize>], choice: &[Option<usize>], option: &[Option<usize>]) {
        let (bm, bp) = self.best_key();
        if (timed.makespan, timed.peak) >= (bm, bp) {
            return;
        }
        let offsets = match pack_plan(self.p, cfg, &timed, self.limits.pack_nodes, self.deadline) {
            Packing::Fits(o) => o,
            Packing::Infeasible => return,
            Packing::Unknown => {
                self.pack_unknown = true;
                return;
            }
        };
        if self.first_plan.is_none() {
            self.first_plan = Some(self.t0.elapsed());
        }
        self.best = Some(Solution { keep: keep.to_vec(), choice: choice.to_vec(), option: option.to_vec(), config: cfg.clone(), timed, offsets });
    }
}

/// Offsets for every buffer of a timed configuration, device by device
/// ([`memory::pack`]); the first device that does not fit decides the verdict.
pub(crate) fn pack_plan(p: &Problem, cfg: &Config, timed: &Timed, pack_nodes: u64, deadline: Instant) -> Packing {
    let mut offsets = vec![0u64; cfg.buffers.len()];
    for (d, dev) in p.devices.iter().enumerate() {
        let ids: Vec<usize> = (0..cfg.buffers.len()).filter(|&b| cfg.buffers[b].device == d).collect();
        let items: Vec<Item> = ids
            .iter()
            .map(|&b| {
                let (start, end) = timed.live[b].unwrap_or((0, u64::MAX));
                Item { start, end, bytes: cfg.buffers[b].bytes }
            })
            .collect();
        match memory::pack(&items, dev.capacity, pack_nodes, Some(deadline)) {
            Packing::Fits(offs) => {
                for (i, &b) in ids.iter().enumerate() {
                    offsets[b] = offs[i];
                }
            }
            other => return other,
        }
    }
    Packing::Fits(offsets)
}

/// Total work: every plan runs the kernels of an acyclic choice (kept classes run nothing),
/// so the DAG-cost extraction bound with each node at its cheapest option (and a free leaf
/// for every class that could be kept) bounds the total work; spread over the devices it
/// bounds the makespan. `tg_extract` proves the extraction bound.
fn work_bound(p: &Problem, time: Duration) -> u64 {
    let Some((g, _)) = crate::single::extraction_graph(p, true) else { return 0 };
    match tg_extract::extract(&g, &tg_extract::Options { time_limit: time, ..Default::default() }) {
        Ok(x) => ((x.lower_bound - 1e-6).max(0.0) / p.devices.len() as f64).ceil() as u64,
        // No acyclic extraction: the outer search proves infeasibility itself.
        Err(_) => 0,
    }
}

/// Two devices: for every `α ∈ [0, 1]`, `M ≥ α·W₀ + (1−α)·W₁` (each device's work is at
/// most the makespan), and `α·W₀ + (1−α)·W₁` is the DAG cost of the plan's choice with each
/// kernel costed `α·t` on device 0 and `(1−α)·t` on device 1, so `tg_extract`'s proven
/// bound for those costs (cheapest option per node, a free leaf for every keepable class)
/// bounds the makespan. Tried at a few `α` from the nodes' time ratios `t₁/(t₀+t₁)`.
fn alpha_work_bound(p: &Problem, time: Duration) -> u64 {
    let mut ratios: Vec<f64> = Vec::new();
    for n in &p.nodes {
        let on = |d: usize| n.options.iter().filter(|o| o.device == d && !o.alias).map(|o| o.time).min();
        if let (Some(a), Some(b)) = (on(0), on(1)) {
            ratios.push(b as f64 / (a + b) as f64);
        }
    }
    if ratios.is_empty() {
        return 0;
    }
    ratios.sort_by(f64::total_cmp);
    let mut alphas: Vec<f64> = [0.25, 0.5, 0.75].iter().map(|q| ratios[((ratios.len() - 1) as f64 * q) as usize]).collect();
    alphas.dedup_by(|a, b| (*a - *b).abs() < 1e-6);
    let each = time.div_f64(alphas.len() as f64);
    let mut best = 0u64;
    for al in alphas {
        let cost = |o: &crate::problem::ImplOption| Some(if o.device == 0 { al * o.time as f64 } else { (1.0 - al) * o.time as f64 });
        let Some((g, _)) = crate::single::extraction_graph_with(p, true, cost) else { continue };
        if let Ok(x) = tg_extract::extract(&g, &tg_extract::Options { time_limit: each, ..Default::default() }) {
            // Integer makespans: round up, with a margin for floating-point error.
            best = best.max((x.lower_bound * (1.0 - 1e-9) - 1e-6).ceil().max(0.0) as u64);
        }
    }
    best
}

/// `max_α α·(w0 + Σ_{c→0} t0) + (1−α)·(w1 + Σ_{c→1} t1)` relaxed: for every α the load mix
/// is at least `α·w0 + (1−α)·w1 + Σ_c min(α·t0(c), (1−α)·t1(c))`; the maximum over α is
/// reached at a breakpoint `α = t1/(t0+t1)` or an end.
fn alpha_bound(w0: u64, w1: u64, items: impl Iterator<Item = (u64, u64)>) -> u64 {
    let items: Vec<(u64, u64)> = items.collect();
    let mut alphas = vec![0.0f64, 1.0];
    for &(a, b) in &items {
        if a < INF && b < INF && a + b > 0 {
            alphas.push(b as f64 / (a + b) as f64);
        }
    }
    let mut best = 0u64;
    for al in alphas {
        let mut v = al * w0 as f64 + (1.0 - al) * w1 as f64;
        for &(a, b) in &items {
            let x = if a >= INF { f64::INFINITY } else { al * a as f64 };
            let y = if b >= INF { f64::INFINITY } else { (1.0 - al) * b as f64 };
            v += x.min(y);
        }
        if v.is_finite() {
            // Integer makespans: round up, with a margin for floating-point error.
            let r = (v - 1e-6).ceil().max(0.0) as u64;
            best = best.max(r);
        }
    }
    best
}

/// The inner search: orders of the steps of one configuration.
struct Inner {
    n: usize,
    tail: Vec<u64>,
    start: Vec<u64>,
    end: Vec<u64>,
    done: Vec<bool>,
    missing: Vec<u32>,
    res_free: Vec<u64>,
    res_left: Vec<u64>,
    topo: Vec<usize>,
}

impl Inner {
    fn new(cfg: &Config, p: &Problem) -> Inner {
        let n = cfg.steps.len();
        // Topological order of the steps (deps first).
        let mut indeg: Vec<u32> = cfg.deps.iter().map(|d| d.len() as u32).collect();
        let mut topo: Vec<usize> = (0..n).filter(|&s| indeg[s] == 0).collect();
        let mut i = 0;
        while i < topo.len() {
            let s = topo[i];
            for &t in &cfg.succs[s] {
                indeg[t] -= 1;
                if indeg[t] == 0 {
                    topo.push(t);
                }
            }
            i += 1;
        }
        let mut tail = vec![0u64; n];
        for &s in topo.iter().rev() {
            tail[s] = cfg.time[s] + cfg.succs[s].iter().map(|&t| tail[t]).max().unwrap_or(0);
        }
        let nr = Config::n_resources(p);
        let mut res_left = vec![0u64; nr];
        for s in 0..n {
            res_left[cfg.resource[s]] += cfg.time[s];
        }
        Inner {
            n,
            tail,
            start: vec![0; n],
            end: vec![0; n],
            done: vec![false; n],
            missing: cfg.deps.iter().map(|d| d.len() as u32).collect(),
            res_free: vec![0; nr],
            res_left,
            topo,
        }
    }

    fn run(&mut self, s: &mut Search<'_>, cfg: &Config, keep: &[Option<usize>], choice: &[Option<usize>], option: &[Option<usize>]) {
        self.dfs(s, cfg, keep, choice, option, 0, (0, (0, 0, 0)), true);
    }

    fn est(&self, cfg: &Config, s: usize) -> u64 {
        let d = cfg.deps[s].iter().map(|&t| self.end[t]).max().unwrap_or(0);
        d.max(self.res_free[cfg.resource[s]])
    }

    /// Lower bound on the makespan of every completion.
    fn bound(&self, cfg: &Config, last_start: u64) -> u64 {
        let mut lb = 0u64;
        for (r, &left) in self.res_left.iter().enumerate() {
            if left > 0 {
                lb = lb.max(self.res_free[r].max(last_start) + left);
            }
        }
        let mut est = vec![0u64; self.n];
        for &s in &self.topo {
            if self.done[s] {
                // Every step leads to a root, so the run ends after it.
                lb = lb.max(self.end[s]);
                continue;
            }
            let mut e = self.res_free[cfg.resource[s]].max(last_start);
            for &t in &cfg.deps[s] {
                e = e.max(if self.done[t] { self.end[t] } else { est[t] + cfg.time[t] });
            }
            est[s] = e;
            lb = lb.max(e + self.tail[s]);
        }
        lb
    }

    #[allow(clippy::too_many_arguments)]
    fn dfs(
        &mut self,
        s: &mut Search<'_>,
        cfg: &Config,
        keep: &[Option<usize>],
        choice: &[Option<usize>],
        option: &[Option<usize>],
        placed: usize,
        last: (u64, (u8, usize, usize)),
        first: bool,
    ) {
        if s.tick() || s.inner_left == 0 {
            return;
        }
        s.inner_left -= 1;
        if placed == self.n {
            let timed = cfg.timed(s.p, self.start.clone());
            s.offer(cfg, timed, keep, choice, option);
            return;
        }
        let lb = self.bound(cfg, last.0);
        let (bm, _) = s.best_key();
        if lb > bm {
            return;
        }
        let mut cands: Vec<(u64, (u8, usize, usize), usize)> = Vec::new();
        for st in 0..self.n {
            if self.done[st] || self.missing[st] > 0 {
                continue;
            }
            let e = self.est(cfg, st);
            let k = (e, cfg.key[st]);
            if !first && k <= last {
                continue;
            }
            cands.push((e, cfg.key[st], st));
        }
        cands.sort_unstable();
        for (e, key, st) in cands {
            let r = cfg.resource[st];
            let saved_free = self.res_free[r];
            self.start[st] = e;
            self.end[st] = e + cfg.time[st];
            self.done[st] = true;
            self.res_free[r] = self.end[st];
            self.res_left[r] -= cfg.time[st];
            for &t in &cfg.succs[st] {
                self.missing[t] -= 1;
            }
            self.dfs(s, cfg, keep, choice, option, placed + 1, (e, key), false);
            for &t in &cfg.succs[st] {
                self.missing[t] += 1;
            }
            self.res_left[r] += cfg.time[st];
            self.res_free[r] = saved_free;
            self.done[st] = false;
            if s.stopped || s.inner_left == 0 {
                return;
            }
        }
    }
}

/// Kinds of the classes in a solution, for reports.
impl Solution {
    /// The steps with their times: `(step, start, end)`.
    pub(crate) fn steps(&self) -> impl Iterator<Item = (&StepDef, u64, u64)> + '_ {
        self.config.steps.iter().enumerate().map(|(i, s)| (s, self.timed.start[i], self.timed.end[i]))
    }

    /// The class kinds (for the validator's tests).
    #[allow(dead_code)]
    pub(crate) fn kinds(&self) -> &[ClassKind] {
        &self.config.kind
    }
}
