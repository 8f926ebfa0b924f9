//! `rewrite`: equality saturation over the named rule tables of [`tg_egraph`], then
//! extraction of the cheapest equivalent graph (fused ops where the kernels accept them).

use crate::cost::Lent;
use crate::CompileError;
use tg_egraph::{BudgetReport, CostModel, EgraphError, GreedyDagExtractor, PlannerExtractor, RewriteOptions, RewriteReport, StateBudget};
use tg_ir::Graph;

/// Prefix of `CompileOptions::disabling` names that switch off a rule family or rule
/// (`rewrite:fusion`, `rewrite:fusion.rope`, `rewrite:fuse-softmax`).
pub(crate) const PREFIX: &str = "rewrite:";

/// Rewrites `graph`, extracting with the planner (its default limits) over `cost`, the kept
/// states under `cache_budget`; the result is verified.
pub(crate) fn run(
    graph: &Graph,
    opts: &RewriteOptions,
    cost: &dyn CostModel,
    cache_budget: Option<usize>,
) -> Result<(Graph, RewriteReport, Vec<tg_egraph::Id>, BudgetReport), CompileError> {
    let ex = PlannerExtractor { cost: Lent(cost), limits: PlannerExtractor::default().limits };
    let quick = GreedyDagExtractor::new(Lent(cost));
    let budgeted = StateBudget { inner: &ex, quick: Some(&quick), budgets: vec![cache_budget.map(|b| b as u64)], device_of: None, cost, report: Default::default() };
    let (g, r, classes) = run_with(graph, opts, &budgeted)?;
    Ok((g, r, classes, budgeted.report.into_inner()))
}

/// The kept-state part of the stage summary.
pub(crate) fn kept_summary(b: &BudgetReport, budget: Option<usize>, devices: &[String]) -> String {
    if b.kept.is_empty() && b.dropped.is_empty() {
        return String::new();
    }
    let mut per: Vec<(usize, u64)> = vec![(0, 0); devices.len().max(1)];
    for k in &b.kept {
        if let Some(e) = per.get_mut(k.device) {
            e.0 += 1;
            e.1 += k.bytes;
        }
    }
    let per: Vec<String> = per.iter().enumerate().map(|(d, (n, by))| format!("{n} on {} ({} KiB)", devices.get(d).map_or("?", |s| s.as_str()), by / 1024)).collect();
    let budget = match budget {
        Some(x) => format!(", cache budget {} KiB per device: {} dropped in {} rounds", x / 1024, b.dropped.len(), b.rounds),
        None => String::new(),
    };
    format!("; kept states {}{budget}", per.join(", "))
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
