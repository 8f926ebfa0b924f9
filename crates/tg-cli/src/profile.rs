//! `tg profile`: measure on this machine the kernels that planning a model asks about, and
//! store them in the profile the planner reads by default (see `docs/profile.md`).
//!
//! The keys are collected by planning the model for each sequence length and thread count
//! (every e-node the extraction costs, chosen or not, and every step of the finished plans).
//! Each key is benchmarked once; the profile file is written after every measurement, so an
//! interrupted run (Ctrl-C) keeps what it measured and the next run resumes from there.

use clap::Args;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tg_compiler::{CompileOptions, CostSource, Numerics};
use tg_models::{LanguageModel, Logits};
use tg_profile::{BenchOptions, Fingerprint, Profile, Profiler, RooflineOptions};

/// Arguments of `tg profile`.
#[derive(Args)]
pub(crate) struct ProfileArgs {
    /// The model: a Gemma 3 GGUF file (the default model if omitted), or any model `tg run`
    /// opens (an `.onnx` file, an EmbeddingGemma folder), planned for the `--input` shapes.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// For a model other than a Gemma 3 GGUF: an input to plan for, as `NAME=D0,D1,..` (its
    /// shape; zeros) or `NAME=FILE.npy` (its values: for inputs the graph needs at compile
    /// time). Repeatable; an input with a fixed declared shape may be left out.
    #[arg(long = "input", value_name = "NAME=SHAPE|FILE.npy")]
    inputs: Vec<String>,
    /// Sequence lengths to plan for (comma-separated).
    #[arg(short, long, value_delimiter = ',', default_values_t = vec![1usize, 5, 6, 128])]
    seq: Vec<usize>,
    /// Capacities of the one-token incremental plans (generation) to plan for
    /// (comma-separated; empty = none).
    #[arg(long, value_delimiter = ',', default_values_t = vec![384usize, 768, 1536, 3072])]
    incremental: Vec<usize>,
    /// Thread counts to measure (comma-separated; 0 = all cores).
    #[arg(short, long, value_delimiter = ',', default_values_t = vec![1usize, 2])]
    threads: Vec<usize>,
    /// Quantized-matmul arithmetic to plan for (`exact`, `q8`, or `both`).
    #[arg(long, default_value = "both")]
    numerics: String,
    /// Profile file (default: this machine's file under the cache directory).
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// Short benchmarks (few repetitions, warm caches): for trying the tool, not for planning.
    #[arg(long)]
    quick: bool,
    /// Only list the keys planning asks about (measured or not), without measuring.
    #[arg(long)]
    list: bool,
    /// Device whose kernels to measure: `cpu` (default), `opencl`, `opencl:N`. A device other
    /// than the CPU also gets its host↔device links measured (latency and bandwidth).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Measure nothing: write to `--out` a what-if copy of this machine's profile in which
    /// `--device` (not the CPU) runs every kernel FACTOR times faster than the CPU measured
    /// (at the first `--threads` count), behind the links measured for it (else 5 µs and
    /// 16 GB/s each way). For planning experiments: `tg plan --device cpu,opencl` with
    /// `TG_PROFILE=FILE` then plans as if that device existed.
    #[arg(long = "what-if", value_name = "FACTOR")]
    what_if: Option<f64>,
    /// Keep a GPU device's launch configuration as it is. By default `--device` with one
    /// (OpenCL, CUDA: work-group and tile shapes of the kernels) first measures the
    /// candidates of each field, keeps the fastest and stores it for that device, so that
    /// every later use of the device runs them and the kernel times measured next are theirs.
    #[arg(long)]
    no_tune: bool,
}

/// Devices by (name, threads), opened once.
#[derive(Default)]
struct Opened(std::collections::HashMap<(String, usize), Arc<dyn tg_runtime::Device>>);

