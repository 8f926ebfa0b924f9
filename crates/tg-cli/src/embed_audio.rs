//! `tg embed-audio FILE.wav …`: speech embeddings (openwakeword's melspectrogram and
//! speech_embedding models, `tg_models::audio`) of WAV files, with wake-word scores and
//! detections; `--stream` does the same on raw 16 kHz PCM arriving on stdin.

use clap::Args;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tg_ir::HostTensor;
use tg_models::audio::{self, AudioEmbedder, AudioEmbeddings, AudioStream, Detection, EMBED_DIM, SAMPLE_RATE};

/// Arguments of `tg embed-audio`.
#[derive(Args, Debug)]
pub struct EmbedAudioArgs {
    /// WAV files (PCM 8/16/24/32-bit or 32/64-bit float, any rate: resampled to 16 kHz;
    /// channels mixed to mono).
    files: Vec<PathBuf>,
    /// The folder holding melspectrogram.onnx, embedding_model.onnx and the wake-word
    /// classifiers (default: the ONNX models folder, fetched if missing).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Score this wake word per window (a classifier's name in the model folder, e.g.
    /// `hey_jarvis`, or a path to one); repeatable.
    #[arg(long = "wakeword")]
    wakewords: Vec<String>,
    /// Score at or above which a window counts as a detection.
    #[arg(long, default_value_t = 0.5)]
    threshold: f32,
    /// Write per file `STEM.npy` (embeddings, [windows, 96]) and `STEM.WAKEWORD.npy`
    /// (scores, [windows]) into this folder.
    #[arg(long)]
    npy: Option<PathBuf>,
    /// Read raw 16 kHz mono 16-bit little-endian PCM from stdin and print each window's
    /// scores as the audio arrives (80 ms at a time).
    #[arg(long)]
    stream: bool,
    /// JSON: one object per file (a list for several); with --stream one object per window,
    /// one per line.
    #[arg(long)]
    json: bool,
    /// Devices to run on, comma separated (`cpu`, `opencl`, `cpu,opencl`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
}

/// One file's results.
struct FileResult {
    file: PathBuf,
    sample_rate: u32,
    channels: u16,
    format: String,
    seconds: f64,
    emb: AudioEmbeddings,
    scores: Vec<(String, Vec<f32>)>,
    detections: Vec<Detection>,
}

fn open(a: &EmbedAudioArgs) -> Result<AudioEmbedder, String> {
    let dir = crate::model_path::resolve_onnx_dir(a.model.clone())?;
    let devices = crate::devices_named(&a.device, a.threads)?;
    let mut m = AudioEmbedder::open(&dir, devices).map_err(|e| e.to_string())?;
    m.set_compile_options(crate::machine_options());
    for w in &a.wakewords {
        m.add_wakeword(w).map_err(|e| e.to_string())?;
    }
    Ok(m)
}

/// A file's samples at 16 kHz in int16 units.
fn load(path: &Path) -> Result<(tg_audio::Audio, Vec<f32>), String> {
    let wav = tg_audio::read_wav(path).map_err(|e| e.to_string())?;
    let at16 = tg_audio::resample(&wav.samples, wav.sample_rate, SAMPLE_RATE).map_err(|e| format!("{}: {e}", path.display()))?;
    let x: Vec<f32> = at16.iter().map(|v| v * 32768.0).collect();
    if x.len() < audio::MIN_SAMPLES {
        return Err(format!("{}: {:.3} s of audio; one embedding window needs at least {:.3} s", path.display(), wav.duration_s(), audio::MIN_SAMPLES as f64 / SAMPLE_RATE as f64));
    }
    Ok((wav, x))
}

fn json_of(r: &FileResult) -> serde_json::Value {
    let rows: Vec<&[f32]> = (0..r.emb.windows).map(|i| r.emb.row(i)).collect();
    serde_json::json!({
        "file": r.file.display().to_string(),
        "sample_rate": r.sample_rate,
        "channels": r.channels,
        "format": r.format,
        "seconds": r.seconds,
        "windows": r.emb.windows,
        "embeddings": rows,
        "scores": r.scores.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        "detections": r.detections,
    })
}

fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "audio".into())
}

