//! `tg bench`: prompt processing (pp) and generation (tg) throughput, reported like
//! llama-bench (same markdown columns; JSON rows with llama-bench's field names) so the
//! two tools' outputs can be read side by side.
//!
//! pp N: N random tokens processed in one run. tg N: N tokens generated one after
//! another. With `-d D` (llama-bench's depth), D random tokens are put in the context first,
//! untimed, so pp and tg are measured with D tokens already there. Each test runs once to
//! warm up (plans compiled and cached), then `-r` timed repetitions.
//!
//! By default this uses the incremental path, as `tg generate` does (pp: one plan of
//! exactly N rows; tg: one run per token with the states the derivation keeps);
//! `--recompute` measures the whole-sequence plans instead (every generated token
//! recomputes the context).

use crate::model_path;
use clap::{Args, ValueEnum};
use rand::{Rng, SeedableRng};
use std::path::PathBuf;
use std::time::Instant;
use tg_models::{LanguageModel, Logits};

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum Format {
    Md,
    Json,
}

/// Arguments of `tg bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// GGUF model (default model if omitted).
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// Prompt lengths to test, comma separated (0 or empty = none).
    #[arg(short = 'p', long = "n-prompt", default_value = "512", value_delimiter = ',')]
    n_prompt: Vec<usize>,
    /// Generation lengths to test, comma separated.
    #[arg(short = 'n', long = "n-gen", default_value = "128", value_delimiter = ',')]
    n_gen: Vec<usize>,
    /// Context depths, comma separated: tokens already in the context before the test.
    #[arg(short = 'd', long = "n-depth", default_value = "0", value_delimiter = ',')]
    n_depth: Vec<usize>,
    /// pp tests: before each timed prompt, run a different prompt of the same length that
    /// shares its first N tokens (untimed); the timed prompt then reuses those N tokens'
    /// kept rows (time to first token with a shared prefix).
    #[arg(long = "shared-prefix", default_value_t = 0)]
    shared_prefix: usize,
    /// Recompute the whole sequence for every run instead of the incremental path.
    #[arg(long)]
    recompute: bool,
    /// Thread counts, comma separated.
    #[arg(short = 't', long = "threads", default_value = "2", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Devices to run on, comma separated: `cpu` (default), `opencl`, `opencl:N`, or several
    /// (`cpu,opencl`: the planner places the work). `tg devices` lists them.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Pin ops to a device (`OP_PATTERN=DEVICE`, see `tg generate --help`); repeatable.
    #[arg(long = "place")]
    place: Vec<String>,
    /// Repetitions per test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    /// Quantized-matmul arithmetic (`exact` or `q8`).
    #[arg(long, value_enum, default_value_t = crate::NumericsArg::Exact)]
    numerics: crate::NumericsArg,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Md)]
    output: Format,
    /// Switch compiler stages or rewrite rule families off (e.g. `--no-stage rewrite`,
    /// `--no-stage rewrite:fusion.attention`); repeatable.
    #[arg(long = "no-stage")]
    no_stage: Vec<String>,
    /// After the timed tests, one profiled generation run (untimed) whose plan is written as
    /// a report (schedule, memory map, how it was made, measured step times): one
    /// self-contained HTML file.
    #[arg(long)]
    report: Option<PathBuf>,
}

/// Compiler options from `--numerics` and `--no-stage` values.
pub(crate) fn compile_options(numerics: crate::NumericsArg, no_stage: &[String], place: &[String]) -> Result<tg_compiler::CompileOptions, String> {
    let names: Vec<&str> = no_stage.iter().map(String::as_str).collect();
    let mut o = tg_compiler::CompileOptions::disabling(&names).map_err(|e| e.to_string())?;
    o.numerics = numerics.options().numerics;
    o.cost = crate::machine_cost();
    // A second device without measured kernel times is measured on first use (roofline and
    // links, cached) and planned from, unless TG_FIRST_USE=off.
    o.placement.first_use = tg_compiler::FirstUse::for_this_machine();
    for p in place {
        o.placement.pins.push(p.parse().map_err(|e: tg_compiler::CompileError| e.to_string())?);
    }
    Ok(o)
}

struct Row {
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    threads: usize,
    samples_ns: Vec<u64>,
}

/// Mean and sample standard deviation (0 for a single sample).
pub(crate) fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 { v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (m, var.sqrt())
}

