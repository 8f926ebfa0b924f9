//! Sources, elementwise ops, casts, copies, concat, reduce and store_rows against f64 (or exact)
//! references, on strided, broadcast (stride 0) and negative-stride operands.
//!
//! Tolerances: exact where the kernel does one correctly rounded f32 operation (+, −, ×, ÷,
//! max, min, casts, copies: compared bit for bit with the f32 result of the same operation);
//! transcendental unary ops `1e-5·(1 + |ref|)` against f64 (OpenCL allows 3–5 ulp for
//! exp/log/tanh/sin/cos, ≈ 3e-7 relative; the margin only hides no wrong formula); reductions
//! `len·ε·Σ|x|` (f32 accumulation over `len` terms).

mod common;

use common::*;
use rand::Rng;
use tg_ir::{BinaryOp, CmpOp, DType, ReduceOp, UnaryOp};
use tg_runtime::{Kernel, Layout};

fn contiguous_in(v: &[f32], shape: &[usize]) -> In {
    In { bytes: f32_bytes(v), layout: Layout::contiguous(shape, DType::F32) }
}

/// A [3, 4, 5] f32 view over a buffer of 60+ values: permuted, with a negative stride and
/// an offset; returns the buffer and its layout.
fn odd_view(r: &mut rand_chacha::ChaCha8Rng) -> (Vec<f32>, Layout) {
    // Storage [5, 3, 4] read as [3, 4, 5] (permute (1, 2, 0)), dim 1 reversed.
    let buf = rand_f32(r, 70, -2.0, 2.0);
    let l = strided(&[3, 4, 5], &[4, -1, 12], 3 + 3, DType::F32);
    assert!(l.span().is_some() && l.span().unwrap() <= buf.len());
    (buf, l)
}

#[test]
fn fill_all_dtypes() {
    let Some(env) = env() else { return };
    for (dtype, v) in [(DType::F32, -1.25f64), (DType::I32, -7.9), (DType::Bool, 2.0), (DType::Bool, 0.0), (DType::F32, f64::NEG_INFINITY)] {
        let out = Layout::contiguous(&[3, 7], dtype);
        let got = run(env, &Kernel::Fill { bits: v.to_bits() }, &[], &out).unwrap();
        let want: Vec<u8> = match dtype {
            DType::F32 => f32_bytes(&[v as f32; 21]),
            DType::I32 => i32_bytes(&[v as i32; 21]),
            _ => vec![(v != 0.0) as u8; 21],
        };
        assert_eq!(got, want, "fill {dtype:?} {v}");
    }
}

#[test]
fn iota_along_each_axis() {
    let Some(env) = env() else { return };
    let shape = [3, 5, 2];
    for axis in 0..3 {
        for dtype in [DType::F32, DType::I32] {
            let out = Layout::contiguous(&shape, dtype);
            let got = run(env, &Kernel::Iota { axis }, &[], &out).unwrap();
            let st = [10, 2, 1];
            let want: Vec<i32> = (0..30).map(|i| ((i / st[axis]) % shape[axis]) as i32).collect();
            let got: Vec<i32> = if dtype == DType::F32 { to_f32(&got).iter().map(|&x| x as i32).collect() } else { to_i32(&got) };
            assert_eq!(got, want, "iota axis {axis} {dtype:?}");
        }
    }
}

