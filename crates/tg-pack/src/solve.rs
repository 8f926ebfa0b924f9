//! The entry points: [`solve`] (fit under a capacity) and [`minimize`] (lowest height).

use crate::prep::Prep;
use crate::search::{Engine, Res};
use crate::{greedy, validate, PackError, Problem, Solution};
use std::time::{Duration, Instant};

/// When to give up.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// Wall-clock limit for the whole call (heuristics, search and all probes).
    pub time: Option<Duration>,
    /// Limit on search nodes, summed over restarts and probes.
    pub nodes: Option<u64>,
}

impl Limits {
    /// No limit: the search runs until it decides.
    pub fn none() -> Self {
        Limits::default()
    }

    /// A time limit only.
    pub fn time(limit: Duration) -> Self {
        Limits { time: Some(limit), nodes: None }
    }
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A packing within the capacity.
    Feasible(Solution),
    /// Proven: no packing fits within the capacity.
    Infeasible,
    /// A limit ran out before the search decided.
    Unknown {
        /// The lowest complete packing found, which exceeds the capacity.
        best: Option<Solution>,
    },
}

/// Counters of one call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Search nodes visited.
    pub nodes: u64,
    /// Search nodes that failed.
    pub backtracks: u64,
    /// Search runs started (the restart schedule, over all probes).
    pub attempts: u32,
    /// Capacities probed by the exact search.
    pub probes: u32,
    /// Height of the best heuristic packing (0 for no buffers).
    pub heuristic_height: u64,
    /// Which heuristic produced it.
    pub heuristic: String,
    /// Time spent in the heuristics.
    pub heuristic_time: Duration,
    /// Whole call.
    pub elapsed: Duration,
}

/// Result of [`solve`] or [`minimize`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Feasible, infeasible or undecided.
    pub verdict: Verdict,
    /// Proven: no packing is lower than this.
    pub lower_bound: u64,
    /// The packing's height is proven minimal.
    pub optimal: bool,
    /// Counters.
    pub stats: Stats,
}

impl Outcome {
    /// The packing, if one was found (for `Unknown`, the best one above the capacity).
    pub fn solution(&self) -> Option<&Solution> {
        match &self.verdict {
            Verdict::Feasible(s) => Some(s),
            Verdict::Unknown { best } => best.as_ref(),
            Verdict::Infeasible => None,
        }
    }
}

/// Shared state of one call.
struct Ctx<'a> {
    problem: &'a Problem,
    prep: Prep,
    start: Instant,
    deadline: Option<Instant>,
    node_limit: u64,
    stats: Stats,
}

impl<'a> Ctx<'a> {
    fn new(problem: &'a Problem, limits: &Limits) -> Self {
        let start = Instant::now();
        Ctx { problem, prep: Prep::new(problem), start, deadline: limits.time.map(|t| start + t), node_limit: limits.nodes.unwrap_or(u64::MAX), stats: Stats::default() }
    }

    /// The best of the hints and the greedy heuristics (checked by the validator).
    fn heuristic(&mut self) -> Result<Solution, PackError> {
        let t = Instant::now();
        let hints: Vec<Option<u64>> = self.prep.orig.iter().map(|&i| self.problem.buffers()[i].hint).collect();
        let (off, _, name) = greedy::best(&self.prep, &hints);
        let sol = Solution::from_offsets(self.problem, self.prep.expand(self.problem.len(), &off));
        validate(self.problem, &sol, u64::MAX).map_err(PackError::Internal)?;
        self.stats.heuristic_height = sol.height;
        self.stats.heuristic = name;
        self.stats.heuristic_time = t.elapsed();
        Ok(sol)
    }

