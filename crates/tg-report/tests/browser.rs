//! Plan reports rendered in a real browser: Debian's Chromium, headless (installed by
//! `scripts/install_system_deps.sh`). For a small plan, a plan across two devices (CPU and
//! OpenCL, PoCL in CI) and a Gemma plan, the test writes the report under
//! `target/reports/`, lets Chromium run its script and dumps the DOM, and checks it: one bar
//! per step, one rectangle per arena buffer, no two rectangles of buffers live at the same
//! step overlapping, both device lanes and a line per transfer, the legend, the page marked
//! drawn, and nothing on the console (the page logs nothing; an uncaught error would be there). It saves a screenshot of each view next to
//! the report for a person to look at. Without Chromium (or OpenCL, or the model) the case
//! prints `SKIPPED` and passes, except under CI, where it fails.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use tg_compiler::{compile, CompileOptions, PlacePin};
use tg_ir::{DType, GraphBuilder, UnaryOp};
use tg_report::{Measured, ReportInput};
use tg_runtime::{Device, Executable, Kernel, Storage};

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

fn skip(what: &str) {
    assert!(!ci(), "{what} under CI (scripts/test.sh installs it)");
    eprintln!("SKIPPED: {what}");
}

fn chromium() -> Option<&'static str> {
    match Command::new("chromium").args(["--headless", "--no-sandbox", "--version"]).output() {
        Ok(o) if o.status.success() => Some("chromium"),
        _ => {
            skip("no chromium");
            None
        }
    }
}

fn out_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/reports");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Chromium's DOM after the page's script ran, and its console errors.
fn render(browser: &str, html: &Path, shots: &[(&str, &str)]) -> (String, Vec<String>) {
    let url = format!("file://{}", html.canonicalize().unwrap().display());
    let common = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", "--window-size=1400,900"];
    let t = Instant::now();
    let out = Command::new(browser).args(common).args(["--enable-logging=stderr", "--v=0", "--dump-dom"]).arg(&url).output().unwrap();
    eprintln!("{}: rendered and dumped in {:.2} s", html.display(), t.elapsed().as_secs_f64());
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let log = String::from_utf8_lossy(&out.stderr);
    // The page logs nothing: any console message is an error or a warning.
    let errors: Vec<String> = log.lines().filter(|l| l.contains(":CONSOLE")).map(String::from).collect();
    for (hash, name) in shots {
        let png = html.with_file_name(format!("{}-{name}.png", html.file_stem().unwrap().to_string_lossy()));
        let o = Command::new(browser).args(common).arg(format!("--screenshot={}", png.display())).arg(format!("{url}#{hash}")).output().unwrap();
        assert!(o.status.success() && png.is_file(), "screenshot {}: {}", png.display(), String::from_utf8_lossy(&o.stderr));
        eprintln!("screenshot: {}", png.display());
    }
    (String::from_utf8_lossy(&out.stdout).into_owned(), errors)
}

/// The elements `<tag ... class="cls..." ...>` of a dumped DOM, as attribute maps.
fn elements(dom: &str, tag: &str, class: &str) -> Vec<HashMap<String, String>> {
    let mut out = Vec::new();
    let open = format!("<{tag} ");
    let mut rest = dom;
    while let Some(i) = rest.find(&open) {
        let tail = &rest[i + open.len()..];
        let end = tail.find('>').unwrap_or(tail.len());
        let attrs = &tail[..end];
        let mut m = HashMap::new();
        let mut s = attrs;
        while let Some(eq) = s.find("=\"") {
            let key = s[..eq].trim().rsplit(' ').next().unwrap_or("").to_string();
            let v = &s[eq + 2..];
            let close = v.find('"').unwrap_or(v.len());
            m.insert(key, v[..close].to_string());
            s = &v[(close + 1).min(v.len())..];
        }
        if m.get("class").is_some_and(|c| c.split(' ').any(|x| x == class)) {
            out.push(m);
        }
        rest = &tail[end..];
    }
    out
}

/// The DOM checks of the module docs, for a report of `plan`.
fn check(dom: &str, errors: &[String], plan: &tg_runtime::Plan) {
    assert!(errors.is_empty(), "JavaScript errors: {errors:?}");
    assert!(dom.contains("data-ready=\"1\""), "the page's script did not finish");
    assert!(dom.contains("id=\"legend\""), "no legend");
    let bars = elements(dom, "rect", "bar");
    assert_eq!(bars.len(), plan.steps.len(), "one bar per step");
    let mut steps: Vec<usize> = bars.iter().map(|b| b["data-step"].parse().unwrap()).collect();
    steps.sort();
    assert!(steps.iter().enumerate().all(|(i, &s)| i == s), "every step's bar once");
    let arena_buffers = plan.buffers.iter().filter(|b| matches!(b.storage, Storage::Arena { .. })).count();
    let bufs = elements(dom, "rect", "buf");
    assert_eq!(bufs.len(), arena_buffers, "one rectangle per arena buffer");
    let num = |m: &HashMap<String, String>, k: &str| -> usize { m[k].parse().unwrap() };
    for (i, a) in bufs.iter().enumerate() {
        for b in &bufs[i + 1..] {
            if a["data-arena"] != b["data-arena"] {
                continue;
            }
            let live = num(a, "data-x0") <= num(b, "data-x1") && num(b, "data-x0") <= num(a, "data-x1");
            let bytes = num(a, "data-y0") < num(b, "data-y1") && num(b, "data-y0") < num(a, "data-y1");
            assert!(!(live && bytes), "buffers {} and {} are live together and overlap", a["data-buffer"], b["data-buffer"]);
        }
    }
    let lanes: Vec<_> = dom.matches("class=\"lane\"").collect();
    assert_eq!(lanes.len(), plan.devices.len(), "one lane per device");
    let transfers = plan.steps.iter().filter(|s| matches!(s.kernel, Kernel::Transfer { .. })).count();
    assert_eq!(elements(dom, "line", "transfer").len(), transfers, "a line per transfer");
}

