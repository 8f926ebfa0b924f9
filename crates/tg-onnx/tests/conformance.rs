//! The ONNX backend node tests of `onnx==1.16.2` (1,282 cases, fetched from its wheel by
//! `scripts/fetch_onnx_tests.py`; `TG_ONNX_TESTS` names the folder) through the importer,
//! the compiler and the CPU runtime.
//!
//! Each case is imported with its inputs' shapes (and, where the graph needs them known,
//! the values of its small integer inputs and short float vectors: Reshape targets, Slice
//! bounds, axes, Resize scales given as graph inputs), compiled, run on its `input_N.pb` and
//! compared with its `output_N.pb`: floats within `|got − want| ≤ 1e-5 + 1e-3·|want|` (the
//! backend tests' own rtol of 1e-3; NaN matches NaN), integers and booleans exactly. A case
//! the importer refuses (an op it does not map, a variant or element type it does not
//! support) is *unsupported*; a case it imports must pass: any that fails (a wrong value, or
//! an error after import) fails this test. The per-op table is written to
//! `target/onnx-conformance.md` (the table in `docs/onnx.md` is a copy). Without the cases
//! the test prints `SKIPPED`, except under CI, where it fails.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost::Message;
use tg_ir::{HostData, HostTensor};
use tg_onnx::{decode_tensor, OnnxError, OnnxModel, ValueData};
use tg_runtime::Device;

mod common;
use common::cases_dir;

enum Outcome {
    Passed,
    Failed(String),
    Unsupported(String),
}

fn read_pb(path: &Path) -> Result<tg_onnx::Value, String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = tg_onnx::proto::TensorProto::decode(&b[..]).map_err(|e| format!("{}: {e}", path.display()))?;
    decode_tensor(None, &t).map_err(|e| e.to_string())
}

fn host(v: &tg_onnx::Value) -> Result<HostTensor, String> {
    let data = match &v.data {
        ValueData::F32(x) => HostData::F32(x.clone()),
        ValueData::I64(x) => HostData::I32(x.iter().map(|&i| i32::try_from(i).map_err(|_| format!("input value {i} does not fit i32"))).collect::<Result<_, _>>()?),
        ValueData::Bool(x) => HostData::Bool(x.iter().map(|&b| b as u8).collect()),
    };
    HostTensor::new(&v.shape, data).map_err(|e| e.to_string())
}

fn close(got: &HostTensor, want: &tg_onnx::Value) -> Result<(), String> {
    if got.shape != want.shape {
        return Err(format!("shape {:?}, expected {:?}", got.shape, want.shape));
    }
    match (&got.data, &want.data) {
        (HostData::F32(g), ValueData::F32(w)) => {
            for (i, (&a, &b)) in g.iter().zip(w).enumerate() {
                let ok = (a.is_nan() && b.is_nan()) || a == b || ((a - b).abs() as f64) <= 1e-5 + 1e-3 * (b.abs() as f64);
                if !ok {
                    return Err(format!("element {i}: {a}, expected {b}"));
                }
            }
            Ok(())
        }
        (HostData::I32(g), ValueData::I64(w)) => match g.iter().zip(w).position(|(&a, &b)| a as i64 != b) {
            Some(i) => Err(format!("element {i}: {}, expected {}", g[i], w[i])),
            None => Ok(()),
        },
        (HostData::Bool(g), ValueData::Bool(w)) => match g.iter().zip(w).position(|(&a, &b)| (a != 0) != b) {
            Some(i) => Err(format!("element {i}: {}, expected {}", g[i] != 0, w[i])),
            None => Ok(()),
        },
        (g, _) => Err(format!("dtype {:?}, expected ONNX type {}", got.dtype(), want.onnx_type).replace(&format!("{g:?}"), "")),
    }
}

