use serde::{Deserialize, Serialize};
use tg_ir::shape::{contiguous_strides, numel};
use tg_ir::{BinaryOp, CmpOp, DType, NodeId, ReduceOp, UnaryOp};

/// How a tensor is laid out inside its buffer: shape, strides and offset in elements.
/// Strides may be 0 (broadcast) and need not be row-major (permuted views).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Logical shape.
    pub shape: Vec<usize>,
    /// Element strides per dimension.
    pub strides: Vec<isize>,
    /// Offset of element `[0, ...]` in elements from the buffer start.
    pub offset: usize,
    /// Element type.
    pub dtype: DType,
}

impl Layout {
    /// A contiguous row-major layout at offset 0.
    pub fn contiguous(shape: &[usize], dtype: DType) -> Layout {
        Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0, dtype }
    }

    /// True when the layout is row-major contiguous (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let cs = contiguous_strides(&self.shape);
        self.shape.iter().zip(self.strides.iter().zip(&cs)).all(|(&d, (&s, &c))| d <= 1 || s == c)
    }

    /// Element count.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Bytes per element of plain dtypes (quantized layouts are whole rows of blocks).
    pub fn elem_bytes(&self) -> usize {
        match self.dtype {
            DType::F32 | DType::I32 => 4,
            DType::Bool => 1,
            DType::Quant(_) => 1,
        }
    }

    /// One past the largest element index touched (in elements), or 0 for empty tensors;
    /// `None` if a negative stride would reach before the offset.
    pub fn span(&self) -> Option<usize> {
        if self.numel() == 0 {
            return Some(0);
        }
        let mut hi = self.offset as isize;
        let mut lo = self.offset as isize;
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            let reach = (d as isize - 1) * s;
            if reach > 0 {
                hi += reach;
            } else {
                lo += reach;
            }
        }
        (lo >= 0).then_some(hi as usize + 1)
    }

    /// Bytes of buffer the layout needs (quantized: the whole `[rows, row_len]` storage).
    pub fn bytes_needed(&self) -> Option<usize> {
        match self.dtype {
            DType::Quant(t) => {
                let rows: usize = self.shape[..self.shape.len() - 1].iter().product();
                Some(rows * t.row_bytes(*self.shape.last()?).ok()?)
            }
            _ => Some(self.span()? * self.elem_bytes()),
        }
    }
}

