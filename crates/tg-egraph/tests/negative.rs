//! Patterns that must not fuse, and fusions whose intermediates have other readers.
//!
//! For a near-miss pattern, no e-class may hold the fused op after saturation with every
//! rule, and the extracted graph must compute what the original computes. For a second
//! reader, e-graph rewriting keeps both forms; the extracted graph must still compute every
//! output correctly (the intermediate stays available to its other reader).

mod common;
mod patterns;

use common::*;
use patterns as p;
use tg_egraph::{load, rewrite, saturate, RewriteOptions, StopReason};
use tg_ir::{DType, Graph, GraphBuilder, IrError, Op, ReduceOp, Tensor, UnaryOp};

type Body<'a> = &'a dyn Fn(&mut GraphBuilder, &[Tensor]) -> Result<Vec<Tensor>, IrError>;

fn graph(inputs: &[Vec<usize>], body: Body) -> Graph {
    let mut b = GraphBuilder::new();
    let xs: Vec<Tensor> = inputs.iter().enumerate().map(|(i, s)| b.input(&format!("x{i}"), s, DType::F32).unwrap()).collect();
    for (k, y) in body(&mut b, &xs).unwrap().into_iter().enumerate() {
        b.output(&format!("y{k}"), y).unwrap();
    }
    b.finish().unwrap()
}

/// Saturates with every rule; asserts no e-class holds an op matching `fused`, and that
/// the extracted graph computes the same outputs. Returns the extracted graph.
fn assert_no_fusion(what: &str, g: &Graph, fused: impl Fn(&Op) -> bool) -> Graph {
    let mut l = load(g).unwrap();
    let rep = saturate(&mut l, &RewriteOptions::default()).unwrap();
    assert_eq!(rep.stop_reason, StopReason::Saturated, "{what}");
    for c in l.egraph.classes() {
        for n in &c.nodes {
            assert!(!fused(&n.op), "{what}: {n} was introduced: {rep:?}");
        }
    }
    check_values(what, g)
}

/// Rewrites with every rule and compares all outputs on random inputs.
fn check_values(what: &str, g: &Graph) -> Graph {
    let out = rewrite(g, &RewriteOptions::default()).unwrap();
    let seed = base_seed(what, 0x0e9);
    let (inputs, weights) = random_feeds(g, &mut rng(seed), 1.5);
    assert_same_outputs(what, g, &out.graph, &inputs, &weights, 1e-9);
    out.graph
}

#[test]
fn rope_with_interleaved_pairs_is_not_neox() {
    // GPT-J layout: pairs are (x[2i], x[2i+1]), not (x[i], x[i + d/2]).
    let (seq, heads, h) = (3, 2, 4);
    let t = vec![seq, 1, h];
    let g = graph(&[vec![seq, heads, 2 * h], t.clone(), t], &|b, x| {
        let xr = b.reshape(x[0], &[seq, heads, h, 2])?;
        let even = b.slice(xr, 3, 0, 1)?;
        let even = b.reshape(even, &[seq, heads, h])?;
        let odd = b.slice(xr, 3, 1, 2)?;
        let odd = b.reshape(odd, &[seq, heads, h])?;
        let a = b.mul(even, x[1])?;
        let c = b.mul(odd, x[2])?;
        let o1 = b.sub(a, c)?;
        let a = b.mul(odd, x[1])?;
        let c = b.mul(even, x[2])?;
        let o2 = b.add(a, c)?;
        let o1 = b.reshape(o1, &[seq, heads, h, 1])?;
        let o2 = b.reshape(o2, &[seq, heads, h, 1])?;
        let y = b.concat(&[o1, o2], 3)?;
        Ok(vec![b.reshape(y, &[seq, heads, 2 * h])?])
    });
    assert_no_fusion("interleaved rope", &g, |o| *o == Op::RopeNeox);
}

#[test]
fn rope_with_swapped_halves_or_signs_is_not_neox() {
    let (seq, heads, h) = (4, 3, 3);
    let t = vec![seq, 1, h];
    for variant in 0..3 {
        let g = graph(&[vec![seq, heads, 2 * h], t.clone(), t.clone()], &|b, x| {
            let x1 = b.slice(x[0], 2, 0, h)?;
            let x2 = b.slice(x[0], 2, h, 2 * h)?;
            let (x1, x2) = if variant == 0 { (x2, x1) } else { (x1, x2) };
            let a = b.mul(x1, x[1])?;
            let c = b.mul(x2, x[2])?;
            // variant 1: a + instead of −; variant 2: cos and sin exchanged in the second half.
            let o1 = if variant == 1 { b.add(a, c)? } else { b.sub(a, c)? };
            let (cc, ss) = if variant == 2 { (x[2], x[1]) } else { (x[1], x[2]) };
            let a = b.mul(x2, cc)?;
            let c = b.mul(x1, ss)?;
            let o2 = b.add(a, c)?;
            Ok(vec![b.concat(&[o1, o2], 2)?])
        });
        assert_no_fusion(&format!("rope variant {variant}"), &g, |o| *o == Op::RopeNeox);
    }
}

