//! MiniMalloc's benchmark instances: the README example at capacity 12 and the
//! "challenging" A–F at 1 MiB. The files are in `TG_MINIMALLOC_DATA`, else
//! `$TG_DATA_DIR/minimalloc`, else `../shared/data/minimalloc` next to the repository
//! (`tests/support/data.rs`). When absent the tests fail under CI (`CI` set) and otherwise
//! print `SKIPPED: ...`.

#[path = "../../../tests/support/data.rs"]
mod data;

use std::time::Duration;
use tg_pack::{minimize, parse_csv, solve, solve_exact, validate, Limits, Problem, Verdict};

/// The instance in file `name`, or `None` (after `SKIPPED: ...`; a failure under CI) when
/// it is absent.
fn load(name: &str) -> Option<Problem> {
    let path = data::shared_file("TG_MINIMALLOC_DATA", "minimalloc", name)?;
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(parse_csv(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())).problem)
}

#[test]
fn readme_example_at_12() {
    let Some(p) = load("input.12.csv") else { return };
    let out = solve(&p, 12, &Limits::none()).unwrap();
    let Verdict::Feasible(sol) = &out.verdict else { panic!("input.12 fits in 12: {out:?}") };
    validate(&p, sol, 12).unwrap();
    assert_eq!(sol.height, 12);
    assert_eq!(solve(&p, 11, &Limits::none()).unwrap().verdict, Verdict::Infeasible);
    assert_eq!(solve_exact(&p, 11, &Limits::none()).unwrap().verdict, Verdict::Infeasible);
    let m = minimize(&p, u64::MAX, &Limits::none()).unwrap();
    assert!(m.optimal);
    assert_eq!(m.solution().map(|s| s.height), Some(12));
}

/// Each challenging instance packs into 1 MiB. A, B, E and F are perfect packings (the
/// height equals the largest live load), so the heuristics cannot stop early there.
#[test]
fn challenging_a_to_f_at_one_mib() {
    const CAP: u64 = 1 << 20;
    let limits = Limits::time(Duration::from_secs(20));
    for name in ["A", "B", "C", "D", "E", "F"] {
        let Some(p) = load(&format!("{name}.1048576.csv")) else { continue };
        let out = solve(&p, CAP, &limits).unwrap();
        let Verdict::Feasible(sol) = &out.verdict else { panic!("{name}: {out:?}") };
        validate(&p, sol, CAP).unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("{name}: {} buffers, height {}, lower bound {}, {} nodes, {:.3} s", p.len(), sol.height, out.lower_bound, out.stats.nodes, out.stats.elapsed.as_secs_f64());
        if ["A", "B", "E", "F"].contains(&name) {
            assert_eq!(sol.height, CAP, "{name}");
            assert!(out.optimal, "{name}");
        }
    }
}

/// C's minimal height equals its largest live load (1039360): proven quickly.
#[test]
fn challenging_c_minimal_height() {
    let Some(p) = load("C.1048576.csv") else { return };
    let out = minimize(&p, 1 << 20, &Limits::time(Duration::from_secs(20))).unwrap();
    let sol = out.solution().unwrap_or_else(|| panic!("C: {out:?}"));
    validate(&p, sol, 1 << 20).unwrap();
    assert!(out.optimal, "{out:?}");
    assert_eq!(sol.height, 1_039_360);
    assert_eq!(p.max_live_bytes(), 1_039_360);
}
