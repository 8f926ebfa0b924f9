//! Gemma 3 (text) as a graph of primitive ops, and a loader/runner for GGUF checkpoints.
//!
//! Architecture (per layer): pre-attention RMSNorm → q/k/v projections → per-head RMSNorm
//! of q and k → RoPE (NeoX layout; base 1e6 on global layers, 1e4 on sliding-window
//! layers; every `swa_pattern`-th layer is global) → causal attention, sliding-window on
//! local layers, grouped-query (kv heads shared by `n_head / n_head_kv` query heads),
//! queries scaled by `1/sqrt(head_dim)` → output projection → post-attention RMSNorm →
//! residual; then pre-FFN RMSNorm → GELU(tanh)(gate) · up → down → post-FFN RMSNorm →
//! residual. Embeddings are scaled by `sqrt(n_embd)`; the output head is tied to the
//! embedding table. RMSNorm weights are used as stored: GGUF conversion already folded
//! Gemma's `(1 + w)` into them.

use crate::layers;
use crate::plans::PlanCache;
use crate::{
    check_inputs, input_error, CompileTimes, Detect, Dim, ElemType, GenTimings, Generate, GgufWeights, InputProblem, Model, ModelError, ModelKind, OpenOptions, SamplingParams,
    TensorSpec,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tg_compiler::{CompileOptions, CompileReport};
use tg_gguf::GgufFile;
use tg_ir::{DType, Graph, GraphBuilder, HostTensor, IrError, Tensor};
use tg_runtime::{CpuDevice, Device, Executable};
use tg_tokenizer::Tokenizer;

/// Hyper-parameters of a Gemma 3 text model, read from GGUF metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Gemma3Config {
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Number of layers.
    pub n_layer: usize,
    /// FFN inner size.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// RoPE base of global layers.
    pub rope_base_global: f32,
    /// RoPE base of sliding-window layers.
    pub rope_base_local: f32,
    /// Sliding-window size of local layers.
    pub sliding_window: usize,
    /// Every `swa_pattern`-th layer is global.
    pub swa_pattern: usize,
    /// Maximum context length.
    pub context_length: usize,
    /// Query scale (`1/sqrt(head_dim)`, or `query_pre_attn_scalar^-1/2` in HF configs).
    pub attn_scale: f32,
    /// Explicit per-layer flags, `true` for global layers (HF `layer_types`); `None` means
    /// every `swa_pattern`-th layer is global.
    pub layer_global: Option<Vec<bool>>,
    /// Added to every RMSNorm weight before use: 0 for GGUF files (conversion already folded
    /// Gemma's `(1 + w)` into the stored weights), 1 for Hugging Face checkpoints.
    pub norm_offset: f32,
    /// Causal attention (text generation); `false` for bidirectional encoders such as
    /// EmbeddingGemma, where a local layer sees keys with `|i − j| ≤ sliding_window / 2`.
    pub causal: bool,
}

impl Gemma3Config {
    /// Reads the configuration from a GGUF file's metadata, checking the architecture.
    pub fn from_gguf(f: &GgufFile) -> Result<Gemma3Config, ModelError> {
        let arch = f.get_str("general.architecture")?;
        if arch != "gemma3" {
            return Err(ModelError::Architecture { file: f.name().to_string(), detail: format!("architecture is '{arch}', expected 'gemma3'") });
        }
        let u = |k: &str| f.get_u32(&format!("gemma3.{k}")).map(|v| v as usize);
        let n_head = u("attention.head_count")?;
        let n_embd = u("embedding_length")?;
        let head_dim = match u("attention.key_length") {
            Ok(v) => v,
            Err(_) => n_embd / n_head.max(1),
        };
        let n_vocab = f.tensor("token_embd.weight")?.dims.get(1).copied().unwrap_or(0) as usize;
        let cfg = Gemma3Config {
            n_vocab,
            n_embd,
            n_layer: u("block_count")?,
            n_ff: u("feed_forward_length")?,
            n_head,
            n_head_kv: u("attention.head_count_kv")?,
            head_dim,
            rms_eps: f.get_f32("gemma3.attention.layer_norm_rms_epsilon")?,
            rope_base_global: f.get_f32("gemma3.rope.freq_base").unwrap_or(1_000_000.0),
            // Not stored in GGUF files of this architecture; Gemma 3 uses 10k on local layers.
            rope_base_local: 10_000.0,
            sliding_window: u("attention.sliding_window")?,
            swa_pattern: 6,
            context_length: u("context_length")?,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            layer_global: None,
            norm_offset: 0.0,
            causal: true,
        };
        if cfg.n_head == 0 || cfg.n_head_kv == 0 || !cfg.n_head.is_multiple_of(cfg.n_head_kv) || !cfg.head_dim.is_multiple_of(2) {
            return Err(ModelError::Architecture {
                file: f.name().to_string(),
                detail: format!("unsupported head layout: {} query heads, {} kv heads, head dim {}", cfg.n_head, cfg.n_head_kv, cfg.head_dim),
            });
        }
        Ok(cfg)
    }

