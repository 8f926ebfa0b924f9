//! Bounded equality saturation and the end-to-end rewrite (load → saturate → extract).

use crate::convert::{load, Loaded};
use crate::extract::{graph_cost, Extractor, KernelCost};
use crate::rules::{all_rules, family_within, FAMILIES};
use crate::{ENode, EgraphError, TensorAnalysis};
use egg::{BackoffScheduler, Runner};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};
use tg_ir::Graph;

/// Options of the rewriting stage.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteOptions {
    /// Rule families (`fusion`, `fusion.rope`, ...) or single rule names switched off.
    pub disabled: BTreeSet<String>,
    /// Maximum saturation iterations.
    pub iter_limit: usize,
    /// Maximum e-nodes.
    pub node_limit: usize,
    /// Maximum saturation time.
    pub time_limit: Duration,
    /// Backoff scheduler: matches a rule may have in one iteration before it is banned
    /// (doubling with every ban).
    pub match_limit: usize,
    /// Backoff scheduler: iterations a rule is banned for (doubling with every ban).
    pub ban_length: usize,
    /// The devices the graph is compiled for: fusion rules offer a fused op only where one
    /// of their kernel registries implements it (empty: the CPU).
    pub targets: crate::Targets,
}

impl Default for RewriteOptions {
    fn default() -> Self {
        RewriteOptions {
            disabled: BTreeSet::new(),
            iter_limit: 30,
            node_limit: 200_000,
            time_limit: Duration::from_millis(1500),
            match_limit: 2_000,
            ban_length: 3,
            targets: crate::Targets::default(),
        }
    }
}

impl RewriteOptions {
    /// Switches off a rule family (and the families below it) or a single rule by name;
    /// errors for names that are neither.
    pub fn disable(&mut self, name: &str) -> Result<(), EgraphError> {
        let known = FAMILIES.contains(&name) || all_rules().iter().any(|r| r.info.name == name);
        if !known {
            let rules: Vec<&str> = all_rules().iter().map(|r| r.info.name).collect();
            return Err(EgraphError::Options(format!("unknown rule family or rule '{name}' (families: {}; rules: {})", FAMILIES.join(", "), rules.join(", "))));
        }
        self.disabled.insert(name.to_string());
        Ok(())
    }

    /// True when the rule is switched on.
    pub fn enabled(&self, rule: &crate::RuleInfo) -> bool {
        !self.disabled.iter().any(|d| d == rule.name || family_within(rule.family, d))
    }
}

/// Why saturation stopped.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum StopReason {
    /// No rule could add anything: the e-graph is saturated.
    Saturated,
    /// The iteration limit was reached.
    IterationLimit(usize),
    /// The e-node limit was exceeded (the count).
    NodeLimit(usize),
    /// The time limit was exceeded (seconds).
    TimeLimit(f64),
    /// Stopped for another reason.
    Other(String),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Saturated => f.write_str("saturated"),
            StopReason::IterationLimit(n) => write!(f, "iteration limit ({n})"),
            StopReason::NodeLimit(n) => write!(f, "node limit ({n} e-nodes)"),
            StopReason::TimeLimit(s) => write!(f, "time limit ({:.0} ms)", s * 1000.0),
            StopReason::Other(s) => write!(f, "stopped: {s}"),
        }
    }
}

/// What saturation did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SaturationReport {
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// Iterations run.
    pub iterations: usize,
    /// E-nodes at the end.
    pub enodes: usize,
    /// E-classes at the end.
    pub eclasses: usize,
    /// E-nodes after loading, before any rule.
    pub enodes_loaded: usize,
    /// Applications per enabled rule (applications that changed the e-graph), by name.
    pub applications: BTreeMap<String, usize>,
    /// Rules run.
    pub rules_enabled: usize,
    /// Rules known.
    pub rules_total: usize,
    /// Wall time (ms).
    pub millis: f64,
    /// The limits it ran under: iterations, e-nodes, milliseconds.
    pub limits: (usize, usize, u64),
}

