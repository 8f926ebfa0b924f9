//! `memory`: arena offsets over buffer lifetimes.
//!
//! A buffer is live from the step that writes it (inputs: from before step 0) to the last
//! step that reads it or any view of it (outputs: to the end of the run). First, greedy
//! first-fit in order of definition (the lowest aligned offset that overlaps no live
//! buffer); then `tg_pack::minimize` (the solver behind `tg pack`) looks for a lower arena
//! within [`PACK_TIME`], starting from that height, and its packing is kept when it is
//! lower. The report gives the arena, the packer's proven lower bound and the first-fit
//! height, per device (one arena each). With the stage switched off, every buffer gets its own space.

use crate::lower::{Program, VKind};
use std::sync::Arc;
use tg_runtime::{ArenaDesc, BufferDesc, Device, Plan, Storage};

/// Time the packer may spend looking for a lower arena than first-fit's.
pub const PACK_TIME: std::time::Duration = std::time::Duration::from_millis(30);

/// What the packing achieved, for the stage report.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PackStats {
    /// Height of greedy first-fit.
    pub first_fit: usize,
    /// Proven lower bound on the arena.
    pub lower_bound: usize,
    /// The arena is proven minimal.
    pub optimal: bool,
}

/// Arena offsets for the buffers of `prog`: one arena per device that holds buffers, each
/// packed over lifetimes in plan order. A buffer a transfer reads or writes owns its bytes
/// for the whole run: the transfer runs beside both devices' queues, so no other buffer may
/// reuse its memory (see `Kernel::Transfer`).
/// Each buffer's lifetime as the packer sees it, an inclusive step interval: from the step
/// that first writes it (inputs and weights: step 0) to the last that reads it; outputs to
/// the end, and the buffers a transfer reads or writes for the whole run (`steps.len()`
/// stands for after the last step). Arena buffers whose intervals meet never share bytes.
pub fn lifetimes(steps: &[tg_runtime::Step], outputs: &[(String, tg_runtime::TensorRef)], buffers: usize) -> Vec<(usize, usize)> {
    let mut first: Vec<Option<usize>> = vec![None; buffers];
    let mut last: Vec<Option<usize>> = vec![None; buffers];
    let mut pinned = vec![false; buffers];
    for (si, s) in steps.iter().enumerate() {
        first[s.output.buffer].get_or_insert(si);
        for t in &s.inputs {
            last[t.buffer] = Some(si);
        }
        if matches!(s.kernel, tg_runtime::Kernel::Transfer { .. }) {
            pinned[s.output.buffer] = true;
            for t in &s.inputs {
                pinned[t.buffer] = true;
            }
        }
    }
    let end = steps.len();
    let mut persistent = vec![false; buffers];
    for (_, t) in outputs {
        persistent[t.buffer] = true;
    }
    (0..buffers)
        .map(|b| {
            if pinned[b] {
                return (0, end);
            }
            let s = first[b].unwrap_or(0);
            (s, if persistent[b] { end } else { last[b].unwrap_or(s).max(s) })
        })
        .collect()
}