    /// True for layers with global (full causal) attention.
    pub fn is_global(&self, layer: usize) -> bool {
        match &self.layer_global {
            Some(v) => v.get(layer).copied().unwrap_or(false),
            None => (layer + 1).is_multiple_of(self.swa_pattern),
        }
    }

    /// Expected (row-major shape) of every tensor the model reads, with GGUF names.
    pub fn expected_tensors(&self) -> Vec<(String, Vec<usize>)> {
        self.expected_tensors_named(&TensorNames::Gguf, true)
    }

    /// Expected (row-major shape) of every tensor the model reads, named by `names`; the
    /// final norm is included when `final_norm` is set.
    pub fn expected_tensors_named(&self, names: &TensorNames, final_norm: bool) -> Vec<(String, Vec<usize>)> {
        let (d, hd, ff) = (self.n_embd, self.head_dim, self.n_ff);
        let mut v = vec![(names.global(Role::TokenEmbd), vec![self.n_vocab, d])];
        if final_norm {
            v.push((names.global(Role::OutputNorm), vec![d]));
        }
        for l in 0..self.n_layer {
            for (role, shape) in [
                (Role::AttnNorm, vec![d]),
                (Role::Q, vec![self.n_head * hd, d]),
                (Role::K, vec![self.n_head_kv * hd, d]),
                (Role::V, vec![self.n_head_kv * hd, d]),
                (Role::QNorm, vec![hd]),
                (Role::KNorm, vec![hd]),
                (Role::AttnOut, vec![d, self.n_head * hd]),
                (Role::PostAttnNorm, vec![d]),
                (Role::FfnNorm, vec![d]),
                (Role::Gate, vec![ff, d]),
                (Role::Up, vec![ff, d]),
                (Role::Down, vec![d, ff]),
                (Role::PostFfnNorm, vec![d]),
            ] {
                v.push((names.layer(role, l), shape));
            }
        }
        v
    }
}

/// The role a weight plays in the Gemma 3 architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Token embedding table `[n_vocab, n_embd]` (also the tied output head).
    TokenEmbd,
    /// Final RMSNorm.
    OutputNorm,
    /// Pre-attention RMSNorm.
    AttnNorm,
    /// Query projection.
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Per-head query RMSNorm.
    QNorm,
    /// Per-head key RMSNorm.
    KNorm,
    /// Attention output projection.
    AttnOut,
    /// RMSNorm after attention.
    PostAttnNorm,
    /// Pre-FFN RMSNorm.
    FfnNorm,
    /// FFN gate projection.
    Gate,
    /// FFN up projection.
    Up,
    /// FFN down projection.
    Down,
    /// RMSNorm after the FFN.
    PostFfnNorm,
}

/// How a checkpoint names its tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorNames {
    /// llama.cpp's GGUF names (`blk.N.attn_q.weight`, `token_embd.weight`, ...).
    Gguf,
    /// Hugging Face names (`layers.N.self_attn.q_proj.weight`, `embed_tokens.weight`, ...),
    /// each preceded by `prefix` (e.g. `""` or `"model."`).
    HuggingFace {
        /// Prepended to every name.
        prefix: String,
    },
}

impl TensorNames {
    /// Name of a model-level weight (`TokenEmbd` or `OutputNorm`).
    pub fn global(&self, role: Role) -> String {
        match (self, role) {
            (TensorNames::Gguf, Role::TokenEmbd) => "token_embd.weight".into(),
            (TensorNames::Gguf, _) => "output_norm.weight".into(),
            (TensorNames::HuggingFace { prefix }, Role::TokenEmbd) => format!("{prefix}embed_tokens.weight"),
            (TensorNames::HuggingFace { prefix }, _) => format!("{prefix}norm.weight"),
        }
    }

