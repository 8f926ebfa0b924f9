//! `If` through the importer, the compiler and the CPU runtime: a condition computed at run
//! time (both branches are computed and the condition selects) must give the taken branch's
//! value for either outcome, with branches that read enclosing values and hold their own
//! initializers; a condition known at import imports only its branch.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;
use tg_onnx::proto::{attribute_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto};

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    common::float_value(name, &dims.iter().map(|&d| Some(d)).collect::<Vec<_>>())
}

fn node(op: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{}", outs[0])),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(attribute_proto::AttributeType::Graph as i32), g: Some(g), ..Default::default() }
}

/// y = if max(x) > t { x·x + c } else { −x }, `c` an initializer of the then branch. With
/// `known`, the condition is a constant instead (true).
fn model(known: bool) -> Vec<u8> {
    let c = TensorProto { name: Some("c".into()), dims: vec![3], data_type: Some(1), float_data: vec![0.5, 1.0, 2.0], ..Default::default() };
    let then_g = GraphProto {
        node: vec![node("Mul", &["x", "x"], &["sq"]), node("Add", &["sq", "c"], &["y_then"])],
        initializer: vec![c],
        output: vec![value("y_then", &[3])],
        name: Some("then".into()),
        ..Default::default()
    };
    let else_g = GraphProto { node: vec![node("Neg", &["x"], &["y_else"])], output: vec![value("y_else", &[3])], name: Some("else".into()), ..Default::default() };
    let mut nodes = Vec::new();
    let mut inputs = vec![value("x", &[3])];
    if known {
        let one = TensorProto { name: Some("cond".into()), dims: vec![], data_type: Some(9), int32_data: vec![1], ..Default::default() };
        nodes.push(NodeProto {
            op_type: Some("Constant".into()),
            name: Some("k".into()),
            output: vec!["cond".into()],
            attribute: vec![AttributeProto { name: Some("value".into()), r#type: Some(attribute_proto::AttributeType::Tensor as i32), t: Some(one), ..Default::default() }],
            ..Default::default()
        });
    } else {
        inputs.push(value("t", &[]));
        nodes.push(NodeProto {
            attribute: vec![AttributeProto { name: Some("keepdims".into()), r#type: Some(attribute_proto::AttributeType::Int as i32), i: Some(0), ..Default::default() }],
            ..node("ReduceMax", &["x"], &["m"])
        });
        nodes.push(node("Greater", &["m", "t"], &["cond"]));
    }
    nodes.push(NodeProto { attribute: vec![graph_attr("then_branch", then_g), graph_attr("else_branch", else_g)], ..node("If", &["cond"], &["y"]) });
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(13) }],
        graph: Some(GraphProto { node: nodes, input: inputs, output: vec![value("y", &[3])], name: Some("g".into()), ..Default::default() }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn run(bytes: Vec<u8>, feeds: &[(&str, Vec<usize>, Vec<f32>)]) -> (Vec<f32>, usize) {
    let m = tg_onnx::OnnxModel::from_bytes("if.onnx".into(), bytes.into()).unwrap();
    let imp = tg_onnx::import(&m, &HashMap::new()).unwrap();
    let nodes = imp.graph.nodes.len();
    let cpu = tg_devices::open("cpu", 1).unwrap();
    let c = tg_compiler::compile(&imp.graph, std::slice::from_ref(&cpu), &tg_compiler::CompileOptions::default()).unwrap();
    let mut exe = tg_runtime::Executable::new(c.plan, vec![cpu], Arc::new(imp.weights)).unwrap();
    let feeds: HashMap<String, tg_ir::HostTensor> = feeds.iter().map(|(n, s, v)| (n.to_string(), tg_ir::HostTensor::f32(s, v.clone()).unwrap())).collect();
    (exe.run(&feeds).unwrap().remove("y").unwrap().as_f32().unwrap().to_vec(), nodes)
}

#[test]
fn a_run_time_condition_gives_the_taken_branch() {
    let x = vec![1.0f32, -2.0, 3.0];
    let (y, _) = run(model(false), &[("x", vec![3], x.clone()), ("t", vec![], vec![2.5])]);
    assert_eq!(y, vec![1.5, 5.0, 11.0], "max(x) = 3 > 2.5: x·x + c");
    let (y, _) = run(model(false), &[("x", vec![3], x.clone()), ("t", vec![], vec![3.5])]);
    assert_eq!(y, vec![-1.0, 2.0, -3.0], "max(x) = 3 <= 3.5: −x");
}

#[test]
fn a_known_condition_imports_only_its_branch() {
    let (y, nodes) = run(model(true), &[("x", vec![3], vec![1.0, -2.0, 3.0])]);
    assert_eq!(y, vec![1.5, 5.0, 11.0]);
    let (_, both) = run(model(false), &[("x", vec![3], vec![1.0, -2.0, 3.0]), ("t", vec![], vec![0.0])]);
    assert!(nodes < both, "{nodes} nodes with the branch known, {both} with both branches");
}