fn small_graph() -> tg_ir::Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[8, 16], DType::F32).unwrap();
    let w = b.input("w", &[16, 16], DType::F32).unwrap();
    let y = b.matmul(x, w, false).unwrap();
    let z = b.unary(UnaryOp::Tanh, y).unwrap();
    let e = b.unary(UnaryOp::Exp, z).unwrap();
    let s = b.add(e, x).unwrap();
    b.output("y", s).unwrap();
    b.finish().unwrap()
}

fn input<'a>(title: &str, c: &'a tg_compiler::Compiled, devs: &[Arc<dyn Device>], measured: Option<Measured>) -> ReportInput<'a> {
    ReportInput {
        title: title.into(),
        command: "cargo test -p tg-report --test browser".into(),
        plan: &c.plan,
        report: &c.report,
        threads: devs.iter().map(|d| d.threads()).collect(),
        measured,
        derivation: None,
    }
}

#[test]
fn a_small_plan_renders_with_measured_times() {
    let Some(browser) = chromium() else { return };
    let cpu = tg_devices::open("cpu", 1).unwrap();
    let devs = vec![cpu];
    let c = compile(&small_graph(), &devs, &CompileOptions::default()).unwrap();
    let mut exe = Executable::new(c.plan.clone(), devs.clone(), Arc::new(HashMap::<String, Vec<u8>>::new())).unwrap();
    exe.set_profiling(true);
    let inputs = HashMap::from([
        ("x".to_string(), tg_ir::HostTensor::f32(&[8, 16], (0..128).map(|i| i as f32 / 64.0).collect()).unwrap()),
        ("w".to_string(), tg_ir::HostTensor::f32(&[16, 16], (0..256).map(|i| (i % 7) as f32 / 8.0).collect()).unwrap()),
    ]);
    exe.run(&inputs).unwrap();
    let measured = Measured::Durations(exe.step_times().unwrap().to_vec());
    let path = out_dir().join("small.html");
    let bytes = tg_report::write(&input("small plan", &c, &devs, Some(measured)), &path).unwrap();
    eprintln!("{}: {bytes} bytes", path.display());
    let (dom, errors) = render(browser, &path, &[("view=schedule", "schedule"), ("view=memory", "memory")]);
    check(&dom, &errors, &c.plan);
    assert_eq!(elements(&dom, "rect", "mbar").len(), c.plan.steps.len(), "a measured bar per step");
    // Measured times that do not fit the plan are refused.
    let bad = tg_report::render(&input("bad", &c, &devs, Some(Measured::Durations(vec![1]))));
    assert!(bad.unwrap_err().to_string().contains("step times"));
}

#[test]
fn a_plan_across_two_devices_shows_both_lanes_and_the_transfers() {
    let Some(browser) = chromium() else { return };
    let cl = match tg_devices::open("opencl", 1) {
        Ok(d) => d,
        Err(e) => return skip(&format!("no OpenCL device ({e})")),
    };
    let devs = vec![tg_devices::open("cpu", 1).unwrap(), cl];
    let mut opts = CompileOptions::default();
    opts.placement.pins = vec!["tanh=opencl".parse::<PlacePin>().unwrap()];
    let c = compile(&small_graph(), &devs, &opts).unwrap();
    let transfers = c.plan.steps.iter().filter(|s| matches!(s.kernel, Kernel::Transfer { .. })).count();
    assert!(transfers >= 2, "the pinned op's operand goes there and its result comes back");
    let path = out_dir().join("two-devices.html");
    tg_report::write(&input("small plan on cpu + opencl", &c, &devs, None), &path).unwrap();
    let (dom, errors) = render(browser, &path, &[("view=schedule", "schedule")]);
    check(&dom, &errors, &c.plan);
}

#[test]
fn a_gemma_plan_renders_at_full_scale() {
    let Some(browser) = chromium() else { return };
    let path = std::env::var_os("TG_MODEL").map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join(tg_models::cache::DEFAULT_MODEL));
    if !path.is_file() {
        return skip(&format!("no model at {}", path.display()));
    }
    let m = tg_models::LanguageModel::load(&path, 2).unwrap();
    let devs = m.devices();
    let inc = m.incremental_graph(1, 384).unwrap();
    let c = compile(&inc.graph, &devs, &CompileOptions::default()).unwrap();
    let out = out_dir().join("gemma.html");
    let mut i = input("Gemma 3 270M, one token at capacity 384", &c, &devs, None);
    let summary = inc.summary();
    i.derivation = Some(summary);
    let bytes = tg_report::write(&i, &out).unwrap();
    eprintln!("{}: {} KiB for {} steps", out.display(), bytes / 1024, c.plan.steps.len());
    let (dom, errors) = render(browser, &out, &[("view=schedule", "schedule"), ("view=schedule&layer=3", "layer3"), ("view=memory", "memory"), ("view=summary", "summary")]);
    check(&dom, &errors, &c.plan);
    assert!(dom.contains(">layer 17<"), "the layer picker lists the 18 layers");
}