/// What a step computes. One variant per kernel family; the attributes a kernel needs
/// travel with it. Layouts of operands are in the step, so "which inputs are strided" is
/// not part of the kernel identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kernel {
    /// Write a scalar value to every element (`f64` bits, converted to the output dtype).
    Fill {
        /// `f64::to_bits` of the value.
        bits: u64,
    },
    /// Output element = its index along `axis`.
    Iota {
        /// Axis.
        axis: usize,
    },
    /// Elementwise unary (f32).
    Unary(UnaryOp),
    /// Elementwise binary; operands arrive as (possibly broadcast) strided views.
    Binary(BinaryOp),
    /// Elementwise comparison into bool.
    Compare(CmpOp),
    /// `cond ? a : b`.
    Where,
    /// Dtype conversion.
    Cast,
    /// Reduction along `axis` (kept with size 1).
    Reduce {
        /// Function.
        op: ReduceOp,
        /// Axis.
        axis: usize,
    },
    /// f32 batched matmul with strided operands (`b` given `[n, k]` if `transpose_rhs`).
    MatMul {
        /// Right operand is `[.., n, k]`.
        transpose_rhs: bool,
    },
    /// `x · Wᵀ` with `W` an `[n, k]` weight in a GGML storage format, read block by block.
    MatMulQuant {
        /// Round activation rows to 8-bit blocks first (Q8_0 / Q8_K, as llama.cpp's CPU
        /// backend does) and use integer dot products; `false` keeps f32 activations.
        quantize_activations: bool,
    },
    /// [`Kernel::MatMulQuant`] with an add epilogue: inputs `[x, W, c]`, output `x · Wᵀ + c`
    /// with `c` contiguous f32, either one row of `n` (a bias, added to every row) or the
    /// output's shape (a residual). One step: the product, then the addend over the output
    /// it just wrote (no second launch, no separate buffer for the product).
    MatMulQuantAdd {
        /// As for [`Kernel::MatMulQuant`].
        quantize_activations: bool,
    },
    /// Materialise a strided view contiguously.
    Copy,
    /// Concatenate contiguous operands along `axis`.
    Concat {
        /// Axis.
        axis: usize,
    },
    /// Rows of a (possibly quantized) table selected by i32 ids.
    Gather,
    /// Writes `rows` (input 0, contiguous) into the output — a kept state, updated in place,
    /// nothing else of it is touched — at the offset along `axis` given by input 1 (an i32
    /// scalar read at run time). Fails if the rows would pass the end.
    StoreRows {
        /// Axis.
        axis: usize,
    },
    /// Fused RMSNorm over the last axis: inputs `[x, w]` (contiguous; `w` has the last
    /// dim's length).
    RmsNorm {
        /// `f64::to_bits` of epsilon.
        eps_bits: u64,
    },
    /// Fused NeoX RoPE: `x [seq, heads, d]`, `cos`/`sin` with `seq · d/2` elements.
    RopeNeox,
    /// Fused per-head RMSNorm + NeoX RoPE: `x [seq, heads, d]`, `w` of `d` elements,
    /// `cos`/`sin` as for [`Kernel::RopeNeox`].
    RmsNormRopeNeox {
        /// `f64::to_bits` of epsilon.
        eps_bits: u64,
    },
    /// Direct grouped convolution ([`tg_ir::Op::Conv`]): `x [N, C, *S]`, `w [M, C/g, *K]`,
    /// contiguous f32; output `[N, M, *O]`.
    Conv {
        /// Kernel size, strides, dilations, padding.
        window: tg_ir::Window,
        /// Groups.
        groups: usize,
    },
    /// The unfolded windows of a convolution's input ([`tg_ir::Op::Im2Col`]): `x [N, C, *S]`
    /// contiguous f32; output `[N, g, (C/g)·taps, P]`.
    Im2Col {
        /// The window.
        window: tg_ir::Window,
        /// Groups.
        groups: usize,
    },
    /// Convolution with a per-channel bias and an activation ([`tg_ir::Op::ConvBias`]):
    /// `x`, `w` as for [`Kernel::Conv`], `b` `M` elements; all contiguous f32.
    ConvBias {
        /// The window.
        window: tg_ir::Window,
        /// Groups.
        groups: usize,
        /// The activation.
        act: tg_ir::Act,
    },
    /// Group normalisation with affine map and activation ([`tg_ir::Op::GroupNorm`]):
    /// `x [N, C, *S]`, `γ`, `β` `C` elements; all contiguous f32.
    GroupNorm {
        /// Groups.
        groups: usize,
        /// `f64::to_bits` of epsilon.
        eps_bits: u64,
        /// The activation.
        act: tg_ir::Act,
    },
    /// Max / average pooling ([`tg_ir::Op::Pool`]): `x [N, C, *S]` contiguous f32.
    Pool {
        /// What the window computes.
        kind: tg_ir::PoolKind,
        /// The window.
        window: tg_ir::Window,
    },
    /// Fused GELU (tanh approximation).
    GeluTanh,
    /// Fused `gelu_tanh(gate) · up`.
    GatedGelu,
    /// Fused softmax over the last axis.
    Softmax,
    /// Fused flash-style attention: `q [n_kv, group, sq, d]`, `k`/`v [n_kv, 1, sk, d]`,
    /// additive mask of `sq · sk` elements, all contiguous.
    Attention {
        /// `f64::to_bits` of the score scale.
        scale_bits: u64,
    },
    /// [`Kernel::Attention`] with position-major query rows and output: `q` and the output
    /// `[sq, n_kv, group, d]`, `k`/`v` `[n_kv, 1, sk, d]`, all contiguous.
    AttentionSeqMajor {
        /// `f64::to_bits` of the score scale.
        scale_bits: u64,
    },
    /// Fused residual add + RMSNorm with both results: inputs `a`, `b` (one shape, rows of
    /// `n`, contiguous) and `w` (`n` elements); output `[2, ..a.shape]`, the sum `a + b` then
    /// its RMSNorm.
    AddRmsNorm {
        /// `f64::to_bits` of epsilon.
        eps_bits: u64,
    },
    /// A cross-device edge: copies the whole buffer of input 0, which lives on device
    /// `from`, into the output's buffer (same size) on the step's device. Consumers on the
    /// step's device read the copy with the layout they would have read the source with.
    /// Not a kernel of any device's registry: the executor runs it with the two devices'
    /// `read` and `write`, on the thread of the device that is not the CPU (see
    /// `docs/architecture.md`, *Plans across devices*). Its source and destination buffers
    /// own their arena bytes for the whole run (no other buffer reuses them), so a transfer
    /// running concurrently with either device's queue never races a reuse of its memory.
    Transfer {
        /// Index in [`Plan::devices`] of the device holding the source.
        from: usize,
    },
}

