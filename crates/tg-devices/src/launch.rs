//! Launch configurations of GPU devices: measured per device, stored under its fingerprint,
//! applied when the device is opened.
//!
//! A device with a launch configuration (`Device::launch_config`: the work-group and tile
//! shapes of the shared GPU kernels, `tg_gpu::Tuning`) starts from its type's defaults.
//! [`tune`] measures, one field at a time, each candidate value on kernels shaped like the
//! models' (decode and prefill products, norms, convolutions, attention over a long
//! context), keeps the fastest and moves to the next field; [`save`] stores the result in
//! `launch/<id>.json` of the cache folder, keyed by the device's fingerprint without its
//! launch part ([`base_fingerprint`]), and [`crate::open`] applies it (through
//! [`apply_saved`]) whenever that device is opened again. `tg profile --device …` tunes before it measures kernel times,
//! so the profile's times are those of the tuned shapes.

use std::path::PathBuf;
use std::time::Instant;

use tg_gpu::Tuning;
use tg_ir::DType;
use tg_profile::{bench, BenchOptions, ProfileKey};
use tg_quant::GgmlType;
use tg_runtime::{Device, Kernel, Layout};

/// What one field's candidates measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FieldReport {
    /// The `tg_gpu::Tuning` field.
    pub field: &'static str,
    /// Each candidate value with the summed median time (ns) of the field's workloads.
    pub candidates: Vec<(String, f64)>,
    /// The value kept.
    pub chosen: String,
}

/// What [`tune`] measured and chose.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TuneReport {
    /// The device.
    pub device: String,
    /// Per field, in the order tuned.
    pub fields: Vec<FieldReport>,
    /// The configuration chosen (JSON of `tg_gpu::Tuning`).
    pub config: String,
    /// Seconds the measurements took.
    pub seconds: f64,
}

/// The folder of stored launch configurations (`$TG_CACHE_DIR/launch`, else
/// `~/.cache/tensor-graphs/launch`).
pub fn dir() -> PathBuf {
    tg_profile::default_dir().with_file_name("launch")
}

/// FNV-1a of a string, as 16 hex digits (file names).
fn id(s: &str) -> String {
    let h = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{h:016x}")
}

/// A device fingerprint without its launch configuration: devices with one end their
/// fingerprint with ` | launch <key>` (the part their kernel times depend on that tuning
/// changes); what precedes it names the hardware, driver and kernel code.
pub fn base_fingerprint(fingerprint: &str) -> &str {
    fingerprint.rsplit_once(" | launch ").map_or(fingerprint, |(base, _)| base)
}

/// The file holding the configuration of the device with this fingerprint (its launch part
/// ignored).
pub fn path_for(fingerprint: &str) -> PathBuf {
    dir().join(format!("{}.json", id(base_fingerprint(fingerprint))))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    /// The device's fingerprint without its launch part (the file's key).
    fingerprint: String,
    /// `tg_gpu::Tuning` as JSON.
    config: serde_json::Value,
}

