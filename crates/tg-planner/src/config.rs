//! From complete decisions (keep, choice, option) to the steps they imply: kernel steps,
//! copy steps, their dependencies and resources, and the buffers with their writers and
//! readers — the part of `docs/planner.md` that does not depend on the order.

use std::collections::BTreeMap;

use crate::problem::{Problem, Source};

/// What a class is in a complete decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClassKind {
    /// Not needed.
    Unused,
    /// An input on the home device (copied when read elsewhere).
    Source,
    /// A weight: on the home device, and uploaded once (a persistent buffer, no copy step)
    /// to every other device that reads it.
    Weight,
    /// Kept in a persistent buffer on this device.
    Kept(usize),
    /// Computed by this kernel step.
    Kernel(usize),
    /// A view of its single child, on this device.
    Alias { child: usize, device: usize },
}

/// A step of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StepDef {
    /// A kernel computing `class` with `node`'s option `option` on `device`.
    Kernel { class: usize, node: usize, option: usize, device: usize },
    /// A copy of `class` from `from` to `to`.
    Copy { class: usize, from: usize, to: usize },
}

/// A buffer of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BufDef {
    pub class: usize,
    pub device: usize,
    pub bytes: u64,
    /// The step writing it; `None` for a persistent buffer (kept, or a weight upload).
    pub writer: Option<usize>,
    /// A weight's upload to a device other than home (persistent, written at load time).
    pub upload: bool,
    /// Steps reading it (deduplicated).
    pub readers: Vec<usize>,
    /// It holds a root on the home device, so it lives until the makespan.
    pub holds_root: bool,
}

/// Everything complete decisions imply, before ordering.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub kind: Vec<ClassKind>,
    pub steps: Vec<StepDef>,
    pub time: Vec<u64>,
    /// Resource of each step: a device id, or `n_devices + link index` for copies.
    pub resource: Vec<usize>,
    /// Steps that must end before each step starts.
    pub deps: Vec<Vec<usize>>,
    /// Successors (inverse of `deps`).
    pub succs: Vec<Vec<usize>>,
    /// Symmetry key of each step: `(0, class, 0)` or `(1, class, destination)`.
    pub key: Vec<(u8, usize, usize)>,
    pub buffers: Vec<BufDef>,
    /// For each root: the step whose end makes it available on home (`None` = time 0).
    pub root_ready: Vec<Option<usize>>,
}

/// Why complete decisions have no plan.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ConfigError {
    /// A copy is needed over a link that does not exist.
    NoLink,
}

/// Where a class lives.
fn location(p: &Problem, kind: &[ClassKind], steps: &[StepDef], c: usize) -> usize {
    match kind[c] {
        ClassKind::Unused | ClassKind::Source | ClassKind::Weight => p.home,
        ClassKind::Kept(d) => d,
        ClassKind::Kernel(s) => match steps[s] {
            StepDef::Kernel { device, .. } => device,
            StepDef::Copy { to, .. } => to,
        },
        ClassKind::Alias { device, .. } => device,
    }
}

struct Builder<'a> {
    p: &'a Problem,
    kind: Vec<ClassKind>,
    steps: Vec<StepDef>,
    copies: BTreeMap<(usize, usize), usize>,
    /// Buffer written by each step.
    step_buf: Vec<Option<usize>>,
    kept_buf: BTreeMap<usize, usize>,
    /// Weight uploads: (class, device) → buffer.
    uploads: BTreeMap<(usize, usize), usize>,
    buffers: Vec<BufDef>,
}

