//! Terrain heightmaps from the terrain diffusion consistency UNet
//! (`adaptive-terrain-diffusion` 0.4.2, `terrain_consistency_unet_difficulty100.onnx`).
//!
//! The file is a denoiser `D(x, σ, difficulty)` of 128×128 single-channel heightmaps in the
//! model's space ([-1, 1]); the EDM preconditioning (c_skip, c_out, c_in for σ_data = 0.5) is
//! inside the graph, so it takes the noisy image `x = x0 + σ·z` as is. [`TerrainDiffusion`]
//! runs it through [`Onnx`] (one plan per batch size) and adds what the package does around
//! it, written out here:
//!
//! * **one step** (`steps = 1`, the package's only mode): `x = σ_max·z`, output `D(x, σ_max)`;
//! * **multistep consistency sampling** (`steps = N > 1`): the denoising levels are the
//!   first N of a Karras schedule of N + 1 levels from the starting σ down to σ_min
//!   ([`levels`], ρ = 7); after each denoising but the last, fresh noise brings the image
//!   back to the next level: `x = D(x, σ_i) + sqrt(σ_{i+1}² − σ_min²)·ε`;
//! * **image to image**: a source heightmap in the model's space plus noise at
//!   `σ = σ_min·(σ_max/σ_min)^strength` ([`start_sigma`]), as `generate_from` does;
//! * the **difficulty** condition `(d − 1)/99` for d in 1–100 ([`difficulty_label`]);
//! * the **height transform** to metres and back ([`to_metres`], [`from_metres`]):
//!   `h = 0.1·sinh(u·asinh(22.1686/0.1))` with `u = (x + 1)/2` clipped to [0, 1], then each
//!   sample's floor moved to zero.
//!
//! Starting noise comes from a seeded ChaCha8 stream (standard normals by Box–Muller in
//! f64), or is given ([`Request::noise`]) to reproduce another run, e.g. the package's numpy
//! noise, exactly.

