use serde::{Deserialize, Serialize};

/// Elementwise unary functions (float only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `e^x`
    Exp,
    /// natural logarithm
    Log,
    /// hyperbolic tangent
    Tanh,
    /// square root
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// `1 / x`
    Recip,
    /// sine (radians)
    Sin,
    /// cosine (radians)
    Cos,
    /// absolute value
    Abs,
    /// logistic sigmoid `σ(x) = 1 / (1 + e^−x)` (ONNX `Sigmoid`; the `fuse-sigmoid` rule
    /// recognises the written-out composition)
    Sigmoid,
    /// SiLU (swish) `x · σ(x)`: a fusion target of `x · sigmoid(x)` (the `fuse-silu` rule),
    /// one pass instead of two
    Silu,
    /// the error function `erf(x) = 2/√π ∫₀ˣ e^−t² dt`
    Erf,
}

/// Elementwise binary functions with numpy broadcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`; on i32, truncated toward zero, and 0 where `b` is 0.
    Div,
    /// `max(a, b)`
    Max,
    /// `min(a, b)`
    Min,
    /// logical and (bool operands)
    And,
    /// logical or (bool operands)
    Or,
}

impl UnaryOp {
    /// The function on one f64 value: the reference definition, shared by the interpreter
    /// and by constant folding in the rewrite rules.
    pub fn eval_f64(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Recip => 1.0 / x,
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Abs => x.abs(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
            UnaryOp::Erf => libm::erf(x),
        }
    }
}

/// The activation a fused op applies to its result (its epilogue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Act {
    /// none: the value itself
    None,
    /// `max(x, 0)`
    Relu,
    /// `x` for `x ≥ 0`, `α·x` below (ONNX `LeakyRelu`)
    LeakyRelu {
        /// `f64::to_bits` of α.
        alpha_bits: u64,
    },
    /// SiLU `x · σ(x)` (see [`UnaryOp::Silu`])
    Silu,
    /// Leaky ReLU, then at least `floor`: `max(leaky_relu_α(x), floor)` (openWakeWord's
    /// speech embedding clamps every activation so)
    LeakyReluFloor {
        /// `f64::to_bits` of α.
        alpha_bits: u64,
        /// `f64::to_bits` of the floor.
        floor_bits: u64,
    },
}

impl Act {
    /// The function on one f64 value (the reference definition).
    pub fn eval_f64(self, x: f64) -> f64 {
        match self {
            Act::None => x,
            Act::Relu => x.max(0.0),
            Act::LeakyRelu { alpha_bits } => {
                if x < 0.0 {
                    f64::from_bits(alpha_bits) * x
                } else {
                    x
                }
            }
            Act::Silu => UnaryOp::Silu.eval_f64(x),
            Act::LeakyReluFloor { alpha_bits, floor_bits } => Act::LeakyRelu { alpha_bits }.eval_f64(x).max(f64::from_bits(floor_bits)),
        }
    }

    /// Short name (`relu`, `leaky0.2`, `silu`; empty for none).
    pub fn name(self) -> String {
        match self {
            Act::None => String::new(),
            Act::Relu => "relu".into(),
            Act::LeakyRelu { alpha_bits } => format!("leaky{}", f64::from_bits(alpha_bits) as f32),
            Act::Silu => "silu".into(),
            Act::LeakyReluFloor { alpha_bits, floor_bits } => format!("leaky{}_max{}", f64::from_bits(alpha_bits) as f32, f64::from_bits(floor_bits) as f32),
        }
    }
}

impl BinaryOp {
    /// The function on two f64 values (bools as 0/1): the reference definition, shared by
    /// the interpreter and by constant folding. Integer rounding (truncating division,
    /// division by zero giving 0) is applied by the caller, which knows the dtype.
    pub fn eval_f64(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Max => a.max(b),
            BinaryOp::Min => a.min(b),
            BinaryOp::And => ((a != 0.0) && (b != 0.0)) as u8 as f64,
            BinaryOp::Or => ((a != 0.0) || (b != 0.0)) as u8 as f64,
        }
    }
}

