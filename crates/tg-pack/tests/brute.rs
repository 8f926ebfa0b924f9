//! The solvers against a brute-force enumerator on thousands of small random instances:
//! same feasibility verdict at every capacity tried, same minimal height, and every
//! packing passes the validator.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_pack::{minimize, solve, solve_exact, validate, Buffer, Limits, Problem, Solution, Verdict};

/// Tries every aligned offset in `[0, cap − size]` for each buffer in turn, keeping only
/// those that avoid the buffers already given an offset. No cleverness: the reference.
fn brute(bufs: &[Buffer], cap: u64) -> Option<Vec<u64>> {
    fn go(bufs: &[Buffer], cap: u64, offs: &mut Vec<u64>) -> bool {
        let i = offs.len();
        if i == bufs.len() {
            return true;
        }
        let b = &bufs[i];
        if b.size > cap {
            return false;
        }
        let mut o = 0;
        while o + b.size <= cap {
            let clash = (0..i).any(|j| {
                let c = &bufs[j];
                let live_together = b.lower < c.upper && c.lower < b.upper;
                let share_bytes = b.size > 0 && c.size > 0 && o < offs[j] + c.size && offs[j] < o + b.size;
                live_together && share_bytes
            });
            if !clash {
                offs.push(o);
                if go(bufs, cap, offs) {
                    return true;
                }
                offs.pop();
            }
            o += b.alignment;
        }
        false
    }
    let mut offs = Vec::new();
    go(bufs, cap, &mut offs).then_some(offs)
}

/// The smallest capacity brute force can pack into.
fn brute_min(bufs: &[Buffer]) -> u64 {
    let mut h = 0;
    while brute(bufs, h).is_none() {
        h += 1;
    }
    h
}

fn random_instance(rng: &mut ChaCha8Rng, n: usize, horizon: i64, max_size: u64, aligned: bool) -> Vec<Buffer> {
    (0..n)
        .map(|i| {
            let lower = rng.gen_range(0..horizon);
            let upper = rng.gen_range(lower + 1..=horizon);
            let size = if rng.gen_ratio(1, 25) { 0 } else { rng.gen_range(1..=max_size) };
            let mut b = Buffer::new(format!("b{i}"), lower, upper, size);
            if aligned {
                b.alignment = [1, 1, 2, 3, 4][rng.gen_range(0..5)];
            }
            b
        })
        .collect()
}

fn check_packing(problem: &Problem, sol: &Solution, cap: u64, what: &str) {
    if let Err(e) = validate(problem, sol, cap) {
        panic!("{what}: invalid packing: {e}\n{problem:?}\n{sol:?}");
    }
}

fn run_batch(seed: u64, count: usize, max_n: usize, horizon: i64, max_size: u64, aligned: bool) -> u64 {
    println!("seed {seed}: {count} instances, n ≤ {max_n}, horizon {horizon}, sizes ≤ {max_size}, aligned {aligned}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let limits = Limits::none();
    let mut searched = 0;
    for case in 0..count {
        let n = rng.gen_range(1..=max_n);
        let bufs = random_instance(&mut rng, n, horizon, max_size, aligned);
        let problem = Problem::new(bufs.clone()).unwrap();
        let opt = brute_min(&bufs);
        let ctx = format!("seed {seed} case {case}: {bufs:?}");

        // Minimal height.
        let m = minimize(&problem, u64::MAX, &limits).unwrap();
        let sol = m.solution().unwrap_or_else(|| panic!("{ctx}: minimize found nothing"));
        check_packing(&problem, sol, u64::MAX, &ctx);
        assert!(m.optimal, "{ctx}: minimize not proven optimal");
        assert_eq!(sol.height, opt, "{ctx}: minimize height");
        assert_eq!(m.lower_bound, opt, "{ctx}: minimize bound");
        searched += m.stats.nodes;

        // Feasibility around the optimum, with and without the heuristics.
        for cap in [opt.saturating_sub(2), opt.saturating_sub(1), opt, opt + 1, opt + rng.gen_range(0..4)] {
            let expect = brute(&bufs, cap).is_some();
            assert_eq!(expect, cap >= opt, "{ctx}: brute force is not monotone");
            for (name, out) in [("solve", solve(&problem, cap, &limits).unwrap()), ("solve_exact", solve_exact(&problem, cap, &limits).unwrap())] {
                match &out.verdict {
                    Verdict::Feasible(s) => {
                        assert!(expect, "{ctx}: {name} packs into {cap}, brute force cannot");
                        check_packing(&problem, s, cap, &ctx);
                    }
                    Verdict::Infeasible => {
                        assert!(!expect, "{ctx}: {name} says {cap} is infeasible")
                    }
                    Verdict::Unknown { .. } => panic!("{ctx}: {name} undecided without limits"),
                }
            }
            // Minimizing under a capacity: infeasible below the optimum.
            let mc = minimize(&problem, cap, &limits).unwrap();
            match &mc.verdict {
                Verdict::Feasible(s) => {
                    assert!(cap >= opt, "{ctx}: minimize under {cap}");
                    assert_eq!(s.height, opt, "{ctx}: minimize under {cap}");
                    check_packing(&problem, s, cap, &ctx);
                }
                Verdict::Infeasible => assert!(cap < opt, "{ctx}: minimize under {cap} infeasible"),
                Verdict::Unknown { .. } => panic!("{ctx}: minimize undecided"),
            }
        }
    }
    searched
}

fn seed_from_env(default: u64) -> u64 {
    std::env::var("TG_PACK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

#[test]
fn brute_force_small_unaligned() {
    let nodes = run_batch(seed_from_env(0x5eed_0001), 2000, 6, 8, 5, false);
    assert!(nodes > 0, "the exact search never ran");
}

#[test]
fn brute_force_small_aligned() {
    run_batch(seed_from_env(0x5eed_0002), 1500, 6, 8, 6, true);
}

#[test]
fn brute_force_dense_overlaps() {
    // Short horizon: nearly everything overlaps, deep stacks.
    run_batch(seed_from_env(0x5eed_0003), 800, 7, 4, 4, false);
}

#[test]
fn brute_force_long_horizon() {
    // Many sections and decompositions.
    run_batch(seed_from_env(0x5eed_0004), 800, 8, 16, 4, false);
}
