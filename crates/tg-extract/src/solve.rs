//! The anytime solver: preprocessing, greedy and local search for an incumbent, the
//! Lagrangian bound with reduced-cost fixing, then branch and bound until proven optimal
//! or out of time.
//!
//! Cheap proofs come before expensive improvement: the greedy DAG extraction, improved by
//! (incremental) local search, is checked against the path bound and against a short
//! ascent of the relaxation (at most `QUICK_ASCENT_STEPS` steps) before the fixed-point
//! greedy and the other local searches run. On the compiler's e-graphs that extraction is
//! optimal and the relaxation tight, so that is the whole solve (local search matters
//! where a node with two results pays off only when both readers share it, which the
//! greedy, pricing each reader alone, misses). Otherwise the short ascent is continued
//! where it stopped (exactly the steps of one long ascent) when the other candidates did
//! not improve the incumbent's cost, and restarted against the better incumbent when they
//! did: either way the steps are those of one ascent aimed at the final incumbent, as when
//! local search came after the short ascent.
//!
//! Every phase reads the clock: preprocessing, the DAG greedies, the cover of the
//! mandatory sets and the ascent stop at their share of the limit (each sound when cut
//! short, see their docs); what runs regardless is linear or linearithmic (the compact
//! copy, grounding, the tree extraction, the path bound).

use crate::graph::{ClassId, EGraph, NodeId};
use crate::greedy::{ancestor_bounds, greedy_dag, greedy_dag_fixpoint, greedy_tree, induced, path_bounds, Walk};
use crate::lagrange::{Ascent, Dual, Relaxation};
use crate::prep::{reduce, PrepStats};
use crate::problem::{Infeasible, Problem};
use crate::search::{Branching, Search};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Solver settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Wall-clock limit for the whole extraction. When it passes, the best extraction so
    /// far is returned with `optimal == false`.
    pub time_limit: Duration,
    /// Relative tolerance on costs: an extraction counts as better only when it is cheaper
    /// by more than `rel_tol × cost`, and "optimal" means that no extraction is cheaper by
    /// more than that. The default, `1e-9`, is far above the rounding error of summing
    /// costs in f64 and far below any real difference between extractions.
    pub rel_tol: f64,
    /// Node budget of the first complete branch and bound, which settles small problems
    /// before the large-neighbourhood search (0: skip it).
    pub quick_search_nodes: u64,
    /// Run the large-neighbourhood search.
    pub lns: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { time_limit: Duration::from_secs(10), rel_tol: 1e-9, quick_search_nodes: 20_000, lns: true }
    }
}

/// Counters describing a solve.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Classes and nodes left after preprocessing.
    pub classes_after_prep: usize,
    /// See `classes_after_prep`.
    pub nodes_after_prep: usize,
    /// Nodes removed because they close a cycle with a mandatory class.
    pub cycle_nodes_removed: usize,
    /// Nodes removed by dominance.
    pub dominated_nodes_removed: usize,
    /// The time limit cut the preprocessing short (its removals are then incomplete and
    /// the mandatory sets smaller, which is sound).
    pub prep_cut_short: bool,
    /// Nodes removed by reduced-cost fixing against the incumbent.
    pub fixed_nodes_removed: usize,
    /// DAG cost of the greedy DAG extraction.
    pub greedy_dag_cost: f64,
    /// DAG cost of the optimal tree extraction.
    pub greedy_tree_cost: f64,
    /// DAG cost of the fixed-point greedy DAG extraction (infinite if its choice map was
    /// cyclic).
    pub greedy_fixpoint_cost: f64,
    /// DAG cost after local search.
    pub local_search_cost: f64,
    /// DAG cost after the Lagrangian heuristic on the first bound.
    pub lagrangian_heuristic_cost: f64,
    /// The Lagrangian bound on the whole problem.
    pub root_bound: f64,
    /// The path bound (cost of the most expensive chain below a root).
    pub path_bound: f64,
    /// Milliseconds spent before the final complete search.
    pub ms_before_search: f64,
    /// Large-neighbourhood search rounds and how many improved the incumbent.
    pub lns_rounds: u64,
    /// See `lns_rounds`.
    pub lns_improvements: u64,
    /// Wall-clock time of each phase.
    pub phases: PhaseTimes,
}

