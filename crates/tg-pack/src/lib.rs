//! Static memory packing for Tensor Graphs (the planner's offsets, decision 5 of
//! `docs/planner.md`), after MiniMalloc (Moffitt, ASPLOS 2023).
//!
//! Buffers have a half-open live interval `[lower, upper)` and a size; buffers live at
//! the same time must get disjoint byte ranges `[offset, offset + size)`, all inside
//! `[0, capacity)`. [`solve`] finds such offsets (or proves there are none), and
//! [`minimize`] finds the lowest *height* (`max(offset + size)`). Both are anytime:
//! greedy heuristics answer in milliseconds, then an exact branch and bound over
//! canonical packings decides within the [`Limits`]. [`validate`] rechecks any packing
//! independently, and [`parse_csv`] / [`write_csv`] speak MiniMalloc's CSV format.
//!
//! ```
//! use tg_pack::{minimize, solve, validate, Buffer, Limits, Problem, Verdict};
//! let problem = Problem::new(vec![
//!     Buffer::new("b1", 0, 3, 4),
//!     Buffer::new("b2", 3, 9, 4),
//!     Buffer::new("b3", 0, 9, 4),
//!     Buffer::new("b4", 9, 21, 4),
//!     Buffer::new("b5", 0, 21, 4),
//! ])
//! .unwrap();
//! let out = solve(&problem, 12, &Limits::none()).unwrap();
//! let Verdict::Feasible(sol) = &out.verdict else { panic!("fits in 12") };
//! validate(&problem, sol, 12).unwrap();
//! assert_eq!(solve(&problem, 11, &Limits::none()).unwrap().verdict, Verdict::Infeasible);
//! let best = minimize(&problem, u64::MAX, &Limits::none()).unwrap();
//! assert!(best.optimal);
//! assert_eq!(best.solution().unwrap().height, 12);
//! ```

#![warn(missing_docs)]

mod csv;
mod greedy;
mod prep;
mod problem;
mod search;
mod solve;
mod validate;

pub use csv::{parse_csv, write_csv, CsvError, CsvInput};
pub use problem::{Buffer, Problem, Solution, MAX_TOTAL_BYTES};
pub use solve::{minimize, solve, solve_exact, Limits, Outcome, Stats, Verdict};
pub use validate::{validate, Invalid};

/// Errors of problem construction and of the solvers.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// `lower ≥ upper`.
    #[error("buffer `{id}`: lower {lower} must be below upper {upper} (the interval is [lower, upper))")]
    EmptyInterval {
        /// The buffer.
        id: String,
        /// Its start.
        lower: i64,
        /// Its (exclusive) end.
        upper: i64,
    },
    /// An alignment of 0.
    #[error("buffer `{id}`: alignment 0 (use 1 for none)")]
    ZeroAlignment {
        /// The buffer.
        id: String,
    },
    /// Two buffers with one id.
    #[error("duplicate id `{id}` (buffer {index})")]
    DuplicateId {
        /// The id.
        id: String,
        /// Index of the second occurrence.
        index: usize,
    },
    /// The sizes (with alignment padding) add up to 2^62 bytes or more.
    #[error("the buffers' sizes add up to 2^62 bytes or more")]
    TooLarge,
    /// A solver produced a packing the validator rejects (a bug; please report).
    #[error("internal error: the solver produced an invalid packing: {0}")]
    Internal(Invalid),
    /// The search thread for a large problem could not be started.
    #[error("cannot start the search thread: {0}")]
    Thread(std::io::Error),
}

impl PartialEq for PackError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for PackError {}

impl Clone for PackError {
    fn clone(&self) -> Self {
        match self {
            PackError::EmptyInterval { id, lower, upper } => PackError::EmptyInterval { id: id.clone(), lower: *lower, upper: *upper },
            PackError::ZeroAlignment { id } => PackError::ZeroAlignment { id: id.clone() },
            PackError::DuplicateId { id, index } => PackError::DuplicateId { id: id.clone(), index: *index },
            PackError::TooLarge => PackError::TooLarge,
            PackError::Internal(e) => PackError::Internal(e.clone()),
            PackError::Thread(e) => PackError::Thread(std::io::Error::new(e.kind(), e.to_string())),
        }
    }
}
