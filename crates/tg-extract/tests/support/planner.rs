//! Reads a planning problem (`docs/planner.md` JSON) on one device as the extraction
//! instance tg-planner's one-device reduction builds (`extraction_graph` in
//! `crates/tg-planner/src/single.rs`): a class per planner class, a node per planner node
//! at its cheapest option's time (sources, without options, cost 0) with the same child
//! classes, the problem's roots. Names are the planner indices.

use serde_json::Value;
use std::path::{Path, PathBuf};
use tg_extract::{EGraph, EGraphBuilder};

/// Where the Gemma planning problems are: `TG_GEMMA_PROBLEMS`, else the repository's
/// `tests/fixtures/planning`.
pub fn gemma_dir() -> PathBuf {
    std::env::var_os("TG_GEMMA_PROBLEMS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/planning"))
}

/// The extraction graph of the planning problem at `path`.
pub fn read_planner_problem(path: &Path) -> Result<EGraph, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let field = |v: &Value, k: &str| v.get(k).cloned().ok_or_else(|| format!("{}: no `{k}`", path.display()));
    let index = |v: &Value| v.as_u64().map(|x| x as usize).ok_or_else(|| format!("{}: not an index: {v}", path.display()));
    let classes = field(&v, "classes")?;
    let nc = classes.as_array().map_or(0, Vec::len);
    let mut e = EGraphBuilder::new();
    let ids: Vec<_> = (0..nc).map(|c| e.add_class(c.to_string())).collect();
    let nodes = field(&v, "nodes")?;
    for (i, n) in nodes.as_array().into_iter().flatten().enumerate() {
        let class = index(&field(n, "class")?)?;
        let kids = field(n, "children")?.as_array().cloned().unwrap_or_default();
        let kids = kids.iter().map(&index).collect::<Result<Vec<_>, _>>()?;
        let time = n.get("options").and_then(Value::as_array).into_iter().flatten().filter_map(|o| o.get("time").and_then(Value::as_u64)).min().unwrap_or(0);
        let cls = |c: usize| ids.get(c).copied().ok_or_else(|| format!("{}: class {c} out of range", path.display()));
        let kids = kids.into_iter().map(cls).collect::<Result<Vec<_>, _>>()?;
        e.add_node(cls(class)?, i.to_string(), time as f64, kids).map_err(|e| e.to_string())?;
    }
    for r in field(&v, "roots")?.as_array().into_iter().flatten() {
        let r = index(r)?;
        e.add_root(*ids.get(r).ok_or("root out of range")?).map_err(|e| e.to_string())?;
    }
    e.build().map_err(|e| e.to_string())
}
