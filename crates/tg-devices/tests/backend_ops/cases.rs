//! The cases: for every kernel family, shapes (odd sizes), strided views (transposed, sliced,
//! broadcast stride 0, offsets), i32/bool variants, weight formats, both matmul numerics,
//! attention masks and layouts, run-time errors.
//!
//! Thresholds (NMSE = Σ(out − ref)² / Σ ref², the reference in f64):
//! * [`F32_OP`] 1e-10: one f32 operation per element (+ − × ÷ max min neg abs): relative
//!   error ≤ 2⁻²⁴ per element, NMSE ≤ 4e-15; 1e-10 leaves room for a device whose division
//!   is not correctly rounded (OpenCL allows 2.5 ulp) and nothing for a wrong formula.
//! * [`TRANSC`] 1e-7: f32 transcendental functions (exp, log, tanh, sin, cos, sqrt, rsqrt,
//!   recip: a few ulp, NMSE ~ 1e-13), and the fused kernels (norms, RoPE, GELU, softmax,
//!   attention: a few such operations around f32 row sums of ≤ 640 terms, relative error
//!   ≲ 1e-5 in the worst case, so NMSE ≲ 1e-10).
//! * [`REDUCE`] 1e-8: f32 sums of ≤ 640 terms: error ≤ len·ε·Σ|x|, NMSE ≲ 1e-10 even with
//!   the cancellation of random signs.
//! * [`MATMUL`] 1e-6: f32-accumulated matmuls (f32 operands, and quantized weights with
//!   `quantize_activations: false`, whose dequantization is exact): NMSE ~ k·ε² ≈ 1e-11;
//!   loose for devices that order the sums differently, yet below the 1.5e-5 that rounding
//!   the activations to q8 would cost (so a kernel that quantizes when told not to fails).
//! * [`Q8`] 1e-6: `quantize_activations: true`. The reference is the f64 product of the
//!   activations rounded by tg_quant's reference quantizers (Q8_0 for Q4_0/Q5_0/Q8_0 weights,
//!   Q8_K for K-quants) and dequantized again, with the dequantized weights: what remains is
//!   f32 accumulation (~1e-12) and rare ±1 quants where ggml's x86 rounding (which the
//!   kernels follow) and the reference quantizer differ on ties (each costs ~(1/127)²/k of
//!   one output). Unrounded activations would show NMSE ≈ (1/127)²/12 / (1/3) ≈ 1.5e-5
//!   against this reference, so a kernel ignoring the flag fails. F32/F16/BF16 weights have
//!   no q8 path: both numerics are f32 there ([`MATMUL`] against the plain product).
//! * [`Check::Exact`] for data movement (copy, concat, gather, store_rows, im2col), fill,
//!   iota, casts, selections, comparisons and every i32/bool result, and max reductions and
//!   max pooling.
//! * Windows: convolutions are f32 sums of K = (C/groups)·taps products (K ≤ 400 here), which
//!   devices order differently (tap order, or im2col + a blocked matmul): [`MATMUL`]. Average
//!   pooling is an f32 sum of ≤ 15 taps and one division: [`REDUCE`].

use crate::harness::{Case, Check, View, B};
use rand::Rng;
use tg_ir::shape::numel;
use tg_ir::{Act, BinaryOp, CmpOp, DType, HostData, Op, PoolKind, ReduceOp, UnaryOp, Window};
use tg_quant::GgmlType;
use tg_runtime::{Kernel, Layout};

const F32_OP: Check = Check::Nmse(1e-10, "one f32 operation per element");
const TRANSC: Check = Check::Nmse(1e-7, "f32 transcendental / fused: a few ulp per operation");
const REDUCE: Check = Check::Nmse(1e-8, "f32 accumulation of <= 640 terms");
const MATMUL: Check = Check::Nmse(1e-6, "f32 accumulation over k products");
const Q8: Check = Check::Nmse(1e-6, "q8 numerics against the q8-rounded reference");

use View::{Expand as E, Permute as P, Reshape as R, Slice as S};

fn f(v: Vec<f32>) -> HostData {
    HostData::F32(v)
}

/// Every case.
pub fn all() -> Vec<Case> {
    let mut v = Vec::new();
    sources(&mut v);
    unary(&mut v);
    binary(&mut v);
    compare(&mut v);
    select(&mut v);
    cast(&mut v);
    reduce(&mut v);
    matmul_f32(&mut v);
    matmul_quant(&mut v);
    gather(&mut v);
    movement(&mut v);
    store_rows(&mut v);
    fused(&mut v);
    windows(&mut v);
    attention(&mut v);
    large(&mut v);
    gpu_paths(&mut v);
    degenerate(&mut v);
    v
}

fn sources(v: &mut Vec<Case>) {
    for (shape, dtype, x) in [
        (vec![3usize, 5, 7], DType::F32, 0.1f64),
        (vec![], DType::F32, -2.5),
        (vec![2, 3], DType::F32, f64::NEG_INFINITY),
        (vec![4, 9], DType::I32, -7.9),
        (vec![13], DType::Bool, 1.0),
        (vec![2, 1, 5], DType::Bool, 0.0),
    ] {
        let mut b = B::new(format!("fill {dtype}{shape:?} = {x}"));
        let c = b.g.constant(x, dtype).expect("constant");
        let o = if shape.is_empty() { c } else { b.g.expand(c, &shape).expect("expand") };
        v.push(b.finish(Kernel::Fill { bits: x.to_bits() }, o, Check::Exact));
    }
    for (shape, axis, dtype) in
        [(vec![4usize, 7], 0usize, DType::I32), (vec![4, 7], 1, DType::F32), (vec![3, 1, 5], 2, DType::I32), (vec![2, 3, 4], 1, DType::F32), (vec![9], 0, DType::I32)]
    {
        let mut b = B::new(format!("iota {dtype}{shape:?} axis {axis}"));
        let o = b.g.iota(&shape, axis, dtype).expect("iota");
        v.push(b.finish(Kernel::Iota { axis }, o, Check::Exact));
    }
}

fn unary(v: &mut Vec<Case>) {
    use UnaryOp::*;
    for op in [Neg, Exp, Log, Tanh, Sqrt, Rsqrt, Recip, Sin, Cos, Abs, Sigmoid, Silu, Erf] {
        let mut b = B::new(format!("{op:?} f32[7,13]").to_lowercase());
        let data = match op {
            Log | Sqrt | Rsqrt => b.uniform(91, 0.05, 4.0),
            Recip => b.signed(91, 0.25, 4.0),
            Exp => b.uniform(91, -5.0, 5.0),
            Sin | Cos => b.uniform(91, -10.0, 10.0),
            Sigmoid | Silu => b.uniform(91, -20.0, 20.0),
            _ => b.uniform(91, -4.0, 4.0),
        };
        let x = b.input(&[7, 13], f(data), &[]);
        let o = b.g.unary(op, x).expect("unary");
        v.push(b.finish(Kernel::Unary(op), o, if matches!(op, Neg | Abs) { F32_OP } else { TRANSC }));
    }
    // Strided operands (the unary kernels take any layout).
    let strided: [(UnaryOp, &str, Vec<usize>, Vec<View>); 4] = [
        (Exp, "transposed", vec![13, 7], vec![P(vec![1, 0])]),
        (Tanh, "sliced", vec![7, 20], vec![S(1, 3, 16)]),
        (Sin, "broadcast", vec![13], vec![E(vec![7, 13])]),
        (Neg, "rank-4 permuted", vec![2, 3, 4, 5], vec![P(vec![3, 1, 0, 2])]),
    ];
    for (op, what, shape, views) in strided {
        let mut b = B::new(format!("{op:?} f32 {what}").to_lowercase());
        let x = b.f32_in(&shape, &views, -3.0, 3.0);
        let o = b.g.unary(op, x).expect("unary");
        v.push(b.finish(Kernel::Unary(op), o, if op == Neg { F32_OP } else { TRANSC }));
    }
}

