//! Instances too large for brute force: every packing validated, verdicts consistent
//! with each other and with the bounds, limits honoured, hints used, deep searches.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};
use tg_pack::{minimize, solve, solve_exact, validate, Buffer, Limits, Problem, Verdict};

fn random_problem(rng: &mut ChaCha8Rng, n: usize, horizon: i64, max_size: u64) -> Problem {
    let bufs = (0..n)
        .map(|i| {
            let lower = rng.gen_range(0..horizon);
            let len = rng.gen_range(1..=(horizon / 4).clamp(1, 20));
            let mut b = Buffer::new(format!("t{i}"), lower, lower + len, rng.gen_range(1..=max_size));
            b.alignment = [1, 1, 8, 64][rng.gen_range(0..4)];
            b
        })
        .collect();
    Problem::new(bufs).unwrap()
}

fn seed() -> u64 {
    std::env::var("TG_PACK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x1a46e)
}

#[test]
fn medium_random_instances_are_consistent() {
    let seed = seed();
    println!("seed {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Node limits, not time: the same seed gives the same verdicts on any machine.
    let limits = Limits { time: None, nodes: Some(100_000) };
    let mut proven = 0;
    for case in 0..60 {
        let n = rng.gen_range(10..=50);
        let p = random_problem(&mut rng, n, 40, 1000);
        let ctx = format!("seed {seed} case {case} (n = {n})");
        let lb = p.max_live_bytes();
        let m = minimize(&p, u64::MAX, &limits).unwrap();
        let Verdict::Feasible(best) = &m.verdict else { panic!("{ctx}: no packing without a capacity") };
        validate(&p, best, u64::MAX).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(m.lower_bound >= lb && m.lower_bound <= best.height, "{ctx}: bounds");
        // Feasible at the height found; infeasible below the lower bound.
        match solve(&p, best.height, &limits).unwrap().verdict {
            Verdict::Feasible(s) => validate(&p, &s, best.height).unwrap_or_else(|e| panic!("{ctx}: {e}")),
            v => panic!("{ctx}: {v:?} at a height already packed"),
        }
        assert_eq!(solve(&p, lb - 1, &limits).unwrap().verdict, Verdict::Infeasible, "{ctx}");
        if m.optimal {
            proven += 1;
            assert_eq!(m.lower_bound, best.height, "{ctx}");
            // Proven minimal: one byte less must be infeasible (or undecided), never packed.
            let below = solve_exact(&p, best.height - 1, &limits).unwrap();
            assert!(!matches!(below.verdict, Verdict::Feasible(_)), "{ctx}: packed below the optimum");
        }
    }
    // Deterministic (node limits). Random byte sizes with alignments are hard to prove:
    // MiniMalloc proves the same 14 of the first 30 within 2 s each.
    println!("{proven}/60 proven optimal");
    assert!(proven >= 15, "only {proven}/60 proven optimal");
}

#[test]
fn limits_are_honoured() {
    let mut rng = ChaCha8Rng::seed_from_u64(seed() ^ 7);
    // Dense and wide: the exact search cannot settle it at the lower bound quickly.
    let p = random_problem(&mut rng, 400, 60, 100_000);
    let lb = p.max_live_bytes();
    let t = Instant::now();
    let out = solve(&p, lb, &Limits::time(Duration::from_millis(200))).unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "time limit ignored: {:?}", t.elapsed());
    match &out.verdict {
        Verdict::Unknown { best: Some(b) } => {
            validate(&p, b, u64::MAX).unwrap();
            assert!(b.height > lb);
        }
        Verdict::Feasible(s) => validate(&p, s, lb).unwrap(),
        v => panic!("{v:?}"),
    }
    let out = solve_exact(&p, lb, &Limits { time: None, nodes: Some(500) }).unwrap();
    if let Verdict::Unknown { best } = &out.verdict {
        assert!(best.is_none());
        assert!(out.stats.nodes <= 500, "{}", out.stats.nodes);
    }
    let out = minimize(&p, u64::MAX, &Limits::time(Duration::ZERO)).unwrap();
    let Verdict::Feasible(s) = &out.verdict else { panic!("the heuristics always give a packing") };
    validate(&p, s, u64::MAX).unwrap();
}

#[test]
fn hints_give_an_instant_answer() {
    let mut rng = ChaCha8Rng::seed_from_u64(seed() ^ 11);
    let p = random_problem(&mut rng, 80, 30, 500);
    let m = minimize(&p, u64::MAX, &Limits::time(Duration::from_secs(2))).unwrap();
    let best = m.solution().unwrap().clone();
    let hinted: Vec<Buffer> = p.buffers().iter().zip(&best.offsets).map(|(b, &o)| Buffer { hint: Some(o), ..b.clone() }).collect();
    let hp = Problem::new(hinted).unwrap();
    let out = solve(&hp, best.height, &Limits::none()).unwrap();
    let Verdict::Feasible(s) = &out.verdict else { panic!("{out:?}") };
    validate(&hp, s, best.height).unwrap();
    assert_eq!(out.stats.nodes, 0, "solved by the hints, not the search");
    assert!(out.stats.heuristic.contains("hints"), "{}", out.stats.heuristic);
}

#[test]
fn deep_search_on_a_large_instance() {
    // 5000 buffers, short lives (as in a model's activations): the search recursion is
    // 5000 deep (it runs on its own stack).
    let mut rng = ChaCha8Rng::seed_from_u64(seed() ^ 13);
    let p = random_problem(&mut rng, 5000, 200, 4096);
    let loose = p.buffers().iter().map(|b| b.size + b.alignment).sum::<u64>();
    let out = solve_exact(&p, loose, &Limits::time(Duration::from_secs(20))).unwrap();
    let Verdict::Feasible(s) = &out.verdict else { panic!("{:?}", out.stats) };
    validate(&p, s, loose).unwrap();
    println!("5000 buffers: height {} (live bound {}), {} nodes, {:?}", s.height, p.max_live_bytes(), out.stats.nodes, out.stats.elapsed);
}
