//! The packing problem: buffers with live intervals and sizes, and packings of them.

use crate::PackError;
use std::collections::HashSet;

/// One buffer to place.
///
/// The buffer is live on the half-open interval `[lower, upper)`: two buffers conflict
/// (must occupy disjoint bytes) iff `a.lower < b.upper && b.lower < a.upper`. A buffer
/// ending at `t` and one starting at `t` do not conflict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// A unique name (kept for I/O; the solver identifies buffers by index).
    pub id: String,
    /// First time step at which the buffer is live.
    pub lower: i64,
    /// First time step at which the buffer is no longer live (`upper > lower`).
    pub upper: i64,
    /// Bytes occupied, `[offset, offset + size)`. A zero-size buffer occupies nothing and
    /// conflicts with nothing (it is placed at offset 0).
    pub size: u64,
    /// The offset must be a multiple of this (≥ 1; 1 = no constraint).
    pub alignment: u64,
    /// A suggested offset, tried by the warm start; never a constraint.
    pub hint: Option<u64>,
}

impl Buffer {
    /// A buffer live on `[lower, upper)` with `size` bytes, alignment 1 and no hint.
    pub fn new(id: impl Into<String>, lower: i64, upper: i64, size: u64) -> Self {
        Buffer { id: id.into(), lower, upper, size, alignment: 1, hint: None }
    }

    /// Whether the two live intervals overlap (and so the byte ranges must not).
    pub fn overlaps_in_time(&self, other: &Buffer) -> bool {
        self.lower < other.upper && other.lower < self.upper
    }

    /// `size × (upper − lower)`, saturating.
    pub fn area(&self) -> u128 {
        self.size as u128 * self.upper.abs_diff(self.lower) as u128
    }
}

/// A checked list of buffers: intervals non-empty, alignments ≥ 1, ids unique, and all
/// sizes (padded by their alignment) summing below 2^62 so that no offset arithmetic in
/// the solvers can overflow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    buffers: Vec<Buffer>,
}

/// The bound on `Σ (size + alignment − 1)` (keeps all sums of offsets and sizes in `u64`).
pub const MAX_TOTAL_BYTES: u64 = 1 << 62;

impl Problem {
    /// Checks the buffers and builds the problem.
    pub fn new(buffers: Vec<Buffer>) -> Result<Self, PackError> {
        let mut ids = HashSet::with_capacity(buffers.len());
        let mut total: u64 = 0;
        for (index, b) in buffers.iter().enumerate() {
            if b.lower >= b.upper {
                return Err(PackError::EmptyInterval { id: b.id.clone(), lower: b.lower, upper: b.upper });
            }
            if b.alignment == 0 {
                return Err(PackError::ZeroAlignment { id: b.id.clone() });
            }
            if !ids.insert(b.id.as_str()) {
                return Err(PackError::DuplicateId { id: b.id.clone(), index });
            }
            total = total.checked_add(b.size).and_then(|t| t.checked_add(b.alignment - 1)).filter(|&t| t < MAX_TOTAL_BYTES).ok_or(PackError::TooLarge)?;
        }
        Ok(Problem { buffers })
    }

    /// The buffers, in input order (solutions index into this list).
    pub fn buffers(&self) -> &[Buffer] {
        &self.buffers
    }

    /// Number of buffers.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// Whether there are no buffers.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// The largest total size of buffers live at one instant: no packing is lower.
    /// (Conflicting buffers stack, and buffers live at a common instant all conflict.)
    pub fn max_live_bytes(&self) -> u64 {
        let mut events: Vec<(i64, bool, u64)> = Vec::with_capacity(2 * self.buffers.len());
        for b in &self.buffers {
            events.push((b.lower, true, b.size));
            events.push((b.upper, false, b.size));
        }
        // At equal times, ends (false) sort before starts (true): intervals are half-open.
        events.sort_unstable();
        let (mut live, mut best) = (0u64, 0u64);
        for (_, start, size) in events {
            if start {
                live += size;
                best = best.max(live);
            } else {
                live -= size;
            }
        }
        best
    }
}

/// Offsets for every buffer of a problem, in the problem's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solution {
    /// `offsets[i]` is where buffer `i` starts.
    pub offsets: Vec<u64>,
    /// `max(offset + size)` over all buffers (0 for no buffers).
    pub height: u64,
}

impl Solution {
    /// A solution from offsets, computing its height. `offsets` must have one entry per
    /// buffer (checked by [`crate::validate`], not here).
    pub fn from_offsets(problem: &Problem, offsets: Vec<u64>) -> Self {
        let height = problem.buffers().iter().zip(&offsets).map(|(b, &o)| o.saturating_add(b.size)).max().unwrap_or(0);
        Solution { offsets, height }
    }
}