pub fn run(a: EmbedAudioArgs) -> Result<(), String> {
    if !(0.0..=1.0).contains(&a.threshold) {
        return Err(format!("--threshold {} is outside 0–1", a.threshold));
    }
    if a.stream {
        if !a.files.is_empty() {
            return Err("--stream reads stdin: give no files".into());
        }
        return stream(&a);
    }
    if a.files.is_empty() {
        return Err("no WAV files given (or --stream to read 16 kHz PCM from stdin)".into());
    }
    if let Some(d) = &a.npy {
        std::fs::create_dir_all(d).map_err(|e| format!("--npy {}: {e}", d.display()))?;
    }
    // Every file is read and checked before any model runs.
    let inputs = a.files.iter().map(|f| load(f)).collect::<Result<Vec<_>, _>>()?;
    let mut m = open(&a)?;
    let mut results = Vec::new();
    let (mut audio_s, mut busy) = (0.0, 0.0);
    for (file, (wav, x)) in a.files.iter().zip(inputs) {
        let t = Instant::now();
        let emb = m.embed(&x).map_err(|e| format!("{}: {e}", file.display()))?;
        let scores = m.scores(&emb).map_err(|e| format!("{}: {e}", file.display()))?;
        busy += t.elapsed().as_secs_f64();
        audio_s += wav.duration_s();
        let detections = scores.iter().flat_map(|(k, s)| audio::detections(k, s, a.threshold)).collect();
        results.push(FileResult {
            file: file.clone(),
            sample_rate: wav.sample_rate,
            channels: wav.channels,
            format: wav.format.to_string(),
            seconds: wav.duration_s(),
            emb,
            scores,
            detections,
        });
    }
    if let Some(d) = &a.npy {
        for r in &results {
            let t = HostTensor::f32(&[r.emb.windows, EMBED_DIM], r.emb.data.clone()).map_err(|e| e.to_string())?;
            crate::run::write_npy(&d.join(format!("{}.npy", stem(&r.file))), &t, false)?;
            for (k, s) in &r.scores {
                let t = HostTensor::f32(&[s.len()], s.clone()).map_err(|e| e.to_string())?;
                crate::run::write_npy(&d.join(format!("{}.{k}.npy", stem(&r.file))), &t, false)?;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| e.to_string();
    if a.json {
        let v = if results.len() == 1 { json_of(&results[0]) } else { serde_json::Value::Array(results.iter().map(json_of).collect()) };
        writeln!(out, "{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?).map_err(w)?;
    } else {
        for r in &results {
            writeln!(out, "{}: {} Hz, {} channel(s), {}, {:.2} s; {} windows × {EMBED_DIM}", r.file.display(), r.sample_rate, r.channels, r.format, r.seconds, r.emb.windows)
                .map_err(w)?;
            for (k, s) in &r.scores {
                let (at, best) = s.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
                let found: Vec<String> = r.detections.iter().filter(|d| &d.wakeword == k).map(|d| format!("{:.2}–{:.2} s (peak {:.3})", d.start_s, d.end_s, d.peak)).collect();
                writeln!(
                    out,
                    "  {k}: max {best:.4} at window {at} ({:.2} s); detections ≥ {}: {}",
                    audio::window_span(at).1,
                    a.threshold,
                    if found.is_empty() { "none".to_string() } else { found.join(", ") }
                )
                .map_err(w)?;
            }
            for i in 0..r.emb.windows {
                let row: Vec<String> = r.emb.row(i).iter().map(|v| format!("{v:.4}")).collect();
                writeln!(out, "  [{i:>4}] {}", row.join(" ")).map_err(w)?;
            }
        }
    }
    eprintln!("[{audio_s:.2} s of audio in {:.1} ms: {:.1}× real time]", busy * 1e3, audio_s / busy.max(1e-9));
    Ok(())
}

/// `--stream`: 16 kHz PCM16 from stdin, 80 ms at a time.
fn stream(a: &EmbedAudioArgs) -> Result<(), String> {
    let mut m = open(a)?;
    let names = m.wakewords();
    let mut s = AudioStream::new();
    let mut stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; audio::STREAM_CHUNK * 2];
    let mut carry: Vec<u8> = Vec::new();
    let mut above = vec![false; names.len()];
    let (mut samples, mut busy) = (0usize, 0.0);
    let w = |e: std::io::Error| e.to_string();
    loop {
        let n = stdin.read(&mut buf).map_err(|e| format!("stdin: {e}"))?;
        if n == 0 {
            break;
        }
        carry.extend_from_slice(&buf[..n]);
        let even = carry.len() & !1;
        let x: Vec<f32> = tg_audio::pcm16_le(&carry[..even]).iter().map(|v| v * 32768.0).collect();
        carry.drain(..even);
        samples += x.len();
        let t = Instant::now();
        let windows = s.push(&mut m, &x).map_err(|e| e.to_string())?;
        busy += t.elapsed().as_secs_f64();
        for win in windows {
            let (_, end) = audio::window_span(win.window);
            if a.json {
                let scores: serde_json::Map<String, serde_json::Value> = names.iter().zip(&win.scores).map(|(k, v)| (k.clone(), serde_json::json!(v))).collect();
                let obj = serde_json::json!({ "window": win.window, "end_s": end, "scores": scores });
                writeln!(out, "{obj}").map_err(w)?;
            } else {
                let sc: Vec<String> = names.iter().zip(&win.scores).map(|(k, v)| format!("{k}={v:.4}")).collect();
                writeln!(out, "{end:7.2} s  window {:>4}  {}", win.window, sc.join("  ")).map_err(w)?;
            }
            for (k, (&v, up)) in win.scores.iter().zip(above.iter_mut()).enumerate() {
                if v >= a.threshold && !*up && !a.json {
                    writeln!(out, "{end:7.2} s  DETECTED {} (score {v:.3})", names[k]).map_err(w)?;
                }
                *up = v >= a.threshold;
            }
            out.flush().map_err(w)?;
        }
    }
    let secs = samples as f64 / SAMPLE_RATE as f64;
    eprintln!("[stream: {secs:.2} s of audio, {} windows, {:.1} ms busy: {:.1}× real time]", s.windows(), busy * 1e3, secs / busy.max(1e-9));
    Ok(())
}
