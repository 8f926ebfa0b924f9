//! The simulated timeline of a finished plan: every step on its device's queue (or, for a
//! transfer, on its link), in plan order, starting when its operands are ready and its queue
//! is free — what the runtime does with one queue per device. Kernel times come from the
//! profile (its fallbacks where it measured nothing, the roofline guess without a profile),
//! transfer times from the measured links (else [`crate::place::DEFAULT_LINK`]).

use std::collections::HashMap;

use tg_profile::{Fingerprint, Profile, ProfileKey};
use tg_runtime::{Kernel, Plan};

/// A plan's simulated timeline.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Timeline {
    /// Per step, in plan order: simulated start and end (ns).
    pub steps: Vec<(f64, f64)>,
    /// When the last step ends (ns).
    pub makespan_ns: f64,
    /// Per device (plan order): ns its queue is busy.
    pub busy_ns: Vec<f64>,
}

/// The predicted time (ns) of every step of `plan` and whether it rests on a measurement:
/// a kernel from `profile` (`None`: the roofline guess) with its own device's workers
/// (`threads`), a transfer from the measured link, else [`crate::place::DEFAULT_LINK`].
pub fn step_costs(plan: &Plan, profile: Option<&Profile>, threads: &[usize]) -> Vec<(f64, bool)> {
    let empty;
    let profile = match profile {
        Some(p) => p,
        None => {
            empty = Profile::new(Fingerprint::current());
            &empty
        }
    };
    plan.steps
        .iter()
        .map(|s| match s.kernel {
            Kernel::Transfer { from } => {
                let bytes = plan.buffers.get(s.output.buffer).map_or(0, |b| b.bytes);
                let (src, dst) = (plan.devices.get(from).map_or("", |d| d.as_str()), plan.devices.get(s.device).map_or("", |d| d.as_str()));
                match profile.predict_copy(src, dst, bytes) {
                    Some(ns) => (ns, true),
                    None => {
                        let (lat, bw) = crate::place::DEFAULT_LINK;
                        (lat as f64 + bytes as f64 * 1000.0 / bw as f64, false)
                    }
                }
            }
            _ => {
                let t = threads.get(s.device).copied().unwrap_or(1);
                let p = profile.predict(&ProfileKey::from_step(plan, s, t));
                (p.ns, !p.source.is_fallback())
            }
        })
        .collect()
}

/// Simulates `plan` with the step times `costs` ([`step_costs`]).
pub fn simulate(plan: &Plan, costs: &[(f64, bool)]) -> Timeline {
    let mut ready: HashMap<usize, f64> = HashMap::new();
    let mut free: HashMap<(usize, usize), f64> = HashMap::new();
    let mut busy = vec![0.0; plan.devices.len()];
    let mut steps = Vec::with_capacity(plan.steps.len());
    let mut makespan: f64 = 0.0;
    for (s, &(ns, _)) in plan.steps.iter().zip(costs) {
        let resource = match s.kernel {
            Kernel::Transfer { from } => (from, s.device),
            _ => (s.device, s.device),
        };
        let ns = if ns.is_finite() { ns.max(0.0) } else { 0.0 };
        let operands = s.inputs.iter().filter_map(|t| ready.get(&t.buffer)).fold(0.0f64, |a, &b| a.max(b));
        let start = operands.max(free.get(&resource).copied().unwrap_or(0.0));
        let end = start + ns;
        free.insert(resource, end);
        ready.insert(s.output.buffer, end);
        if resource.0 == resource.1 {
            if let Some(b) = busy.get_mut(s.device) {
                *b += ns;
            }
        }
        makespan = makespan.max(end);
        steps.push((start, end));
    }
    Timeline { steps, makespan_ns: makespan, busy_ns: busy }
}