#[test]
fn unary_ops_on_strided_views() {
    let Some(env) = env() else { return };
    let mut r = rng("unary", 11);
    let ops = [UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::Recip, UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Abs];
    for op in ops {
        let (mut buf, l) = odd_view(&mut r);
        if matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt) {
            buf.iter_mut().for_each(|x| *x = x.abs() + 0.01);
        }
        let out = Layout::contiguous(&l.shape, DType::F32);
        let got = to_f32(&run(env, &Kernel::Unary(op), &[In { bytes: f32_bytes(&buf), layout: l.clone() }], &out).unwrap());
        let want: Vec<f64> = indices(&l).iter().map(|&i| op.eval_f64(buf[i] as f64)).collect();
        check(&format!("{op:?}"), &got, &want, rel(1e-5));
    }
    // Broadcast: a [4] row read as [3, 4] with stride 0.
    let row = rand_f32(&mut r, 4, -1.0, 1.0);
    let l = strided(&[3, 4], &[0, 1], 0, DType::F32);
    let got = to_f32(&run(env, &Kernel::Unary(UnaryOp::Exp), &[In { bytes: f32_bytes(&row), layout: l.clone() }], &Layout::contiguous(&[3, 4], DType::F32)).unwrap());
    let want: Vec<f64> = indices(&l).iter().map(|&i| (row[i] as f64).exp()).collect();
    check("exp broadcast", &got, &want, rel(1e-5));
}

fn f32_binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::And => ((a != 0.0) && (b != 0.0)) as u8 as f32,
        BinaryOp::Or => ((a != 0.0) || (b != 0.0)) as u8 as f32,
    }
}

fn i32_binary(op: BinaryOp, a: i32, b: i32) -> i32 {
    match op {
        BinaryOp::Add => a.wrapping_add(b),
        BinaryOp::Sub => a.wrapping_sub(b),
        BinaryOp::Mul => a.wrapping_mul(b),
        BinaryOp::Div => {
            if b == 0 {
                0
            } else {
                a.wrapping_div(b)
            }
        }
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::And => ((a != 0) && (b != 0)) as i32,
        BinaryOp::Or => ((a != 0) || (b != 0)) as i32,
    }
}

const BINARY: [BinaryOp; 8] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min, BinaryOp::And, BinaryOp::Or];

#[test]
fn binary_f32_strided_and_broadcast_exact() {
    let Some(env) = env() else { return };
    let mut r = rng("binary_f32", 12);
    for op in BINARY {
        let (mut abuf, la) = odd_view(&mut r);
        // Some zeros (And/Or), a NaN (Max/Min ignore it).
        abuf[10] = 0.0;
        abuf[20] = f32::NAN;
        // b: a [5] row broadcast over [3, 4, 5] (strides 0, 0, 1) at offset 2.
        let mut bbuf = rand_f32(&mut r, 8, -2.0, 2.0);
        bbuf[4] = 0.0;
        let lb = strided(&[3, 4, 5], &[0, 0, 1], 2, DType::F32);
        let out = Layout::contiguous(&[3, 4, 5], DType::F32);
        let got = to_f32(&run(env, &Kernel::Binary(op), &[In { bytes: f32_bytes(&abuf), layout: la.clone() }, In { bytes: f32_bytes(&bbuf), layout: lb.clone() }], &out).unwrap());
        let want: Vec<f32> = indices(&la).iter().zip(indices(&lb)).map(|(&i, j)| f32_binary(op, abuf[i], bbuf[j])).collect();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{op:?}[{k}]: got {g}, want {w}");
        }
    }
}

#[test]
fn binary_i32_and_bool() {
    let Some(env) = env() else { return };
    let mut r = rng("binary_i32", 13);
    let n = 37;
    for op in BINARY {
        let mut a: Vec<i32> = (0..n).map(|_| r.gen_range(-50..50)).collect();
        let mut b: Vec<i32> = (0..n).map(|_| r.gen_range(-5..5)).collect();
        a[0] = i32::MIN;
        b[0] = -1;
        a[1] = i32::MAX;
        b[1] = 2;
        // b reversed (negative stride).
        let la = Layout::contiguous(&[n], DType::I32);
        let lb = strided(&[n], &[-1], n - 1, DType::I32);
        let ins = [In { bytes: i32_bytes(&a), layout: la.clone() }, In { bytes: i32_bytes(&b), layout: lb.clone() }];
        let got = to_i32(&run(env, &Kernel::Binary(op), &ins, &Layout::contiguous(&[n], DType::I32)).unwrap());
        let want: Vec<i32> = (0..n).map(|i| i32_binary(op, a[i], b[n - 1 - i])).collect();
        assert_eq!(got, want, "i32 {op:?}");
        // bool operands, bool output.
        let ab: Vec<u8> = (0..n).map(|_| r.gen_range(0..2)).collect();
        let bb: Vec<u8> = (0..n).map(|_| r.gen_range(0..2)).collect();
        let ins = [In { bytes: ab.clone(), layout: Layout::contiguous(&[n], DType::Bool) }, In { bytes: bb.clone(), layout: Layout::contiguous(&[n], DType::Bool) }];
        let got = run(env, &Kernel::Binary(op), &ins, &Layout::contiguous(&[n], DType::Bool)).unwrap();
        let want: Vec<u8> = (0..n).map(|i| (i32_binary(op, ab[i] as i32, bb[i] as i32) != 0) as u8).collect();
        assert_eq!(got, want, "bool {op:?}");
    }
}

