//! Sliding windows over the trailing spatial axes: the geometry of convolution and pooling.

use serde::{Deserialize, Serialize};

/// A window slid over the spatial axes of an `[N, C, *spatial]` tensor (1 to 3 of them):
/// per axis its size, stride, dilation and the zero padding before and after. Output
/// position `o` along an axis reads input positions `o·stride − pad_begin + j·dilation` for
/// `j < size`; a position outside `0..len` is padding.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Window {
    /// Window size per spatial axis (for a convolution, the kernel's spatial dims).
    pub size: Vec<usize>,
    /// Step between output positions, ≥ 1.
    pub stride: Vec<usize>,
    /// Step between window taps, ≥ 1.
    pub dilation: Vec<usize>,
    /// Padding before the first element.
    pub pad_begin: Vec<usize>,
    /// Padding after the last element.
    pub pad_end: Vec<usize>,
}

impl Window {
    /// A window of `size` with stride and dilation 1 and no padding.
    pub fn new(size: Vec<usize>) -> Window {
        let r = size.len();
        Window { size, stride: vec![1; r], dilation: vec![1; r], pad_begin: vec![0; r], pad_end: vec![0; r] }
    }

    /// Number of spatial axes.
    pub fn rank(&self) -> usize {
        self.size.len()
    }

    /// Taps per window (the product of the sizes).
    pub fn taps(&self) -> usize {
        self.size.iter().product()
    }

    /// Checks the window is well formed (1–3 axes, every list that long, strides, dilations
    /// and sizes ≥ 1).
    pub fn check(&self) -> Result<(), String> {
        let r = self.rank();
        if !(1..=3).contains(&r) {
            return Err(format!("a window has 1 to 3 spatial axes, got {r}"));
        }
        for (what, v) in [("stride", &self.stride), ("dilation", &self.dilation), ("pad_begin", &self.pad_begin), ("pad_end", &self.pad_end)] {
            if v.len() != r {
                return Err(format!("window {what} has {} entries for {r} axes", v.len()));
            }
        }
        if self.size.contains(&0) || self.stride.contains(&0) || self.dilation.contains(&0) {
            return Err(format!("window sizes, strides and dilations must be >= 1, got {self}"));
        }
        if self.size.iter().try_fold(1usize, |acc, &k| acc.checked_mul(k)).is_none() {
            return Err(format!("window {self}: its tap count overflows"));
        }
        Ok(())
    }

    /// Output length per spatial axis for an input of `spatial` lengths:
    /// `(len + pad_begin + pad_end − dilation·(size − 1) − 1) / stride + 1`. An error when the
    /// (padded) input is shorter than one window.
    pub fn output(&self, spatial: &[usize]) -> Result<Vec<usize>, String> {
        self.check()?;
        if spatial.len() != self.rank() {
            return Err(format!("a window of {} axes over {} spatial axes", self.rank(), spatial.len()));
        }
        (0..self.rank())
            .map(|a| {
                let padded = spatial[a].checked_add(self.pad_begin[a]).and_then(|p| p.checked_add(self.pad_end[a]));
                let extent = self.dilation[a].checked_mul(self.size[a] - 1).and_then(|e| e.checked_add(1));
                let (Some(padded), Some(extent)) = (padded, extent) else {
                    return Err(format!("spatial axis {a}: the padded length or the window's extent overflows ({self})"));
                };
                if padded < extent {
                    return Err(format!("spatial axis {a}: padded length {padded} is shorter than the window's extent {extent}"));
                }
                Ok((padded - extent) / self.stride[a] + 1)
            })
            .collect()
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[usize]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("x");
        write!(f, "{}", list(&self.size))?;
        if self.stride.iter().any(|&s| s != 1) {
            write!(f, " s{}", list(&self.stride))?;
        }
        if self.dilation.iter().any(|&s| s != 1) {
            write!(f, " d{}", list(&self.dilation))?;
        }
        if self.pad_begin.iter().chain(&self.pad_end).any(|&p| p != 0) {
            write!(f, " p{}+{}", list(&self.pad_begin), list(&self.pad_end))?;
        }
        Ok(())
    }
}

/// What a pooling window computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PoolKind {
    /// Maximum of the taps inside the input (padding is ignored).
    Max,
    /// Mean of the taps inside the input (padding is not counted).
    Avg,
    /// Sum of the taps inside the input divided by the window's size (padding counts as 0).
    AvgPadded,
}
