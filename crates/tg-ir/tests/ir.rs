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

/// A size overflow is an error naming the op, the shape and (in the builder and `verify`)
/// the node, never a wrapped product: element counts, zero-length shapes whose other
/// dimensions overflow the strides, reshapes to an overflowing shape, concatenated lengths.
#[test]
fn size_overflow_is_an_error_naming_the_node_and_shape() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[2], DType::F32).unwrap();
    // 2^80 elements: the count itself overflows.
    let e = b.input("huge", &[1 << 40, 1 << 40], DType::F32).unwrap_err();
    let t = e.to_string();
    assert!(matches!(&e, IrError::Shape { op, .. } if op == "input:huge"), "{t}");
    assert!(t.contains("[1099511627776, 1099511627776]") && t.contains("overflows usize") && t.contains("(node 1)"), "{t}");
    // A zero dimension makes no elements, but the strides of the others would be 2^80.
    let t = b.input("empty", &[0, 1 << 40, 1 << 40], DType::F32).unwrap_err().to_string();
    assert!(t.contains("too large") && t.contains("[0, 1099511627776, 1099511627776]"), "{t}");
    assert!(b.input("empty_ok", &[0, 1 << 20, 1 << 20], DType::F32).is_ok());
    // [2, 2^63 + 1] has 2^64 + 2 elements: wrapped, that is 2, the count of `x`.
    let wrap = [2, (1usize << 63) + 1];
    let t = b.reshape(x, &wrap).unwrap_err().to_string();
    assert!(t.starts_with("reshape:") && t.contains("overflows usize") && t.contains(&format!("{wrap:?}")), "{t}");
    assert!(b.expand(x, &[1 << 40, 1 << 40, 2]).unwrap_err().to_string().contains("too large"));
    // A quantized weight: 2^30 rows of 2^20 Q8_0 values (2^50 elements, 34·2^45 bytes).
    let q = DType::Quant(tg_quant::GgmlType::Q8_0);
    let t = b.weight("wq", &[1 << 30, 1 << 20], q).unwrap_err().to_string();
    assert!(t.starts_with("weight:wq:") && t.contains("too large") && t.contains("q8_0"), "{t}");

    // `infer` on its own (no node to name) refuses what it would otherwise wrap.
    let f = |s: &'static [usize]| (s, DType::F32);
    let e = tg_ir::infer(&Op::Concat { axis: 0 }, &[f(&[usize::MAX]), f(&[2])], None).unwrap_err().to_string();
    assert!(e.contains("concat") && e.contains("overflow"), "{e}");
    let e = tg_ir::infer(&Op::Reshape, &[f(&[2])], Some((&wrap, DType::F32))).unwrap_err().to_string();
    assert!(e.contains("overflows usize"), "{e}");
    let e = tg_ir::infer(&Op::StoreRows { axis: 0 }, &[f(&[4]), f(&[1]), (&wrap, DType::I32)], None).unwrap_err().to_string();
    assert!(e.contains("offset"), "{e}");
}

/// `verify` refuses a graph built without the builder whose node is too large, naming it.
#[test]
fn verify_refuses_oversized_nodes() {
    let node = |op: Op, inputs: Vec<usize>, shape: Vec<usize>, dtype: DType| tg_ir::Node { op, inputs, shape, dtype };
    let small = node(Op::Input { name: "a".into() }, vec![], vec![4], DType::F32);
    let mut g = tg_ir::Graph { nodes: vec![small.clone(), node(Op::Input { name: "b".into() }, vec![], vec![1 << 40, 1 << 40], DType::F32)], outputs: vec![] };
    let t = verify(&g).unwrap_err().to_string();
    assert!(t.contains("input:b") && t.contains("[1099511627776, 1099511627776]") && t.contains("(node 1)"), "{t}");
    // Just within the limit (2^44 elements, 2^46 bytes of f32) passes; one dimension
    // doubled does not, nor a zero-length shape whose other dimensions are that large.
    g.nodes[1].shape = vec![1 << 22, 1 << 22];
    verify(&g).unwrap();
    for shape in [vec![1 << 23, 1 << 22], vec![1 << 23, 0, 1 << 22]] {
        g.nodes[1].shape = shape.clone();
        let t = verify(&g).unwrap_err().to_string();
        assert!(t.contains("too large") && t.contains(&format!("{shape:?}")) && t.contains("(node 1)"), "{t}");
    }
    // A reshape recorded with a shape whose count wraps to its operand's.
    let wrap = vec![2, (1usize << 63) + 1];
    let g = tg_ir::Graph {
        nodes: vec![node(Op::Input { name: "a".into() }, vec![], vec![2], DType::F32), node(Op::Reshape, vec![0], wrap.clone(), DType::F32)],
        outputs: vec![("y".into(), 1)],
    };
    let t = verify(&g).unwrap_err().to_string();
    assert!(t.starts_with("reshape:") && t.contains(&format!("{wrap:?}")), "{t}");
}