/// Operand layouts of the binary cases: (name, a base shape + views, b base shape + views).
type Pair = (&'static str, (Vec<usize>, Vec<View>), (Vec<usize>, Vec<View>));

fn f32_pairs() -> Vec<Pair> {
    vec![
        ("[7,13] contiguous", (vec![7, 13], vec![]), (vec![7, 13], vec![])),
        ("[7,13] a transposed, b row-broadcast", (vec![13, 7], vec![P(vec![1, 0])]), (vec![13], vec![E(vec![7, 13])])),
        ("[7,13] a column-broadcast, b sliced", (vec![7, 1], vec![E(vec![7, 13])]), (vec![7, 20], vec![S(1, 4, 17)])),
        ("[2,3,5,4] a mid-broadcast, b permuted", (vec![2, 1, 5, 4], vec![E(vec![2, 3, 5, 4])]), (vec![4, 5, 3, 2], vec![P(vec![3, 2, 1, 0])])),
        ("[7,13] b scalar-broadcast", (vec![7, 13], vec![]), (vec![], vec![E(vec![7, 13])])),
    ]
}

fn binary(v: &mut Vec<Case>) {
    use BinaryOp::*;
    for op in [Add, Sub, Mul, Div, Max, Min] {
        for (what, (sa, va), (sb, vb)) in f32_pairs() {
            let mut b = B::new(format!("{op:?} f32 {what}").to_lowercase());
            let x = b.f32_in(&sa, &va, -2.0, 2.0);
            let yd = if op == Div { b.signed(numel(&sb), 0.5, 2.0) } else { b.uniform(numel(&sb), -2.0, 2.0) };
            let y = b.input(&sb, f(yd), &vb);
            let o = b.g.binary(op, x, y).expect("binary");
            v.push(b.finish(Kernel::Binary(op), o, F32_OP));
        }
    }
    let int_pairs: [Pair; 2] = [
        ("[5,9] contiguous", (vec![5, 9], vec![]), (vec![5, 9], vec![])),
        ("[5,9] a transposed, b row-broadcast", (vec![9, 5], vec![P(vec![1, 0])]), (vec![9], vec![E(vec![5, 9])])),
    ];
    for op in [Add, Sub, Mul, Div, Max, Min] {
        for (what, (sa, va), (sb, vb)) in int_pairs.clone() {
            // Divisors include 0 (the result is 0) and negatives (truncation toward zero).
            let mut b = B::new(format!("{op:?} i32 {what}").to_lowercase());
            let xd = b.ints(numel(&sa), -50, 50);
            let x = b.input(&sa, HostData::I32(xd), &va);
            let yd = b.ints(numel(&sb), -6, 6);
            let y = b.input(&sb, HostData::I32(yd), &vb);
            let o = b.g.binary(op, x, y).expect("binary");
            v.push(b.finish(Kernel::Binary(op), o, Check::Exact));
        }
    }
    for op in [And, Or] {
        for (what, sb, vb) in [("[4,6] contiguous", vec![4usize, 6], vec![]), ("[4,6] b row-broadcast", vec![6], vec![E(vec![4, 6])])] {
            let mut b = B::new(format!("{op:?} bool {what}").to_lowercase());
            let xd = b.bools(24);
            let x = b.input(&[4, 6], HostData::Bool(xd), &[]);
            let yd = b.bools(numel(&sb));
            let y = b.input(&sb, HostData::Bool(yd), &vb);
            let o = b.g.binary(op, x, y).expect("binary");
            v.push(b.finish(Kernel::Binary(op), o, Check::Exact));
        }
    }
}

fn compare(v: &mut Vec<Case>) {
    use CmpOp::*;
    for op in [Eq, Ne, Lt, Le, Gt, Ge] {
        // Small integers as f32, so that equal pairs are frequent.
        for (what, (sa, va), (sb, vb)) in f32_pairs().into_iter().take(2) {
            let mut b = B::new(format!("{op:?} f32 {what}").to_lowercase());
            let xd: Vec<f32> = b.ints(numel(&sa), -2, 2).into_iter().map(|i| i as f32).collect();
            let x = b.input(&sa, f(xd), &va);
            let yd: Vec<f32> = b.ints(numel(&sb), -2, 2).into_iter().map(|i| i as f32).collect();
            let y = b.input(&sb, f(yd), &vb);
            let o = b.g.compare(op, x, y).expect("compare");
            v.push(b.finish(Kernel::Compare(op), o, Check::Exact));
        }
        let mut b = B::new(format!("{op:?} i32 [5,9] b column-broadcast").to_lowercase());
        let xd = b.ints(45, -3, 3);
        let x = b.input(&[5, 9], HostData::I32(xd), &[]);
        let yd = b.ints(5, -3, 3);
        let y = b.input(&[5, 1], HostData::I32(yd), &[E(vec![5, 9])]);
        let o = b.g.compare(op, x, y).expect("compare");
        v.push(b.finish(Kernel::Compare(op), o, Check::Exact));
    }
}

fn select(v: &mut Vec<Case>) {
    {
        let mut b = B::new("where f32 [5,7] a transposed, b row-broadcast");
        let cd = b.bools(35);
        let c = b.input(&[5, 7], HostData::Bool(cd), &[]);
        let x = b.f32_in(&[7, 5], &[P(vec![1, 0])], -1.0, 1.0);
        let y = b.f32_in(&[7], &[E(vec![5, 7])], -1.0, 1.0);
        let o = b.g.select(c, x, y).expect("where");
        v.push(b.finish(Kernel::Where, o, Check::Exact));
    }
    {
        let mut b = B::new("where f32 [5,7] cond column-broadcast, b scalar");
        let cd = b.bools(5);
        let c = b.input(&[5, 1], HostData::Bool(cd), &[E(vec![5, 7])]);
        let x = b.f32_in(&[5, 7], &[], -1.0, 1.0);
        let y = b.f32_in(&[], &[E(vec![5, 7])], -1.0, 1.0);
        let o = b.g.select(c, x, y).expect("where");
        v.push(b.finish(Kernel::Where, o, Check::Exact));
    }
    {
        let mut b = B::new("where i32 [4,6] b column-broadcast");
        let cd = b.bools(24);
        let c = b.input(&[4, 6], HostData::Bool(cd), &[]);
        let xd = b.ints(24, -1000, 1000);
        let x = b.input(&[4, 6], HostData::I32(xd), &[]);
        let yd = b.ints(4, -1000, 1000);
        let y = b.input(&[4, 1], HostData::I32(yd), &[E(vec![4, 6])]);
        let o = b.g.select(c, x, y).expect("where");
        v.push(b.finish(Kernel::Where, o, Check::Exact));
    }
    {
        let mut b = B::new("where bool [3,8] b row-broadcast");
        let cd = b.bools(24);
        let c = b.input(&[3, 8], HostData::Bool(cd), &[]);
        let xd = b.bools(24);
        let x = b.input(&[3, 8], HostData::Bool(xd), &[]);
        let yd = b.bools(8);
        let y = b.input(&[8], HostData::Bool(yd), &[E(vec![3, 8])]);
        let o = b.g.select(c, x, y).expect("where");
        v.push(b.finish(Kernel::Where, o, Check::Exact));
    }
}

fn cast(v: &mut Vec<Case>) {
    let mut push = |name: &str, shape: &[usize], data: fn(&mut B, usize) -> HostData, views: Vec<View>, to: DType| {
        let mut b = B::new(format!("cast {name}"));
        let d = data(&mut b, numel(shape));
        let x = b.input(shape, d, &views);
        let o = b.g.cast(x, to).expect("cast");
        v.push(b.finish(Kernel::Cast, o, Check::Exact));
    };
    push("f32->i32 [6,7] (truncation)", &[6, 7], |b, n| f(b.uniform(n, -100.0, 100.0)), vec![], DType::I32);
    push("f32->i32 transposed", &[7, 6], |b, n| f(b.uniform(n, -100.0, 100.0)), vec![P(vec![1, 0])], DType::I32);
    push(
        "i32->f32 [3,5] (large values round)",
        &[3, 5],
        |b, n| {
            let mut x = b.ints(n, -1000, 1000);
            x[..6].copy_from_slice(&[16_777_217, -16_777_219, (1 << 30) + 1, i32::MAX, i32::MIN, 123_456_789]);
            HostData::I32(x)
        },
        vec![],
        DType::F32,
    );
    push("bool->f32 row-broadcast", &[7], |b, n| HostData::Bool(b.bools(n)), vec![E(vec![4, 7])], DType::F32);
    push("bool->i32 [3,5]", &[3, 5], |b, n| HostData::Bool(b.bools(n)), vec![], DType::I32);
    push("f32->f32 sliced", &[6, 10], |b, n| f(b.uniform(n, -1.0, 1.0)), vec![S(0, 1, 5)], DType::F32);
    push("i32->i32 transposed", &[4, 6], |b, n| HostData::I32(b.ints(n, -99, 99)), vec![P(vec![1, 0])], DType::I32);
}

fn reduce(v: &mut Vec<Case>) {
    use ReduceOp::*;
    for op in [Sum, Mean, Max] {
        for axis in 0..3 {
            let mut b = B::new(format!("reduce_{op:?} f32[5,7,3] axis {axis}").to_lowercase());
            let x = b.f32_in(&[5, 7, 3], &[], -1.0, 1.0);
            let o = b.g.reduce(op, x, axis).expect("reduce");
            v.push(b.finish(Kernel::Reduce { op, axis }, o, if op == Max { Check::Exact } else { REDUCE }));
        }
    }
    for (op, shape, axis) in [(Sum, vec![1usize, 640], 1usize), (Max, vec![33], 0), (Mean, vec![4, 257], 1)] {
        let mut b = B::new(format!("reduce_{op:?} f32{shape:?} axis {axis}").to_lowercase());
        let x = b.f32_in(&shape, &[], -1.0, 1.0);
        let o = b.g.reduce(op, x, axis).expect("reduce");
        v.push(b.finish(Kernel::Reduce { op, axis }, o, if op == Max { Check::Exact } else { REDUCE }));
    }
}

fn matmul_f32(v: &mut Vec<Case>) {
    type Mm = (&'static str, bool, (Vec<usize>, Vec<View>), (Vec<usize>, Vec<View>));
    let list: Vec<Mm> = vec![
        ("[7,13]·[13,9]", false, (vec![7, 13], vec![]), (vec![13, 9], vec![])),
        ("[7,13]·[9,13]ᵀ", true, (vec![7, 13], vec![]), (vec![9, 13], vec![])),
        ("[2,3,5,11] permuted a · b [2,3,6,11]ᵀ broadcast over dim 0", true, (vec![2, 5, 3, 11], vec![P(vec![0, 2, 1, 3])]), (vec![1, 3, 6, 11], vec![E(vec![2, 3, 6, 11])])),
        ("[4,3,11] · b [4,11,6] a transposed view", false, (vec![4, 3, 11], vec![]), (vec![4, 6, 11], vec![P(vec![0, 2, 1])])),
        ("[8,1]·[1,8] (k = 1)", false, (vec![8, 1], vec![]), (vec![1, 8], vec![])),
        ("rank 5 [2,2,3,17,33] a broadcast · [2,2,3,33,19]", false, (vec![2, 1, 3, 17, 33], vec![E(vec![2, 2, 3, 17, 33])]), (vec![2, 2, 3, 33, 19], vec![])),
        ("q·kᵀ [2,4,1,64] · [2,4,37,64]ᵀ (grouped-query broadcast)", true, (vec![2, 4, 1, 64], vec![]), (vec![2, 1, 37, 64], vec![E(vec![2, 4, 37, 64])])),
        ("[5,32] sliced a · [32,7]", false, (vec![5, 40], vec![S(1, 3, 35)]), (vec![32, 7], vec![])),
        ("p·v [3,9,23] · [3,23,40]", false, (vec![3, 9, 23], vec![]), (vec![3, 23, 40], vec![])),
    ];
    for (what, t, (sa, va), (sb, vb)) in list {
        let mut b = B::new(format!("matmul_f32 {what}"));
        let x = b.f32_in(&sa, &va, -1.0, 1.0);
        let y = b.f32_in(&sb, &vb, -1.0, 1.0);
        let o = b.g.matmul(x, y, t).expect("matmul");
        v.push(b.finish(Kernel::MatMul { transpose_rhs: t }, o, MATMUL));
    }
}

/// The weight formats of the quantized matmuls and gathers.
const TYPES: [GgmlType; 9] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];

fn wdtype(ty: GgmlType) -> DType {
    if ty == GgmlType::F32 {
        DType::F32
    } else {
        DType::Quant(ty)
    }
}

/// The activation format of the q8 numerics for a weight format (as tg-kernels and the
/// OpenCL kernels choose it), or `None` where the numerics stay f32.
fn q8_act(ty: GgmlType) -> Option<GgmlType> {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => Some(GgmlType::Q8_0),
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => Some(GgmlType::Q8_K),
        _ => None,
    }
}

