//! `memory`: arena offsets over buffer lifetimes.
//!
//! A buffer is live from the step that writes it (inputs: from before step 0) to the last
//! step that reads it or any view of it (outputs: to the end of the run). First, greedy
//! first-fit in order of definition (the lowest aligned offset that overlaps no live
//! buffer); then `tg_pack::minimize` (the solver behind `tg pack`) looks for a lower arena
//! within [`PACK_TIME`], starting from that height, and its packing is kept when it is
//! lower. The report gives the arena, the packer's proven lower bound and the first-fit
//! height. With the stage switched off, every buffer gets its own space.

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

/// Arena offsets for the buffers of `prog`, whose steps all run on device `device`: one
/// arena, on that device.
pub(crate) fn assign(prog: Program, devices: &[Arc<dyn Device>], device: usize, align: usize, reuse: bool) -> (Plan, PackStats) {
    let nb = prog.buffers.len();
    let mut first: Vec<Option<usize>> = vec![None; nb];
    let mut last: Vec<Option<usize>> = vec![None; nb];
    for (si, s) in prog.steps.iter().enumerate() {
        first[s.output.buffer].get_or_insert(si);
        for t in &s.inputs {
            last[t.buffer] = Some(si);
        }
    }
    let end = prog.steps.len();
    let mut persistent = vec![false; nb];
    for (_, t) in &prog.outputs {
        persistent[t.buffer] = true;
    }
    // Lifetime as an inclusive step interval; inputs start before step 0 (-1 => 0 with
    // "defined before" semantics handled by using start = 0 and treating them as live).
    let interval = |b: usize| -> (usize, usize) {
        let s = first[b].unwrap_or(0);
        let e = if persistent[b] { end } else { last[b].unwrap_or(s).max(s) };
        (s, e)
    };
    let align_up = |x: usize| x.div_ceil(align) * align;
    let mut offsets = vec![0usize; nb];
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // (offset, size, start, end)
    let mut top = 0usize;
    // Order of definition: inputs (no writer) first, then by writing step.
    let mut order: Vec<usize> = (0..nb).filter(|&b| prog.buffers[b].kind == VKind::Arena).collect();
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
        let arena: Vec<usize> = (0..nb).filter(|&b| prog.buffers[b].kind == VKind::Arena).collect();
        let items: Vec<tg_pack::Buffer> = arena
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
                        for (i, &b) in arena.iter().enumerate() {
                            offsets[b] = sol.offsets[i] as usize;
                        }
                        top = sol.height as usize;
                    }
                    stats.optimal = out.optimal && sol.height as usize <= top;
                }
            }
        }
    }
    let buffers = prog
        .buffers
        .iter()
        .enumerate()
        .map(|(b, v)| BufferDesc {
            storage: match &v.kind {
                VKind::Arena => Storage::Arena { arena: 0, offset: offsets[b] },
                VKind::Weight(name) => Storage::Weight { name: name.clone(), device },
                VKind::State(name) => Storage::State { name: name.clone(), device },
            },
            bytes: v.bytes,
            node: v.node,
            first_step: first[b],
            last_step: last[b],
            persistent: persistent[b],
        })
        .collect();
    let plan = Plan {
        devices: devices.iter().map(|d| d.name().to_string()).collect(),
        arenas: vec![ArenaDesc { device, bytes: top.max(align) }],
        buffers,
        steps: prog.steps,
        inputs: prog.inputs,
        outputs: prog.outputs,
    };
    (plan, stats)
}
