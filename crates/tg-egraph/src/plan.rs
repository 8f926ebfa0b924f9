//! Extraction by the planner: the e-graph becomes a `tg_planner::Problem` (one CPU device,
//! every node a kernel option timed by the cost model, inputs and weights as sources) and the
//! planner's search picks the nodes, with a proven lower bound on the cost.

use std::collections::HashMap;

use egg::Id;
use tg_ir::{DType, Op};

use crate::extract::{CostModel, Extraction, Extractor, KernelCost, Proof};
use crate::{EgraphError, TEGraph};

/// The planner's search behind the [`Extractor`] interface.
#[derive(Debug, Clone)]
pub struct PlannerExtractor<C> {
    /// Kernel times (ns, rounded up to whole ns, at least 1).
    pub cost: C,
    /// Search budgets.
    pub limits: tg_planner::Limits,
}

impl Default for PlannerExtractor<KernelCost> {
    fn default() -> Self {
        // Extraction only needs the makespan: always take the one-device reduction. 250 ms:
        // graphs proven at all are proven in ~10 ms; on one-row decode graphs (unit dims make
        // many equal-cost view alternatives) a 2 s search found no better plan than 250 ms.
        PlannerExtractor {
            cost: KernelCost::default(),
            limits: tg_planner::Limits { time: std::time::Duration::from_millis(250), single_device_min_nodes: 0, ..Default::default() },
        }
    }
}

fn class_bytes(shape: &[usize], dtype: DType) -> u64 {
    (crate::extract::bytes(shape, dtype) as u64).max(1)
}

/// The planning problem of an e-graph with roots `roots`: class ids in `ids` order.
pub fn planning_problem(egraph: &TEGraph, roots: &[Id], model: &dyn CostModel) -> (tg_planner::Problem, Vec<Id>) {
    let ids: Vec<Id> = egraph.classes().map(|c| c.id).collect();
    let index: HashMap<Id, usize> = ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let mut classes = Vec::with_capacity(ids.len());
    let mut nodes = Vec::new();
    for &c in &ids {
        let class = &egraph[c];
        classes.push(tg_planner::Class { bytes: class_bytes(&class.data.shape, class.data.dtype), cacheable: false });
        for n in &class.nodes {
            let source = match n.op {
                Op::Input { .. } => Some(tg_planner::Source::Input),
                Op::Weight { .. } => Some(tg_planner::Source::Weight),
                _ => None,
            };
            let children: Vec<usize> = n.children.iter().map(|&ch| index[&egraph.find(ch)]).collect();
            let options = if source.is_some() {
                Vec::new()
            } else {
                let ins = crate::operands(egraph, n);
                let t = model.node_cost(&n.op, (&class.data.shape, class.data.dtype), &ins);
                vec![tg_planner::ImplOption { kernel: n.op.name().to_string(), device: 0, time: (t.ceil() as u64).clamp(1, tg_planner::problem::MAX_TIME), alias: false }]
            };
            nodes.push(tg_planner::Node { class: index[&c], children: if source.is_some() { Vec::new() } else { children }, source, options });
        }
    }
    let devices = vec![tg_planner::Device { name: "cpu".into(), capacity: u64::MAX / 8, cache_budget: 0 }];
    let roots = roots.iter().map(|r| index[&egraph.find(*r)]).collect();
    (tg_planner::Problem { devices, home: 0, links: Vec::new(), classes, nodes, roots }, ids)
}

impl<C: CostModel> Extractor for PlannerExtractor<C> {
    fn name(&self) -> String {
        format!("planner over {}", self.cost.name())
    }

    fn extract(&self, egraph: &TEGraph, roots: &[Id]) -> Result<Extraction, EgraphError> {
        let (problem, ids) = planning_problem(egraph, roots, &self.cost);
        // Diagnostics: `TG_DUMP_PLANNING=DIR` writes every extraction's planning problem there
        // (`docs/planner.md` JSON; `cargo run -p tg-extract --example bench -- FILE` times it).
        if let Some(dir) = std::env::var_os("TG_DUMP_PLANNING") {
            let path = std::path::Path::new(&dir).join(format!("problem-{}-{}.json", problem.classes.len(), problem.nodes.len()));
            if let Ok(text) = serde_json::to_string(&problem) {
                let _ = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, text));
            }
        }
        // Node index -> e-node.
        let mut enodes = Vec::with_capacity(problem.nodes.len());
        for &c in &ids {
            enodes.extend(egraph[c].nodes.iter().cloned());
        }
        let out = tg_planner::solve(&problem, &self.limits);
        let Some(best) = &out.best else {
            return Err(EgraphError::Internal(format!("the planner found no plan for the e-graph ({:?})", out.status)));
        };
        let plan = best.to_plan();
        tg_planner::validate(&problem, &plan).map_err(|e| EgraphError::Internal(e.to_string()))?;
        let choice = plan.choice.iter().map(|(&c, &n)| (ids[c], enodes[n].clone())).collect();
        let makespan = best.makespan() as f64;
        Ok(Extraction {
            choice,
            cost: makespan,
            proof: Some(Proof {
                lower_bound: out.lower_bound as f64,
                optimal: out.lower_bound == best.makespan(),
                nodes: out.nodes,
                first_plan_ms: out.first_plan.map_or(0.0, |d| d.as_secs_f64() * 1e3),
                millis: out.elapsed.as_secs_f64() * 1e3,
            }),
        })
    }
}
