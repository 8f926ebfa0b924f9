//! N-d strided gather into a contiguous buffer (permute, slice, broadcast materialization).

use crate::par::{for_ranges, SyncPtr};
use crate::KernelError;

/// Copies the strided view `src[src_offset + Σ i_d · src_strides[d]]`, for every index `i` of
/// `shape` in row-major order, into the contiguous `dst` (`dst.len() == shape.iter().product()`).
///
/// Strides are in elements and may be zero (broadcast) or negative (reversal). Dimensions of
/// size 1 are ignored and dimensions that are contiguous with respect to each other are merged,
/// so e.g. a slice of whole rows is a single `memcpy` per block. When the innermost remaining
/// stride is 1 each inner run is copied with `copy_from_slice`; stride 0 fills. Every element
/// the view reaches must lie inside `src`; otherwise (or on a rank mismatch) an error is
/// returned and `dst` is untouched.
pub fn copy_strided_f32(
    src: &[f32],
    shape: &[usize],
    src_strides: &[isize],
    src_offset: usize,
    dst: &mut [f32],
) -> Result<(), KernelError> {
    if shape.len() != src_strides.len() {
        return Err(KernelError::Shape(format!(
            "copy_strided_f32: shape has rank {} but strides have {}",
            shape.len(),
            src_strides.len()
        )));
    }
    let total = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or(KernelError::Overflow("copy_strided_f32: element count"))?;
    crate::check_len("copy_strided_f32: dst", total, dst.len())?;
    if total == 0 {
        return Ok(());
    }
    // Reachable offsets, in i128 so no combination of inputs can overflow.
    let (mut lo, mut hi) = (src_offset as i128, src_offset as i128);
    for (&d, &s) in shape.iter().zip(src_strides) {
        let span = (d as i128 - 1) * s as i128;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    if lo < 0 || hi >= src.len() as i128 {
        return Err(KernelError::Shape(format!(
            "copy_strided_f32: view reaches offsets {lo}..={hi} but the source holds {} elements",
            src.len()
        )));
    }

    // Drop unit dimensions, then merge neighbours that are contiguous in the source.
    let mut dims: Vec<(usize, isize)> = Vec::with_capacity(shape.len());
    for (&d, &s) in shape.iter().zip(src_strides) {
        if d == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == s * d as isize => *last = (last.0 * d, s),
            _ => dims.push((d, s)),
        }
    }
    let (inner, inner_stride) = dims.pop().unwrap_or((1, 1));
    let outer: Vec<(usize, isize)> = dims;
    let rows = total / inner;

    let (sp, dp) = (SyncPtr(src.as_ptr() as *mut f32), SyncPtr(dst.as_mut_ptr()));
    for_ranges(rows, (1 << 15) / inner, 1, |range| {
        // Multi-index of the first row in `range` (row-major over `outer`).
        let mut idx = vec![0usize; outer.len()];
        let mut rem = range.start;
        for (k, &(d, _)) in outer.iter().enumerate().rev() {
            idx[k] = rem % d;
            rem /= d;
        }
        let mut off: isize =
            src_offset as isize + outer.iter().zip(&idx).map(|(&(_, s), &i)| s * i as isize).sum::<isize>();
        for row in range {
            // SAFETY: every offset was bounds-checked above; rows of `dst` are disjoint per task.
            unsafe {
                let d = dp.get().add(row * inner);
                let s = sp.get().offset(off);
                match inner_stride {
                    1 => std::ptr::copy_nonoverlapping(s, d, inner),
                    0 => std::slice::from_raw_parts_mut(d, inner).fill(*s),
                    st => {
                        for j in 0..inner {
                            *d.add(j) = *s.offset(j as isize * st);
                        }
                    }
                }
            }
            // Advance the odometer.
            for k in (0..outer.len()).rev() {
                idx[k] += 1;
                off += outer[k].1;
                if idx[k] < outer[k].0 {
                    break;
                }
                off -= outer[k].1 * outer[k].0 as isize;
                idx[k] = 0;
            }
        }
    });
    Ok(())
}
