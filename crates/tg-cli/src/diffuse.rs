//! `tg diffuse`: terrain heightmaps from the terrain diffusion consistency UNet
//! (`tg_models::terrain`), written as a shaded colour picture (`--output`), a 16-bit
//! greyscale heightmap (`--png16`) and/or the raw values (`--heights`).

use crate::heightmap;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tg_ir::{HostData, HostTensor};
use tg_models::terrain::{self, Init, Request, TerrainDiffusion, HEIGHT_RANGE_M, SIZE};

/// What `--heights` holds.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum HeightsUnit {
    /// The UNet's output as is (about −1..1).
    Model,
    /// The package's height transform: metres, 0 to 22.17, each sample's floor at 0.
    Metres,
}

/// Arguments of `tg diffuse`.
#[derive(Args, Debug)]
pub struct DiffuseArgs {
    /// Terrain difficulty, 1 (gentle) to 100 (rough): one for every sample, or one per
    /// sample, comma separated.
    #[arg(long, default_value = "50", value_delimiter = ',')]
    difficulty: Vec<u32>,
    /// Seed of the noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Samples per run of the UNet.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Samples in all, run batch by batch (default: one batch; with --noise, its samples).
    #[arg(long)]
    count: Option<usize>,
    /// Denoising steps: 1 is one consistency step from σ_max (as the package does); N > 1
    /// is multistep consistency sampling over a Karras schedule.
    #[arg(long, default_value_t = 1)]
    steps: usize,
    /// Image to image: start from this heightmap (`.npy` of heights in metres, [H, W] or
    /// [N, H, W]; or a greyscale PNG, 0..max mapped to 0..22.17 m). Other sizes than
    /// 128×128 are resampled (bilinear, as the package does).
    #[arg(long)]
    init: Option<PathBuf>,
    /// How far image to image departs from --init: 0 keeps it, 1 is pure noise.
    #[arg(long, default_value_t = 0.5)]
    strength: f32,
    /// The noise (`.npy`, float32, standard normal) instead of the seed's: the starting
    /// noise, [N, 1, 128, 128] or [N, 128, 128]; or every step's, [STEPS, N, 1, 128, 128].
    /// Reproduces another run exactly.
    #[arg(long)]
    noise: Option<PathBuf>,
    /// A picture: colour by height (each sample over its own range), hill shaded (PNG; a
    /// batch becomes a grid of tiles).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// The values as `.npy`, [N, 128, 128] float32 (see --heights-unit).
    #[arg(long)]
    heights: Option<PathBuf>,
    /// What --heights holds.
    #[arg(long, value_enum, default_value = "model")]
    heights_unit: HeightsUnit,
    /// A 16-bit greyscale heightmap PNG (0..65535 = 0..22.17 m, the model's height range;
    /// a batch becomes a grid of tiles).
    #[arg(long)]
    png16: Option<PathBuf>,
    /// The UNet (`terrain_consistency_unet_difficulty100.onnx`) or the folder holding it
    /// (default: the ONNX models folder, fetched if missing).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Devices to run on, comma separated (`cpu`, `opencl`, `cpu,opencl`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Print what was made and the timings as JSON.
    #[arg(long)]
    json: bool,
}

/// Heights (metres) of an `--init` file, resampled to 128×128: `[n, 128·128]`.
fn read_init(path: &Path) -> Result<Vec<f32>, String> {
    let is_png = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let (n, h, w, data) = if is_png {
        let (w, h, v) = heightmap::read_png_gray(path)?;
        (1, h, w, v.iter().map(|&x| x * HEIGHT_RANGE_M).collect::<Vec<f32>>())
    } else {
        let a = crate::run::read_npy(path)?;
        let HostData::F32(v) = a.data else {
            return Err(format!("--init {}: dtype {} (float32 heights in metres are taken)", path.display(), a.descr));
        };
        match a.shape[..] {
            [h, w] => (1, h, w, v),
            [n, h, w] | [n, 1, h, w] => (n, h, w, v),
            _ => return Err(format!("--init {}: shape {:?}; [H, W], [N, H, W] or [N, 1, H, W] heights are taken", path.display(), a.shape)),
        }
    };
    if n == 0 || h < 2 || w < 2 {
        return Err(format!("--init {}: a {h}×{w} heightmap is too small (at least 2×2)", path.display()));
    }
    if let Some(bad) = data.iter().find(|x| !x.is_finite()) {
        return Err(format!("--init {}: holds a non-finite height ({bad})", path.display()));
    }
    if (h, w) != (SIZE, SIZE) {
        eprintln!("[tg] --init {}: {h}×{w} resampled to {SIZE}×{SIZE} (bilinear)", path.display());
    }
    Ok(data.chunks(h * w).flat_map(|s| terrain::resize_bilinear(s, h, w, SIZE, SIZE)).collect())
}

/// The `--noise` file: its samples and `[n·128·128]` (starting noise) or
/// `[steps·n·128·128]` (every step's) standard normal values.
fn read_noise(path: &Path, steps: usize) -> Result<(usize, Vec<f32>), String> {
    let a = crate::run::read_npy(path)?;
    let HostData::F32(v) = a.data else {
        return Err(format!("--noise {}: dtype {} (float32 is taken)", path.display(), a.descr));
    };
    match a.shape[..] {
        [n, 1, h, w] | [n, h, w] if (h, w) == (SIZE, SIZE) && n > 0 => Ok((n, v)),
        [s, n, 1, h, w] if (h, w) == (SIZE, SIZE) && n > 0 && s == steps => Ok((n, v)),
        _ => Err(format!(
            "--noise {}: shape {:?}; [N, 1, 128, 128] or [N, 128, 128] (the starting noise) or [{steps}, N, 1, 128, 128] (every step's, for --steps {steps}) is taken",
            path.display(),
            a.shape
        )),
    }
}

