//! A test table in the style of ggml's test-backend-ops: every kernel family of every
//! device present, on many shapes and layouts, against the f64 reference interpreter.
//!
//! For every backend of [`tg_devices::BACKENDS`] and every device it lists, every case of
//! `backend_ops/cases.rs` is launched on the device (through the [`tg_runtime::Device`] trait
//! alone: alloc, write, fill, bind_weight, launch, synchronize, read) with its output between
//! two guard regions and poisoned, and compared with the reference (`backend_ops/harness.rs`
//! says how; `cases.rs` gives every threshold and why). A case is `ok`, `FAIL` or `not
//! supported` (the device's contract refused it); a refusal of a case the CPU runs is
//! listed. The test fails on any FAIL, on a registry entry without a case, on a case of an
//! unknown family, on a listed device that cannot be opened and, under `CI`, on a backend
//! without any device (unless its kind is in [`OPTIONAL_KINDS`]).
//!
//! The table is written to the test process's stderr directly (not through `eprintln!`,
//! which the test harness captures), so it shows without `-- --nocapture`, and to
//! `target/backend-ops.txt` with every case's status. The data are seeded: each case's seed
//! derives from its name and the base seed (env `TG_BACKEND_OPS_SEED`, decimal or 0x hex).
//!
//! All cases run in one `#[test]`, one device at a time, each device opened once: the OpenCL
//! kernels share one error status buffer per program (launches must not interleave), and
//! PoCL 3.1 has been seen to fail when contexts are created from several threads at once.
//!
//! Run: `cargo test --release -p tg-devices --test backend_ops`.

#[path = "backend_ops/cases.rs"]
mod cases;
#[path = "backend_ops/harness.rs"]
mod harness;

use harness::{run_case, Case, Status};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Instant;
use tg_runtime::{Layout, FAMILIES};

/// Device kinds whose absence is not a failure under `CI` (CI installs PoCL, but has no GPU:
/// without one, the CUDA kernels are compiled and their launches checked instead, see
/// [`cuda_without_a_device`]).
const OPTIONAL_KINDS: &[&str] = &["cuda"];

/// What can be checked of the CUDA device without a GPU: every kernel compiled for sm_90
/// (NVRTC, then `ptxas`), and every launch of every case planned and marshalled as the device
/// would, against the kernels' PTX parameter lists. One line for the table; problems (a
/// failed kernel, a mismatched launch) go to `problems`. Missing tools are no problem here
/// (tg-cuda's own tests fail under CI without them).
fn cuda_without_a_device(cases: &[Case], problems: &mut Vec<String>) -> String {
    let arch = "sm_90";
    let compiled = match tg_cuda::compile_report(&[arch.to_string()]) {
        Ok(rows) => {
            let ok = rows.iter().filter(|r| r.ok).count();
            for r in rows.iter().filter(|r| !r.ok) {
                problems.push(format!("cuda: kernel {} does not compile for {arch}: {}", r.kernel, r.error.as_deref().unwrap_or("?")));
            }
            format!("{ok} of {} kernels compiled for {arch} with NVRTC", rows.len())
        }
        Err(e) => return format!("kernels not compiled: {e}"),
    };
    let sigs = match tg_cuda::Signatures::for_arch(arch) {
        Ok(s) => s,
        Err(e) => {
            problems.push(format!("cuda: reading the kernels' parameters: {e}"));
            return compiled;
        }
    };
    let (mut checked, mut launches, mut bad) = (0usize, 0usize, 0usize);
    for c in cases {
        let layouts: Vec<Layout> = c.inputs.iter().map(|o| o.layout.clone()).collect();
        match sigs.check(&c.kernel, &layouts, &c.out) {
            Ok(0) => {}
            Ok(n) => {
                checked += 1;
                launches += n;
            }
            Err(e) => {
                bad += 1;
                problems.push(format!("cuda: {} / {}: {e}", c.kernel.family(), c.name));
            }
        }
    }
    format!("{compiled}; {launches} launches of {checked} cases match the kernels' parameters{}", if bad > 0 { format!(", {bad} do not") } else { String::new() })
}