    /// Name of a weight of layer `l`.
    pub fn layer(&self, role: Role, l: usize) -> String {
        match self {
            TensorNames::Gguf => {
                let s = match role {
                    Role::AttnNorm => "attn_norm",
                    Role::Q => "attn_q",
                    Role::K => "attn_k",
                    Role::V => "attn_v",
                    Role::QNorm => "attn_q_norm",
                    Role::KNorm => "attn_k_norm",
                    Role::AttnOut => "attn_output",
                    Role::PostAttnNorm => "post_attention_norm",
                    Role::FfnNorm => "ffn_norm",
                    Role::Gate => "ffn_gate",
                    Role::Up => "ffn_up",
                    Role::Down => "ffn_down",
                    Role::PostFfnNorm => "post_ffw_norm",
                    Role::TokenEmbd | Role::OutputNorm => return self.global(role),
                };
                format!("blk.{l}.{s}.weight")
            }
            TensorNames::HuggingFace { prefix } => {
                let s = match role {
                    Role::AttnNorm => "input_layernorm",
                    Role::Q => "self_attn.q_proj",
                    Role::K => "self_attn.k_proj",
                    Role::V => "self_attn.v_proj",
                    Role::QNorm => "self_attn.q_norm",
                    Role::KNorm => "self_attn.k_norm",
                    Role::AttnOut => "self_attn.o_proj",
                    Role::PostAttnNorm => "post_attention_layernorm",
                    Role::FfnNorm => "pre_feedforward_layernorm",
                    Role::Gate => "mlp.gate_proj",
                    Role::Up => "mlp.up_proj",
                    Role::Down => "mlp.down_proj",
                    Role::PostFfnNorm => "post_feedforward_layernorm",
                    Role::TokenEmbd | Role::OutputNorm => return self.global(role),
                };
                format!("{prefix}layers.{l}.{s}.weight")
            }
        }
    }
}

/// Which logits the graph returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Logits {
    /// Only the last position: output `logits` of shape `[1, n_vocab]`.
    Last,
    /// Every position: output `logits` of shape `[seq, n_vocab]`.
    All,
}

/// Looks up weight shapes/dtypes for the graph builder.
pub trait WeightShapes {
    /// Row-major shape and dtype of a weight, or an error naming it.
    fn shape_of(&self, name: &str) -> Result<(Vec<usize>, DType), ModelError>;
}

impl WeightShapes for GgufFile {
    fn shape_of(&self, name: &str) -> Result<(Vec<usize>, DType), ModelError> {
        let t = self.tensor(name)?;
        let shape: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
        let dtype = match t.ty {
            tg_quant::GgmlType::F32 => DType::F32,
            ty => DType::Quant(ty),
        };
        Ok((shape, dtype))
    }
}

pub(crate) struct Ctx<'a> {
    pub(crate) b: GraphBuilder,
    pub(crate) cfg: &'a Gemma3Config,
    pub(crate) w: &'a dyn WeightShapes,
    pub(crate) names: &'a TensorNames,
}

/// RoPE tables and attention mask of one layer kind (global or local).
#[derive(Clone, Copy)]
pub(crate) struct LayerInputs {
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    pub(crate) mask: Tensor,
}

