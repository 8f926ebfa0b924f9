//! Unit tests of the solver's parts against a brute-force optimum on small random
//! e-graphs: the bound (for any multipliers), the complete search (with any multipliers,
//! with restrictions to one node per class as the neighbourhood search uses, and with
//! targets), reduced-cost and path fixing, and the large-neighbourhood search. Costs are
//! multiples of 1/4, so sums are exact.

use crate::graph::{ClassId, EGraph, EGraphBuilder};
use crate::greedy::{greedy_tree, induced, Walk};
use crate::lagrange::Relaxation;
use crate::prep::{mandatory, reduce, PrepStats};
use crate::problem::Problem;
use crate::search::{Branching, Search};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

fn random_egraph(rng: &mut ChaCha8Rng) -> EGraph {
    let nc = rng.gen_range(2..=8);
    let mut b = EGraphBuilder::new();
    let classes: Vec<ClassId> = (0..nc).map(|i| b.add_class(format!("c{i}"))).collect();
    let mut k = 0;
    for (i, &c) in classes.iter().enumerate() {
        for _ in 0..rng.gen_range(1..=3) {
            let arity = rng.gen_range(0..=3);
            let kids: Vec<ClassId> = (0..arity).map(|_| if rng.gen_bool(0.8) && i + 1 < nc { classes[rng.gen_range(i + 1..nc)] } else { classes[rng.gen_range(0..nc)] }).collect();
            b.add_node(c, format!("n{k}"), rng.gen_range(0..=12) as f64 * 0.25, kids).unwrap();
            k += 1;
        }
    }
    b.add_root(classes[0]).unwrap();
    if rng.gen_bool(0.3) {
        b.add_root(classes[1]).unwrap();
    }
    b.build().unwrap()
}

/// Optimum over all choice maps of `p` (`None`: no acyclic extraction).
fn brute(p: &Problem) -> Option<f64> {
    let nc = p.num_classes();
    let mut idx = vec![0usize; nc];
    let mut walk = Walk::default();
    let mut best: Option<f64> = None;
    loop {
        let choice: Vec<u32> = (0..nc).map(|c| (p.nodes_of(c).start + idx[c]) as u32).collect();
        if let Some(v) = induced(p, &choice, &mut walk) {
            best = Some(best.map_or(v, |b: f64| b.min(v)));
        }
        let mut c = 0;
        loop {
            if c == nc {
                return best;
            }
            idx[c] += 1;
            if idx[c] < p.nodes_of(c).len() {
                break;
            }
            idx[c] = 0;
            c += 1;
        }
    }
}

/// Small random problems (after preprocessing) with their optimum.
fn cases(seed: u64, n: usize) -> Vec<(Problem, f64)> {
    println!("seed {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    while out.len() < n {
        let g = random_egraph(&mut rng);
        let Ok(p) = Problem::from_egraph(&g) else {
            continue;
        };
        // The optimum of the raw problem must survive preprocessing.
        let raw = brute(&p);
        let Ok((q, _)) = reduce(p, &mut PrepStats::default(), None) else {
            assert_eq!(raw, None);
            continue;
        };
        let opt = brute(&q);
        assert_eq!(opt, raw, "preprocessing changed the optimum");
        if let Some(opt) = opt {
            out.push((q, opt));
        }
    }
    out
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

#[test]
fn bound_is_valid_for_any_multipliers_and_search_is_complete() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (i, (p, opt)) in cases(11, 1500).into_iter().enumerate() {
        let rel = Relaxation::new(&p, &mandatory(&p), None);
        let mut d = rel.zero(&p);
        // Random multipliers, some large.
        for l in d.lam.iter_mut() {
            *l = if rng.gen_bool(0.5) { 0.0 } else { rng.gen_range(0..=16) as f64 * 0.25 };
        }
        for m in d.mu.iter_mut() {
            *m = if rng.gen_bool(0.5) { 0.0 } else { rng.gen_range(0..=16) as f64 * 0.25 };
        }
        rel.evaluate(&p, &mut d);
        assert!(d.bound <= opt, "case {i}: bound {} above optimum {opt}", d.bound);
        // The search with these multipliers must still find the optimum.
        let mut s = Search::new(&p, &rel, &d, Branching::FewestNodes);
        let out = s.run(1e9, 0.0, far(), u64::MAX, None);
        assert!(out.complete);
        let (_, cost) = out.best.expect("a solution");
        assert_eq!(cost, opt, "case {i}");
        // And with optimised multipliers.
        let mut d = rel.zero(&p);
        rel.ascend(&p, &mut d, opt + 1.0, opt + 1.0, 500, far());
        assert!(d.bound <= opt + 1e-9, "case {i}: ascended bound {} above optimum {opt}", d.bound);
        let mut s = Search::new(&p, &rel, &d, Branching::LargestRegret);
        let out = s.run(1e9, 0.0, far(), u64::MAX, None);
        assert_eq!(out.best.map(|b| b.1), Some(opt), "case {i}");
    }
}

