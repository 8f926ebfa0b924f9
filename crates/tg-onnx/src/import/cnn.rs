//! The convolution family and what exported CNNs use around it: `Conv`, `ConvTranspose`,
//! pooling, the normalisations, `Resize` / `Upsample`, `Einsum`, and `If` on a condition
//! known at import.
//!
//! `Conv` and the pools are IR windows (`Op::Conv`, `Op::Pool`); everything else is a
//! composition of primitives: `ConvTranspose` is a convolution of the zero-interleaved input
//! with the flipped, transposed kernel; the normalisations are reductions; `Resize` is, per
//! resized axis, a matmul with the interpolation matrix (computed here, so every ONNX
//! coordinate mode and filter is exact), or an expand where it only repeats elements;
//! `Einsum` is permutes, reshapes, reductions and one batched matmul per pair of operands.

use std::collections::HashMap;

use tg_ir::{BinaryOp, PoolKind, ReduceOp, Tensor, UnaryOp, Window};

use super::{attr, attr_f, attr_i, attr_ints, ir, Imp, R, V};
use crate::proto::NodeProto;
use crate::tensor::{dt, Value, ValueData};

/// The op types this module maps.
pub(super) const OPS: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "BatchNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "Resize",
    "Upsample",
    "Einsum",
    "If",
];

/// The largest stride, dilation, padding or kernel size accepted (far beyond any model; it
/// keeps the window arithmetic from overflowing).
const MAX_WINDOW_ATTR: i64 = 1 << 20;

fn attr_s(n: &NodeProto, name: &str) -> Option<String> {
    attr(n, name).and_then(|a| a.s.clone()).map(|b| String::from_utf8_lossy(&b).into_owned())
}