impl Ctx<'_> {
    /// An RMSNorm weight of `dim` elements, with the configured offset added (`1 + w` for
    /// Hugging Face checkpoints).
    pub(crate) fn norm_weight(&mut self, name: &str, dim: usize) -> Result<Tensor, ModelError> {
        let w = self.weight(name, &[dim])?;
        Ok(layers::norm_weight(&mut self.b, w, self.cfg.norm_offset as f64)?)
    }

    pub(crate) fn weight(&mut self, name: &str, expect: &[usize]) -> Result<Tensor, ModelError> {
        let (shape, dtype) = self.w.shape_of(name)?;
        let shape = if shape.len() == 2 && shape[0] == 1 && expect.len() == 1 { vec![shape[1]] } else { shape };
        if shape != expect {
            return Err(ModelError::Request(format!("tensor '{name}' has shape {shape:?}, the architecture needs {expect:?}")));
        }
        Ok(self.b.weight(name, &shape, dtype)?)
    }

    /// [`layers::rms_norm`] with the model's epsilon.
    pub(crate) fn rms_norm(&mut self, x: Tensor, w: Tensor) -> Result<Tensor, IrError> {
        layers::rms_norm(&mut self.b, x, Some(w), self.cfg.rms_eps as f64)
    }

    /// RoPE tables at positions `0..seq` ([`layers::rope_tables`]).
    fn rope_tables(&mut self, seq: usize, base: f32) -> Result<(Tensor, Tensor), IrError> {
        layers::rope_tables(&mut self.b, seq, self.cfg.head_dim, base as f64)
    }

    /// RoPE tables at the f32 positions `pos: [seq, 1, 1]` ([`layers::rope_tables_at`]).
    pub(crate) fn rope_tables_at(&mut self, pos: Tensor, base: f32) -> Result<(Tensor, Tensor), IrError> {
        layers::rope_tables_at(&mut self.b, pos, self.cfg.head_dim, base as f64)
    }

    /// One transformer block on the residual stream `x: [seq, n_embd]`.
    pub(crate) fn block(&mut self, l: usize, x: Tensor, seq: usize, li: LayerInputs) -> Result<Tensor, ModelError> {
        let cfg = self.cfg;
        let (d, hd, nh, nkv, ff) = (cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.n_ff);
        let names = self.names;
        let p = |r: Role| names.layer(r, l);
        let LayerInputs { cos, sin, mask } = li;

        let w = self.norm_weight(&p(Role::AttnNorm), d)?;
        let h = self.rms_norm(x, w)?;
        let wq = self.weight(&p(Role::Q), &[nh * hd, d])?;
        let wk = self.weight(&p(Role::K), &[nkv * hd, d])?;
        let wv = self.weight(&p(Role::V), &[nkv * hd, d])?;
        let q = self.b.matmul(h, wq, true)?;
        let k = self.b.matmul(h, wk, true)?;
        let v = self.b.matmul(h, wv, true)?;
        let q = self.b.reshape(q, &[seq, nh, hd])?;
        let k = self.b.reshape(k, &[seq, nkv, hd])?;
        let wqn = self.norm_weight(&p(Role::QNorm), hd)?;
        let wkn = self.norm_weight(&p(Role::KNorm), hd)?;
        let q = self.rms_norm(q, wqn)?;
        let k = self.rms_norm(k, wkn)?;
        let q = layers::rope_neox(&mut self.b, q, cos, sin)?;
        let k = layers::rope_neox(&mut self.b, k, cos, sin)?;
        let heads = layers::Heads { n_head: nh, n_head_kv: nkv, head_dim: hd };
        let o = layers::attention(&mut self.b, q, k, v, Some(mask), heads, cfg.attn_scale as f64)?; // [seq, nh * hd]
        let wo = self.weight(&p(Role::AttnOut), &[d, nh * hd])?;
        let a = self.b.matmul(o, wo, true)?;
        let w = self.norm_weight(&p(Role::PostAttnNorm), d)?;
        let a = self.rms_norm(a, w)?;
        let x = self.b.add(x, a)?;

        let w = self.norm_weight(&p(Role::FfnNorm), d)?;
        let h = self.rms_norm(x, w)?;
        let wg = self.weight(&p(Role::Gate), &[ff, d])?;
        let wu = self.weight(&p(Role::Up), &[ff, d])?;
        let wd = self.weight(&p(Role::Down), &[d, ff])?;
        let dn = layers::gated_ffn(&mut self.b, h, wg, wu, wd, layers::Gate::GeluTanh)?;
        let w = self.norm_weight(&p(Role::PostFfnNorm), d)?;
        let dn = self.rms_norm(dn, w)?;
        Ok(self.b.add(x, dn)?)
    }
}

/// Builds the Gemma 3 forward pass for `seq` tokens: input `tokens` (i32 `[seq]`), output
/// `logits` (f32). A pure function of the tokens: no cache, no fused ops.
pub fn build_graph(cfg: &Gemma3Config, weights: &dyn WeightShapes, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
    build_graph_named(cfg, weights, &TensorNames::Gguf, seq, logits)
}

