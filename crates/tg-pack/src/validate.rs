//! An independent check of a packing. It knows nothing of the solvers: it rechecks every
//! offset against the problem's definition alone.

use crate::{Problem, Solution};

/// Why a packing is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The solution has a different number of offsets than the problem has buffers.
    #[error("{offsets} offsets for {buffers} buffers")]
    Count {
        /// Offsets in the solution.
        offsets: usize,
        /// Buffers in the problem.
        buffers: usize,
    },
    /// An offset is not a multiple of the buffer's alignment.
    #[error("buffer `{id}`: offset {offset} is not a multiple of its alignment {alignment}")]
    Misaligned {
        /// The buffer.
        id: String,
        /// Its offset.
        offset: u64,
        /// Its alignment.
        alignment: u64,
    },
    /// A buffer ends above the capacity.
    #[error("buffer `{id}`: [{offset}, {offset}+{size}) exceeds the capacity {capacity}")]
    OutOfBounds {
        /// The buffer.
        id: String,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// The capacity.
        capacity: u64,
    },
    /// Two buffers live at the same time share bytes.
    #[error("buffers `{a}` and `{b}` are live together and overlap in memory")]
    Overlap {
        /// One buffer.
        a: String,
        /// The other.
        b: String,
    },
    /// The reported height is not `max(offset + size)`.
    #[error("reported height {reported}, actual {actual}")]
    Height {
        /// `Solution::height`.
        reported: u64,
        /// The recomputed height.
        actual: u64,
    },
}

/// Checks that `solution` places every buffer of `problem` aligned, inside
/// `[0, capacity)`, without two time-overlapping buffers sharing a byte, and that its
/// height is exact. Returns the first violation found.
pub fn validate(problem: &Problem, solution: &Solution, capacity: u64) -> Result<(), Invalid> {
    let bufs = problem.buffers();
    if solution.offsets.len() != bufs.len() {
        return Err(Invalid::Count { offsets: solution.offsets.len(), buffers: bufs.len() });
    }
    let mut actual = 0u64;
    for (b, &offset) in bufs.iter().zip(&solution.offsets) {
        if offset % b.alignment != 0 {
            return Err(Invalid::Misaligned { id: b.id.clone(), offset, alignment: b.alignment });
        }
        let end = offset.checked_add(b.size);
        match end {
            Some(end) if end <= capacity => actual = actual.max(end),
            _ => {
                return Err(Invalid::OutOfBounds { id: b.id.clone(), offset, size: b.size, capacity });
            }
        }
    }
    if actual != solution.height {
        return Err(Invalid::Height { reported: solution.height, actual });
    }
    // Pairs that overlap in time: sort by start, and for each buffer look at the ones
    // that start before it ends.
    let mut order: Vec<usize> = (0..bufs.len()).collect();
    order.sort_by_key(|&i| bufs[i].lower);
    for (k, &i) in order.iter().enumerate() {
        let (bi, oi) = (&bufs[i], solution.offsets[i]);
        for &j in &order[k + 1..] {
            let (bj, oj) = (&bufs[j], solution.offsets[j]);
            if bj.lower >= bi.upper {
                break;
            }
            // Live together (bj starts in [bi.lower, bi.upper)); bytes must be disjoint.
            // Empty ranges (size 0) overlap nothing.
            if bi.size > 0 && bj.size > 0 && oi < oj + bj.size && oj < oi + bi.size {
                return Err(Invalid::Overlap { a: bi.id.clone(), b: bj.id.clone() });
            }
        }
    }
    Ok(())
}
