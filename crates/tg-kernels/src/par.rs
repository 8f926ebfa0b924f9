//! Work splitting helpers on top of rayon.

use std::ops::Range;

use rayon::prelude::*;

/// Threads of the current rayon pool (the one the caller `install`ed, or the global pool).
#[inline]
pub(crate) fn threads() -> usize {
    rayon::current_num_threads()
}

/// How many tasks to split `units` of work into: 1 on a single thread or when there is less
/// than two tasks' worth (`min_units` each), otherwise at most `4 ×` threads.
#[inline]
pub(crate) fn task_count(units: usize, min_units: usize) -> usize {
    let t = threads();
    if t <= 1 {
        return 1;
    }
    (units / min_units.max(1)).clamp(1, 4 * t)
}

/// Calls `f` on contiguous sub-ranges covering `0..units`, in parallel when worthwhile.
/// Sub-range boundaries are multiples of `align` (except the end).
pub(crate) fn for_ranges<F>(units: usize, min_units: usize, align: usize, f: F)
where
    F: Fn(Range<usize>) + Sync,
{
    let align = align.max(1);
    let blocks = units.div_ceil(align);
    let tasks = task_count(units, min_units.max(align)).min(blocks.max(1));
    if tasks <= 1 {
        f(0..units);
        return;
    }
    (0..tasks).into_par_iter().for_each(|t| {
        let lo = (blocks * t / tasks * align).min(units);
        let hi = (blocks * (t + 1) / tasks * align).min(units);
        if lo < hi {
            f(lo..hi);
        }
    });
}

/// A raw pointer that may be shared between threads writing disjoint parts of one buffer.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr<T>(pub *mut T);
// SAFETY: only used to write provably disjoint regions from different tasks.
unsafe impl<T> Send for SyncPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    /// The pointer (a method, so closures capture the `Sync` wrapper, not the raw field).
    #[inline(always)]
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}
