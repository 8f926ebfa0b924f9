//! Every fused op through the whole pipeline (lowering, the CPU device's `supports`, the
//! fused kernels): outputs equal the reference interpreter's on random inputs, with
//! NaN-poisoned arenas, including operands that arrive as non-contiguous views (which
//! lowering must copy) and shapes the kernels refuse (which must be a compile error).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;
use tg_compiler::{compile, CompileOptions};
use tg_ir::{DType, Graph, GraphBuilder, HostTensor, Op, Tensor};
use tg_runtime::{CpuDevice, Device, Executable};

struct Case {
    b: GraphBuilder,
    inputs: HashMap<String, HostTensor>,
    rng: ChaCha8Rng,
}

impl Case {
    fn new(seed: u64) -> Case {
        Case { b: GraphBuilder::new(), inputs: HashMap::new(), rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    fn input(&mut self, name: &str, shape: &[usize], lo: f32, hi: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.rng.gen_range(lo..hi)).collect();
        self.inputs.insert(name.into(), HostTensor::f32(shape, v).unwrap());
        self.b.input(name, shape, DType::F32).unwrap()
    }

    fn finish(mut self, out: Tensor) -> (Graph, HashMap<String, HostTensor>) {
        self.b.output("y", out).unwrap();
        (self.b.finish().unwrap(), self.inputs)
    }
}

fn check(name: &str, g: &Graph, inputs: &HashMap<String, HostTensor>, bound: f64) {
    let weights: HashMap<String, Vec<u8>> = HashMap::new();
    let want = tg_ir::interp::eval(g, inputs, &weights).unwrap()["y"].data.clone();
    for threads in [1, 2] {
        let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).unwrap());
        // The rewrite stage is off: these graphs are fused already and must reach lowering as built.
        let opts = CompileOptions::disabling(&["rewrite"]).unwrap();
        let c = compile(g, std::slice::from_ref(&dev), &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut exe = Executable::new(c.plan, vec![dev], Arc::new(weights.clone())).unwrap();
        exe.set_poison(true);
        let got = exe.run(inputs).unwrap();
        let got = got["y"].as_f32().unwrap();
        assert_eq!(got.len(), want.len());
        let num: f64 = got.iter().zip(&want).map(|(&a, &b)| (a as f64 - b).powi(2)).sum();
        let den: f64 = want.iter().map(|b| b * b).sum::<f64>().max(1e-300);
        eprintln!("{name} ({threads} threads): NMSE {:.2e}", num / den);
        assert!(got.iter().all(|v| v.is_finite()), "{name}: non-finite output");
        assert!(num / den < bound, "{name}: NMSE {}", num / den);
    }
}

#[test]
fn rms_norm_gelu_gated_softmax() {
    for (seed, rows, n) in [(1u64, 1usize, 1usize), (2, 5, 7), (3, 9, 640), (4, 3, 768)] {
        let mut c = Case::new(seed);
        let x = c.input("x", &[rows, n], -3.0, 3.0);
        let w = c.input("w", &[n], 0.5, 1.5);
        let y = c.b.push(Op::RmsNorm { eps_bits: 1e-6f64.to_bits() }, &[x, w], None).unwrap();
        let (g, i) = c.finish(y);
        check(&format!("rms_norm {rows}x{n}"), &g, &i, 1e-12);

        let mut c = Case::new(seed + 10);
        let x = c.input("x", &[rows, n], -4.0, 4.0);
        let u = c.input("u", &[rows, n], -2.0, 2.0);
        let gg = c.b.push(Op::GatedGelu, &[x, u], None).unwrap();
        let y = c.b.push(Op::GeluTanh, &[gg], None).unwrap();
        let (g, i) = c.finish(y);
        check(&format!("gelu/gated_gelu {rows}x{n}"), &g, &i, 1e-11);

        let mut c = Case::new(seed + 20);
        let x = c.input("x", &[rows, n], -8.0, 8.0);
        let y = c.b.push(Op::Softmax, &[x], None).unwrap();
        let (g, i) = c.finish(y);
        check(&format!("softmax {rows}x{n}"), &g, &i, 1e-12);
    }
}

