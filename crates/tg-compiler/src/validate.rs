//! The independent plan validator. It knows nothing of how a plan was made: it recomputes
//! lifetimes from the steps and checks the plan's own claims.
//!
//! Checks: every device exists; each arena buffer is written by exactly one step unless
//! it is an input; every step reads only buffers that are inputs, weights or written by
//! an earlier step; each layout stays inside its buffer and each buffer inside its arena;
//! no two arena buffers whose lifetimes overlap share bytes (a step's output never
//! overlaps its inputs); every device supports every step it is given; outputs exist.
//!
//! Across devices: a step reads and writes only buffers on its own device, except a
//! transfer, which reads a buffer on its source device and writes one of the same size on
//! its own; so every cross-device edge is an explicit transfer, ordered after the step that
//! writes its source and before every step that reads its copy. A buffer a transfer reads or
//! writes shares its arena bytes with no other buffer (the transfer runs beside both
//! devices' queues).

use std::sync::Arc;
use tg_runtime::{Device, Plan, Storage, TensorRef};

/// A violated plan invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

fn bad<T>(msg: String) -> Result<T, PlanError> {
    Err(PlanError(msg))
}

/// Checks `plan` against `devices`; `Ok(())` or the first violation found.
pub fn validate(plan: &Plan, devices: &[Arc<dyn Device>]) -> Result<(), PlanError> {
    for (i, name) in plan.devices.iter().enumerate() {
        match devices.get(i) {
            Some(d) if d.name() == name => {}
            _ => return bad(format!("plan device {i} '{name}' is not available")),
        }
    }
    let nb = plan.buffers.len();
    let is_input: Vec<bool> = (0..nb).map(|b| plan.inputs.iter().any(|(_, t)| t.buffer == b)).collect();
    let check_ref = |what: &str, t: &TensorRef| -> Result<(), PlanError> {
        let b = plan.buffers.get(t.buffer).ok_or_else(|| PlanError(format!("{what}: buffer {} does not exist", t.buffer)))?;
        let need = t.layout.bytes_needed().ok_or_else(|| PlanError(format!("{what}: layout reaches before its buffer")))?;
        if need > b.bytes {
            return bad(format!("{what}: layout needs {need} bytes, buffer {} has {}", t.buffer, b.bytes));
        }
        if t.layout.shape.len() != t.layout.strides.len() {
            return bad(format!("{what}: shape and strides differ in rank"));
        }
        Ok(())
    };
    for (i, b) in plan.buffers.iter().enumerate() {
        if let Storage::Arena { arena, offset } = b.storage {
            let a = plan.arenas.get(arena).ok_or_else(|| PlanError(format!("buffer {i} in missing arena {arena}")))?;
            if offset + b.bytes > a.bytes {
                return bad(format!("buffer {i} [{offset}, {}) exceeds arena {arena} of {} bytes", offset + b.bytes, a.bytes));
            }
        }
    }
    let device_of = |b: usize| -> Option<usize> {
        match plan.buffers[b].storage {
            Storage::Arena { arena, .. } => plan.arenas.get(arena).map(|a| a.device),
            Storage::Weight { device, .. } | Storage::State { device, .. } => Some(device),
        }
    };
    for (i, a) in plan.arenas.iter().enumerate() {
        if a.device >= plan.devices.len() {
            return bad(format!("arena {i} is on device {}, which the plan does not list", a.device));
        }
    }
    let mut pinned = vec![false; nb];
    // Lifetimes recomputed from the steps.
    let mut writer: Vec<Option<usize>> = vec![None; nb];
    let mut last_read: Vec<Option<usize>> = vec![None; nb];
    for (si, s) in plan.steps.iter().enumerate() {
        let dev = devices.get(s.device).ok_or_else(|| PlanError(format!("step {si}: device {} missing", s.device)))?;
        let transfer_from = match s.kernel {
            tg_runtime::Kernel::Transfer { from } => {
                if from == s.device || from >= plan.devices.len() {
                    return bad(format!("step {si}: a transfer from device {from} to device {}", s.device));
                }
                Some(from)
            }
            _ => None,
        };
        for (k, t) in s.inputs.iter().enumerate() {
            check_ref(&format!("step {si} input {k}"), t)?;
            let want = transfer_from.unwrap_or(s.device);
            if device_of(t.buffer) != Some(want) {
                return bad(format!(
                    "step {si} ({} on {}) reads buffer {} on device {:?}: a value on another device is read only through a transfer",
                    s.kernel.name(),
                    plan.devices[s.device],
                    t.buffer,
                    device_of(t.buffer).and_then(|d| plan.devices.get(d))
                ));
            }
            if transfer_from.is_some() {
                pinned[t.buffer] = true;
            }
            let b = &plan.buffers[t.buffer];
            let ready = matches!(b.storage, Storage::Weight { .. }) || is_input[t.buffer] || writer[t.buffer].is_some_and(|w| w < si);
            if !ready {
                return bad(format!("step {si} ({}) reads buffer {} before it is written", s.kernel.name(), t.buffer));
            }
            last_read[t.buffer] = Some(si);
        }
        check_ref(&format!("step {si} output"), &s.output)?;
        let ob = &plan.buffers[s.output.buffer];
        if matches!(ob.storage, Storage::Weight { .. }) {
            return bad(format!("step {si} writes weight buffer {}", s.output.buffer));
        }
        if matches!(ob.storage, Storage::State { .. }) != matches!(s.kernel, tg_runtime::Kernel::StoreRows { .. }) {
            return bad(format!("step {si} ({}) writes buffer {}: only store_rows writes states, and only states", s.kernel.name(), s.output.buffer));
        }
        if is_input[s.output.buffer] || writer[s.output.buffer].is_some() {
            return bad(format!("step {si} writes buffer {} which is already defined", s.output.buffer));
        }
        writer[s.output.buffer] = Some(si);
        if device_of(s.output.buffer) != Some(s.device) {
            return bad(format!("step {si} ({} on {}) writes buffer {} on another device", s.kernel.name(), plan.devices[s.device], s.output.buffer));
        }
        let layouts: Vec<_> = s.inputs.iter().map(|t| t.layout.clone()).collect();
        if transfer_from.is_some() {
            // Not a kernel: the executor copies the whole buffer.
            tg_runtime::contract::well_formed(&s.kernel, &layouts, &s.output.layout).map_err(|e| PlanError(format!("step {si}: transfer: {e}")))?;
            let (src, dst) = (s.inputs[0].buffer, s.output.buffer);
            if plan.buffers[src].bytes != plan.buffers[dst].bytes {
                return bad(format!("step {si}: transfers {} bytes into a buffer of {}", plan.buffers[src].bytes, plan.buffers[dst].bytes));
            }
            if !matches!(plan.buffers[dst].storage, Storage::Arena { .. }) {
                return bad(format!("step {si}: a transfer writes buffer {dst}, which is not in an arena"));
            }
            pinned[dst] = true;
        } else {
            dev.supports(&s.kernel, &layouts, &s.output.layout).map_err(|e| PlanError(format!("step {si}: {} does not support {}: {e}", dev.name(), s.kernel.name())))?;
        }
    }
    let end = plan.steps.len();
    let mut is_output = vec![false; nb];
    for (name, t) in &plan.outputs {
        check_ref(&format!("output '{name}'"), t)?;
        let b = &plan.buffers[t.buffer];
        if !(matches!(b.storage, Storage::Weight { .. }) || is_input[t.buffer] || writer[t.buffer].is_some()) {
            return bad(format!("output '{name}' is never written"));
        }
        is_output[t.buffer] = true;
    }
    for (name, t) in &plan.inputs {
        check_ref(&format!("input '{name}'"), t)?;
    }
    // Interval of each arena buffer, inclusive: [def, last use]; inputs are live from the
    // start, outputs and persistent buffers to the end.
    let mut live: Vec<(usize, usize, usize, usize, usize)> = Vec::new(); // (arena, lo, hi, start, end)
    for b in 0..nb {
        if let Storage::Arena { arena, offset } = plan.buffers[b].storage {
            let start = if is_input[b] {
                0
            } else {
                match writer[b] {
                    Some(w) => w,
                    None => continue,
                }
            };
            let stop = if is_output[b] || plan.buffers[b].persistent { end } else { last_read[b].unwrap_or(start).max(start) };
            // A transfer's buffers own their bytes for the whole run.
            let (start, stop) = if pinned[b] { (0, end) } else { (start, stop) };
            live.push((arena, offset, offset + plan.buffers[b].bytes, start, stop));
            let _ = b;
        }
    }
    for i in 0..live.len() {
        for j in i + 1..live.len() {
            let (a, b) = (live[i], live[j]);
            if a.0 == b.0 && a.1 < b.2 && b.1 < a.2 && a.3 <= b.4 && b.3 <= a.4 {
                return bad(format!("buffers at [{}, {}) live steps {}..={} and [{}, {}) live steps {}..={} overlap in arena {}", a.1, a.2, a.3, a.4, b.1, b.2, b.3, b.4, a.0));
            }
        }
    }
    Ok(())
}