/// [`build_graph`] for a checkpoint whose tensors are named by `names`.
pub fn build_graph_named(cfg: &Gemma3Config, weights: &dyn WeightShapes, names: &TensorNames, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
    if seq == 0 {
        return Err(ModelError::Request("cannot run on an empty token sequence".into()));
    }
    if !cfg.causal {
        return Err(ModelError::Request("a bidirectional model has no logits; use the embedding graph".into()));
    }
    let d = cfg.n_embd;
    let mut c = Ctx { b: GraphBuilder::new(), cfg, w: weights, names };
    let tokens = c.b.input("tokens", &[seq], DType::I32)?;
    let emb = c.weight(&names.global(Role::TokenEmbd), &[cfg.n_vocab, d])?;
    let x0 = c.b.gather(emb, tokens)?;
    let mut x = c.b.scale(x0, (d as f64).sqrt())?;

    let (cos, sin) = c.rope_tables(seq, cfg.rope_base_global)?;
    let mask = layers::causal_mask(&mut c.b, seq, None)?;
    let global = LayerInputs { cos, sin, mask };
    let (cos, sin) = c.rope_tables(seq, cfg.rope_base_local)?;
    let mask = layers::causal_mask(&mut c.b, seq, Some(cfg.sliding_window))?;
    let local = LayerInputs { cos, sin, mask };

    for l in 0..cfg.n_layer {
        x = c.block(l, x, seq, if cfg.is_global(l) { global } else { local })?;
    }
    let w = c.norm_weight(&names.global(Role::OutputNorm), d)?;
    let x = match logits {
        Logits::Last => c.b.slice(x, 0, seq - 1, seq)?,
        Logits::All => x,
    };
    let x = c.rms_norm(x, w)?;
    let out = c.b.matmul(x, emb, true)?;
    c.b.output("logits", out)?;
    Ok(c.b.finish()?)
}

/// A loaded Gemma 3 model: the mapped GGUF, its tokenizer, a CPU device, and compiled
/// plans cached per sequence length.
pub struct Gemma3 {
    /// Configuration read from the file.
    pub config: Gemma3Config,
    /// Tokenizer built from the file's metadata.
    pub tokenizer: Arc<Tokenizer>,
    pub(crate) file: Arc<GgufFile>,
    pub(crate) weights: Arc<GgufWeights>,
    /// Plans by (sequence length, which logits).
    pub(crate) plans: PlanCache<(usize, Logits)>,
    /// The incremental path: plans by (new rows, capacity), and the kept states.
    pub(crate) session: crate::session::Session,
    path: PathBuf,
}

