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
    let (mut inner, mut inner_stride) = dims.pop().unwrap_or((1, 1));
    // A short broadcast innermost (each element repeated `rep` times: nearest-neighbour
    // upsampling) is copied with the dimension above it as one row, each element written
    // `rep` times, instead of one row of `rep` elements per element.
    let mut rep = 1;
    if inner_stride == 0 && inner <= REPEAT_MAX {
        if let Some((d, s)) = dims.pop() {
            rep = inner;
            (inner, inner_stride) = (d, s);
        }
    }
    let outer: Vec<(usize, isize)> = dims;
    let row_len = inner * rep;
    let rows = total / row_len;
    // A gather whose consecutive rows are closer in the source than consecutive elements of a
    // row (a transpose) copies `TILE` rows at a time, column by column: each step then reads
    // one short run of the source instead of touching a new cache line per element.
    let tile_stride = match outer.last() {
        Some(&(_, s)) if rep == 1 && inner_stride.unsigned_abs() > 1 && s.unsigned_abs() < inner_stride.unsigned_abs() => Some(s),
        _ => None,
    };

    let (sp, dp) = (SyncPtr(src.as_ptr() as *mut f32), SyncPtr(dst.as_mut_ptr()));
    for_ranges(rows, (1 << 15) / row_len, 1, |range| {
        // Multi-index of the first row in `range` (row-major over `outer`).
        let mut idx = vec![0usize; outer.len()];
        let mut rem = range.start;
        for (k, &(d, _)) in outer.iter().enumerate().rev() {
            idx[k] = rem % d;
            rem /= d;
        }
        let mut off: isize =
            src_offset as isize + outer.iter().zip(&idx).map(|(&(_, s), &i)| s * i as isize).sum::<isize>();
        let mut row = range.start;
        while row < range.end {
            // SAFETY (all arms): every offset was bounds-checked above; rows of `dst` are
            // disjoint per task.
            let count = match tile_stride {
                Some(rs) => {
                    let (last_d, last_i) = (outer[outer.len() - 1].0, idx[outer.len() - 1]);
                    let g = TILE.min(range.end - row).min(last_d - last_i);
                    unsafe { copy_tile(sp.get().offset(off), rs, inner_stride, dp.get().add(row * inner), inner, g) };
                    g
                }
                None if rep > 1 => {
                    unsafe { repeat(sp.get().offset(off), inner_stride, dp.get().add(row * row_len), inner, rep) };
                    1
                }
                None => {
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
                    1
                }
            };
            row += count;
            // Advance the odometer by `count` rows.
            for _ in 0..count {
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
        }
    });
    Ok(())
}

/// Rows gathered together by the tiled path.
const TILE: usize = 8;

/// The longest innermost broadcast the repeating path takes (longer ones fill whole runs).
const REPEAT_MAX: usize = 8;

/// `d[j·rep + k] = s[j·st]` for `j < n`, `k < rep`.
///
/// # Safety
/// Every source offset is readable and `d` has room for `n·rep` elements.
#[inline]
unsafe fn repeat(s: *const f32, st: isize, d: *mut f32, n: usize, rep: usize) {
    match (rep, st) {
        // The common case (2× upsampling of a contiguous row), as a loop the compiler
        // vectorizes.
        (2, 1) => {
            let (src, dst) = (std::slice::from_raw_parts(s, n), std::slice::from_raw_parts_mut(d, 2 * n));
            for (pair, &v) in dst.chunks_exact_mut(2).zip(src) {
                pair[0] = v;
                pair[1] = v;
            }
        }
        _ => {
            for j in 0..n {
                let v = *s.offset(j as isize * st);
                for k in 0..rep {
                    *d.add(j * rep + k) = v;
                }
            }
        }
    }
}

/// `d[b·n + j] = s[b·rs + j·cs]` for `b < g`, `j < n` (`g ≤ TILE` rows of a transpose-like
/// gather), column by column.
///
/// # Safety
/// Every source offset is readable and `d` has room for `g·n` elements.
#[inline]
unsafe fn copy_tile(s: *const f32, rs: isize, cs: isize, d: *mut f32, n: usize, g: usize) {
    if g == TILE {
        // Constant trip count: the inner loop unrolls.
        for j in 0..n {
            let sj = s.offset(j as isize * cs);
            for b in 0..TILE {
                *d.add(b * n + j) = *sj.offset(b as isize * rs);
            }
        }
    } else {
        for j in 0..n {
            let sj = s.offset(j as isize * cs);
            for b in 0..g {
                *d.add(b * n + j) = *sj.offset(b as isize * rs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element-by-element reference gather.
    fn gather(src: &[f32], shape: &[usize], strides: &[isize], offset: usize) -> Vec<f32> {
        let total: usize = shape.iter().product();
        (0..total)
            .map(|mut rem| {
                let mut off = offset as isize;
                for d in (0..shape.len()).rev() {
                    off += (rem % shape[d]) as isize * strides[d];
                    rem /= shape[d];
                }
                src[off as usize]
            })
            .collect()
    }

    /// Each case copied on 1 and 2 threads equals the element-by-element gather, bit for bit.
    fn check_gathers(src: &[f32], cases: &[(Vec<usize>, Vec<isize>, usize)]) {
        for (shape, strides, offset) in cases {
            let want = gather(src, shape, strides, *offset);
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                let mut dst = vec![f32::NAN; want.len()];
                pool.install(|| copy_strided_f32(src, shape, strides, *offset, &mut dst)).expect("copy");
                assert!(
                    dst.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "shape {shape:?} strides {strides:?} offset {offset} threads {threads}"
                );
            }
        }
    }

    /// Short broadcasts innermost (nearest-neighbour upsampling): repeated 2×, 3× and 8×,
    /// over contiguous and strided rows, with dimensions of 1 between, across threads.
    #[test]
    fn repeated_gathers_match_reference() {
        let src: Vec<f32> = (0..300_000).map(|i| i as f32).collect();
        let cases: [(Vec<usize>, Vec<isize>, usize); 6] = [
            (vec![4096, 64, 2, 1], vec![64, 1, 0, 1], 0),
            (vec![64, 2, 64, 2], vec![64, 0, 1, 0], 0),
            (vec![7, 33, 3], vec![40, 1, 0], 3),
            (vec![5, 17, 8], vec![1, 5, 0], 0),
            (vec![9, 2], vec![-1, 0], 8),
            (vec![3, 1, 2], vec![2, 5, 0], 1),
        ];
        check_gathers(&src, &cases);
    }

    /// The tiled (transpose-like) path: partial tiles at the end of each outer run, tiles
    /// spanning task boundaries, negative row strides.
    #[test]
    fn tiled_gathers_match_reference() {
        // Distinct values, so any misplaced element is caught.
        let src: Vec<f32> = (0..100_000).map(|i| i as f32).collect();
        let cases: [(Vec<usize>, Vec<isize>, usize); 5] = [
            // Plain transpose of a [37, 53] matrix.
            (vec![53, 37], vec![1, 53], 0),
            // A batch of 4 transposes of [19, 1001], big enough to split across threads with
            // task boundaries inside a transpose.
            (vec![4, 1001, 19], vec![19 * 1001, 1, 1001], 0),
            // Rows read backwards.
            (vec![37, 29], vec![-1, 37], 36),
            // Row stride 3, column stride 7 (interleaved, not a permutation of a block).
            (vec![11, 13], vec![3, 7], 5),
            // Fewer rows than a tile.
            (vec![3, 40], vec![1, 5], 2),
        ];
        check_gathers(&src, &cases);
    }
}