impl Imp<'_> {
    /// Maps node `n` (op type one of [`OPS`]).
    pub(super) fn cnn(&mut self, n: &NodeProto, ins: &[String], outs: &[String]) -> R<()> {
        let op = self.op.clone();
        let out0 = outs.first().cloned().unwrap_or_default();
        match op.as_str() {
            "Conv" => {
                let (x, ty) = self.tensor(self.arg(ins, 0)?)?;
                let (w, _) = self.tensor(self.arg(ins, 1)?)?;
                let (xs, ws) = (self.b.shape(x).to_vec(), self.b.shape(w).to_vec());
                let window = self.window(n, &xs, Some(&ws), false)?;
                let groups = attr_i(n, "group").unwrap_or(1);
                let groups = usize::try_from(groups).ok().filter(|&g| g >= 1).ok_or_else(|| self.invalid(format!("group = {groups}")))?;
                let mut y = ir(&self.node, &self.op, self.b.conv(x, w, window, groups))?;
                if let Some(bias) = ins.get(2).filter(|s| !s.is_empty()) {
                    y = self.channel_add(y, bias)?;
                }
                self.set(&out0, V::T(y, ty));
            }
            "ConvTranspose" => {
                let y = self.conv_transpose(n, ins)?;
                self.set(&out0, V::T(y, dt::FLOAT));
            }
            "MaxPool" | "AveragePool" => {
                if op == "MaxPool" && outs.get(1).is_some_and(|s| !s.is_empty()) {
                    return Err(self.unsupported("the Indices output"));
                }
                let (x, ty) = self.tensor(self.arg(ins, 0)?)?;
                let xs = self.b.shape(x).to_vec();
                let mut window = self.window(n, &xs, None, true)?;
                let include_pad = attr_i(n, "count_include_pad").unwrap_or(0) != 0;
                let kind = match (op.as_str(), include_pad) {
                    ("MaxPool", _) => PoolKind::Max,
                    (_, false) => PoolKind::Avg,
                    _ => PoolKind::AvgPadded,
                };
                if attr_i(n, "ceil_mode").unwrap_or(0) != 0 {
                    let extra = ceil_extra(&window, &xs[2..]);
                    if kind == PoolKind::AvgPadded && extra.iter().any(|&e| e > 0) {
                        return Err(self.unsupported("ceil_mode with count_include_pad where the last window passes the padding"));
                    }
                    for (p, e) in window.pad_end.iter_mut().zip(extra) {
                        *p += e;
                    }
                }
                let y = ir(&self.node, &self.op, self.b.pool(x, kind, window))?;
                self.set(&out0, V::T(y, ty));
            }
            "GlobalAveragePool" | "GlobalMaxPool" => {
                let (x, ty) = self.tensor(self.arg(ins, 0)?)?;
                let r = self.b.shape(x).len();
                if r < 3 {
                    return Err(self.invalid(format!("input of rank {r}: expected [N, C, spatial...]")));
                }
                let rop = if op == "GlobalMaxPool" { ReduceOp::Max } else { ReduceOp::Mean };
                let y = self.reduce(rop, x, &(2..r).collect::<Vec<_>>(), true)?;
                self.set(&out0, V::T(y, ty));
            }
            "BatchNormalization" => {
                if outs.iter().skip(1).any(|s| !s.is_empty()) || attr_i(n, "training_mode").unwrap_or(0) != 0 {
                    return Err(self.unsupported("training mode (running statistics outputs)"));
                }
                if self.model.opset < 7 && attr_i(n, "is_test").unwrap_or(0) == 0 {
                    return Err(self.unsupported("training mode (is_test = 0)"));
                }
                // (x − mean)·scale/√(var + ε) + bias, per channel.
                let (x, ty) = self.tensor(self.arg(ins, 0)?)?;
                let eps = attr_f(n, "epsilon").unwrap_or(1e-5) as f64;
                let names: Vec<String> = (1..5).map(|k| self.arg(ins, k).map(str::to_string)).collect::<R<_>>()?;
                let consts: Vec<Option<Value>> = names.iter().map(|s| self.constant(s)).collect::<R<_>>()?;
                let y = match consts.as_slice() {
                    [Some(s), Some(b), Some(m), Some(v)] => {
                        // All four known: fold to x·a + c with a = scale/√(var + ε), c = bias − mean·a.
                        let (s, b, m, v) = (floats(s), floats(b), floats(m), floats(v));
                        let (Some(s), Some(b), Some(m), Some(v)) = (s, b, m, v) else { return Err(self.invalid("statistics must be float")) };
                        let a: Vec<f32> = s.iter().zip(&v).map(|(s, v)| (*s as f64 / (*v as f64 + eps).sqrt()) as f32).collect();
                        let c: Vec<f32> = b.iter().zip(&m).zip(&a).map(|((b, m), a)| (*b as f64 - *m as f64 * *a as f64) as f32).collect();
                        let a = self.channel_const(x, a)?;
                        let c = self.channel_const(x, c)?;
                        let y = self.bin(BinaryOp::Mul, x, a)?;
                        self.bin(BinaryOp::Add, y, c)?
                    }
                    _ => {
                        let [s, b, m, v] = [0, 1, 2, 3].map(|k| names[k].clone());
                        let m = self.channel_tensor(x, &m)?;
                        let d = self.bin(BinaryOp::Sub, x, m)?;
                        let v = self.channel_tensor(x, &v)?;
                        let e = self.scalar(eps, x)?;
                        let ve = self.bin(BinaryOp::Add, v, e)?;
                        let inv = self.unary(UnaryOp::Rsqrt, ve)?;
                        let y = self.bin(BinaryOp::Mul, d, inv)?;
                        let s = self.channel_tensor(x, &s)?;
                        let y = self.bin(BinaryOp::Mul, y, s)?;
                        let b = self.channel_tensor(x, &b)?;
                        self.bin(BinaryOp::Add, y, b)?
                    }
                };
                self.set(&out0, V::T(y, ty));
            }
            "InstanceNormalization" | "GroupNormalization" => {
                let (x, ty) = self.tensor(self.arg(ins, 0)?)?;
                let xs = self.b.shape(x).to_vec();
                if xs.len() < 2 {
                    return Err(self.invalid(format!("input {xs:?}: expected [N, C, ...]")));
                }
                let (nb, c) = (xs[0], xs[1]);
                let groups = if op == "GroupNormalization" {
                    let g = attr_i(n, "num_groups").ok_or_else(|| self.invalid("num_groups is required"))?;
                    usize::try_from(g).ok().filter(|&g| g >= 1 && c % g == 0).ok_or_else(|| self.invalid(format!("num_groups {g} does not divide {c} channels")))?
                } else {
                    c
                };
                let eps = attr_f(n, "epsilon").unwrap_or(1e-5) as f64;
                // Normalise each (sample, group) over its channels and positions.
                let per: usize = xs[1..].iter().product::<usize>() / groups;
                let flat = ir(&self.node, &self.op, self.b.reshape(x, &[nb, groups, per]))?;
                let normed = self.normalise_last(flat, eps)?;
                let mut y = ir(&self.node, &self.op, self.b.reshape(normed, &xs))?;
                let (scale, bias) = (self.arg(ins, 1)?.to_string(), self.arg(ins, 2)?.to_string());
                for (k, name) in [scale, bias].iter().enumerate() {
                    // A scale of ones or a shift of zeros known at import is the identity
                    // (exporters write GroupNorm as an instance norm with those, followed by
                    // the real scale and shift: the group-norm fusion then sees that pattern).
                    let identity = if k == 0 { 1.0 } else { 0.0 };
                    if self.constant(name)?.as_ref().and_then(floats).is_some_and(|v| v.iter().all(|&x| x == identity)) {
                        continue;
                    }
                    let len: usize = self.shape_of(name)?.iter().product();
                    let t = if len == c {
                        self.channel_tensor(y, name)?
                    } else if len == groups {
                        // GroupNormalization-18: one scale and bias per group.
                        let (t, _) = self.tensor(name)?;
                        let mut s = vec![groups, 1];
                        s.extend(std::iter::repeat_n(1, xs.len() - 2));
                        let t = ir(&self.node, &self.op, self.b.reshape(t, &s))?;
                        let mut e = vec![groups, c / groups];
                        e.extend(std::iter::repeat_n(1, xs.len() - 2));
                        let t = ir(&self.node, &self.op, self.b.expand(t, &e))?;
                        let mut s = vec![c];
                        s.extend(std::iter::repeat_n(1, xs.len() - 2));
                        ir(&self.node, &self.op, self.b.reshape(t, &s))?
                    } else {
                        return Err(self.invalid(format!("{} has {len} elements for {c} channels", if k == 0 { "scale" } else { "bias" })));
                    };
                    y = self.bin(if k == 0 { BinaryOp::Mul } else { BinaryOp::Add }, y, t)?;
                }
                self.set(&out0, V::T(y, ty));
            }
            "Resize" | "Upsample" => {
                let y = self.resize(n, ins)?;
                self.set(&out0, V::T(y, dt::FLOAT));
            }
            "Einsum" => {
                let eq = attr_s(n, "equation").ok_or_else(|| self.invalid("equation is required"))?;
                let mut xs = Vec::new();
                let mut ty = dt::FLOAT;
                for i in ins {
                    let (t, tt) = self.tensor(i)?;
                    ty = tt;
                    xs.push(t);
                }
                let y = self.einsum(&eq, &xs)?;
                self.set(&out0, V::T(y, ty));
            }
            "If" => {
                let cond_name = self.arg(ins, 0)?.to_string();
                let known = match self.constant(&cond_name)? {
                    Some(Value { data: ValueData::Bool(v), .. }) if v.len() == 1 => Some(v[0]),
                    Some(Value { data: ValueData::I64(v), .. }) if v.len() == 1 => Some(v[0] != 0),
                    Some(Value { data: ValueData::F32(v), .. }) if v.len() == 1 => Some(v[0] != 0.0),
                    Some(_) => return Err(self.invalid("the condition must hold one element")),
                    None => None,
                };
                let results = match known {
                    // Known at import: only the branch taken is imported.
                    Some(c) => self.branch(n, if c { "then_branch" } else { "else_branch" })?,
                    // At run time: both branches (pure functions of the values they read)
                    // are computed and the condition selects, elementwise: `where(c, then, else)`.
                    None => {
                        let (t, e) = (self.branch(n, "then_branch")?, self.branch(n, "else_branch")?);
                        if t.len() != e.len() {
                            return Err(self.invalid(format!("the branches have {} and {} outputs", t.len(), e.len())));
                        }
                        let (c, _) = self.tensor(&cond_name)?;
                        if self.b.shape(c).iter().product::<usize>() != 1 {
                            return Err(self.invalid("the condition must hold one element"));
                        }
                        let c = ir(&self.node, &self.op, self.b.reshape(c, &[]))?;
                        let mut out = Vec::new();
                        for (k, (tv, ev)) in t.into_iter().zip(e).enumerate() {
                            let (tt, ty) = self.value_tensor(tv)?;
                            let (et, _) = self.value_tensor(ev)?;
                            if self.b.shape(tt) != self.b.shape(et) {
                                return Err(self.unsupported(format!("output {k}: the branches give shapes {:?} and {:?}", self.b.shape(tt), self.b.shape(et))));
                            }
                            out.push(V::T(ir(&self.node, &self.op, self.b.select(c, tt, et))?, ty));
                        }
                        out
                    }
                };
                if results.len() != outs.len() {
                    return Err(self.invalid(format!("the branch has {} outputs, the node {}", results.len(), outs.len())));
                }
                for (o, v) in outs.iter().zip(results) {
                    self.set(o, v);
                }
            }
            _ => return Err(self.unsupported("")),
        }
        Ok(())
    }

    /// Imports the subgraph in attribute `which` of `n` (it sees the enclosing values; its
    /// own names are dropped afterwards) and returns its outputs.
    fn branch(&mut self, n: &NodeProto, which: &str) -> R<Vec<V>> {
        let g = attr(n, which).and_then(|a| a.g.clone()).ok_or_else(|| self.invalid(format!("{which} is missing")))?;
        let (node, op) = (self.node.clone(), self.op.clone());
        let saved: HashMap<String, V> = self.vals.clone();
        let r = (|| {
            for t in &g.initializer {
                let v = crate::tensor::decode_tensor(Some(self.model), t)?;
                self.vals.insert(t.name.clone().unwrap_or_default(), V::C(v));
            }
            for (i, bn) in g.node.iter().enumerate() {
                self.node(bn, i)?;
            }
            g.output.iter().map(|o| self.get(o.name.as_deref().unwrap_or_default())).collect::<R<Vec<V>>>()
        })();
        self.vals = saved;
        (self.node, self.op) = (node, op);
        r
    }

    /// A value as a graph tensor (a constant materialised).
    fn value_tensor(&mut self, v: V) -> R<(Tensor, i32)> {
        match v {
            V::T(t, ty) => Ok((t, ty)),
            V::C(c) => Ok((self.materialise(&c)?, c.onnx_type)),
        }
    }

    /// `(x − mean) / √(var + ε)` over the last axis of `x`.
    fn normalise_last(&mut self, x: Tensor, eps: f64) -> R<Tensor> {
        let last = self.b.shape(x).len() - 1;
        let mean = ir(&self.node, &self.op, self.b.reduce(ReduceOp::Mean, x, last))?;
        let d = self.bin(BinaryOp::Sub, x, mean)?;
        let sq = self.bin(BinaryOp::Mul, d, d)?;
        let var = ir(&self.node, &self.op, self.b.reduce(ReduceOp::Mean, sq, last))?;
        let e = self.scalar(eps, x)?;
        let ve = self.bin(BinaryOp::Add, var, e)?;
        let inv = self.unary(UnaryOp::Rsqrt, ve)?;
        self.bin(BinaryOp::Mul, d, inv)
    }

    /// The per-channel vector `name` (`[C]`) shaped `[C, 1, ...]` to broadcast over `like`
    /// `[N, C, *S]`.
    fn channel_tensor(&mut self, like: Tensor, name: &str) -> R<Tensor> {
        let (t, _) = self.tensor(name)?;
        let r = self.b.shape(like).len();
        let c = self.b.shape(like).get(1).copied().unwrap_or(1);
        if self.b.shape(t).iter().product::<usize>() != c {
            return Err(self.invalid(format!("'{name}' has shape {:?}, expected [{c}] (one per channel)", self.b.shape(t))));
        }
        let mut s = vec![c];
        s.extend(std::iter::repeat_n(1, r.saturating_sub(2)));
        ir(&self.node, &self.op, self.b.reshape(t, &s))
    }

    fn channel_const(&mut self, like: Tensor, v: Vec<f32>) -> R<Tensor> {
        let r = self.b.shape(like).len();
        let mut s = vec![v.len()];
        s.extend(std::iter::repeat_n(1, r.saturating_sub(2)));
        self.materialise(&Value { shape: s, data: ValueData::F32(v), onnx_type: dt::FLOAT })
    }

    /// `y + bias` with `bias` one value per channel.
    fn channel_add(&mut self, y: Tensor, bias: &str) -> R<Tensor> {
        let b = self.channel_tensor(y, bias)?;
        self.bin(BinaryOp::Add, y, b)
    }

    /// The window of a convolution (`w` its weight shape) or a pool over `x [N, C, *S]`
    /// from the node's `kernel_shape`, `strides`, `dilations`, `pads` and `auto_pad`.
    fn window(&mut self, n: &NodeProto, x: &[usize], w: Option<&[usize]>, pool: bool) -> R<Window> {
        if x.len() < 3 {
            return Err(self.invalid(format!("input {x:?}: expected [N, C, spatial...]")));
        }
        let r = x.len() - 2;
        if r > 2 {
            return Err(self.unsupported(format!("{r} spatial axes (1 or 2 are supported)")));
        }
        let list = |imp: &Self, name: &str, default: usize, len: usize| -> R<Vec<usize>> {
            match attr_ints(n, name).filter(|v| !v.is_empty()) {
                None => Ok(vec![default; len]),
                Some(v) if v.len() == len && v.iter().all(|&d| (0..=MAX_WINDOW_ATTR).contains(&d)) => Ok(v.iter().map(|&d| d as usize).collect()),
                Some(v) => Err(imp.invalid(format!("{name} {v:?}: expected {len} values, each at most {MAX_WINDOW_ATTR} in size"))),
            }
        };
        let size = match (attr_ints(n, "kernel_shape").filter(|v| !v.is_empty()), w) {
            (Some(_), _) => list(self, "kernel_shape", 1, r)?,
            (None, Some(w)) => w.get(2..).map(<[usize]>::to_vec).filter(|k| k.len() == r).ok_or_else(|| self.invalid(format!("weight {w:?} for {r} spatial axes")))?,
            (None, None) if pool => return Err(self.invalid("kernel_shape is required")),
            (None, None) => unreachable!("a convolution passes its weight shape"),
        };
        if let Some(w) = w {
            if w.get(2..) != Some(&size[..]) {
                return Err(self.invalid(format!("kernel_shape {size:?} disagrees with the weight {w:?}")));
            }
        }
        let mut win = Window { stride: list(self, "strides", 1, r)?, dilation: list(self, "dilations", 1, r)?, pad_begin: vec![0; r], pad_end: vec![0; r], size };
        let pads = list(self, "pads", 0, 2 * r)?;
        match attr_s(n, "auto_pad").as_deref().unwrap_or("NOTSET") {
            "NOTSET" | "" => {
                win.pad_begin = pads[..r].to_vec();
                win.pad_end = pads[r..].to_vec();
            }
            "VALID" => {}
            mode @ ("SAME_UPPER" | "SAME_LOWER") => {
                for a in 0..r {
                    let out = x[2 + a].div_ceil(win.stride[a].max(1));
                    let extent = win.dilation[a] * (win.size[a].max(1) - 1) + 1;
                    let total = ((out.max(1) - 1) * win.stride[a] + extent).saturating_sub(x[2 + a]);
                    let (small, big) = (total / 2, total - total / 2);
                    (win.pad_begin[a], win.pad_end[a]) = if mode == "SAME_UPPER" { (small, big) } else { (big, small) };
                }
            }
            other => return Err(self.invalid(format!("auto_pad '{other}'"))),
        }
        win.check().map_err(|e| self.invalid(e))?;
        Ok(win)
    }

    /// `ConvTranspose`: `conv(interleave(x, s), flip(wᵀ))` with padding `d·(k − 1) − pad`
    /// (cropped where that is negative), plus the bias.
    fn conv_transpose(&mut self, n: &NodeProto, ins: &[String]) -> R<Tensor> {
        let (x, _) = self.tensor(self.arg(ins, 0)?)?;
        let (w, _) = self.tensor(self.arg(ins, 1)?)?;
        let (xs, ws) = (self.b.shape(x).to_vec(), self.b.shape(w).to_vec());
        if xs.len() < 3 || ws.len() != xs.len() {
            return Err(self.invalid(format!("input {xs:?} and weight {ws:?}: expected [N, C, spatial...] and [C, M/group, kernel...]")));
        }
        let r = xs.len() - 2;
        if r > 2 {
            return Err(self.unsupported(format!("{r} spatial axes (1 or 2 are supported)")));
        }
        let g = usize::try_from(attr_i(n, "group").unwrap_or(1)).ok().filter(|&g| g >= 1 && xs[1] % g == 0).ok_or_else(|| self.invalid("group does not divide the channels"))?;
        let (c, mg) = (xs[1], ws[1]);
        if ws[0] != c {
            return Err(self.invalid(format!("weight {ws:?} for {c} input channels")));
        }
        let k = ws[2..].to_vec();
        let list = |imp: &Self, name: &str, default: i64, len: usize| -> R<Vec<i64>> {
            match attr_ints(n, name).filter(|v| !v.is_empty()) {
                None => Ok(vec![default; len]),
                Some(v) if v.len() == len && v.iter().all(|d| d.abs() <= MAX_WINDOW_ATTR) => Ok(v),
                Some(v) => Err(imp.invalid(format!("{name} {v:?}: expected {len} values, each at most {MAX_WINDOW_ATTR} in size"))),
            }
        };
        let s = list(self, "strides", 1, r)?;
        let d = list(self, "dilations", 1, r)?;
        let op = list(self, "output_padding", 0, r)?;
        if s.iter().chain(&d).any(|&v| v < 1) || op.iter().any(|&v| v < 0) {
            return Err(self.invalid("strides and dilations must be >= 1, output_padding >= 0"));
        }
        let mut pads = list(self, "pads", 0, 2 * r)?;
        let auto = attr_s(n, "auto_pad").unwrap_or_else(|| "NOTSET".into());
        let out_shape = attr_ints(n, "output_shape").filter(|v| !v.is_empty());
        if out_shape.is_some() || auto.starts_with("SAME") {
            let want: Vec<i64> = match &out_shape {
                Some(o) => o[o.len().saturating_sub(r)..].to_vec(),
                None => (0..r).map(|a| xs[2 + a] as i64 * s[a]).collect(),
            };
            for a in 0..r {
                let total = s[a] * (xs[2 + a] as i64 - 1) + op[a] + (k[a] as i64 - 1) * d[a] + 1 - want[a];
                // A longer output than the strides give is extended at the end.
                (pads[a], pads[a + r]) = if total < 0 {
                    (0, total)
                } else if auto == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                };
            }
        } else if auto == "VALID" {
            pads.iter_mut().for_each(|p| *p = 0);
        }
        // W [C, M/g, *k] → W' [M, C/g, *k], W'[gi·Mg + m, c'] = flip(W[gi·Cg + c', m]).
        let (cg, taps) = (c / g, k.iter().product::<usize>());
        let w4 = ir(&self.node, &self.op, self.b.reshape(w, &[g, cg, mg, taps]))?;
        let wp = ir(&self.node, &self.op, self.b.permute(w4, &[0, 2, 1, 3]))?;
        let w2 = ir(&self.node, &self.op, self.b.reshape(wp, &[g * mg * cg, taps]))?;
        let wt = ir(&self.node, &self.op, self.b.permute(w2, &[1, 0]))?;
        let rev = self.materialise(&Value { shape: vec![taps], data: ValueData::I64((0..taps as i64).rev().collect()), onnx_type: dt::INT64 })?;
        let flipped = ir(&self.node, &self.op, self.b.gather(wt, rev))?;
        let back = ir(&self.node, &self.op, self.b.permute(flipped, &[1, 0]))?;
        let mut wshape = vec![g * mg, cg];
        wshape.extend(&k);
        let wconv = ir(&self.node, &self.op, self.b.reshape(back, &wshape))?;
        // Interleave s − 1 zeros between the input's elements along each spatial axis.
        let mut u = x;
        for (a, &st) in s.iter().enumerate() {
            if st > 1 {
                u = self.interleave_zeros(u, 2 + a, st as usize)?;
            }
        }
        let mut win = Window::new(k.clone());
        win.dilation = d.iter().map(|&v| v as usize).collect();
        let mut crop = vec![(0i64, 0i64); r];
        for a in 0..r {
            let full = d[a] * (k[a] as i64 - 1);
            let (pb, pe) = (full - pads[a], full - pads[a + r] + op[a]);
            win.pad_begin[a] = pb.max(0) as usize;
            win.pad_end[a] = pe.max(0) as usize;
            crop[a] = ((-pb).max(0), (-pe).max(0));
        }
        let mut y = ir(&self.node, &self.op, self.b.conv(u, wconv, win, g))?;
        for (a, &(lo, hi)) in crop.iter().enumerate() {
            if lo > 0 || hi > 0 {
                let len = self.b.shape(y)[2 + a] as i64;
                if lo + hi >= len {
                    return Err(self.invalid(format!("pads {pads:?} leave no output along spatial axis {a}")));
                }
                y = ir(&self.node, &self.op, self.b.slice(y, 2 + a, lo as usize, (len - hi) as usize))?;
            }
        }
        if let Some(bias) = ins.get(2).filter(|s| !s.is_empty()) {
            y = self.channel_add(y, bias)?;
        }
        Ok(y)
    }

    /// `x` with `s − 1` zeros after every element along `axis` but the last.
    fn interleave_zeros(&mut self, x: Tensor, axis: usize, s: usize) -> R<Tensor> {
        let shape = self.b.shape(x).to_vec();
        let (a, l, b) = (shape[..axis].iter().product::<usize>(), shape[axis], shape[axis + 1..].iter().product::<usize>());
        let x4 = ir(&self.node, &self.op, self.b.reshape(x, &[a, l, 1, b]))?;
        let zero = self.scalar(0.0, x)?;
        let z = ir(&self.node, &self.op, self.b.reshape(zero, &[1, 1, 1, 1]))?;
        let z = ir(&self.node, &self.op, self.b.expand(z, &[a, l, s - 1, b]))?;
        let cat = ir(&self.node, &self.op, self.b.concat(&[x4, z], 2))?;
        let flat = ir(&self.node, &self.op, self.b.reshape(cat, &[a, l * s, b]))?;
        let cut = ir(&self.node, &self.op, self.b.slice(flat, 1, 0, (l - 1) * s + 1))?;
        let mut out = shape.clone();
        out[axis] = (l - 1) * s + 1;
        ir(&self.node, &self.op, self.b.reshape(cut, &out))
    }

    /// `Resize` (opsets 10–18) and `Upsample`.
    fn resize(&mut self, n: &NodeProto, ins: &[String]) -> R<Tensor> {
        let (x, ty) = self.tensor(self.arg(ins, 0)?)?;
        if ty != dt::FLOAT {
            return Err(self.unsupported("a non-float input"));
        }
        let xs = self.b.shape(x).to_vec();
        let r = xs.len();
        let opset = self.model.opset;
        let upsample = self.op == "Upsample";
        let mode = attr_s(n, "mode").unwrap_or_else(|| "nearest".into());
        let ctm = if upsample || opset < 11 { "asymmetric".to_string() } else { attr_s(n, "coordinate_transformation_mode").unwrap_or_else(|| "half_pixel".into()) };
        let nearest_mode = if upsample || opset < 11 { "floor".to_string() } else { attr_s(n, "nearest_mode").unwrap_or_else(|| "round_prefer_floor".into()) };
        let cubic_a = attr_f(n, "cubic_coeff_a").unwrap_or(-0.75) as f64;
        let exclude_outside = attr_i(n, "exclude_outside").unwrap_or(0) != 0;
        let antialias = attr_i(n, "antialias").unwrap_or(0) != 0;
        let policy = attr_s(n, "keep_aspect_ratio_policy").unwrap_or_else(|| "stretch".into());
        if ctm == "tf_crop_and_resize" {
            return Err(self.unsupported("coordinate_transformation_mode tf_crop_and_resize"));
        }
        if !["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"].contains(&ctm.as_str()) {
            return Err(self.invalid(format!("coordinate_transformation_mode '{ctm}'")));
        }
        let mode = match mode.as_str() {
            "nearest" => Filter::Nearest(nearest_mode),
            "linear" | "bilinear" | "trilinear" => Filter::Linear,
            "cubic" | "bicubic" => Filter::Cubic(cubic_a),
            m => return Err(self.invalid(format!("mode '{m}'"))),
        };
        let axes: Vec<usize> = match attr_ints(n, "axes").filter(|v| !v.is_empty()) {
            Some(a) => a.iter().map(|&v| super::norm_axis(v, r).ok_or_else(|| self.invalid(format!("axes {a:?}")))).collect::<R<_>>()?,
            None => (0..r).collect(),
        };
        // Scales or sizes, per axis in `axes`.
        let floats_in = |imp: &mut Self, name: &str| -> R<Option<Vec<f64>>> {
            match imp.constant(name)? {
                Some(Value { data: ValueData::F32(v), .. }) => Ok(Some(v.iter().map(|&x| x as f64).collect())),
                Some(_) => Err(imp.invalid("scales must be float")),
                None if name.is_empty() => Ok(None),
                None => Err(imp.unsupported("scales computed at run time")),
            }
        };
        let (scales_name, sizes_name) = if upsample || opset < 11 {
            (ins.get(1).cloned().unwrap_or_default(), String::new())
        } else {
            (ins.get(2).cloned().unwrap_or_default(), ins.get(3).cloned().unwrap_or_default())
        };
        let mut scales = if upsample && opset < 9 { attr(n, "scales").map(|a| a.floats.iter().map(|&x| x as f64).collect()) } else { floats_in(self, &scales_name)? };
        if scales.as_ref().is_some_and(|s| s.is_empty()) {
            scales = None;
        }
        let sizes = if sizes_name.is_empty() { None } else { Some(self.const_ints(&sizes_name, "sizes")?) };
        let (out, scale): (Vec<usize>, Vec<f64>) = match (scales, sizes) {
            (Some(s), None) => {
                if s.len() != axes.len() || s.iter().any(|&v| v <= 0.0) {
                    return Err(self.invalid(format!("scales {s:?} for {} axes", axes.len())));
                }
                (axes.iter().zip(&s).map(|(&a, &sc)| (xs[a] as f64 * sc).floor() as usize).collect(), s)
            }
            (None, Some(sz)) => {
                if sz.len() != axes.len() || sz.iter().any(|&v| v < 0) {
                    return Err(self.invalid(format!("sizes {sz:?} for {} axes", axes.len())));
                }
                let ratio: Vec<f64> = axes.iter().zip(&sz).map(|(&a, &v)| v as f64 / xs[a] as f64).collect();
                match policy.as_str() {
                    "stretch" => (sz.iter().map(|&v| v as usize).collect(), ratio),
                    p @ ("not_larger" | "not_smaller") => {
                        let s = if p == "not_larger" { ratio.iter().copied().fold(f64::INFINITY, f64::min) } else { ratio.iter().copied().fold(0.0, f64::max) };
                        (axes.iter().map(|&a| (s * xs[a] as f64 + 0.5).floor() as usize).collect(), vec![s; axes.len()])
                    }
                    p => return Err(self.invalid(format!("keep_aspect_ratio_policy '{p}'"))),
                }
            }
            (Some(_), Some(_)) => return Err(self.invalid("both scales and sizes are given")),
            (None, None) => return Err(self.invalid("neither scales nor sizes is given")),
        };
        let mut y = x;
        for (k, &a) in axes.iter().enumerate() {
            let (len, o, sc) = (xs[a], out[k], scale[k]);
            if o == len && (sc - 1.0).abs() < 1e-12 && !matches!(ctm.as_str(), "align_corners") {
                continue;
            }
            if o == 0 || len == 0 {
                return Err(self.unsupported("an empty input or output axis"));
            }
            let m = interpolation(&mode, &ctm, len, o, sc, exclude_outside, antialias);
            y = self.apply_along(y, a, &m, len, o)?;
        }
        Ok(y)
    }

    /// `y[.., i, ..] = Σ_j m[i][j] · x[.., j, ..]` along `axis` (`m` is `out × len`): an
    /// expand when `m` repeats each element a whole number of times, else a matmul with `m`.
    fn apply_along(&mut self, x: Tensor, axis: usize, m: &[Vec<f64>], len: usize, out: usize) -> R<Tensor> {
        let shape = self.b.shape(x).to_vec();
        let (a, b) = (shape[..axis].iter().product::<usize>(), shape[axis + 1..].iter().product::<usize>());
        let mut to = shape.clone();
        to[axis] = out;
        if out.is_multiple_of(len) && (0..out).all(|i| (0..len).all(|j| m[i][j] == if j == i / (out / len) { 1.0 } else { 0.0 })) {
            let f = out / len;
            let x4 = ir(&self.node, &self.op, self.b.reshape(x, &[a, len, 1, b]))?;
            let e = ir(&self.node, &self.op, self.b.expand(x4, &[a, len, f, b]))?;
            return ir(&self.node, &self.op, self.b.reshape(e, &to));
        }
        let data: Vec<f32> = m.iter().flat_map(|row| row.iter().map(|&v| v as f32)).collect();
        let mt = self.materialise(&Value { shape: vec![out, len], data: ValueData::F32(data), onnx_type: dt::FLOAT })?;
        let y = if b == 1 {
            let x2 = ir(&self.node, &self.op, self.b.reshape(x, &[a, len]))?;
            ir(&self.node, &self.op, self.b.matmul(x2, mt, true))?
        } else {
            let x3 = ir(&self.node, &self.op, self.b.reshape(x, &[a, len, b]))?;
            let m3 = ir(&self.node, &self.op, self.b.reshape(mt, &[1, out, len]))?;
            ir(&self.node, &self.op, self.b.matmul(m3, x3, false))?
        };
        ir(&self.node, &self.op, self.b.reshape(y, &to))
    }

    /// `Einsum` over explicit or implicit equations, with `...` broadcast dimensions.
    fn einsum(&mut self, eq: &str, xs: &[Tensor]) -> R<Tensor> {
        let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l.to_string(), Some(r.to_string())),
            None => (eq.clone(), None),
        };
        let terms: Vec<&str> = lhs.split(',').collect();
        if terms.len() != xs.len() || xs.is_empty() {
            return Err(self.invalid(format!("equation '{eq}' has {} operands, the node {}", terms.len(), xs.len())));
        }
        // Ellipsis dimensions become letters no equation uses ('A'.. from the end).
        let ell_rank = terms.iter().zip(xs).map(|(t, &x)| if t.contains("...") { self.b.shape(x).len() + 3 - t.len() } else { 0 }).max().unwrap_or(0);
        let ell: Vec<char> = (0..ell_rank).map(|i| char::from(b'A' + i as u8)).collect();
        if ell.iter().any(|c| eq.contains(*c)) {
            return Err(self.unsupported("upper-case labels together with '...'"));
        }
        let mut ops: Vec<(Vec<char>, Tensor)> = Vec::new();
        for (t, &x) in terms.iter().zip(xs) {
            let rank = self.b.shape(x).len();
            let labels: Vec<char> = match t.split_once("...") {
                Some((pre, post)) => {
                    let k = rank.checked_sub(pre.len() + post.len()).ok_or_else(|| self.invalid(format!("term '{t}' for rank {rank}")))?;
                    pre.chars().chain(ell[ell_rank - k..].iter().copied()).chain(post.chars()).collect()
                }
                None => t.chars().collect(),
            };
            if labels.len() != rank || labels.iter().any(|c| !c.is_ascii_alphabetic()) {
                return Err(self.invalid(format!("term '{t}' for an operand of rank {rank}")));
            }
            ops.push((labels, x));
        }
        let out: Vec<char> = match rhs {
            Some(r) => match r.split_once("...") {
                Some((pre, post)) => pre.chars().chain(ell.iter().copied()).chain(post.chars()).collect(),
                None => r.chars().collect(),
            },
            None => {
                let mut once: Vec<char> =
                    ('a'..='z').chain('A'..='Z').filter(|c| !ell.contains(c) && ops.iter().map(|(l, _)| l.iter().filter(|x| *x == c).count()).sum::<usize>() == 1).collect();
                once.sort();
                ell.iter().copied().chain(once).collect()
            }
        };
        // Sizes per label (1 broadcasts).
        let mut size: HashMap<char, usize> = HashMap::new();
        for (l, x) in &ops {
            if (1..l.len()).any(|i| l[..i].contains(&l[i])) {
                return Err(self.unsupported("a repeated label within one operand (diagonals)"));
            }
            for (c, &d) in l.iter().zip(self.b.shape(*x)) {
                let e = size.entry(*c).or_insert(d);
                if *e != d && *e != 1 && d != 1 {
                    return Err(self.invalid(format!("label '{c}' is {e} and {d}")));
                }
                *e = (*e).max(d);
            }
        }
        if let Some(c) = out.iter().find(|c| !size.contains_key(c)) {
            return Err(self.invalid(format!("output label '{c}' is on no operand")));
        }
        // Pairwise, left to right: keep the labels a later operand or the output needs.
        let mut acc = ops.remove(0);
        acc = self.einsum_reduce(acc, &|c: char| out.contains(&c) || ops.iter().any(|(l, _)| l.contains(&c)))?;
        while !ops.is_empty() {
            let next = ops.remove(0);
            let keep = |c: char| out.contains(&c) || ops.iter().any(|(l, _)| l.contains(&c));
            acc = self.einsum_pair(acc, next, &keep, &size)?;
        }
        // Sum what the output drops, then order as the output.
        let (labels, t) = self.einsum_reduce(acc, &|c: char| out.contains(&c))?;
        let perm: Vec<usize> = out.iter().map(|c| labels.iter().position(|x| x == c).unwrap_or(0)).collect();
        let t = if perm.iter().enumerate().all(|(i, &p)| i == p) { t } else { ir(&self.node, &self.op, self.b.permute(t, &perm))? };
        let want: Vec<usize> = out.iter().map(|c| size[c]).collect();
        if self.b.shape(t) != want.as_slice() {
            return ir(&self.node, &self.op, self.b.expand(t, &want));
        }
        Ok(t)
    }

    /// Sums the labels of `x` that `keep` rejects.
    fn einsum_reduce(&mut self, (labels, x): (Vec<char>, Tensor), keep: &dyn Fn(char) -> bool) -> R<(Vec<char>, Tensor)> {
        let drop: Vec<usize> = (0..labels.len()).filter(|&i| !keep(labels[i])).collect();
        if drop.is_empty() {
            return Ok((labels, x));
        }
        let y = self.reduce(ReduceOp::Sum, x, &drop, false)?;
        Ok((labels.iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, &c)| c).collect(), y))
    }

    /// The product of two operands as one batched matmul: `[batch, m, k] · [batch, k, n]`.
    fn einsum_pair(&mut self, a: (Vec<char>, Tensor), b: (Vec<char>, Tensor), keep: &dyn Fn(char) -> bool, size: &HashMap<char, usize>) -> R<(Vec<char>, Tensor)> {
        let (la, lb) = (a.0.clone(), b.0.clone());
        let a = self.einsum_reduce(a, &|c| keep(c) || lb.contains(&c))?;
        let b = self.einsum_reduce(b, &|c| keep(c) || la.contains(&c))?;
        let (la, xa) = a;
        let (lb, xb) = b;
        let batch: Vec<char> = la.iter().copied().filter(|c| lb.contains(c) && keep(*c)).collect();
        let contract: Vec<char> = la.iter().copied().filter(|c| lb.contains(c) && !keep(*c)).collect();
        let m: Vec<char> = la.iter().copied().filter(|c| !lb.contains(c)).collect();
        let nn: Vec<char> = lb.iter().copied().filter(|c| !la.contains(c)).collect();
        let prod = |v: &[char]| v.iter().map(|c| size[c]).product::<usize>();
        let arrange = |imp: &mut Self, labels: &[char], x: Tensor, order: &[char], shape3: [usize; 3]| -> R<Tensor> {
            let perm: Vec<usize> = order.iter().map(|c| labels.iter().position(|x| x == c).unwrap_or(0)).collect();
            let t = if perm.iter().enumerate().all(|(i, &p)| i == p) { x } else { ir(&imp.node, &imp.op, imp.b.permute(x, &perm))? };
            let full: Vec<usize> = order.iter().map(|c| size[c]).collect();
            let t = if imp.b.shape(t) != full.as_slice() { ir(&imp.node, &imp.op, imp.b.expand(t, &full))? } else { t };
            ir(&imp.node, &imp.op, imp.b.reshape(t, &shape3))
        };
        let (bs, ms, ks, ns) = (prod(&batch), prod(&m), prod(&contract), prod(&nn));
        let oa: Vec<char> = batch.iter().chain(&m).chain(&contract).copied().collect();
        let a3 = arrange(self, &la, xa, &oa, [bs, ms, ks])?;
        // b as [batch, n, k] so the matmul reads it transposed.
        let ob: Vec<char> = batch.iter().chain(&nn).chain(&contract).copied().collect();
        let b3 = arrange(self, &lb, xb, &ob, [bs, ns, ks])?;
        let y = ir(&self.node, &self.op, self.b.matmul(a3, b3, true))?;
        let labels: Vec<char> = batch.iter().chain(&m).chain(&nn).copied().collect();
        let shape: Vec<usize> = labels.iter().map(|c| size[c]).collect();
        let y = ir(&self.node, &self.op, self.b.reshape(y, &shape))?;
        Ok((labels, y))
    }
}