/// Wall-clock time of each phase of [`extract`] (zero for phases that did not run).
#[derive(Debug, Clone, Default)]
pub struct PhaseTimes {
    /// Preprocessing (mandatory classes, cycle and dominance removals).
    pub prep: Duration,
    /// The three greedy extractions.
    pub greedy: Duration,
    /// Local search on the greedy extractions.
    pub local_search: Duration,
    /// The path bound.
    pub path_bound: Duration,
    /// Mandatory classes of the reduced problem, the relaxation and its first ascent.
    pub relaxation: Duration,
    /// The Lagrangian heuristic (with its local search).
    pub heuristic: Duration,
    /// The first, node-limited complete search.
    pub quick_search: Duration,
    /// The large-neighbourhood search.
    pub lns: Duration,
    /// Fixing rounds (fixing, preprocessing again, re-ascent, heuristic).
    pub fixing: Duration,
    /// Complete searches with rising targets.
    pub final_search: Duration,
}

/// The result of [`extract`].
#[derive(Debug, Clone)]
pub struct Extraction {
    /// The chosen node of every extracted class, sorted by class.
    pub choices: Vec<(ClassId, NodeId)>,
    /// Sum of the costs of the chosen nodes (each counted once), summed in class order.
    pub dag_cost: f64,
    /// A proven lower bound on the DAG cost of every acyclic extraction (equal to
    /// `dag_cost` when `optimal`).
    pub lower_bound: f64,
    /// No extraction is cheaper than `dag_cost` by more than the relative tolerance.
    pub optimal: bool,
    /// Branch-and-bound nodes explored.
    pub nodes_explored: u64,
    /// Wall-clock time of the solve.
    pub elapsed: Duration,
    /// Details.
    pub stats: Stats,
}

/// Why there is no extraction.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ExtractError {
    /// Some root class has no acyclic extraction.
    #[error("no acyclic extraction exists for root class `{0}`")]
    Infeasible(String),
}

/// Step budget of the short ascent against the first incumbent.
const QUICK_ASCENT_STEPS: usize = 300;

struct Incumbent {
    choices: Vec<(ClassId, NodeId)>,
    cost: f64,
}

fn cost_of(g: &EGraph, choices: &[(ClassId, NodeId)]) -> f64 {
    choices.iter().map(|&(_, n)| g.cost(n)).sum()
}

/// Choices in original ids of the extraction `choice` induces in `p`.
fn to_original(p: &Problem, choice: &[u32], walk: &mut Walk) -> Option<Vec<(ClassId, NodeId)>> {
    induced(p, choice, walk)?;
    let mut v: Vec<(ClassId, NodeId)> = walk.order.iter().map(|&c| (p.orig_class[c as usize], p.orig_node[choice[c as usize] as usize])).collect();
    v.sort_unstable();
    Some(v)
}