#[test]
fn compare_f32_i32() {
    let Some(env) = env() else { return };
    let mut r = rng("compare", 14);
    for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
        let f = |a: f64, b: f64| match op {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        };
        // f32 with ties and a NaN; b broadcast along dim 0.
        let mut a: Vec<f32> = (0..24).map(|_| r.gen_range(-3..3) as f32).collect();
        a[5] = f32::NAN;
        let b: Vec<f32> = (0..6).map(|_| r.gen_range(-3..3) as f32).collect();
        let la = Layout::contiguous(&[4, 6], DType::F32);
        let lb = strided(&[4, 6], &[0, 1], 0, DType::F32);
        let got =
            run(env, &Kernel::Compare(op), &[In { bytes: f32_bytes(&a), layout: la }, In { bytes: f32_bytes(&b), layout: lb }], &Layout::contiguous(&[4, 6], DType::Bool)).unwrap();
        let want: Vec<u8> = (0..24).map(|i| f(a[i] as f64, b[i % 6] as f64) as u8).collect();
        assert_eq!(got, want, "f32 {op:?}");
        let a: Vec<i32> = (0..24).map(|_| r.gen_range(-3..3)).collect();
        let b: Vec<i32> = (0..24).map(|_| r.gen_range(-3..3)).collect();
        // b transposed: [4, 6] view of a [6, 4] buffer.
        let lb = strided(&[4, 6], &[1, 4], 0, DType::I32);
        let got = run(
            env,
            &Kernel::Compare(op),
            &[In { bytes: i32_bytes(&a), layout: Layout::contiguous(&[4, 6], DType::I32) }, In { bytes: i32_bytes(&b), layout: lb.clone() }],
            &Layout::contiguous(&[4, 6], DType::Bool),
        )
        .unwrap();
        let want: Vec<u8> = indices(&lb).iter().enumerate().map(|(i, &j)| f(a[i] as f64, b[j] as f64) as u8).collect();
        assert_eq!(got, want, "i32 {op:?}");
    }
}

#[test]
fn where_all_dtypes_broadcast_cond() {
    let Some(env) = env() else { return };
    let mut r = rng("where", 15);
    let cond: Vec<u8> = (0..5).map(|_| r.gen_range(0..2)).collect();
    let lc = strided(&[3, 5], &[0, 1], 0, DType::Bool);
    for dtype in [DType::F32, DType::I32, DType::Bool] {
        let (a, b): (Vec<u8>, Vec<u8>) = match dtype {
            DType::F32 => (f32_bytes(&rand_f32(&mut r, 15, -1.0, 1.0)), f32_bytes(&rand_f32(&mut r, 15, -1.0, 1.0))),
            DType::I32 => (i32_bytes(&(0..15).map(|i| i * 3 - 7).collect::<Vec<_>>()), i32_bytes(&(0..15).map(|i| -i).collect::<Vec<_>>())),
            _ => ((0..15).map(|_| r.gen_range(0..2)).collect(), (0..15).map(|_| r.gen_range(0..2)).collect()),
        };
        let eb = if dtype == DType::Bool { 1 } else { 4 };
        let la = Layout::contiguous(&[3, 5], dtype);
        // b transposed [3, 5] view of a [5, 3] buffer.
        let lb = strided(&[3, 5], &[1, 3], 0, dtype);
        let ins = [In { bytes: cond.clone(), layout: lc.clone() }, In { bytes: a.clone(), layout: la }, In { bytes: b.clone(), layout: lb.clone() }];
        let got = run(env, &Kernel::Where, &ins, &Layout::contiguous(&[3, 5], dtype)).unwrap();
        let bi = indices(&lb);
        let mut want = Vec::new();
        for i in 0..15 {
            let src = if cond[i % 5] != 0 { &a[i * eb..(i + 1) * eb] } else { &b[bi[i] * eb..(bi[i] + 1) * eb] };
            want.extend_from_slice(src);
        }
        assert_eq!(got, want, "where {dtype:?}");
    }
}

