//! `Einsum` through the importer, the compiler and the CPU runtime against a naive f64
//! reference (every assignment of the labels, summed). The ONNX node tests of `Einsum` are
//! all `double`, which the importer does not take, so this is where the op is exercised:
//! explicit and implicit outputs, batch and contracted labels, a label summed on one operand
//! only, `...` broadcast dimensions, three operands, and the equations of the terrain UNet's
//! attention. Tolerance: f32 accumulation over at most 64 terms, `|got − want| ≤ 1e-5·(1 + Σ|terms|)`.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;
use rand::{Rng, SeedableRng};
use tg_onnx::proto::{attribute_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, ValueInfoProto};

fn value(name: &str, dims: &[usize]) -> ValueInfoProto {
    common::float_value(name, &dims.iter().map(|&d| Some(d as i64)).collect::<Vec<_>>())
}

fn model(eq: &str, shapes: &[Vec<usize>]) -> Vec<u8> {
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    let node = NodeProto {
        op_type: Some("Einsum".into()),
        name: Some("einsum".into()),
        input: names.clone(),
        output: vec!["y".into()],
        attribute: vec![AttributeProto {
            name: Some("equation".into()),
            r#type: Some(attribute_proto::AttributeType::String as i32),
            s: Some(eq.as_bytes().to_vec().into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let output = ValueInfoProto { name: Some("y".into()), ..Default::default() };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(12) }],
        graph: Some(GraphProto {
            node: vec![node],
            input: names.iter().zip(shapes).map(|(n, s)| value(n, s)).collect(),
            output: vec![output],
            name: Some("g".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// The naive einsum of `xs` for an equation with explicit labels only (`...` written out as
/// letters): a dimension of size 1 broadcasts. Returns the output and, per output element,
/// the sum of the absolute terms.
fn reference(eq: &str, xs: &[(Vec<usize>, Vec<f32>)]) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let (lhs, out) = eq.split_once("->").unwrap();
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut size: HashMap<char, usize> = HashMap::new();
    for (t, (s, _)) in terms.iter().zip(xs) {
        for (c, &d) in t.iter().zip(s) {
            let e = size.entry(*c).or_insert(d);
            *e = (*e).max(d);
        }
    }
    let mut labels: Vec<char> = size.keys().copied().collect();
    labels.sort();
    let oshape: Vec<usize> = out.iter().map(|c| size[c]).collect();
    let on: usize = oshape.iter().product();
    let (mut y, mut mag) = (vec![0f64; on], vec![0f64; on]);
    let total: usize = labels.iter().map(|c| size[c]).product();
    for flat in 0..total {
        let mut at = HashMap::new();
        let mut rest = flat;
        for c in labels.iter().rev() {
            at.insert(*c, rest % size[c]);
            rest /= size[c];
        }
        let mut p = 1f64;
        for (t, (s, v)) in terms.iter().zip(xs) {
            let mut off = 0;
            for (c, &d) in t.iter().zip(s) {
                off = off * d + if d == 1 { 0 } else { at[c] };
            }
            p *= v[off] as f64;
        }
        let mut o = 0;
        for (c, &d) in out.iter().zip(&oshape) {
            o = o * d + at[c];
        }
        y[o] += p;
        mag[o] += p.abs();
    }
    (oshape, y, mag)
}

fn run(eq: &str, reference_eq: &str, shapes: &[Vec<usize>], seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let xs: Vec<(Vec<usize>, Vec<f32>)> = shapes.iter().map(|s| (s.clone(), (0..s.iter().product::<usize>()).map(|_| rng.gen_range(-1.0f32..1.0)).collect())).collect();
    let m = tg_onnx::OnnxModel::from_bytes("einsum.onnx".into(), model(eq, shapes).into()).unwrap();
    let imp = tg_onnx::import(&m, &HashMap::new()).unwrap_or_else(|e| panic!("{eq}: {e}"));
    let cpu = tg_devices::open("cpu", 1).unwrap();
    let c = tg_compiler::compile(&imp.graph, std::slice::from_ref(&cpu), &tg_compiler::CompileOptions::default()).unwrap();
    let mut exe = tg_runtime::Executable::new(c.plan, vec![cpu], Arc::new(imp.weights)).unwrap();
    let feeds: HashMap<String, tg_ir::HostTensor> = xs.iter().enumerate().map(|(i, (s, v))| (format!("x{i}"), tg_ir::HostTensor::f32(s, v.clone()).unwrap())).collect();
    let got = exe.run(&feeds).unwrap().remove("y").unwrap();
    let (shape, want, mag) = reference(reference_eq, &xs);
    assert_eq!(got.shape, shape, "{eq}: shape");
    for (i, (g, (w, m))) in got.as_f32().unwrap().iter().zip(want.iter().zip(&mag)).enumerate() {
        assert!((*g as f64 - w).abs() <= 1e-5 * (1.0 + m), "{eq}: element {i}: got {g}, want {w}");
    }
}

#[test]
fn einsum_matches_the_naive_sum() {
    // The terrain UNet's attention: scores and the weighted values.
    run("bct,bcs->bts", "bct,bcs->bts", &[vec![2, 8, 5], vec![2, 8, 6]], 1);
    run("bts,bcs->bct", "bts,bcs->bct", &[vec![2, 5, 6], vec![2, 8, 6]], 2);
    run("ij,jk->ik", "ij,jk->ik", &[vec![3, 4], vec![4, 5]], 3);
    // Implicit output: the labels seen once, sorted.
    run("ij,jk", "ij,jk->ik", &[vec![3, 4], vec![4, 5]], 4);
    run("i,i", "i,i->", &[vec![7], vec![7]], 5);
    run("ij->ji", "ij->ji", &[vec![3, 4]], 6);
    run("ij->", "ij->", &[vec![3, 4]], 7);
    run("ij->i", "ij->i", &[vec![3, 4]], 8);
    // A label summed on one operand before the product, an outer product.
    run("ijk,jl->il", "ijk,jl->il", &[vec![2, 3, 4], vec![3, 5]], 9);
    run("i,j->ij", "i,j->ij", &[vec![3], vec![4]], 10);
    // Broadcast dimensions (`...`, with a size-1 batch dimension) and three operands.
    run("...ij,...jk->...ik", "abij,bjk->abik", &[vec![2, 1, 3, 4], vec![5, 4, 2]], 11);
    run("bij,bjk,bkl->bil", "bij,bjk,bkl->bil", &[vec![2, 3, 4], vec![2, 4, 5], vec![2, 5, 3]], 12);
}

#[test]
fn einsum_refuses_what_it_does_not_map() {
    let m = tg_onnx::OnnxModel::from_bytes("einsum.onnx".into(), model("ii->i", &[vec![3, 3]]).into()).unwrap();
    let e = tg_onnx::import(&m, &HashMap::new()).err().expect("a diagonal is refused");
    assert!(e.to_string().contains("Einsum") && e.to_string().contains("diagonal"), "{e}");
    let m = tg_onnx::OnnxModel::from_bytes("einsum.onnx".into(), model("ij,jk->ik", &[vec![3, 4], vec![5, 6]]).into()).unwrap();
    let e = tg_onnx::import(&m, &HashMap::new()).err().expect("mismatched sizes are refused");
    assert!(e.to_string().contains("label 'j'"), "{e}");
}