/// The report of the whole rewrite: saturation, extraction, what changed.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RewriteReport {
    /// Saturation.
    pub saturation: SaturationReport,
    /// Families or rules switched off.
    pub disabled: Vec<String>,
    /// The extractor used.
    pub extractor: String,
    /// Extraction time (ms).
    pub extraction_millis: f64,
    /// The extractor's proven bound, gap and search effort (searching extractors only).
    pub extraction_proof: Option<crate::extract::Proof>,
    /// Live nodes of the input graph.
    pub nodes_in: usize,
    /// Nodes of the extracted graph.
    pub nodes_out: usize,
    /// Estimated cost of the input graph (ns, [`KernelCost`]).
    pub cost_in: f64,
    /// Estimated cost of the extracted graph.
    pub cost_out: f64,
    /// Cost of the extraction as the extractor measured it (its own objective, ns).
    pub cost_out_search: f64,
    /// Fused ops in the extracted graph, by op name.
    pub fused: BTreeMap<String, usize>,
}

impl fmt::Display for RewriteReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.saturation;
        writeln!(
            f,
            "saturation: {} after {} iterations in {:.1} ms; {} -> {} e-nodes, {} e-classes; {}/{} rules (limits: {} iterations, {} e-nodes, {} ms)",
            s.stop_reason, s.iterations, s.millis, s.enodes_loaded, s.enodes, s.eclasses, s.rules_enabled, s.rules_total, s.limits.0, s.limits.1, s.limits.2
        )?;
        if !self.disabled.is_empty() {
            writeln!(f, "  switched off: {}", self.disabled.join(", "))?;
        }
        let applied: Vec<String> = s.applications.iter().filter(|(_, &n)| n > 0).map(|(k, n)| format!("{k}:{n}")).collect();
        writeln!(f, "  applied: {}", if applied.is_empty() { "nothing".to_string() } else { applied.join(" ") })?;
        let fused: Vec<String> = self.fused.iter().map(|(k, n)| format!("{k}:{n}")).collect();
        write!(
            f,
            "  extraction ({}, {:.1} ms): {} -> {} nodes, est. cost {:.3} -> {:.3} ms; fused: {}",
            self.extractor,
            self.extraction_millis,
            self.nodes_in,
            self.nodes_out,
            self.cost_in / 1e6,
            self.cost_out / 1e6,
            if fused.is_empty() { "none".to_string() } else { fused.join(" ") }
        )?;
        if let Some(p) = &self.extraction_proof {
            let gap = if p.lower_bound > 0.0 { (self.cost_out_search - p.lower_bound) / p.lower_bound * 100.0 } else { 0.0 };
            write!(
                f,
                "\n  search: cost {:.3} ms, bound {:.3} ms, gap {:.2}%{}; {} nodes; first plan {:.1} ms, final {:.1} ms",
                self.cost_out_search / 1e6,
                p.lower_bound / 1e6,
                gap,
                if p.optimal { " (proven optimal)" } else { "" },
                p.nodes,
                p.first_plan_ms,
                p.millis
            )?;
        }
        Ok(())
    }
}

