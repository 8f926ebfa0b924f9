//! `tg pack`: static memory packing of a MiniMalloc CSV file (see `docs/pack.md`).
//!
//! Reads buffers (`id,lower,upper,size`, live on `[lower, upper)`), finds offsets so that
//! buffers live together never share bytes and all fit under `--capacity`, and writes the
//! same rows with an `offset` column. `--minimize` looks for the lowest height instead;
//! `--check` validates the `offset` column of the input. The last line printed is a
//! stable `result: key=value ...` summary for scripts.

use clap::Args;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tg_pack::{minimize, parse_csv, solve, validate, write_csv, Limits, Outcome, Solution, Verdict};

/// Arguments of `tg pack`.
#[derive(Args)]
pub(crate) struct PackArgs {
    /// Memory capacity in bytes: every buffer must end at or below it. Required unless
    /// `--minimize` (then it bounds the height; default unbounded).
    #[arg(short, long)]
    capacity: Option<u64>,
    /// Input CSV (MiniMalloc format: id,lower,upper,size[,alignment][,hint][,offset]).
    #[arg(short, long)]
    input: PathBuf,
    /// Output CSV (the input rows plus `offset`); written atomically, never over the input.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Time limit in seconds (fractions allowed; default: none).
    #[arg(short = 't', long = "time-limit")]
    time_limit: Option<f64>,
    /// Limit on search nodes (default: none).
    #[arg(long)]
    nodes: Option<u64>,
    /// Find the lowest height (at most `--capacity`), with a proof of optimality when
    /// the search completes.
    #[arg(long)]
    minimize: bool,
    /// Validate the input's `offset` column against `--capacity` instead of solving.
    #[arg(long, conflicts_with_all = ["minimize", "output"])]
    check: bool,
}

/// Runs `tg pack`. Errors (non-zero exit): unreadable or invalid input, an infeasible
/// capacity, a limit that ran out before any packing within the capacity was found, an
/// invalid `--check`ed packing, or a failed write.
pub(crate) fn run(a: PackArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let text = std::fs::read_to_string(&a.input).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let input = parse_csv(&text).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let problem = &input.problem;
    let parse_s = t0.elapsed().as_secs_f64();

    if a.check {
        let capacity = a.capacity.ok_or("--check needs --capacity")?;
        let offsets = input.offsets.clone().ok_or_else(|| format!("{}: no `offset` column to check", a.input.display()))?;
        let sol = Solution::from_offsets(problem, offsets);
        validate(problem, &sol, capacity).map_err(|e| format!("{}: invalid packing: {e}", a.input.display()))?;
        println!("{}: valid packing of {} buffers, height {} (capacity {capacity})", a.input.display(), problem.len(), sol.height);
        println!("result: verdict=valid buffers={} height={} capacity={capacity}", problem.len(), sol.height);
        return Ok(());
    }

    if let Some(out) = &a.output {
        if same_file(&a.input, out) {
            return Err(format!("refusing to overwrite the input {} (choose another --output)", a.input.display()));
        }
    }
    let capacity = match (a.capacity, a.minimize) {
        (Some(c), _) => c,
        (None, true) => u64::MAX,
        (None, false) => return Err("--capacity is required (or use --minimize)".into()),
    };
    let limits = Limits {
        time: match a.time_limit {
            Some(s) => Some(Duration::try_from_secs_f64(s).map_err(|e| format!("--time-limit {s}: {e}"))?),
            None => None,
        },
        nodes: a.nodes,
    };
    let out = if a.minimize { minimize(problem, capacity, &limits) } else { solve(problem, capacity, &limits) }.map_err(|e| e.to_string())?;

    let cap_text = if capacity == u64::MAX { "unbounded".to_string() } else { capacity.to_string() };
    println!("{}: {} buffers, capacity {cap_text}, largest live load {}", a.input.display(), problem.len(), problem.max_live_bytes());
    report(&out);
    let (verdict, result) = match &out.verdict {
        Verdict::Feasible(sol) => {
            validate(problem, sol, capacity).map_err(|e| format!("internal error, invalid packing: {e}"))?;
            if let Some(path) = &a.output {
                write_atomic(path, &write_csv(problem, sol))?;
                println!("wrote {}", path.display());
            }
            ("feasible", Ok(()))
        }
        Verdict::Infeasible => ("infeasible", Err(format!("infeasible: no packing fits in {cap_text} bytes (proven); nothing written"))),
        Verdict::Unknown { .. } => {
            ("unknown", Err(format!("limit reached before a packing within {cap_text} bytes was found (and before proving there is none); nothing written")))
        }
    };
    let height = out.solution().map_or("-".to_string(), |s| s.height.to_string());
    println!(
        "result: verdict={verdict} buffers={} height={height} lower_bound={} optimal={} time_s={:.6} nodes={} parse_s={parse_s:.6}",
        problem.len(),
        out.lower_bound,
        out.optimal,
        out.stats.elapsed.as_secs_f64(),
        out.stats.nodes,
    );
    result
}

/// The human-readable part of the report.
fn report(out: &Outcome) {
    let s = &out.stats;
    match &out.verdict {
        Verdict::Feasible(sol) => {
            let proof = if out.optimal { "optimal".to_string() } else { format!("not proven optimal, lower bound {}", out.lower_bound) };
            println!("feasible: height {} ({proof})", sol.height);
        }
        Verdict::Infeasible => println!("INFEASIBLE (proven; no packing below {} bytes)", out.lower_bound),
        Verdict::Unknown { best } => {
            println!("UNKNOWN: the time or node limit ran out");
            if let Some(b) = best {
                println!("  best packing found needs {} bytes (lower bound {})", b.height, out.lower_bound);
            }
        }
    }
    println!(
        "time {:.3} s: heuristics {:.3} s (best {}: {}), search {} nodes, {} runs, {} capacities probed",
        s.elapsed.as_secs_f64(),
        s.heuristic_time.as_secs_f64(),
        s.heuristic_height,
        s.heuristic,
        s.nodes,
        s.attempts,
        s.probes
    );
}

/// Whether two paths name the same file (an existing output that is the input).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Writes `contents` to a temporary file next to `path`, then renames it over `path`:
/// readers see the old file or the new one, never a partial one.
fn write_atomic(path: &Path, contents: &str) -> Result<(), String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| format!("{}: not a file name", path.display()))?;
    let tmp = dir.join(format!(".{}.{}.partial", name.to_string_lossy(), std::process::id()));
    let result = std::fs::write(&tmp, contents).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}: {e}", path.display()));
    }
    Ok(())
}