#[test]
fn add_rms_norm_and_its_two_views() {
    // Both results read back through the slice + reshape views the rewrite rule builds: the
    // sum feeds a binary op (strided read at offset 0) and the norm a fused kernel
    // (contiguous, at an offset half-way into the buffer).
    for (seed, rows, n) in [(31u64, 1usize, 1usize), (32, 5, 7), (33, 9, 640), (34, 3, 768)] {
        let mut c = Case::new(seed);
        let a = c.input("a", &[rows, n], -3.0, 3.0);
        let b = c.input("b", &[rows, n], -3.0, 3.0);
        let w = c.input("w", &[n], 0.5, 1.5);
        let t = c.b.push(Op::AddRmsNorm { eps_bits: 1e-6f64.to_bits() }, &[a, b, w], None).unwrap();
        let sum = c.b.slice(t, 0, 0, 1).unwrap();
        let sum = c.b.reshape(sum, &[rows, n]).unwrap();
        let norm = c.b.slice(t, 0, 1, 2).unwrap();
        let norm = c.b.reshape(norm, &[rows, n]).unwrap();
        let g2 = c.b.push(Op::GatedGelu, &[norm, sum], None).unwrap();
        let (g, i) = c.finish(g2);
        check(&format!("add_rms_norm {rows}x{n}"), &g, &i, 1e-11);
        // The op itself as the output.
        let mut c = Case::new(seed + 50);
        let a = c.input("a", &[rows, n], -3.0, 3.0);
        let b = c.input("b", &[rows, n], -3.0, 3.0);
        let w = c.input("w", &[n], 0.5, 1.5);
        let t = c.b.push(Op::AddRmsNorm { eps_bits: 1e-5f64.to_bits() }, &[a, b, w], None).unwrap();
        let (g, i) = c.finish(t);
        check(&format!("add_rms_norm (whole) {rows}x{n}"), &g, &i, 1e-12);
    }
}

#[test]
fn rope_neox_from_a_permuted_view() {
    for (seed, seq, heads, d) in [(5u64, 1usize, 1usize, 2usize), (6, 5, 4, 256), (7, 17, 3, 32)] {
        let mut c = Case::new(seed);
        // x arrives as a permuted view [seq, heads, d] of a [heads, seq, d] input: lowering
        // must copy it before the fused kernel.
        let x = c.input("x", &[heads, seq, d], -2.0, 2.0);
        let x = c.b.permute(x, &[1, 0, 2]).unwrap();
        let cos = c.input("cos", &[seq, 1, d / 2], -1.0, 1.0);
        let sin = c.input("sin", &[seq, 1, d / 2], -1.0, 1.0);
        let y = c.b.push(Op::RopeNeox, &[x, cos, sin], None).unwrap();
        let (g, i) = c.finish(y);
        check(&format!("rope_neox {seq}x{heads}x{d}"), &g, &i, 1e-12);

        let mut c = Case::new(seed + 100);
        let x = c.input("x", &[seq, heads, d], -2.0, 2.0);
        let w = c.input("w", &[d], 0.5, 1.5);
        let cos = c.input("cos", &[seq, 1, d / 2], -1.0, 1.0);
        let sin = c.input("sin", &[seq, 1, d / 2], -1.0, 1.0);
        let y = c.b.push(Op::RmsNormRopeNeox { eps_bits: 1e-6f64.to_bits() }, &[x, w, cos, sin], None).unwrap();
        let (g, i) = c.finish(y);
        check(&format!("rms_norm_rope_neox {seq}x{heads}x{d}"), &g, &i, 1e-12);
    }
}

#[test]
fn attention_grouped_with_causal_and_window_masks() {
    for (seed, nkv, group, sq, sk, d, window, seq_major) in [
        (8u64, 1usize, 4usize, 5usize, 5usize, 256usize, None, false),
        (9, 2, 2, 33, 33, 32, Some(7), false),
        (10, 1, 3, 1, 70, 64, None, false),
        (11, 1, 1, 130, 130, 16, Some(40), false),
        (12, 1, 4, 5, 5, 256, None, true),
        (13, 2, 2, 33, 33, 32, Some(7), true),
        (14, 1, 3, 1, 70, 64, None, true),
    ] {
        let mut c = Case::new(seed);
        let q = if seq_major { c.input("q", &[sq, nkv, group, d], -1.0, 1.0) } else { c.input("q", &[nkv, group, sq, d], -1.0, 1.0) };
        let k = c.input("k", &[nkv, 1, sk, d], -1.0, 1.0);
        let v = c.input("v", &[nkv, 1, sk, d], -1.0, 1.0);
        // Query i sits at position sk - sq + i (a prompt continued by sq tokens).
        let mut m = vec![0f32; sq * sk];
        for i in 0..sq {
            let p = sk - sq + i;
            for j in 0..sk {
                let visible = j <= p && window.is_none_or(|w| p - j < w);
                m[i * sk + j] = if visible { 0.0 } else { f32::NEG_INFINITY };
            }
        }
        c.inputs.insert("mask".into(), HostTensor::f32(&[sq, sk], m).unwrap());
        let mask = c.b.input("mask", &[sq, sk], DType::F32).unwrap();
        let scale_bits = (1.0 / (d as f64).sqrt()).to_bits();
        let op = if seq_major { Op::AttentionSeqMajor { scale_bits } } else { Op::Attention { scale_bits } };
        let y = c.b.push(op, &[q, k, v, mask], None).unwrap();
        let (g, i) = c.finish(y);
        check(&format!("attention kv{nkv} g{group} {sq}x{sk} d{d} window {window:?} seq-major {seq_major}"), &g, &i, 1e-10);
    }
}