pub fn run(a: DiffuseArgs) -> Result<(), String> {
    let t0 = Instant::now();
    // Bad requests fail before anything is loaded.
    for &d in &a.difficulty {
        terrain::difficulty_label(d).map_err(|e| format!("--difficulty: {e}"))?;
    }
    if a.batch == 0 || a.steps == 0 || a.count == Some(0) {
        return Err("--batch, --steps and --count must be at least 1".into());
    }
    if a.init.is_some() {
        terrain::start_sigma(a.strength).map_err(|e| format!("--strength: {e}"))?;
    }
    let noise = a.noise.as_deref().map(|p| read_noise(p, a.steps)).transpose()?;
    let count = match (&noise, a.count) {
        (Some((n, _)), Some(c)) if *n != c => return Err(format!("--noise holds {n} samples but --count is {c}")),
        (Some((n, _)), _) => *n,
        (None, Some(c)) => c,
        (None, None) => a.batch,
    };
    if a.difficulty.len() != 1 && a.difficulty.len() != count {
        return Err(format!("{} difficulties for {count} samples: give one, or one per sample", a.difficulty.len()));
    }
    let init = match &a.init {
        Some(p) => {
            let heights = read_init(p)?;
            let n = heights.len() / (SIZE * SIZE);
            if n != 1 && n != count {
                return Err(format!("--init {} holds {n} heightmaps for {count} samples: give one, or one per sample", p.display()));
            }
            let values = terrain::from_metres(&heights, SIZE * SIZE).into_iter().map(|v| v.clamp(-1.0, 1.0)).collect();
            Some(Init { values, strength: a.strength })
        }
        None => None,
    };
    let (mut output, png16, heights) = (a.output.clone(), a.png16.clone(), a.heights.clone());
    if output.is_none() && png16.is_none() && heights.is_none() {
        output = Some(PathBuf::from("terrain.png"));
    }
    for p in [&output, &png16, &heights].into_iter().flatten() {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(format!("{}: the folder {} does not exist", p.display(), dir.display()));
        }
    }

    let path = crate::model_path::resolve_onnx_model(a.model.clone(), terrain::UNET_FILE)?;
    let devices = crate::devices_named(&a.device, a.threads)?;
    let mut model = TerrainDiffusion::open(&path, devices).map_err(|e| e.to_string())?;
    model.set_compile_options(crate::machine_options());
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let req = Request { difficulty: a.difficulty.clone(), count, batch: a.batch.min(count), steps: a.steps, seed: a.seed, noise: noise.map(|n| n.1), init };
    let t1 = Instant::now();
    let compiled = model.prepare(&req).map_err(|e| e.to_string())?;
    let compile_ms = t1.elapsed().as_secs_f64() * 1e3;

    let batches = count.div_ceil(req.batch);
    let bar = if a.quiet || a.json { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new((batches * a.steps) as u64) };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} UNet runs  {msg}  [{elapsed_precise}, {eta} left]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let t2 = Instant::now();
    let values = model
        .generate(&req, &mut |p| {
            bar.set_message(format!("batch {}/{} step {}/{}", p.batch + 1, p.batches, p.step, p.steps));
            bar.inc(1);
        })
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    let run_ms = t2.elapsed().as_secs_f64() * 1e3;

    let metres = terrain::to_metres(&values);
    let px = SIZE * SIZE;
    let tiles: Vec<&[f32]> = metres.chunks(px).collect();
    let mut written = Vec::new();
    if let Some(p) = &output {
        let (w, h, rgb) = heightmap::picture(&tiles, SIZE, SIZE, None);
        heightmap::write_png_rgb(p, w, h, &rgb)?;
        written.push(("output", p.clone()));
    }
    if let Some(p) = &png16 {
        let (w, h, grey) = heightmap::grey16(&tiles, SIZE, SIZE, (0.0, HEIGHT_RANGE_M));
        heightmap::write_png_gray16(p, w, h, &grey)?;
        written.push(("png16", p.clone()));
    }
    if let Some(p) = &heights {
        let data = if a.heights_unit == HeightsUnit::Metres { metres.clone() } else { values.clone() };
        let t = HostTensor::f32(&[count, SIZE, SIZE], data).map_err(|e| e.to_string())?;
        crate::run::write_npy(p, &t, false)?;
        written.push(("heights", p.clone()));
    }
    let per_s = count as f64 / (run_ms / 1e3);
    if a.json {
        let obj = serde_json::json!({
            "model": path.display().to_string(),
            "samples": count, "batch": req.batch, "steps": a.steps, "seed": a.seed,
            "difficulty": a.difficulty, "init": a.init.as_ref().map(|p| p.display().to_string()),
            "strength": a.init.as_ref().map(|_| a.strength),
            "files": written.iter().map(|(k, p)| (k.to_string(), serde_json::json!(p.display().to_string()))).collect::<serde_json::Map<_, _>>(),
            "heights_m": { "min": metres.iter().copied().fold(f32::INFINITY, f32::min), "max": metres.iter().copied().fold(f32::NEG_INFINITY, f32::max) },
            "timings": { "load_ms": load_ms, "compile_ms": compile_ms, "plans_compiled": compiled.plans, "run_ms": run_ms, "samples_per_s": per_s },
        });
        println!("{}", serde_json::to_string_pretty(&obj).map_err(|e| e.to_string())?);
    } else {
        for (k, p) in &written {
            println!("{k}: {}", p.display());
        }
        eprintln!("[{count} samples × {} steps in {run_ms:.1} ms ({per_s:.2} samples/s); load {load_ms:.0} ms, compile {compile_ms:.0} ms]", a.steps);
    }
    Ok(())
}