#[test]
fn cast_and_copy_all_dtypes() {
    let Some(env) = env() else { return };
    let mut r = rng("cast", 16);
    let fv: Vec<f32> = vec![0.0, 0.5, -0.5, 1.5, -2.7, 3e9, -3e9, f32::NAN, 7.0, -1.0, 0.999, 12.0];
    let iv: Vec<i32> = vec![0, 1, -1, 5, i32::MAX, i32::MIN, 16777217, 3, -8, 0, 2, 9];
    let bv: Vec<u8> = (0..12).map(|_| r.gen_range(0..2)).collect();
    // Each as a transposed [3, 4] view of [4, 3] storage.
    let srcs = [(DType::F32, f32_bytes(&fv)), (DType::I32, i32_bytes(&iv)), (DType::Bool, bv.clone())];
    for (din, bytes) in &srcs {
        let l = strided(&[3, 4], &[1, 3], 0, *din);
        let idx = indices(&l);
        for dout in [DType::F32, DType::I32, DType::Bool] {
            let val_i = |i: usize| -> i32 {
                match din {
                    DType::F32 => fv[i] as i32,
                    DType::I32 => iv[i],
                    _ => bv[i] as i32,
                }
            };
            let want: Vec<u8> = match dout {
                DType::F32 => f32_bytes(
                    &idx.iter()
                        .map(|&i| match din {
                            DType::F32 => fv[i],
                            DType::I32 => iv[i] as f32,
                            _ => bv[i] as f32,
                        })
                        .collect::<Vec<_>>(),
                ),
                DType::I32 => i32_bytes(&idx.iter().map(|&i| val_i(i)).collect::<Vec<_>>()),
                _ => idx.iter().map(|&i| (val_i(i) != 0) as u8).collect(),
            };
            let ins = [In { bytes: bytes.clone(), layout: l.clone() }];
            let out = Layout::contiguous(&[3, 4], dout);
            let got = run(env, &Kernel::Cast, &ins, &out).unwrap();
            assert_eq!(got, want, "cast {din:?} -> {dout:?}");
            if din == &dout {
                assert_eq!(run(env, &Kernel::Copy, &ins, &out).unwrap(), want, "copy {din:?}");
            }
        }
    }
    // A rank-6 strided copy with a broadcast dim and a negative stride.
    let buf = rand_f32(&mut r, 200, -1.0, 1.0);
    let l = strided(&[2, 1, 3, 2, 2, 3], &[60, 7, -20, 0, 3, 1], 45, DType::F32);
    let got = to_f32(&run(env, &Kernel::Copy, &[In { bytes: f32_bytes(&buf), layout: l.clone() }], &Layout::contiguous(&l.shape, DType::F32)).unwrap());
    let want: Vec<f32> = indices(&l).iter().map(|&i| buf[i]).collect();
    assert_eq!(got, want, "rank-6 copy");
}