#[test]
fn rope_tables_that_vary_by_head_do_not_fuse() {
    // cos/sin [seq, heads, h]: valid IR, but the kernel takes one row per position.
    let (seq, heads, h) = (3, 2, 2);
    let t = vec![seq, heads, h];
    let g = graph(&[vec![seq, heads, 2 * h], t.clone(), t], &|b, x| Ok(vec![p::rope_neox(b, x[0], x[1], x[2], false)?]));
    assert_no_fusion("per-head rope tables", &g, |o| *o == Op::RopeNeox);
}

#[test]
fn rmsnorm_over_another_axis_is_not_fused() {
    let g = graph(&[vec![5, 6], vec![6]], &|b, x| Ok(vec![p::rms_norm(b, x[0], x[1], 1e-6, 0, false)?]));
    assert_no_fusion("rmsnorm over axis 0", &g, |o| matches!(o, Op::RmsNorm { .. }));
    // Mean of x·y instead of x·x.
    let g = graph(&[vec![5, 6], vec![5, 6], vec![6]], &|b, x| {
        let sq = b.mul(x[0], x[1])?;
        let ms = b.reduce_last(ReduceOp::Mean, sq)?;
        let e = b.scalar(1e-6)?;
        let ms = b.add(ms, e)?;
        let r = b.unary(UnaryOp::Rsqrt, ms)?;
        let y = b.mul(x[0], r)?;
        Ok(vec![b.mul(y, x[2])?])
    });
    assert_no_fusion("rmsnorm of x·y", &g, |o| matches!(o, Op::RmsNorm { .. }));
    // A weight that is not one row of the last dim (a full [5, 6] scale).
    let g = graph(&[vec![5, 6], vec![5, 6]], &|b, x| Ok(vec![p::rms_norm(b, x[0], x[1], 1e-6, 1, false)?]));
    assert_no_fusion("rmsnorm with a full-tensor weight", &g, |o| matches!(o, Op::RmsNorm { .. }));
}

#[test]
fn softmax_with_max_over_another_axis_is_not_fused() {
    let g = graph(&[vec![4, 5]], &|b, x| Ok(vec![p::softmax(b, x[0], 0, 1)?]));
    assert_no_fusion("softmax, max over axis 0", &g, |o| *o == Op::Softmax);
    let g = graph(&[vec![4, 5]], &|b, x| Ok(vec![p::softmax(b, x[0], 1, 0)?]));
    assert_no_fusion("softmax, sum over axis 0", &g, |o| *o == Op::Softmax);
    // The divisor sums a different exponential.
    let g = graph(&[vec![4, 5]], &|b, x| {
        let m = b.reduce_last(ReduceOp::Max, x[0])?;
        let d = b.sub(x[0], m)?;
        let e = b.unary(UnaryOp::Exp, d)?;
        let e2 = b.unary(UnaryOp::Exp, x[0])?;
        let s = b.reduce_last(ReduceOp::Sum, e2)?;
        Ok(vec![b.div(e, s)?])
    });
    assert_no_fusion("softmax with another divisor", &g, |o| *o == Op::Softmax);
}

#[test]
fn gelu_with_other_constants_is_not_fused() {
    let g = graph(&[vec![3, 7]], &|b, x| Ok(vec![p::gelu(b, x[0], 0.04, false)?]));
    assert_no_fusion("gelu with 0.04", &g, |o| matches!(o, Op::GeluTanh | Op::GatedGelu));
}

#[test]
fn attention_outside_the_kernel_contract_is_not_fused() {
    // k with a head per query head (rank 4, g > 1 in k): the kernel shares k over the group.
    let (nkv, g_, sq, d) = (1, 2, 3, 4);
    let g = graph(&[vec![nkv, g_, sq, d], vec![nkv, g_, sq, d], vec![nkv, 1, sq, d], vec![sq, sq]], &|b, x| Ok(vec![p::attention(b, x[0], x[1], x[2], x[3], None, false)?]));
    assert_no_fusion("attention with per-head k", &g, |o| matches!(o, Op::Attention { .. }));
    // Rank-3 q (no kv-head axis).
    let g = graph(&[vec![2, 3, 4], vec![2, 3, 4], vec![2, 3, 4], vec![3, 3]], &|b, x| Ok(vec![p::attention(b, x[0], x[1], x[2], x[3], None, false)?]));
    assert_no_fusion("rank-3 attention", &g, |o| matches!(o, Op::Attention { .. }));
}