/// Elementwise comparisons producing bool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CmpOp {
    /// `a == b`
    Eq,
    /// `a != b`
    Ne,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
}

/// Reductions along one axis (the axis is kept with size 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    /// sum
    Sum,
    /// arithmetic mean
    Mean,
    /// maximum
    Max,
}

/// A primitive tensor operation. The enum is closed and hashable: every pass matches on it
/// exhaustively, and e-graph nodes are (op, children). Fused operations are not here; they
/// are targets of rewrite rules, never something a model definition calls.
///
/// Inputs are listed per variant; the output shape and dtype are inferred by
/// [`crate::infer`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// A runtime input, fed by name. No inputs; shape and dtype are the node's.
    Input {
        /// Name the caller feeds it by.
        name: String,
    },
    /// A named constant tensor (a model weight) supplied by a weight store at run time.
    Weight {
        /// Name in the weight store (e.g. the GGUF tensor name).
        name: String,
    },
    /// A scalar constant (shape `[]`) of the node's dtype; the value is stored as the bit
    /// pattern of an f64 so the op stays hashable.
    Constant {
        /// `f64::to_bits` of the value.
        bits: u64,
    },
    /// Index along `axis`, broadcast over the node's shape (`out[i..] = i[axis]`). No inputs.
    Iota {
        /// The axis whose index is produced.
        axis: usize,
    },
    /// Elementwise unary function. Inputs: `[x]` (float).
    Unary(UnaryOp),
    /// Elementwise binary function with broadcasting. Inputs: `[a, b]`, same dtype.
    Binary(BinaryOp),
    /// Elementwise comparison with broadcasting. Inputs: `[a, b]`; output bool.
    Compare(CmpOp),
    /// `cond ? a : b` with broadcasting. Inputs: `[cond (bool), a, b]`.
    Where,
    /// Convert values to another dtype (i32/bool/f32 → f32, f32/bool → i32).
    Cast {
        /// Target dtype.
        to: crate::DType,
    },
    /// Reduction along `axis`, which is kept with size 1. Inputs: `[x]` (f32).
    Reduce {
        /// Reduction function.
        op: ReduceOp,
        /// Axis reduced.
        axis: usize,
    },
    /// Batched matrix product: `a[..., m, k] · b[..., k, n]`, or with `transpose_rhs`
    /// `a[..., m, k] · b[..., n, k]ᵀ`. Batch dimensions broadcast. `b` may be a quantized
    /// weight (then rank 2 and `transpose_rhs`).
    MatMul {
        /// The right operand is stored `[n, k]`.
        transpose_rhs: bool,
    },
    /// Same elements, new shape (the node's shape). Inputs: `[x]`.
    Reshape,
    /// Reorder dimensions: output dim `i` is input dim `perm[i]`. Inputs: `[x]`.
    Permute {
        /// The permutation.
        perm: Vec<usize>,
    },
    /// Broadcast to the node's shape (numpy rules). Inputs: `[x]`.
    Expand,
    /// Elements `start..end` along `axis`. Inputs: `[x]`.
    Slice {
        /// Axis sliced.
        axis: usize,
        /// First index kept.
        start: usize,
        /// One past the last index kept.
        end: usize,
    },
    /// Concatenate along `axis`. Inputs: two or more tensors equal in all other dims.
    Concat {
        /// Axis joined.
        axis: usize,
    },
    /// A value kept between runs (a cache): its contents at the start of a run are what the
    /// previous run stored into it with [`Op::StoreRows`], zeros before the first. No inputs;
    /// shape and dtype are the node's. A graph reads a state only through the one
    /// `StoreRows` that updates it, so the update can happen in place.
    State {
        /// Name the caller's state set keeps it under.
        name: String,
    },
    /// The state `s` with the slab `offset..offset + k` along `axis` replaced by `rows`, and
    /// stored back for the next run. Inputs `[s (a State node), rows, offset (i32, shape
    /// [] or [1], read at run time)]`; `rows` has `s`'s shape except `k ≤ s.shape[axis]`
    /// along `axis`. It is an error at run time if `offset + k` passes the end.
    StoreRows {
        /// The axis rows are written along.
        axis: usize,
    },
    /// One value computed in several equivalent ways, one per input: the value is the first
    /// input's, and every input equals it wherever a reader of the value looks (for the
    /// incremental derivation's "keep a state" and "recompute every row": on the rows
    /// `0..m`; see `tg_compiler::incremental`). The `rewrite` stage puts the inputs in one
    /// e-class and its extraction keeps one of them; without it the first is taken
    /// ([`crate::Graph::resolve_alternatives`]). No kernel implements it. Inputs: ≥ 1, all
    /// of one shape and dtype.
    Alternatives,
    /// Rows of a rank-2 table selected by i32 indices: `out[ids.., :] = table[ids[..], :]`.
    /// Inputs: `[table, ids]`; output f32 of shape `ids.shape + [row_len]`.
    Gather,
    /// Grouped convolution (cross-correlation, as in every framework) over 1 to 3 spatial
    /// axes with zero padding. Inputs `[x [N, C, *S], w [M, C/groups, *window.size]]` (f32);
    /// output `[N, M, *window.output(S)]` with
    /// `out[n, m, o] = Σ_{c < C/g, j} w[m, c, j] · x[n, (m / (M/g))·(C/g) + c, o·stride − pad_begin + j·dilation]`
    /// (0 outside the input). A bias is a separate add.
    Conv {
        /// The window: kernel size, strides, dilations, padding.
        window: crate::Window,
        /// Groups `g`: `C` and `M` are multiples of it.
        groups: usize,
    },
    /// The unfolded windows of a convolution's input (im2col): a convolution is a matmul of
    /// the weights with it, `conv(x, w) = reshape(matmul(reshape(w, [g, M/g, K]), im2col(x)))`
    /// with `K = (C/g)·taps`. Inputs `[x [N, C, *S]]`; output `[N, g, K, P]` with `P` the
    /// product of the output spatial dims and
    /// `out[n, gi, c·taps + j, o] = x[n, gi·(C/g) + c, o·stride − pad_begin + j·dilation]`
    /// (0 outside; `j` and `o` row-major over the spatial axes).
    Im2Col {
        /// The window.
        window: crate::Window,
        /// Groups.
        groups: usize,
    },
    /// Pooling over 1 to 3 spatial axes. Inputs `[x [N, C, *S]]` (f32); output
    /// `[N, C, *window.output(S)]`, each element the [`crate::PoolKind`] of its window.
    Pool {
        /// Maximum or mean.
        kind: crate::PoolKind,
        /// The window.
        window: crate::Window,
    },

    // ---- Fused ops. Rewrite targets only: a model definition never builds them; the
    // e-graph rules introduce them, and each is defined as (and tested against) the
    // primitive composition written next to it.
    /// RMSNorm over the last axis: `x · rsqrt(mean(x², last) + eps) · w`. Inputs `[x, w]`,
    /// `w` broadcast to `x` (typically `[n]`). f32.
    RmsNorm {
        /// `f64::to_bits` of epsilon.
        eps_bits: u64,
    },
    /// NeoX rotary embedding over the last axis (size `d`, halves rotated as pairs):
    /// `[x₁·cos − x₂·sin, x₂·cos + x₁·sin]` with `x₁ = x[..d/2]`, `x₂ = x[d/2..]`. Inputs
    /// `[x, cos, sin]`; `cos`/`sin` broadcast to `x`'s shape with last dim `d/2`. f32.
    RopeNeox,
    /// Per-head RMSNorm followed by NeoX RoPE (the q/k-norm + RoPE of Gemma-style
    /// attention): `rope_neox(rms_norm_ε(x, w), cos, sin)`. Inputs `[x, w, cos, sin]` with the
    /// shapes of [`Op::RmsNorm`] and [`Op::RopeNeox`]. f32.
    RmsNormRopeNeox {
        /// `f64::to_bits` of epsilon.
        eps_bits: u64,
    },
    /// GELU, tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`. Inputs `[x]`.
    GeluTanh,
    /// Gated GELU: `gelu_tanh(gate) · up`. Inputs `[gate, up]` of equal shape.
    GatedGelu,
    /// Softmax over the last axis: `exp(x − max) / Σ exp(x − max)`. Inputs `[x]`.
    Softmax,
    /// Attention: `softmax(scale · q·kᵀ + mask) · v`. Inputs `[q [.., sq, d], k [.., sk, d],
    /// v [.., sk, dv], mask]`; batch dims broadcast as in [`Op::MatMul`] (grouped-query
    /// attention broadcasts k and v over the group axis); `mask` broadcasts to
    /// `[.., sq, sk]`. Output `[.., sq, dv]`.
    Attention {
        /// `f64::to_bits` of the score scale.
        scale_bits: u64,
    },
    /// Attention with position-major queries and output: `permute(attention_s(permute(q, [1, 2,
    /// 0, 3]), k, v, mask), [2, 0, 1, 3])`. Inputs `[q [sq, a, b, d], k, v, mask]` with `k`,
    /// `v` and `mask` as for [`Op::Attention`] on the permuted `q`; output `[sq, a, b, dv]`.
    /// The layout the q projection writes and the output projection reads, so neither side
    /// needs a transposing copy.
    AttentionSeqMajor {
        /// `f64::to_bits` of the score scale.
        scale_bits: u64,
    },
    /// Matmul with an add epilogue: `matmul(a, b) + c`, `c` broadcast to the product (a bias
    /// row `[n]` or a residual of the product's shape). Inputs `[a, b, c]`; `a`, `b` as for
    /// [`Op::MatMul`].
    MatMulAdd {
        /// The right operand is stored `[n, k]`.
        transpose_rhs: bool,
    },
    /// Residual add fused with RMSNorm, with both results: `concat([s, rms_norm_ε(s, w)], 0)`
    /// with `s = a + b`, each part given a leading axis of 1. Inputs `[a, b, w]`: `a` and `b`
    /// of one shape `[.., n]`, `w` as for [`Op::RmsNorm`]. Output `[2, ..a.shape]`: index 0
    /// of the leading axis is the sum, index 1 the normalised sum; a graph reads each with a
    /// slice and a reshape (views, so nothing is copied). f32.
    AddRmsNorm {
        /// `f64::to_bits` of epsilon.
        eps_bits: u64,
    },
    /// Convolution with a per-channel bias, an optional residual and an activation:
    /// `act(conv(x, w) + b)` or `act(conv(x, w) + b + r)`. Inputs `[x, w, b]` or
    /// `[x, w, b, r]` with `x`, `w` as for [`Op::Conv`], `b` one value per output channel,
    /// shaped `[M, 1, ..]` (rank of `x` minus one, so that it broadcasts over `[N, M, *S']`),
    /// and `r` shaped like the output (a residual connection); output as for [`Op::Conv`].
    /// The adds and the activation run on the convolution's output while it is in cache.
    ConvBias {
        /// The window.
        window: crate::Window,
        /// Groups.
        groups: usize,
        /// The activation.
        act: Act,
    },
    /// Group normalisation with its affine map and an activation, as exported CNNs write it
    /// (reshape → instance normalisation → reshape → scale/shift):
    /// `act(reshape(normalise_ε(reshape(x, [N, G, (C/G)·S])), shape(x)) · γ + β)` where
    /// `normalise_ε(y) = (y − mean(y)) · rsqrt(mean((y − mean(y))²) + ε)` over the last axis.
    /// Inputs `[x [N, C, *S], γ, β]`, `γ` and `β` shaped `[C, 1, ..]` (rank of `x` minus
    /// one: one value per channel) or `[N, C, 1, ..]` (rank of `x`: per image and channel,
    /// what a per-image scale and shift after the norm folds into); output `x`'s shape. f32.
    GroupNorm {
        /// Groups `G` (divides `C`).
        groups: usize,
        /// `f64::to_bits` of epsilon.
        eps_bits: u64,
        /// The activation.
        act: Act,
    },
}