impl Gemma3 {
    /// Maps `path`, reads the configuration and tokenizer, and checks every tensor the
    /// model needs (name, shape, type) before anything runs.
    pub fn load(path: impl AsRef<Path>, threads: usize) -> Result<Gemma3, ModelError> {
        let device: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).map_err(ModelError::Request)?);
        Gemma3::load_on(path, device)
    }

    /// [`Gemma3::load`] with plans compiled for and run on `device` (its weights bound there
    /// once, its kept states living there).
    pub fn load_on(path: impl AsRef<Path>, device: Arc<dyn Device>) -> Result<Gemma3, ModelError> {
        Gemma3::load_on_devices(path, vec![device])
    }

    /// [`Gemma3::load`] with plans compiled for `devices` together (the first is home: inputs
    /// arrive, logits leave and kept states live there): the planner places each op on one of
    /// them, from the kernel times measured on each (see `tg_compiler::compile`).
    pub fn load_on_devices(path: impl AsRef<Path>, devices: Vec<Arc<dyn Device>>) -> Result<Gemma3, ModelError> {
        if devices.is_empty() {
            return Err(ModelError::Request("no devices to run on".into()));
        }
        let file = Arc::new(GgufFile::open(path.as_ref())?);
        let config = Gemma3Config::from_gguf(&file)?;
        for (name, shape) in config.expected_tensors() {
            let (got, dtype) = file.shape_of(&name)?;
            let got = if got.len() == 2 && got[0] == 1 && shape.len() == 1 { vec![got[1]] } else { got };
            if got != shape {
                return Err(ModelError::Architecture { file: file.name().to_string(), detail: format!("tensor '{name}' has shape {got:?}, expected {shape:?}") });
            }
            if let DType::Quant(t) = dtype {
                if matches!(t, tg_quant::GgmlType::I8 | tg_quant::GgmlType::I16 | tg_quant::GgmlType::I32 | tg_quant::GgmlType::I64 | tg_quant::GgmlType::F64) {
                    return Err(ModelError::Architecture { file: file.name().to_string(), detail: format!("tensor '{name}' has unsupported type {t}") });
                }
            }
        }
        let tokenizer = Arc::new(Tokenizer::from_gguf(&file)?);
        if tokenizer.vocab_size() != config.n_vocab {
            return Err(ModelError::Architecture {
                file: file.name().to_string(),
                detail: format!("tokenizer has {} tokens, embedding table {}", tokenizer.vocab_size(), config.n_vocab),
            });
        }
        let weights = Arc::new(GgufWeights::new(file.clone()));
        let session = crate::session::Session::new(devices.clone());
        Ok(Gemma3 { config, tokenizer, file, weights, plans: PlanCache::new(devices), session, path: path.as_ref().to_path_buf() })
    }

    /// The (home) device the model's plans run on.
    pub fn device(&self) -> Arc<dyn Device> {
        self.plans.device().clone()
    }

    /// Every device the model's plans are compiled for, home first.
    pub fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.plans.devices().to_vec()
    }

    /// The mapped file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The weight store (for the reference interpreter).
    pub fn weights(&self) -> &GgufWeights {
        &self.weights
    }

    /// Sets compiler options for plans compiled from now on (clears the plan caches).
    pub fn set_compile_options(&mut self, o: CompileOptions) {
        self.plans.set_options(o.clone());
        self.session.plans.set_options(o);
    }

    /// Where compiled plans are kept across processes: by default `plans/` in the cache
    /// directory ([`tg_compiler::PlanStore::default_store`]; `TG_PLAN_CACHE=off` disables
    /// it); `None` compiles every plan in this process.
    pub fn set_plan_store(&mut self, store: Option<tg_compiler::PlanStore>) {
        self.plans.set_store(store.clone());
        self.session.plans.set_store(store);
    }

    /// Times every step of every run from now on (see [`Gemma3::generation_plan`]).
    pub fn set_profiling(&mut self, on: bool) {
        self.plans.set_profiling(on);
        self.session.plans.set_profiling(on);
    }

    /// The report of the most recent compilation (of a whole-sequence plan, or of an
    /// incremental one, whichever came last).
    pub fn last_report(&self) -> Option<&CompileReport> {
        match (self.plans.last_report(), self.session.plans.last_report()) {
            (Some(a), Some(b)) => Some(if self.session.last_compiled_incremental { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// The forward graph for `seq` tokens.
    pub fn graph(&self, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
        build_graph(&self.config, &*self.file, seq, logits)
    }

    pub(crate) fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Request("empty token sequence".into()));
        }
        if tokens.len() > self.config.context_length {
            return Err(ModelError::Request(format!("{} tokens exceed the model's context length of {}", tokens.len(), self.config.context_length)));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.config.n_vocab) {
            return Err(ModelError::Request(format!("token id {t} is outside the vocabulary of {}", self.config.n_vocab)));
        }
        Ok(())
    }

    /// Compiles (or fetches from the cache) the plan for `seq` tokens.
    pub fn prepare(&mut self, seq: usize, logits: Logits) -> Result<(), ModelError> {
        self.plan(seq, logits).map(|_| ())
    }

    fn plan(&mut self, seq: usize, logits: Logits) -> Result<&mut Executable, ModelError> {
        if !self.plans.contains(&(seq, logits)) {
            self.session.last_compiled_incremental = false;
        }
        let (config, file) = (&self.config, &self.file);
        self.plans.get_or_compile((seq, logits), self.weights.clone(), || build_graph(config, &**file, seq, logits))
    }

    /// Runs the model on `tokens` and returns the logits (`[1, n_vocab]` for
    /// [`Logits::Last`], `[seq, n_vocab]` for [`Logits::All`]) as a flat vector.
    pub fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>, ModelError> {
        self.check_tokens(tokens)?;
        let exe = self.plan(tokens.len(), logits)?;
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let input = HostTensor::i32(&[ids.len()], ids)?;
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), input);
        let mut out = exe.run(&inputs)?;
        let t = out.remove("logits").ok_or_else(|| ModelError::Request("plan produced no logits".into()))?;
        match t.data {
            tg_ir::HostData::F32(v) => Ok(v),
            _ => Err(ModelError::Request("logits are not f32".into())),
        }
    }

    /// Drops cached plans (e.g. to bound memory during long generations).
    pub fn clear_plans(&mut self) {
        self.plans.clear();
        self.session.plans.clear();
    }

    /// The number of cached plans.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }
}

/// The registry entry ([`crate::KINDS`]): a GGUF file whose `general.architecture` is
/// `gemma3`.
pub const KIND: ModelKind = ModelKind { name: "gemma3", what: "a Gemma 3 GGUF file (general.architecture = gemma3)", detect, open: open_model };