use crate::onnx::Onnx;
use crate::{Model, ModelError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use tg_compiler::CompileOptions;
use tg_ir::HostTensor;
use tg_runtime::{Device, RuntimeError};

/// Side of the (square) heightmaps the UNet makes.
pub const SIZE: usize = 128;
/// Smallest noise level of the EDM/Karras schedule.
pub const SIGMA_MIN: f32 = 0.002;
/// Largest noise level: pure noise, where one-step sampling starts.
pub const SIGMA_MAX: f32 = 80.0;
/// ρ of the Karras schedule.
pub const RHO: f64 = 7.0;
/// Height in metres of the model's value 1 (the package's `height_range`).
pub const HEIGHT_RANGE_M: f32 = 22.168_64;
/// Scale of the package's asinh height compression (metres).
pub const ASINH_SCALE: f32 = 0.1;
/// The file name of the UNet in the model folder.
pub const UNET_FILE: &str = "terrain_consistency_unet_difficulty100.onnx";
/// The difficulties the model was trained on.
pub const DIFFICULTIES: std::ops::RangeInclusive<u32> = 1..=100;

/// The model's condition for difficulty `d` (1–100): `(d − 1)/99`.
pub fn difficulty_label(d: u32) -> Result<f32, ModelError> {
    if !DIFFICULTIES.contains(&d) {
        return Err(ModelError::Request(format!("difficulty {d} is outside 1–100 (the model knows difficulties 1 to 100)")));
    }
    Ok((d - 1) as f32 / 99.0)
}

/// The noise level image to image starts from: `σ_min·(σ_max/σ_min)^strength`
/// (strength 0: the source as is; 1: pure noise).
pub fn start_sigma(strength: f32) -> Result<f32, ModelError> {
    if !(0.0..=1.0).contains(&strength) {
        return Err(ModelError::Request(format!("strength {strength} is outside 0–1")));
    }
    Ok((SIGMA_MIN as f64 * (SIGMA_MAX as f64 / SIGMA_MIN as f64).powf(strength as f64)) as f32)
}

/// The `steps` denoising levels from `start` down: the first `steps` of a Karras schedule of
/// `steps + 1` levels from `start` to [`SIGMA_MIN`] (one step: `[start]`).
pub fn levels(start: f32, steps: usize) -> Vec<f32> {
    let (hi, lo) = ((start as f64).powf(1.0 / RHO), (SIGMA_MIN as f64).powf(1.0 / RHO));
    (0..steps).map(|i| (hi + i as f64 / steps as f64 * (lo - hi)).powf(RHO) as f32).collect()
}

/// Model values ([n, 128, 128], about [-1, 1]) as heights in metres, each sample's lowest
/// point at 0 (the package's `_from_model_space` with `zero_floor`).
pub fn to_metres(values: &[f32]) -> Vec<f32> {
    let norm = (HEIGHT_RANGE_M as f64 / ASINH_SCALE as f64).asinh();
    let mut h: Vec<f32> = values
        .iter()
        .map(|&v| {
            let u = ((v as f64 + 1.0) * 0.5).clamp(0.0, 1.0);
            ((ASINH_SCALE as f64 * (u * norm).sinh()) as f32).clamp(0.0, HEIGHT_RANGE_M)
        })
        .collect();
    for s in h.chunks_mut(SIZE * SIZE) {
        let lo = s.iter().copied().fold(f32::INFINITY, f32::min);
        s.iter_mut().for_each(|x| *x -= lo);
    }
    h
}

/// Heights in metres ([n, side²] per sample) in the model's space: each sample's floor moved
/// to 0, clipped to the model's range, asinh-compressed to [-1, 1] (the package's
/// `_to_model_space`).
pub fn from_metres(heights: &[f32], side_len: usize) -> Vec<f32> {
    let norm = (HEIGHT_RANGE_M as f64 / ASINH_SCALE as f64).asinh();
    let mut out = Vec::with_capacity(heights.len());
    for s in heights.chunks(side_len.max(1)) {
        let lo = s.iter().copied().fold(f32::INFINITY, f32::min);
        out.extend(s.iter().map(|&h| {
            let v = ((h - lo) as f64).clamp(0.0, HEIGHT_RANGE_M as f64);
            ((v / ASINH_SCALE as f64).asinh() / norm * 2.0 - 1.0) as f32
        }));
    }
    out
}

/// Bilinear resize of one `[h, w]` grid to `[oh, ow]` with half-pixel centres and clamped
/// edges (the package's `_resize`).
pub fn resize_bilinear(src: &[f32], h: usize, w: usize, oh: usize, ow: usize) -> Vec<f32> {
    if (h, w) == (oh, ow) {
        return src.to_vec();
    }
    let coord = |i: usize, n: usize, on: usize| -> (usize, usize, f32) {
        let x = (((i as f32 + 0.5) * n as f32 / on as f32) - 0.5).clamp(0.0, (n - 1) as f32);
        let x0 = x.floor() as usize;
        (x0, (x0 + 1).min(n - 1), x - x0 as f32)
    };
    let mut out = vec![0f32; oh * ow];
    for oy in 0..oh {
        let (y0, y1, wy) = coord(oy, h, oh);
        for ox in 0..ow {
            let (x0, x1, wx) = coord(ox, w, ow);
            let row = |y: usize| src[y * w + x0] * (1.0 - wx) + src[y * w + x1] * wx;
            out[oy * ow + ox] = row(y0) * (1.0 - wy) + row(y1) * wy;
        }
    }
    out
}

/// A starting image for image to image.
#[derive(Debug, Clone)]
pub struct Init {
    /// One source per sample, or one for all: `[n, 128, 128]` in the model's space
    /// ([`from_metres`]), values in [-1, 1].
    pub values: Vec<f32>,
    /// How much to change it: 0 keeps it, 1 starts from pure noise ([`start_sigma`]).
    pub strength: f32,
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct Request {
    /// Difficulty per sample, or one for all (1–100).
    pub difficulty: Vec<u32>,
    /// Samples in all.
    pub count: usize,
    /// Samples per run of the UNet (the last batch may be smaller).
    pub batch: usize,
    /// Denoising steps (1: one consistency step).
    pub steps: usize,
    /// Seed of the noise.
    pub seed: u64,
    /// The noise instead of the seed's (standard normal): `[count, 128, 128]`, the starting
    /// noise (the fresh noise of later steps still comes from the seed), or
    /// `[steps, count, 128, 128]`, the starting noise and each later step's.
    pub noise: Option<Vec<f32>>,
    /// Image to image from these sources.
    pub init: Option<Init>,
}

impl Request {
    /// `count` samples of one difficulty, one step, in one batch.
    pub fn new(difficulty: u32, count: usize, seed: u64) -> Request {
        Request { difficulty: vec![difficulty], count, batch: count, steps: 1, seed, noise: None, init: None }
    }
}

/// Where a [`TerrainDiffusion::generate`] run is: `step` of `steps` of batch `batch` (from 0)
/// of `batches` done.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Batch index.
    pub batch: usize,
    /// Batches in all.
    pub batches: usize,
    /// Steps of this batch done.
    pub step: usize,
    /// Steps per batch.
    pub steps: usize,
}

/// The terrain sampler.
pub struct TerrainDiffusion {
    unet: Onnx,
}

fn normals(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        // Box–Muller: u1 in (0, 1], u2 in [0, 1).
        let u1 = 1.0 - rng.gen::<f64>();
        let u2 = rng.gen::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        out.push((r * t.cos()) as f32);
        out.push((r * t.sin()) as f32);
    }
    out.truncate(n);
    out
}