/// Extracts a minimum-DAG-cost acyclic extraction of the roots of `g` (see the crate doc).
pub fn extract(g: &EGraph, opts: &Options) -> Result<Extraction, ExtractError> {
    let start = Instant::now();
    let deadline = start + opts.time_limit;
    let tol_of = |ub: f64| opts.rel_tol * ub.abs();
    let infeasible = |e: Infeasible| ExtractError::Infeasible(g.class_name(e.0).to_string());
    let mut stats = Stats::default();

    let mut lap = Instant::now();
    // Time since the last call, and restart the lap.
    let mut split = || {
        let now = Instant::now();
        let d = now - lap;
        lap = now;
        d
    };
    let t_frac = |f: f64| start + opts.time_limit.mul_f64(f);
    let p = Problem::from_egraph(g).map_err(infeasible)?;
    let mut ps = PrepStats::default();
    let (p, mand) = reduce(p, &mut ps, Some(t_frac(0.1))).map_err(infeasible)?;
    stats.cycle_nodes_removed = ps.cycle_nodes;
    stats.dominated_nodes_removed = ps.dominated_nodes;
    stats.prep_cut_short = ps.cut_short;
    stats.classes_after_prep = p.num_classes();
    stats.nodes_after_prep = p.num_nodes();
    stats.phases.prep = split();

    // A first incumbent: the greedy DAG extraction improved by local search, or the tree
    // extraction (linearithmic, never cut short) if it is cheaper or the deadline stops
    // the DAG greedy. Local search (incremental, see `local.rs`) costs little next to the
    // ascent it can save: where the e-graph has multi-result nodes that pay off only when
    // shared, the greedy prices each reader alone and misses them, and one move fixes each.
    let mut walk = Walk::default();
    let tree = greedy_tree(&p, &p.cost);
    let dag = greedy_dag(&p, &p.cost, Some(t_frac(0.1)));
    stats.greedy_tree_cost = induced(&p, &tree, &mut walk).unwrap_or(f64::INFINITY);
    stats.greedy_dag_cost = dag.as_ref().and_then(|ch| induced(&p, ch, &mut walk)).unwrap_or(f64::INFINITY);
    stats.phases.greedy = split();
    // The first of the three candidates below, improved now: improving it again there
    // would change nothing (it is a local optimum, or the same deadline has passed).
    let mut cand0 = dag.unwrap_or_else(|| tree.clone());
    let cand0_cost = crate::local::improve(&p, &mut cand0, opts.rel_tol, t_frac(0.1));
    stats.phases.local_search = split();
    let first = if cand0_cost <= stats.greedy_tree_cost { &cand0 } else { &tree };
    let mut inc = match to_original(&p, first, &mut walk) {
        Some(choices) => Incumbent { cost: cost_of(g, &choices), choices },
        // Unreachable: both greedy maps of a reduced problem are acyclic.
        None => return Err(ExtractError::Infeasible(g.class_name(g.roots()[0]).into())),
    };

    // The path bound: often decisive on chain-like graphs, which the relaxation handles
    // badly when cycles offer free shortcuts.
    let below = path_bounds(&p);
    stats.path_bound = p.roots.iter().map(|&r| below[r as usize]).fold(0.0, f64::max);
    stats.phases.path_bound = split();
    if stats.path_bound >= inc.cost - tol_of(inc.cost) {
        stats.local_search_cost = inc.cost;
        return Ok(finish(inc, true, 0.0, 0, start, stats));
    }
    if Instant::now() >= deadline {
        stats.local_search_cost = inc.cost;
        return Ok(finish(inc, false, 0.0, 0, start, stats));
    }

    // The relaxation, and a short ascent against the first incumbent. Where the greedy
    // extraction is optimal and the relaxation tight (the compiler's e-graphs), this is
    // the proof, before any improvement is paid for. Otherwise the ascent starts again
    // below, aiming at the improved incumbent.
    let rel = Relaxation::new(&p, &mand, Some(t_frac(0.25)));
    drop(mand);
    let mut quick = rel.zero(&p);
    let mut ascent = Ascent::new(&quick);
    let first_cost = inc.cost;
    rel.resume(&p, &mut ascent, &mut quick, first_cost, first_cost - tol_of(first_cost), QUICK_ASCENT_STEPS, t_frac(0.15));
    stats.root_bound = quick.bound;
    stats.phases.relaxation = split();
    if quick.bound >= inc.cost - tol_of(inc.cost) {
        stats.local_search_cost = inc.cost;
        return Ok(finish(inc, true, quick.bound, 0, start, stats));
    }
    if Instant::now() >= deadline {
        stats.local_search_cost = inc.cost;
        return Ok(finish(inc, false, quick.bound, 0, start, stats));
    }

    // Incumbent: the best of the three greedy extractions, each improved by local search.
    // `best` is the incumbent's choice map over `p`.
    let fixpoint = greedy_dag_fixpoint(&p, t_frac(0.1));
    stats.greedy_fixpoint_cost = induced(&p, &fixpoint, &mut walk).unwrap_or(f64::INFINITY);
    let mut cands = [cand0, tree, fixpoint];
    stats.phases.greedy += split();
    let mut best_k = 0;
    let mut best_cost = f64::INFINITY;
    for (k, ch) in cands.iter_mut().enumerate() {
        let v = if k == 0 { cand0_cost } else { crate::local::improve(&p, ch, opts.rel_tol, t_frac(0.1)) };
        if k == 0 || v < best_cost - tol_of(best_cost) {
            best_k = k;
            best_cost = v;
        }
    }
    let mut best = std::mem::take(&mut cands[best_k]);
    inc = match to_original(&p, &best, &mut walk) {
        Some(choices) => Incumbent { cost: cost_of(g, &choices), choices },
        None => return Err(ExtractError::Infeasible(g.class_name(g.roots()[0]).into())),
    };
    stats.local_search_cost = inc.cost;
    stats.phases.local_search += split();
    if stats.path_bound.max(quick.bound) >= inc.cost - tol_of(inc.cost) {
        return Ok(finish(inc, true, 0.0, 0, start, stats));
    }

    // The bound on the whole problem: the short ascent continued if it aimed at this
    // incumbent's cost (same steps as one long ascent), else a new one aiming lower.
    let dual = if inc.cost == first_cost {
        rel.resume(&p, &mut ascent, &mut quick, inc.cost, inc.cost - tol_of(inc.cost), usize::MAX, t_frac(0.25));
        quick.clone()
    } else {
        let mut d = rel.zero(&p);
        rel.ascend(&p, &mut d, inc.cost, inc.cost - tol_of(inc.cost), usize::MAX, t_frac(0.25));
        d
    };
    stats.root_bound = dual.bound.max(quick.bound);
    stats.phases.relaxation += split();

    if dual.bound < inc.cost - tol_of(inc.cost) {
        for mut ch in lagrangian_candidates(&p, &dual, t_frac(0.3)) {
            if crate::local::improve(&p, &mut ch, opts.rel_tol, t_frac(0.3)).is_finite() {
                if let Some(choices) = to_original(&p, &ch, &mut walk) {
                    let cost = cost_of(g, &choices);
                    if cost < inc.cost - tol_of(inc.cost) {
                        inc = Incumbent { choices, cost };
                        best = ch;
                    }
                }
            }
        }
    }
    stats.lagrangian_heuristic_cost = inc.cost;
    stats.phases.heuristic = split();
    let mut lower = stats.root_bound.max(stats.path_bound).min(inc.cost);
    let mut optimal = lower >= inc.cost - tol_of(inc.cost);
    let mut nodes_explored = 0;

    // Classes and nodes of `p` by original id, to carry incumbents found on reduced
    // problems back into `best`.
    let mut p_class = vec![u32::MAX; g.num_classes()];
    for (c, oc) in p.orig_class.iter().enumerate() {
        p_class[oc.index()] = c as u32;
    }
    let mut p_node = vec![u32::MAX; g.num_nodes()];
    for (n, on) in p.orig_node.iter().enumerate() {
        p_node[on.index()] = n as u32;
    }
    let sync = |inc: &Incumbent, best: &mut [u32]| {
        for &(c, n) in &inc.choices {
            best[p_class[c.index()] as usize] = p_node[n.index()];
        }
    };
    let lns_until = |until: Instant, best: &mut Vec<u32>, inc: &mut Incumbent, walk: &mut Walk, stats: &mut Stats| -> (u64, bool) {
        sync(inc, best);
        let mut search = Search::new(&p, &rel, &dual, Branching::LargestRegret);
        let mut ls = crate::lns::LnsStats::default();
        crate::lns::run(&p, &mut search, best, inc.cost, opts.rel_tol, until, &mut ls);
        stats.lns_rounds += ls.rounds;
        stats.lns_improvements += ls.improvements;
        merge(&p, g, &[], best, inc, walk);
        (ls.nodes, ls.proven)
    };

    if !optimal && opts.quick_search_nodes > 0 {
        // A short complete search settles small problems.
        let mut search = Search::new(&p, &rel, &dual, Branching::FewestNodes);
        let out = search.run(inc.cost, tol_of(inc.cost), deadline, opts.quick_search_nodes, None);
        nodes_explored += out.nodes;
        if let Some((sel, _)) = &out.best {
            merge(&p, g, sel, &mut best, &mut inc, &mut walk);
        }
        optimal = out.complete;
    }
    stats.phases.quick_search = split();
    if !optimal && opts.lns {
        let (nodes, proven) = lns_until(t_frac(0.5), &mut best, &mut inc, &mut walk, &mut stats);
        nodes_explored += nodes;
        optimal = proven || lower >= inc.cost - tol_of(inc.cost);
    }
    stats.phases.lns = split();

    // Rounds of fixing against the incumbent (by reduced cost and by paths) and of the
    // bound on what is left, warm-started.
    let mut q = p.clone();
    let mut qrel = rel.clone();
    let mut qdual = dual.clone();
    let mut round = 0;
    while !optimal && round < 5 && Instant::now() < t_frac(0.75) {
        round += 1;
        let ub = inc.cost - tol_of(inc.cost);
        let warm = qrel.export(&q, &qdual);
        let fixed = fix_by_reduced_cost(&q, &qrel, &qdual, ub).and_then(|r| fix_by_paths(&r, ub)).and_then(|r| reduce(r, &mut ps, Some(t_frac(0.75))));
        let qmand = match fixed {
            Ok((r, m)) => {
                stats.fixed_nodes_removed += q.num_nodes().saturating_sub(r.num_nodes());
                q = r;
                m
            }
            Err(_) => {
                // Nothing cheaper than the incumbent remains.
                optimal = true;
                break;
            }
        };
        qrel = Relaxation::new(&q, &qmand, Some(t_frac(0.75)));
        qdual = qrel.warm(&q, &warm);
        qrel.ascend(&q, &mut qdual, inc.cost, inc.cost - tol_of(inc.cost), usize::MAX, t_frac(0.5 + 0.05 * round as f64));
        // `q` keeps every extraction cheaper than the incumbent by more than the
        // tolerance, so its bound (capped by the incumbent) bounds the optimum.
        lower = lower.max(qdual.bound.min(inc.cost));
        for mut ch in lagrangian_candidates(&q, &qdual, t_frac(0.75)) {
            crate::local::improve(&q, &mut ch, opts.rel_tol, t_frac(0.75));
            if let Some(choices) = to_original(&q, &ch, &mut walk) {
                let cost = cost_of(g, &choices);
                if cost < inc.cost - tol_of(inc.cost) {
                    inc = Incumbent { choices, cost };
                }
            }
        }
        optimal = qdual.bound >= inc.cost - tol_of(inc.cost);
    }
    stats.phases.fixing = split();

    // Complete searches with rising targets: one below `target` that finds nothing proves
    // the bound `target - tol`; when the relaxation is tight this settles a problem long
    // before a search below the incumbent would. If even the first target is out of reach,
    // the rest of the time goes to the neighbourhood search.
    if !optimal {
        stats.ms_before_search = start.elapsed().as_secs_f64() * 1e3;
        let mut search = Search::new(&q, &qrel, &qdual, Branching::FewestNodes);
        let tol = tol_of(inc.cost);
        for (i, frac) in [0.002, 0.02, 0.1, 0.3, 1.0].into_iter().enumerate() {
            let full = frac >= 1.0;
            let target = if full { inc.cost } else { lower + frac * (inc.cost - lower) };
            let now = Instant::now();
            let share = if i == 0 { 4 } else { 3 };
            let stop = if full { deadline } else { now + deadline.saturating_duration_since(now) / share };
            let out = search.run(target, tol, stop, u64::MAX, None);
            nodes_explored += out.nodes;
            let found = out.best.is_some();
            if let Some((sel, _)) = out.best {
                let mut ch: Vec<(ClassId, NodeId)> = sel.iter().enumerate().filter(|&(_, &n)| n != u32::MAX).map(|(c, &n)| (q.orig_class[c], q.orig_node[n as usize])).collect();
                ch.sort_unstable();
                let cost = cost_of(g, &ch);
                if cost < inc.cost {
                    inc = Incumbent { choices: ch, cost };
                }
            }
            if out.complete {
                if found || full {
                    optimal = true;
                    break;
                }
                lower = lower.max(target - tol);
            } else if i == 0 && opts.lns {
                let (nodes, proven) = lns_until(deadline, &mut best, &mut inc, &mut walk, &mut stats);
                nodes_explored += nodes;
                optimal = proven || lower >= inc.cost - tol_of(inc.cost);
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
        }
    }
    stats.phases.final_search = split();
    Ok(finish(inc, optimal, lower, nodes_explored, start, stats))
}

fn finish(inc: Incumbent, optimal: bool, lower: f64, nodes_explored: u64, start: Instant, mut stats: Stats) -> Extraction {
    if stats.ms_before_search == 0.0 {
        stats.ms_before_search = start.elapsed().as_secs_f64() * 1e3;
    }
    let lower_bound = if optimal { inc.cost } else { lower.max(stats.path_bound).min(inc.cost) };
    Extraction { choices: inc.choices, dag_cost: inc.cost, lower_bound, optimal, nodes_explored, elapsed: start.elapsed(), stats }
}

/// Copies the choices of `sel` (an extraction over `p`, `u32::MAX` elsewhere) into the
/// choice map `best`, and makes the extraction `best` induces the incumbent if cheaper.
fn merge(p: &Problem, g: &EGraph, sel: &[u32], best: &mut [u32], inc: &mut Incumbent, walk: &mut Walk) {
    for (c, &n) in sel.iter().enumerate() {
        if n != u32::MAX {
            best[c] = n;
        }
    }
    if let Some(choices) = to_original(p, best, walk) {
        let cost = cost_of(g, &choices);
        if cost < inc.cost {
            *inc = Incumbent { choices, cost };
        }
    }
}

/// `q` without the nodes whose Lagrangian bound, with the node forced in, reaches `ub`:
/// forcing `n` replaces its class's term by `r_n` and makes its child classes needed.
pub(crate) fn fix_by_reduced_cost(q: &Problem, rel: &Relaxation, d: &Dual, ub: f64) -> Result<Problem, Infeasible> {
    let mut keep = vec![true; q.num_nodes()];
    for (n, k) in keep.iter_mut().enumerate() {
        let c = q.node_class[n] as usize;
        let own = if rel.always[c] { d.minr[c] } else { d.minr[c].min(0.0) };
        let mut lb = d.bound - own + d.red[n];
        for &e in q.kids(n) {
            if !rel.always[e as usize] {
                lb += d.minr[e as usize].max(0.0);
            }
        }
        if lb >= ub {
            *k = false;
        }
    }
    q.retain(&keep)
}

/// Choice maps suggested by the multipliers (a Lagrangian heuristic): each class's
/// node of least reduced cost (possibly cyclic), and the greedy DAG extraction that
/// prices nodes by how much their reduced cost exceeds their class's least one.
fn lagrangian_candidates(p: &Problem, d: &Dual, deadline: Instant) -> Vec<Vec<u32>> {
    let argmin: Vec<u32> = (0..p.num_classes()).map(|c| p.nodes_of(c).min_by(|&a, &b| d.red[a].total_cmp(&d.red[b])).map_or(u32::MAX, |n| n as u32)).collect();
    // A small share of the true cost breaks ties among nodes of equal reduced cost.
    let price: Vec<f64> = (0..p.num_nodes()).map(|n| (d.red[n] - d.minr[p.node_class[n] as usize]).max(0.0) + 1e-3 * p.cost[n]).collect();
    let mut out = vec![argmin];
    out.extend(greedy_dag(p, &price, Some(deadline)));
    out
}

/// `q` without the nodes that cannot be in an extraction cheaper than `ub` by the path
/// bounds: the classes above the node's class ([`ancestor_bounds`]), the node, and the most
/// expensive child's extraction ([`path_bounds`]) are disjoint parts of any extraction
/// using it.
pub(crate) fn fix_by_paths(q: &Problem, ub: f64) -> Result<Problem, Infeasible> {
    let below = path_bounds(q);
    let above = ancestor_bounds(q);
    let keep: Vec<bool> = (0..q.num_nodes())
        .map(|n| {
            let deepest = q.kids(n).iter().map(|&d| below[d as usize]).fold(0.0, f64::max);
            above[q.node_class[n] as usize] + q.cost[n] + deepest < ub
        })
        .collect();
    q.retain(&keep)
}