/// Runs the enabled rules on a loaded graph until saturation or a limit.
pub fn saturate(loaded: &mut Loaded, opts: &RewriteOptions) -> Result<SaturationReport, EgraphError> {
    let rules = all_rules();
    let total = rules.len();
    let enabled: Vec<_> = rules.into_iter().filter(|r| opts.enabled(&r.info)).collect();
    let enodes_loaded = loaded.egraph.total_number_of_nodes();
    let t = Instant::now();
    let mut egraph = std::mem::replace(&mut loaded.egraph, crate::TEGraph::new(TensorAnalysis::default()));
    egraph.analysis.targets = opts.targets.clone();
    let runner: Runner<ENode, TensorAnalysis> = Runner::new(TensorAnalysis::default())
        .with_egraph(egraph)
        .with_iter_limit(opts.iter_limit)
        .with_node_limit(opts.node_limit)
        .with_time_limit(opts.time_limit)
        .with_scheduler(BackoffScheduler::default().with_initial_match_limit(opts.match_limit).with_ban_length(opts.ban_length))
        .with_hook(|r| match r.egraph.analysis.errors.first() {
            Some(e) => Err(format!("internal error: {e}")),
            None => Ok(()),
        })
        .run(enabled.iter().map(|r| &r.rewrite));
    let millis = t.elapsed().as_secs_f64() * 1000.0;
    let mut applications: BTreeMap<String, usize> = enabled.iter().map(|r| (r.info.name.to_string(), 0)).collect();
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            *applications.entry(name.to_string()).or_default() += n;
        }
    }
    let stop_reason = match &runner.stop_reason {
        Some(egg::StopReason::Saturated) => StopReason::Saturated,
        Some(egg::StopReason::IterationLimit(n)) => StopReason::IterationLimit(*n),
        Some(egg::StopReason::NodeLimit(n)) => StopReason::NodeLimit(*n),
        Some(egg::StopReason::TimeLimit(s)) => StopReason::TimeLimit(*s),
        Some(egg::StopReason::Other(s)) => StopReason::Other(s.clone()),
        None => StopReason::Other("no stop reason".into()),
    };
    loaded.egraph = runner.egraph;
    if let Some(e) = loaded.egraph.analysis.errors.first() {
        return Err(EgraphError::Internal(format!("unsound rewrite detected: {e}")));
    }
    loaded.egraph.rebuild();
    loaded.canonicalize_positions();
    Ok(SaturationReport {
        stop_reason,
        iterations: runner.iterations.len(),
        enodes: loaded.egraph.total_number_of_nodes(),
        eclasses: loaded.egraph.number_of_classes(),
        enodes_loaded,
        applications,
        rules_enabled: enabled.len(),
        rules_total: total,
        millis,
        limits: (opts.iter_limit, opts.node_limit, opts.time_limit.as_millis() as u64),
    })
}

/// A rewritten graph and its report.
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// The extracted graph (verified).
    pub graph: Graph,
    /// What happened.
    pub report: RewriteReport,
    /// The canonical e-class of every node of `graph` (what an extractor's per-class
    /// decisions, such as a [`crate::Placement`], refer to).
    pub classes: Vec<egg::Id>,
}

/// Loads `graph`, saturates with the enabled rules, and extracts the cheapest graph with
/// `extractor`. The result computes the same outputs (by name) and is verified.
pub fn rewrite_with(graph: &Graph, opts: &RewriteOptions, extractor: &dyn Extractor) -> Result<Rewritten, EgraphError> {
    let mut loaded = load(graph)?;
    let saturation = saturate(&mut loaded, opts)?;
    let t = Instant::now();
    let roots = loaded.roots();
    let ex = extractor.extract(&loaded.egraph, &roots)?;
    let (out, classes) = crate::convert::build_graph_classes(&loaded.egraph, &loaded.outputs, &ex.choice, &loaded.positions)?;
    let extraction_millis = t.elapsed().as_secs_f64() * 1000.0;
    let model = KernelCost::default();
    let mut fused = BTreeMap::new();
    for n in out.nodes.iter().filter(|n| n.op.is_fused()) {
        *fused.entry(n.op.name()).or_insert(0) += 1;
    }
    let live = graph.live_mask().iter().filter(|&&l| l).count();
    let report = RewriteReport {
        saturation,
        disabled: opts.disabled.iter().cloned().collect(),
        extractor: extractor.name(),
        extraction_millis,
        extraction_proof: ex.proof,
        nodes_in: live,
        nodes_out: out.nodes.len(),
        // What the graph computes as given: each alternatives node its first way.
        cost_in: if graph.has_alternatives() { graph_cost(&graph.resolve_alternatives(), &model) } else { graph_cost(graph, &model) },
        cost_out: graph_cost(&out, &model),
        cost_out_search: ex.cost,
        fused,
    };
    Ok(Rewritten { graph: out, report, classes })
}

/// [`rewrite_with`] the default extractor: the planner's search ([`PlannerExtractor`] over
/// [`KernelCost`]).
pub fn rewrite(graph: &Graph, opts: &RewriteOptions) -> Result<Rewritten, EgraphError> {
    rewrite_with(graph, opts, &crate::PlannerExtractor::default())
}