impl Op {
    /// Short lowercase name of the op (used in reports and errors).
    pub fn name(&self) -> String {
        match self {
            Op::Input { name } => format!("input:{name}"),
            Op::Weight { name } => format!("weight:{name}"),
            Op::Constant { bits } => format!("const:{}", f64::from_bits(*bits)),
            Op::Iota { axis } => format!("iota[{axis}]"),
            Op::Unary(u) => format!("{u:?}").to_lowercase(),
            Op::Binary(b) => format!("{b:?}").to_lowercase(),
            Op::Compare(c) => format!("cmp_{c:?}").to_lowercase(),
            Op::Where => "where".into(),
            Op::Cast { to } => format!("cast_{to}"),
            Op::Reduce { op, axis } => format!("reduce_{op:?}[{axis}]").to_lowercase(),
            Op::MatMul { transpose_rhs } => {
                if *transpose_rhs {
                    "matmul_nt".into()
                } else {
                    "matmul".into()
                }
            }
            Op::Reshape => "reshape".into(),
            Op::Permute { perm } => format!("permute{perm:?}"),
            Op::Expand => "expand".into(),
            Op::Slice { axis, start, end } => format!("slice[{axis}:{start}..{end}]"),
            Op::Concat { axis } => format!("concat[{axis}]"),
            Op::Gather => "gather".into(),
            Op::Conv { window, groups } => {
                if *groups == 1 {
                    format!("conv[{window}]")
                } else {
                    format!("conv[{window} g{groups}]")
                }
            }
            Op::Im2Col { window, groups } => {
                if *groups == 1 {
                    format!("im2col[{window}]")
                } else {
                    format!("im2col[{window} g{groups}]")
                }
            }
            Op::Pool { kind, window } => format!("pool_{kind:?}[{window}]").to_lowercase(),
            Op::State { name } => format!("state:{name}"),
            Op::StoreRows { axis } => format!("store_rows[{axis}]"),
            Op::Alternatives => "alternatives".into(),
            Op::RmsNorm { .. } => "rms_norm".into(),
            Op::RopeNeox => "rope_neox".into(),
            Op::RmsNormRopeNeox { .. } => "rms_norm_rope_neox".into(),
            Op::GeluTanh => "gelu_tanh".into(),
            Op::GatedGelu => "gated_gelu".into(),
            Op::Softmax => "softmax".into(),
            Op::Attention { .. } => "attention".into(),
            Op::AddRmsNorm { .. } => "add_rms_norm".into(),
            Op::AttentionSeqMajor { .. } => "attention_seq_major".into(),
            Op::MatMulAdd { .. } => "matmul_add".into(),
            Op::ConvBias { window, groups, act } => {
                let g = if *groups == 1 { String::new() } else { format!(" g{groups}") };
                let a = if *act == Act::None { String::new() } else { format!(" {}", act.name()) };
                format!("conv_bias[{window}{g}{a}]")
            }
            Op::GroupNorm { groups, act, .. } => {
                let a = if *act == Act::None { String::new() } else { format!(" {}", act.name()) };
                format!("group_norm[g{groups}{a}]")
            }
        }
    }

    /// True for the fused ops (rewrite targets, never built by model definitions).
    pub fn is_fused(&self) -> bool {
        matches!(
            self,
            Op::RmsNorm { .. }
                | Op::RopeNeox
                | Op::RmsNormRopeNeox { .. }
                | Op::GeluTanh
                | Op::GatedGelu
                | Op::Softmax
                | Op::Attention { .. }
                | Op::AddRmsNorm { .. }
                | Op::AttentionSeqMajor { .. }
                | Op::MatMulAdd { .. }
                | Op::ConvBias { .. }
                | Op::GroupNorm { .. }
        )
    }

    /// True for ops with no inputs whose value comes from outside or from attributes.
    pub fn is_source(&self) -> bool {
        matches!(self, Op::Input { .. } | Op::Weight { .. } | Op::Constant { .. } | Op::Iota { .. } | Op::State { .. })
    }
}