fn floats(v: &Value) -> Option<Vec<f32>> {
    match &v.data {
        ValueData::F32(x) => Some(x.clone()),
        _ => None,
    }
}

/// Extra end padding so that the window's output length is the ceiling one (the last window
/// starting inside the input or the begin padding).
fn ceil_extra(w: &Window, spatial: &[usize]) -> Vec<usize> {
    (0..w.rank())
        .map(|a| {
            let padded = spatial[a] + w.pad_begin[a] + w.pad_end[a];
            let extent = w.dilation[a] * (w.size[a] - 1) + 1;
            if padded < extent {
                return 0;
            }
            let mut out = (padded - extent).div_ceil(w.stride[a]) + 1;
            if (out - 1) * w.stride[a] >= spatial[a] + w.pad_begin[a] {
                out -= 1;
            }
            ((out - 1) * w.stride[a] + extent).saturating_sub(padded)
        })
        .collect()
}

enum Filter {
    Nearest(String),
    Linear,
    Cubic(f64),
}

/// The `out × len` matrix of ONNX `Resize` along one axis: output `i` maps to the original
/// coordinate `x` by the coordinate mode; its taps are the filter's coefficients at the
/// neighbouring indices (clamped to the edge), zeroed outside and renormalised with
/// `exclude_outside`; `antialias` widens linear and cubic filters by `1/scale` when shrinking.
fn interpolation(f: &Filter, ctm: &str, len: usize, out: usize, scale: f64, exclude_outside: bool, antialias: bool) -> Vec<Vec<f64>> {
    let out_w = scale * len as f64;
    let mut m = vec![vec![0.0; len]; out];
    for (i, row) in m.iter_mut().enumerate() {
        let xi = i as f64;
        let x = match ctm {
            "align_corners" => {
                if out_w == 1.0 {
                    0.0
                } else {
                    xi * (len as f64 - 1.0) / (out_w - 1.0)
                }
            }
            "asymmetric" => xi / scale,
            "pytorch_half_pixel" => {
                if out_w == 1.0 {
                    -0.5
                } else {
                    (xi + 0.5) / scale - 0.5
                }
            }
            "half_pixel_symmetric" => {
                let adjustment = out as f64 / out_w;
                let center = len as f64 / 2.0;
                center * (1.0 - adjustment) + (xi + 0.5) / scale - 0.5
            }
            _ => (xi + 0.5) / scale - 0.5,
        };
        let base = x.floor();
        // The ratio is in (0, 1]: an integer coordinate takes the pixel on its left as base.
        let (base, ratio) = if x == base { (base - 1.0, 1.0) } else { (base, x - base) };
        let (start, coeffs): (i64, Vec<f64>) = match f {
            Filter::Nearest(mode) => {
                let c = if ratio == 1.0 {
                    [0.0, 1.0]
                } else {
                    match mode.as_str() {
                        "round_prefer_ceil" => [(ratio < 0.5) as u8 as f64, (ratio >= 0.5) as u8 as f64],
                        "floor" => [1.0, 0.0],
                        "ceil" => [0.0, 1.0],
                        _ => [(ratio <= 0.5) as u8 as f64, (ratio > 0.5) as u8 as f64],
                    }
                };
                (0, c.to_vec())
            }
            Filter::Linear if antialias && scale < 1.0 => {
                let start = (-1.0 / scale).floor() as i64 + 1;
                let c: Vec<f64> = (start..2 - start).map(|k| (1.0 - ((k as f64 - ratio) * scale).abs()).clamp(0.0, 1.0)).collect();
                let s: f64 = c.iter().sum();
                (start, c.iter().map(|v| v / s).collect())
            }
            Filter::Linear => (0, vec![1.0 - ratio, ratio]),
            Filter::Cubic(a) if antialias && scale < 1.0 => {
                let start = (-2.0 / scale).floor() as i64 + 1;
                let c: Vec<f64> = (start..2 - start).map(|k| cubic(scale * (k as f64 - ratio), *a)).collect();
                let s: f64 = c.iter().sum();
                (start, c.iter().map(|v| v / s).collect())
            }
            Filter::Cubic(a) => {
                let r = ratio;
                let c = vec![
                    ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                    ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                    ((a + 2.0) * (1.0 - r) - (a + 3.0)) * (1.0 - r) * (1.0 - r) + 1.0,
                    ((a * (2.0 - r) - 5.0 * a) * (2.0 - r) + 8.0 * a) * (2.0 - r) - 4.0 * a,
                ];
                (-1, c)
            }
        };
        let mut coeffs = coeffs;
        let idx: Vec<i64> = (0..coeffs.len() as i64).map(|k| base as i64 + start + k).collect();
        if exclude_outside {
            for (c, &j) in coeffs.iter_mut().zip(&idx) {
                if j < 0 || j >= len as i64 {
                    *c = 0.0;
                }
            }
            let s: f64 = coeffs.iter().sum();
            if s != 0.0 {
                coeffs.iter_mut().for_each(|c| *c /= s);
            }
        }
        for (c, &j) in coeffs.iter().zip(&idx) {
            row[j.clamp(0, len as i64 - 1) as usize] += c;
        }
    }
    m
}

/// The cubic convolution kernel with coefficient `a`.
fn cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    let (x2, x3) = (x * x, x * x * x);
    if x <= 1.0 {
        (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
    } else if x < 2.0 {
        a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
    } else {
        0.0
    }
}