/// Rows of `k` rounded as the q8 numerics round them (reference quantizer, dequantized).
fn q8_round(x: &[f32], k: usize, act: GgmlType) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    let mut blocks = vec![0u8; act.row_bytes(k).expect("q8 row bytes")];
    for (row, o) in x.chunks(k).zip(out.chunks_mut(k)) {
        match act {
            GgmlType::Q8_0 => tg_quant::quantize_row_q8_0(row, &mut blocks).expect("quantize q8_0"),
            _ => tg_quant::quantize_row_q8_k(row, &mut blocks).expect("quantize q8_k"),
        }
        tg_quant::dequantize_row(act, &blocks, o).expect("dequantize q8");
    }
    out
}

fn row_len(ty: GgmlType) -> usize {
    match ty.block_size() {
        1 => 70,
        32 => 96,
        _ => 768,
    }
}

/// A quantized product case: `x [xs]` (uniform in [-1, 1], its first element set to
/// `outlier` when given) times a `[n, k]` weight of `ty` (random blocks), transposed, plus an
/// f32 `addend` of the given shape when given, in f32 or q8 numerics; named
/// `"{head} {numerics}{tail}"` (lower case).
#[allow(clippy::too_many_arguments)]
fn matmul_quant_case(head: &str, tail: &str, ty: GgmlType, xs: &[usize], n: usize, qa: bool, outlier: Option<f32>, addend: Option<&[usize]>) -> Case {
    let k = *xs.last().expect("x has a last dim");
    let mut b = B::new(format!("{head} {}{tail}", if qa { "q8 numerics" } else { "f32 numerics" }).to_lowercase());
    let seed = b.rng.gen();
    let wb = tg_quant::random_blocks(ty, n * k, seed);
    let mut xd = b.uniform(numel(xs), -1.0, 1.0);
    if let Some(v) = outlier {
        xd[0] = v;
    }
    let x = b.input(xs, f(xd.clone()), &[]);
    let check = match (qa, q8_act(ty)) {
        (true, Some(act)) => {
            b.reference_values(x, q8_round(&xd, k, act));
            Q8
        }
        _ => MATMUL,
    };
    let w = b.weight(wdtype(ty), &[n, k], wb);
    match addend {
        Some(cs) => {
            let c = b.f32_in(cs, &[], -1.0, 1.0);
            let o = b.g.push(Op::MatMulAdd { transpose_rhs: true }, &[x, w, c], None).expect("matmul_add");
            b.finish(Kernel::MatMulQuantAdd { quantize_activations: qa }, o, check)
        }
        None => {
            let o = b.g.matmul(x, w, true).expect("matmul");
            b.finish(Kernel::MatMulQuant { quantize_activations: qa }, o, check)
        }
    }
}

fn matmul_quant(v: &mut Vec<Case>) {
    let n = 37;
    for ty in TYPES {
        let k = row_len(ty);
        // m = 1 and 5 take the CPU's matrix-vector path, 12 rows (rank 3) the tiled one.
        for lead in [vec![1usize], vec![5], vec![2, 6]] {
            for qa in [false, true] {
                let mut xs = lead.clone();
                xs.push(k);
                // An outlier: its block's scale is larger.
                v.push(matmul_quant_case(&format!("{ty} x{xs:?} · W[{n},{k}]ᵀ"), "", ty, &xs, n, qa, Some(2.5), None));
            }
        }
    }
    // The add epilogue: a bias row ([n] or [1, n]) or a residual of the output's shape.
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K] {
        let k = row_len(ty);
        for (what, lead, cshape) in [("bias [n]", vec![5usize], vec![n]), ("bias [1,n]", vec![1], vec![1, n]), ("residual", vec![2, 6], vec![2, 6, n])] {
            for qa in [false, true] {
                let mut xs = lead.clone();
                xs.push(k);
                v.push(matmul_quant_case(&format!("{ty} x{xs:?} · W[{n},{k}]ᵀ + {what}"), "", ty, &xs, n, qa, None, Some(&cshape)));
            }
        }
    }
}

fn gather(v: &mut Vec<Case>) {
    let rows = 11;
    for ty in TYPES {
        let k = match ty.block_size() {
            1 => 45,
            32 => 64,
            _ => 256,
        };
        let mut b = B::new(format!("gather {ty} table[{rows},{k}] ids[2,3]").to_lowercase());
        let seed = b.rng.gen();
        let t = b.weight(wdtype(ty), &[rows, k], tg_quant::random_blocks(ty, rows * k, seed));
        let mut ids = b.ints(6, 0, rows as i32 - 1);
        ids[3] = ids[0]; // a repeated id
        ids[5] = rows as i32 - 1; // the last row
        let i = b.input(&[2, 3], HostData::I32(ids), &[]);
        let o = b.g.gather(t, i).expect("gather");
        v.push(b.finish(Kernel::Gather, o, Check::Exact));
    }
    {
        let mut b = B::new("gather q8_0 table[11,64] scalar id");
        let seed = b.rng.gen();
        let t = b.weight(DType::Quant(GgmlType::Q8_0), &[rows, 64], tg_quant::random_blocks(GgmlType::Q8_0, rows * 64, seed));
        let i = b.input(&[], HostData::I32(vec![7]), &[]);
        let o = b.g.gather(t, i).expect("gather");
        v.push(b.finish(Kernel::Gather, o, Check::Exact));
    }
    for (ty, bad) in [(GgmlType::F32, rows as i32), (GgmlType::Q4_K, -1)] {
        let k = if ty == GgmlType::F32 { 45 } else { 256 };
        let mut b = B::new(format!("gather {ty} id {bad} outside the table (error)").to_lowercase());
        let seed = b.rng.gen();
        b.weight(wdtype(ty), &[rows, k], tg_quant::random_blocks(ty, rows * k, seed));
        b.input(&[2], HostData::I32(vec![1, bad]), &[]);
        v.push(b.finish_error(Kernel::Gather, Layout::contiguous(&[2, k], DType::F32), "an id outside the table"));
    }
}

