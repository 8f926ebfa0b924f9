//! The planning problem of `docs/planner.md`: devices, links, classes, nodes with their
//! implementation options, roots; read from JSON and checked.

use serde::{Deserialize, Serialize};

use crate::PlanError;

/// Largest time (ns) an option or a link latency may have: sums of thousands of them stay
/// far from overflowing.
pub const MAX_TIME: u64 = 1 << 48;
/// Largest class size in bytes.
pub const MAX_BYTES: u64 = 1 << 50;

/// A device with its arena.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Name, for reports.
    #[serde(default)]
    pub name: String,
    /// Arena bytes.
    pub capacity: u64,
    /// Bytes that kept (cached) values may occupy, at most `capacity`.
    #[serde(default)]
    pub cache_budget: u64,
}

/// A one-way copy link between two devices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Source device.
    pub from: usize,
    /// Destination device.
    pub to: usize,
    /// Fixed cost of a copy, ns.
    pub latency: u64,
    /// Bandwidth in bytes per microsecond (≥ 1).
    pub bytes_per_us: u64,
}

impl Link {
    /// `latency + ceil(bytes · 1000 / bytes_per_us)`, at least 1.
    pub fn copy_time(&self, bytes: u64) -> u64 {
        let transfer = (bytes as u128 * 1000).div_ceil(self.bytes_per_us.max(1) as u128);
        (self.latency as u128 + transfer).clamp(1, u64::MAX as u128) as u64
    }
}

/// A class: one tensor value, computed by any of its nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Class {
    /// Size of the value in bytes (≥ 1).
    pub bytes: u64,
    /// The value does not depend on graph inputs, so it may be kept across runs.
    #[serde(default)]
    pub cacheable: bool,
}

/// What kind of source a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A graph input: on the home device at time 0.
    Input,
    /// A weight: read in place from the weight store on the home device, and uploaded once
    /// (at load time, a persistent buffer, no copy step) to every other device that reads it.
    Weight,
}

/// One way to run a computed node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImplOption {
    /// Kernel label (reports only).
    #[serde(default)]
    pub kernel: String,
    /// Device it runs on.
    pub device: usize,
    /// Run time in ns (≥ 1 for kernels, 0 for aliases).
    pub time: u64,
    /// A view: no step, no buffer; the value is the single child's buffer.
    #[serde(default)]
    pub alias: bool,
}

/// An e-node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The class it computes.
    pub class: usize,
    /// Child classes, in operand order.
    #[serde(default)]
    pub children: Vec<usize>,
    /// Set for sources (which have no children and no options).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Implementation options of a computed node.
    #[serde(default)]
    pub options: Vec<ImplOption>,
}

/// A planning problem (see `docs/planner.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Devices; index = device id.
    pub devices: Vec<Device>,
    /// Where inputs arrive and roots must end up.
    #[serde(default)]
    pub home: usize,
    /// Copy links.
    #[serde(default)]
    pub links: Vec<Link>,
    /// Classes; index = class id.
    pub classes: Vec<Class>,
    /// Nodes; index = node id.
    pub nodes: Vec<Node>,
    /// Output classes.
    pub roots: Vec<usize>,
}

impl Problem {
    /// Parse and check a problem from JSON.
    pub fn from_json(text: &str) -> Result<Problem, PlanError> {
        let p: Problem = serde_json::from_str(text).map_err(|e| PlanError::Json(e.to_string()))?;
        p.check()?;
        Ok(p)
    }

    /// Check every reference and every rule of the definition; the error names the item.
    pub fn check(&self) -> Result<(), PlanError> {
        let bad = |what: String| Err(PlanError::Invalid(what));
        if self.devices.is_empty() {
            return bad("no devices".into());
        }
        let nd = self.devices.len();
        if self.home >= nd {
            return bad(format!("home device {} does not exist ({nd} devices)", self.home));
        }
        for (i, d) in self.devices.iter().enumerate() {
            if d.cache_budget > d.capacity {
                return bad(format!("device {i}: cache_budget {} exceeds capacity {}", d.cache_budget, d.capacity));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, l) in self.links.iter().enumerate() {
            if l.from >= nd || l.to >= nd || l.from == l.to {
                return bad(format!("link {i}: {} -> {} is not a link between two devices", l.from, l.to));
            }
            if l.latency > MAX_TIME {
                return bad(format!("link {i}: latency {} exceeds {MAX_TIME} ns", l.latency));
            }
            if l.bytes_per_us == 0 {
                return bad(format!("link {i}: bytes_per_us must be at least 1"));
            }
            if !seen.insert((l.from, l.to)) {
                return bad(format!("link {i}: a second link {} -> {}", l.from, l.to));
            }
        }
        let nc = self.classes.len();
        for (i, c) in self.classes.iter().enumerate() {
            if c.bytes == 0 || c.bytes > MAX_BYTES {
                return bad(format!("class {i}: bytes must be in 1..={MAX_BYTES}, got {}", c.bytes));
            }
        }
        let mut has_node = vec![false; nc];
        for (i, n) in self.nodes.iter().enumerate() {
            if n.class >= nc {
                return bad(format!("node {i}: class {} does not exist", n.class));
            }
            has_node[n.class] = true;
            if let Some(ch) = n.children.iter().find(|&&c| c >= nc) {
                return bad(format!("node {i}: child class {ch} does not exist"));
            }
            match n.source {
                Some(_) => {
                    if !n.children.is_empty() || !n.options.is_empty() {
                        return bad(format!("node {i}: a source has no children and no options"));
                    }
                }
                None => {
                    if n.options.is_empty() {
                        return bad(format!("node {i}: a computed node needs at least one option"));
                    }
                    for (k, o) in n.options.iter().enumerate() {
                        if o.time > MAX_TIME {
                            return bad(format!("node {i} option {k}: time {} exceeds {MAX_TIME} ns", o.time));
                        }
                        if o.device >= nd {
                            return bad(format!("node {i} option {k}: device {} does not exist", o.device));
                        }
                        if o.alias {
                            if n.children.len() != 1 {
                                return bad(format!("node {i} option {k}: an alias needs exactly one child"));
                            }
                            if o.time != 0 {
                                return bad(format!("node {i} option {k}: an alias takes time 0"));
                            }
                        } else if o.time == 0 {
                            return bad(format!("node {i} option {k}: a kernel takes time at least 1"));
                        }
                    }
                }
            }
        }
        if let Some(c) = has_node.iter().position(|h| !h) {
            return bad(format!("class {c} has no nodes"));
        }
        if self.roots.is_empty() {
            return bad("no roots".into());
        }
        if let Some(r) = self.roots.iter().find(|&&r| r >= nc) {
            return bad(format!("root class {r} does not exist"));
        }
        Ok(())
    }

    /// The link `from → to`, if any.
    pub fn link(&self, from: usize, to: usize) -> Option<&Link> {
        self.links.iter().find(|l| l.from == from && l.to == to)
    }

    /// Nodes of each class.
    pub fn class_nodes(&self) -> Vec<Vec<usize>> {
        let mut v = vec![Vec::new(); self.classes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            v[n.class].push(i);
        }
        v
    }

    /// Copy time of `class` over `from → to`, if the link exists.
    pub fn copy_time(&self, class: usize, from: usize, to: usize) -> Option<u64> {
        self.link(from, to).map(|l| l.copy_time(self.classes[class].bytes))
    }
}