impl Opened {
    fn get(&mut self, name: &str, threads: usize) -> Result<Arc<dyn tg_runtime::Device>, String> {
        // Keys name devices as plans do (`opencl:0`); `opencl` opens the same device.
        let key = (name.to_string(), threads);
        if let Some(d) = self.0.get(&key) {
            return Ok(d.clone());
        }
        let d = crate::device(name, threads)?;
        self.0.insert((d.name().to_string(), threads), d.clone());
        self.0.insert(key, d.clone());
        Ok(d)
    }
}

impl tg_profile::DeviceSource for Opened {
    fn device(&mut self, name: &str, threads: usize) -> Result<Arc<dyn tg_runtime::Device>, String> {
        self.get(name, threads)
    }
}

/// Measures the launch configuration candidates of `dev` (`tg_devices::launch::tune`), keeps
/// the fastest on the device and stores it for later opens of the same device.
fn tune(dev: &Arc<dyn tg_runtime::Device>, quick: bool) -> Result<(), String> {
    let opts = if quick {
        BenchOptions::quick()
    } else {
        BenchOptions { warmup: 2, min_reps: 5, min_time: std::time::Duration::from_millis(30), max_time: std::time::Duration::from_millis(300), passes: 1, ..BenchOptions::default() }
    };
    eprintln!("{}: tuning launch shapes ...", dev.name());
    let r = tg_devices::launch::tune(&**dev, 1, &opts)?;
    for f in &r.fields {
        let cands: Vec<String> = f.candidates.iter().map(|(v, ns)| if ns.is_finite() { format!("{v}: {:.1} us", ns / 1e3) } else { v.clone() }).collect();
        eprintln!("  {:<24} {} -> {}", f.field, cands.join(", "), f.chosen);
    }
    let path = tg_devices::launch::save(&dev.fingerprint(), &r.config)?;
    eprintln!("{}: launch shapes tuned in {:.1} s, stored in {}", dev.name(), r.seconds, path.display());
    Ok(())
}

/// Measures the host↔device links of `dev` (transfers as the executor makes them, of 4 KiB
/// to 16 MiB) into the profile as `cpu → dev` and `dev → cpu`.
fn measure_links(profile: &mut Profile, dev: &Arc<dyn tg_runtime::Device>, opened: &mut Opened, quick: bool) -> Result<(), String> {
    let sizes = [4096usize, 65536, 1 << 20, 16 << 20];
    let opts = if quick { BenchOptions::quick() } else { BenchOptions::default() };
    let cpu = opened.get("cpu", 1)?;
    let (up, down) = tg_profile::measure_device_links(&*cpu, &**dev, &sizes, &opts).map_err(|e| e.to_string())?;
    eprintln!("link cpu -> {}: latency {:.1} us, {:.2} GB/s", dev.name(), up.latency_ns / 1e3, up.bytes_per_ns);
    eprintln!("link {} -> cpu: latency {:.1} us, {:.2} GB/s", dev.name(), down.latency_ns / 1e3, down.bytes_per_ns);
    profile.set_link(tg_profile::LinkKey { src: "cpu".into(), dst: dev.name().into() }, up);
    profile.set_link(tg_profile::LinkKey { src: dev.name().into(), dst: "cpu".into() }, down);
    Ok(())
}

