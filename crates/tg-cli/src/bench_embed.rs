//! `tg bench-embed`: embedding throughput on the two workloads that
//! `scripts/bench_sentence_transformers.py` measures for sentence-transformers, with the
//! same texts (`scripts/embed_bench_texts.json`), so the two can be read side by side:
//!
//! - **batch32**: one call embedding 32 short sentences (sentences/s);
//! - **single512**: one call embedding one text of exactly 512 tokens, BOS and EOS
//!   included (sentences/s).
//!
//! Times are end to end (tokenization included), after one warm-up call that also compiles
//! and caches the plans; `-r` timed repetitions give the mean and sample standard deviation.

use crate::bench::mean_std;
use crate::model_path;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use tg_models::EmbeddingGemma;

const TEXTS: &str = include_str!("../../../scripts/embed_bench_texts.json");

/// Arguments of `tg bench-embed`.
#[derive(Args)]
pub struct BenchEmbedArgs {
    /// Model folder (default: EmbeddingGemma-300M, downloaded if missing).
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// Thread counts, comma separated.
    #[arg(short = 't', long = "threads", default_value = "2", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Devices to run on, comma separated: `cpu` (default), `opencl`, `opencl:N`, `cuda`,
    /// `cuda:N`, or several (`cpu,cuda`; the first is home). `tg devices` lists them.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Timed repetitions per workload.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    /// Print JSON rows instead of a table.
    #[arg(long)]
    json: bool,
    /// Also time every plan step and print the time per kernel kind for each workload.
    #[arg(long)]
    profile: bool,
}

/// The deterministic text of exactly `target` tokens (BOS and EOS included): the longest
/// prefix of the cycled word list within `target`, then " and" until it is exact — the rule
/// the sentence-transformers script uses.
fn exact_token_text(m: &EmbeddingGemma, words: &[String], target: usize) -> Result<String, String> {
    let text = |n: usize| (0..n).map(|i| words[i % words.len()].as_str()).collect::<Vec<_>>().join(" ");
    let count = |t: &str| m.tokenizer.encode(t, true).map(|v| v.len()).map_err(|e| e.to_string());
    let (mut lo, mut hi) = (0usize, 1usize);
    while count(&text(hi))? <= target {
        hi *= 2;
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if count(&text(mid))? <= target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut t = text(lo);
    for _ in 0..64 {
        let n = count(&t)?;
        if n == target {
            return Ok(t);
        }
        if n > target {
            break;
        }
        t.push_str(" and");
    }
    Err(format!("could not build a text of exactly {target} tokens"))
}

/// Runs the benchmark.
pub fn run(a: BenchEmbedArgs) -> Result<(), String> {
    if a.reps == 0 || a.threads.is_empty() {
        return Err("need at least one repetition and one thread count".into());
    }
    let spec: serde_json::Value = serde_json::from_str(TEXTS).map_err(|e| format!("embed_bench_texts.json: {e}"))?;
    let strings = |k: &str| -> Result<Vec<String>, String> {
        spec[k]
            .as_array()
            .ok_or(format!("embed_bench_texts.json: no '{k}' list"))?
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or(format!("'{k}' holds a non-string")))
            .collect()
    };
    let short = strings("short")?;
    let words = strings("long_words")?;
    let dir = model_path::resolve_embedding(a.model)?;
    let mut rows = Vec::new();
    for &t in &a.threads {
        let mut m = EmbeddingGemma::load_on_devices(&dir, crate::devices_named(&a.device, t)?).map_err(|e| e.to_string())?;
        m.set_compile_options(crate::machine_options());
        m.set_profiling(a.profile);
        let long = exact_token_text(&m, &words, 512)?;
        let short_refs: Vec<&str> = short.iter().map(String::as_str).collect();
        let mut short_tokens = 0usize;
        for s in &short_refs {
            short_tokens += m.tokenize(s, None).map_err(|e| e.to_string())?.len();
        }
        for (name, texts, tokens) in [("batch32", short_refs.clone(), short_tokens), ("single512", vec![long.as_str()], 512usize)] {
            m.embed(&texts, None, None).map_err(|e| e.to_string())?; // warm-up, compiles the plans
            let mut secs = Vec::with_capacity(a.reps);
            let mut per_kernel: std::collections::BTreeMap<String, (u64, usize)> = Default::default();
            for _ in 0..a.reps {
                let t0 = Instant::now();
                let e = m.embed(&texts, None, None).map_err(|e| e.to_string())?;
                secs.push(t0.elapsed().as_secs_f64());
                if e.len() != texts.len() {
                    return Err("wrong number of embeddings".into());
                }
                if a.profile {
                    // Every workload here fits one packed run of `tokens` tokens.
                    for (k, ns) in m.step_times(tokens, texts.len(), e.dim).unwrap_or_default() {
                        let v = per_kernel.entry(k).or_default();
                        v.0 += ns;
                        v.1 += 1;
                    }
                }
            }
            if a.profile {
                let all: u64 = per_kernel.values().map(|v| v.0).sum();
                let mut rows: Vec<_> = per_kernel.into_iter().collect();
                rows.sort_by_key(|r| std::cmp::Reverse(r.1 .0));
                eprintln!("profile {name}, {t} threads: {:.2} ms per run in plan steps", all as f64 / a.reps as f64 / 1e6);
                for (k, (ns, n)) in rows {
                    eprintln!("  {k:<20} {:>9.3} ms {:>6.1}%  ({} steps/run)", ns as f64 / a.reps as f64 / 1e6, 100.0 * ns as f64 / all.max(1) as f64, n / a.reps);
                }
            }
            let sps: Vec<f64> = secs.iter().map(|s| texts.len() as f64 / s).collect();
            let tps: Vec<f64> = secs.iter().map(|s| tokens as f64 / s).collect();
            rows.push((name, t, texts.len(), tokens, mean_std(&sps), mean_std(&tps), mean_std(&secs)));
        }
    }
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, t, n, tokens, sps, tps, secs)| {
                serde_json::json!({
                    "workload": name, "threads": t, "sentences": n, "tokens": tokens, "repeats": a.reps,
                    "sentences_per_s_mean": sps.0, "sentences_per_s_std": sps.1,
                    "tokens_per_s_mean": tps.0, "tokens_per_s_std": tps.1,
                    "seconds_mean": secs.0, "seconds_std": secs.1,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
    } else {
        println!("| workload  | threads | texts | tokens |        sent/s |         tok/s |   s/call |");
        println!("| --------- | ------: | ----: | -----: | ------------: | ------------: | -------: |");
        for (name, t, n, tokens, sps, tps, secs) in rows {
            println!("| {name:<9} | {t:>7} | {n:>5} | {tokens:>6} | {:>7.2} ± {:>4.2} | {:>7.1} ± {:>4.1} | {:>8.4} |", sps.0, sps.1, tps.0, tps.1, secs.0);
        }
    }
    Ok(())
}