/// Byte sizes: elements × element bytes, or rows × row bytes for quantized storage; `None`
/// on overflow, never a wrapped value.
#[test]
fn byte_sizes_are_checked() {
    let q8 = DType::Quant(tg_quant::GgmlType::Q8_0);
    assert_eq!(DType::F32.tensor_bytes(&[3, 4]), Some(48));
    assert_eq!(DType::Bool.tensor_bytes(&[3, 4]), Some(12));
    assert_eq!(DType::I32.tensor_bytes(&[]), Some(4));
    assert_eq!(q8.tensor_bytes(&[2, 64]), Some(2 * 68));
    assert_eq!(q8.tensor_bytes(&[2, 33]), None, "not whole blocks");
    assert_eq!(q8.tensor_bytes(&[]), None, "no row dimension");
    assert_eq!(DType::F32.bytes_for(1 << 62), None);
    assert_eq!(DType::F32.tensor_bytes(&[1 << 31, 1 << 31]), None);
    assert_eq!(DType::Bool.tensor_bytes(&[1 << 31, 1 << 31]), Some(1 << 62));
    assert_eq!(q8.tensor_bytes(&[1 << 40, 1 << 24]), None);
    // A host tensor's shape must count exactly its elements, without wrapping.
    let t = HostTensor::f32(&[2, (1 << 63) + 1], vec![0.0; 2]).unwrap_err().to_string();
    assert!(t.contains("overflows usize"), "{t}");
}

/// `Op::Alternatives`: ways of one shape and dtype; what a graph computes when nothing
/// chooses is the first way; a state update offered as a way runs only if that way is taken.
#[test]
fn alternatives_resolve_to_their_first_way() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[4], DType::F32).unwrap();
    let pos = b.input("pos", &[1], DType::I32).unwrap();
    let st = b.state("s", &[4], DType::F32).unwrap();
    let row = b.slice(x, 0, 0, 1).unwrap();
    let kept = b.store_rows(st, row, pos, 0).unwrap();
    let recomputed = b.unary(UnaryOp::Neg, x).unwrap();
    let recomputed = b.unary(UnaryOp::Neg, recomputed).unwrap();
    let bad = b.slice(x, 0, 0, 2).unwrap();
    assert!(b.alternatives(&[kept, bad]).unwrap_err().to_string().contains("way 1"));
    let either = b.alternatives(&[recomputed, kept]).unwrap();
    b.output("y", either).unwrap();
    let g = b.finish().unwrap();
    assert!(g.has_alternatives());
    // Every way is live; the state update is no effect of its own.
    assert!(g.live_mask().iter().enumerate().all(|(i, &l)| l == (i != bad)));
    assert!(g.effect_roots().iter().all(|&r| !r));
    let r = g.resolve_alternatives();
    verify(&r).unwrap();
    assert!(!r.has_alternatives());
    assert!(!r.nodes.iter().any(|n| matches!(n.op, Op::State { .. } | Op::StoreRows { .. })), "the second way's state update is dropped");
    let inputs = HashMap::from([("x".to_string(), HostTensor::f32(&[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap()), ("pos".to_string(), HostTensor::i32(&[1], vec![0]).unwrap())]);
    let mut states = HashMap::new();
    let y = tg_ir::interp::eval_with_states(&g, &inputs, &HashMap::<String, Vec<u8>>::new(), &mut states).unwrap().remove("y").unwrap();
    assert_eq!(y.data, vec![1.0, 2.0, 3.0, 4.0]);
    assert!(states.is_empty(), "the interpreter takes the first way: nothing stored");
}

/// Group normalisation takes γ and β one per channel (`[C, 1, ..]`) or one per image and
/// channel (`[N, C, 1, ..]`), both the same; anything else is an error naming the operand.
#[test]
fn group_norm_scale_and_shift_shapes() {
    let op = Op::GroupNorm { groups: 2, eps_bits: 1e-5f64.to_bits(), act: tg_ir::Act::None };
    let f = |s: &'static [usize]| (s, DType::F32);
    let x: &[usize] = &[3, 4, 5, 5];
    for ok in [&[4usize, 1, 1][..], &[3, 4, 1, 1]] {
        let (s, _) = tg_ir::infer(&op, &[f(x), (ok, DType::F32), (ok, DType::F32)], None).expect("accepted");
        assert_eq!(s, x);
    }
    for (g, b, why) in [
        (&[3usize, 4, 1, 1][..], &[4usize, 1, 1][..], "one shape"),
        (&[2, 4, 1, 1], &[2, 4, 1, 1], "per image and channel"),
        (&[4, 1], &[4, 1], "per image and channel"),
        (&[3, 4, 5, 1], &[3, 4, 5, 1], "per image and channel"),
    ] {
        let e = tg_ir::infer(&op, &[f(x), (g, DType::F32), (b, DType::F32)], None).unwrap_err().to_string();
        assert!(e.contains(why), "{g:?} {b:?}: {e}");
    }
}