fn movement(v: &mut Vec<Case>) {
    let copies: Vec<(&str, Vec<usize>, Vec<View>, DType)> = vec![
        ("f32 [3,33] contiguous", vec![3, 33], vec![], DType::F32),
        ("f32 transposed [5,7]ᵀ", vec![5, 7], vec![P(vec![1, 0])], DType::F32),
        ("f32 permuted [2,3,4] -> [4,2,3]", vec![2, 3, 4], vec![P(vec![2, 0, 1])], DType::F32),
        ("f32 sliced [6,10] cols 2..9", vec![6, 10], vec![S(1, 2, 9)], DType::F32),
        ("f32 row-broadcast [7] -> [4,7]", vec![7], vec![E(vec![4, 7])], DType::F32),
        ("f32 column-broadcast [4,1] -> [4,7]", vec![4, 1], vec![E(vec![4, 7])], DType::F32),
        ("f32 sliced then permuted [4,9,6]", vec![4, 9, 6], vec![S(1, 2, 7), P(vec![2, 0, 1])], DType::F32),
        ("f32 reshaped then sliced [12,5] -> [3,4,5]", vec![12, 5], vec![R(vec![3, 4, 5]), S(1, 1, 3)], DType::F32),
        ("i32 transposed [3,8]ᵀ", vec![3, 8], vec![P(vec![1, 0])], DType::I32),
        ("bool sliced [5,6] rows 1..4", vec![5, 6], vec![S(0, 1, 4)], DType::Bool),
        // Nine dims that do not merge (past the OpenCL kernels' eight strided dims).
        ("f32 rank 9 reversed [2;9]", vec![2; 9], vec![P((0..9).rev().collect())], DType::F32),
    ];
    for (what, shape, views, dtype) in copies {
        let mut b = B::new(format!("copy {what}"));
        let n = numel(&shape);
        let d = match dtype {
            DType::F32 => f(b.uniform(n, -1.0, 1.0)),
            DType::I32 => HostData::I32(b.ints(n, -1 << 20, 1 << 20)),
            _ => HostData::Bool(b.bools(n)),
        };
        let x = b.input(&shape, d, &views);
        // The graph's value of a view is the copy's result; its output node is the view.
        v.push(b.finish(Kernel::Copy, x, Check::Exact));
    }
    let concats: Vec<(&str, Vec<Vec<usize>>, usize, DType)> = vec![
        ("f32 axis 0", vec![vec![2, 3, 4], vec![1, 3, 4]], 0, DType::F32),
        ("f32 axis 1, three operands", vec![vec![2, 3, 4], vec![2, 5, 4], vec![2, 1, 4]], 1, DType::F32),
        ("f32 axis 2", vec![vec![3, 2, 5], vec![3, 2, 7]], 2, DType::F32),
        ("i32 axis 1", vec![vec![4, 3], vec![4, 2]], 1, DType::I32),
        ("bool axis 0", vec![vec![2, 5], vec![3, 5]], 0, DType::Bool),
    ];
    for (what, shapes, axis, dtype) in concats {
        let mut b = B::new(format!("concat {what}"));
        let mut xs = Vec::new();
        for s in &shapes {
            let n = numel(s);
            let d = match dtype {
                DType::F32 => f(b.uniform(n, -1.0, 1.0)),
                DType::I32 => HostData::I32(b.ints(n, -1000, 1000)),
                _ => HostData::Bool(b.bools(n)),
            };
            xs.push(b.input(s, d, &[]));
        }
        let o = b.g.concat(&xs, axis).expect("concat");
        v.push(b.finish(Kernel::Concat { axis }, o, Check::Exact));
    }
}

fn store_rows(v: &mut Vec<Case>) {
    // (state shape, dtype, axis, rows along the axis, offset, offset shape, error expected)
    type Sr = (Vec<usize>, DType, usize, usize, i32, Vec<usize>, bool);
    let list: Vec<Sr> = vec![
        (vec![2, 10, 6], DType::F32, 1, 3, 0, vec![], false),
        (vec![2, 10, 6], DType::F32, 1, 3, 4, vec![], false),
        (vec![2, 10, 6], DType::F32, 1, 3, 7, vec![1], false),
        (vec![12, 5], DType::I32, 0, 3, 9, vec![1], false),
        (vec![3, 4], DType::Bool, 0, 1, 2, vec![], false),
        (vec![4, 16], DType::F32, 1, 1, 15, vec![], false),
        (vec![2, 10, 6], DType::F32, 1, 3, 8, vec![], true),
        (vec![2, 10, 6], DType::F32, 1, 3, -1, vec![], true),
    ];
    for (shape, dtype, axis, k, off, off_shape, err) in list {
        let mut rs = shape.clone();
        rs[axis] = k;
        let name = format!("store_rows {dtype}{shape:?} rows{rs:?} axis {axis} at {off}{}", if err { " (past the end: error)" } else { "" });
        let mut b = B::new(name);
        let n = numel(&shape);
        let gen = |b: &mut B, n: usize| match dtype {
            DType::F32 => f(b.uniform(n, -1.0, 1.0)),
            DType::I32 => HostData::I32(b.ints(n, -1000, 1000)),
            _ => HostData::Bool(b.bools(n)),
        };
        let mut st = gen(&mut b, n);
        if !err {
            // The rows to be written start poisoned: a kernel that skips some shows it.
            let inner: usize = shape[axis + 1..].iter().product();
            let outer: usize = shape[..axis].iter().product();
            for a in 0..outer {
                for r in off as usize..off as usize + k {
                    for j in 0..inner {
                        let i = (a * shape[axis] + r) * inner + j;
                        match &mut st {
                            HostData::F32(x) => x[i] = f32::NAN,
                            HostData::I32(x) => x[i] = -1,
                            HostData::Bool(x) => x[i] = 0xFF,
                        }
                    }
                }
            }
        }
        let s = b.state(&shape, st);
        let rd = gen(&mut b, numel(&rs));
        let r = b.input(&rs, rd, &[]);
        let o = b.input(&off_shape, HostData::I32(vec![off]), &[]);
        if err {
            v.push(b.finish_error(Kernel::StoreRows { axis }, Layout::contiguous(&shape, dtype), "rows past the end of the state"));
        } else {
            let out = b.g.store_rows(s, r, o, axis).expect("store_rows");
            v.push(b.finish(Kernel::StoreRows { axis }, out, Check::Exact));
        }
    }
}

/// RoPE tables for positions `p0..p0 + seq`: `[seq · d/2]` cos and sin.
fn rope_tables(seq: usize, d: usize, p0: usize) -> (Vec<f32>, Vec<f32>) {
    let h = d / 2;
    let ang: Vec<f64> = (0..seq * h).map(|i| ((p0 + i / h) as f64) * 10000f64.powf(-2.0 * (i % h) as f64 / d as f64)).collect();
    (ang.iter().map(|a| a.cos() as f32).collect(), ang.iter().map(|a| a.sin() as f32).collect())
}

