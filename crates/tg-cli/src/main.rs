//! `tg`: the Tensor Graphs command line.
//!
//! - `tg generate` streams a continuation of a prompt (Gemma 3 GGUF).
//! - `tg bench` measures prompt processing and generation like llama-bench.
//! - `tg plan` compiles the model for a sequence length and prints what each stage did.
//! - `tg tokenize` shows token ids and pieces.
//! - `tg bench-embed` measures embedding throughput (same workloads as the
//!   sentence-transformers script).
//! - `tg logits` prints the final-position logits of a prompt.
//! - `tg embed` embeds texts with a sentence-transformers model (EmbeddingGemma).
//! - `tg run` runs any model the registry opens (ONNX, Gemma 3, EmbeddingGemma) on `.npy`
//!   inputs; `tg info` shows its inputs, outputs and capabilities (`tg_models::open`).
//! - `tg diffuse` generates terrain heightmaps with the diffusion UNet (pictures, 16-bit
//!   heightmaps, raw values); `tg embed-audio` embeds WAV files or a live 16 kHz stream
//!   with openwakeword's models and scores wake words.
//! - `tg fetch-model` downloads the default model into the cache.
//! - `tg pack` packs buffers into memory (MiniMalloc CSV; see docs/pack.md).
//! - `tg extract` extracts from a serialized e-graph by DAG cost (extraction-gym JSON; see docs/extract.md).

mod bench;
mod bench_embed;
mod chat;
mod diffuse;
mod embed_audio;
mod extract;
mod heightmap;
mod logits;
mod model_path;
mod pack;
mod profile;
mod report;
mod run;
mod synth;
mod tokenize;

use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tg_models::{LanguageModel, Logits, SamplingParams};