impl TerrainDiffusion {
    /// Opens the UNet file (or a folder holding [`UNET_FILE`]) for `devices` (home first).
    pub fn open(path: impl AsRef<Path>, devices: Vec<Arc<dyn Device>>) -> Result<TerrainDiffusion, ModelError> {
        let mut p = path.as_ref().to_path_buf();
        if p.is_dir() {
            p = p.join(UNET_FILE);
        }
        if !p.is_file() {
            return Err(ModelError::NotFound(p.display().to_string()));
        }
        let unet = Onnx::open(&p, devices)?;
        let names: Vec<String> = unet.inputs().into_iter().map(|s| s.name).collect();
        for want in ["noisy", "sigma", "difficulty"] {
            if !names.iter().any(|n| n == want) {
                return Err(ModelError::Architecture {
                    file: p.display().to_string(),
                    detail: format!("not the terrain UNet: it has no input '{want}' (inputs: {})", names.join(", ")),
                });
            }
        }
        Ok(TerrainDiffusion { unet })
    }

    /// The UNet as a [`Model`] (plans, reports, plan store).
    pub fn unet(&mut self) -> &mut Onnx {
        &mut self.unet
    }

    /// Compile options of the plans compiled from now on.
    pub fn set_compile_options(&mut self, options: CompileOptions) {
        self.unet.set_compile_options(options);
    }

    /// The denoiser's inputs for a batch of `b` (zeros).
    fn blank(b: usize) -> Result<HashMap<String, HostTensor>, ModelError> {
        let mut feed = HashMap::new();
        feed.insert("noisy".to_string(), HostTensor::f32(&[b, 1, SIZE, SIZE], vec![0.0; b * SIZE * SIZE])?);
        feed.insert("sigma".to_string(), HostTensor::f32(&[b], vec![SIGMA_MAX; b])?);
        feed.insert("difficulty".to_string(), HostTensor::f32(&[b], vec![0.0; b])?);
        Ok(feed)
    }

    /// Compiles (or loads from the plan store) the plans a [`Self::generate`] of `req`
    /// runs: one per batch size. A batch too large for the memory the host has available is
    /// refused before anything of its size is allocated: the batch-1 plan's working memory
    /// times the batch is compared with `MemAvailable`.
    pub fn prepare(&mut self, req: &Request) -> Result<crate::CompileTimes, ModelError> {
        let batch = req.batch.min(req.count).max(1);
        let mut sizes = vec![batch];
        if !req.count.is_multiple_of(batch) && req.count > batch {
            sizes.push(req.count % batch);
        }
        let mut all = crate::CompileTimes::default();
        let mut add = |t: crate::CompileTimes| {
            all.graph_ms += t.graph_ms;
            all.compile_ms += t.compile_ms;
            all.plans += t.plans;
        };
        if batch > 1 {
            let one = Self::blank(1)?;
            add(self.unet.compile(&one)?);
            let per = self.unet.plan_bytes(&one)? + 2 * SIZE * SIZE * 4;
            if let Some(avail) = available_memory() {
                let need = per as u128 * batch as u128;
                if need > avail as u128 {
                    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
                    return Err(ModelError::Request(format!(
                        "a batch of {batch} needs about {:.1} GiB of working memory ({:.0} MiB per sample) and {:.1} GiB are available: the largest batch that fits is {}; more samples run batch by batch (--count)",
                        gib(need),
                        per as f64 / (1u64 << 20) as f64,
                        gib(avail as u128),
                        (avail as u128 / per.max(1) as u128).max(1)
                    )));
                }
            }
        }
        for b in sizes {
            add(self.unet.compile(&Self::blank(b)?).map_err(|e| too_large(e, b))?);
        }
        Ok(all)
    }

