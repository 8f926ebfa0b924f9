//! Per-phase timing of `extract` on extraction-gym files and on planning problems
//! (`docs/planner.md` JSON, reduced as tg-planner's one-device case does).
//!
//! ```text
//! cargo run -p tg-extract --release --example bench -- [--time-limit SECS] [--repeat N] FILE...
//! ```
//!
//! For each file: classes and nodes, the DAG cost, bound and proof, the least and the median
//! total over the repeats, and the least time of every phase, in milliseconds (file reading
//! excluded). Least times are what a busy shared machine reproduces best.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Duration;
use tg_extract::{check, extract, read_json_file, EGraph, Options, PhaseTimes};

fn load(path: &Path) -> Result<EGraph, String> {
    let head = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let planner = head.windows(10).take(4096).any(|w| w == b"\"devices\":");
    if planner {
        support::planner::read_planner_problem(path)
    } else {
        read_json_file(path).map_err(|e| e.to_string())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn least(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn phase_list(p: &PhaseTimes) -> [(&'static str, Duration); 10] {
    [
        ("prep", p.prep),
        ("greedy", p.greedy),
        ("local", p.local_search),
        ("path", p.path_bound),
        ("relax", p.relaxation),
        ("heur", p.heuristic),
        ("quick", p.quick_search),
        ("lns", p.lns),
        ("fixing", p.fixing),
        ("final", p.final_search),
    ]
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut limit = 10.0;
    let mut repeat = 5usize;
    let mut files = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--time-limit" => limit = args.next().and_then(|s| s.parse().ok()).ok_or("--time-limit SECS")?,
            "--repeat" => repeat = args.next().and_then(|s| s.parse().ok()).filter(|&r| r > 0).ok_or("--repeat N")?,
            _ => files.push(a),
        }
    }
    let opts = Options { time_limit: Duration::from_secs_f64(limit), ..Default::default() };
    for f in &files {
        let g = load(Path::new(f))?;
        let mut totals = Vec::new();
        let mut phases: Vec<Vec<f64>> = vec![Vec::new(); 10];
        let mut last = None;
        for _ in 0..repeat {
            let x = extract(&g, &opts).map_err(|e| e.to_string())?;
            totals.push(x.elapsed.as_secs_f64() * 1e3);
            for (k, (_, d)) in phase_list(&x.stats.phases).iter().enumerate() {
                phases[k].push(d.as_secs_f64() * 1e3);
            }
            last = Some(x);
        }
        let x = last.ok_or("no run")?;
        let checked = check(&g, &x.choices).map_err(|e| e.to_string())?;
        let name = Path::new(f).file_stem().map_or_else(|| f.clone(), |s| s.to_string_lossy().into_owned());
        print!(
            "{name}: {} classes {} nodes -> {} classes {} nodes; cost {checked} bound {} optimal {}; total {:.3} ms (median {:.3});",
            g.num_classes(),
            g.num_nodes(),
            x.stats.classes_after_prep,
            x.stats.nodes_after_prep,
            x.lower_bound,
            x.optimal,
            least(&totals),
            median(totals.clone())
        );
        for (k, (label, _)) in phase_list(&x.stats.phases).iter().enumerate() {
            let m = least(&phases[k]);
            if m > 0.0005 {
                print!(" {label} {m:.3}");
            }
        }
        println!();
        if std::env::var_os("BENCH_STATS").is_some() {
            println!("  {:?}", x.stats);
        }
    }
    Ok(())
}