impl Builder<'_> {
    fn loc(&self, c: usize) -> usize {
        location(self.p, &self.kind, &self.steps, c)
    }

    fn add_step(&mut self, s: StepDef, c: usize, device: usize) -> usize {
        let id = self.steps.len();
        self.steps.push(s);
        let b = self.buffers.len();
        self.buffers.push(BufDef { class: c, device, bytes: self.p.classes[c].bytes, writer: Some(id), readers: Vec::new(), holds_root: false, upload: false });
        self.step_buf.push(Some(b));
        id
    }

    /// The step whose end makes `c` available on `d` (`None` = time 0) and the buffer that
    /// holds it there (`None` = no arena buffer); adds the copy if one is needed.
    fn avail(&mut self, c: usize, d: usize) -> Result<(Option<usize>, Option<usize>), ConfigError> {
        let l = self.loc(c);
        if l != d && self.kind[c] == ClassKind::Weight {
            // Uploaded once, available at 0: a persistent buffer, no step.
            let next = self.buffers.len();
            let b = *self.uploads.entry((c, d)).or_insert(next);
            if b == next {
                self.buffers.push(BufDef { class: c, device: d, bytes: self.p.classes[c].bytes, writer: None, readers: Vec::new(), holds_root: false, upload: true });
            }
            return Ok((None, Some(b)));
        }
        if l != d {
            if let Some(&s) = self.copies.get(&(c, d)) {
                return Ok((Some(s), self.step_buf[s]));
            }
            if self.p.link(l, d).is_none() {
                return Err(ConfigError::NoLink);
            }
            let (_, src_buf) = self.avail(c, l)?;
            let s = self.add_step(StepDef::Copy { class: c, from: l, to: d }, c, d);
            if let Some(b) = src_buf {
                self.buffers[b].readers.push(s);
            }
            self.copies.insert((c, d), s);
            return Ok((Some(s), self.step_buf[s]));
        }
        match self.kind[c] {
            ClassKind::Unused | ClassKind::Source | ClassKind::Weight => Ok((None, None)),
            ClassKind::Kept(_) => Ok((None, self.kept_buf.get(&c).copied())),
            ClassKind::Kernel(s) => Ok((Some(s), self.step_buf[s])),
            ClassKind::Alias { child, device } => self.avail(child, device),
        }
    }
}

impl Config {
    /// Build the steps and buffers of complete decisions. `keep[c]`, `choice[c]` and
    /// `option[c]` (the option index of the chosen node) describe every needed class;
    /// `needed` marks them. Classes are visited in `order` (children before parents is
    /// not required).
    pub(crate) fn build(p: &Problem, needed: &[bool], keep: &[Option<usize>], choice: &[Option<usize>], option: &[Option<usize>]) -> Result<Config, ConfigError> {
        let nc = p.classes.len();
        let mut b = Builder {
            p,
            kind: vec![ClassKind::Unused; nc],
            steps: Vec::new(),
            copies: BTreeMap::new(),
            step_buf: Vec::new(),
            kept_buf: BTreeMap::new(),
            uploads: BTreeMap::new(),
            buffers: Vec::new(),
        };
        // Kinds and kernel steps first (so every location is known), then operands.
        let mut kernels = Vec::new();
        for c in 0..nc {
            if !needed[c] {
                continue;
            }
            if let Some(d) = keep[c] {
                b.kind[c] = ClassKind::Kept(d);
                let id = b.buffers.len();
                b.buffers.push(BufDef { class: c, device: d, bytes: p.classes[c].bytes, writer: None, readers: Vec::new(), holds_root: false, upload: false });
                b.kept_buf.insert(c, id);
                continue;
            }
            let n = choice[c].expect("needed class without a choice");
            let node = &p.nodes[n];
            match node.source {
                Some(Source::Weight) => {
                    b.kind[c] = ClassKind::Weight;
                    continue;
                }
                Some(Source::Input) => {
                    b.kind[c] = ClassKind::Source;
                    continue;
                }
                None => {}
            }
            let k = option[c].expect("computed node without an option");
            let o = &node.options[k];
            if o.alias {
                b.kind[c] = ClassKind::Alias { child: node.children[0], device: o.device };
            } else {
                let s = b.add_step(StepDef::Kernel { class: c, node: n, option: k, device: o.device }, c, o.device);
                b.kind[c] = ClassKind::Kernel(s);
                kernels.push(s);
            }
        }
        let mut deps: Vec<Vec<usize>> = vec![Vec::new(); b.steps.len()];
        for &s in &kernels {
            let StepDef::Kernel { node, device, .. } = b.steps[s] else { unreachable!() };
            for &ch in &p.nodes[node].children {
                let (ready, buf) = b.avail(ch, device)?;
                deps.resize(b.steps.len(), Vec::new());
                if let Some(r) = ready {
                    deps[s].push(r);
                }
                if let Some(bf) = buf {
                    b.buffers[bf].readers.push(s);
                }
            }
        }
        // Aliases placed on a device other than their child's need the copy too, even when
        // nothing reads the alias on that device except a root.
        for c in 0..nc {
            if let ClassKind::Alias { child, device } = b.kind[c] {
                b.avail(child, device)?;
            }
        }
        let mut root_ready = Vec::new();
        for &r in &p.roots {
            let (ready, buf) = b.avail(r, p.home)?;
            root_ready.push(ready);
            if let Some(bf) = buf {
                b.buffers[bf].holds_root = true;
            }
        }
        deps.resize(b.steps.len(), Vec::new());
        // Copy dependencies: the source-side availability.
        for (s, dep) in deps.iter_mut().enumerate() {
            if let StepDef::Copy { class, from, .. } = b.steps[s] {
                let (ready, _) = b.avail(class, from)?;
                if let Some(r) = ready {
                    dep.push(r);
                }
            }
        }
        let nd = p.devices.len();
        let mut time = Vec::new();
        let mut resource = Vec::new();
        let mut key = Vec::new();
        for s in &b.steps {
            match *s {
                StepDef::Kernel { class, node, option, device } => {
                    time.push(p.nodes[node].options[option].time);
                    resource.push(device);
                    key.push((0, class, 0));
                }
                StepDef::Copy { class, from, to } => {
                    let li = p.links.iter().position(|l| l.from == from && l.to == to).expect("copy over a checked link");
                    time.push(p.links[li].copy_time(p.classes[class].bytes));
                    resource.push(nd + li);
                    key.push((1, class, to));
                }
            }
        }
        for d in deps.iter_mut() {
            d.sort_unstable();
            d.dedup();
        }
        let mut succs = vec![Vec::new(); b.steps.len()];
        for (s, ds) in deps.iter().enumerate() {
            for &d in ds {
                succs[d].push(s);
            }
        }
        for buf in b.buffers.iter_mut() {
            buf.readers.sort_unstable();
            buf.readers.dedup();
        }
        Ok(Config { kind: b.kind, steps: b.steps, time, resource, deps, succs, key, buffers: b.buffers, root_ready })
    }

