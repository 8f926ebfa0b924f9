//! The reader and importer on models built here (prost types, encoded to files): external
//! data read in place, and every kind of bad input a clear error naming the file, node or
//! tensor — never a panic.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use prost::Message;
use tg_onnx::proto::{tensor_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto};
use tg_onnx::{import, OnnxModel};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tg-onnx-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

use common::float_value as value;

fn node(op: &str, name: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn weight(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        raw_data: Some(data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into()),
        ..Default::default()
    }
}

/// y = matmul(x, w) + b, relu'd: x [2, 3] (or a named batch), w [3, 4], b [4].
fn model(nodes: Vec<NodeProto>, init: Vec<TensorProto>, x: &[Option<i64>]) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: init,
            input: vec![value("x", x)],
            output: vec![value("y", &[Some(2), Some(4)])],
            name: Some("g".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn mlp(init: Vec<TensorProto>) -> ModelProto {
    model(vec![node("MatMul", "mm", &["x", "w"], &["h"]), node("Add", "add", &["h", "b"], &["z"]), node("Relu", "relu", &["z"], &["y"])], init, &[Some(2), Some(3)])
}

const W: [f32; 12] = [0.5, -1.0, 2.0, 0.0, 1.0, 0.25, -0.5, 1.5, -2.0, 0.75, 1.0, -1.0];
const B: [f32; 4] = [0.1, -0.2, 0.3, -0.4];

fn write(dir: &std::path::Path, m: &ModelProto) -> PathBuf {
    let p = dir.join("model.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

fn run(path: &std::path::Path) -> Vec<f32> {
    let m = OnnxModel::open(path).unwrap();
    let imp = import(&m, &HashMap::new()).unwrap();
    let cpu = tg_devices::open("cpu", 1).unwrap();
    let c = tg_compiler::compile(&imp.graph, std::slice::from_ref(&cpu), &tg_compiler::CompileOptions::default()).unwrap();
    let mut exe = tg_runtime::Executable::new(c.plan, vec![cpu], Arc::new(imp.weights)).unwrap();
    let x = tg_ir::HostTensor::f32(&[2, 3], vec![1.0, 2.0, 3.0, -1.0, 0.5, 2.0]).unwrap();
    exe.run(&HashMap::from([("x".to_string(), x)])).unwrap().remove("y").unwrap().as_f32().unwrap().to_vec()
}

fn want() -> Vec<f32> {
    let x = [1.0f32, 2.0, 3.0, -1.0, 0.5, 2.0];
    let mut y = vec![0f32; 8];
    for i in 0..2 {
        for j in 0..4 {
            let s: f32 = (0..3).map(|k| x[i * 3 + k] * W[k * 4 + j]).sum::<f32>() + B[j];
            y[i * 4 + j] = s.max(0.0);
        }
    }
    y
}

#[test]
fn initializers_inline_and_external_give_the_same_result() {
    let d = tmpdir("inline");
    let got = run(&write(&d, &mlp(vec![weight("w", &[3, 4], &W), weight("b", &[4], &B)])));
    assert_eq!(got, want());
    // The same weights in a side file, 16 bytes into it.
    let d = tmpdir("external");
    let mut blob = vec![7u8; 16];
    blob.extend(W.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(d.join("weights.bin"), &blob).unwrap();
    let ext = TensorProto {
        name: Some("w".into()),
        dims: vec![3, 4],
        data_type: Some(1),
        data_location: Some(tensor_proto::DataLocation::External as i32),
        external_data: vec![
            StringStringEntryProto { key: Some("location".into()), value: Some("weights.bin".into()) },
            StringStringEntryProto { key: Some("offset".into()), value: Some("16".into()) },
            StringStringEntryProto { key: Some("length".into()), value: Some("48".into()) },
        ],
        ..Default::default()
    };
    assert_eq!(run(&write(&d, &mlp(vec![ext.clone(), weight("b", &[4], &B)]))), want());
    // A location outside the model's folder is refused, naming it.
    let mut escape = ext;
    escape.external_data[0].value = Some("../inline/model.onnx".into());
    let p = write(&d, &mlp(vec![escape, weight("b", &[4], &B)]));
    let e = import(&OnnxModel::open(&p).unwrap(), &HashMap::new()).err().unwrap().to_string();
    assert!(e.contains("outside the model's folder") && e.contains("../inline/model.onnx"), "{e}");
}

#[test]
fn bad_input_is_an_error_naming_what_is_wrong() {
    let d = tmpdir("bad");
    let good = mlp(vec![weight("w", &[3, 4], &W), weight("b", &[4], &B)]).encode_to_vec();
    // Garbage and truncated files: a decode error naming the file.
    for (what, bytes) in [("garbage", b"not a model at all \xff\xfe".to_vec()), ("truncated", good[..good.len() / 2].to_vec()), ("empty", Vec::new())] {
        let p = d.join(format!("{what}.onnx"));
        std::fs::write(&p, &bytes).unwrap();
        let e = OnnxModel::open(&p).err().map(|e| e.to_string()).unwrap_or_else(|| "opened".into());
        assert!(e.contains(&format!("{what}.onnx")), "{what}: {e}");
    }
    let missing = OnnxModel::open(d.join("nope.onnx")).err().unwrap().to_string();
    assert!(missing.contains("nope.onnx"), "{missing}");
    let check = |m: ModelProto, shapes: HashMap<String, Vec<usize>>, needle: &[&str]| {
        let p = write(&d, &m);
        let e = match OnnxModel::open(&p) {
            Ok(model) => import(&model, &shapes).err().map(|e| e.to_string()).unwrap_or_else(|| "imported".into()),
            Err(e) => e.to_string(),
        };
        for n in needle {
            assert!(e.contains(n), "expected {n:?} in: {e}");
        }
    };
    // An initializer shorter than its shape.
    check(mlp(vec![weight("w", &[3, 4], &W[..10]), weight("b", &[4], &B)]), HashMap::new(), &["'w'", "40 bytes", "48"]);
    // A dangling input.
    check(mlp(vec![weight("w", &[3, 4], &W)]), HashMap::new(), &["node 'add'", "'b'"]);
    // An op with no mapping: its type, node and opset.
    let mut m = mlp(vec![weight("w", &[3, 4], &W), weight("b", &[4], &B)]);
    m.graph.as_mut().unwrap().node[2] = node("Frobnicate", "act", &["z"], &["y"]);
    check(m, HashMap::new(), &["Frobnicate", "'act'", "opset 17"]);
    // An unknown element type.
    let mut w = weight("w", &[3, 4], &W);
    w.data_type = Some(11);
    check(mlp(vec![w, weight("b", &[4], &B)]), HashMap::new(), &["'w'", "double"]);
    // A dynamic dimension nobody binds, and a binding of the wrong rank.
    let dynamic = model(vec![node("Relu", "r", &["x"], &["y"])], vec![], &[None, Some(4)]);
    check(dynamic.clone(), HashMap::new(), &["'x'", "dynamic"]);
    check(dynamic.clone(), HashMap::from([("x".into(), vec![2, 4, 1])]), &["'x'", "[2, 4, 1]"]);
    check(dynamic, HashMap::from([("z".into(), vec![2, 4])]), &["no input 'z'"]);
}
