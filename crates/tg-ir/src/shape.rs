/// A static tensor shape, outermost dimension first (row-major).
pub type Shape = Vec<usize>;

/// Numpy-style broadcast of two shapes (aligned at the innermost dimension), or `None`
/// when a pair of dimensions differs and neither is 1.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Shape> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
        out[i] = if da == db {
            da
        } else if da == 1 {
            db
        } else if db == 1 {
            da
        } else {
            return None;
        };
    }
    Some(out)
}

/// Number of elements of a shape. Plain arithmetic: for the shapes of a built or verified
/// graph, which [`crate::infer`] bounds (at most 2^44 elements); anything else goes through
/// [`checked_numel`].
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Number of elements of a shape, or `None` when the count overflows `usize` (0 when a
/// dimension is 0, however large the others).
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Row-major contiguous strides (in elements) of a shape.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc *= shape[i] as isize;
    }
    s
}

/// Strides (in elements) that read a tensor of shape `src` (contiguous) as if broadcast to
/// `dst`: broadcast dimensions get stride 0. `src` must broadcast to `dst`.
pub fn broadcast_strides(src: &[usize], dst: &[usize]) -> Vec<isize> {
    let cs = contiguous_strides(src);
    let off = dst.len() - src.len();
    (0..dst.len()).map(|i| if i < off || src[i - off] == 1 && dst[i] != 1 { 0 } else { cs[i - off] }).collect()
}

/// Linear offsets (in elements) of every element of a strided view, in row-major order of
/// `shape`: `offset + Σ idx[d]·strides[d]`. Strides must keep every offset non-negative.
pub fn strided_offsets(shape: &[usize], strides: &[isize], offset: usize) -> Vec<usize> {
    let n = numel(shape);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        let mut lin = offset as isize;
        for d in 0..shape.len() {
            lin += idx[d] as isize * strides[d];
        }
        out.push(lin as usize);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes(&[4, 1, 3], &[5, 3]), Some(vec![4, 5, 3]));
        assert_eq!(broadcast_shapes(&[], &[2]), Some(vec![2]));
        assert_eq!(broadcast_shapes(&[2, 3], &[3, 2]), None);
        assert_eq!(broadcast_strides(&[1, 3], &[4, 3]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[3], &[2, 4, 3]), vec![0, 0, 1]);
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    }

    #[test]
    fn element_counts() {
        assert_eq!(checked_numel(&[]), Some(1));
        assert_eq!(checked_numel(&[2, 0, 3]), Some(0));
        assert_eq!(checked_numel(&[1 << 40, 1 << 23]), Some(1 << 63));
        assert_eq!(checked_numel(&[1 << 40, 1 << 24]), None);
        // A product that wraps to a small number is still an overflow.
        assert_eq!(checked_numel(&[2, (1 << 63) + 1]), None);
        assert_eq!(checked_numel(&[1 << 40, 1 << 40, 0]), Some(0));
        assert_eq!(checked_numel(&[0, 1 << 40, 1 << 40]), Some(0));
    }
}