fn run_case(dir: &Path, cpu: &Arc<dyn Device>) -> (BTreeSet<String>, Outcome) {
    let model = match OnnxModel::open(dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) => return (BTreeSet::new(), Outcome::Failed(format!("open: {e}"))),
    };
    let ops: BTreeSet<String> = model.graph().node.iter().map(|n| n.op_type.clone().unwrap_or_default()).collect();
    // Sequence, map and optional values (their .pb files are not TensorProtos).
    if let Some(v) = model.graph().input.iter().chain(&model.graph().output).find(|v| tg_onnx::tensor_type(v).is_none()) {
        return (ops, Outcome::Unsupported(format!("'{}' is not a tensor (sequences, maps and optionals are not supported)", v.name.as_deref().unwrap_or(""))));
    }
    let data = dir.join("test_data_set_0");
    let names: Vec<String> = model.inputs().iter().filter_map(|i| i.name.clone()).collect();
    let mut inputs = HashMap::new();
    let mut shapes = HashMap::new();
    let mut ints = HashMap::new();
    for (k, name) in names.iter().enumerate() {
        let v = match read_pb(&data.join(format!("input_{k}.pb"))) {
            Ok(v) => v,
            Err(e) if e.contains("is not supported") => return (ops, Outcome::Unsupported(e)),
            Err(e) => return (ops, Outcome::Failed(e)),
        };
        shapes.insert(name.clone(), v.shape.clone());
        match host(&v) {
            Ok(h) => inputs.insert(name.clone(), h),
            Err(e) => return (ops, Outcome::Unsupported(e)),
        };
        let small_floats = matches!(v.data, ValueData::F32(_)) && v.shape.len() == 1 && v.data.len() <= 8;
        if (matches!(v.data, ValueData::I64(_)) && v.data.len() <= 64) || v.shape.is_empty() || small_floats {
            ints.insert(name.clone(), v);
        }
    }
    // Small integer inputs, scalars and short float vectors that decide shapes (Reshape
    // targets, Slice bounds, axes, Range bounds, Resize scales given as graph inputs) are bound at import when the graph needs
    // them known; the plan is for them.
    let mut result = tg_onnx::import(&model, &shapes);
    if matches!(&result, Err(OnnxError::Unsupported { detail, .. }) if detail.contains("run time")) && !ints.is_empty() {
        for k in ints.keys() {
            shapes.remove(k);
            inputs.remove(k);
        }
        result = tg_onnx::import_with(&model, &shapes, &ints);
    }
    let imported = match result {
        Ok(i) => i,
        Err(e @ (OnnxError::Unsupported { .. } | OnnxError::UnsupportedType(_))) => return (ops, Outcome::Unsupported(e.to_string())),
        Err(e) => return (ops, Outcome::Failed(format!("import: {e}"))),
    };
    let compiled = match tg_compiler::compile(&imported.graph, std::slice::from_ref(cpu), &tg_compiler::CompileOptions::default()) {
        Ok(c) => c,
        // The IR has no kernel for this op on these operands (an integer matmul, say).
        Err(e @ tg_compiler::CompileError::Unsupported { .. }) => return (ops, Outcome::Unsupported(format!("compile: {e}"))),
        Err(e) => return (ops, Outcome::Failed(format!("compile: {e}"))),
    };
    let mut exe = match tg_runtime::Executable::new(compiled.plan, vec![cpu.clone()], Arc::new(imported.weights)) {
        Ok(e) => e,
        Err(e) => return (ops, Outcome::Failed(format!("load: {e}"))),
    };
    let out = match exe.run(&inputs) {
        Ok(o) => o,
        Err(e) => return (ops, Outcome::Failed(format!("run: {e}"))),
    };
    for (k, (name, _)) in imported.outputs.iter().enumerate() {
        let want = match read_pb(&data.join(format!("output_{k}.pb"))) {
            Ok(v) => v,
            Err(e) => return (ops, Outcome::Unsupported(e)),
        };
        let Some(got) = out.get(name) else { return (ops, Outcome::Failed(format!("no output '{name}'"))) };
        if let Err(e) = close(got, &want) {
            return (ops, Outcome::Failed(format!("output '{name}': {e}")));
        }
    }
    (ops, Outcome::Passed)
}

#[test]
fn onnx_backend_node_tests() {
    let Some(root) = cases_dir() else { return };
    let cpu = tg_devices::open("cpu", 1).unwrap();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root).unwrap().filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.join("model.onnx").is_file()).collect();
    dirs.sort();
    assert_eq!(dirs.len(), 1282, "cases in {}", root.display());
    let t = std::time::Instant::now();
    // Per op: passed, failed, unsupported cases containing it.
    let mut table: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    let mut failures = Vec::new();
    let (mut passed, mut unsupported) = (0, 0);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for d in &dirs {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        let (ops, outcome) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_case(d, &cpu))).unwrap_or_else(|p| {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            (BTreeSet::new(), Outcome::Failed(format!("panicked: {msg}")))
        });
        let col = match &outcome {
            Outcome::Passed => {
                passed += 1;
                0
            }
            Outcome::Failed(e) => {
                failures.push(format!("{name}: {e}"));
                1
            }
            Outcome::Unsupported(e) => {
                if std::env::var("TG_ONNX_SHOW").is_ok_and(|v| name.contains(&v)) {
                    eprintln!("{name}: {e}");
                }
                unsupported += 1;
                let key = e.split(" (node").next().unwrap_or(e).chars().take(80).collect::<String>();
                *reasons.entry(key).or_default() += 1;
                2
            }
        };
        for op in ops {
            table.entry(op).or_default()[col] += 1;
        }
    }
    let mut md = String::from("| op | passed | failed | unsupported |\n|---|---:|---:|---:|\n");
    for (op, [p, f, u]) in &table {
        md.push_str(&format!("| {op} | {p} | {f} | {u} |\n"));
    }
    md.push_str(&format!("| **all cases** | **{passed}** | **{}** | **{unsupported}** |\n", failures.len()));
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-conformance.md");
    std::fs::write(&out, &md).unwrap();
    eprintln!("{md}");
    let mut top: Vec<(&String, &usize)> = reasons.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1));
    eprintln!("most common reasons a case is unsupported:");
    for (r, k) in top.iter().take(25) {
        eprintln!("  {k:4}  {r}");
    }
    eprintln!("{} cases in {:.1} s: {passed} passed, {} failed, {unsupported} unsupported; table in {}", dirs.len(), t.elapsed().as_secs_f64(), failures.len(), out.display());
    assert!(failures.is_empty(), "{} cases the importer accepted failed:\n{}", failures.len(), failures.join("\n"));
    // The ops the importer lists as mapped each pass node tests.
    // Ops whose node tests all use element types the importer does not take, tested elsewhere.
    const ELSEWHERE: [(&str, &str); 1] = [("Einsum", "tests/einsum.rs (its node tests are all double)")];
    let unexercised: Vec<&str> =
        tg_onnx::supported_ops().into_iter().filter(|op| table.get(*op).is_none_or(|r| r[0] == 0) && !ELSEWHERE.iter().any(|(o, _)| o == op)).collect();
    assert!(unexercised.is_empty(), "listed as supported but passing no node test: {unexercised:?}");
}