    /// One run of the denoiser on `[b, 128, 128]` noisy images at levels `sigma` ([b]) with
    /// conditions `labels` ([b]).
    pub fn denoise(&mut self, noisy: &[f32], sigma: &[f32], labels: &[f32]) -> Result<Vec<f32>, ModelError> {
        let b = sigma.len();
        let mut feed = HashMap::new();
        feed.insert("noisy".to_string(), HostTensor::f32(&[b, 1, SIZE, SIZE], noisy.to_vec())?);
        feed.insert("sigma".to_string(), HostTensor::f32(&[b], sigma.to_vec())?);
        feed.insert("difficulty".to_string(), HostTensor::f32(&[b], labels.to_vec())?);
        let out = self.unet.run(&feed).map_err(|e| too_large(e, b))?;
        let (_, t) = out.into_iter().next().ok_or_else(|| ModelError::Request("the UNet gave no output".into()))?;
        t.as_f32().map(|v| v.to_vec()).ok_or_else(|| ModelError::Request("the UNet's output is not float".into()))
    }

    /// Generates `req.count` heightmaps in the model's space (`[count, 128, 128]`), calling
    /// `progress` after every denoising step.
    pub fn generate(&mut self, req: &Request, progress: &mut dyn FnMut(Progress)) -> Result<Vec<f32>, ModelError> {
        let px = SIZE * SIZE;
        let bad = |m: String| Err(ModelError::Request(m));
        if req.count == 0 || req.batch == 0 || req.steps == 0 {
            return bad(format!("count ({}), batch ({}) and steps ({}) must be at least 1", req.count, req.batch, req.steps));
        }
        if req.difficulty.len() != 1 && req.difficulty.len() != req.count {
            return bad(format!("{} difficulties for {} samples: give one, or one per sample", req.difficulty.len(), req.count));
        }
        let labels: Vec<f32> = req.difficulty.iter().map(|&d| difficulty_label(d)).collect::<Result<_, _>>()?;
        let label = |i: usize| if labels.len() == 1 { labels[0] } else { labels[i] };
        let all_steps = match &req.noise {
            Some(n) if n.len() == req.count * px => false,
            Some(n) if n.len() == req.steps * req.count * px => true,
            Some(n) => {
                return bad(format!(
                    "the noise holds {} values; {} samples of 128×128 need {} (the starting noise) or {} steps × that (every step's)",
                    n.len(),
                    req.count,
                    req.count * px,
                    req.steps
                ))
            }
            None => false,
        };
        let (sigma0, init) = match &req.init {
            None => (SIGMA_MAX, None),
            Some(i) => {
                if i.values.len() != px && i.values.len() != req.count * px {
                    return bad(format!("the source holds {} values; one 128×128 heightmap or {} of them are needed", i.values.len(), req.count));
                }
                (start_sigma(i.strength)?, Some(i))
            }
        };
        let sigmas = levels(sigma0, req.steps);
        let mut rng = ChaCha8Rng::seed_from_u64(req.seed);
        let batches = req.count.div_ceil(req.batch);
        let mut out = Vec::with_capacity(req.count * px);
        for bi in 0..batches {
            let (s0, s1) = (bi * req.batch, ((bi + 1) * req.batch).min(req.count));
            let b = s1 - s0;
            let z = match &req.noise {
                Some(n) => n[s0 * px..s1 * px].to_vec(),
                None => normals(&mut rng, b * px),
            };
            let mut x: Vec<f32> = z.iter().map(|&v| v * sigma0).collect();
            if let Some(i) = init {
                for (k, xk) in x.chunks_mut(px).enumerate() {
                    let src = if i.values.len() == px { &i.values[..] } else { &i.values[(s0 + k) * px..(s0 + k + 1) * px] };
                    xk.iter_mut().zip(src).for_each(|(a, &s)| *a += s);
                }
            }
            let lab: Vec<f32> = (s0..s1).map(label).collect();
            let mut d = Vec::new();
            for (si, &sigma) in sigmas.iter().enumerate() {
                d = self.denoise(&x, &vec![sigma; b], &lab)?;
                progress(Progress { batch: bi, batches, step: si + 1, steps: req.steps });
                if let Some(&next) = sigmas.get(si + 1) {
                    let scale = ((next as f64).powi(2) - (SIGMA_MIN as f64).powi(2)).max(0.0).sqrt() as f32;
                    let eps = match &req.noise {
                        Some(n) if all_steps => n[((si + 1) * req.count + s0) * px..((si + 1) * req.count + s1) * px].to_vec(),
                        _ => normals(&mut rng, b * px),
                    };
                    x = d.iter().zip(&eps).map(|(&v, &e)| v + scale * e).collect();
                }
            }
            out.extend_from_slice(&d);
        }
        Ok(out)
    }
}