    /// Whether the caller's time or node limit is spent.
    fn exhausted(&self) -> bool {
        self.stats.nodes >= self.node_limit || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Exact search for a packing of height ≤ `cap`, within the caller's limits and at
    /// most `budget` nodes.
    fn probe(&mut self, cap: u64, budget: Option<u64>) -> Result<(Res, Option<Solution>), PackError> {
        let left = self.node_limit.saturating_sub(self.stats.nodes);
        let mut e = Engine::new(&self.prep, cap, self.deadline, budget.map_or(left, |b| b.min(left)));
        let res = run_with_stack(self.prep.n(), || e.run())?;
        self.stats.nodes += e.nodes;
        self.stats.backtracks += e.backtracks;
        self.stats.attempts += e.attempts;
        self.stats.probes += 1;
        let sol = if res == Res::Found {
            let sol = Solution::from_offsets(self.problem, self.prep.expand(self.problem.len(), &e.offsets));
            validate(self.problem, &sol, cap).map_err(PackError::Internal)?;
            Some(sol)
        } else {
            None
        };
        Ok((res, sol))
    }

    fn finish(mut self, verdict: Verdict, lower_bound: u64, optimal: bool) -> Outcome {
        self.stats.elapsed = self.start.elapsed();
        Outcome { verdict, lower_bound, optimal, stats: self.stats }
    }
}

/// Runs `f` on a thread with a stack deep enough for one frame per buffer when the
/// problem is large (the search recurses once per placement).
fn run_with_stack<R: Send>(n: usize, f: impl FnOnce() -> R + Send) -> Result<R, PackError> {
    if n < 1000 {
        return Ok(f());
    }
    let stack = (n * 1024).max(64 << 20);
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new().stack_size(stack).spawn_scoped(s, f).map_err(PackError::Thread)?;
        Ok(handle.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

/// Finds offsets for every buffer such that buffers live at the same time do not share
/// bytes and every buffer ends at or below `capacity`.
///
/// First the hints and greedy heuristics (milliseconds); if none fits, the exact search.
/// The result is `Feasible` (a packing, not necessarily of minimal height),
/// `Infeasible` (proven) or `Unknown` (a limit ran out). Every returned packing has
/// passed [`validate`].
pub fn solve(problem: &Problem, capacity: u64, limits: &Limits) -> Result<Outcome, PackError> {
    let mut ctx = Ctx::new(problem, limits);
    let lb = ctx.prep.max_load();
    if lb > capacity {
        return Ok(ctx.finish(Verdict::Infeasible, lb, false));
    }
    let heur = ctx.heuristic()?;
    if heur.height <= capacity {
        let optimal = heur.height == lb;
        return Ok(ctx.finish(Verdict::Feasible(heur), lb, optimal));
    }
    let (res, sol) = ctx.probe(capacity, None)?;
    Ok(match (res, sol) {
        (Res::Found, Some(sol)) => {
            let optimal = sol.height == lb;
            ctx.finish(Verdict::Feasible(sol), lb, optimal)
        }
        (Res::NotFound, _) => ctx.finish(Verdict::Infeasible, capacity.saturating_add(1), false),
        _ => ctx.finish(Verdict::Unknown { best: Some(heur) }, lb, false),
    })
}

/// The exact search alone, without the heuristics (for testing and measuring it): the
/// same verdicts as [`solve`]; `Unknown` carries no packing.
pub fn solve_exact(problem: &Problem, capacity: u64, limits: &Limits) -> Result<Outcome, PackError> {
    let mut ctx = Ctx::new(problem, limits);
    let lb = ctx.prep.max_load();
    if lb > capacity {
        return Ok(ctx.finish(Verdict::Infeasible, lb, false));
    }
    let (res, sol) = ctx.probe(capacity, None)?;
    Ok(match (res, sol) {
        (Res::Found, Some(sol)) => {
            let optimal = sol.height == lb;
            ctx.finish(Verdict::Feasible(sol), lb, optimal)
        }
        (Res::NotFound, _) => ctx.finish(Verdict::Infeasible, capacity.saturating_add(1), false),
        _ => ctx.finish(Verdict::Unknown { best: None }, lb, false),
    })
}

/// Finds a packing of minimal height, at most `capacity` (pass `u64::MAX` for no bound).
///
/// The lower bound starts at the largest live load; the upper bound at the best
/// heuristic packing, or else at the first packing the exact search finds within the
/// capacity. Then rounds of bisection between the bounds: each probe gets a node
/// budget; a probe that runs out of it counts as "too low" for the rest of the round
/// (so the round still ends with the best packing it can find cheaply), and the next
/// round retries with a budget four times larger. `optimal` says the returned height is
/// proven minimal; when a limit ran out it is `false`, and `lower_bound` is the best
/// proven bound.
pub fn minimize(problem: &Problem, capacity: u64, limits: &Limits) -> Result<Outcome, PackError> {
    let mut ctx = Ctx::new(problem, limits);
    let mut lo = ctx.prep.max_load();
    if lo > capacity {
        return Ok(ctx.finish(Verdict::Infeasible, lo, false));
    }
    let heur = ctx.heuristic()?;
    // Invariant: no packing is lower than `lo`; `best` fits within the capacity.
    let mut best = if heur.height <= capacity {
        heur
    } else {
        match ctx.probe(capacity, None)? {
            (Res::Found, Some(sol)) => sol,
            (Res::NotFound, _) => {
                return Ok(ctx.finish(Verdict::Infeasible, capacity.saturating_add(1), false));
            }
            _ => return Ok(ctx.finish(Verdict::Unknown { best: Some(heur) }, lo, false)),
        }
    };
    let mut budget = 10_000 + 20 * ctx.prep.n() as u64;
    while best.height > lo {
        // One round. Targets below `floor` are proven or given up for this round.
        let mut floor = lo;
        let mut gave_up = false;
        let mut first = true;
        while best.height > floor {
            let hi = best.height - 1;
            // The lower bound is often tight: try it first.
            let target = if first { floor } else { floor + (hi - floor) / 2 };
            first = false;
            match ctx.probe(target, Some(budget))? {
                (Res::Found, Some(sol)) => best = sol,
                (Res::NotFound, _) => {
                    lo = lo.max(target + 1);
                    floor = floor.max(target + 1);
                }
                _ if ctx.exhausted() => return Ok(ctx.finish(Verdict::Feasible(best), lo, false)),
                _ => {
                    gave_up = true;
                    floor = target + 1;
                }
            }
        }
        if !gave_up {
            break;
        }
        budget = budget.saturating_mul(4);
    }
    let optimal = best.height <= lo;
    Ok(ctx.finish(Verdict::Feasible(best), lo, optimal))
}