#[test]
fn shapes_the_kernels_refuse_are_compile_errors() {
    // RoPE on rank-2 x: valid IR, but the CPU kernel wants [seq, heads, d].
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[4, 8], DType::F32).unwrap();
    let cs = b.input("c", &[4, 4], DType::F32).unwrap();
    let y = b.push(Op::RopeNeox, &[x, cs, cs], None).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let e = compile(&g, std::slice::from_ref(&dev), &CompileOptions::disabling(&["rewrite"]).unwrap()).unwrap_err().to_string();
    assert!(e.contains("rope_neox"), "{e}");
    // Invalid IR is refused by the builder, naming the op.
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[4, 7], DType::F32).unwrap();
    let e = b.push(Op::RopeNeox, &[x, x, x], None).unwrap_err().to_string();
    assert!(e.contains("rope_neox") && e.contains("odd"), "{e}");
    let q = b.input("q", &[2, 3, 8], DType::F32).unwrap();
    let k = b.input("k", &[2, 5, 4], DType::F32).unwrap();
    let e = b.push(Op::Attention { scale_bits: 1f64.to_bits() }, &[q, k, k, k], None).unwrap_err().to_string();
    assert!(e.contains("attention"), "{e}");
}

/// `matmul_add` (the matmul epilogue) through lowering, on an f32 and a Q4_K weight, with a
/// bias row and with a residual addend; NaN-poisoned arenas, against the reference
/// interpreter (which reads the same quantized blocks).
#[test]
fn matmul_add_with_bias_and_residual() {
    use tg_quant::GgmlType;
    for (seed, m, k, n, ty, residual) in
        [(40u64, 1usize, 256usize, 7usize, None, false), (41, 9, 256, 33, None, true), (42, 5, 512, 64, Some(GgmlType::Q4_K), false), (43, 17, 256, 40, Some(GgmlType::Q4_K), true)]
    {
        let mut c = Case::new(seed);
        let x = c.input("x", &[m, k], -1.0, 1.0);
        let addend = if residual { c.input("c", &[m, n], -2.0, 2.0) } else { c.input("c", &[n], -2.0, 2.0) };
        let (dtype, bytes) = match ty {
            Some(t) => (DType::Quant(t), tg_quant::random_blocks(t, n * k, seed)),
            None => (DType::F32, tg_ir::f32_bytes(&(0..n * k).map(|_| c.rng.gen_range(-0.5f32..0.5)).collect::<Vec<_>>())),
        };
        let w = c.b.weight("w", &[n, k], dtype).unwrap();
        let y = c.b.push(Op::MatMulAdd { transpose_rhs: true }, &[x, w, addend], None).unwrap();
        let (g, inputs) = c.finish(y);
        let weights: HashMap<String, Vec<u8>> = HashMap::from([("w".to_string(), bytes)]);
        let want = tg_ir::interp::eval(&g, &inputs, &weights).unwrap()["y"].data.clone();
        for threads in [1, 2] {
            let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).unwrap());
            let opts = CompileOptions::disabling(&["rewrite"]).unwrap();
            let cp = compile(&g, std::slice::from_ref(&dev), &opts).unwrap();
            assert!(cp.plan.steps.iter().any(|s| s.kernel.name() == "matmul_quant_add"), "one fused step");
            let mut exe = Executable::new(cp.plan, vec![dev], Arc::new(weights.clone())).unwrap();
            exe.set_poison(true);
            let got = exe.run(&inputs).unwrap();
            let got = got["y"].as_f32().unwrap();
            let num: f64 = got.iter().zip(&want).map(|(&a, &b)| (a as f64 - b).powi(2)).sum();
            let den: f64 = want.iter().map(|b| b * b).sum::<f64>().max(1e-300);
            eprintln!("matmul_add {m}x{k}x{n} {ty:?} residual {residual} ({threads} threads): NMSE {:.2e}", num / den);
            assert!(num / den < 1e-11, "NMSE {}", num / den);
        }
    }
}
