//! `tg devices` and `--device`: what is present, and the errors for devices that are not.

use std::process::Command;

fn tg(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tg"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run tg");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn devices_lists_the_cpu_as_json() {
    let (rc, out, err) = tg(&["devices", "--json"], &[]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let kinds: Vec<&str> = v.as_array().unwrap().iter().map(|k| k["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["cpu", "opencl", "cuda"]);
    assert_eq!(v[0]["devices"][0]["name"], "cpu");
    assert!(v[0]["devices"][0]["compute_units"].as_u64().unwrap() >= 1);
}

#[test]
fn an_unknown_device_lists_the_present_ones() {
    let (rc, _, err) = tg(&["generate", "--prompt", "hi", "-n", "1", "--device", "tpu"], &[]);
    assert_eq!(rc, 1);
    assert!(err.contains("unknown device 'tpu'") && err.contains("present: cpu"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn no_opencl_platform_is_an_error_saying_what_was_looked_for() {
    // ocl-icd reads the platform list from OCL_ICD_VENDORS: an empty folder means none.
    let empty = std::env::temp_dir().join(format!("tg-no-icd-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let env = [("OCL_ICD_VENDORS", empty.to_str().unwrap())];
    let (rc, _, err) = tg(&["generate", "--prompt", "hi", "-n", "1", "--device", "opencl"], &env);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("no OpenCL platform") && err.contains("/etc/OpenCL/vendors"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (rc, out, _) = tg(&["devices"], &env);
    assert_eq!(rc, 0);
    assert!(out.contains("opencl") && out.contains("none: no OpenCL platform"), "{out}");
    let _ = std::fs::remove_dir(&empty);
}

#[test]
fn an_absent_opencl_index_names_the_present_devices() {
    let (rc, _, err) = tg(&["generate", "--prompt", "hi", "-n", "1", "--device", "opencl:97"], &[]);
    assert_eq!(rc, 1);
    assert!(err.contains("opencl:97") && (err.contains("no such OpenCL device") || err.contains("no OpenCL platform")), "{err}");
}

#[test]
fn a_device_list_with_an_absent_device_lists_the_present_ones() {
    let (rc, _, err) = tg(&["plan", "--device", "cpu,tpu"], &[]);
    assert_eq!(rc, 1);
    assert!(err.contains("tpu") && err.contains("cpu"), "{err}");
    let (rc, _, err) = tg(&["plan", "--device", "cpu,cpu"], &[]);
    assert_eq!(rc, 1);
    assert!(err.contains("twice"), "{err}");
    let (rc, _, err) = tg(&["plan", "--place", "attention"], &[]);
    assert_eq!(rc, 1);
    assert!(err.contains("OP_PATTERN=DEVICE"), "{err}");
}

/// Skips (or, under CI, fails) a `--compile cuda` run whose tools are missing.
fn cuda_tools_missing(rc: i32, err: &str) -> bool {
    if rc != 0 && (err.contains("TG_NVRTC") || err.contains("TG_PTXAS")) {
        assert!(std::env::var_os("CI").is_none(), "CI is set and the CUDA tools are missing (scripts/fetch_cuda_tools.py): {err}");
        println!("SKIPPED: {err}");
        return true;
    }
    false
}

#[test]
fn compile_cuda_reports_every_kernel_and_arch() {
    let (rc, out, err) = tg(&["devices", "--compile", "cuda", "--arch", "sm_80,sm_90", "--json"], &[]);
    if cuda_tools_missing(rc, &err) {
        return;
    }
    assert_eq!(rc, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let rows = v.as_array().expect("an array of rows");
    let per_arch = |a: &str| rows.iter().filter(|r| r["arch"] == a).count();
    assert!(per_arch("sm_80") >= 30 && per_arch("sm_80") == per_arch("sm_90"), "{out}");
    assert_eq!(rows.len(), 2 * per_arch("sm_90"));
    for r in rows {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r["kernel"].as_str().is_some_and(|k| k.starts_with("tg_")), "{r}");
        assert!(r["registers"].as_u64().is_some_and(|n| n > 0), "{r}");
        for k in ["spill_stores", "spill_loads", "shared_bytes", "stack_bytes"] {
            assert!(r[k].is_u64(), "{k}: {r}");
        }
    }
    assert!(err.contains(&format!("{} of {} compiled", rows.len(), rows.len())), "summary on stderr with --json: {err}");
    // The table: one row per kernel, then the summary line.
    let (rc, out, err) = tg(&["devices", "--compile", "cuda", "--arch", "sm_90"], &[]);
    assert_eq!(rc, 0, "{err}");
    let n = per_arch("sm_90");
    assert!(out.contains("tg_mmv") && out.contains("registers") && out.contains(&format!("{n} of {n} compiled")), "{out}");
    assert_eq!(out.lines().filter(|l| l.contains(" sm_90 ") && l.ends_with(" ok")).count(), n, "{out}");
}

#[test]
fn compile_of_another_kind_or_a_bad_arch_is_an_error() {
    let (rc, _, err) = tg(&["devices", "--compile", "opencl"], &[]);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("--compile opencl") && err.contains("only `cuda`"), "{err}");
    let (rc, _, err) = tg(&["devices", "--compile", "cuda", "--arch", "sm_90,gfx1100"], &[]);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("gfx1100") && !err.contains("panicked"), "{err}");
}

#[test]
fn compile_cuda_without_nvrtc_names_tg_nvrtc() {
    let (rc, _, err) = tg(&["devices", "--compile", "cuda"], &[("TG_NVRTC", "/nonexistent/libnvrtc.so.12")]);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("TG_NVRTC=/nonexistent/libnvrtc.so.12") && !err.contains("panicked"), "{err}");
}

#[test]
fn generate_on_cuda_without_a_driver_names_libcuda() {
    // What `tg devices` says of CUDA here decides what to expect.
    let (rc, out, err) = tg(&["devices", "--json"], &[]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let cuda = v.as_array().unwrap().iter().find(|k| k["kind"] == "cuda").expect("a cuda kind").clone();
    if cuda["devices"].as_array().is_some_and(|d| !d.is_empty()) {
        println!("SKIPPED: a CUDA device is present");
        return;
    }
    let why = cuda["error"].as_str().unwrap_or_default().to_string();
    let mut args = vec!["generate", "--prompt", "hi", "-n", "1", "--device", "cuda"];
    let model = std::env::var("TG_MODEL").unwrap_or_default();
    if !model.is_empty() {
        args.extend(["--model", model.as_str()]);
    }
    let (rc, _, err) = tg(&args, &[]);
    assert_eq!(rc, 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    if why.contains("libcuda") {
        assert!(err.contains("cuda:0") && err.contains("libcuda") && err.contains("LD_LIBRARY_PATH"), "{err}");
    } else {
        // A driver without a usable device: the same reason as the listing.
        assert!(err.contains("cuda:0") && err.contains(why.split(':').next().unwrap_or_default()), "{err} (listing: {why})");
    }
}