fn fused(v: &mut Vec<Case>) {
    let eps = 1e-6f64;
    for (shape, wshape) in [(vec![5usize, 33], vec![33usize]), (vec![1, 640], vec![640]), (vec![2, 3, 17], vec![1, 17])] {
        let mut b = B::new(format!("rms_norm f32{shape:?} w{wshape:?}"));
        let x = b.f32_in(&shape, &[], -2.0, 2.0);
        let w = b.f32_in(&wshape, &[], -1.5, 1.5);
        let o = b.g.push(Op::RmsNorm { eps_bits: eps.to_bits() }, &[x, w], None).expect("rms_norm");
        v.push(b.finish(Kernel::RmsNorm { eps_bits: eps.to_bits() }, o, TRANSC));
    }
    for shape in [vec![5usize, 33], vec![3, 2, 40]] {
        let mut b = B::new(format!("add_rms_norm f32{shape:?}"));
        let x = b.f32_in(&shape, &[], -2.0, 2.0);
        let y = b.f32_in(&shape, &[], -2.0, 2.0);
        let w = b.f32_in(&shape[shape.len() - 1..], &[], -1.5, 1.5);
        let o = b.g.push(Op::AddRmsNorm { eps_bits: eps.to_bits() }, &[x, y, w], None).expect("add_rms_norm");
        v.push(b.finish(Kernel::AddRmsNorm { eps_bits: eps.to_bits() }, o, TRANSC));
    }
    // RoPE: tables [seq, 1, d/2] (what the graph broadcasts) or [seq, d/2] (one row per
    // position, as the kernels read them; the graph reshapes it).
    for (norm, seq, heads, d, rank2) in [(false, 5usize, 3usize, 10usize, false), (false, 7, 2, 64, true), (true, 5, 3, 10, false), (true, 4, 4, 32, true)] {
        let h = d / 2;
        let tshape = if rank2 { vec![seq, h] } else { vec![seq, 1, h] };
        let name = format!("{} x[{seq},{heads},{d}] tables{tshape:?}", if norm { "rms_norm_rope_neox" } else { "rope_neox" });
        let mut b = B::new(name);
        let x = b.f32_in(&[seq, heads, d], &[], -2.0, 2.0);
        let w = norm.then(|| b.f32_in(&[d], &[], -1.5, 1.5));
        let (c, s) = rope_tables(seq, d, 3);
        let ct = b.input(&tshape, f(c), &[]);
        let st = b.input(&tshape, f(s), &[]);
        let (cg, sg) = if rank2 { (b.g.reshape(ct, &[seq, 1, h]).expect("reshape"), b.g.reshape(st, &[seq, 1, h]).expect("reshape")) } else { (ct, st) };
        let (op, kernel, ins) = match w {
            Some(w) => (Op::RmsNormRopeNeox { eps_bits: eps.to_bits() }, Kernel::RmsNormRopeNeox { eps_bits: eps.to_bits() }, vec![x, w, cg, sg]),
            None => (Op::RopeNeox, Kernel::RopeNeox, vec![x, cg, sg]),
        };
        let o = b.g.push(op, &ins, None).expect("rope");
        v.push(b.finish(kernel, o, TRANSC));
    }
    for (shape, r) in [(vec![7usize, 13], 4.0f32), (vec![3, 5, 33], 6.0)] {
        let mut b = B::new(format!("gelu_tanh f32{shape:?}"));
        let x = b.f32_in(&shape, &[], -r, r);
        let o = b.g.push(Op::GeluTanh, &[x], None).expect("gelu");
        v.push(b.finish(Kernel::GeluTanh, o, TRANSC));
        let mut b = B::new(format!("gated_gelu f32{shape:?}"));
        let x = b.f32_in(&shape, &[], -r, r);
        let y = b.f32_in(&shape, &[], -2.0, 2.0);
        let o = b.g.push(Op::GatedGelu, &[x, y], None).expect("gated_gelu");
        v.push(b.finish(Kernel::GatedGelu, o, TRANSC));
    }
    for (what, shape, r, masked) in
        [("f32[7,13]", vec![7usize, 13], 5.0f32, false), ("f32[3,4,33] wide range", vec![3, 4, 33], 20.0, false), ("f32[5,9] with -inf logits", vec![5, 9], 5.0, true)]
    {
        let mut b = B::new(format!("softmax {what}"));
        let mut x = b.uniform(numel(&shape), -r, r);
        if masked {
            // Row i has its first i logits at -inf (never a whole row).
            let n = shape[1];
            for (i, row) in x.chunks_mut(n).enumerate() {
                row[..i.min(n - 1)].fill(f32::NEG_INFINITY);
            }
        }
        let xt = b.input(&shape, f(x), &[]);
        let o = b.g.push(Op::Softmax, &[xt], None).expect("softmax");
        v.push(b.finish(Kernel::Softmax, o, TRANSC));
    }
}

/// A window of `size` with strides, dilations and padding before / after per spatial axis.
fn window(size: &[usize], stride: &[usize], dilation: &[usize], pad_begin: &[usize], pad_end: &[usize]) -> Window {
    Window { size: size.to_vec(), stride: stride.to_vec(), dilation: dilation.to_vec(), pad_begin: pad_begin.to_vec(), pad_end: pad_end.to_vec() }
}

