//! `tg synth`: random-weight models with the exact layout of real ones, for machines that
//! cannot download the real weights (a GPU check) and for tests.
//!
//! - `tg synth gemma3-270m --out model.gguf [--seed N] [--layers N] [--hf-dir DIR]`: a GGUF
//!   file with the tensor names, shapes, ggml types and metadata of Gemma 3 270M Q4_K_M (the
//!   built-in layout, `tests/fixtures/gemma3-270m-layout.json`, or `--layout FILE`), a
//!   synthetic vocabulary of the same size with the same special tokens, and seeded random
//!   weights (`tg_models::synth`). `--hf-dir` also writes the same weights, dequantized, as
//!   a Hugging Face Transformers checkpoint (`config.json`, `model.safetensors`).
//! - `tg synth embeddinggemma-300m --out DIR [--seed N] [--layers N]`: a sentence-transformers
//!   folder with the configuration files and tensor shapes of EmbeddingGemma-300M
//!   (`tests/fixtures/embeddinggemma-300m-layout.json`), random F32 weights and a synthetic
//!   word-level `tokenizer.json` of the same size, so `tg embed` / `tg bench-embed` run.
//! - `tg synth llama3-tiny|mistral-tiny|qwen3-tiny|llama-linear-tiny|llama-yarn-tiny --out
//!   model.gguf [--seed N]`: a tiny Llama-family GGUF file written from scratch
//!   (`tg_models::synth::TinyModel`: Llama 3 with RoPE frequency factors, Mistral with a
//!   sliding window and a SentencePiece vocabulary, Qwen3, Llama with linear or YaRN RoPE
//!   scaling), the same bytes for the same seed; llama.cpp's logits on these files are the
//!   fixtures in `tests/fixtures/llama_cpp/synth/`.
//! - `tg synth --dump-layout FILE.gguf|DIR [--out layout.json]`: the layout of a real GGUF
//!   file or sentence-transformers folder, as the fixtures were made.

use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use tg_models::synth::{self, FolderLayout, GgufLayout, SynthOptions, TinyModel};

/// Arguments of `tg synth`.
#[derive(Args)]
pub struct SynthArgs {
    /// What to write: `gemma3-270m` (a GGUF file), `embeddinggemma-300m` (a
    /// sentence-transformers folder), or a tiny Llama-family GGUF file: `llama3-tiny`,
    /// `mistral-tiny`, `qwen3-tiny`, `llama-linear-tiny`, `llama-yarn-tiny`.
    #[arg(required_unless_present = "dump_layout")]
    model: Option<String>,
    /// Output file (with `--dump-layout`: the layout JSON; printed when omitted).
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// Seed of the random weights (same seed, same file).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep only the first N layers (a smaller model of the same per-layer shape).
    #[arg(long)]
    layers: Option<usize>,
    /// Also write the same weights as a Hugging Face Transformers checkpoint in this folder
    /// (`config.json` of a `Gemma3ForCausalLM`, `model.safetensors` in f32).
    #[arg(long = "hf-dir")]
    hf_dir: Option<PathBuf>,
    /// A layout JSON to follow instead of the built-in one.
    #[arg(long)]
    layout: Option<PathBuf>,
    /// Read the layout of this GGUF file (metadata, tensor table, special tokens) or
    /// sentence-transformers folder (configuration files, safetensors headers, tokenizer size
    /// and special tokens) and write it as JSON instead of synthesizing anything.
    #[arg(long = "dump-layout", value_name = "GGUF|DIR", conflicts_with_all = ["model", "hf_dir", "layers"])]
    dump_layout: Option<PathBuf>,
    /// Worker threads (0 = all cores); the output does not depend on it.
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
}

