//! Builder and verifier: shape/dtype errors name the op and the mismatch; the reference
//! interpreter computes known results.

use std::collections::HashMap;
use tg_ir::interp::eval;
use tg_ir::{verify, DType, GraphBuilder, HostTensor, IrError, Op, ReduceOp, UnaryOp};

#[test]
fn shape_errors_name_the_op() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[2, 3], DType::F32).unwrap();
    let y = b.input("y", &[4, 3], DType::F32).unwrap();
    let e = b.add(x, y).unwrap_err();
    assert!(matches!(&e, IrError::Shape { op, .. } if op == "add"), "{e}");
    assert!(e.to_string().contains("[2, 3]") && e.to_string().contains("[4, 3]"), "{e}");
    let e = b.matmul(x, y, false).unwrap_err();
    assert!(e.to_string().contains("matmul"), "{e}");
    assert!(b.matmul(x, y, true).is_ok());
    assert!(b.reshape(x, &[5]).is_err());
    assert!(b.permute(x, &[0, 0]).is_err());
    assert!(b.slice(x, 1, 2, 4).is_err());
    assert!(b.reduce(ReduceOp::Sum, x, 2).is_err());
}

#[test]
fn dtype_errors() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[2], DType::F32).unwrap();
    let i = b.input("i", &[2], DType::I32).unwrap();
    assert!(matches!(b.add(x, i), Err(IrError::DType { .. })));
    assert!(matches!(b.unary(UnaryOp::Exp, i), Err(IrError::DType { .. })));
    assert!(b.gather(x, x).is_err());
    assert!(b.input("x", &[3], DType::F32).is_err(), "duplicate input names are rejected");
    assert!(b.input("q", &[2, 32], DType::Quant(tg_quant::GgmlType::Q8_0)).is_err(), "only weights may be quantized");
    assert!(b.weight("w", &[2, 33], DType::Quant(tg_quant::GgmlType::Q8_0)).is_err(), "row length must be whole blocks");
}

#[test]
fn verifier_catches_tampering() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[2, 3], DType::F32).unwrap();
    let y = b.unary(UnaryOp::Neg, x).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    let mut bad = g.clone();
    bad.nodes[1].shape = vec![3, 2];
    assert!(matches!(verify(&bad), Err(IrError::Inconsistent { .. })));
    let mut bad = g.clone();
    bad.nodes[1].inputs = vec![1];
    assert!(matches!(verify(&bad), Err(IrError::BadReference { .. })));
    let mut bad = g.clone();
    bad.nodes[1].op = Op::Reduce { op: ReduceOp::Sum, axis: 0 };
    assert!(verify(&bad).is_err());
    let mut bad = g;
    bad.outputs.push(("z".into(), 7));
    assert!(verify(&bad).is_err());
}

#[test]
fn interpreter_known_values() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[2, 3], DType::F32).unwrap();
    let w = b.input("w", &[3, 2], DType::F32).unwrap();
    let m = b.matmul(x, w, false).unwrap();
    let s = b.reduce(ReduceOp::Sum, m, 1).unwrap();
    let t = b.permute(x, &[1, 0]).unwrap();
    let sl = b.slice(t, 0, 1, 3).unwrap();
    let c = b.concat(&[sl, sl], 1).unwrap();
    let io = b.iota(&[2, 2], 1, DType::I32).unwrap();
    b.output("m", m).unwrap();
    b.output("s", s).unwrap();
    b.output("c", c).unwrap();
    b.output("io", io).unwrap();
    let g = b.finish().unwrap();
    let mut inputs = HashMap::new();
    inputs.insert("x".into(), HostTensor::f32(&[2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap());
    inputs.insert("w".into(), HostTensor::f32(&[3, 2], vec![1., 0., 0., 1., 1., 1.]).unwrap());
    let out = eval(&g, &inputs, &HashMap::new()).unwrap();
    assert_eq!(out["m"].data, vec![4., 5., 10., 11.]);
    assert_eq!(out["s"].data, vec![9., 21.]);
    assert_eq!(out["c"].shape, vec![2, 4]);
    assert_eq!(out["c"].data, vec![2., 5., 2., 5., 3., 6., 3., 6.]);
    assert_eq!(out["io"].data, vec![0., 1., 0., 1.]);
}

#[test]
fn interpreter_reports_missing_inputs_and_bad_indices() {
    let mut b = GraphBuilder::new();
    let t = b.input("table", &[4, 2], DType::F32).unwrap();
    let ids = b.input("ids", &[2], DType::I32).unwrap();
    let g = b.gather(t, ids).unwrap();
    b.output("g", g).unwrap();
    let g = b.finish().unwrap();
    let mut inputs = HashMap::new();
    inputs.insert("table".into(), HostTensor::f32(&[4, 2], vec![0.; 8]).unwrap());
    let e = eval(&g, &inputs, &HashMap::new()).unwrap_err();
    assert!(e.to_string().contains("missing input 'ids'"), "{e}");
    inputs.insert("ids".into(), HostTensor::i32(&[2], vec![1, 4]).unwrap());
    let e = eval(&g, &inputs, &HashMap::new()).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

/// Shapes whose byte size would overflow later buffer arithmetic are refused when built.
#[test]
fn oversized_shapes_are_refused() {
    let mut b = tg_ir::GraphBuilder::new();
    let e = b.input("x", &[1 << 40, 1 << 40], tg_ir::DType::F32).unwrap_err().to_string();
    assert!(e.contains("too large"), "{e}");
    // The limit is 2^47 bytes at 8 bytes per element: 2^44 elements pass, 2^45 do not, and
    // an op whose output would exceed it is refused too.
    let big = b.input("z", &[1 << 22, 1 << 22], tg_ir::DType::F32).unwrap();
    assert!(b.matmul(big, big, false).is_ok(), "2^44 elements is the limit");
    let e = b.input("w", &[1 << 22, 1 << 23], tg_ir::DType::F32).unwrap_err().to_string();
    assert!(e.contains("too large"), "{e}");
    let col = b.input("c", &[1 << 23, 1], tg_ir::DType::F32).unwrap();
    let row = b.input("r", &[1, 1 << 23], tg_ir::DType::F32).unwrap();
    let e = b.mul(col, row).unwrap_err().to_string();
    assert!(e.contains("mul") && e.contains("too large"), "{e}");
}

/// Integer division truncates toward zero and gives 0 for a zero divisor, in the reference
/// interpreter as in the CPU kernel.
#[test]
fn integer_division_semantics() {
    let mut b = tg_ir::GraphBuilder::new();
    let a = b.input("a", &[4], tg_ir::DType::I32).unwrap();
    let c = b.input("c", &[4], tg_ir::DType::I32).unwrap();
    let q = b.div(a, c).unwrap();
    b.output("q", q).unwrap();
    let g = b.finish().unwrap();
    let mut inputs = std::collections::HashMap::new();
    inputs.insert("a".to_string(), tg_ir::HostTensor::i32(&[4], vec![7, -7, 5, i32::MIN]).unwrap());
    inputs.insert("c".to_string(), tg_ir::HostTensor::i32(&[4], vec![2, 2, 0, -1]).unwrap());
    let w: std::collections::HashMap<String, Vec<u8>> = Default::default();
    let out = tg_ir::interp::eval(&g, &inputs, &w).unwrap();
    assert_eq!(out["q"].data, vec![3.0, -3.0, 0.0, i32::MIN as f64]);
}
