//! Local search on a total choice map (a node for every class; the extraction is what the
//! roots reach). A move switches one extracted class to another of its nodes; classes
//! that become needed keep the node the map already gives them. A move is kept when the
//! induced extraction stays acyclic and gets cheaper by more than the tolerance. Passes
//! repeat until none improves or the deadline passes.

use crate::greedy::Walk;
use crate::problem::Problem;
use std::time::Instant;

/// Improves `choice` in place; returns the cost of its induced extraction.
pub(crate) fn improve(p: &Problem, choice: &mut [u32], rel_tol: f64, deadline: Instant) -> f64 {
    let mut walk = Walk::default();
    let Some(mut cur) = walk_cost(p, choice, &mut walk) else {
        return f64::INFINITY;
    };
    let mut classes: Vec<u32> = Vec::new();
    loop {
        let mut improved = false;
        classes.clear();
        classes.extend_from_slice(&walk.order);
        for &c in &classes {
            if Instant::now() >= deadline {
                return cur;
            }
            let c = c as usize;
            let old = choice[c];
            for n in p.nodes_of(c) {
                if n as u32 == old {
                    continue;
                }
                choice[c] = n as u32;
                match walk_cost(p, choice, &mut walk) {
                    Some(v) if v < cur - rel_tol * cur.abs() => {
                        cur = v;
                        improved = true;
                        break;
                    }
                    _ => choice[c] = old,
                }
            }
        }
        if !improved {
            // Leave `walk.order` describing the final extraction.
            let _ = walk_cost(p, choice, &mut walk);
            return cur;
        }
    }
}

fn walk_cost(p: &Problem, choice: &[u32], walk: &mut Walk) -> Option<f64> {
    crate::greedy::induced(p, choice, walk)
}
