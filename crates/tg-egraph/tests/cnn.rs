//! The CNN fusions end to end, on the compositions the ONNX importer writes for an exported
//! UNet block (instance normalisation as `[N, G, rest]` rows, the affine map per channel,
//! `Sigmoid` times its input, a convolution with a bias): after rewriting with every rule the
//! extracted graph is one fused group norm with its SiLU and one fused convolution with its
//! bias, and it computes what the original computes.

mod common;
mod patterns;

use common::*;
use patterns as p;
use tg_egraph::{rewrite, RewriteOptions};
use tg_ir::{Act, DType, GraphBuilder, Op, UnaryOp, Window};

#[test]
fn unet_block_fuses_to_group_norm_silu_and_conv_bias() {
    let (n, c, h, w, g, m) = (1, 8, 6, 5, 4, 6);
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[n, c, h, w], DType::F32).unwrap();
    let gamma = b.input("gamma", &[c, 1, 1], DType::F32).unwrap();
    let beta = b.input("beta", &[c, 1, 1], DType::F32).unwrap();
    let wt = b.weight("w", &[m, c, 3, 3], DType::F32).unwrap();
    let bias = b.input("bias", &[m, 1, 1], DType::F32).unwrap();
    // GroupNorm as exported: reshape → instance norm → reshape → scale → shift.
    let r = b.reshape(x, &[n, g, c / g * h * w]).unwrap();
    let y = p::normalise_last(&mut b, r, 1e-5).unwrap();
    let y = b.reshape(y, &[n, c, h, w]).unwrap();
    let y = b.mul(y, gamma).unwrap();
    let y = b.add(y, beta).unwrap();
    // SiLU as exported: x · Sigmoid(x).
    let s = b.unary(UnaryOp::Sigmoid, y).unwrap();
    let y = b.mul(y, s).unwrap();
    // Conv with its bias.
    let mut win = Window::new(vec![3, 3]);
    win.pad_begin = vec![1, 1];
    win.pad_end = vec![1, 1];
    let y = b.conv(y, wt, win, 1).unwrap();
    let y = b.add(y, bias).unwrap();
    b.output("y", y).unwrap();
    let g0 = b.finish().unwrap();

    let out = rewrite(&g0, &RewriteOptions::default()).unwrap();
    let fused_norm = count(&out.graph, |o| matches!(o, Op::GroupNorm { act: Act::Silu, groups: 4, .. }));
    let fused_conv = count(&out.graph, |o| matches!(o, Op::ConvBias { act: Act::None, .. }));
    let left = count(&out.graph, |o| matches!(o, Op::Unary(_) | Op::Reduce { .. } | Op::Conv { .. }));
    assert_eq!((fused_norm, fused_conv, left), (1, 1, 0), "extracted graph:\n{:?}\nreport: {:?}", out.graph.op_histogram(), out.report.saturation.applications);
    let mut rng = rng(base_seed("unet_block", 41));
    let (feeds, weights) = random_feeds(&g0, &mut rng, 1.0);
    assert_same_outputs("unet block", &g0, &out.graph, &feeds, &weights, 1e-9);
}
