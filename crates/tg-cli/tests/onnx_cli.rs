//! `tg run MODEL.onnx --input NAME=FILE.npy`: an ONNX node test's model run from `.npy`
//! files, its output read back; bad inputs named in the error, with a non-zero exit.

use std::path::PathBuf;
use std::process::Command;

fn cases() -> Option<PathBuf> {
    let p = std::env::var_os("TG_ONNX_TESTS").map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join("../onnx/node-tests-1.16.2"));
    if p.join(".complete").is_file() {
        return Some(p);
    }
    assert!(std::env::var("CI").map_or(true, |v| v.is_empty() || v == "0" || v == "false"), "ONNX node tests missing under CI: {}", p.display());
    eprintln!("SKIPPED: ONNX node tests not found at {}", p.display());
    None
}

fn npy(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {s}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((h.len() as u16).to_le_bytes());
    out.extend(h.as_bytes());
    out.extend(data);
    out
}

fn tg(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tg")).args(args).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn tg_run_runs_an_onnx_model_on_npy_files() {
    let Some(root) = cases() else { return };
    let model = root.join("test_add/model.onnx");
    let d = std::env::temp_dir().join(format!("tg-run-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let x: Vec<f32> = (0..60).map(|i| i as f32 / 7.0).collect();
    let y: Vec<f32> = (0..60).map(|i| 1.0 - i as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(d.join("x.npy"), npy("<f4", &[3, 4, 5], &bytes(&x))).unwrap();
    std::fs::write(d.join("y.npy"), npy("<f4", &[3, 4, 5], &bytes(&y))).unwrap();
    let (m, xi, yi, out) = (model.to_str().unwrap(), format!("x={}", d.join("x.npy").display()), format!("y={}", d.join("y.npy").display()), d.join("out"));
    let (code, stdout, err) = tg(&["run", m, "--input", &xi, "--input", &yi, "--output-dir", out.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(j["outputs"][0]["name"], "sum");
    assert_eq!(j["outputs"][0]["shape"], serde_json::json!([3, 4, 5]));
    let file = std::fs::read(out.join("sum.npy")).unwrap();
    let body = &file[file.len() - 240..];
    let got: Vec<f32> = body.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    assert_eq!(got, want);
    assert!(file.starts_with(b"\x93NUMPY") && String::from_utf8_lossy(&file[10..74]).contains("'shape': (3, 4, 5)"));
    // Bad input: each named, non-zero exit, no panic.
    let fail = |args: &[&str], needle: &str| {
        let (code, _, err) = tg(args);
        assert_ne!(code, 0, "{args:?}");
        assert!(!err.contains("panicked") && err.contains(needle), "{args:?}: {err}");
    };
    fail(&["run", m, "--input", &xi], "'y'");
    std::fs::write(d.join("i.npy"), npy("<i8", &[3, 4, 5], &vec![0u8; 480])).unwrap();
    fail(&["run", m, "--input", &xi, "--input", &format!("y={}", d.join("i.npy").display())], "input 'y'");
    std::fs::write(d.join("small.npy"), npy("<f4", &[2, 2], &bytes(&[1.0; 4]))).unwrap();
    fail(&["run", m, "--input", &xi, "--input", &format!("y={}", d.join("small.npy").display())], "'y'");
    std::fs::write(d.join("junk.onnx"), b"junk").unwrap();
    fail(&["run", d.join("junk.onnx").to_str().unwrap()], "junk.onnx");
    fail(&["run", m, "--input", "x"], "NAME=FILE.npy");
    std::fs::write(d.join("trunc.npy"), &npy("<f4", &[3, 4, 5], &bytes(&x))[..100]).unwrap();
    fail(&["run", m, "--input", &xi, "--input", &format!("y={}", d.join("trunc.npy").display())], "trunc.npy");
}

/// `tg profile --model MODEL.onnx --input NAME=SHAPE`: the kernels planning that model asks
/// about include both convolution algorithms (the direct kernel, and im2col + GEMM), they
/// are measured into the given profile file, and bad `--input`s are named in the error.
#[test]
fn tg_profile_measures_an_onnx_models_kernels() {
    let Some(root) = cases() else { return };
    let model = root.join("test_basic_conv_with_padding/model.onnx");
    let m = model.to_str().unwrap();
    let out = std::env::temp_dir().join(format!("tg-profile-onnx-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let o = out.to_str().unwrap();
    let base = ["profile", "--model", m, "--input", "x=1,1,5,5", "--input", "W=1,1,3,3", "--threads", "1", "--numerics", "exact", "--quick", "--out", o];
    let (code, stdout, err) = tg(&[&base[..], &["--list"]].concat());
    assert_eq!(code, 0, "{err}");
    for kernel in ["conv ", "im2col", "matmul"] {
        assert!(stdout.lines().any(|l| l.contains(kernel)), "no {kernel} key listed:\n{stdout}");
    }
    assert!(!out.exists(), "--list measures nothing and writes nothing");
    let (code, stdout, err) = tg(&base);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("kernels measured now"), "{stdout}");
    let p: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let kernels: Vec<String> = p["entries"].as_array().unwrap().iter().map(|e| e["key"]["kernel"].to_string()).collect();
    assert!(kernels.iter().any(|k| k.contains("Conv")) && kernels.iter().any(|k| k.contains("Im2Col")), "{kernels:?}");
    let _ = std::fs::remove_file(&out);

    for (input, needle) in [("nope=1", "has no input 'nope'"), ("x=1,a", "expected a shape"), ("x=1,1,5,5.npy", ".npy")] {
        let (code, _, err) = tg(&["profile", "--model", m, "--input", input, "--input", "W=1,1,3,3", "--out", o, "--list"]);
        assert_ne!(code, 0, "{input}");
        assert!(err.contains(needle), "{input}: {err}");
    }
    // `W` is declared with a fixed shape: it may be left out.
    let (code, stdout, err) = tg(&["profile", "--model", m, "--input", "x=1,1,5,5", "--threads", "1", "--out", o, "--list"]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.lines().any(|l| l.contains("conv ")), "{stdout}");
}