#[test]
fn second_reader_of_an_rmsnorm_intermediate() {
    // rsqrt(mean(x²) + eps) is also an output: the fused op may be chosen, but the
    // intermediate must still be computed for its reader.
    let g = graph(&[vec![4, 8], vec![8]], &|b, x| {
        let sq = b.mul(x[0], x[0])?;
        let ms = b.reduce_last(ReduceOp::Mean, sq)?;
        let e = b.scalar(1e-6)?;
        let ms = b.add(ms, e)?;
        let r = b.unary(UnaryOp::Rsqrt, ms)?;
        let y = b.mul(x[0], r)?;
        let y = b.mul(y, x[1])?;
        Ok(vec![y, r])
    });
    let out = check_values("rmsnorm, second reader", &g);
    assert!(out.nodes.iter().any(|n| n.op == Op::Unary(UnaryOp::Rsqrt)), "the other reader still needs rsqrt");
}

#[test]
fn second_reader_of_attention_probabilities() {
    let (sq, d) = (4, 3);
    let g = graph(&[vec![1, 2, sq, d], vec![1, 1, sq, d], vec![1, 1, sq, d]], &|b, x| {
        let m = p::causal_mask(b, sq, sq)?;
        let s = b.matmul(x[0], x[1], true)?;
        let s = b.add(s, m)?;
        let pr = p::softmax_last(b, s)?;
        let o = b.matmul(pr, x[2], false)?;
        Ok(vec![o, pr])
    });
    let out = check_values("attention, probabilities read twice", &g);
    // The probabilities are an output, so some form of softmax stays.
    assert!(out.nodes.iter().any(|n| n.op == Op::Softmax || n.op == Op::Unary(UnaryOp::Exp)));
}

#[test]
fn second_reader_of_gelu() {
    let g = graph(&[vec![3, 6], vec![3, 6]], &|b, x| {
        let gl = p::gelu(b, x[0], 0.044715, false)?;
        let y = b.mul(gl, x[1])?;
        let z = b.unary(UnaryOp::Neg, gl)?;
        Ok(vec![y, z])
    });
    let out = check_values("gelu read twice", &g);
    // One gelu computation serves both readers: gelu_tanh + mul beats a gated_gelu that
    // recomputes it, and either way the outputs are right (checked above).
    assert!(out.nodes.iter().any(|n| n.op == Op::GeluTanh), "{:?}", out.op_histogram());
}

#[test]
fn add_rmsnorm_with_a_broadcast_summand_is_not_fused() {
    // a [3, 5] + b [5]: the kernel adds two equal-shaped operands, so this stays an add and
    // an RMSNorm (the RMSNorm itself still fuses).
    let g = graph(&[vec![3, 5], vec![5], vec![5]], &|b, x| {
        let s = b.add(x[0], x[1])?;
        Ok(vec![p::rms_norm(b, s, x[2], 1e-6, 1, false)?])
    });
    let out = assert_no_fusion("add + rmsnorm, broadcast summand", &g, |o| matches!(o, Op::AddRmsNorm { .. }));
    assert!(out.nodes.iter().any(|n| matches!(n.op, Op::RmsNorm { .. })), "the RMSNorm alone still fuses");
}

#[test]
fn add_rmsnorm_fuses_with_the_sum_read_twice() {
    // The residual stream of a transformer: s = a + b feeds the norm and the next add; the
    // fused kernel writes both, and the extracted graph computes every output.
    let g = graph(&[vec![4, 6], vec![4, 6], vec![6], vec![4, 6]], &|b, x| {
        let s = b.add(x[0], x[1])?;
        let y = p::rms_norm(b, s, x[2], 1e-5, 1, false)?;
        let r = b.add(s, x[3])?;
        Ok(vec![y, r])
    });
    let out = check_values("add + rmsnorm, sum read twice", &g);
    let fused = out.nodes.iter().filter(|n| matches!(n.op, Op::AddRmsNorm { .. })).count();
    let adds = out.nodes.iter().filter(|n| matches!(n.op, Op::Binary(tg_ir::BinaryOp::Add))).count();
    assert_eq!(fused, 1, "one add_rms_norm: {out:?}");
    assert_eq!(adds, 1, "only the second add remains: the sum is read from the fused kernel, not recomputed");
}

#[test]
fn matmul_add_needs_a_weight_and_a_row_or_residual_addend() {
    // Right operand an activation (not a weight): the quantized-matmul kernel cannot take it.
    let g = graph(&[vec![3, 4], vec![5, 4], vec![5]], &|b, x| {
        let p = b.matmul(x[0], x[1], true)?;
        Ok(vec![b.add(p, x[2])?])
    });
    assert_no_fusion("matmul of two activations + bias", &g, |o| matches!(o, Op::MatMulAdd { .. }));
    // A column addend [m, 1] broadcast along n: neither a bias row nor a residual.
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[3, 4], DType::F32).unwrap();
    let c = b.input("c", &[3, 1], DType::F32).unwrap();
    let w = b.weight("w", &[5, 4], DType::F32).unwrap();
    let p = b.matmul(x, w, true).unwrap();
    let y = b.add(p, c).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    assert_no_fusion("matmul + column addend", &g, |o| matches!(o, Op::MatMulAdd { .. }));
}