#[derive(Parser)]
#[command(name = "tg", version, about = "Tensor Graphs: compile and run ML models")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// How the next token is chosen (shared by `generate` and `chat`).
#[derive(clap::Args, Clone)]
struct SamplingArgs {
    /// Sampling temperature; 0 = greedy (argmax, first index on ties).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Top-k filter (0 = off).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Top-p (nucleus) filter (1 = off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Min-p filter: drop tokens less likely than this times the most likely (0 = off).
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Repetition penalty on tokens among the last `--repeat-last-n` (1 = off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// How many recent tokens the repetition penalty looks at.
    #[arg(long, default_value_t = 64)]
    repeat_last_n: usize,
    /// Stop once the generated text contains this (repeatable); the text shown ends before it.
    #[arg(long)]
    stop: Vec<String>,
    /// RNG seed for sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            stop: self.stop.clone(),
            seed: self.seed,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text from a prompt.
    Generate {
        /// GGUF model (default: Gemma 3 270M Q4_K_M, downloaded if missing).
        #[arg(short, long)]
        model: Option<PathBuf>,
        /// The prompt (raw text; see `--messages` for a chat).
        #[arg(short, long, required_unless_present = "messages", conflicts_with = "messages")]
        prompt: Option<String>,
        /// A chat instead of a prompt: a JSON file with an OpenAI-style list of
        /// `{"role", "content"}` messages, rendered with the model's chat template; the
        /// assistant's next turn is generated.
        #[arg(long)]
        messages: Option<PathBuf>,
        /// A Jinja chat template file to use instead of the model file's.
        #[arg(long = "chat-template")]
        chat_template: Option<PathBuf>,
        /// Number of tokens to generate.
        #[arg(short = 'n', long = "n-predict", default_value_t = 32)]
        n: usize,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// Worker threads (0 = all cores).
        #[arg(short, long, default_value_t = 0)]
        threads: usize,
        /// Devices to run on, comma separated: `cpu` (default), `opencl`, `opencl:N`, `cuda`, `cuda:N`, or
        /// several (`cpu,opencl`: the planner places each op on one of them from the kernel
        /// times measured on each; the first is home). `tg devices` lists them.
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Print one JSON object instead of streaming text.
        #[arg(long)]
        json: bool,
        /// Do not add the BOS token before the prompt.
        #[arg(long)]
        no_bos: bool,
        /// Quantized-matmul arithmetic: `exact` (f32 activations) or `q8` (activations
        /// rounded to 8-bit blocks, integer dot products: faster, less exact).
        #[arg(long, value_enum, default_value_t = NumericsArg::Exact)]
        numerics: NumericsArg,
        /// Switch compiler stages or rewrite rule families off (e.g. `--no-stage rewrite`,
        /// `--no-stage rewrite:fusion.attention`); repeatable.
        #[arg(long = "no-stage")]
        no_stage: Vec<String>,
        /// Recompute the whole sequence for every token instead of keeping states between
        /// runs (the incremental path, default).
        #[arg(long)]
        recompute: bool,
        /// Most MiB the states kept between runs may take on each device; with less, the
        /// planner keeps less and recomputes more.
        #[arg(long = "cache-budget")]
        cache_budget: Option<usize>,
        /// Pin ops to a device: `OP_PATTERN=DEVICE` (`*` is a wildcard; op names as `tg plan
        /// --explain` prints them, e.g. `attention*=opencl`, `matmul=cpu`); repeatable.
        #[arg(long = "place")]
        place: Vec<String>,
        /// Write the report of the plan generation ran (schedule, memory map, how it was
        /// made) with its measured step times, as one self-contained HTML file; the run is
        /// profiled (each step timed), which costs a little time per step.
        #[arg(long)]
        report: Option<std::path::PathBuf>,
    },
    /// Run any model (ONNX file, Gemma 3 GGUF, EmbeddingGemma folder) on .npy inputs; each
    /// output is written as NAME.npy.
    Run(run::RunArgs),
    /// Show a model's kind, inputs, outputs and capabilities (any model `tg run` takes).
    Info(run::InfoArgs),
    /// Generate terrain heightmaps with the terrain diffusion UNet: a shaded picture, a
    /// 16-bit heightmap, the raw values.
    Diffuse(diffuse::DiffuseArgs),
    /// Speech embeddings of WAV files (or a live 16 kHz stream) and wake-word scores, with
    /// openwakeword's melspectrogram, speech embedding and classifier models.
    EmbedAudio(embed_audio::EmbedAudioArgs),
    /// Benchmark prompt processing and generation (llama-bench compatible output).
    Bench(bench::BenchArgs),
    /// Benchmark embedding throughput (32 short texts; one 512-token text).
    BenchEmbed(bench_embed::BenchEmbedArgs),
    /// Compile the model for a sequence length and report the compiler stages.
    Plan {
        /// GGUF model (default model if omitted).
        #[arg(short, long)]
        model: Option<PathBuf>,
        /// Sequence length to compile for.
        #[arg(short, long, default_value_t = 5)]
        seq: usize,
        /// Print every step of the plan.
        #[arg(long)]
        explain: bool,
        /// Switch compiler stages off (e.g. `--no-stage views`).
        #[arg(long = "no-stage")]
        no_stage: Vec<String>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
        /// Also run the plan (with profiling) and print time per kernel kind.
        #[arg(long)]
        profile: bool,
        /// Worker threads for `--profile` (0 = all cores).
        #[arg(short, long, default_value_t = 0)]
        threads: usize,
        /// Devices to run on, comma separated: `cpu` (default), `opencl`, `opencl:N`, `cuda`, `cuda:N`, or
        /// several (`cpu,opencl`: the planner places each op on one of them from the kernel
        /// times measured on each; the first is home). `tg devices` lists them.
        #[arg(long, default_value = "cpu")]
        device: String,

        /// Plan the incremental run of `--seq` new tokens appended to a sequence of this
        /// capacity (the derived graph generation uses; `--profile` runs it at the last
        /// position the capacity allows).
        #[arg(long)]
        incremental: Option<usize>,
        /// Pin ops to a device: `OP_PATTERN=DEVICE` (`*` is a wildcard; op names as `tg plan
        /// --explain` prints them, e.g. `attention*=opencl`, `matmul=cpu`); repeatable.
        #[arg(long = "place")]
        place: Vec<String>,
        /// With `--incremental`: most MiB the kept states may take on each device (the
        /// planner keeps less and recomputes more).
        #[arg(long = "cache-budget")]
        cache_budget: Option<usize>,
        /// Write the plan report (schedule per device, memory map per arena, how the plan was
        /// made) as one self-contained HTML file; with `--profile`, measured step times too.
        #[arg(long)]
        report: Option<std::path::PathBuf>,
    },
    /// Measure on this machine the kernels planning the model asks about (the planner then
    /// uses these times by default); resumable.
    Profile(profile::ProfileArgs),
    /// Chat with a model that has a chat template, one user message per line of standard
    /// input; the states are kept across turns, so each turn processes only its new tokens.
    Chat(chat::ChatArgs),
    /// Tokenize text with a GGUF file's vocabulary (SentencePiece or byte-level BPE) and
    /// print ids with their pieces, or `{"ids": [...]}` with `--json`. Reads no weights.
    Tokenize {
        /// GGUF model (default model if omitted).
        #[arg(short, long)]
        model: Option<PathBuf>,
        /// Text to tokenize.
        text: String,
        /// Recognise special-token text such as `<start_of_turn>` or `<|im_start|>`.
        #[arg(long)]
        special: bool,
        /// Always add BOS (default: as the model's `add_bos_token` says).
        #[arg(long, conflicts_with = "no_bos")]
        bos: bool,
        /// Add no BOS/EOS even if the model asks for them.
        #[arg(long)]
        no_bos: bool,
        /// Print one JSON object `{"ids": [...]}`.
        #[arg(long)]
        json: bool,
    },
    /// Embed texts with a sentence-transformers embedding model (EmbeddingGemma).
    Embed {
        /// Model folder (default: EmbeddingGemma-300M, downloaded if missing).
        #[arg(short, long)]
        model: Option<PathBuf>,
        /// Task prompt prepended to every text, by name (`query`, `document`, `STS`, ...;
        /// `--list-prompts` shows them). Default: the model's default prompt, if any.
        #[arg(short = 'p', long)]
        prompt_name: Option<String>,
        /// Output width: truncate (Matryoshka) and re-normalise. EmbeddingGemma was trained
        /// for 768, 512, 256 and 128.
        #[arg(long)]
        dim: Option<usize>,
        /// Worker threads (0 = all cores).
        #[arg(short, long, default_value_t = 0)]
        threads: usize,
        /// Devices to run on, comma separated: `cpu` (default), `opencl`, `opencl:N`, `cuda`, `cuda:N`, or
        /// several (`cpu,opencl`: the planner places each op on one of them from the kernel
        /// times measured on each; the first is home). `tg devices` lists them.
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Print one JSON object (embeddings, token counts, timings).
        #[arg(long)]
        json: bool,
        /// Also print the cosine similarity of every pair of texts.
        #[arg(long)]
        similarity: bool,
        /// List the model's task prompts and exit.
        #[arg(long)]
        list_prompts: bool,
        /// Rank the texts against this query: the query gets the `query` prompt, the texts
        /// the `document` prompt (unless `--prompt-name` says otherwise); prints one cosine
        /// similarity per text.
        #[arg(long)]
        query: Option<String>,
        /// Texts to embed; with none, each non-empty line of standard input is one text.
        texts: Vec<String>,
        /// Write the report of the plan the last batch ran (schedule, memory map, how it was
        /// made) with its measured step times, as one self-contained HTML file (the run is
        /// profiled).
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Write a random-weight model with the exact layout of a real one (`gemma3-270m`: GGUF,
    /// optionally a Hugging Face checkpoint of the same weights), a tiny one of another
    /// decoder family (`llama3-tiny`, `mistral-tiny`, `qwen3-tiny`, ...), or dump a GGUF file's layout.
    Synth(synth::SynthArgs),
    /// Print the final-position logits of a prompt (table, JSON or raw f32 file).
    Logits(logits::LogitsArgs),
    /// Pack buffers into memory: MiniMalloc-style static allocation of a CSV problem.
    Pack(pack::PackArgs),
    /// Extract the cheapest DAG from a serialized e-graph (extraction-gym JSON), with a proven lower bound.
    Extract(extract::ExtractArgs),
    /// Download the default model into the cache and print its path.
    FetchModel,
    /// List the devices present (name, kind, memory, compute units, driver); with
    /// `--compile cuda`, compile every CUDA kernel instead (no GPU needed) and report what
    /// `ptxas` says of each.
    Devices {
        /// Print as JSON (with `--compile`: an array of one object per kernel and arch).
        #[arg(long)]
        json: bool,
        /// Also list each device's kernels (its registry).
        #[arg(long)]
        kernels: bool,
        /// Compile the kernels of a device kind ahead of time: `cuda` (NVRTC to PTX, then
        /// `ptxas -v`; NVRTC and ptxas from `TG_NVRTC` / `TG_PTXAS` or
        /// `scripts/fetch_cuda_tools.py`): registers, spills, shared memory and stack per
        /// kernel and arch. Fails if any kernel does not compile.
        #[arg(long, value_name = "KIND")]
        compile: Option<String>,
        /// Architectures for `--compile`, comma separated.
        #[arg(long, value_name = "LIST", default_value = "sm_80,sm_90")]
        arch: String,
    },
}

type Res<T> = Result<T, String>;

/// `--numerics` values.
#[derive(Clone, Copy, clap::ValueEnum, PartialEq)]
pub enum NumericsArg {
    /// f32 activations times exactly dequantized weights.
    Exact,
    /// Activations rounded to 8-bit blocks (Q8_0/Q8_K) and integer dot products.
    Q8,
}

impl NumericsArg {
    /// Compiler options for this choice.
    pub fn options(self) -> tg_compiler::CompileOptions {
        let numerics = match self {
            NumericsArg::Exact => tg_compiler::Numerics::Exact,
            NumericsArg::Q8 => tg_compiler::Numerics::Q8Activations,
        };
        tg_compiler::CompileOptions { numerics, ..Default::default() }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The planner's kernel times for this process: this machine's profile when there is one
/// (`tg profile`), else the built-in estimate. A profile that exists but does not fit this
/// machine or build is reported once on stderr, never used silently.
pub(crate) fn machine_cost() -> tg_compiler::CostSource {
    static COST: std::sync::OnceLock<tg_compiler::CostSource> = std::sync::OnceLock::new();
    COST.get_or_init(|| {
        let (cost, why) = tg_compiler::CostSource::for_this_machine();
        if let Some(why) = why {
            eprintln!("note: {why}; planning with the built-in kernel cost estimate");
        }
        cost
    })
    .clone()
}

/// Compiler options for this machine: its kernel times ([`machine_cost`]) and, for a device
/// without measured kernels in a compile for several devices, its roofline and links measured
/// on first use (cached; `TG_FIRST_USE=off` keeps such a device to pinned ops).
pub(crate) fn machine_options() -> tg_compiler::CompileOptions {
    let mut o = tg_compiler::CompileOptions { cost: machine_cost(), ..Default::default() };
    o.placement.first_use = tg_compiler::FirstUse::for_this_machine();
    o
}

/// Opens the device named on the command line (`cpu`, `opencl`, `opencl:N`); CPU devices run
/// `threads` workers. Errors name the device and list those present.
pub(crate) fn device(name: &str, threads: usize) -> Res<std::sync::Arc<dyn tg_runtime::Device>> {
    tg_devices::open(name, threads).map_err(|e| e.to_string())
}

/// Opens the comma-separated devices named on the command line (`cpu,opencl`), each once.
pub(crate) fn devices_named(names: &str, threads: usize) -> Res<Vec<std::sync::Arc<dyn tg_runtime::Device>>> {
    let list = tg_devices::open_list(names, threads).map_err(|e| e.to_string())?;
    if list.is_empty() {
        return Err(format!("--device '{names}': no device named"));
    }
    for (i, d) in list.iter().enumerate() {
        if list[..i].iter().any(|e| e.name() == d.name()) {
            return Err(format!("--device '{names}' names {} twice", d.name()));
        }
    }
    Ok(list)
}

fn load(model: Option<PathBuf>, threads: usize, device_name: &str) -> Res<LanguageModel> {
    let path = model_path::resolve(model)?;
    LanguageModel::load_on_devices(&path, devices_named(device_name, threads)?).map_err(|e| e.to_string())
}

/// `tg devices`: every kind of this build with its devices, or why it has none.
fn devices(json: bool, kernels: bool) -> Res<()> {
    use std::fmt::Write as _;
    let list = tg_devices::list();
    let mut out = String::new();
    if json {
        out = serde_json::to_string_pretty(&list).map_err(|e| e.to_string())? + "\n";
    } else {
        for k in &list {
            if let Some(e) = &k.error {
                let _ = writeln!(out, "{:<10} none: {e}", k.kind);
            }
            for d in &k.devices {
                let gib = |b: Option<u64>| b.map(|b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)).unwrap_or_else(|| "?".into());
                let _ = writeln!(
                    out,
                    "{:<10} {:?}  {}  memory {} (largest allocation {}), {} compute units, {}",
                    d.name,
                    d.kind,
                    d.description,
                    gib(d.memory_bytes),
                    gib(d.max_alloc_bytes),
                    d.compute_units,
                    d.driver
                );
                if kernels {
                    let Some(reg) = tg_devices::registry_of(d.kind) else { continue };
                    for e in reg.entries() {
                        let _ = writeln!(out, "    {:<20} {}", e.family, e.note);
                    }
                }
            }
        }
    }
    // A reader that stops early (`| head`) is not an error.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    Ok(())
}

/// `tg devices --compile KIND`: every kernel of the kind compiled for each architecture, one
/// row per kernel and arch, then a summary; an error if any failed or the tools are missing.
fn compile_kernels(kind: &str, archs: &str, json: bool) -> Res<()> {
    if kind != "cuda" {
        return Err(format!("--compile {kind}: only `cuda` kernels are compiled ahead of time (an OpenCL device's driver builds its program when it is opened)"));
    }
    let archs: Vec<String> = archs.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    if archs.is_empty() {
        return Err("--arch: no architecture given (e.g. sm_80,sm_90)".into());
    }
    let rows = tg_cuda::compile_report(&archs).map_err(|e| format!("cannot compile the CUDA kernels: {e}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?);
    } else {
        println!("{:<20} {:<8} {:>9} {:>12} {:>11} {:>12} {:>11}  status", "kernel", "arch", "registers", "spill stores", "spill loads", "shared bytes", "stack bytes");
        for r in &rows {
            let status = if r.ok { "ok".to_string() } else { format!("FAILED: {}", r.error.as_deref().unwrap_or("?")) };
            println!("{:<20} {:<8} {:>9} {:>12} {:>11} {:>12} {:>11}  {status}", r.kernel, r.arch, r.registers, r.spill_stores, r.spill_loads, r.shared_bytes, r.stack_bytes);
        }
    }
    let ok: Vec<&tg_cuda::CompileRow> = rows.iter().filter(|r| r.ok).collect();
    let failed = rows.len() - ok.len();
    let kernels = rows.len() / archs.len().max(1);
    let most =
        |f: fn(&tg_cuda::CompileRow) -> u64, unit: &str| ok.iter().max_by_key(|r| f(r)).map(|r| format!("{}{unit} ({}, {})", f(r), r.kernel, r.arch)).unwrap_or_else(|| "-".into());
    let spills: Vec<String> = ok.iter().filter(|r| r.spill_stores + r.spill_loads > 0).map(|r| format!("{} {}", r.kernel, r.arch)).collect();
    let summary = format!(
        "{} of {} compiled ({kernels} kernels x {} archs: {}); most registers: {}; most shared memory: {}; largest stack: {}; spills: {}",
        ok.len(),
        rows.len(),
        archs.len(),
        archs.join(", "),
        most(|r| r.registers as u64, ""),
        most(|r| r.shared_bytes, " bytes"),
        most(|r| r.stack_bytes, " bytes"),
        if spills.is_empty() { "none".to_string() } else { spills.join(", ") }
    );
    // With --json, stdout stays one JSON document: the summary goes to stderr.
    if json {
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
    if failed > 0 {
        return Err(format!("{failed} of {} kernel compilations failed", rows.len()));
    }
    Ok(())
}

fn run(cli: Cli) -> Res<()> {
    match cli.cmd {
        Cmd::Generate { model, prompt, messages, chat_template, n, sampling, threads, device, json, no_bos, numerics, no_stage, recompute, cache_budget, place, report } => {
            let t0 = std::time::Instant::now();
            let opts = bench::compile_options(numerics, &no_stage, &place)?;
            let mut m = load(model, threads, &device)?;
            m.set_compile_options(opts);
            m.set_incremental(!recompute);
            if let Some(mb) = cache_budget {
                m.set_cache_budget(Some(mb.saturating_mul(1 << 20)));
            }
            if report.is_some() {
                m.set_profiling(true);
            }
            if let Some(t) = &chat_template {
                let src = std::fs::read_to_string(t).map_err(|e| format!("--chat-template {}: {e}", t.display()))?;
                m.set_chat_template(&src).map_err(|e| format!("--chat-template {}: {e}", t.display()))?;
            }
            let load_ms = t0.elapsed().as_secs_f64() * 1e3;
            let (ids, prompt) = match (&messages, prompt) {
                (Some(file), _) => {
                    let text = std::fs::read_to_string(file).map_err(|e| format!("--messages {}: {e}", file.display()))?;
                    let msgs = tg_models::parse_messages(&text).map_err(|e| format!("--messages {}: {e}", file.display()))?;
                    (m.chat_prompt(&msgs).map_err(|e| e.to_string())?, String::new())
                }
                (None, Some(p)) => (m.tokenizer.encode(&p, !no_bos, true), p),
                (None, None) => return Err("give --prompt or --messages".into()),
            };
            let params = sampling.params();
            let tok = m.tokenizer.clone();
            let mut stdout = std::io::stdout().lock();
            if !json {
                let _ = write!(stdout, "{prompt}");
                let _ = stdout.flush();
            }
            let mut shown = StopStream::new(&tok, &params.stop);
            let (out, timings) = m
                .generate_tokens(&ids, n, &params, |t| {
                    if !json {
                        let _ = write!(stdout, "{}", shown.push(t));
                        let _ = stdout.flush();
                    }
                    true
                })
                .map_err(|e| e.to_string())?;
            let text = tg_models::cut_at_stop(&tok.decode(&out, false).map_err(|e| e.to_string())?, &params.stop).to_string();
            if json {
                let n_gen = out.len();
                let obj = serde_json::json!({
                    "device": m.device().name(),
                    "prompt": prompt,
                    "prompt_tokens": ids,
                    "tokens": out,
                    "text": text,
                    "timings": {
                        "load_ms": load_ms,
                        "prompt_ms": timings.prompt_ms,
                        "generate_ms": timings.generate_ms,
                        "compile_ms": timings.compile_ms,
                        "session": if m.incremental() { serde_json::to_value(m.session_info()).unwrap_or_default() } else { serde_json::Value::Null },
                        "prompt_tokens_per_s": ids.len() as f64 / (timings.prompt_ms / 1e3),
                        "generate_tokens_per_s": if n_gen > 1 { (n_gen - 1) as f64 / (timings.generate_ms / 1e3) } else { 0.0 },
                    }
                });
                writeln!(stdout, "{}", serde_json::to_string_pretty(&obj).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            } else {
                let rest = shown.finish();
                let _ = writeln!(stdout, "{rest}");
                eprintln!("[{} prompt tokens in {:.1} ms, {} tokens generated in {:.1} ms]", ids.len(), timings.prompt_ms, out.len(), timings.generate_ms);
                if m.incremental() {
                    let s = m.session_info();
                    eprintln!("[kept between runs: {} states, {:.1} MiB for {} tokens of capacity {}]", s.states.len(), s.bytes as f64 / 1048576.0, s.tokens, s.capacity);
                }
            }
            if let Some(path) = report {
                report::generation(&m, &path)?;
            }
            Ok(())
        }
        Cmd::Run(args) => run::run(args),
        Cmd::Info(args) => run::info(args),
        Cmd::Diffuse(args) => diffuse::run(args),
        Cmd::EmbedAudio(args) => embed_audio::run(args),
        Cmd::Bench(args) => bench::run(args),
        Cmd::BenchEmbed(args) => bench_embed::run(args),
        Cmd::Plan { model, seq, explain, no_stage, json, profile, threads, device: device_name, incremental, place, cache_budget, report } => {
            let mut m = load(model, threads, &device_name)?;
            let mut opts = bench::compile_options(NumericsArg::Exact, &no_stage, &place)?;
            opts.cache_budget = cache_budget.map(|mb| mb.saturating_mul(1 << 20));
            m.set_compile_options(opts.clone());
            let mut derivation = None;
            let graph = match incremental {
                None => m.graph(seq, Logits::Last).map_err(|e| e.to_string())?,
                Some(cap) => {
                    let inc = m.incremental_graph(seq, cap).map_err(|e| e.to_string())?;
                    if !json {
                        println!("incremental: {}", inc.summary());
                    }
                    derivation = Some(inc.summary());
                    inc.graph
                }
            };
            let devs = m.devices();
            let c = tg_compiler::compile(&graph, &devs, &opts).map_err(|e| e.to_string())?;
            let mut measured = None;
            if profile {
                let at = incremental.map(|cap| cap - seq);
                let (measured_ms, steps) = profile_plan(&m, &c.plan, devs.clone(), seq, at, c.report.prediction.as_ref(), c.report.timeline.as_ref())?;
                measured = steps;
                match &c.report.prediction {
                    Some(p) => {
                        // Across devices the run takes the timeline's makespan, not the sum.
                        let ns = match (&c.report.timeline, devs.len() > 1) {
                            (Some(t), true) => t.makespan_ns,
                            _ => p.total_ns,
                        };
                        println!(
                            "predicted {:.3} ms, measured {:.3} ms: predicted / measured = {:.3} ({:.1}% of the steps' time from fallbacks)",
                            ns / 1e6,
                            measured_ms,
                            ns / 1e6 / measured_ms,
                            100.0 * p.fallback_ns / p.total_ns.max(1e-9)
                        )
                    }
                    None => println!("no kernel profile for this machine (`tg profile`): nothing predicted"),
                }
            }
            if json {
                let obj = serde_json::json!({ "report": c.report, "ops": graph.op_histogram(), "steps": c.plan.steps.len(), "arena_bytes": c.plan.arenas.iter().map(|a| a.bytes).sum::<usize>() });
                println!("{}", serde_json::to_string_pretty(&obj).map_err(|e| e.to_string())?);
            } else {
                println!("graph: {} nodes for {seq} tokens", graph.nodes.len());
                println!("ops:   {}", graph.op_histogram().iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(" "));
                print!("{}", c.report);
                if explain {
                    explain_steps(&c);
                }
            }
            if let Some(path) = report {
                let what = match incremental {
                    Some(cap) => format!("incremental run of {seq} new tokens at capacity {cap}"),
                    None => format!("{seq} tokens"),
                };
                let input = tg_report::ReportInput {
                    title: format!("{} ({} layers): {what} on {}", m.arch().kind(), m.arch().n_layer(), devs.iter().map(|d| d.name()).collect::<Vec<_>>().join(" + ")),
                    command: std::env::args().collect::<Vec<_>>().join(" "),
                    plan: &c.plan,
                    report: &c.report,
                    threads: devs.iter().map(|d| d.threads()).collect(),
                    measured,
                    derivation,
                };
                let bytes = tg_report::write(&input, &path).map_err(|e| e.to_string())?;
                eprintln!("report: {} ({} KiB)", path.display(), bytes / 1024);
            }
            Ok(())
        }
        Cmd::Chat(args) => chat::run(args),
        Cmd::Tokenize { model, text, special, bos, no_bos, json } => {
            let path = model_path::resolve(model)?;
            let add_special = if bos { Some(true) } else if no_bos { Some(false) } else { None };
            tokenize::run(&path, &text, json, special, add_special)
        }
        Cmd::Embed { model, prompt_name, dim, threads, device, json, similarity, list_prompts, query, texts, report } => {
            embed(model, prompt_name, dim, threads, &device, json, similarity, list_prompts, query, texts, report)
        }
        Cmd::Logits(args) => logits::run(args),
        Cmd::Synth(args) => synth::run(args),
        Cmd::Pack(args) => pack::run(args),
        Cmd::Profile(args) => profile::run(args),
        Cmd::Extract(args) => extract::run(args),
        Cmd::Devices { json, kernels, compile, arch } => match compile {
            Some(kind) => compile_kernels(&kind, &arch, json),
            None => devices(json, kernels),
        },
        Cmd::FetchModel => {
            println!("{}", model_path::fetch()?.display());
            Ok(())
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn embed(
    model: Option<PathBuf>,
    prompt_name: Option<String>,
    dim: Option<usize>,
    threads: usize,
    device_name: &str,
    json: bool,
    similarity: bool,
    list_prompts: bool,
    query: Option<String>,
    mut texts: Vec<String>,
    report: Option<PathBuf>,
) -> Res<()> {
    let t0 = std::time::Instant::now();
    let dir = model_path::resolve_embedding(model)?;
    let mut m = tg_models::EmbeddingGemma::load_on_devices(&dir, devices_named(device_name, threads)?).map_err(|e| e.to_string())?;
    m.set_compile_options(machine_options());
    m.set_profiling(report.is_some());
    let finish = |m: &tg_models::EmbeddingGemma| match &report {
        Some(path) => report::embedding(m, path),
        None => Ok(()),
    };
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    if list_prompts {
        for (k, v) in &m.config.prompts {
            println!("{k:<28} {v:?}");
        }
        return Ok(());
    }
    if texts.is_empty() {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| format!("reading standard input: {e}"))?;
            if !line.trim().is_empty() {
                texts.push(line);
            }
        }
        if texts.is_empty() {
            return Err("no texts to embed (give them as arguments or on standard input)".into());
        }
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t1 = std::time::Instant::now();
    if let Some(q) = query {
        let doc_prompt = prompt_name.clone().or_else(|| m.config.prompts.contains_key("document").then(|| "document".to_string()));
        let q_prompt = m.config.prompts.contains_key("query").then_some("query");
        let qe = m.embed(&[q.as_str()], q_prompt, dim).map_err(|e| e.to_string())?;
        let de = m.embed(&refs, doc_prompt.as_deref(), dim).map_err(|e| e.to_string())?;
        let scores: Vec<f64> = (0..de.len()).map(|i| tg_models::embedding_gemma::cosine(qe.row(0), de.row(i))).collect();
        let embed_ms = t1.elapsed().as_secs_f64() * 1e3;
        if json {
            let obj = serde_json::json!({
                "query": q, "query_prompt_name": q_prompt, "document_prompt_name": doc_prompt, "dim": de.dim,
                "documents": texts, "similarity": scores, "timings": { "load_ms": load_ms, "embed_ms": embed_ms },
            });
            println!("{}", serde_json::to_string(&obj).map_err(|e| e.to_string())?);
        } else {
            let mut order: Vec<usize> = (0..scores.len()).collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
            for i in order {
                println!("{:.4}  {}", scores[i], texts[i]);
            }
        }
        return finish(&m);
    }
    let e = m.embed(&refs, prompt_name.as_deref(), dim).map_err(|e| e.to_string())?;
    let embed_ms = t1.elapsed().as_secs_f64() * 1e3;
    let sims: Vec<Vec<f64>> =
        if similarity { (0..e.len()).map(|i| (0..e.len()).map(|j| tg_models::embedding_gemma::cosine(e.row(i), e.row(j))).collect()).collect() } else { Vec::new() };
    let mut stdout = std::io::stdout().lock();
    if json {
        let rows: Vec<&[f32]> = (0..e.len()).map(|i| e.row(i)).collect();
        let mut obj = serde_json::json!({
            "model": dir.display().to_string(),
            "prompt_name": prompt_name,
            "prompt": m.prompt(prompt_name.as_deref()).map_err(|e| e.to_string())?,
            "dim": e.dim,
            "token_counts": e.token_counts,
            "embeddings": rows,
            "timings": { "load_ms": load_ms, "embed_ms": embed_ms, "texts_per_s": e.len() as f64 / (embed_ms / 1e3) },
        });
        if similarity {
            obj["similarity"] = serde_json::json!(sims);
        }
        writeln!(stdout, "{}", serde_json::to_string(&obj).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    } else {
        for i in 0..e.len() {
            let v: Vec<String> = e.row(i).iter().map(|x| format!("{x:.6}")).collect();
            writeln!(stdout, "{}", v.join(" ")).map_err(|e| e.to_string())?;
        }
        if similarity {
            writeln!(stdout, "cosine similarity:").map_err(|e| e.to_string())?;
            for row in &sims {
                let v: Vec<String> = row.iter().map(|x| format!("{x:.4}")).collect();
                writeln!(stdout, "  {}", v.join(" ")).map_err(|e| e.to_string())?;
            }
        }
        eprintln!("[{} texts, {} tokens, dim {}, {:.1} ms]", e.len(), e.token_counts.iter().sum::<usize>(), e.dim, embed_ms);
    }
    finish(&m)
}

/// Runs `plan` a few times with per-step timing and prints the time per kernel kind.
/// Runs `plan` with per-step timing (one warm-up, 5 runs), prints time per kernel kind and
/// returns the mean run time in ms (the sum of the step times).
/// Busy time per device, and time two devices were busy at once, of `(device, start, end)`
/// intervals (ns).
fn busy_and_overlap(n_devices: usize, iv: &[(usize, f64, f64)]) -> (Vec<f64>, f64, f64) {
    let mut busy = vec![0.0; n_devices];
    let mut events: Vec<(f64, usize, i32)> = Vec::new();
    let mut wall: f64 = 0.0;
    for &(d, a, b) in iv {
        if d < n_devices && b > a {
            busy[d] += b - a;
            events.push((a, d, 1));
            events.push((b, d, -1));
            wall = wall.max(b);
        }
    }
    events.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.2.cmp(&y.2)));
    let mut active = vec![0i32; n_devices];
    let (mut overlap, mut last) = (0.0, 0.0);
    for (t, d, k) in events {
        if active.iter().filter(|&&a| a > 0).count() >= 2 {
            overlap += t - last;
        }
        active[d] += k;
        last = t;
    }
    (busy, overlap, wall)
}

/// `tg plan --profile` with several devices: the measured timeline of one run next to the
/// simulated one: busy time per device, time both were busy, and how many of the steps the
/// plan runs beside another device's work also ran beside it.
fn print_overlap(plan: &tg_runtime::Plan, spans: &[tg_runtime::Span], sim: &tg_compiler::timeline::Timeline) {
    let nd = plan.devices.len();
    // Kernels only: a transfer runs on its non-CPU side's thread.
    let kernel = |i: usize| !matches!(plan.steps[i].kernel, tg_runtime::Kernel::Transfer { .. });
    let measured: Vec<(usize, f64, f64)> = spans.iter().filter(|s| kernel(s.step)).map(|s| (s.device, s.start_ns as f64, s.end_ns as f64)).collect();
    let simulated: Vec<(usize, f64, f64)> = sim.steps.iter().enumerate().filter(|(i, _)| kernel(*i)).map(|(i, &(a, b))| (plan.steps[i].device, a, b)).collect();
    let (mb, mo, mw) = busy_and_overlap(nd, &measured);
    let (sb, so, sw) = busy_and_overlap(nd, &simulated);
    let per = |b: &[f64]| plan.devices.iter().zip(b).map(|(d, b)| format!("{d} {:.3} ms", b / 1e6)).collect::<Vec<_>>().join(", ");
    println!("timeline (last run): measured {:.3} ms, busy {}, both busy {:.3} ms", mw / 1e6, per(&mb), mo / 1e6);
    println!("                     simulated {:.3} ms, busy {}, both busy {:.3} ms", sw / 1e6, per(&sb), so / 1e6);
    // Steps the plan overlaps with a step of another device: did they overlap when run?
    let overlaps = |v: &[(usize, f64, f64)], i: usize| v.iter().any(|&(d, a, b)| d != v[i].0 && a < v[i].2 && v[i].1 < b);
    let idx: Vec<usize> = (0..plan.steps.len()).filter(|&i| kernel(i)).collect();
    let m_by: std::collections::HashMap<usize, usize> = spans.iter().filter(|s| kernel(s.step)).enumerate().map(|(k, s)| (s.step, k)).collect();
    let (mut planned, mut seen) = (0, 0);
    for (k, &i) in idx.iter().enumerate() {
        if overlaps(&simulated, k) {
            planned += 1;
            if m_by.get(&i).is_some_and(|&j| overlaps(&measured, j)) {
                seen += 1;
            }
        }
    }
    println!("                     {seen} of the {planned} kernels the plan runs beside the other device's ran beside it");
}

/// `tg plan --explain`: every step with its predicted time, device, simulated start (on one
/// queue per device; transfers on their link) and operands; transfers say from where.
fn explain_steps(c: &tg_compiler::Compiled) {
    let pred = c.report.prediction.as_ref();
    let timeline = c.report.timeline.as_ref();
    println!("{:>5} {:>12}   {:>11} {:<16} {:<20} what", "step", "predicted", "start", "device", "kernel");
    for (i, s) in c.plan.steps.iter().enumerate() {
        let ins: Vec<String> = s.inputs.iter().map(|t| format!("b{}{:?}", t.buffer, t.layout.shape)).collect();
        // Predicted time of the step: `m` measured, `f` a fallback estimate.
        let p = match pred.and_then(|p| p.steps.get(i)) {
            Some(&(ns, measured)) => format!("{:>10.1} us {}", ns / 1e3, if measured { "m" } else { "f" }),
            None => match timeline.and_then(|t| t.steps.get(i)) {
                Some(&(a, b)) => format!("{:>10.1} us s", (b - a) / 1e3),
                None => format!("{:>12} -", "-"),
            },
        };
        let start = timeline.and_then(|t| t.steps.get(i)).map_or("-".to_string(), |&(a, _)| format!("{:.1} us", a / 1e3));
        let name = |d: usize| c.plan.devices.get(d).map_or("?", |d| d.as_str());
        let dev = match s.kernel {
            tg_runtime::Kernel::Transfer { from } => format!("{}->{}", name(from), name(s.device)),
            _ => name(s.device).to_string(),
        };
        println!("{i:5} {p} {start:>11} {dev:<16} {:<20} node {:5} ({}) -> b{}{:?}", s.kernel.name(), s.node, ins.join(", "), s.output.buffer, s.output.layout.shape);
    }
}

fn profile_plan(
    m: &LanguageModel,
    plan: &tg_runtime::Plan,
    devs: Vec<std::sync::Arc<dyn tg_runtime::Device>>,
    seq: usize,
    pos: Option<usize>,
    pred: Option<&tg_compiler::PlanPrediction>,
    simulated: Option<&tg_compiler::timeline::Timeline>,
) -> Res<(f64, Option<tg_report::Measured>)> {
    let weights =
        std::sync::Arc::new(tg_models::GgufWeights::new(std::sync::Arc::new(tg_gguf::GgufFile::open(m.file().path().ok_or("model has no path")?).map_err(|e| e.to_string())?)));
    let mut exe = tg_runtime::Executable::new(plan.clone(), devs, weights).map_err(|e| e.to_string())?;
    exe.set_profiling(true);
    let ids: Vec<i32> = (0..seq as i32).map(|i| if i == 0 { m.tokenizer.bos() as i32 } else { 1000 + i * 7 }).collect();
    let mut inputs = std::collections::HashMap::new();
    inputs.insert("tokens".to_string(), tg_ir::HostTensor::i32(&[seq], ids).map_err(|e| e.to_string())?);
    if let Some(p) = pos {
        inputs.insert(tg_compiler::incremental::POS_INPUT.to_string(), tg_ir::HostTensor::i32(&[1], vec![p as i32]).map_err(|e| e.to_string())?);
    }
    let mut totals: std::collections::BTreeMap<String, (u64, usize)> = Default::default();
    let mut wall_ns = 0u64;
    let reps = 5;
    for r in 0..=reps {
        exe.run(&inputs).map_err(|e| e.to_string())?;
        if r == 0 {
            continue; // warm-up
        }
        if let Some(spans) = exe.timeline() {
            wall_ns += spans.iter().map(|s| s.end_ns).max().unwrap_or(0);
        }
        if r == reps && plan.devices.len() > 1 {
            if let (Some(spans), Some(sim)) = (exe.timeline(), simulated) {
                print_overlap(plan, spans, sim);
            }
        }
        let times = exe.step_times().ok_or("no profile")?;
        for (s, &t) in plan.steps.iter().zip(times) {
            let e = totals.entry(s.kernel.name()).or_default();
            e.0 += t;
            e.1 += 1;
        }
    }
    // Predicted time per kernel kind (ms per run), when a profile predicted the plan.
    let mut predicted: std::collections::BTreeMap<String, f64> = Default::default();
    if let Some(p) = pred {
        for (s, &(ns, _)) in plan.steps.iter().zip(&p.steps) {
            *predicted.entry(s.kernel.name()).or_default() += ns / 1e6;
        }
    }
    let all: u64 = totals.values().map(|v| v.0).sum();
    let mut rows: Vec<_> = totals.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1 .0));
    println!("profile ({reps} runs, {seq} tokens): {:.2} ms per run", all as f64 / reps as f64 / 1e6);
    for (k, (t, n)) in rows {
        let p = predicted.get(&k).map_or(String::new(), |p| format!("  predicted {p:9.3} ms"));
        println!("  {k:<20} {:>9.3} ms {:>6.1}%  ({:>3} steps/run){p}", t as f64 / reps as f64 / 1e6, 100.0 * t as f64 / all.max(1) as f64, n / reps);
    }
    // The last run's step times, for a report.
    let measured = report::measured(plan, exe.step_times(), exe.timeline());
    if plan.devices.len() > 1 {
        // Devices ran concurrently: the run took its wall time, not the sum of its steps.
        println!("  wall time {:.2} ms per run (steps on several devices overlap)", wall_ns as f64 / reps as f64 / 1e6);
        return Ok((wall_ns as f64 / reps as f64 / 1e6, measured));
    }
    Ok((all as f64 / reps as f64 / 1e6, measured))
}

fn tg_tokenizer_stream(tok: &tg_models::Tokenizer) -> tg_models::StreamDecoder<'_> {
    tg_models::StreamDecoder::new(tok, false)
}

/// Streams generated text, holding back what may be the start of a stop string and showing
/// nothing from the first stop string on.
struct StopStream<'a> {
    dec: Option<tg_models::StreamDecoder<'a>>,
    stop: &'a [String],
    text: String,
    shown: usize,
    done: bool,
}

impl<'a> StopStream<'a> {
    fn new(tok: &'a tg_models::Tokenizer, stop: &'a [String]) -> StopStream<'a> {
        StopStream { dec: Some(tg_tokenizer_stream(tok)), stop, text: String::new(), shown: 0, done: false }
    }

    /// The text token `t` makes safe to show.
    fn push(&mut self, t: u32) -> String {
        if let Some(Ok(s)) = self.dec.as_mut().map(|d| d.push(t)) {
            self.text.push_str(&s);
        }
        self.release(false)
    }

    /// The rest of the text.
    fn finish(&mut self) -> String {
        if let Some(d) = self.dec.take() {
            let rest = d.finish();
            self.text.push_str(&rest);
        }
        self.release(true)
    }

    fn release(&mut self, last: bool) -> String {
        if self.done {
            return String::new();
        }
        let cut = tg_models::cut_at_stop(&self.text, self.stop).len();
        let end = if cut < self.text.len() {
            self.done = true;
            cut
        } else if last {
            self.text.len()
        } else {
            // Hold back the longest tail that begins a stop string.
            let hold = self.stop.iter().map(|s| (1..s.len().min(self.text.len() + 1)).rev().find(|&k| self.text.is_char_boundary(self.text.len() - k) && s.starts_with(&self.text[self.text.len() - k..])).unwrap_or(0)).max().unwrap_or(0);
            self.text.len() - hold
        };
        let out = self.text.get(self.shown..end.max(self.shown)).unwrap_or("").to_string();
        self.shown = end.max(self.shown);
        out
    }
}