pub(crate) fn assign(prog: Program, devices: &[Arc<dyn Device>], align: usize, reuse: bool) -> (Plan, PackStats) {
    let nb = prog.buffers.len();
    let mut first: Vec<Option<usize>> = vec![None; nb];
    let mut last: Vec<Option<usize>> = vec![None; nb];
    for (si, s) in prog.steps.iter().enumerate() {
        first[s.output.buffer].get_or_insert(si);
        for t in &s.inputs {
            last[t.buffer] = Some(si);
        }
    }
    let mut persistent = vec![false; nb];
    for (_, t) in &prog.outputs {
        persistent[t.buffer] = true;
    }
    let spans = lifetimes(&prog.steps, &prog.outputs, nb);
    let interval = |b: usize| -> (usize, usize) { spans[b] };
    let mut offsets = vec![0usize; nb];
    let mut arena_of_device: Vec<Option<usize>> = vec![None; devices.len()];
    let mut arenas: Vec<ArenaDesc> = Vec::new();
    let mut stats = PackStats::default();
    for (dev, slot) in arena_of_device.iter_mut().enumerate() {
        let mine: Vec<usize> = (0..nb).filter(|&b| prog.buffers[b].kind == VKind::Arena && prog.buffers[b].device == dev).collect();
        if mine.is_empty() {
            continue;
        }
        let (top, st) = pack_device(&mine, &prog, &interval, &first, align, reuse, &mut offsets);
        stats.first_fit += st.first_fit;
        stats.lower_bound += st.lower_bound;
        stats.optimal = if arenas.is_empty() { st.optimal } else { stats.optimal && st.optimal };
        *slot = Some(arenas.len());
        arenas.push(ArenaDesc { device: dev, bytes: top.max(align) });
    }
    if arenas.is_empty() {
        arenas.push(ArenaDesc { device: 0, bytes: align });
    }
    let buffers = prog
        .buffers
        .iter()
        .enumerate()
        .map(|(b, v)| BufferDesc {
            storage: match &v.kind {
                VKind::Arena => Storage::Arena { arena: arena_of_device[v.device].unwrap_or(0), offset: offsets[b] },
                VKind::Weight(name) => Storage::Weight { name: name.clone(), device: v.device },
                VKind::State(name) => Storage::State { name: name.clone(), device: v.device },
            },
            bytes: v.bytes,
            node: v.node,
            first_step: first[b],
            last_step: last[b],
            persistent: persistent[b],
        })
        .collect();
    let plan = Plan { devices: devices.iter().map(|d| d.name().to_string()).collect(), arenas, buffers, steps: prog.steps, inputs: prog.inputs, outputs: prog.outputs };
    (plan, stats)
}

/// Packs the arena buffers `mine` of one device: greedy first-fit in order of definition,
/// then `tg_pack::minimize` from that height. Writes `offsets`; returns the height.
fn pack_device(
    mine: &[usize],
    prog: &Program,
    interval: &dyn Fn(usize) -> (usize, usize),
    first: &[Option<usize>],
    align: usize,
    reuse: bool,
    offsets: &mut [usize],
) -> (usize, PackStats) {
    let align_up = |x: usize| x.div_ceil(align) * align;
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // (offset, size, start, end)
    let mut top = 0usize;
    // Order of definition: inputs (no writer) first, then by writing step.
    let mut order: Vec<usize> = mine.to_vec();
    order.sort_by_key(|&b| (first[b].map(|s| s + 1).unwrap_or(0), b));
    for b in order {
        let size = align_up(prog.buffers[b].bytes.max(1));
        let (s, e) = interval(b);
        if !reuse {
            offsets[b] = top;
            top += size;
            continue;
        }
        let mut busy: Vec<(usize, usize)> = placed.iter().filter(|p| p.2 <= e && s <= p.3).map(|p| (p.0, p.0 + p.1)).collect();
        busy.sort();
        let mut at = 0usize;
        for (lo, hi) in busy {
            if at + size <= lo {
                break;
            }
            at = at.max(align_up(hi));
        }
        offsets[b] = at;
        top = top.max(at + size);
        placed.push((at, size, s, e));
    }
    let mut stats = PackStats { first_fit: top, lower_bound: 0, optimal: false };
    if reuse && top > 0 {
        let items: Vec<tg_pack::Buffer> = mine
            .iter()
            .map(|&b| {
                let (s, e) = interval(b);
                let mut x = tg_pack::Buffer::new(b.to_string(), s as i64, e as i64 + 1, align_up(prog.buffers[b].bytes.max(1)) as u64);
                x.alignment = align as u64;
                x
            })
            .collect();
        if let Ok(problem) = tg_pack::Problem::new(items) {
            let limits = tg_pack::Limits { time: Some(PACK_TIME), nodes: None };
            if let Ok(out) = tg_pack::minimize(&problem, top as u64, &limits) {
                stats.lower_bound = out.lower_bound as usize;
                stats.optimal = out.optimal;
                if let tg_pack::Verdict::Feasible(sol) = &out.verdict {
                    if (sol.height as usize) < top {
                        for (i, &b) in mine.iter().enumerate() {
                            offsets[b] = sol.offsets[i] as usize;
                        }
                        top = sol.height as usize;
                    }
                    stats.optimal = out.optimal && sol.height as usize <= top;
                }
            }
        }
    }
    (top, stats)
}