fn pretty_kind(kind: &str) -> &str {
    match kind {
        "cpu" => "CPU",
        "opencl" => "OpenCL",
        "cuda" => "CUDA",
        k => k,
    }
}

#[derive(Default, Clone, Copy)]
struct Counts {
    cases: usize,
    passed: usize,
    unsupported: usize,
    /// Of the unsupported: cases the CPU's contract accepts.
    cpu_runs: usize,
    failed: usize,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.cases += o.cases;
        self.passed += o.passed;
        self.unsupported += o.unsupported;
        self.cpu_runs += o.cpu_runs;
        self.failed += o.failed;
    }
}

fn row(name: &str, c: &Counts, with_cpu_note: bool) -> String {
    let uns = if with_cpu_note && c.cpu_runs > 0 { format!("{} ({} cpu runs)", c.unsupported, c.cpu_runs) } else { c.unsupported.to_string() };
    format!("  {name:<22} {:>6} {:>7} {:>18} {:>7}", c.cases, c.passed, uns, c.failed)
}

/// Writes to the process's stderr, bypassing the test harness's output capture.
fn say(s: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(s.as_bytes());
    let _ = e.flush();
}

#[test]
fn backend_ops() {
    let t0 = Instant::now();
    let cases: Vec<Case> = cases::all();
    let mut problems: Vec<String> = Vec::new();

    // The cases themselves: unique names (seeds derive from them), known families.
    let mut names = HashSet::new();
    for c in &cases {
        if !names.insert(c.name.as_str()) {
            problems.push(format!("test bug: two cases are named '{}'", c.name));
        }
        if !FAMILIES.contains(&c.kernel.family()) {
            problems.push(format!("case '{}': kernel family '{}' is not in tg_runtime::FAMILIES", c.name, c.kernel.family()));
        }
    }
    let build_s = t0.elapsed().as_secs_f64();

    let mut table = String::new();
    let mut log = String::new();
    let _ = writeln!(table, "backend-ops: {} cases per device (built with their f64 references in {build_s:.2} s), base seed {:#x}", cases.len(), harness::base_seed());
    let listing = tg_devices::list();
    let ci = std::env::var_os("CI").is_some();
    let mut summary = Vec::new();
    for backend in tg_devices::BACKENDS {
        let l = listing.iter().find(|k| k.kind == backend.kind);
        let devices = l.map(|k| k.devices.clone()).unwrap_or_default();
        if devices.is_empty() {
            let reason = l.and_then(|k| k.error.clone()).unwrap_or_else(|| "the backend lists no devices".into());
            let mut line = format!("SKIPPED: no {} device ({reason})", pretty_kind(backend.kind));
            if backend.kind == "cuda" {
                line = format!("{line}; {}", cuda_without_a_device(&cases, &mut problems));
            }
            let _ = writeln!(table, "{line}");
            if ci && !OPTIONAL_KINDS.contains(&backend.kind) {
                problems.push(format!("CI is set and backend '{}' has no device: {reason}", backend.kind));
            }
            continue;
        }
        for info in devices {
            let dev = match tg_devices::open(&info.name, 0) {
                Ok(d) => d,
                Err(e) => {
                    problems.push(format!("{}: listed but cannot be opened: {e}", info.name));
                    let _ = writeln!(table, "FAIL: {} is listed but cannot be opened: {e}", info.name);
                    continue;
                }
            };
            // A GPU device runs every case under its own launch shapes and then under each other
            // configuration the shared kernels are tested with (tg_gpu::Tuning::test_variants):
            // on PoCL that checks the GPU shapes too (a 32-lane run per weight row, split attention).
            let start = dev.launch_config();
            let mut configs: Vec<(String, Option<String>)> = vec![(String::new(), None)];
            if let Some(cur) = &start {
                for (what, t) in tg_gpu::Tuning::test_variants() {
                    let json = serde_json::to_string(&t).expect("tuning json");
                    if &json != cur {
                        configs.push((format!(" ({what})"), Some(json)));
                    }
                }
            }
            for (label, config) in configs {
                if let Some(c) = &config {
                    if let Err(e) = dev.set_launch_config(c) {
                        problems.push(format!("{}: launch configuration{label}: {e}", dev.name()));
                        continue;
                    }
                }
                let name = format!("{}{label}", dev.name());
                let td = Instant::now();
                let mut per: BTreeMap<&'static str, Counts> = BTreeMap::new();
                let mut notes = Vec::new();
                for c in &cases {
                    let fam = c.kernel.family();
                    let cnt = per.entry(fam).or_default();
                    cnt.cases += 1;
                    let status = run_case(&*dev, c);
                    let (tag, detail) = match &status {
                        Status::Ok(s) => {
                            cnt.passed += 1;
                            ("ok", s.clone())
                        }
                        Status::Unsupported(r) => {
                            cnt.unsupported += 1;
                            let layouts: Vec<Layout> = c.inputs.iter().map(|o| o.layout.clone()).collect();
                            if dev.kind() != tg_runtime::DeviceKind::Cpu && tg_runtime::cpu_registry().check(&c.kernel, &layouts, &c.out).is_ok() {
                                cnt.cpu_runs += 1;
                                notes.push(format!("  not supported on {name}, but the CPU runs it: {fam} / {}: {r}", c.name));
                            }
                            ("not supported", r.clone())
                        }
                        Status::Fail(e) => {
                            cnt.failed += 1;
                            let msg = format!("{name}: {fam} / {}: seed {:#x}: {e} [operands: {}]", c.name, c.seed, c.describe());
                            notes.push(format!("  FAIL {msg}"));
                            problems.push(msg);
                            ("FAIL", e.clone())
                        }
                    };
                    let _ = writeln!(log, "{name:<10} {tag:<13} {fam:<20} {} | {detail}", c.name);
                }
                let secs = td.elapsed().as_secs_f64();
                let info = dev.info();
                let _ = writeln!(table, "\n== {name}: {} ({}), {} compute units ==", info.description, info.driver, info.compute_units);
                let _ = writeln!(table, "  {:<22} {:>6} {:>7} {:>18} {:>7}", "family", "cases", "passed", "not supported", "failed");
                let mut total = Counts::default();
                let entries: Vec<&'static str> = dev.registry().entries().iter().map(|e| e.family).collect();
                for &fam in FAMILIES {
                    let c = per.get(fam).copied().unwrap_or_default();
                    let has_entry = entries.contains(&fam);
                    if has_entry && c.cases == 0 {
                        problems.push(format!("{name}: registry entry '{fam}' without a case"));
                    }
                    if !has_entry && c.cases == 0 {
                        continue;
                    }
                    let label = if has_entry { fam.to_string() } else { format!("{fam} (no entry)") };
                    let _ = writeln!(table, "{}", row(&label, &c, true));
                    total.add(&c);
                }
                for e in &entries {
                    if !FAMILIES.contains(e) {
                        problems.push(format!("{name}: registry entry '{e}' is not a family of tg_runtime::FAMILIES"));
                    }
                }
                let _ = writeln!(table, "{}   in {:.1} ms", row(&format!("TOTAL {name}"), &total, true), secs * 1e3);
                for n in &notes {
                    let _ = writeln!(table, "{n}");
                }
                summary.push(format!("{name}: {} cases, {} ok, {} not supported, {} FAIL", total.cases, total.passed, total.unsupported, total.failed));
            }
            if let Some(c) = &start {
                let _ = dev.set_launch_config(c);
            }
        }
    }
    let _ = writeln!(table, "\n{} in {:.2} s", summary.join("; "), t0.elapsed().as_secs_f64());
    if !problems.is_empty() {
        let _ = writeln!(table, "\nPROBLEMS ({}):", problems.len());
        for p in &problems {
            let _ = writeln!(table, "  {p}");
        }
    }
    say(&table);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/backend-ops.txt");
    let file = format!("{table}\nevery case:\n{log}");
    if let Err(e) = std::fs::create_dir_all(path.parent().unwrap_or(std::path::Path::new("."))).and_then(|_| std::fs::write(&path, file)) {
        say(&format!("could not write {}: {e}\n", path.display()));
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}
