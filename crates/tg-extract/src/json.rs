//! Reader for the serialized e-graph format of extraction-gym (`egraph-serialize` JSON).
//!
//! ```json
//! { "nodes": { "<node id>": { "op": "...", "children": ["<node id>", ...],
//!                             "eclass": "<class id>", "cost": 1.5 }, ... },
//!   "root_eclasses": ["<class id>", ...],
//!   "class_data": { "<class id>": { ... } } }
//! ```
//!
//! Semantics, as in egraph-serialize / extraction-gym:
//! - a class exists because nodes name it in `eclass`; a class's nodes keep file order;
//! - a child is a *node* id and stands for that node's class (any node of the class may
//!   be chosen for it);
//! - `children` may be omitted (a leaf) and `cost` may be omitted (it is then 1.0, the
//!   format's default); `op` and `eclass` are required;
//! - a node with `"subsumed": true` (newer egglog output) stays a valid child reference
//!   but is never chosen;
//! - `class_data` is optional; its contents are ignored, but each class it names must
//!   have a node;
//! - other top-level fields (such as `comment`) are ignored.
//!
//! Everything else is an error: unknown children or roots, duplicate node ids, negative
//! or non-numeric costs, no roots.

use crate::graph::{BuildError, ClassId, EGraph, EGraphBuilder};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// An error reading a serialized e-graph.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The text is not JSON of the expected shape (includes the line and column).
    #[error("malformed e-graph JSON: {0}")]
    Syntax(#[from] serde_json::Error),
    /// The top-level `nodes` object is missing.
    #[error("the e-graph has no `nodes` object")]
    MissingNodes,
    /// A node lacks a required field.
    #[error("node `{node}` has no `{field}` field")]
    MissingField {
        /// The node id.
        node: String,
        /// The missing field.
        field: &'static str,
    },
    /// A child names a node that does not exist.
    #[error("node `{node}` has child `{child}`, which is not a node")]
    UnknownChild {
        /// The parent node id.
        node: String,
        /// The unknown child id.
        child: String,
    },
    /// A cost is not a finite, non-negative number.
    #[error("node `{node}` has cost {cost}: costs must be finite non-negative numbers")]
    BadCost {
        /// The node id.
        node: String,
        /// The offending value, as written.
        cost: String,
    },
    /// `root_eclasses` is missing or empty.
    #[error("the e-graph has no root classes (`root_eclasses` missing or empty)")]
    NoRoots,
    /// A root names a class that has no node.
    #[error("root class `{0}` has no node")]
    UnknownRoot(String),
    /// A class has no node that may be chosen.
    #[error("class `{class}` has no {what}")]
    EmptyClass {
        /// The class id.
        class: String,
        /// "node", or "node that is not subsumed".
        what: &'static str,
    },
    /// The graph violates an invariant of [`EGraph`].
    #[error(transparent)]
    Build(#[from] BuildError),
}

#[derive(Deserialize)]
struct RawNode {
    op: Option<String>,
    #[serde(default)]
    children: Vec<String>,
    eclass: Option<String>,
    /// `None` when absent; a present `null` is kept (and rejected later).
    #[serde(default, deserialize_with = "present")]
    cost: Option<serde_json::Value>,
    #[serde(default)]
    subsumed: Option<bool>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

/// The `nodes` object in file order; a repeated key is an error.
struct NodeList(Vec<(String, RawNode)>);

impl<'de> Deserialize<'de> for NodeList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NodeList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object mapping node ids to nodes")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<NodeList, A::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(0));
                let mut seen = std::collections::HashSet::new();
                while let Some((k, v)) = m.next_entry::<String, RawNode>()? {
                    if !seen.insert(k.clone()) {
                        return Err(de::Error::custom(format!("duplicate node id `{k}`")));
                    }
                    out.push((k, v));
                }
                Ok(NodeList(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Keys of `class_data` (values ignored).
struct KeyList(Vec<String>);

impl<'de> Deserialize<'de> for KeyList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object mapping class ids to class data")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<KeyList, A::Error> {
                let mut out = Vec::new();
                while let Some((k, _)) = m.next_entry::<String, de::IgnoredAny>()? {
                    out.push(k);
                }
                Ok(KeyList(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct RawGraph {
    nodes: Option<NodeList>,
    #[serde(default)]
    root_eclasses: Option<Vec<String>>,
    #[serde(default)]
    class_data: Option<KeyList>,
}

/// Reads a serialized e-graph from a file.
pub fn read_json_file(path: impl AsRef<Path>) -> Result<EGraph, ReadError> {
    let path = path.as_ref();
    let text = std::fs::read(path).map_err(|source| ReadError::Io { path: path.to_path_buf(), source })?;
    read_json_slice(&text)
}

/// Reads a serialized e-graph from a reader.
pub fn read_json(mut r: impl Read) -> Result<EGraph, ReadError> {
    let mut text = Vec::new();
    r.read_to_end(&mut text).map_err(|source| ReadError::Io { path: PathBuf::from("<reader>"), source })?;
    read_json_slice(&text)
}

/// Reads a serialized e-graph from JSON text.
pub fn read_json_str(text: &str) -> Result<EGraph, ReadError> {
    read_json_slice(text.as_bytes())
}

fn read_json_slice(text: &[u8]) -> Result<EGraph, ReadError> {
    let raw: RawGraph = serde_json::from_slice(text)?;
    let nodes = raw.nodes.ok_or(ReadError::MissingNodes)?.0;

    // Classes in order of first appearance; the class of every node id.
    let mut b = EGraphBuilder::new();
    let mut class_of_name: HashMap<&str, ClassId> = HashMap::new();
    let mut node_class: HashMap<&str, ClassId> = HashMap::with_capacity(nodes.len());
    let mut class_names: Vec<&str> = Vec::new();
    let mut has_choosable: Vec<bool> = Vec::new();
    for (id, n) in &nodes {
        if n.op.is_none() {
            return Err(ReadError::MissingField { node: id.clone(), field: "op" });
        }
        let cls = n.eclass.as_deref().ok_or_else(|| ReadError::MissingField { node: id.clone(), field: "eclass" })?;
        let c = *class_of_name.entry(cls).or_insert_with(|| {
            has_choosable.push(false);
            class_names.push(cls);
            b.add_class(cls)
        });
        if n.subsumed != Some(true) {
            has_choosable[c.index()] = true;
        }
        node_class.insert(id.as_str(), c);
    }
    if let Some(KeyList(keys)) = &raw.class_data {
        for k in keys {
            if !class_of_name.contains_key(k.as_str()) {
                return Err(ReadError::EmptyClass { class: k.clone(), what: "node" });
            }
        }
    }
    for (c, ok) in has_choosable.iter().enumerate() {
        if !ok {
            return Err(ReadError::EmptyClass { class: class_names[c].to_string(), what: "node that is not subsumed" });
        }
    }

    let mut kids = Vec::new();
    for (id, n) in &nodes {
        if n.subsumed == Some(true) {
            continue;
        }
        let cost = match &n.cost {
            None => 1.0,
            Some(serde_json::Value::Number(x)) => match x.as_f64() {
                Some(v) if v.is_finite() && v >= 0.0 => v,
                _ => return Err(ReadError::BadCost { node: id.clone(), cost: x.to_string() }),
            },
            Some(other) => return Err(ReadError::BadCost { node: id.clone(), cost: other.to_string() }),
        };
        kids.clear();
        for ch in &n.children {
            let c = node_class.get(ch.as_str()).ok_or_else(|| ReadError::UnknownChild { node: id.clone(), child: ch.clone() })?;
            kids.push(*c);
        }
        b.add_node(node_class[id.as_str()], id.clone(), cost, kids.iter().copied())?;
    }

    let roots = raw.root_eclasses.unwrap_or_default();
    if roots.is_empty() {
        return Err(ReadError::NoRoots);
    }
    for r in &roots {
        let c = class_of_name.get(r.as_str()).ok_or_else(|| ReadError::UnknownRoot(r.clone()))?;
        b.add_root(*c)?;
    }
    Ok(b.build()?)
}