impl Kernel {
    /// Short name for reports and errors.
    pub fn name(&self) -> String {
        match self {
            Kernel::Fill { .. } => "fill".into(),
            Kernel::Iota { .. } => "iota".into(),
            Kernel::Unary(u) => format!("{u:?}").to_lowercase(),
            Kernel::Binary(b) => format!("{b:?}").to_lowercase(),
            Kernel::Compare(c) => format!("cmp_{c:?}").to_lowercase(),
            Kernel::Where => "where".into(),
            Kernel::Cast => "cast".into(),
            Kernel::Reduce { op, .. } => format!("reduce_{op:?}").to_lowercase(),
            Kernel::MatMul { transpose_rhs: true } => "matmul_nt_f32".into(),
            Kernel::MatMul { transpose_rhs: false } => "matmul_f32".into(),
            Kernel::MatMulQuant { quantize_activations: false } => "matmul_quant".into(),
            Kernel::MatMulQuant { quantize_activations: true } => "matmul_quant_q8act".into(),
            Kernel::Copy => "copy".into(),
            Kernel::Concat { .. } => "concat".into(),
            Kernel::Gather => "gather".into(),
            Kernel::StoreRows { .. } => "store_rows".into(),
            Kernel::RmsNorm { .. } => "rms_norm".into(),
            Kernel::RopeNeox => "rope_neox".into(),
            Kernel::RmsNormRopeNeox { .. } => "rms_norm_rope_neox".into(),
            Kernel::GeluTanh => "gelu_tanh".into(),
            Kernel::GatedGelu => "gated_gelu".into(),
            Kernel::Softmax => "softmax".into(),
            Kernel::Conv { .. } => "conv".into(),
            Kernel::Im2Col { .. } => "im2col".into(),
            Kernel::ConvBias { act, .. } => {
                if *act == tg_ir::Act::None {
                    "conv_bias".into()
                } else {
                    format!("conv_bias_{}", act.name())
                }
            }
            Kernel::GroupNorm { act, .. } => {
                if *act == tg_ir::Act::None {
                    "group_norm".into()
                } else {
                    format!("group_norm_{}", act.name())
                }
            }
            Kernel::Pool { kind, .. } => format!("pool_{kind:?}").to_lowercase(),
            Kernel::Attention { .. } => "attention".into(),
            Kernel::AddRmsNorm { .. } => "add_rms_norm".into(),
            Kernel::AttentionSeqMajor { .. } => "attention_seq_major".into(),
            Kernel::MatMulQuantAdd { .. } => "matmul_quant_add".into(),
            Kernel::Transfer { .. } => "transfer".into(),
        }
    }
}

/// Where a buffer lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Storage {
    /// At `offset` bytes in arena `arena`.
    Arena {
        /// Arena index in [`Plan::arenas`].
        arena: usize,
        /// Byte offset.
        offset: usize,
    },
    /// A weight from the weight store, bound on device `device` (the CPU reads it in place;
    /// other devices upload it once), never written.
    Weight {
        /// Name in the store.
        name: String,
        /// Index of the device in [`Plan::devices`].
        device: usize,
    },
    /// A state kept between runs ([`tg_ir::Op::State`]) in the caller's [`crate::StateSet`],
    /// on device `device`, written only by [`Kernel::StoreRows`] steps.
    State {
        /// Name in the state set.
        name: String,
        /// Index of the device in [`Plan::devices`].
        device: usize,
    },
}

/// One buffer: the storage of one value (views of it share the buffer).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BufferDesc {
    /// Where it lives.
    pub storage: Storage,
    /// Size in bytes.
    pub bytes: usize,
    /// The graph node whose value this buffer holds.
    pub node: NodeId,
    /// First step that writes it (`None` for weights and inputs, which exist before step 0).
    pub first_step: Option<usize>,
    /// Last step that reads it (`None` if it is only an output or never read).
    pub last_step: Option<usize>,
    /// Kept alive across runs (an output or a cached value); not reusable by other buffers
    /// after its last step.
    pub persistent: bool,
}

/// A device's memory arena: one allocation, sized by the memory planner.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArenaDesc {
    /// Index of the device in [`Plan::devices`].
    pub device: usize,
    /// Size in bytes.
    pub bytes: usize,
}

/// A reference to a tensor: a buffer and a layout inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorRef {
    /// Index in [`Plan::buffers`].
    pub buffer: usize,
    /// Layout in that buffer.
    pub layout: Layout,
}

/// One kernel launch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Step {
    /// What runs.
    pub kernel: Kernel,
    /// Index of the device in [`Plan::devices`].
    pub device: usize,
    /// Operands.
    pub inputs: Vec<TensorRef>,
    /// Result (always a contiguous layout in its own buffer).
    pub output: TensorRef,
    /// The graph node this step computes (for reports and errors).
    pub node: NodeId,
}

/// A compiled program: everything the runtime needs, and nothing it must decide.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Plan {
    /// Device names (e.g. `"cpu"`), indexed by steps and arenas.
    pub devices: Vec<String>,
    /// One arena per device that holds buffers.
    pub arenas: Vec<ArenaDesc>,
    /// All buffers.
    pub buffers: Vec<BufferDesc>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// Inputs: name and where the caller's data is copied before step 0.
    pub inputs: Vec<(String, TensorRef)>,
    /// Outputs: name and where the result is read after the last step.
    pub outputs: Vec<(String, TensorRef)>,
}

impl Plan {
    /// The kept states ([`Storage::State`]): name and device index, in buffer order.
    pub fn states(&self) -> impl Iterator<Item = (&str, usize)> + '_ {
        self.buffers.iter().filter_map(|b| match &b.storage {
            Storage::State { name, device } => Some((name.as_str(), *device)),
            _ => None,
        })
    }
}
