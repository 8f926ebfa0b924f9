//! Launch shapes of the shared kernels: defaults that suit GPUs, or the choices
//! `tg profile --device …` measured best on one device and stored under its fingerprint.

use serde::{Deserialize, Serialize};

/// Launch shapes of the shared kernels on one device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tuning {
    /// Work-items per weight row of the matrix–vector product: 32 (a run of lanes reading the
    /// row together, `tg_mmv`: GPUs) or 1 (a work-item per row, `tg_mmv_rows`: CPU OpenCL;
    /// the q8 activation quantization then also takes a work-item per block).
    pub mv_lanes: usize,
    /// Weight rows per work-group of the matrix–vector kernel `tg_mmv` (32 work-items each):
    /// 1, 2, 4 or 8.
    pub mv_rows: usize,
    /// Work-items per work-group of the row kernels (norms, softmax, RoPE, row reductions,
    /// group norm): a power of two from 32 to 1024 (shorter rows take fewer).
    pub row_group: usize,
    /// The tiled products and convolutions take the 64² tile when both output dims reach
    /// this (else the 32² tile).
    pub tile64_min: usize,
    /// Convolutions with at least this many output channels per group run as implicit GEMM
    /// tiles; fewer run the direct kernel (a work-item per output).
    pub conv_tiled_min_channels: usize,
    /// Work-items per work-group of the elementwise kernels: a power of two from 32 to 1024.
    pub elementwise_group: usize,
    /// Attention with fewer work-groups than this (decode: one query position) splits its
    /// keys into runs of `attention_split_keys` merged by a second kernel, so that more of
    /// the device works on a long context; 0 never splits.
    pub attention_min_groups: usize,
    /// Keys per run of a split attention (a multiple of the 16-key tile).
    pub attention_split_keys: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            mv_lanes: 32,
            mv_rows: 4,
            row_group: 256,
            tile64_min: 64,
            conv_tiled_min_channels: 8,
            elementwise_group: 256,
            attention_min_groups: 64,
            attention_split_keys: 256,
        }
    }
}

/// The 64² tile threshold candidates a tuner tries.
pub const TILE_CHOICES: [usize; 3] = [32, 64, 256];

impl Tuning {
    /// The starting point for a device whose work-items run as SIMD lanes of CPU cores
    /// (OpenCL on the CPU): a work-item per weight row in the matrix–vector product.
    pub fn cpu_like() -> Tuning {
        Tuning { mv_lanes: 1, attention_min_groups: 0, ..Tuning::default() }
    }

    /// A short text naming every field's value (device fingerprints include it).
    pub fn key(&self) -> String {
        format!(
            "mv{}x{} row{} t64@{} conv@{} ew{} att{}/{}",
            self.mv_lanes,
            self.mv_rows,
            self.row_group,
            self.tile64_min,
            self.conv_tiled_min_channels,
            self.elementwise_group,
            self.attention_min_groups,
            self.attention_split_keys
        )
    }

    /// The configurations the shared tests run the GPU kernels under: the GPU default, the
    /// CPU-like one (they take different kernels for decode), and one that splits every
    /// attention over more than 16 keys (the split path and its merge).
    pub fn test_variants() -> Vec<(&'static str, Tuning)> {
        vec![
            ("gpu launch shapes", Tuning::default()),
            ("cpu-like launch shapes", Tuning::cpu_like()),
            ("attention split into 16-key runs", Tuning { attention_min_groups: usize::MAX, attention_split_keys: 16, ..Tuning::default() }),
        ]
    }

    /// Whether every field is in its documented range.
    pub fn check(&self) -> Result<(), String> {
        if ![1, 32].contains(&self.mv_lanes) {
            return Err(format!("mv_lanes {} not 1 or 32", self.mv_lanes));
        }
        let pow2 = |v: usize, lo: usize, hi: usize| v.is_power_of_two() && (lo..=hi).contains(&v);
        if ![1, 2, 4, 8].contains(&self.mv_rows) {
            return Err(format!("mv_rows {} not in 1, 2, 4, 8", self.mv_rows));
        }
        if !pow2(self.row_group, 32, 1024) || !pow2(self.elementwise_group, 32, 1024) {
            return Err(format!("group sizes {} / {} must be powers of two in 32..=1024", self.row_group, self.elementwise_group));
        }
        if self.tile64_min == 0 || self.conv_tiled_min_channels == 0 {
            return Err("tile thresholds must be positive".into());
        }
        if self.attention_split_keys == 0 || !self.attention_split_keys.is_multiple_of(16) {
            return Err(format!("attention_split_keys {} must be a positive multiple of 16", self.attention_split_keys));
        }
        Ok(())
    }

    /// The candidates a tuner measures for one field (`mv_lanes`, `mv_rows`, `row_group`, `tile64_min`,
    /// `conv_tiled_min_channels`, `elementwise_group`, `attention_split_keys`), each a copy of `self` with that field
    /// changed.
    pub fn candidates(&self, field: &str) -> Vec<Tuning> {
        let with = |f: &dyn Fn(&mut Tuning)| {
            let mut t = self.clone();
            f(&mut t);
            t
        };
        match field {
            "mv_lanes" => [1, 32].iter().map(|&v| with(&|t| t.mv_lanes = v)).collect(),
            "mv_rows" => [1, 2, 4, 8].iter().map(|&v| with(&|t| t.mv_rows = v)).collect(),
            "row_group" => [64, 128, 256, 512].iter().map(|&v| with(&|t| t.row_group = v)).collect(),
            "tile64_min" => TILE_CHOICES.iter().map(|&v| with(&|t| t.tile64_min = v)).collect(),
            "conv_tiled_min_channels" => [1, 8, 32].iter().map(|&v| with(&|t| t.conv_tiled_min_channels = v)).collect(),
            "attention_split_keys" => [64, 128, 256, 512].iter().map(|&v| with(&|t| t.attention_split_keys = v)).collect(),
            "elementwise_group" => [64, 128, 256, 512].iter().map(|&v| with(&|t| t.elementwise_group = v)).collect(),
            _ => vec![],
        }
    }
}