#[test]
fn targets_below_the_optimum_find_nothing_and_above_find_it() {
    for (i, (p, opt)) in cases(12, 800).into_iter().enumerate() {
        let rel = Relaxation::new(&p, &mandatory(&p), None);
        let mut d = rel.zero(&p);
        rel.ascend(&p, &mut d, opt + 1.0, opt + 1.0, 300, far());
        let mut s = Search::new(&p, &rel, &d, Branching::FewestNodes);
        let out = s.run(opt, 0.0, far(), u64::MAX, None);
        assert!(out.complete && out.best.is_none(), "case {i}: found below the optimum");
        let out = s.run(opt + 0.125, 0.0, far(), u64::MAX, None);
        assert!(out.complete);
        assert_eq!(out.best.map(|b| b.1), Some(opt), "case {i}");
    }
}

#[test]
fn reduced_cost_fixing_keeps_every_better_extraction() {
    for (i, (p, opt)) in cases(13, 800).into_iter().enumerate() {
        let rel = Relaxation::new(&p, &mandatory(&p), None);
        let mut d = rel.zero(&p);
        rel.ascend(&p, &mut d, opt + 1.0, opt + 1.0, 300, far());
        // Pretend the incumbent costs opt + 1/8: an optimal extraction must survive.
        match crate::solve::fix_by_reduced_cost(&p, &rel, &d, opt + 0.125) {
            Ok(q) => assert_eq!(brute(&q), Some(opt), "case {i}"),
            Err(_) => panic!("case {i}: fixing removed every extraction"),
        }
        // Against an optimal incumbent, fixing may remove everything, but never leaves
        // anything cheaper than the optimum.
        if let Ok(q) = crate::solve::fix_by_reduced_cost(&p, &rel, &d, opt) {
            if let Some(v) = brute(&q) {
                assert!(v >= opt, "case {i}");
            }
        }
    }
}

#[test]
fn neighbourhood_search_improves_and_proves() {
    for (i, (p, opt)) in cases(14, 800).into_iter().enumerate() {
        let rel = Relaxation::new(&p, &mandatory(&p), None);
        let d = rel.zero(&p);
        let mut s = Search::new(&p, &rel, &d, Branching::LargestRegret);
        let mut choice = greedy_tree(&p, &p.cost);
        let mut walk = Walk::default();
        let start = induced(&p, &choice, &mut walk).expect("tree maps are acyclic");
        let mut st = crate::lns::LnsStats::default();
        let deadline = Instant::now() + Duration::from_millis(200);
        let got = crate::lns::run(&p, &mut s, &mut choice, start, 0.0, deadline, &mut st);
        assert_eq!(induced(&p, &choice, &mut walk), Some(got), "case {i}");
        assert!(got >= opt && got <= start, "case {i}");
        assert!(st.proven, "case {i}: small problems are settled");
        assert_eq!(got, opt, "case {i}");
    }
}

#[test]
fn path_bounds_and_path_fixing_are_valid() {
    for (i, (p, opt)) in cases(15, 1500).into_iter().enumerate() {
        let below = crate::greedy::path_bounds(&p);
        for &r in &p.roots {
            assert!(below[r as usize] <= opt, "case {i}: path bound above the optimum");
        }
        match crate::solve::fix_by_paths(&p, opt + 0.125) {
            Ok(q) => assert_eq!(brute(&q), Some(opt), "case {i}"),
            Err(_) => panic!("case {i}: path fixing removed every extraction"),
        }
    }
}

/// Optimum over the choice maps of `p` that give every class of `fixed` its fixed node.
fn brute_fixed(p: &Problem, fixed: &[u32]) -> Option<f64> {
    let nc = p.num_classes();
    let mut idx = vec![0usize; nc];
    let mut walk = Walk::default();
    let mut best: Option<f64> = None;
    loop {
        let choice: Vec<u32> = (0..nc).map(|c| (p.nodes_of(c).start + idx[c]) as u32).collect();
        let ok = (0..nc).all(|c| fixed[c] == u32::MAX || fixed[c] == choice[c]);
        if ok {
            if let Some(v) = induced(p, &choice, &mut walk) {
                best = Some(best.map_or(v, |b: f64| b.min(v)));
            }
        }
        let mut c = 0;
        loop {
            if c == nc {
                return best;
            }
            idx[c] += 1;
            if idx[c] < p.nodes_of(c).len() {
                break;
            }
            idx[c] = 0;
            c += 1;
        }
    }
}