fn random_tokens(m: &LanguageModel, n: usize, rng: &mut rand_chacha::ChaCha8Rng) -> Vec<u32> {
    let vocab = m.n_vocab() as u32;
    (0..n).map(|_| rng.gen_range(0..vocab)).collect()
}

/// One repetition: `depth` tokens into the context untimed, then the timed test.
fn run_test(m: &mut LanguageModel, n_prompt: usize, n_gen: usize, depth: usize, shared: usize, recompute: bool, rng: &mut rand_chacha::ChaCha8Rng) -> Result<u64, String> {
    let e = |e: tg_models::ModelError| e.to_string();
    let mut ctx = vec![m.tokenizer.bos()];
    ctx.extend(random_tokens(m, depth, rng));
    if recompute {
        let t0 = Instant::now();
        if n_prompt > 0 {
            ctx.extend(random_tokens(m, n_prompt, rng));
            m.forward(&ctx, Logits::Last).map_err(e)?;
        } else {
            for _ in 0..n_gen {
                m.forward(&ctx, Logits::Last).map_err(e)?;
                ctx.extend(random_tokens(m, 1, rng));
            }
        }
        return Ok(t0.elapsed().as_nanos() as u64);
    }
    m.reset_session();
    if depth > 0 {
        m.prefill(&ctx).map_err(e)?;
    }
    let toks = random_tokens(m, n_prompt, rng);
    if n_prompt > 0 && shared > 0 {
        // A different prompt with the same first `shared` tokens, run untimed; the timed
        // prompt starts after the shared part.
        let mut first = toks[..shared].to_vec();
        first.extend(random_tokens(m, n_prompt - shared, rng));
        m.prefill(&first).map_err(e)?;
        let t0 = Instant::now();
        m.prefill(&toks).map_err(e)?;
        return Ok(t0.elapsed().as_nanos() as u64);
    }
    let t0 = Instant::now();
    if n_prompt > 0 {
        if depth > 0 {
            m.extend(&toks).map_err(e)?;
        } else {
            m.prefill(&toks).map_err(e)?;
        }
    } else {
        if depth == 0 {
            m.prefill(&ctx).map_err(e)?;
        }
        for _ in 1..n_gen.max(1) + usize::from(depth > 0) {
            let t = random_tokens(m, 1, rng);
            m.extend(&t).map_err(e)?;
        }
    }
    Ok(t0.elapsed().as_nanos() as u64)
}

