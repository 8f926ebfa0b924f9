//! Load time and encoding throughput of a Hugging Face `tokenizer.json` on the embedding
//! benchmark texts (`scripts/embed_bench_texts.json`): the 32 short sentences, then one
//! text of about 512 tokens (the cycled `long_words`, as `tg bench-embed` builds it),
//! each encoded with special tokens.
//!
//! `cargo run --release -p tg-tokenizer --example hf_tokenize -- TOKENIZER.json [TEXTS.json] [--repeat N]`

use std::time::{Duration, Instant};

use tg_tokenizer::HfTokenizer;

const DEFAULT_TEXTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scripts/embed_bench_texts.json"
);

fn strings(spec: &serde_json::Value, key: &str) -> Result<Vec<String>, String> {
    spec[key]
        .as_array()
        .ok_or(format!("no `{key}` list"))?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or(format!("`{key}` holds a non-string"))
        })
        .collect()
}

/// Best of `repeat` timings of `f`, and its last result.
fn best<T>(repeat: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = f();
    for _ in 0..repeat {
        let t0 = Instant::now();
        out = f();
        best = best.min(t0.elapsed());
    }
    (best, out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: hf_tokenize TOKENIZER.json [TEXTS.json] [--repeat N]";
    let mut args = std::env::args().skip(1);
    let tokenizer = args.next().ok_or(usage)?;
    let (mut texts, mut repeat) = (DEFAULT_TEXTS.to_string(), 200usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeat" => repeat = args.next().ok_or("--repeat needs a count")?.parse()?,
            _ => texts = a,
        }
    }
    let spec: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&texts)?)?;
    let short = strings(&spec, "short")?;
    let words = strings(&spec, "long_words")?;

    let t0 = Instant::now();
    let tok = HfTokenizer::from_file(&tokenizer)?;
    println!("load {:.1?}", t0.elapsed());

    // The longest prefix of the cycled words within 512 tokens (BOS and EOS included).
    let text = |n: usize| {
        (0..n)
            .map(|i| words[i % words.len()].as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut n = 1;
    while tok.encode(&text(n + 1), true)?.len() <= 512 {
        n += 1;
    }
    let long = text(n);

    for (name, batch) in [("short32", short.clone()), ("long512", vec![long])] {
        let bytes: usize = batch.iter().map(String::len).sum();
        let (dt, tokens) = best(repeat, || {
            batch
                .iter()
                .map(|t| tok.encode(t, true).map(|ids| ids.len()))
                .sum::<Result<usize, _>>()
        });
        let tokens = tokens?;
        println!(
            "{name}: {} texts, {bytes} bytes -> {tokens} tokens in {:.1} us (best of {repeat}): \
             {:.2} Mtok/s, {:.1} MB/s",
            batch.len(),
            dt.as_secs_f64() * 1e6,
            tokens as f64 / dt.as_secs_f64() / 1e6,
            bytes as f64 / dt.as_secs_f64() / 1e6
        );
    }
    Ok(())
}
