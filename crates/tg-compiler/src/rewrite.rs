//! `rewrite`: equality saturation over the named rule tables of [`tg_egraph`], then
//! extraction of the cheapest equivalent graph (fused ops where the kernels accept them).

use crate::cost::Lent;
use crate::CompileError;
use tg_egraph::{CostModel, EgraphError, PlannerExtractor, RewriteOptions, RewriteReport};
use tg_ir::Graph;

/// Prefix of `CompileOptions::disabling` names that switch off a rule family or rule
/// (`rewrite:fusion`, `rewrite:fusion.rope`, `rewrite:fuse-softmax`).
pub(crate) const PREFIX: &str = "rewrite:";

/// Rewrites `graph`, extracting with the planner (its default limits) over `cost`; the
/// result is verified.
pub(crate) fn run(graph: &Graph, opts: &RewriteOptions, cost: &dyn CostModel) -> Result<(Graph, RewriteReport, Vec<tg_egraph::Id>), CompileError> {
    let ex = PlannerExtractor { cost: Lent(cost), limits: PlannerExtractor::default().limits };
    run_with(graph, opts, &ex)
}

/// Rewrites `graph`, extracting with `ex`; the result is verified. Also returns the e-class
/// of every node of the result.
pub(crate) fn run_with(graph: &Graph, opts: &RewriteOptions, ex: &dyn tg_egraph::Extractor) -> Result<(Graph, RewriteReport, Vec<tg_egraph::Id>), CompileError> {
    let out = tg_egraph::rewrite_with(graph, opts, ex).map_err(|e| match e {
        EgraphError::Ir(e) => CompileError::Ir(e),
        EgraphError::Options(s) => CompileError::Options(s),
        e @ EgraphError::Internal(_) => CompileError::Invalid(format!("rewrite: {e}")),
    })?;
    tg_ir::verify(&out.graph)?;
    Ok((out.graph, out.report, out.classes))
}

/// One-line summary for the stage table.
pub(crate) fn summary(r: &RewriteReport) -> String {
    let s = &r.saturation;
    let applied: Vec<String> = s.applications.iter().filter(|(_, &n)| n > 0).map(|(k, n)| format!("{k}:{n}")).collect();
    let fused: Vec<String> = r.fused.iter().map(|(k, n)| format!("{k}:{n}")).collect();
    format!(
        "{} after {} iterations, {} e-nodes, {} e-classes; {} -> {} nodes; fused [{}]; applied [{}]{}{}",
        s.stop_reason,
        s.iterations,
        s.enodes,
        s.eclasses,
        r.nodes_in,
        r.nodes_out,
        fused.join(" "),
        applied.join(" "),
        if r.disabled.is_empty() { String::new() } else { format!("; off: {}", r.disabled.join(", ")) },
        match &r.extraction_proof {
            Some(p) => {
                let gap = if p.lower_bound > 0.0 { (r.cost_out_search - p.lower_bound) / p.lower_bound * 100.0 } else { 0.0 };
                format!(
                    "; planner: est. {:.3} ms, bound {:.3} ms, gap {:.2}%{}, {:.1} ms",
                    r.cost_out_search / 1e6,
                    p.lower_bound / 1e6,
                    gap,
                    if p.optimal { " (proven optimal)" } else { "" },
                    p.millis
                )
            }
            None => String::new(),
        }
    )
}
