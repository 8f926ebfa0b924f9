//! Host-side layout helpers: merging dims so strided kernels see few of them.

/// Most dims a strided kernel takes (`long8` arguments).
pub const MAX_RANK: usize = 8;

/// A shape with one stride vector per operand, after dropping size-1 dims and merging
/// adjacent dims that every operand walks as one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Merged {
    /// Merged dims (outermost first); empty for a scalar.
    pub shape: Vec<i64>,
    /// Per operand, the strides of the merged dims.
    pub strides: Vec<Vec<i64>>,
}

/// Merges `shape` walked by the operands with `strides` (one slice per operand, each of the
/// shape's rank). An output walked contiguously is one more operand with contiguous strides.
pub(crate) fn merge(shape: &[usize], strides: &[&[isize]]) -> Merged {
    let mut out_shape: Vec<i64> = Vec::new();
    let mut out_st: Vec<Vec<i64>> = vec![Vec::new(); strides.len()];
    for d in (0..shape.len()).rev() {
        let n = shape[d] as i64;
        if n == 1 {
            continue;
        }
        if let Some(&inner) = out_shape.last() {
            let last = out_st[0].len() - 1;
            if strides.iter().zip(&out_st).all(|(s, o)| s[d] as i64 == o[last] * inner) {
                *out_shape.last_mut().expect("non-empty") *= n;
                continue;
            }
        }
        out_shape.push(n);
        for (o, s) in out_st.iter_mut().zip(strides) {
            o.push(s[d] as i64);
        }
    }
    out_shape.reverse();
    for o in &mut out_st {
        o.reverse();
    }
    Merged { shape: out_shape, strides: out_st }
}

/// `v` padded to eight entries with `fill`.
pub(crate) fn pack8(v: &[i64], fill: i64) -> [i64; 8] {
    let mut a = [fill; 8];
    a[..v.len()].copy_from_slice(v);
    a
}

/// Row-major strides of `shape`.
pub(crate) fn contiguous(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![1isize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as isize;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_contiguous_and_keeps_broadcast() {
        let m = merge(&[2, 3, 4], &[&[12, 4, 1], &[12, 4, 1]]);
        assert_eq!(m.shape, vec![24]);
        assert_eq!(m.strides, vec![vec![1], vec![1]]);
        let m = merge(&[2, 3, 4], &[&[12, 4, 1], &[0, 4, 1]]);
        assert_eq!(m.shape, vec![2, 12]);
        assert_eq!(m.strides, vec![vec![12, 1], vec![0, 1]]);
        let m = merge(&[1, 5, 1], &[&[7, 1, 9]]);
        assert_eq!(m.shape, vec![5]);
        let m = merge(&[], &[&[]]);
        assert!(m.shape.is_empty());
        let m = merge(&[3, 2], &[&[-2, 1], &[2, 1]]);
        assert_eq!(m.shape, vec![3, 2]);
    }
}