#[test]
fn restricted_search_with_any_multipliers_is_exact() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    for (i, (p, _)) in cases(16, 1500).into_iter().enumerate() {
        let rel = Relaxation::new(&p, &mandatory(&p), None);
        let mut d = rel.zero(&p);
        for l in d.lam.iter_mut() {
            *l = if rng.gen_bool(0.5) { 0.0 } else { rng.gen_range(0..=16) as f64 * 0.25 };
        }
        for m in d.mu.iter_mut() {
            *m = if rng.gen_bool(0.5) { 0.0 } else { rng.gen_range(0..=16) as f64 * 0.25 };
        }
        rel.evaluate(&p, &mut d);
        let fixed: Vec<u32> = (0..p.num_classes())
            .map(|c| {
                let r = p.nodes_of(c);
                if rng.gen_bool(0.5) {
                    rng.gen_range(r.start..r.end) as u32
                } else {
                    u32::MAX
                }
            })
            .collect();
        let want = brute_fixed(&p, &fixed);
        for rule in [Branching::FewestNodes, Branching::LargestRegret] {
            let mut s = Search::new(&p, &rel, &d, rule);
            let out = s.run(1e9, 0.0, far(), u64::MAX, Some(&fixed));
            assert!(out.complete);
            assert_eq!(out.best.map(|b| b.1), want, "case {i}, {rule:?}");
            // The same search object, reused without restrictions (as the neighbourhood
            // search reuses it), is exact too.
            let out = s.run(1e9, 0.0, far(), u64::MAX, None);
            assert_eq!(out.best.map(|b| b.1), brute(&p), "case {i}, {rule:?}, reused");
        }
    }
}

/// A random problem of up to `max_classes` classes: mostly downward children (shared
/// sub-expressions), some upward ones (cycles); costs multiples of 1/4, so sums are exact.
pub(crate) fn random_problem(rng: &mut ChaCha8Rng, max_classes: usize) -> Option<Problem> {
    let nc = rng.gen_range(3..=max_classes);
    let mut b = EGraphBuilder::new();
    let classes: Vec<ClassId> = (0..nc).map(|i| b.add_class(format!("c{i}"))).collect();
    let mut k = 0;
    for (i, &c) in classes.iter().enumerate() {
        for _ in 0..rng.gen_range(1..=4) {
            let arity = if i + 1 == nc { 0 } else { rng.gen_range(0..=3) };
            let kids: Vec<ClassId> = (0..arity).map(|_| if rng.gen_bool(0.9) && i + 1 < nc { classes[rng.gen_range(i + 1..nc)] } else { classes[rng.gen_range(0..nc)] }).collect();
            b.add_node(c, format!("n{k}"), rng.gen_range(0..=12) as f64 * 0.25, kids).unwrap();
            k += 1;
        }
    }
    for _ in 0..rng.gen_range(1..=3) {
        b.add_root(classes[rng.gen_range(0..nc.min(4))]).unwrap();
    }
    Problem::from_egraph(&b.build().unwrap()).ok()
}

/// The greedy DAG extraction prices nodes the same with the bitsets of the classes below
/// as by walking them (exact sums: costs are multiples of 1/4).
#[test]
fn greedy_dag_sets_match_walks() {
    let seed = 0x9d;
    println!("seed {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut differs_from_tree = 0;
    for _ in 0..2000 {
        let Some(p) = random_problem(&mut rng, 200) else { continue };
        let cost: Vec<f64> = if rng.gen_bool(0.5) { p.cost.clone() } else { (0..p.num_nodes()).map(|_| rng.gen_range(0..=12) as f64 * 0.25).collect() };
        let sets = crate::greedy::greedy_dag(&p, &cost, None).unwrap();
        assert_eq!(sets, crate::greedy::greedy_dag_walk(&p, &cost));
        differs_from_tree += usize::from(sets != greedy_tree(&p, &cost));
    }
    println!("{differs_from_tree} differ from the tree extraction");
    assert!(differs_from_tree > 100);
}