/// Stores `config` for the device with this fingerprint (written to a temporary file, then
/// renamed). Returns the path.
pub fn save(fingerprint: &str, config: &str) -> Result<PathBuf, String> {
    let path = path_for(fingerprint);
    let fingerprint = base_fingerprint(fingerprint);
    let value: serde_json::Value = serde_json::from_str(config).map_err(|e| format!("launch configuration: {e}"))?;
    let text = serde_json::to_string_pretty(&Stored { fingerprint: fingerprint.to_string(), config: value }).map_err(|e| e.to_string())?;
    let parent = path.parent().ok_or("launch configuration path has no folder")?;
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Applies the stored configuration of `device`, if there is one (`TG_LAUNCH_CONFIG=off`
/// skips it). `Ok(Some(path))` when one was applied, `Ok(None)` when none is stored or the
/// device has no launch configuration; an unreadable, malformed or foreign file is an error
/// naming it (the device keeps its configuration).
pub fn apply_saved(device: &dyn Device) -> Result<Option<PathBuf>, String> {
    if device.launch_config().is_none() || std::env::var_os("TG_LAUNCH_CONFIG").is_some_and(|v| v == "off") {
        return Ok(None);
    }
    let fp = device.fingerprint();
    let path = path_for(&fp);
    let fp = base_fingerprint(&fp);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let stored: Stored = serde_json::from_str(&text).map_err(|e| format!("{}: not a launch configuration: {e}", path.display()))?;
    if stored.fingerprint != fp {
        return Err(format!("{}: stored for another device ({}), not {}", path.display(), stored.fingerprint, fp));
    }
    device.set_launch_config(&stored.config.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(path))
}

fn f32s(shape: &[usize]) -> Layout {
    Layout::contiguous(shape, DType::F32)
}

/// `x [m, k] · W[n, k]ᵀ` with a weight of type `ty`.
fn mmq(m: usize, n: usize, k: usize, ty: GgmlType, q8: bool) -> (Kernel, Vec<Layout>, Layout) {
    let w = Layout::contiguous(&[n, k], if ty == GgmlType::F32 { DType::F32 } else { DType::Quant(ty) });
    (Kernel::MatMulQuant { quantize_activations: q8 }, vec![f32s(&[m, k]), w], f32s(&[m, n]))
}

/// The workloads a field's candidates are timed on (kernel, operands, output), shaped like
/// the models': Gemma 3's decode and prefill products and norms, the terrain UNet's
/// convolutions, attention over a long context.
fn workloads(field: &str) -> Vec<(Kernel, Vec<Layout>, Layout)> {
    let eps = 1e-6f64.to_bits();
    match field {
        "mv_lanes" | "mv_rows" => vec![
            mmq(1, 2048, 2048, GgmlType::Q4_K, false),
            mmq(1, 16384, 640, GgmlType::Q8_0, false),
            mmq(5, 2048, 640, GgmlType::Q5_0, false),
            mmq(1, 640, 2048, GgmlType::Q6_K, true),
        ],
        "row_group" => vec![
            (Kernel::RmsNorm { eps_bits: eps }, vec![f32s(&[5, 640]), f32s(&[640])], f32s(&[5, 640])),
            (Kernel::Softmax, vec![f32s(&[512, 128])], f32s(&[512, 128])),
            (Kernel::GroupNorm { groups: 32, eps_bits: eps, act: tg_ir::Act::Silu }, vec![f32s(&[1, 64, 32, 32]), f32s(&[64, 1, 1]), f32s(&[64, 1, 1])], f32s(&[1, 64, 32, 32])),
        ],
        "tile64_min" => vec![
            mmq(128, 2048, 640, GgmlType::Q8_0, false),
            mmq(32, 640, 2048, GgmlType::Q4_K, false),
            (Kernel::MatMul { transpose_rhs: false }, vec![f32s(&[128, 256]), f32s(&[256, 128])], f32s(&[128, 128])),
        ],
        "conv_tiled_min_channels" => {
            let w = tg_ir::Window { size: vec![3, 3], stride: vec![1, 1], dilation: vec![1, 1], pad_begin: vec![1, 1], pad_end: vec![1, 1] };
            [4usize, 16, 64]
                .into_iter()
                .map(|m| (Kernel::Conv { window: w.clone(), groups: 1 }, vec![f32s(&[1, 32, 32, 32]), f32s(&[m, 32, 3, 3])], f32s(&[1, m, 32, 32])))
                .collect()
        }
        "elementwise_group" => vec![(Kernel::Binary(tg_ir::BinaryOp::Add), vec![f32s(&[1 << 20]), f32s(&[1 << 20])], f32s(&[1 << 20]))],
        "attention_split_keys" => {
            let scale = (1.0f64 / 16.0).to_bits();
            vec![(
                Kernel::Attention { scale_bits: scale },
                vec![f32s(&[1, 4, 1, 256]), f32s(&[1, 1, 2048, 256]), f32s(&[1, 1, 2048, 256]), f32s(&[1, 2048])],
                f32s(&[1, 4, 1, 256]),
            )]
        }
        _ => vec![],
    }
}

/// The fields [`tune`] measures, in order (decode first: it is what generation waits on).
pub const FIELDS: [&str; 7] = ["mv_lanes", "mv_rows", "row_group", "tile64_min", "conv_tiled_min_channels", "elementwise_group", "attention_split_keys"];

/// Measures each field's candidates on `device` (which must have a launch configuration) and
/// leaves the fastest configuration applied. Each candidate is timed as the sum of the
/// medians of its field's workloads; a candidate whose workload fails is skipped (and named
/// in the report). The device's configuration is restored if measuring fails.
pub fn tune(device: &dyn Device, threads: usize, opts: &BenchOptions) -> Result<TuneReport, String> {
    let t0 = Instant::now();
    let start = device.launch_config().ok_or_else(|| format!("{}: has no launch configuration to tune", device.name()))?;
    let mut best: Tuning = serde_json::from_str(&start).map_err(|e| format!("{}: launch configuration: {e}", device.name()))?;
    let mut fields = Vec::new();
    let result = (|| -> Result<(), String> {
        for field in FIELDS {
            // Rows per work-group matter only to the 32-lane matrix-vector kernel.
            if field == "mv_rows" && best.mv_lanes == 1 {
                continue;
            }
            let loads = workloads(field);
            let mut cands = Vec::new();
            let mut chosen: Option<(Tuning, f64)> = None;
            for cand in best.candidates(field) {
                let value = serde_json::to_value(&cand).ok().and_then(|v| v.get(field).map(|x| x.to_string())).unwrap_or_default();
                let json = serde_json::to_string(&cand).map_err(|e| e.to_string())?;
                device.set_launch_config(&json)?;
                let mut total = 0.0;
                let mut failed = None;
                for (kernel, ins, out) in &loads {
                    let key = ProfileKey::new(kernel.clone(), ins.clone(), out.clone(), device.name(), threads);
                    match bench(device, &key, opts) {
                        Ok(m) => total += m.median_ns,
                        Err(e) => {
                            failed = Some(e.to_string());
                            break;
                        }
                    }
                }
                match failed {
                    Some(e) => cands.push((format!("{value} (failed: {e})"), f64::NAN)),
                    None => {
                        cands.push((value, total));
                        if chosen.as_ref().is_none_or(|(_, t)| total < *t) {
                            chosen = Some((cand, total));
                        }
                    }
                }
            }
            if let Some((t, _)) = chosen {
                best = t;
            }
            let value = serde_json::to_value(&best).ok().and_then(|v| v.get(field).map(|x| x.to_string())).unwrap_or_default();
            fields.push(FieldReport { field, candidates: cands, chosen: value });
        }
        Ok(())
    })();
    let config = serde_json::to_string(&best).map_err(|e| e.to_string())?;
    match result {
        Ok(()) => {
            device.set_launch_config(&config)?;
            Ok(TuneReport { device: device.name().to_string(), fields, config, seconds: t0.elapsed().as_secs_f64() })
        }
        Err(e) => {
            let _ = device.set_launch_config(&start);
            Err(e)
        }
    }
}
