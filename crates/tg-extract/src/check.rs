//! An independent checker for extractions. It knows nothing of how a choice was found:
//! from the e-graph and the choices alone it verifies that
//! - every choice picks a node of its own class, and no class is chosen twice;
//! - every needed class is chosen (roots are needed; so is every child class of the chosen
//!   node of a needed class);
//! - no choice is for a class that is not needed;
//! - the chosen sub-graph is acyclic;
//!
//! and recomputes the DAG cost: the sum of the costs of the chosen nodes, each counted once.

use crate::graph::{ClassId, EGraph, NodeId};
use thiserror::Error;

/// Why an extraction is invalid.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CheckError {
    /// A class or node index is out of range.
    #[error("choice ({class:?}, {node:?}) is out of range")]
    OutOfRange {
        /// The class.
        class: ClassId,
        /// The node.
        node: NodeId,
    },
    /// The chosen node belongs to another class.
    #[error("class `{class}` is given node `{node}` of another class")]
    WrongClass {
        /// The class name.
        class: String,
        /// The node name.
        node: String,
    },
    /// A class is chosen twice.
    #[error("class `{0}` is chosen twice")]
    Duplicate(String),
    /// A needed class has no choice.
    #[error("class `{0}` is needed but not chosen")]
    Missing(String),
    /// A class is chosen but not needed.
    #[error("class `{0}` is chosen but not needed")]
    NotNeeded(String),
    /// The chosen sub-graph has a cycle through this class.
    #[error("the chosen sub-graph has a cycle through class `{0}`")]
    Cycle(String),
}

/// Checks an extraction (pairs class → chosen node) and returns its DAG cost.
pub fn check(g: &EGraph, choices: &[(ClassId, NodeId)]) -> Result<f64, CheckError> {
    let nc = g.num_classes();
    let mut sel: Vec<Option<NodeId>> = vec![None; nc];
    for &(c, n) in choices {
        if c.index() >= nc || n.index() >= g.num_nodes() {
            return Err(CheckError::OutOfRange { class: c, node: n });
        }
        if g.node_class(n) != c {
            return Err(CheckError::WrongClass { class: g.class_name(c).to_string(), node: g.node_name(n).to_string() });
        }
        if sel[c.index()].replace(n).is_some() {
            return Err(CheckError::Duplicate(g.class_name(c).to_string()));
        }
    }

    // Depth-first walk from the roots over chosen nodes: 0 = unseen, 1 = on the stack,
    // 2 = finished. Meeting a class on the stack is a cycle.
    let mut state = vec![0u8; nc];
    let mut stack: Vec<(ClassId, usize)> = Vec::new();
    for &r in g.roots() {
        if state[r.index()] != 0 {
            continue;
        }
        if sel[r.index()].is_none() {
            return Err(CheckError::Missing(g.class_name(r).into()));
        }
        state[r.index()] = 1;
        stack.push((r, 0));
        while let Some(&mut (c, ref mut i)) = stack.last_mut() {
            let node = sel[c.index()].ok_or_else(|| CheckError::Missing(g.class_name(c).into()))?;
            let kids = g.children(node);
            if *i < kids.len() {
                let d = kids[*i];
                *i += 1;
                match state[d.index()] {
                    0 => {
                        if sel[d.index()].is_none() {
                            return Err(CheckError::Missing(g.class_name(d).into()));
                        }
                        state[d.index()] = 1;
                        stack.push((d, 0));
                    }
                    1 => return Err(CheckError::Cycle(g.class_name(d).into())),
                    _ => {}
                }
            } else {
                state[c.index()] = 2;
                stack.pop();
            }
        }
    }
    let mut cost = 0.0;
    for c in g.classes() {
        match (sel[c.index()], state[c.index()]) {
            (Some(n), 2) => cost += g.cost(n),
            (Some(_), _) => return Err(CheckError::NotNeeded(g.class_name(c).into())),
            _ => {}
        }
    }
    Ok(cost)
}