/// llama.cpp's model description: architecture, size label and file type, e.g.
/// "gemma3 270M Q4_K - Medium".
fn model_type(f: &tg_gguf::GgufFile) -> String {
    let arch = f.get_str("general.architecture").unwrap_or("?");
    let size = f.get_str("general.size_label").unwrap_or("?");
    let ftype = match f.get_u32("general.file_type") {
        Ok(0) => "all F32",
        Ok(1) => "F16",
        Ok(2) => "Q4_0",
        Ok(3) => "Q4_1",
        Ok(7) => "Q8_0",
        Ok(8) => "Q5_0",
        Ok(9) => "Q5_1",
        Ok(10) => "Q2_K - Medium",
        Ok(11) => "Q3_K - Small",
        Ok(12) => "Q3_K - Medium",
        Ok(13) => "Q3_K - Large",
        Ok(14) => "Q4_K - Small",
        Ok(15) => "Q4_K - Medium",
        Ok(16) => "Q5_K - Small",
        Ok(17) => "Q5_K - Medium",
        Ok(18) => "Q6_K",
        Ok(32) => "BF16",
        _ => "?",
    };
    format!("{arch} {size} {ftype}")
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    if a.reps == 0 {
        return Err("--repetitions must be at least 1".into());
    }
    let path = model_path::resolve(a.model.clone())?;
    let mut rows = Vec::new();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1234);
    let mut info = (String::new(), 0u64, 0u64);
    let backend: Vec<&str> = a
        .device
        .split(',')
        .map(|n| match tg_devices::kind_of(n.trim()) {
            Some(tg_runtime::DeviceKind::OpenCl) => "OpenCL",
            Some(tg_runtime::DeviceKind::Cuda) => "CUDA",
            _ => "CPU",
        })
        .collect();
    let backend = backend.join("+");
    for &threads in &a.threads {
        let mut m = LanguageModel::load_on_devices(&path, crate::devices_named(&a.device, threads)?).map_err(|e| e.to_string())?;
        m.set_compile_options(compile_options(a.numerics, &a.no_stage, &a.place)?);
        let n_params: u64 = m.file().tensors().iter().map(|t| t.n_elements()).sum();
        let size: u64 = m.file().tensors().iter().map(|t| t.n_bytes as u64).sum();
        info = (model_type(m.file()), n_params, size);
        m.set_incremental(!a.recompute);
        let mut tests: Vec<(usize, usize)> = a.n_prompt.iter().filter(|&&p| p > 0).map(|&p| (p, 0)).collect();
        tests.extend(a.n_gen.iter().filter(|&&n| n > 0).map(|&n| (0, n)));
        for &depth in &a.n_depth {
            for &(p, n) in &tests {
                if depth + p + n + 1 > m.context_length() {
                    return Err(format!("depth {depth} + {} tokens exceed the context length of {}", p + n + 1, m.context_length()));
                }
                let shared = if p > 0 { a.shared_prefix } else { 0 };
                if p > 0 && (shared >= p || (shared > 0 && (depth > 0 || a.recompute))) {
                    return Err(format!("--shared-prefix {shared} needs a longer prompt than {p}, depth 0 and the incremental path"));
                }
                run_test(&mut m, p, n, depth, shared, a.recompute, &mut rng)?; // warm-up: compiles and caches plans
                let mut samples = Vec::new();
                for _ in 0..a.reps {
                    samples.push(run_test(&mut m, p, n, depth, shared, a.recompute, &mut rng)?);
                }
                rows.push(Row { n_prompt: p, n_gen: n, n_depth: depth, threads, samples_ns: samples });
                if n > 0 && a.recompute {
                    m.clear_plans();
                }
            }
        }
        if let (Some(path), true) = (&a.report, Some(&threads) == a.threads.last()) {
            // Untimed: profiling times each step.
            m.set_profiling(true);
            run_test(&mut m, 0, 4, 0, 0, false, &mut rng)?;
            crate::report::generation(&m, path)?;
        }
    }
    let isa = format!("{:?}", tg_kernels::isa());
    match a.output {
        Format::Md => {
            println!("| model                          |       size |     params | backend    | threads |            test |                  t/s |");
            println!("| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |");
            for r in &rows {
                let ntok = (r.n_prompt + r.n_gen) as f64;
                let ts: Vec<f64> = r.samples_ns.iter().map(|&ns| ntok / (ns as f64 / 1e9)).collect();
                let (m, s) = mean_std(&ts);
                let mut test = if r.n_prompt > 0 { format!("pp{}", r.n_prompt) } else { format!("tg{}", r.n_gen) };
                if r.n_depth > 0 {
                    test = format!("{test} @ d{}", r.n_depth);
                }
                if r.n_prompt > 0 && a.shared_prefix > 0 {
                    test = format!("{test} (shared {})", a.shared_prefix);
                }
                println!(
                    "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>15} | {:>20} |",
                    info.0,
                    format!("{:.2} MiB", info.2 as f64 / 1048576.0),
                    format!("{:.2} M", info.1 as f64 / 1e6),
                    backend,
                    r.threads,
                    test,
                    format!("{m:.2} ± {s:.2}")
                );
            }
        }
        Format::Json => {
            let out: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| {
                    let ntok = (r.n_prompt + r.n_gen) as f64;
                    let ts: Vec<f64> = r.samples_ns.iter().map(|&ns| ntok / (ns as f64 / 1e9)).collect();
                    let ns: Vec<f64> = r.samples_ns.iter().map(|&x| x as f64).collect();
                    let (avg_ns, std_ns) = mean_std(&ns);
                    let (avg_ts, std_ts) = mean_std(&ts);
                    serde_json::json!({
                        "build_commit": "tensor-graphs",
                        "build_number": 0,
                        "cpu_info": isa,
                        "backends": backend,
                        "model_filename": path.display().to_string(),
                        "model_type": info.0,
                        "model_size": info.2,
                        "model_n_params": info.1,
                        "n_threads": r.threads,
                        "n_prompt": r.n_prompt,
                        "n_gen": r.n_gen,
                        "n_depth": r.n_depth,
                        "avg_ns": avg_ns.round() as u64,
                        "stddev_ns": std_ns.round() as u64,
                        "avg_ts": avg_ts,
                        "stddev_ts": std_ts,
                        "samples_ns": r.samples_ns,
                        "samples_ts": ts,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
        }
    }
    Ok(())
}