/// `tg profile --what-if FACTOR --device D --out FILE`.
fn what_if(a: &ProfileArgs, factor: f64) -> Result<(), String> {
    let out = a.out.as_ref().ok_or("--what-if writes a separate profile: give --out FILE")?;
    if !(factor.is_finite() && factor > 0.0) {
        return Err(format!("--what-if: expected a positive factor, got {factor}"));
    }
    let fp = Fingerprint::current();
    let mine = tg_profile::default_path(&fp);
    if out == &mine {
        return Err(format!("--out {} is this machine's measured profile: write the what-if profile elsewhere", mine.display()));
    }
    let base = Profile::load(&mine, &fp).map_err(|e| format!("{e} (run `tg profile` first: the what-if profile scales its CPU measurements)"))?;
    let threads = match a.threads.first() {
        Some(0) | None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        Some(&t) => t,
    };
    let dev = crate::device(&a.device, 1)?;
    if dev.kind() == tg_runtime::DeviceKind::Cpu {
        return Err("--what-if needs --device naming a device other than the CPU".into());
    }
    let name = dev.name().to_string();
    let assumed = |src: &str, dst: &str| (src.to_string(), dst.to_string(), tg_profile::Link { latency_ns: 5000.0, bytes_per_ns: 16.0, points: Vec::new() });
    let mut links = Vec::new();
    for (src, dst) in [("cpu", name.as_str()), (name.as_str(), "cpu")] {
        match base.links().iter().find(|(k, _)| k.src == src && k.dst == dst) {
            Some((_, l)) => links.push((src.to_string(), dst.to_string(), l.clone())),
            None => links.push(assumed(src, dst)),
        }
    }
    let p = base.what_if(("cpu", threads), (&name, dev.threads(), &dev.fingerprint()), factor, &links);
    p.save(out).map_err(|e| e.to_string())?;
    eprintln!(
        "wrote {}: {name} runs the CPU's {} measured kernels (x{threads} threads) {factor}x faster; links {}",
        out.display(),
        p.entries().iter().filter(|(k, _)| k.device == name).count(),
        links.iter().map(|(s, d, l)| format!("{s} -> {d} {:.1} us + {:.2} GB/s", l.latency_ns / 1e3, l.bytes_per_ns)).collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

pub(crate) fn run(a: ProfileArgs) -> Result<(), String> {
    if let Some(f) = a.what_if {
        return what_if(&a, f);
    }
    let t0 = Instant::now();
    let fp = Fingerprint::current();
    let path = a.out.clone().unwrap_or_else(|| tg_profile::default_path(&fp));
    let profile = match Profile::load_or_new(&path, &fp) {
        Ok(p) => p,
        // A stale file at an explicit path is never overwritten: the user's data stays.
        Err(e) => return Err(format!("{e} (remove it or give another --out)")),
    };
    let resumed = profile.len();
    let numerics: Vec<Numerics> = match a.numerics.as_str() {
        "exact" => vec![Numerics::Exact],
        "q8" => vec![Numerics::Q8Activations],
        "both" => vec![Numerics::Exact, Numerics::Q8Activations],
        other => return Err(format!("--numerics: expected exact, q8 or both, got '{other}'")),
    };
    if a.seq.is_empty() || a.seq.contains(&0) {
        return Err("--seq: give positive sequence lengths".into());
    }

    // 1. What planning asks about.
    let mut opened = Opened::default();
    // Another device's measurements are keyed by its fingerprint: a changed device, driver or
    // kernel build drops the old ones.
    let mut profile = profile;
    let dev = opened.get(&a.device, 1)?;
    if dev.launch_config().is_some() && !a.no_tune && !a.list {
        tune(&dev, a.quick)?;
    }
    if dev.kind() != tg_runtime::DeviceKind::Cpu {
        let dropped = profile.bind_device(dev.name(), &dev.fingerprint());
        if dropped > 0 {
            eprintln!("{}: {dropped} measurements of another device or kernel build dropped", dev.name());
        }
    }
    let generic = !a.inputs.is_empty() || a.model.as_ref().is_some_and(|p| p.is_dir() || p.extension().is_none_or(|e| !e.eq_ignore_ascii_case("gguf")));
    if generic {
        let (keys, what) = model_keys(&a, &numerics, &profile, &mut opened)?;
        return measure(&a, profile, &path, keys, what, resumed, &mut opened, t0);
    }
    let model_path = crate::model_path::resolve(a.model.clone())?;
    let m = LanguageModel::load(&model_path, 1).map_err(|e| e.to_string())?;
    let shared = Arc::new(profile);
    let mut keys = Vec::new();
    // The one-token plans' graphs depend on the capacity only: derived once each.
    let mut steps = Vec::new();
    for &cap in a.incremental.iter().filter(|&&c| c > 1) {
        steps.push(m.incremental_graph(1, cap).map_err(|e| e.to_string())?.graph);
    }
    // Thread counts are the CPU's; another device runs its own way, measured once.
    let threads = if tg_devices::kind_of(&a.device) == Some(tg_runtime::DeviceKind::Cpu) { a.threads.clone() } else { vec![1] };
    for &t in &threads {
        let dev = opened.get(&a.device, t)?;
        for &nm in &numerics {
            let opts = CompileOptions { numerics: nm, cost: CostSource::Profile(shared.clone()), ..Default::default() };
            for &s in &a.seq {
                let g = m.graph(s, Logits::Last).map_err(|e| e.to_string())?;
                keys.extend(tg_compiler::planning_keys(&g, std::slice::from_ref(&dev), &opts).map_err(|e| e.to_string())?);
            }
            for g in &steps {
                keys.extend(tg_compiler::planning_keys(g, std::slice::from_ref(&dev), &opts).map_err(|e| e.to_string())?);
            }
        }
    }
    let profile = Arc::try_unwrap(shared).unwrap_or_else(|p| (*p).clone());
    let what = format!("seq {:?} (+ one-token incremental plans at capacities {:?})", a.seq, a.incremental);
    measure(&a, profile, &path, keys, what, resumed, &mut opened, t0)
}

/// The kernel keys planning `--model` (not a Gemma 3 GGUF) asks about for the `--input`
/// shapes, at every thread count and numerics; and what they were collected for.
fn model_keys(a: &ProfileArgs, numerics: &[Numerics], profile: &Profile, opened: &mut Opened) -> Result<(Vec<tg_profile::ProfileKey>, String), String> {
    let path = a.model.clone().ok_or("--input: give the model it is for with --model")?;
    let home = opened.get(&a.device, 1)?;
    let mut model = tg_models::open(&path, tg_models::OpenOptions::on(vec![home])).map_err(|e| e.to_string())?;
    let given = crate::run::named_inputs(&a.inputs, "NAME=D0,D1,.. or NAME=FILE.npy")?;
    let feed = crate::run::feed_inputs(&model.inputs(), given, |s, v| match v {
        Some(v) if v.ends_with(".npy") => crate::run::npy_input(s, &v),
        Some(v) => {
            let shape: Vec<usize> = v
                .split(',')
                .map(|d| d.trim().parse::<usize>().map_err(|_| format!("--input {}={v}: expected a shape D0,D1,.. (or a .npy file)", s.name)))
                .collect::<Result<_, _>>()?;
            zeros(s.elem, &shape)
        }
        None => {
            let fixed: Option<Vec<usize>> = s.dims.as_ref().and_then(|d| d.iter().map(|d| if let tg_models::Dim::Fixed(n) = d { Some(*n) } else { None }).collect());
            let shape = fixed.ok_or_else(|| format!("no --input for the model's input '{}' ({}, {}): give its shape", s.name, s.shape_text(), s.elem))?;
            zeros(s.elem, &shape)
        }
    })?;
    let graphs = model.graphs(&feed).map_err(|e| e.to_string())?;
    let shared = Arc::new(profile.clone());
    let threads = if tg_devices::kind_of(&a.device) == Some(tg_runtime::DeviceKind::Cpu) { a.threads.clone() } else { vec![1] };
    let mut keys = Vec::new();
    for &t in &threads {
        let dev = opened.get(&a.device, t)?;
        for &nm in numerics {
            let opts = CompileOptions { numerics: nm, cost: CostSource::Profile(shared.clone()), ..Default::default() };
            for g in &graphs {
                keys.extend(tg_compiler::planning_keys(g, std::slice::from_ref(&dev), &opts).map_err(|e| e.to_string())?);
            }
        }
    }
    let mut shapes: Vec<String> = feed.iter().map(|(k, v)| format!("{k}={:?}", v.shape)).collect();
    shapes.sort();
    Ok((keys, format!("{} ({}) inputs {}", path.display(), model.kind(), shapes.join(" "))))
}

/// A zero tensor of an input's element type.
fn zeros(elem: tg_models::ElemType, shape: &[usize]) -> Result<tg_ir::HostTensor, String> {
    let n: usize = shape.iter().product();
    let data = match elem {
        tg_models::ElemType::F32 => tg_ir::HostData::F32(vec![0.0; n]),
        tg_models::ElemType::I32 | tg_models::ElemType::I64 => tg_ir::HostData::I32(vec![0; n]),
        tg_models::ElemType::Bool => tg_ir::HostData::Bool(vec![0; n]),
    };
    tg_ir::HostTensor::new(shape, data).map_err(|e| e.to_string())
}

/// Measures the keys not in the profile yet, saving after each (the common part of every
/// model's `tg profile`).
#[allow(clippy::too_many_arguments)]
fn measure(
    a: &ProfileArgs,
    profile: Profile,
    path: &std::path::Path,
    mut keys: Vec<tg_profile::ProfileKey>,
    what: String,
    resumed: usize,
    opened: &mut Opened,
    t0: Instant,
) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    keys.retain(|k| seen.insert(k.clone().normalized()));
    let todo = keys.iter().filter(|k| !profile.contains(k)).count();
    eprintln!(
        "profile {} ({}): {} kernel keys for {what} x threads {:?} x numerics {}; {} measured already, {} to measure [{:.1} s to collect]",
        path.display(),
        profile.fingerprint().id(),
        keys.len(),
        a.threads,
        a.numerics,
        keys.len() - todo,
        todo,
        t0.elapsed().as_secs_f64()
    );
    if a.list {
        for k in &keys {
            println!("{} {}", if profile.contains(k) { "measured" } else { "missing " }, k.short());
        }
        return Ok(());
    }

    // 2. Measure, saving after every key.
    let mut prof = Profiler::new(profile, Some(path.to_path_buf()));
    if a.quick {
        prof.bench_options = BenchOptions::quick();
        prof.roofline_options = RooflineOptions::quick();
    }
    let t1 = Instant::now();
    let mut err = std::io::stderr();
    let tty = std::io::IsTerminal::is_terminal(&err);
    let mut last_line = Instant::now();
    let mut progress = |done: usize, total: usize, k: &tg_profile::ProfileKey| {
        let width = 30;
        let filled = (done * width).checked_div(total).unwrap_or(width).min(width);
        let line = format!("[{}{}] {done}/{total} {:6.1} s  {}", "#".repeat(filled), ".".repeat(width - filled), t1.elapsed().as_secs_f64(), k.short());
        if tty {
            let _ = write!(err, "\r{:<120.120}", line);
            let _ = err.flush();
        } else if last_line.elapsed().as_secs_f64() > 5.0 || done == total {
            let _ = writeln!(err, "{line}");
            last_line = Instant::now();
        }
        ControlFlow::Continue(())
    };
    let report = prof.run(&keys, opened, &mut progress).map_err(|e| e.to_string())?;
    if tty {
        let _ = writeln!(err);
    }
    let dev = opened.get(&a.device, 1)?;
    if dev.kind() != tg_runtime::DeviceKind::Cpu {
        let mut p = prof.profile().clone();
        measure_links(&mut p, &dev, opened, a.quick)?;
        p.save(path).map_err(|e| e.to_string())?;
        prof = Profiler::new(p, Some(path.to_path_buf()));
    }
    let p = prof.profile();
    for (k, why) in &report.failed {
        eprintln!("could not measure {}: {why}", k.short());
    }
    for r in p.rooflines() {
        eprintln!("roofline {} x{}: launch {:.0} ns, {:.1} GB/s, {:.1} GFLOP/s", r.device, r.threads, r.launch_ns, r.bytes_per_ns, r.flops_per_ns);
    }
    println!(
        "{}: {} kernels measured now, {} already there (resumed from {resumed}), {} rooflines, {} failed; {} keys in the profile; {:.1} s",
        path.display(),
        report.measured,
        report.skipped,
        report.rooflines,
        report.failed.len(),
        p.len(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