/// Runs `tg synth`.
pub fn run(a: SynthArgs) -> Result<(), String> {
    if let Some(src) = &a.dump_layout {
        let name = src.file_name().map_or_else(|| src.display().to_string(), |n| n.to_string_lossy().into_owned());
        let (json, what) = if src.is_dir() {
            let layout = FolderLayout::from_dir(src, &name).map_err(|e| format!("{}: {e}", src.display()))?;
            let n: usize = layout.safetensors.values().map(|s| s.tensors.len()).sum();
            (layout.to_json(), format!("{} files, {n} tensors", layout.files.len()))
        } else {
            let f = tg_gguf::GgufFile::open(src).map_err(|e| e.to_string())?;
            let layout = GgufLayout::from_gguf(&f, &name).map_err(|e| e.to_string())?;
            (layout.to_json(), format!("{} metadata entries, {} tensors", layout.metadata.len(), layout.tensors.len()))
        };
        return match &a.out {
            Some(path) => {
                std::fs::write(path, &json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                eprintln!("layout of {} ({what}) written to {}", src.display(), path.display());
                Ok(())
            }
            None => {
                print!("{json}");
                Ok(())
            }
        };
    }
    let model = a.model.as_deref().unwrap_or_default();
    match model {
        "gemma3-270m" => gemma3(&a),
        "embeddinggemma-300m" => embedding(&a),
        other => match TinyModel::from_name(other) {
            Some(tiny) => tiny_model(&a, tiny),
            None => {
                let tiny: Vec<&str> = TinyModel::ALL.iter().map(|m| m.name()).collect();
                Err(format!("tg synth: unknown model '{other}' (known: gemma3-270m, embeddinggemma-300m, {})", tiny.join(", ")))
            }
        },
    }
}

fn tiny_model(a: &SynthArgs, model: TinyModel) -> Result<(), String> {
    let name = model.name();
    let out = a.out.as_ref().ok_or_else(|| format!("tg synth {name}: --out FILE.gguf is required"))?;
    for (given, flag) in [(a.layers.is_some(), "--layers"), (a.hf_dir.is_some(), "--hf-dir"), (a.layout.is_some(), "--layout")] {
        if given {
            return Err(format!("tg synth {name}: {flag} is for the layouts of real models; a tiny model has a fixed configuration"));
        }
    }
    let t0 = Instant::now();
    let s = synth::write_tiny(model, a.seed, out).map_err(|e| e.to_string())?;
    let spec = model.spec();
    eprintln!(
        "wrote {}: {} ({}, {} layers, n_embd {}), {} tensors, {} weights, {} tokens, {} bytes, seed {} ({:.2} s)",
        out.display(),
        name,
        spec.arch,
        spec.n_layer,
        spec.n_embd,
        s.tensors,
        s.elements,
        s.vocab,
        s.bytes,
        a.seed,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn gemma3(a: &SynthArgs) -> Result<(), String> {
    let out = a.out.as_ref().ok_or("tg synth gemma3-270m: --out FILE.gguf is required")?;
    let mut layout = match &a.layout {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            GgufLayout::from_json(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => GgufLayout::gemma3_270m().map_err(|e| e.to_string())?,
    };
    let arch = layout.architecture().map_err(|e| e.to_string())?;
    if arch != "gemma3" {
        return Err(format!("tg synth gemma3-270m: the layout is of architecture '{arch}', not gemma3"));
    }
    if let Some(n) = a.layers {
        layout = layout.with_layers(n).map_err(|e| e.to_string())?;
    }
    let t0 = Instant::now();
    let s = synth::write_gguf(&layout, &SynthOptions { seed: a.seed, threads: a.threads }, out).map_err(|e| e.to_string())?;
    eprintln!(
        "wrote {}: {} tensors, {:.1} M weights, {} tokens, {:.1} MB, seed {} ({:.1} s; layout of {})",
        out.display(),
        s.tensors,
        s.elements as f64 / 1e6,
        s.vocab,
        s.bytes as f64 / 1e6,
        a.seed,
        t0.elapsed().as_secs_f64(),
        layout.source
    );
    if let Some(dir) = &a.hf_dir {
        let t0 = Instant::now();
        let h = synth::write_hf_gemma3(out, dir).map_err(|e| e.to_string())?;
        eprintln!("wrote {}: config.json, model.safetensors ({} tensors, f32, {:.1} MB; {:.1} s)", dir.display(), h.tensors, h.bytes as f64 / 1e6, t0.elapsed().as_secs_f64());
    }
    Ok(())
}

fn embedding(a: &SynthArgs) -> Result<(), String> {
    let out = a.out.as_ref().ok_or("tg synth embeddinggemma-300m: --out DIR is required")?;
    if a.hf_dir.is_some() {
        return Err("tg synth embeddinggemma-300m: --hf-dir is for gemma3-270m (the folder written is already a Hugging Face one)".into());
    }
    let mut layout = match &a.layout {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            FolderLayout::from_json(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => FolderLayout::embeddinggemma_300m().map_err(|e| e.to_string())?,
    };
    if let Some(n) = a.layers {
        layout = layout.with_layers(n).map_err(|e| e.to_string())?;
    }
    let t0 = Instant::now();
    let (tensors, bytes) = synth::write_folder(&layout, &SynthOptions { seed: a.seed, threads: a.threads }, out).map_err(|e| e.to_string())?;
    eprintln!(
        "wrote {}: {} configuration files, {tensors} tensors ({:.1} MB of F32 weights), a {}-token synthetic tokenizer, seed {} ({:.1} s; layout of {})",
        out.display(),
        layout.files.len(),
        bytes as f64 / 1e6,
        layout.tokenizer.vocab_size,
        a.seed,
        t0.elapsed().as_secs_f64(),
        layout.source
    );
    Ok(())
}