    /// Number of resources (devices, then links).
    pub(crate) fn n_resources(p: &Problem) -> usize {
        p.devices.len() + p.links.len()
    }
}

/// Times and memory of an ordered configuration.
#[derive(Clone, Debug)]
pub(crate) struct Timed {
    pub start: Vec<u64>,
    pub end: Vec<u64>,
    pub makespan: u64,
    /// Live interval of every buffer (`None` = persistent: kept or uploaded, live always).
    pub live: Vec<Option<(u64, u64)>>,
    pub peak: u64,
}

impl Config {
    /// Times from start times already computed (`start`), then lifetimes and peak.
    pub(crate) fn timed(&self, p: &Problem, start: Vec<u64>) -> Timed {
        let end: Vec<u64> = start.iter().zip(&self.time).map(|(s, t)| s + t).collect();
        let makespan = self.root_ready.iter().map(|r| r.map_or(0, |s| end[s])).max().unwrap_or(0);
        let mut live = Vec::with_capacity(self.buffers.len());
        for b in &self.buffers {
            live.push(b.writer.map(|w| {
                let mut e = end[w];
                for &r in &b.readers {
                    e = e.max(end[r]);
                }
                if b.holds_root {
                    e = e.max(makespan);
                }
                (start[w], e)
            }));
        }
        let peak = peak_bytes(p.devices.len(), &self.buffers, &live);
        Timed { start, end, makespan, live, peak }
    }
}

/// `Σ_d (kept bytes on d + max_t live transient bytes on d at t)`.
pub(crate) fn peak_bytes(n_devices: usize, buffers: &[BufDef], live: &[Option<(u64, u64)>]) -> u64 {
    let mut total = 0u64;
    for d in 0..n_devices {
        let mut events: Vec<(u64, i128)> = Vec::new();
        let mut kept = 0u64;
        for (b, l) in buffers.iter().zip(live) {
            if b.device != d {
                continue;
            }
            match l {
                None => kept += b.bytes,
                Some((s, e)) if s < e => {
                    events.push((*s, b.bytes as i128));
                    events.push((*e, -(b.bytes as i128)));
                }
                Some(_) => {}
            }
        }
        // Ends before starts at the same time: half-open intervals.
        events.sort_by_key(|&(t, delta)| (t, delta > 0));
        let (mut cur, mut best) = (0i128, 0i128);
        for (_, delta) in events {
            cur += delta;
            best = best.max(cur);
        }
        total += kept + best as u64;
    }
    total
}
