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
    assert_eq!(kinds, ["cpu", "opencl"]);
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
