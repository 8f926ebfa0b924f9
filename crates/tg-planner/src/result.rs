//! The result of a search in the JSON format of `docs/planner.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::StepDef;
use crate::search::{Outcome, Solution, Status};

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PlanStep {
    /// A kernel.
    Kernel {
        /// Class computed.
        class: usize,
        /// Node chosen.
        node: usize,
        /// Option index of the node.
        option: usize,
        /// Device.
        device: usize,
        /// Start time, ns.
        start: u64,
        /// End time, ns.
        end: u64,
    },
    /// A copy between devices.
    Copy {
        /// Class copied.
        class: usize,
        /// Source device.
        from: usize,
        /// Destination device.
        to: usize,
        /// Start time, ns.
        start: u64,
        /// End time, ns.
        end: u64,
    },
}

/// Kind of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BufferKind {
    /// Written by a kernel.
    Output,
    /// Destination of a copy.
    Copy,
    /// Persistent buffer of a kept class.
    Kept,
    /// A weight uploaded once to a device other than home (persistent, no copy step).
    Weight,
}

/// One buffer of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanBuffer {
    /// Class held.
    pub class: usize,
    /// Device.
    pub device: usize,
    /// Kind.
    pub kind: BufferKind,
    /// Size.
    pub bytes: u64,
    /// Arena offset.
    pub offset: u64,
    /// Live from.
    pub start: u64,
    /// Live until (exclusive); `None` for persistent (kept and weight) buffers.
    pub end: Option<u64>,
}

/// A plan: decisions, steps and buffers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Kept classes → device.
    pub keep: BTreeMap<usize, usize>,
    /// Needed, not kept classes → node.
    pub choice: BTreeMap<usize, usize>,
    /// Needed computed classes → option index of their node.
    pub option: BTreeMap<usize, usize>,
    /// Steps, by start time.
    pub steps: Vec<PlanStep>,
    /// Buffers.
    pub buffers: Vec<PlanBuffer>,
}

/// Status in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatusJson {
    /// See [`Status::Optimal`].
    Optimal,
    /// See [`Status::Feasible`].
    Feasible,
    /// See [`Status::Infeasible`].
    Infeasible,
    /// See [`Status::Unknown`].
    Unknown,
}

/// The whole result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanResult {
    /// How the search ended.
    pub status: StatusJson,
    /// Makespan of the plan.
    pub makespan: Option<u64>,
    /// Peak live bytes of the plan.
    pub peak_bytes: Option<u64>,
    /// Proven lower bound on the makespan.
    pub lower_bound: u64,
    /// Search nodes.
    pub nodes_explored: u64,
    /// Milliseconds to the first plan.
    pub first_plan_ms: Option<f64>,
    /// Milliseconds in all.
    pub ms: f64,
    /// The plan.
    pub plan: Option<Plan>,
}

impl Solution {
    /// The plan in its JSON form.
    pub fn to_plan(&self) -> Plan {
        let mut keep = BTreeMap::new();
        let mut choice = BTreeMap::new();
        let mut option = BTreeMap::new();
        for c in 0..self.keep.len() {
            if let Some(d) = self.keep[c] {
                keep.insert(c, d);
            }
            if let Some(n) = self.choice[c] {
                choice.insert(c, n);
            }
            if let Some(k) = self.option[c] {
                option.insert(c, k);
            }
        }
        let mut steps: Vec<PlanStep> = self
            .steps()
            .map(|(s, start, end)| match *s {
                StepDef::Kernel { class, node, option, device } => PlanStep::Kernel { class, node, option, device, start, end },
                StepDef::Copy { class, from, to } => PlanStep::Copy { class, from, to, start, end },
            })
            .collect();
        steps.sort_by_key(|s| match s {
            PlanStep::Kernel { start, class, .. } => (*start, 0, *class, 0),
            PlanStep::Copy { start, class, to, .. } => (*start, 1, *class, *to),
        });
        let buffers = self
            .config
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let kind = match b.writer {
                    None if b.upload => BufferKind::Weight,
                    None => BufferKind::Kept,
                    Some(w) => match self.config.steps[w] {
                        StepDef::Kernel { .. } => BufferKind::Output,
                        StepDef::Copy { .. } => BufferKind::Copy,
                    },
                };
                let (start, end) = match self.timed.live[i] {
                    Some((s, e)) => (s, Some(e)),
                    None => (0, None),
                };
                PlanBuffer { class: b.class, device: b.device, kind, bytes: b.bytes, offset: self.offsets[i], start, end }
            })
            .collect();
        Plan { keep, choice, option, steps, buffers }
    }
}

impl Outcome {
    /// The result in its JSON form.
    pub fn to_result(&self) -> PlanResult {
        let status = match self.status {
            Status::Optimal => StatusJson::Optimal,
            Status::Feasible => StatusJson::Feasible,
            Status::Infeasible => StatusJson::Infeasible,
            Status::Unknown => StatusJson::Unknown,
        };
        PlanResult {
            status,
            makespan: self.best.as_ref().map(|b| b.makespan()),
            peak_bytes: self.best.as_ref().map(|b| b.peak()),
            lower_bound: self.lower_bound,
            nodes_explored: self.nodes,
            first_plan_ms: self.first_plan.map(|d| d.as_secs_f64() * 1e3),
            ms: self.elapsed.as_secs_f64() * 1e3,
            plan: self.best.as_ref().map(|b| b.to_plan()),
        }
    }
}
