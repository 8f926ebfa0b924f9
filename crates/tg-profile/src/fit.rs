//! The per-family fallback fit.

use crate::{Roofline, Work};
use serde::{Deserialize, Serialize};

/// The fallback model of one kernel family on one (device, threads):
/// `time = max(c0·launch + c1·bytes/BW + c2·flops/PEAK, max(bytes/BW, flops/PEAK))` with the
/// machine's [`Roofline`] and `c ≥ 0`, so time never decreases when the problem grows, and no
/// prediction beats the measured bandwidth or peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyFit {
    /// Family ([`crate::ProfileKey::family`]).
    pub family: String,
    /// Device name.
    pub device: String,
    /// Threads.
    pub threads: usize,
    /// Coefficients of launch overhead, memory time and compute time (all ≥ 0).
    pub c: [f64; 3],
    /// Measured points the coefficients were fitted to (0: the plain roofline, `c = 1`).
    pub points: usize,
    /// Root-mean-square relative error of the fit on its points (0 without points).
    pub rms_rel_err: f64,
}

/// The three regressors of a key: launch, bytes/BW and flops/PEAK, in ns.
fn features(roof: &Roofline, w: Work) -> [f64; 3] {
    [roof.launch_ns, w.bytes / roof.bytes_per_ns, w.flops / roof.flops_per_ns]
}

impl FamilyFit {
    /// Predicted nanoseconds of a launch doing `w` work.
    pub fn predict(&self, roof: &Roofline, w: Work) -> f64 {
        let a = features(roof, w);
        let fit: f64 = a.iter().zip(&self.c).map(|(a, c)| a * c).sum();
        fit.max(a[1].max(a[2]))
    }

    /// Fits a family to its measured points `(work, median ns)`.
    ///
    /// No points: `c = (1, 1, 1)`, the roofline itself. One or two points: the roofline scaled
    /// by the geometric mean of measured/roofline (two points cannot pin three coefficients).
    /// Three or more: non-negative least squares on relative error (every subset of the
    /// coefficients is solved unconstrained, the best one with all `c ≥ 0` is kept; exact for
    /// three unknowns), falling back to the scaled roofline if no subset is valid.
    pub fn fit(family: &str, roof: &Roofline, points: &[(Work, f64)]) -> FamilyFit {
        let pts: Vec<([f64; 3], f64)> = points.iter().filter(|(_, t)| t.is_finite() && *t > 0.0).map(|&(w, t)| (features(roof, w), t)).collect();
        let scaled = || {
            if pts.is_empty() {
                return [1.0; 3];
            }
            let log_ratio: f64 = pts.iter().map(|(a, t)| (t / a.iter().sum::<f64>().max(1e-9)).ln()).sum::<f64>() / pts.len() as f64;
            [log_ratio.exp(); 3]
        };
        let c = if pts.len() < 3 { scaled() } else { nnls_relative(&pts).unwrap_or_else(scaled) };
        let mut f = FamilyFit { family: family.to_string(), device: roof.device.clone(), threads: roof.threads, c, points: pts.len(), rms_rel_err: 0.0 };
        if !pts.is_empty() {
            let se: f64 = points.iter().filter(|(_, t)| t.is_finite() && *t > 0.0).map(|&(w, t)| ((f.predict(roof, w) - t) / t).powi(2)).sum();
            f.rms_rel_err = (se / pts.len() as f64).sqrt();
        }
        f
    }
}

/// Minimises `Σ ((a_i·c − t_i) / t_i)²` over `c ≥ 0` by trying every support set.
pub(crate) fn nnls_relative(pts: &[([f64; 3], f64)]) -> Option<[f64; 3]> {
    let rows: Vec<[f64; 3]> = pts.iter().map(|(a, t)| [a[0] / t, a[1] / t, a[2] / t]).collect();
    let residual = |c: &[f64; 3]| rows.iter().map(|r| (r[0] * c[0] + r[1] * c[1] + r[2] * c[2] - 1.0).powi(2)).sum::<f64>();
    let mut best: Option<([f64; 3], f64)> = None;
    for mask in 1u32..8 {
        let idx: Vec<usize> = (0..3).filter(|i| mask & (1 << i) != 0).collect();
        let Some(x) = least_squares(&rows, &idx) else { continue };
        if x.iter().any(|&v| v < 0.0 || !v.is_finite()) {
            continue;
        }
        let mut c = [0.0; 3];
        idx.iter().zip(&x).for_each(|(&i, &v)| c[i] = v);
        let r = residual(&c);
        if best.as_ref().is_none_or(|(_, br)| r < *br) {
            best = Some((c, r));
        }
    }
    best.map(|(c, _)| c)
}

/// Unconstrained least squares `rows[:, idx] · x ≈ 1` via the normal equations (at most 3×3,
/// Gaussian elimination with partial pivoting); `None` when singular.
fn least_squares(rows: &[[f64; 3]], idx: &[usize]) -> Option<Vec<f64>> {
    let n = idx.len();
    let mut m = vec![vec![0.0; n + 1]; n];
    for r in rows {
        for (i, &p) in idx.iter().enumerate() {
            for (j, &q) in idx.iter().enumerate() {
                m[i][j] += r[p] * r[q];
            }
            m[i][n] += r[p];
        }
    }
    let scale = (0..n).map(|i| m[i][i]).fold(0.0f64, f64::max);
    for col in 0..n {
        let piv = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[piv][col].abs() <= 1e-12 * scale.max(f64::MIN_POSITIVE) {
            return None;
        }
        m.swap(col, piv);
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                row.iter_mut().zip(&pivot_row).skip(col).for_each(|(x, p)| *x -= f * p);
            }
        }
    }
    Some((0..n).map(|i| m[i][n] / m[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roof() -> Roofline {
        Roofline { device: "cpu".into(), threads: 1, launch_ns: 200.0, bytes_per_ns: 10.0, flops_per_ns: 50.0 }
    }

    #[test]
    fn recovers_known_coefficients() {
        let r = roof();
        let truth = [1.5, 0.7, 2.0];
        let pts: Vec<(Work, f64)> = (1..12)
            .map(|i| {
                let w = Work { bytes: 1000.0 * (i * i) as f64, flops: 5000.0 * ((13 - i) * i) as f64 };
                let a = features(&r, w);
                (w, a[0] * truth[0] + a[1] * truth[1] + a[2] * truth[2])
            })
            .collect();
        let f = FamilyFit::fit("x", &r, &pts);
        for (c, t) in f.c.iter().zip(truth) {
            assert!((c - t).abs() < 1e-6 * t, "{:?} vs {truth:?}", f.c);
        }
        assert!(f.rms_rel_err < 1e-9);
    }

    #[test]
    fn negative_truth_is_clamped_and_small_sets_scale_the_roofline() {
        let r = roof();
        // Time falls with flops in the data: the fit must not follow (c2 ≥ 0).
        let pts: Vec<(Work, f64)> = (1..6).map(|i| (Work { bytes: 1e4 * i as f64, flops: 1e5 * i as f64 }, 5000.0 - 300.0 * i as f64)).collect();
        let f = FamilyFit::fit("x", &r, &pts);
        assert!(f.c.iter().all(|&c| c >= 0.0), "{:?}", f.c);
        let one = FamilyFit::fit("x", &r, &pts[..1]);
        assert!((one.c[0] - one.c[2]).abs() < 1e-12 && one.c[0] > 0.0);
        assert_eq!(FamilyFit::fit("x", &r, &[]).c, [1.0; 3]);
    }
}
