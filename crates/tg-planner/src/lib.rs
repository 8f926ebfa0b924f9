//! The planner of Tensor Graphs: a branch-and-bound search that decides, for every value of
//! an e-graph, which node and which kernel compute it, on which device and in what order,
//! at which arena offset its buffer lives, and whether it is kept for the next run.
//!
//! The problem is defined in `docs/planner.md`; [`Problem`] is its input, [`solve`] the
//! anytime search (a first plan in milliseconds, then depth-first branch and bound with
//! proven lower bounds, stopping when the gap closes or a budget runs out), and
//! [`validate()`] an independent checker that every plan from every test passes.
#![warn(missing_docs)]

mod config;
pub mod memory;
pub mod problem;
pub mod result;
mod search;
mod seed;
mod single;
pub mod validate;

pub use problem::{Class, Device, ImplOption, Link, Node, Problem, Source};
pub use result::{Plan, PlanResult};
pub use search::{solve, Limits, Outcome, Solution, Status};
pub use validate::validate;

/// Errors of the planner's entry points.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The problem is not valid JSON of the expected shape.
    #[error("planning problem: {0}")]
    Json(String),
    /// The problem breaks a rule of the definition.
    #[error("planning problem: {0}")]
    Invalid(String),
}

/// Parse a problem, solve it under `limits` and return the result as JSON.
pub fn solve_json(text: &str, limits: &Limits) -> Result<String, PlanError> {
    let p = Problem::from_json(text)?;
    let out = solve(&p, limits);
    serde_json::to_string(&out.to_result()).map_err(|e| PlanError::Json(e.to_string()))
}
