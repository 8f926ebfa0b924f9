//! `tg extract`: e-graph extraction with DAG cost on an extraction-gym e-graph (the
//! egraph-serialize JSON format), with `tg_extract`'s anytime solver.
//!
//! Prints the DAG cost of the extraction found, the proven lower bound, whether the
//! extraction is proven optimal, and the time. `--json` prints one object:
//! `{"dag_cost", "lower_bound", "optimal", "ms", "nodes_explored", "classes", "nodes",
//! "choices": {eclass: node_id}}`. Every extraction is re-verified by the independent
//! checker (`tg_extract::check`) before it is printed.

use clap::Args;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `tg extract`.
#[derive(Args)]
pub(crate) struct ExtractArgs {
    /// Serialized e-graph (extraction-gym / egraph-serialize JSON).
    #[arg(long)]
    input: PathBuf,
    /// Time limit in seconds (reading the file excluded); the best extraction found by
    /// then is printed, with optimal = false unless it was proven.
    #[arg(long = "time-limit", default_value_t = 10.0)]
    time_limit: f64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `tg extract`.
pub(crate) fn run(a: ExtractArgs) -> Result<(), String> {
    if !a.time_limit.is_finite() || a.time_limit < 0.0 || a.time_limit > 1e9 {
        return Err(format!("--time-limit must be a non-negative number of seconds, got {}", a.time_limit));
    }
    let t0 = Instant::now();
    let g = tg_extract::read_json_file(&a.input).map_err(|e| e.to_string())?;
    let read_ms = t0.elapsed().as_secs_f64() * 1e3;
    let opts = tg_extract::Options { time_limit: Duration::from_secs_f64(a.time_limit), ..Default::default() };
    let x = tg_extract::extract(&g, &opts).map_err(|e| e.to_string())?;
    let checked = tg_extract::check(&g, &x.choices).map_err(|e| format!("internal error, invalid extraction: {e}"))?;
    if checked != x.dag_cost {
        return Err(format!("internal error: reported DAG cost {} but the checker finds {checked}", x.dag_cost));
    }
    let ms = x.elapsed.as_secs_f64() * 1e3;
    if a.json {
        let choices: serde_json::Map<String, serde_json::Value> = x.choices.iter().map(|&(c, n)| (g.class_name(c).to_string(), serde_json::Value::from(g.node_name(n)))).collect();
        let obj = serde_json::json!({
            "dag_cost": x.dag_cost,
            "lower_bound": x.lower_bound,
            "optimal": x.optimal,
            "ms": ms,
            "nodes_explored": x.nodes_explored,
            "classes": g.num_classes(),
            "nodes": g.num_nodes(),
            "choices": choices,
        });
        println!("{}", serde_json::to_string(&obj).map_err(|e| e.to_string())?);
    } else {
        let gap = if x.dag_cost > 0.0 { 100.0 * (x.dag_cost - x.lower_bound) / x.dag_cost } else { 0.0 };
        println!("e-graph:     {} ({} classes, {} nodes, read in {read_ms:.1} ms)", a.input.display(), g.num_classes(), g.num_nodes());
        println!("dag cost:    {}", x.dag_cost);
        println!("lower bound: {} (gap {gap:.3}%)", x.lower_bound);
        println!("optimal:     {}", if x.optimal { "proven" } else { "not proven" });
        println!("time:        {ms:.1} ms ({} search nodes, {} classes extracted)", x.nodes_explored, x.choices.len());
    }
    Ok(())
}
