//! The `tg` binary end to end: real generation with `--json`, and bad input (missing,
//! truncated, malformed or mismatched model files, over-long prompts, bad options) giving
//! a clear error and a non-zero exit, never a panic.

use std::path::{Path, PathBuf};
use std::process::Command;
use tg_gguf::{GgufFile, GgufWriter, Value};

fn model() -> Option<PathBuf> {
    let p = std::env::var_os("TG_MODEL").map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join(tg_models::cache::DEFAULT_MODEL));
    if p.is_file() {
        Some(p)
    } else if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: model not found at {}", p.display());
        None
    } else {
        panic!("model not found at {}: run scripts/fetch_model.py or set TG_MODEL", p.display())
    }
}

fn tg(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tg")).args(args).output().expect("run tg");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn expect_error(args: &[&str], needle: &str) {
    let (code, _, err) = tg(args);
    assert_ne!(code, 0, "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(err.contains(needle), "{args:?}: stderr should mention {needle:?}: {err}");
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tg-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Rewrites the model with edited metadata and tensors.
fn variant(src: &Path, out: &Path, meta: impl Fn(&str, &Value) -> Option<Value>, tensor: impl Fn(&str, &[u64]) -> Option<Vec<u64>>) {
    let f = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k == "general.alignment" {
            continue;
        }
        if let Some(v) = meta(k, v) {
            w.add(k.clone(), v);
        }
    }
    for t in f.tensors() {
        if let Some(dims) = tensor(&t.name, &t.dims) {
            let bytes = f.tensor_bytes(t).to_vec();
            if dims == t.dims {
                w.add_tensor(t.name.clone(), &dims, t.ty, bytes);
            } else {
                let n: u64 = dims.iter().product();
                w.add_tensor(t.name.clone(), &dims, t.ty, bytes[..t.ty.row_bytes(n as usize).unwrap()].to_vec());
            }
        }
    }
    w.write_to(out).unwrap();
}

#[test]
fn generate_json_reports_tokens_and_timings() {
    let Some(m) = model() else { return };
    let (code, out, err) = tg(&["generate", "-m", m.to_str().unwrap(), "--prompt", "def fibonacci(n):", "-n", "8", "-t", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["prompt_tokens"].as_array().unwrap().len(), 7);
    assert_eq!(v["prompt_tokens"][0], 2, "BOS first");
    assert_eq!(v["tokens"].as_array().unwrap().len(), 8);
    assert!(v["text"].as_str().unwrap().contains("if n"), "{}", v["text"]);
    assert!(v["timings"]["prompt_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn streaming_generate_prints_the_continuation() {
    let Some(m) = model() else { return };
    let (code, out, err) = tg(&["generate", "-m", m.to_str().unwrap(), "--prompt", "Once upon a time", "-n", "6", "-t", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("Once upon a time, there was a"), "{out}");
}

#[test]
fn missing_and_malformed_files_are_clear_errors() {
    expect_error(&["generate", "-m", "/nonexistent/model.gguf", "--prompt", "x"], "/nonexistent/model.gguf");
    let bad = tmp("badmagic.gguf");
    std::fs::write(&bad, b"GGML\x03\x00\x00\x00 this is not a gguf file").unwrap();
    expect_error(&["generate", "-m", bad.to_str().unwrap(), "--prompt", "x"], "magic");
    let Some(m) = model() else { return };
    let trunc = tmp("truncated.gguf");
    let bytes = std::fs::read(&m).unwrap();
    std::fs::write(&trunc, &bytes[..1_000_000]).unwrap();
    expect_error(&["generate", "-m", trunc.to_str().unwrap(), "--prompt", "x"], "truncated.gguf");
    let trunc2 = tmp("truncated-data.gguf");
    std::fs::write(&trunc2, &bytes[..bytes.len() - 4096]).unwrap();
    expect_error(&["generate", "-m", trunc2.to_str().unwrap(), "--prompt", "x"], "past the end");
}

#[test]
fn missing_tensors_and_wrong_shapes_are_named() {
    let Some(m) = model() else { return };
    let missing = tmp("missing-tensor.gguf");
    variant(&m, &missing, |_, v| Some(v.clone()), |n, d| (n != "blk.3.ffn_up.weight").then(|| d.to_vec()));
    expect_error(&["generate", "-m", missing.to_str().unwrap(), "--prompt", "x"], "blk.3.ffn_up.weight");
    let shape = tmp("wrong-shape.gguf");
    variant(&m, &shape, |_, v| Some(v.clone()), |n, d| Some(if n == "blk.0.attn_q_norm.weight" { vec![128] } else { d.to_vec() }));
    expect_error(&["generate", "-m", shape.to_str().unwrap(), "--prompt", "x"], "blk.0.attn_q_norm.weight");
    let arch = tmp("wrong-arch.gguf");
    variant(&m, &arch, |k, v| Some(if k == "general.architecture" { Value::String("mamba".into()) } else { v.clone() }), |_, d| Some(d.to_vec()));
    expect_error(&["generate", "-m", arch.to_str().unwrap(), "--prompt", "x"], "architecture 'mamba' is not one this build runs (it runs: gemma3, llama, qwen2, qwen3)");
    // An architecture we run, whose keys the file lacks: the missing key is named.
    let relabelled = tmp("relabelled.gguf");
    variant(&m, &relabelled, |k, v| Some(if k == "general.architecture" { Value::String("llama".into()) } else { v.clone() }), |_, d| Some(d.to_vec()));
    expect_error(&["generate", "-m", relabelled.to_str().unwrap(), "--prompt", "x"], "llama.");
    let short = tmp("short-context.gguf");
    variant(&m, &short, |k, v| Some(if k == "gemma3.context_length" { Value::U32(8) } else { v.clone() }), |_, d| Some(d.to_vec()));
    expect_error(&["generate", "-m", short.to_str().unwrap(), "--prompt", "one two three four five six", "-n", "4"], "context length of 8");
    for p in [missing, shape, arch, relabelled, short] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn bad_options_are_errors() {
    let Some(m) = model() else { return };
    let ms = m.to_str().unwrap();
    expect_error(&["generate", "-m", ms, "--prompt", "x", "--temperature=-1"], "temperature");
    expect_error(&["generate", "-m", ms, "--prompt", "x", "--top-p", "0"], "top-p");
    expect_error(&["plan", "-m", ms, "--no-stage", "lower"], "cannot be switched off");
    expect_error(&["bench", "-m", ms, "-r", "0"], "repetitions");
}

#[test]
fn bench_json_uses_llama_bench_field_names() {
    let Some(m) = model() else { return };
    let (code, out, err) = tg(&["bench", "-m", m.to_str().unwrap(), "-p", "3", "-n", "2", "-t", "1", "-r", "2", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).expect("a JSON list");
    assert_eq!(rows.len(), 2, "one pp row and one tg row");
    for r in &rows {
        for f in ["n_prompt", "n_gen", "n_depth", "n_threads", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ts", "samples_ns", "model_type", "model_size", "model_n_params"] {
            assert!(r.get(f).is_some(), "missing field {f}: {r}");
        }
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 2);
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0);
    }
    assert_eq!((rows[0]["n_prompt"].as_u64(), rows[0]["n_gen"].as_u64()), (Some(3), Some(0)));
    assert_eq!((rows[1]["n_prompt"].as_u64(), rows[1]["n_gen"].as_u64()), (Some(0), Some(2)));
    let (code, out, _) = tg(&["bench", "-m", m.to_str().unwrap(), "-p", "3", "-n", "0", "-t", "1", "-r", "1"]);
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().starts_with("| model "), "{out}");
    assert!(out.contains("|             pp3 |"), "{out}");
}

/// `--report` writes the HTML plan report (with measured step times when the run is
/// profiled); a report that cannot be written is an error naming the file, after the run.
#[test]
fn reports_are_written_whole_or_refused() {
    let Some(m) = model() else { return };
    let m = m.to_str().unwrap();
    let out = tmp("plan-report.html");
    let (code, _, err) = tg(&["plan", "-m", m, "--seq", "3", "--profile", "--report", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("\"measured\":[") && page.contains("id=\"gantt\""), "{}", &page[..200.min(page.len())]);
    assert!(err.contains("report:"), "{err}");
    let gen = tmp("generate-report.html");
    let (code, _, err) = tg(&["generate", "-m", m, "--prompt", "Hi", "-n", "2", "--report", gen.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read_to_string(&gen).unwrap().contains("one generated token per run"));
    expect_error(&["plan", "-m", m, "--seq", "2", "--report", "/nonexistent-dir/r.html"], "/nonexistent-dir/r.html");
    expect_error(&["generate", "-m", m, "--prompt", "Hi", "-n", "2", "--recompute", "--report", gen.to_str().unwrap()], "--recompute");
}
