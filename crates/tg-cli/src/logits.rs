//! `tg logits`: the final-position logits of a prompt, as a table of the most likely
//! tokens, as JSON (every logit, shortest round-trip f32 text), or as a raw little-endian
//! f32 file. It is the command-line reference the Python package's `Gemma3.logits` is
//! compared against.

use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use tg_models::Logits;

/// Arguments of `tg logits`.
#[derive(Args)]
pub struct LogitsArgs {
    /// GGUF model (default model if omitted).
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// The prompt.
    #[arg(short, long)]
    prompt: String,
    /// Do not add the BOS token before the prompt.
    #[arg(long)]
    no_bos: bool,
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Device to run on: `cpu` (default), `opencl`, `opencl:N` (`tg devices` lists them).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Quantized-matmul arithmetic (`exact` or `q8`).
    #[arg(long, value_enum, default_value_t = crate::NumericsArg::Exact)]
    numerics: crate::NumericsArg,
    /// Write the logits to this file as raw little-endian f32 (n_vocab values).
    #[arg(long, conflicts_with = "json")]
    out: Option<PathBuf>,
    /// Print one JSON object with the prompt tokens and every logit.
    #[arg(long)]
    json: bool,
    /// Rows of the most-likely-tokens table printed without `--json`.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

/// Runs `tg logits`.
pub fn run(a: LogitsArgs) -> Result<(), String> {
    let mut m = crate::load(a.model, a.threads, &a.device)?;
    m.set_compile_options(a.numerics.options());
    let ids = m.tokenizer.encode(&a.prompt, !a.no_bos, true);
    let logits = m.forward(&ids, Logits::Last).map_err(|e| e.to_string())?;
    let mut stdout = std::io::stdout().lock();
    if let Some(path) = &a.out {
        let bytes: Vec<u8> = logits.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("[{} logits for {} prompt tokens written to {}]", logits.len(), ids.len(), path.display());
        return Ok(());
    }
    if a.json {
        let obj = serde_json::json!({
            "prompt": a.prompt,
            "prompt_tokens": ids,
            "n_vocab": logits.len(),
            "argmax": tg_models::argmax(&logits),
            "logits": logits,
        });
        writeln!(stdout, "{}", serde_json::to_string(&obj).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&x, &y| logits[y].total_cmp(&logits[x]).then(x.cmp(&y)));
    writeln!(stdout, "{} prompt tokens, {} logits; most likely next tokens:", ids.len(), logits.len()).map_err(|e| e.to_string())?;
    for &i in order.iter().take(a.top) {
        let piece = m.tokenizer.token_text(i as u32).unwrap_or("?");
        writeln!(stdout, "{i:>7} {:>12.6} {piece:?}", logits[i]).map_err(|e| e.to_string())?;
    }
    Ok(())
}
