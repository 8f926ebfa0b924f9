//! The in-memory e-graph the extractor works on, independent of any file format.
//!
//! Classes and nodes are dense indices ([`ClassId`], [`NodeId`]). A node belongs to one
//! class, has a cost (finite, `>= 0`) and a set of child classes. Children are kept as a
//! sorted set without repetitions: for DAG cost only *which* classes a node needs matters,
//! not their order or multiplicity. Names are kept for reporting only.

use std::collections::HashSet;
use std::fmt;
use thiserror::Error;

/// Index of an e-class in an [`EGraph`] (or of a class declared in an [`EGraphBuilder`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassId(pub u32);

/// Index of an e-node in an [`EGraph`] (or of a node added to an [`EGraphBuilder`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl ClassId {
    /// The index as `usize`.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    /// The index as `usize`.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ClassId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "class #{}", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node #{}", self.0)
    }
}

/// An error found while building an [`EGraph`].
#[derive(Debug, Error, Clone, PartialEq)]
pub enum BuildError {
    /// A node or root refers to a class that was never declared.
    #[error("{what} refers to an undeclared class index {index}")]
    UnknownClass {
        /// What refers to it (a node name, or "root").
        what: String,
        /// The class index.
        index: u32,
    },
    /// A node's cost is negative, NaN or infinite.
    #[error("node `{node}` has cost {cost}: costs must be finite and non-negative")]
    BadCost {
        /// The node's name.
        node: String,
        /// The offending cost.
        cost: f64,
    },
    /// A declared class has no node.
    #[error("class `{class}` has no node")]
    EmptyClass {
        /// The class's name.
        class: String,
    },
    /// No root class was given.
    #[error("the e-graph has no root class")]
    NoRoots,
    /// Two nodes share a name.
    #[error("two nodes are named `{0}`")]
    DuplicateNode(String),
    /// Two classes share a name.
    #[error("two classes are named `{0}`")]
    DuplicateClass(String),
    /// More classes or nodes than `u32` indices can address.
    #[error("too many classes or nodes (at most {} of each)", u32::MAX)]
    TooLarge,
}

/// Builds an [`EGraph`]: declare classes, add nodes with their child classes, mark roots.
///
/// ```
/// use tg_extract::EGraphBuilder;
/// let mut b = EGraphBuilder::new();
/// let x = b.add_class("x");
/// let y = b.add_class("y");
/// b.add_node(x, "x0", 1.0, []).unwrap();
/// b.add_node(y, "y0", 2.0, [x, x]).unwrap();
/// b.add_root(y).unwrap();
/// let g = b.build().unwrap();
/// assert_eq!(g.num_nodes(), 2);
/// assert_eq!(g.children(tg_extract::NodeId(1)), &[x]);
/// ```
#[derive(Debug, Default, Clone)]
pub struct EGraphBuilder {
    class_names: Vec<String>,
    node_class: Vec<ClassId>,
    node_cost: Vec<f64>,
    node_names: Vec<String>,
    child_first: Vec<u32>,
    children: Vec<ClassId>,
    roots: Vec<ClassId>,
}