fn detect(path: &Path) -> Detect {
    if !path.is_file() || crate::head(path, 4) != b"GGUF" {
        return Detect::No;
    }
    match GgufFile::open(path) {
        Ok(f) => match f.get_str("general.architecture") {
            Ok("gemma3") => Detect::Yes,
            Ok(arch) => Detect::Near(format!("a GGUF file of architecture '{arch}'")),
            Err(_) => Detect::Near("a GGUF file with no general.architecture".into()),
        },
        // A damaged GGUF file: the loader's error says what is wrong with it.
        Err(_) => Detect::Yes,
    }
}

fn open_model(path: &Path, o: OpenOptions) -> Result<Box<dyn Model>, ModelError> {
    let mut m = Gemma3::load_on_devices(path, o.devices)?;
    m.set_compile_options(o.compile);
    Ok(Box::new(m))
}

impl Gemma3 {
    /// The file the model was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token ids of the `tokens` input of [`Model::run`], each checked against the
    /// vocabulary.
    fn token_input(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<u32>, ModelError> {
        check_inputs(&self.path, &Model::inputs(self), inputs)?;
        let t = &inputs["tokens"];
        let tg_ir::HostData::I32(ids) = &t.data else { return Err(input_error(&self.path, InputProblem::DType, "input 'tokens': expected int32")) };
        if ids.is_empty() {
            return Err(input_error(&self.path, InputProblem::Shape, "input 'tokens': no tokens"));
        }
        match ids.iter().find(|&&t| t < 0 || t as usize >= self.config.n_vocab) {
            Some(t) => Err(input_error(&self.path, InputProblem::Value, format!("input 'tokens': token id {t} is outside the vocabulary of {}", self.config.n_vocab))),
            None => Ok(ids.iter().map(|&t| t as u32).collect()),
        }
    }
}

/// Gemma 3 as a [`Model`]: input `tokens` (int32 `[tokens]`, at most the context length),
/// output `logits` (float32 `[tokens, n_vocab]`: every position, as
/// [`Gemma3::forward`] with [`Logits::All`]); it generates ([`Model::as_generator`]).
impl Model for Gemma3 {
    fn kind(&self) -> &'static str {
        KIND.name
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn inputs(&self) -> Vec<TensorSpec> {
        vec![TensorSpec::new("tokens", ElemType::I32, vec![Dim::free("tokens", Some(self.config.context_length))])]
    }

    fn outputs(&self) -> Vec<TensorSpec> {
        vec![TensorSpec::new("logits", ElemType::F32, vec![Dim::free("tokens", Some(self.config.context_length)), Dim::Fixed(self.config.n_vocab)])]
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        Gemma3::devices(self)
    }

    fn set_compile_options(&mut self, options: CompileOptions) {
        Gemma3::set_compile_options(self, options)
    }

    fn compile(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<CompileTimes, ModelError> {
        let ids = self.token_input(inputs)?;
        let before = self.plans.stats();
        self.prepare(ids.len(), Logits::All)?;
        Ok(self.plans.stats().since(before))
    }

    fn graphs(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<tg_ir::Graph>, ModelError> {
        let ids = self.token_input(inputs)?;
        Ok(vec![self.graph(ids.len(), Logits::All)?])
    }

    fn run(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, ModelError> {
        let ids = self.token_input(inputs)?;
        let v = self.forward(&ids, Logits::All)?;
        Ok(vec![("logits".to_string(), HostTensor::f32(&[ids.len(), self.config.n_vocab], v)?)])
    }

    fn last_report(&self) -> Option<&CompileReport> {
        Gemma3::last_report(self)
    }

    fn config(&self) -> serde_json::Value {
        serde_json::to_value(&self.config).unwrap_or_default()
    }

    fn as_generator(&mut self) -> Option<&mut dyn Generate> {
        Some(self)
    }
}

impl Generate for Gemma3 {
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, ModelError> {
        Ok(self.tokenizer.encode(text, add_bos, true))
    }

    fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        Ok(self.tokenizer.decode(ids, false)?)
    }

    fn generate(&mut self, prompt: &[u32], n: usize, params: &SamplingParams, on_token: &mut dyn FnMut(u32) -> bool) -> Result<(Vec<u32>, GenTimings), ModelError> {
        self.generate_tokens(prompt, n, params, on_token)
    }
}