/// Bytes the host can allocate without swapping (`MemAvailable`), when known.
fn available_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = s.lines().find(|l| l.starts_with("MemAvailable:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A batch whose plan cannot get its memory, said as such.
fn too_large(e: ModelError, batch: usize) -> ModelError {
    match e {
        ModelError::Runtime(RuntimeError::Alloc { bytes, device, detail, .. }) => ModelError::Request(format!(
            "a batch of {batch} is too large for the memory of {device}: its plan needs a {:.1} GiB arena ({detail}); use a smaller batch (samples are run batch by batch)",
            bytes as f64 / (1u64 << 30) as f64
        )),
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_levels() {
        assert_eq!(difficulty_label(1).unwrap(), 0.0);
        assert_eq!(difficulty_label(100).unwrap(), 1.0);
        assert!(difficulty_label(0).unwrap_err().to_string().contains("outside 1–100"));
        assert!(difficulty_label(101).is_err());
        assert_eq!(levels(SIGMA_MAX, 1), vec![SIGMA_MAX]);
        let l = levels(SIGMA_MAX, 4);
        assert_eq!(l[0], SIGMA_MAX);
        assert!(l.windows(2).all(|w| w[1] < w[0]) && *l.last().unwrap() > SIGMA_MIN);
        // Karras with 5 levels, level 1: (80^(1/7) + (0.002^(1/7) − 80^(1/7))/4)^7.
        let want = (80f64.powf(1.0 / 7.0) + (0.002f64.powf(1.0 / 7.0) - 80f64.powf(1.0 / 7.0)) / 4.0).powf(7.0);
        assert!((l[1] as f64 - want).abs() < 1e-4 * want);
        assert!((start_sigma(1.0).unwrap() - SIGMA_MAX).abs() < 1e-3);
        assert!((start_sigma(0.0).unwrap() - SIGMA_MIN).abs() < 1e-7);
        assert!(start_sigma(1.5).is_err());
    }

    #[test]
    fn height_transform_round_trips() {
        // A ramp over [-1, 1] in model space: to metres and back is the identity once the
        // floor is at zero (the lowest value is -1 exactly).
        let v: Vec<f32> = (0..SIZE * SIZE).map(|i| -1.0 + 2.0 * i as f32 / (SIZE * SIZE - 1) as f32).collect();
        let h = to_metres(&v);
        assert_eq!(h[0], 0.0);
        assert!((h[SIZE * SIZE - 1] - HEIGHT_RANGE_M).abs() < 1e-3);
        let back = from_metres(&h, SIZE * SIZE);
        let err = v.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(err < 1e-4, "{err}");
    }

    #[test]
    fn normals_have_unit_variance() {
        let z = normals(&mut ChaCha8Rng::seed_from_u64(3), 200_001);
        let m = z.iter().map(|&x| x as f64).sum::<f64>() / z.len() as f64;
        let v = z.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / z.len() as f64;
        assert!(m.abs() < 0.01 && (v - 1.0).abs() < 0.01, "{m} {v}");
    }

    #[test]
    fn resize_matches_half_pixel_bilinear() {
        let src = [0.0, 1.0, 2.0, 3.0]; // [2, 2]
        let up = resize_bilinear(&src, 2, 2, 4, 4);
        // Output x = 1 maps to input (1.5·2/4 − 0.5) = 0.25.
        assert!((up[1] - 0.25).abs() < 1e-6 && up[0] == 0.0 && up[15] == 3.0);
        assert_eq!(resize_bilinear(&src, 2, 2, 2, 2), src.to_vec());
    }
}