#[test]
fn concat_along_each_axis() {
    let Some(env) = env() else { return };
    let mut r = rng("concat", 17);
    for axis in 0..3 {
        for dtype in [DType::F32, DType::Bool] {
            let sizes = [2usize, 1, 3];
            let mut shapes = Vec::new();
            let mut ins = Vec::new();
            let mut vals = Vec::new();
            for &s in &sizes {
                let mut shape = vec![2, 3, 4];
                shape[axis] = s;
                let n: usize = shape.iter().product();
                let bytes: Vec<u8> = if dtype == DType::F32 { f32_bytes(&rand_f32(&mut r, n, -1.0, 1.0)) } else { (0..n).map(|_| r.gen_range(0..2)).collect() };
                vals.push(bytes.clone());
                ins.push(In { bytes, layout: Layout::contiguous(&shape, dtype) });
                shapes.push(shape);
            }
            let mut oshape = vec![2, 3, 4];
            oshape[axis] = sizes.iter().sum();
            let got = run(env, &Kernel::Concat { axis }, &ins, &Layout::contiguous(&oshape, dtype)).unwrap();
            let eb = if dtype == DType::F32 { 4 } else { 1 };
            let outer: usize = oshape[..axis].iter().product();
            let mut want = Vec::new();
            for o in 0..outer {
                for (v, s) in vals.iter().zip(&shapes) {
                    let chunk: usize = s[axis..].iter().product::<usize>() * eb;
                    want.extend_from_slice(&v[o * chunk..(o + 1) * chunk]);
                }
            }
            assert_eq!(got, want, "concat axis {axis} {dtype:?}");
        }
    }
}

#[test]
fn reduce_each_op_and_axis() {
    let Some(env) = env() else { return };
    let mut r = rng("reduce", 18);
    let shape = [3usize, 5, 7];
    let x = rand_f32(&mut r, 105, -1.0, 1.0);
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
        for axis in 0..3 {
            let mut os = shape.to_vec();
            os[axis] = 1;
            let got = to_f32(&run(env, &Kernel::Reduce { op, axis }, &[contiguous_in(&x, &shape)], &Layout::contiguous(&os, DType::F32)).unwrap());
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            let len = shape[axis];
            let mut want = Vec::new();
            let mut scale = Vec::new();
            for o in 0..outer {
                for p in 0..inner {
                    let it = (0..len).map(|t| x[(o * len + t) * inner + p] as f64);
                    want.push(match op {
                        ReduceOp::Sum => it.clone().sum(),
                        ReduceOp::Mean => it.clone().sum::<f64>() / len as f64,
                        ReduceOp::Max => it.clone().fold(f64::NEG_INFINITY, f64::max),
                    });
                    scale.push(it.map(f64::abs).sum::<f64>());
                }
            }
            let eps = f32::EPSILON as f64;
            check(&format!("reduce {op:?} axis {axis}"), &got, &want, |i, w| (len as f64 + 2.0) * eps * scale[i] + eps * w.abs());
        }
    }
    // A long row (the logits case): sum and max over 100003 elements.
    let x = rand_f32(&mut r, 100_003, -1.0, 1.0);
    for op in [ReduceOp::Sum, ReduceOp::Max] {
        let got = to_f32(&run(env, &Kernel::Reduce { op, axis: 1 }, &[contiguous_in(&x, &[1, x.len()])], &Layout::contiguous(&[1, 1], DType::F32)).unwrap());
        let s: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
        let want = if op == ReduceOp::Sum { x.iter().map(|&v| v as f64).sum() } else { x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64)) };
        check(&format!("long {op:?}"), &got, &[want], |_, _| (x.len() as f64 / 8.0 + 8.0) * f32::EPSILON as f64 * s);
    }
}

