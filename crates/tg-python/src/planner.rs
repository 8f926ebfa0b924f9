//! The planner on JSON problems (`docs/planner.md`): what the oracle suite compares with its
//! brute-force and CP-SAT models.

use pyo3::prelude::*;

use crate::errors::{err, guard, Kind};

/// Solve a planning problem given as JSON (`docs/planner.md`) and return the result JSON:
/// status, makespan, peak bytes, lower bound, nodes explored, times and the plan. Every
/// plan returned has passed `tg_planner::validate`. The GIL is released while it searches.
#[pyfunction]
#[pyo3(signature = (problem, time_limit_s = 10.0, node_limit = None))]
pub(crate) fn plan_problem(py: Python<'_>, problem: &str, time_limit_s: f64, node_limit: Option<u64>) -> PyResult<String> {
    if !(time_limit_s.is_finite() && time_limit_s >= 0.0) {
        return Err(err(Kind::Options, format!("time_limit_s must be a non-negative number, got {time_limit_s}")).into());
    }
    let limits = tg_planner::Limits { time: std::time::Duration::from_secs_f64(time_limit_s), nodes: node_limit.unwrap_or(u64::MAX), ..Default::default() };
    let text = problem.to_owned();
    let r = py.detach(move || {
        guard(|| {
            let p = tg_planner::Problem::from_json(&text).map_err(|e| err(Kind::Graph, e.to_string()))?;
            let out = tg_planner::solve(&p, &limits);
            let result = out.to_result();
            if let Some(plan) = &result.plan {
                tg_planner::validate(&p, plan).map_err(|e| err(Kind::Execution, e.to_string()))?;
            }
            serde_json::to_string(&result).map_err(|e| err(Kind::Execution, e.to_string()))
        })
    })?;
    Ok(r)
}
