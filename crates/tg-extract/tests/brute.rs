//! The solver against a plain brute-force enumerator on thousands of small random
//! e-graphs (cycles, shared sub-expressions, classes without an acyclic extraction).
//! Costs are multiples of 1/4, so every sum is exact and optima must match exactly.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;
use tg_extract::{check, extract, ClassId, EGraph, EGraphBuilder, ExtractError, NodeId, Options};

/// A random e-graph: `nc` classes of 1..=`max_nodes` nodes, each node with 0..=3 child
/// classes drawn from all classes (so cycles and self-loops happen).
fn random_egraph(rng: &mut ChaCha8Rng, nc: usize, max_nodes: usize) -> EGraph {
    let mut b = EGraphBuilder::new();
    let classes: Vec<ClassId> = (0..nc).map(|i| b.add_class(format!("c{i}"))).collect();
    let mut k = 0;
    for &c in &classes {
        for _ in 0..rng.gen_range(1..=max_nodes) {
            let arity = match rng.gen_range(0..10) {
                0..=2 => 0,
                3..=6 => 1,
                7..=8 => 2,
                _ => 3,
            };
            // Prefer "later" classes as children so that most graphs have acyclic
            // extractions, but allow any class.
            let kids: Vec<ClassId> =
                (0..arity).map(|_| if rng.gen_bool(0.75) && c.index() + 1 < nc { classes[rng.gen_range(c.index() + 1..nc)] } else { classes[rng.gen_range(0..nc)] }).collect();
            let cost = rng.gen_range(0..=12) as f64 * 0.25;
            b.add_node(c, format!("n{k}"), cost, kids).unwrap();
            k += 1;
        }
    }
    let nroots = if nc > 2 && rng.gen_bool(0.3) { 2 } else { 1 };
    for _ in 0..nroots {
        b.add_root(classes[rng.gen_range(0..nc.min(3))]).unwrap();
    }
    b.build().unwrap()
}

/// Minimum DAG cost over every total choice map (None: no acyclic extraction), written
/// without any of the solver's code.
fn brute_force(g: &EGraph) -> Option<f64> {
    let nc = g.num_classes();
    let mut idx = vec![0usize; nc];
    let mut best: Option<f64> = None;
    loop {
        let choice: Vec<NodeId> = (0..nc).map(|c| g.class_nodes(ClassId(c as u32))[idx[c]]).collect();
        if let Some(cost) = induced_cost(g, &choice) {
            if best.is_none_or(|b| cost < b) {
                best = Some(cost);
            }
        }
        // Next map (odometer).
        let mut c = 0;
        loop {
            if c == nc {
                return best;
            }
            idx[c] += 1;
            if idx[c] < g.class_nodes(ClassId(c as u32)).len() {
                break;
            }
            idx[c] = 0;
            c += 1;
        }
    }
}

/// DAG cost of what the roots reach under `choice`, or None on a cycle (recursive DFS
/// with colours).
fn induced_cost(g: &EGraph, choice: &[NodeId]) -> Option<f64> {
    fn visit(g: &EGraph, choice: &[NodeId], c: ClassId, color: &mut [u8]) -> bool {
        match color[c.index()] {
            1 => return false,
            2 => return true,
            _ => {}
        }
        color[c.index()] = 1;
        for &d in g.children(choice[c.index()]) {
            if !visit(g, choice, d, color) {
                return false;
            }
        }
        color[c.index()] = 2;
        true
    }
    let mut color = vec![0u8; g.num_classes()];
    for &r in g.roots() {
        if !visit(g, choice, r, &mut color) {
            return None;
        }
    }
    Some((0..g.num_classes()).filter(|&c| color[c] == 2).map(|c| g.cost(choice[c])).sum())
}

fn seed() -> u64 {
    std::env::var("TG_EXTRACT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_e6a9)
}

fn run_random(seed: u64, cases: usize, max_classes: usize, max_nodes: usize, opts: Options) {
    println!("seed {seed} (set TG_EXTRACT_SEED to reproduce)");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut infeasible, mut dag_beats_tree) = (0, 0);
    for case in 0..cases {
        let nc = rng.gen_range(1..=max_classes);
        let g = random_egraph(&mut rng, nc, max_nodes);
        let want = brute_force(&g);
        match (extract(&g, &opts), want) {
            (Err(ExtractError::Infeasible(_)), None) => infeasible += 1,
            (Ok(x), Some(best)) => {
                let checked = check(&g, &x.choices).unwrap_or_else(|e| panic!("case {case}: invalid extraction: {e}"));
                assert_eq!(checked, x.dag_cost, "case {case}: reported cost");
                assert!(x.optimal, "case {case}: not proven optimal");
                assert_eq!(x.dag_cost, best, "case {case}: cost differs from brute force");
                assert_eq!(x.lower_bound, best, "case {case}: bound");
                if x.stats.greedy_tree_cost > best {
                    dag_beats_tree += 1;
                }
            }
            (got, want) => panic!("case {case}: solver {got:?}, brute force {want:?}"),
        }
    }
    println!("{cases} cases: {infeasible} infeasible, {dag_beats_tree} where the tree optimum is not DAG-optimal");
    assert!(infeasible > 0 && dag_beats_tree > 0, "generator lost its variety");
}

fn opts(quick_search_nodes: u64, lns: bool) -> Options {
    Options { time_limit: Duration::from_secs(20), quick_search_nodes, lns, ..Default::default() }
}

/// Default settings: small graphs are settled by the first complete search.
#[test]
fn random_small_egraphs_match_brute_force() {
    run_random(seed(), 3000, 7, 3, opts(20_000, true));
}

#[test]
fn random_wider_egraphs_match_brute_force() {
    run_random(seed() ^ 0x9e37_79b9, 300, 11, 2, opts(20_000, true));
}

/// Without the first search: the large-neighbourhood search must prove optimality itself
/// (a round that frees every class and finishes).
#[test]
fn random_egraphs_lns_path() {
    run_random(seed() ^ 0x2545_f491, 1000, 8, 3, opts(0, true));
}

/// Without the first search and the large-neighbourhood search: reduced-cost fixing rounds
/// and the searches with rising targets.
#[test]
fn random_egraphs_fixing_and_target_path() {
    run_random(seed() ^ 0x4f6c_dd1d, 1000, 8, 3, opts(0, false));
}

/// With no time at all the solver still returns a valid extraction and a valid bound.
#[test]
fn zero_time_limit_gives_valid_answer_and_bound() {
    let seed = seed() ^ 0x1234;
    println!("seed {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let opts = Options { time_limit: Duration::ZERO, ..Default::default() };
    for case in 0..500 {
        let nc = rng.gen_range(1..=7);
        let g = random_egraph(&mut rng, nc, 3);
        let want = brute_force(&g);
        match (extract(&g, &opts), want) {
            (Err(ExtractError::Infeasible(_)), None) => {}
            (Ok(x), Some(best)) => {
                assert_eq!(check(&g, &x.choices).unwrap(), x.dag_cost, "case {case}");
                assert!(x.dag_cost >= best, "case {case}");
                assert!(x.lower_bound <= best, "case {case}: bound above the optimum");
                if x.optimal {
                    assert_eq!(x.dag_cost, best, "case {case}");
                }
            }
            (got, want) => panic!("case {case}: solver {got:?}, brute force {want:?}"),
        }
    }
}