#[test]
fn store_rows_in_place_and_refuses_past_the_end() {
    let Some(env) = env() else { return };
    let mut r = rng("store_rows", 19);
    // State [2, 10, 6] f32, rows [2, 3, 6] along axis 1.
    let state = rand_f32(&mut r, 120, -1.0, 1.0);
    let rows = rand_f32(&mut r, 36, -1.0, 1.0);
    let out = Layout::contiguous(&[2, 10, 6], DType::F32);
    for off in [0i32, 4, 7] {
        let ins =
            [In { bytes: f32_bytes(&rows), layout: Layout::contiguous(&[2, 3, 6], DType::F32) }, In { bytes: i32_bytes(&[off]), layout: Layout::contiguous(&[], DType::I32) }];
        let got = to_f32(&run_with_state(env, &Kernel::StoreRows { axis: 1 }, &ins, &out, Some(&f32_bytes(&state))).unwrap());
        let mut want = state.clone();
        for a in 0..2 {
            for k in 0..3 {
                for j in 0..6 {
                    want[(a * 10 + off as usize + k) * 6 + j] = rows[(a * 3 + k) * 6 + j];
                }
            }
        }
        assert_eq!(got, want, "store_rows at {off}");
    }
    for off in [8i32, -1, 100] {
        let ins =
            [In { bytes: f32_bytes(&rows), layout: Layout::contiguous(&[2, 3, 6], DType::F32) }, In { bytes: i32_bytes(&[off]), layout: Layout::contiguous(&[], DType::I32) }];
        let e = run_with_state(env, &Kernel::StoreRows { axis: 1 }, &ins, &out, Some(&f32_bytes(&state))).unwrap_err();
        assert!(e.contains("store_rows") && e.contains("past") && e.contains("[output untouched]"), "{e}");
    }
    // Bool state along axis 0, offset read at an element offset inside its buffer.
    let st: Vec<u8> = vec![0; 12];
    let ins = [In { bytes: vec![1, 1, 1, 1], layout: Layout::contiguous(&[1, 4], DType::Bool) }, In { bytes: i32_bytes(&[9, 2]), layout: strided(&[], &[], 1, DType::I32) }];
    let got = run_with_state(env, &Kernel::StoreRows { axis: 0 }, &ins, &Layout::contiguous(&[3, 4], DType::Bool), Some(&st)).unwrap();
    assert_eq!(got, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]);
}

#[test]
fn contract_refusals() {
    let f = |s: &[usize]| Layout::contiguous(s, DType::F32);
    // Rank over 8 after merging (every dim broadcast in turn so none merge).
    let shape = [2usize; 9];
    let strides: Vec<isize> = (0..9).map(|i| if i % 2 == 0 { 0 } else { 1 << i }).collect();
    let l = strided(&shape, &strides, 0, DType::F32);
    let e = tg_opencl::ClKernels::supports(&Kernel::Unary(UnaryOp::Exp), &[l], &f(&shape)).unwrap_err();
    assert!(e.contains("rank"), "{e}");
    // Quantized outputs, non-contiguous outputs, head_dim 512.
    assert!(tg_opencl::ClKernels::supports(&Kernel::Fill { bits: 0 }, &[], &Layout::contiguous(&[2, 32], DType::Quant(tg_quant::GgmlType::Q8_0))).is_err());
    assert!(tg_opencl::ClKernels::supports(&Kernel::Fill { bits: 0 }, &[], &strided(&[2, 3], &[1, 2], 0, DType::F32)).is_err());
    let q = f(&[1, 1, 2, 512]);
    let kv = f(&[1, 1, 3, 512]);
    let e = tg_opencl::ClKernels::supports(&Kernel::Attention { scale_bits: 1f64.to_bits() }, &[q.clone(), kv.clone(), kv, f(&[2, 3])], &q).unwrap_err();
    assert!(e.contains("head_dim"), "{e}");
    // A weight type the kernels do not decode.
    let w = Layout::contiguous(&[4, 32], DType::Quant(tg_quant::GgmlType::Q4_1));
    assert!(tg_opencl::ClKernels::supports(&Kernel::MatMulQuant { quantize_activations: false }, &[f(&[1, 32]), w], &f(&[1, 4])).is_err());
}
