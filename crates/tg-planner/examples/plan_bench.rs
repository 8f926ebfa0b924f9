//! The planner's search on planning problems (`docs/planner.md` JSON), such as the
//! two-device Gemma problems of `tests/fixtures/planning/`.
//!
//! ```text
//! cargo run --release -p tg-planner --example plan_bench -- [--time SECS] [--repeat N] FILE...
//! ```
//!
//! For each file and repeat: the status, the time to the first plan and in all, the
//! makespan, the proven lower bound and the gap, the search nodes, and the kernels per
//! device, copies and weight uploads of the plan. Every plan is checked by
//! `tg_planner::validate` (a plan it rejects is an error).

use std::time::Duration;

use tg_planner::result::{BufferKind, PlanStep};
use tg_planner::{solve, validate, Limits, Problem};

fn main() {
    if let Err(e) = run() {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut time = 3.0f64;
    let mut repeat = 1usize;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--time" => time = args.next().and_then(|v| v.parse().ok()).ok_or("--time needs seconds")?,
            "--repeat" => repeat = args.next().and_then(|v| v.parse().ok()).ok_or("--repeat needs a count")?,
            _ => files.push(a),
        }
    }
    if files.is_empty() {
        return Err("usage: bench [--time SECS] [--repeat N] FILE...".into());
    }
    let limits = Limits { time: Duration::from_secs_f64(time), ..Limits::default() };
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
        let p = Problem::from_json(&text).map_err(|e| format!("{f}: {e}"))?;
        println!("{f}: {} devices, {} classes, {} nodes, budget {time} s", p.devices.len(), p.classes.len(), p.nodes.len());
        for _ in 0..repeat {
            let out = solve(&p, &limits);
            let Some(best) = &out.best else {
                println!("  {:?}, bound {}, {} nodes, {:.1} ms", out.status, out.lower_bound, out.nodes, out.elapsed.as_secs_f64() * 1e3);
                continue;
            };
            let plan = best.to_plan();
            let checked = validate(&p, &plan).map_err(|e| format!("{f}: {e}"))?;
            if (checked.makespan, checked.peak) != (best.makespan(), best.peak()) {
                return Err(format!("{f}: the validator recomputes {checked:?}, the search claims ({}, {})", best.makespan(), best.peak()));
            }
            let mut per_device = vec![0usize; p.devices.len()];
            let mut copies = 0usize;
            for s in &plan.steps {
                match s {
                    PlanStep::Kernel { device, .. } => per_device[*device] += 1,
                    PlanStep::Copy { .. } => copies += 1,
                }
            }
            let uploads = plan.buffers.iter().filter(|b| b.kind == BufferKind::Weight).count();
            let gap = (best.makespan() - out.lower_bound) as f64 / out.lower_bound.max(1) as f64 * 100.0;
            println!(
                "  {:?}: first plan {:.1} ms, total {:.1} ms, makespan {}, bound {}, gap {gap:.1}%, {} nodes, kernels per device {per_device:?}, {copies} copies, {uploads} weight uploads",
                out.status,
                out.first_plan.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
                out.elapsed.as_secs_f64() * 1e3,
                best.makespan(),
                out.lower_bound,
                out.nodes,
            );
        }
    }
    Ok(())
}