/// Convolution, im2col and pooling over `[N, C, *S]` (1-D and 2-D): groups (depthwise too),
/// strides, dilations, asymmetric padding, padding wider than the window (windows entirely in
/// padding: conv 0, max −∞, averages 0), an STFT-like 1x400 window of stride 160, and sizes
/// past the CPU's thread and scratch thresholds. Inputs sit at random element offsets.
fn windows(v: &mut Vec<Case>) {
    // (name, x shape, output channels, groups, window, weights bound as a weight)
    type Cv = (&'static str, Vec<usize>, usize, usize, Window, bool);
    let convs: Vec<Cv> = vec![
        ("1d x[2,3,33] k3 pad 1+1", vec![2, 3, 33], 4, 1, window(&[3], &[1], &[1], &[1], &[1]), false),
        ("1d x[2,4,33] k5 s2 d2 pad 3+1 groups 2", vec![2, 4, 33], 6, 2, window(&[5], &[2], &[2], &[3], &[1]), false),
        ("1d x[1,1,1999] k400 s160 pad 200+200 (stft)", vec![1, 1, 1999], 8, 1, window(&[400], &[160], &[1], &[200], &[200]), true),
        ("2d x[2,3,9,17] k3 pad 1", vec![2, 3, 9, 17], 5, 1, window(&[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), true),
        ("2d x[2,4,11,17] k3 s2 pad [1,0]+[0,2] depthwise", vec![2, 4, 11, 17], 4, 4, window(&[3, 3], &[2, 2], &[1, 1], &[1, 0], &[0, 2]), false),
        ("2d x[2,4,9,13] k3x5 s[2,1] d[1,2] pad [1,2]+[0,2] groups 2", vec![2, 4, 9, 13], 6, 2, window(&[3, 5], &[2, 1], &[1, 2], &[1, 2], &[0, 2]), true),
        ("2d x[1,2,5,7] k2 pad 3+3 (windows all padding)", vec![1, 2, 5, 7], 3, 1, window(&[2, 2], &[1, 1], &[1, 1], &[3, 3], &[3, 3]), false),
        ("2d x[1,8,33,33] k3 pad 1 (large)", vec![1, 8, 33, 33], 16, 1, window(&[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), true),
        // Three spatial axes: the interpreter defines it; the kernels take 1 or 2 (not supported).
        ("3d x[1,2,4,5,6] k2", vec![1, 2, 4, 5, 6], 3, 1, window(&[2, 2, 2], &[1, 1, 1], &[1, 1, 1], &[0, 0, 0], &[0, 0, 0]), false),
    ];
    for (what, xs, m, groups, win, as_weight) in convs {
        let mut b = B::new(format!("conv {what} m{m}"));
        let x = b.f32_in(&xs, &[], -1.0, 1.0);
        let mut ws = vec![m, xs[1] / groups];
        ws.extend(&win.size);
        let w = if as_weight {
            let wd = b.uniform(numel(&ws), -1.0, 1.0);
            b.weight(DType::F32, &ws, wd.iter().flat_map(|x| x.to_le_bytes()).collect())
        } else {
            b.f32_in(&ws, &[], -1.0, 1.0)
        };
        let o = b.g.conv(x, w, win.clone(), groups).expect("conv");
        v.push(b.finish(Kernel::Conv { window: win, groups }, o, MATMUL));
    }
    // The fused epilogue: conv + per-channel bias + each activation.
    let acts = [Act::None, Act::Relu, Act::LeakyRelu { alpha_bits: 0.2f64.to_bits() }, Act::Silu, Act::LeakyReluFloor { alpha_bits: 0.2f64.to_bits(), floor_bits: (-0.4f64).to_bits() }];
    let fused: Vec<(&str, Vec<usize>, usize, usize, Window)> = vec![
        ("1d x[2,4,33] k5 s2 d2 pad 3+1 groups 2", vec![2, 4, 33], 6, 2, window(&[5], &[2], &[2], &[3], &[1])),
        ("2d x[2,3,9,17] k3 pad 1", vec![2, 3, 9, 17], 5, 1, window(&[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1])),
        ("2d x[1,8,33,33] k3 pad 1 (large)", vec![1, 8, 33, 33], 16, 1, window(&[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1])),
        // Where the CPU takes Winograd: F(2×2, 3×3) on a 24×24 plane, F(4×4, 3×3) on 48×48.
        ("2d x[1,16,24,24] k3 pad 1 (Winograd 2x2 on the CPU)", vec![1, 16, 24, 24], 16, 1, window(&[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1])),
        ("2d x[1,16,48,47] k3 pad 1 (Winograd 4x4 on the CPU)", vec![1, 16, 48, 47], 24, 1, window(&[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1])),
    ];
    for (i, (what, xs, m, groups, win)) in fused.into_iter().enumerate() {
        // Each activation without a residual, then one with a residual (the output's shape)
        // added before the activation: each CPU path (direct, implicit GEMM, Winograd) by
        // the shapes above.
        let plain = if i == 1 { acts.to_vec() } else { vec![acts[i % 5]] };
        for (act, residual) in plain.into_iter().map(|a| (a, false)).chain([(acts[(i + 1) % 5], true)]) {
            let mut b = B::new(format!("conv_bias{} {what} m{m} {act:?}", if residual { " + residual" } else { "" }));
            let x = b.f32_in(&xs, &[], -1.0, 1.0);
            let mut ws = vec![m, xs[1] / groups];
            ws.extend(&win.size);
            let w = b.f32_in(&ws, &[], -1.0, 1.0);
            let mut bs = vec![m];
            bs.extend(std::iter::repeat_n(1, xs.len() - 2));
            let mut ins = vec![x, w, b.f32_in(&bs, &[], -1.0, 1.0)];
            if residual {
                let out: Vec<usize> = [xs[0], m].into_iter().chain(win.output(&xs[2..]).expect("output")).collect();
                ins.push(b.f32_in(&out, &[], -1.0, 1.0));
            }
            let op = Op::ConvBias { window: win.clone(), groups, act };
            let o = b.g.push(op, &ins, None).expect("conv_bias");
            v.push(b.finish(Kernel::ConvBias { window: win.clone(), groups, act }, o, MATMUL));
        }
    }
    // Group normalisation: instance norm (groups = C), grouped, one group; each activation;
    // γ and β one per channel, or one per image and channel (a scale and shift folded in).
    let norms: Vec<(&str, Vec<usize>, usize, bool)> = vec![
        ("x[2,6,5,7] groups 3", vec![2, 6, 5, 7], 3, false),
        ("x[1,4,33] instance norm", vec![1, 4, 33], 4, false),
        ("x[2,8,16,16] one group", vec![2, 8, 16, 16], 1, false),
        ("x[3,6,5,7] groups 3, γ β per image", vec![3, 6, 5, 7], 3, true),
    ];
    for (i, (what, xs, groups, per_image)) in norms.into_iter().enumerate() {
        for act in if i == 0 { acts.to_vec() } else { vec![acts[(i + 2) % 5]] } {
            let mut b = B::new(format!("group_norm {what} {act:?}"));
            let x = b.f32_in(&xs, &[], -2.0, 3.0);
            let mut cs = if per_image { vec![xs[0], xs[1]] } else { vec![xs[1]] };
            cs.extend(std::iter::repeat_n(1, xs.len() - cs.len() - 1 + usize::from(per_image)));
            let (gm, bt) = (b.f32_in(&cs, &[], -2.0, 2.0), b.f32_in(&cs, &[], -1.0, 1.0));
            let op = Op::GroupNorm { groups, eps_bits: 1e-5f64.to_bits(), act };
            let o = b.g.push(op, &[x, gm, bt], None).expect("group_norm");
            v.push(b.finish(Kernel::GroupNorm { groups, eps_bits: 1e-5f64.to_bits(), act }, o, REDUCE));
        }
    }
    // (name, x shape, groups, window)
    let unfolds: Vec<(&str, Vec<usize>, usize, Window)> = vec![
        ("1d x[2,3,17] k3 s2 pad 1+0", vec![2, 3, 17], 1, window(&[3], &[2], &[1], &[1], &[0])),
        ("1d x[1,1,1999] k400 s160 pad 200+200 (stft)", vec![1, 1, 1999], 1, window(&[400], &[160], &[1], &[200], &[200])),
        ("2d x[2,4,9,11] k3 s2 pad 1 groups 2", vec![2, 4, 9, 11], 2, window(&[3, 3], &[2, 2], &[1, 1], &[1, 1], &[1, 1])),
        ("2d x[1,2,7,9] k2x3 d[2,1] pad [0,1]+[1,1]", vec![1, 2, 7, 9], 1, window(&[2, 3], &[1, 1], &[2, 1], &[0, 1], &[1, 1])),
    ];
    for (what, xs, groups, win) in unfolds {
        let mut b = B::new(format!("im2col {what}"));
        let x = b.f32_in(&xs, &[], -1.0, 1.0);
        let o = b.g.im2col(x, win.clone(), groups).expect("im2col");
        v.push(b.finish(Kernel::Im2Col { window: win, groups }, o, Check::Exact));
    }
    let pools: Vec<(&str, Vec<usize>, Window)> = vec![
        ("1d x[2,3,33] k3 pad 1+1", vec![2, 3, 33], window(&[3], &[1], &[1], &[1], &[1])),
        ("2d x[2,3,9,17] k3 s2 pad 1", vec![2, 3, 9, 17], window(&[3, 3], &[2, 2], &[1, 1], &[1, 1], &[1, 1])),
        ("2d x[2,2,8,17] k2 s2", vec![2, 2, 8, 17], window(&[2, 2], &[2, 2], &[1, 1], &[0, 0], &[0, 0])),
        ("2d x[1,2,9,21] k3x5 s[1,2] pad [2,4]+[1,3] (windows mostly padding)", vec![1, 2, 9, 21], window(&[3, 5], &[1, 2], &[1, 1], &[2, 4], &[1, 3])),
        ("2d x[1,2,5,7] k2 pad 3+3 (windows all padding)", vec![1, 2, 5, 7], window(&[2, 2], &[1, 1], &[1, 1], &[3, 3], &[3, 3])),
    ];
    for kind in [PoolKind::Max, PoolKind::Avg, PoolKind::AvgPadded] {
        for (what, xs, win) in pools.clone() {
            let mut b = B::new(format!("pool {kind:?} {what}").to_lowercase());
            let x = b.f32_in(&xs, &[], -2.0, 2.0);
            let o = b.g.pool(x, kind, win.clone()).expect("pool");
            v.push(b.finish(Kernel::Pool { kind, window: win }, o, if kind == PoolKind::Max { Check::Exact } else { REDUCE }));
        }
    }
}

/// An additive attention mask `[sq · sk]`: 0 where query `i` (at position `sk − sq + i`) may
/// see key `j`, −inf elsewhere.
fn mask(sq: usize, sk: usize, allow: impl Fn(usize, usize) -> bool) -> Vec<f32> {
    (0..sq * sk).map(|e| if allow(sk - sq + e / sk, e % sk) { 0.0 } else { f32::NEG_INFINITY }).collect()
}

fn attention(v: &mut Vec<Case>) {
    // (n_kv, group, sq, sk, d, scale (0 = 1/√d), mask name, mask, mask shape)
    type A = (usize, usize, usize, usize, usize, f64, &'static str, Vec<f32>, Vec<usize>);
    let segs = [0usize, 0, 1, 1, 1, 2];
    let docs: Vec<usize> = (0..11).map(|j| usize::from(j >= 4)).collect();
    let list: Vec<A> = vec![
        (2, 2, 5, 9, 16, 0.0, "causal (grouped-query)", mask(5, 9, |p, j| j <= p), vec![5, 9]),
        (1, 1, 1, 13, 64, 0.0, "no mask (decode)", vec![0.0; 13], vec![1, 13]),
        (2, 3, 7, 7, 32, 0.0, "sliding window 3", mask(7, 7, |p, j| j <= p && p - j < 3), vec![1, 1, 7, 7]),
        (1, 4, 6, 6, 80, 0.0, "segments, bidirectional", mask(6, 6, |p, j| segs[p] == segs[j]), vec![6, 6]),
        (3, 1, 4, 11, 128, 0.0, "causal within documents", mask(4, 11, |p, j| j <= p && docs[p] == docs[j]), vec![4, 11]),
        (2, 2, 1, 20, 64, 1.0, "decode, window 8 (leading keys masked), scale 1", mask(1, 20, |p, j| j <= p && p - j < 8), vec![1, 20]),
        (1, 2, 3, 5, 256, 0.0, "causal, head_dim 256", mask(3, 5, |p, j| j <= p), vec![3, 5]),
        (1, 1, 2, 3, 320, 0.0, "causal, head_dim 320", mask(2, 3, |p, j| j <= p), vec![2, 3]),
    ];
    for seq_major in [false, true] {
        for (nkv, g, sq, sk, d, scale, what, m, mshape) in list.clone() {
            let scale = if scale == 0.0 { 1.0 / (d as f64).sqrt() } else { scale };
            let layout = if seq_major { "seq-major" } else { "head-major" };
            let mut b = B::new(format!("attention {layout} n_kv={nkv} group={g} sq={sq} sk={sk} d={d}: {what}"));
            let qs = if seq_major { vec![sq, nkv, g, d] } else { vec![nkv, g, sq, d] };
            let q = b.f32_in(&qs, &[], -1.0, 1.0);
            let k = b.f32_in(&[nkv, 1, sk, d], &[], -1.0, 1.0);
            let vv = b.f32_in(&[nkv, 1, sk, d], &[], -1.0, 1.0);
            let mt = b.input(&mshape, f(m), &[]);
            let bits = scale.to_bits();
            let (op, kernel) = if seq_major {
                (Op::AttentionSeqMajor { scale_bits: bits }, Kernel::AttentionSeqMajor { scale_bits: bits })
            } else {
                (Op::Attention { scale_bits: bits }, Kernel::Attention { scale_bits: bits })
            };
            let o = b.g.push(op, &[q, k, vv, mt], None).expect("attention");
            v.push(b.finish(kernel, o, TRANSC));
        }
    }
}

/// Shapes that reach each launch shape of the shared GPU kernels (tg-gpu): the 64² tiles of
/// the products and convolutions with ragged edges, matrix-vector products at the 8-row
/// limit, plain weight rows not a multiple of a tile step, attention with more than eight
/// query heads per kv head and whole key tiles masked in the middle of a row, rows longer and
/// shorter than a work-group.
fn gpu_paths(v: &mut Vec<Case>) {
    // (type, m rows, n, k): m = 8 is the last matrix-vector row count, 9 the first tiled one.
    let mq: [(GgmlType, Vec<usize>, usize, usize); 6] = [
        (GgmlType::Q4_K, vec![70], 130, 512),
        (GgmlType::Q8_0, vec![2, 33], 64, 96),
        (GgmlType::Q6_K, vec![8], 65, 256),
        (GgmlType::Q5_0, vec![9], 33, 64),
        (GgmlType::F32, vec![66], 70, 20),
        (GgmlType::BF16, vec![3, 3], 40, 44),
    ];
    for (ty, lead, n, k) in mq {
        for qa in [false, true] {
            let mut xs = lead.clone();
            xs.push(k);
            v.push(matmul_quant_case(&format!("{ty} x{xs:?} · W[{n},{k}]ᵀ"), " (gpu tiles)", ty, &xs, n, qa, None, None));
        }
    }
    v.push(matmul_quant_case("q4_k x[67,256] · W[96,256]ᵀ + residual", " (gpu tiles)", GgmlType::Q4_K, &[67, 256], 96, false, None, Some(&[67, 96])));
    for (what, a_shape, a_views, b_shape, b_views, tr) in [
        ("[70,40]·[40,130]", vec![70usize, 40], vec![], vec![40usize, 130], vec![], false),
        ("[70,40]·[130,40]ᵀ", vec![70, 40], vec![], vec![130, 40], vec![], true),
        ("[3,65,17] a transposed view · [3,17,66]", vec![3, 17, 65], vec![P(vec![0, 2, 1])], vec![3, 17, 66], vec![], false),
    ] {
        let mut b = B::new(format!("matmul_f32 {what} (gpu tiles)"));
        let x = b.f32_in(&a_shape, &a_views, -1.0, 1.0);
        let y = b.f32_in(&b_shape, &b_views, -1.0, 1.0);
        let o = b.g.matmul(x, y, tr).expect("matmul");
        v.push(b.finish(Kernel::MatMul { transpose_rhs: tr }, o, MATMUL));
    }
    {
        let win = window(&[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]);
        let (xs, m, act) = (vec![2usize, 8, 12, 11], 66usize, Act::Silu);
        let mut b = B::new(format!("conv_bias + residual 2d x{xs:?} k3 pad 1 m{m} {act:?} (gpu tiles)"));
        let x = b.f32_in(&xs, &[], -1.0, 1.0);
        let w = b.f32_in(&[m, xs[1], 3, 3], &[], -1.0, 1.0);
        let bias = b.f32_in(&[m, 1, 1], &[], -1.0, 1.0);
        let r = b.f32_in(&[xs[0], m, 12, 11], &[], -1.0, 1.0);
        let o = b.g.push(Op::ConvBias { window: win.clone(), groups: 1, act }, &[x, w, bias, r], None).expect("conv_bias");
        v.push(b.finish(Kernel::ConvBias { window: win, groups: 1, act }, o, MATMUL));
    }
    for seq_major in [false, true] {
        // Ten query heads per kv head (two groups of at most eight), d = 72, a window of 4 over
        // 40 keys: the key tiles before the window are skipped whole.
        let (nkv, g, sq, sk, d) = (1usize, 10usize, 3usize, 40usize, 72usize);
        let layout = if seq_major { "seq-major" } else { "head-major" };
        let mut b = B::new(format!("attention {layout} n_kv={nkv} group={g} sq={sq} sk={sk} d={d}: window 4 (gpu tiles)"));
        let qs = if seq_major { vec![sq, nkv, g, d] } else { vec![nkv, g, sq, d] };
        let q = b.f32_in(&qs, &[], -1.0, 1.0);
        let k = b.f32_in(&[nkv, 1, sk, d], &[], -1.0, 1.0);
        let vv = b.f32_in(&[nkv, 1, sk, d], &[], -1.0, 1.0);
        let mt = b.input(&[sq, sk], f(mask(sq, sk, |p, j| j <= p && p - j < 4)), &[]);
        let bits = (1.0 / (d as f64).sqrt()).to_bits();
        let (op, kernel) = if seq_major {
            (Op::AttentionSeqMajor { scale_bits: bits }, Kernel::AttentionSeqMajor { scale_bits: bits })
        } else {
            (Op::Attention { scale_bits: bits }, Kernel::Attention { scale_bits: bits })
        };
        let o = b.g.push(op, &[q, k, vv, mt], None).expect("attention");
        v.push(b.finish(kernel, o, TRANSC));
    }
    {
        let mut b = B::new("softmax f32[2,3000] (gpu rows longer than a work-group)");
        let x = b.f32_in(&[2, 3000], &[], -10.0, 10.0);
        let o = b.g.push(Op::Softmax, &[x], None).expect("softmax");
        v.push(b.finish(Kernel::Softmax, o, TRANSC));
    }
    {
        let eps = 1e-6f64;
        let mut b = B::new("rms_norm f32[70,5] (gpu rows shorter than a warp)");
        let x = b.f32_in(&[70, 5], &[], -2.0, 2.0);
        let w = b.f32_in(&[5], &[], -1.5, 1.5);
        let o = b.g.push(Op::RmsNorm { eps_bits: eps.to_bits() }, &[x, w], None).expect("rms_norm");
        v.push(b.finish(Kernel::RmsNorm { eps_bits: eps.to_bits() }, o, TRANSC));
    }
}

/// Sizes past the CPU's parallel thresholds (32K elements, matmul tiles) and long rows.
fn large(v: &mut Vec<Case>) {
    {
        let mut b = B::new("add f32 [129,257] contiguous (large)");
        let x = b.f32_in(&[129, 257], &[], -2.0, 2.0);
        let y = b.f32_in(&[129, 257], &[], -2.0, 2.0);
        let o = b.g.add(x, y).expect("add");
        v.push(b.finish(Kernel::Binary(BinaryOp::Add), o, F32_OP));
    }
    {
        let mut b = B::new("mul f32 [130,300] a transposed, b row-broadcast (large)");
        let x = b.f32_in(&[300, 130], &[P(vec![1, 0])], -2.0, 2.0);
        let y = b.f32_in(&[300], &[E(vec![130, 300])], -2.0, 2.0);
        let o = b.g.mul(x, y).expect("mul");
        v.push(b.finish(Kernel::Binary(BinaryOp::Mul), o, F32_OP));
    }
    {
        let mut b = B::new("exp f32 [40000] (large)");
        let x = b.f32_in(&[40000], &[], -5.0, 5.0);
        let o = b.g.unary(UnaryOp::Exp, x).expect("exp");
        v.push(b.finish(Kernel::Unary(UnaryOp::Exp), o, TRANSC));
    }
    {
        let mut b = B::new("copy f32 transposed [200,170] (large)");
        let x = b.f32_in(&[200, 170], &[P(vec![1, 0])], -1.0, 1.0);
        v.push(b.finish(Kernel::Copy, x, Check::Exact));
    }
    for axis in [0usize, 1] {
        let mut b = B::new(format!("reduce_sum f32[64,1000] axis {axis} (large)"));
        let x = b.f32_in(&[64, 1000], &[], -1.0, 1.0);
        let o = b.g.reduce(ReduceOp::Sum, x, axis).expect("reduce");
        v.push(b.finish(Kernel::Reduce { op: ReduceOp::Sum, axis }, o, Check::Nmse(1e-8, "f32 accumulation of <= 1000 terms")));
    }
    {
        let mut b = B::new("matmul_f32 [65,130]·[130,67] (large)");
        let x = b.f32_in(&[65, 130], &[], -1.0, 1.0);
        let y = b.f32_in(&[130, 67], &[], -1.0, 1.0);
        let o = b.g.matmul(x, y, false).expect("matmul");
        v.push(b.finish(Kernel::MatMul { transpose_rhs: false }, o, MATMUL));
    }
    for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16] {
        let (n, k) = (130usize, if ty.block_size() == 256 { 1024 } else { 320 });
        for qa in [false, true] {
            v.push(matmul_quant_case(&format!("{ty} x[33,{k}] · w[{n},{k}]ᵀ"), " (large)", ty, &[33, k], n, qa, None, None));
        }
    }
    {
        let mut b = B::new("softmax f32[2,1000] (large)");
        let x = b.f32_in(&[2, 1000], &[], -10.0, 10.0);
        let o = b.g.push(Op::Softmax, &[x], None).expect("softmax");
        v.push(b.finish(Kernel::Softmax, o, TRANSC));
    }
    {
        let eps = 1e-6f64;
        let mut b = B::new("rms_norm f32[3,2048] (large)");
        let x = b.f32_in(&[3, 2048], &[], -2.0, 2.0);
        let w = b.f32_in(&[2048], &[], -1.5, 1.5);
        let o = b.g.push(Op::RmsNorm { eps_bits: eps.to_bits() }, &[x, w], None).expect("rms_norm");
        v.push(b.finish(Kernel::RmsNorm { eps_bits: eps.to_bits() }, o, TRANSC));
    }
    for seq_major in [false, true] {
        let (nkv, g, sq, sk, d) = (2usize, 4usize, 17usize, 40usize, 64usize);
        let layout = if seq_major { "seq-major" } else { "head-major" };
        let mut b = B::new(format!("attention {layout} n_kv={nkv} group={g} sq={sq} sk={sk} d={d}: causal (large)"));
        let qs = if seq_major { vec![sq, nkv, g, d] } else { vec![nkv, g, sq, d] };
        let q = b.f32_in(&qs, &[], -1.0, 1.0);
        let k = b.f32_in(&[nkv, 1, sk, d], &[], -1.0, 1.0);
        let vv = b.f32_in(&[nkv, 1, sk, d], &[], -1.0, 1.0);
        let mt = b.input(&[sq, sk], f(mask(sq, sk, |p, j| j <= p)), &[]);
        let bits = (1.0 / (d as f64).sqrt()).to_bits();
        let (op, kernel) = if seq_major {
            (Op::AttentionSeqMajor { scale_bits: bits }, Kernel::AttentionSeqMajor { scale_bits: bits })
        } else {
            (Op::Attention { scale_bits: bits }, Kernel::Attention { scale_bits: bits })
        };
        let o = b.g.push(op, &[q, k, vv, mt], None).expect("attention");
        v.push(b.finish(kernel, o, TRANSC));
    }
    // Broadcast masks, read in place (one row; one value): what exporters' "no mask"
    // attention lowers to.
    for (what, shape) in [("one mask row broadcast", vec![1usize, 40]), ("one mask value broadcast", vec![])] {
        let (nkv, g, sq, sk, d) = (2usize, 2usize, 33usize, 40usize, 32usize);
        let mut b = B::new(format!("attention head-major n_kv={nkv} group={g} sq={sq} sk={sk} d={d}: {what}"));
        let q = b.f32_in(&[nkv, g, sq, d], &[], -1.0, 1.0);
        let k = b.f32_in(&[nkv, 1, sk, d], &[], -1.0, 1.0);
        let vv = b.f32_in(&[nkv, 1, sk, d], &[], -1.0, 1.0);
        let n: usize = shape.iter().product();
        let m: Vec<f32> = (0..n).map(|j| if j % 7 == 3 { f32::NEG_INFINITY } else { (j % 5) as f32 * 0.25 - 0.5 }).collect();
        let mt = b.input(&shape, f(m), &[E(vec![sq, sk])]);
        let bits = (1.0 / (d as f64).sqrt()).to_bits();
        let o = b.g.push(Op::Attention { scale_bits: bits }, &[q, k, vv, mt], None).expect("attention");
        v.push(b.finish(Kernel::Attention { scale_bits: bits }, o, TRANSC));
    }
    {
        // Many query rows of the largest head size: each work item holds d-float arrays, so
        // an OpenCL work-group of thousands of rows overflowed PoCL's worker stacks (a crash
        // at sq·group = 12288, d = 256: a whole-sequence recompute at capacity 3072).
        let (sq, g, sk, d) = (3072usize, 4usize, 8usize, 256usize);
        let mut b = B::new(format!("attention seq-major n_kv=1 group={g} sq={sq} sk={sk} d={d}: many rows (large)"));
        let q = b.f32_in(&[sq, 1, g, d], &[], -1.0, 1.0);
        let k = b.f32_in(&[1, 1, sk, d], &[], -1.0, 1.0);
        let vv = b.f32_in(&[1, 1, sk, d], &[], -1.0, 1.0);
        let m: Vec<f32> = (0..sq * sk).map(|e| if e % sk <= (e / sk) % sk { 0.0 } else { f32::NEG_INFINITY }).collect();
        let mt = b.input(&[sq, sk], f(m), &[]);
        let bits = (1.0 / (d as f64).sqrt()).to_bits();
        let o = b.g.push(Op::AttentionSeqMajor { scale_bits: bits }, &[q, k, vv, mt], None).expect("attention");
        v.push(b.finish(Kernel::AttentionSeqMajor { scale_bits: bits }, o, TRANSC));
    }
}

/// Edge values with a defined result: i32 division overflow and by zero, rows that are all
/// −∞ (NaN, as the formula gives: the reference interpreter's definition), all-zero q8
/// activation blocks (scale 0, exact zeros).
fn degenerate(v: &mut Vec<Case>) {
    {
        let mut b = B::new("div i32 [6] edge values (MIN / -1 wraps, x / 0 = 0)");
        let x = b.input(&[6], HostData::I32(vec![i32::MIN, i32::MIN, 7, -7, i32::MAX, 0]), &[]);
        let y = b.input(&[6], HostData::I32(vec![-1, 0, -2, 2, -1, 0]), &[]);
        let o = b.g.binary(BinaryOp::Div, x, y).expect("div");
        v.push(b.finish(Kernel::Binary(BinaryOp::Div), o, Check::Exact));
    }
    {
        let mut b = B::new("softmax f32[2,9] one row all -inf (NaN)");
        let mut x = b.uniform(18, -1.0, 1.0);
        x[9..].fill(f32::NEG_INFINITY);
        let xt = b.input(&[2, 9], f(x), &[]);
        let o = b.g.push(Op::Softmax, &[xt], None).expect("softmax");
        v.push(b.finish(Kernel::Softmax, o, TRANSC));
    }
    for seq_major in [false, true] {
        let (sq, sk, d) = (2usize, 3usize, 8usize);
        let layout = if seq_major { "seq-major" } else { "head-major" };
        let mut b = B::new(format!("attention {layout} n_kv=1 group=1 sq={sq} sk={sk} d={d}: one query row fully masked (NaN)"));
        let qs = if seq_major { vec![sq, 1, 1, d] } else { vec![1, 1, sq, d] };
        let q = b.f32_in(&qs, &[], -1.0, 1.0);
        let k = b.f32_in(&[1, 1, sk, d], &[], -1.0, 1.0);
        let vv = b.f32_in(&[1, 1, sk, d], &[], -1.0, 1.0);
        let mut m = vec![0f32; sq * sk];
        m[sk..].fill(f32::NEG_INFINITY);
        let mt = b.input(&[sq, sk], f(m), &[]);
        let bits = 0.5f64.to_bits();
        let (op, kernel) = if seq_major {
            (Op::AttentionSeqMajor { scale_bits: bits }, Kernel::AttentionSeqMajor { scale_bits: bits })
        } else {
            (Op::Attention { scale_bits: bits }, Kernel::Attention { scale_bits: bits })
        };
        let o = b.g.push(op, &[q, k, vv, mt], None).expect("attention");
        v.push(b.finish(kernel, o, TRANSC));
    }
    for ty in [GgmlType::Q8_0, GgmlType::Q4_K] {
        let (n, k) = (9usize, 256usize);
        let mut b = B::new(format!("{ty} x[3,{k}] · w[{n},{k}]ᵀ q8 numerics, an all-zero row").to_lowercase());
        let seed = b.rng.gen();
        let wb = tg_quant::random_blocks(ty, n * k, seed);
        let mut xd = b.uniform(3 * k, -1.0, 1.0);
        xd[k..2 * k].fill(0.0);
        let x = b.input(&[3, k], f(xd.clone()), &[]);
        b.reference_values(x, q8_round(&xd, k, q8_act(ty).expect("a q8 type")));
        let w = b.weight(DType::Quant(ty), &[n, k], wb);
        let o = b.g.matmul(x, w, true).expect("matmul");
        v.push(b.finish(Kernel::MatMulQuant { quantize_activations: true }, o, Q8));
    }
}