impl EGraphBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        EGraphBuilder { child_first: vec![0], ..Default::default() }
    }

    /// Declares a class and returns its id (ids are given in declaration order).
    pub fn add_class(&mut self, name: impl Into<String>) -> ClassId {
        self.class_names.push(name.into());
        ClassId((self.class_names.len() - 1) as u32)
    }

    /// Number of classes declared so far.
    pub fn num_classes(&self) -> usize {
        self.class_names.len()
    }

    /// Adds a node of `class` with a cost and child classes (repetitions and order are
    /// dropped) and returns its id (ids are given in insertion order).
    pub fn add_node(&mut self, class: ClassId, name: impl Into<String>, cost: f64, children: impl IntoIterator<Item = ClassId>) -> Result<NodeId, BuildError> {
        let name = name.into();
        let n = self.class_names.len();
        if class.index() >= n {
            return Err(BuildError::UnknownClass { what: format!("node `{name}`"), index: class.0 });
        }
        if !cost.is_finite() || cost < 0.0 {
            return Err(BuildError::BadCost { node: name, cost });
        }
        let start = self.children.len();
        for c in children {
            if c.index() >= n {
                self.children.truncate(start);
                return Err(BuildError::UnknownClass { what: format!("a child of node `{name}`"), index: c.0 });
            }
            self.children.push(c);
        }
        self.children[start..].sort_unstable();
        let mut w = start;
        for r in start..self.children.len() {
            if w == start || self.children[w - 1] != self.children[r] {
                self.children[w] = self.children[r];
                w += 1;
            }
        }
        self.children.truncate(w);
        if self.node_class.len() >= u32::MAX as usize || self.children.len() > u32::MAX as usize {
            self.children.truncate(start);
            return Err(BuildError::TooLarge);
        }
        self.child_first.push(self.children.len() as u32);
        self.node_class.push(class);
        self.node_cost.push(cost);
        self.node_names.push(name);
        Ok(NodeId((self.node_class.len() - 1) as u32))
    }

    /// Marks a class as a root (an output that must be extracted). Repeats are ignored.
    pub fn add_root(&mut self, class: ClassId) -> Result<(), BuildError> {
        if class.index() >= self.class_names.len() {
            return Err(BuildError::UnknownClass { what: "root".into(), index: class.0 });
        }
        if !self.roots.contains(&class) {
            self.roots.push(class);
        }
        Ok(())
    }

    /// Checks the graph (every class has a node, at least one root, names unique) and
    /// builds it.
    pub fn build(self) -> Result<EGraph, BuildError> {
        if self.class_names.len() > u32::MAX as usize {
            return Err(BuildError::TooLarge);
        }
        if self.roots.is_empty() {
            return Err(BuildError::NoRoots);
        }
        let mut seen = HashSet::with_capacity(self.class_names.len());
        for name in &self.class_names {
            if !seen.insert(name.as_str()) {
                return Err(BuildError::DuplicateClass(name.clone()));
            }
        }
        let mut seen = HashSet::with_capacity(self.node_names.len());
        for name in &self.node_names {
            if !seen.insert(name.as_str()) {
                return Err(BuildError::DuplicateNode(name.clone()));
            }
        }
        let nc = self.class_names.len();
        let mut class_first = vec![0u32; nc + 1];
        for c in &self.node_class {
            class_first[c.index() + 1] += 1;
        }
        for c in 0..nc {
            if class_first[c + 1] == 0 {
                return Err(BuildError::EmptyClass { class: self.class_names[c].clone() });
            }
            class_first[c + 1] += class_first[c];
        }
        let mut fill = class_first.clone();
        let mut class_nodes = vec![NodeId(0); self.node_class.len()];
        for (n, c) in self.node_class.iter().enumerate() {
            class_nodes[fill[c.index()] as usize] = NodeId(n as u32);
            fill[c.index()] += 1;
        }
        Ok(EGraph {
            class_names: self.class_names,
            class_first,
            class_nodes,
            node_class: self.node_class,
            node_cost: self.node_cost,
            node_names: self.node_names,
            child_first: self.child_first,
            children: self.children,
            roots: self.roots,
        })
    }
}

/// An e-graph ready for extraction: classes, nodes with costs and child classes, roots.
///
/// Built by [`EGraphBuilder`] or read from the extraction-gym format
/// ([`crate::read_json`]). Invariants: every class has at least one node, costs are finite
/// and non-negative, there is at least one root, names are unique.
#[derive(Debug, Clone)]
pub struct EGraph {
    class_names: Vec<String>,
    class_first: Vec<u32>,
    class_nodes: Vec<NodeId>,
    node_class: Vec<ClassId>,
    node_cost: Vec<f64>,
    node_names: Vec<String>,
    child_first: Vec<u32>,
    children: Vec<ClassId>,
    roots: Vec<ClassId>,
}

impl EGraph {
    /// Number of classes.
    pub fn num_classes(&self) -> usize {
        self.class_names.len()
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.node_class.len()
    }

    /// The nodes of a class, in insertion order.
    pub fn class_nodes(&self, c: ClassId) -> &[NodeId] {
        let (a, b) = (self.class_first[c.index()] as usize, self.class_first[c.index() + 1] as usize);
        &self.class_nodes[a..b]
    }

    /// The class of a node.
    pub fn node_class(&self, n: NodeId) -> ClassId {
        self.node_class[n.index()]
    }

    /// The cost of a node.
    pub fn cost(&self, n: NodeId) -> f64 {
        self.node_cost[n.index()]
    }

    /// The child classes of a node (sorted, no repetitions).
    pub fn children(&self, n: NodeId) -> &[ClassId] {
        let (a, b) = (self.child_first[n.index()] as usize, self.child_first[n.index() + 1] as usize);
        &self.children[a..b]
    }

    /// The root classes (no repetitions).
    pub fn roots(&self) -> &[ClassId] {
        &self.roots
    }

    /// A class's name.
    pub fn class_name(&self, c: ClassId) -> &str {
        &self.class_names[c.index()]
    }

    /// A node's name.
    pub fn node_name(&self, n: NodeId) -> &str {
        &self.node_names[n.index()]
    }

    /// All class ids.
    pub fn classes(&self) -> impl ExactSizeIterator<Item = ClassId> {
        (0..self.class_names.len() as u32).map(ClassId)
    }

    /// All node ids.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = NodeId> {
        (0..self.node_class.len() as u32).map(NodeId)
    }
}
