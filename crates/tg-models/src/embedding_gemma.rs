//! EmbeddingGemma: a bidirectional Gemma 3 encoder followed by the sentence-transformers
//! modules (pooling, dense layers, L2 normalisation), loaded from a sentence-transformers
//! folder with safetensors weights.
//!
//! The encoder is the same graph code as the Gemma 3 decoder ([`crate::gemma3`]) with a
//! different configuration: bidirectional attention (a local layer sees keys with
//! `|i − j| ≤ sliding_window / 2`, see [`bidirectional_window`]), Hugging Face tensor names, RMSNorm weights used as
//! `1 + w`, and no output head. Everything is read from the folder: `config.json` (the
//! encoder), `modules.json` and each module's config (pooling mode, dense layers and their
//! activations, normalisation), `sentence_bert_config.json` (maximum sequence length) and
//! `config_sentence_transformers.json` (task prompts). Unsupported settings are errors that
//! name the file and the setting, never silently ignored.
//!
//! **Batching.** Several texts run as one *packed* sequence: their tokens are concatenated,
//! each keeps its own positions (`positions` input) and a segment id (`segments` input), and
//! the attention mask only lets a token see tokens of its own segment. No padding is
//! computed, and mean pooling is a `[batch, tokens]` matrix product built from the segment
//! ids. Plans are compiled per (total tokens, batch size, output dimension) and cached.

use crate::gemma3::{Ctx, Gemma3Config, LayerInputs, Role, TensorNames, WeightShapes};
use crate::layers;
use crate::plans::PlanCache;
use crate::{check_inputs, input_error, CompileTimes, Detect, Dim, ElemType, Embed, InputProblem, Model, ModelError, ModelKind, OpenOptions, SafetensorsWeights, TensorSpec};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tg_compiler::{CompileOptions, CompileReport};
use tg_ir::{CmpOp, DType, Graph, GraphBuilder, HostTensor, ReduceOp, UnaryOp};
use tg_runtime::{CpuDevice, Device};
use tg_tokenizer::HfTokenizer;

/// Pooling of the token embeddings into one vector per text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Pooling {
    /// Mean over all tokens of the text (BOS, prompt and EOS included).
    Mean,
}

/// Activation after a dense layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Activation {
    /// `torch.nn.Identity`.
    Identity,
    /// `torch.nn.Tanh` (the sentence-transformers default).
    Tanh,
}

/// One sentence-transformers `Dense` module.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DenseLayer {
    /// Input width.
    pub in_features: usize,
    /// Output width.
    pub out_features: usize,
    /// Weight name in the [`SafetensorsWeights`] store (`[out, in]`).
    pub weight: String,
    /// Bias name, when the layer has one.
    pub bias: Option<String>,
    /// Activation applied after the affine map.
    pub activation: Activation,
}

/// Everything that defines an embedding model: the encoder and the modules after it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EmbeddingConfig {
    /// The Gemma 3 encoder (bidirectional).
    pub encoder: Gemma3Config,
    /// Texts are truncated to this many tokens (BOS and EOS included).
    pub max_seq_length: usize,
    /// How token vectors become one vector.
    pub pooling: Pooling,
    /// Dense layers after pooling, in order.
    pub dense: Vec<DenseLayer>,
    /// Whether the pipeline ends with L2 normalisation.
    pub normalize: bool,
    /// Named task prompts prepended to the text (`query`, `document`, `STS`, ...).
    pub prompts: BTreeMap<String, String>,
    /// Prompt used when the caller names none.
    pub default_prompt_name: Option<String>,
}

impl EmbeddingConfig {
    /// Width of the final embedding.
    pub fn output_dim(&self) -> usize {
        self.dense.last().map(|d| d.out_features).unwrap_or(self.encoder.n_embd)
    }
}

fn read_json(path: &Path) -> Result<Value, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::Request(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| ModelError::Request(format!("{}: invalid JSON: {e}", path.display())))
}

fn bad(path: &Path, detail: impl Into<String>) -> ModelError {
    ModelError::Architecture { file: path.display().to_string(), detail: detail.into() }
}

fn get_usize(v: &Value, key: &str, path: &Path) -> Result<usize, ModelError> {
    v.get(key).and_then(Value::as_u64).map(|x| x as usize).ok_or_else(|| bad(path, format!("'{key}' is missing or not a non-negative integer")))
}

fn get_f64(v: &Value, key: &str, path: &Path) -> Result<f64, ModelError> {
    v.get(key).and_then(Value::as_f64).ok_or_else(|| bad(path, format!("'{key}' is missing or not a number")))
}

fn is_unset(v: &Value, key: &str) -> bool {
    v.get(key).is_none_or(Value::is_null)
}

/// RoPE base of one layer kind, from `rope_parameters` (transformers ≥ 5) or the older
/// `rope_theta` / `rope_local_base_freq` keys.
fn rope_base(v: &Value, kind: &str, legacy: &str, default: Option<f64>, path: &Path) -> Result<f32, ModelError> {
    if let Some(p) = v.get("rope_parameters").and_then(|p| p.get(kind)) {
        if let Some(t) = p.get("rope_type").and_then(Value::as_str) {
            if t != "default" {
                return Err(bad(path, format!("rope_parameters.{kind}.rope_type '{t}' is not supported")));
            }
        }
        return Ok(get_f64(p, "rope_theta", path)? as f32);
    }
    match (v.get(legacy).and_then(Value::as_f64), default) {
        (Some(x), _) | (None, Some(x)) => Ok(x as f32),
        (None, None) => Err(bad(path, format!("'{legacy}' is missing"))),
    }
}

impl Gemma3Config {
    /// Reads a Hugging Face `config.json` of a Gemma 3 text model (`model_type`
    /// `gemma3_text`). Settings this engine does not implement (logit soft-capping, RoPE
    /// scaling, another activation) are errors.
    pub fn from_hf_config(path: &Path) -> Result<Gemma3Config, ModelError> {
        let v = read_json(path)?;
        let mt = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        if mt != "gemma3_text" {
            return Err(bad(path, format!("model_type is '{mt}', expected 'gemma3_text'")));
        }
        let act = v.get("hidden_activation").and_then(Value::as_str).unwrap_or("");
        if act != "gelu_pytorch_tanh" {
            return Err(bad(path, format!("hidden_activation '{act}' is not supported (only gelu_pytorch_tanh)")));
        }
        for key in ["attn_logit_softcapping", "final_logit_softcapping", "rope_scaling"] {
            if !is_unset(&v, key) {
                return Err(bad(path, format!("'{key}' is set; this engine does not implement it")));
            }
        }
        if v.get("attention_bias").and_then(Value::as_bool).unwrap_or(false) {
            return Err(bad(path, "'attention_bias' is true; Gemma 3 layers without biases are supported only"));
        }
        let n_layer = get_usize(&v, "num_hidden_layers", path)?;
        let n_embd = get_usize(&v, "hidden_size", path)?;
        let n_head = get_usize(&v, "num_attention_heads", path)?;
        let head_dim = match v.get("head_dim").and_then(Value::as_u64) {
            Some(h) => h as usize,
            None => n_embd / n_head.max(1),
        };
        let swa_pattern = v.get("sliding_window_pattern").or_else(|| v.get("_sliding_window_pattern")).and_then(Value::as_u64).unwrap_or(6) as usize;
        let layer_global = match v.get("layer_types") {
            Some(Value::Array(a)) => {
                let mut g = Vec::with_capacity(a.len());
                for (i, t) in a.iter().enumerate() {
                    match t.as_str() {
                        Some("full_attention") => g.push(true),
                        Some("sliding_attention") => g.push(false),
                        other => return Err(bad(path, format!("layer_types[{i}] is {other:?}, expected 'full_attention' or 'sliding_attention'"))),
                    }
                }
                if g.len() != n_layer {
                    return Err(bad(path, format!("layer_types has {} entries for {n_layer} layers", g.len())));
                }
                Some(g)
            }
            None | Some(Value::Null) => None,
            Some(_) => return Err(bad(path, "'layer_types' is not a list")),
        };
        let scalar = match v.get("query_pre_attn_scalar").and_then(Value::as_f64) {
            Some(s) => s,
            None => head_dim as f64,
        };
        let cfg = Gemma3Config {
            n_vocab: get_usize(&v, "vocab_size", path)?,
            n_embd,
            n_layer,
            n_ff: get_usize(&v, "intermediate_size", path)?,
            n_head,
            n_head_kv: get_usize(&v, "num_key_value_heads", path)?,
            head_dim,
            rms_eps: get_f64(&v, "rms_norm_eps", path)? as f32,
            rope_base_global: rope_base(&v, "full_attention", "rope_theta", None, path)?,
            rope_base_local: rope_base(&v, "sliding_attention", "rope_local_base_freq", Some(10_000.0), path)?,
            sliding_window: get_usize(&v, "sliding_window", path)?,
            swa_pattern: swa_pattern.max(1),
            context_length: get_usize(&v, "max_position_embeddings", path)?,
            attn_scale: (1.0 / scalar.sqrt()) as f32,
            layer_global,
            norm_offset: 1.0,
            causal: !v.get("use_bidirectional_attention").and_then(Value::as_bool).unwrap_or(false),
        };
        if cfg.n_head == 0 || cfg.n_head_kv == 0 || !cfg.n_head.is_multiple_of(cfg.n_head_kv) || !cfg.head_dim.is_multiple_of(2) || cfg.n_layer == 0 {
            return Err(bad(path, format!("unsupported head layout: {} query heads, {} kv heads, head dim {}", cfg.n_head, cfg.n_head_kv, cfg.head_dim)));
        }
        Ok(cfg)
    }
}

impl EmbeddingConfig {
    /// Reads a sentence-transformers folder: `config.json`, `modules.json`, the module
    /// configs, `sentence_bert_config.json` and `config_sentence_transformers.json`.
    pub fn from_dir(dir: &Path) -> Result<EmbeddingConfig, ModelError> {
        let modules_path = dir.join("modules.json");
        let modules = read_json(&modules_path)?;
        let modules = modules.as_array().ok_or_else(|| bad(&modules_path, "expected a list of modules"))?;
        let mut encoder = None;
        let mut pooling = None;
        let mut dense = Vec::new();
        let mut normalize = false;
        let mut width = 0usize;
        for (i, m) in modules.iter().enumerate() {
            let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
            let sub = m.get("path").and_then(Value::as_str).unwrap_or("");
            let mdir = dir.join(sub);
            let order_err = |what: &str| bad(&modules_path, format!("module {i} ({ty}): {what}"));
            match ty {
                "sentence_transformers.models.Transformer" | "sentence_transformers.base.modules.Transformer" => {
                    if encoder.is_some() || i != 0 {
                        return Err(order_err("the transformer must be the first and only encoder"));
                    }
                    let cfg = Gemma3Config::from_hf_config(&mdir.join("config.json"))?;
                    if cfg.causal {
                        return Err(bad(&mdir.join("config.json"), "use_bidirectional_attention is not set: not an embedding encoder"));
                    }
                    width = cfg.n_embd;
                    encoder = Some(cfg);
                }
                "sentence_transformers.models.Pooling" => {
                    if encoder.is_none() || pooling.is_some() {
                        return Err(order_err("pooling must follow the transformer, once"));
                    }
                    let p = mdir.join("config.json");
                    let v = read_json(&p)?;
                    let on = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
                    let modes: Vec<&str> = [
                        "pooling_mode_cls_token",
                        "pooling_mode_mean_tokens",
                        "pooling_mode_max_tokens",
                        "pooling_mode_mean_sqrt_len_tokens",
                        "pooling_mode_weightedmean_tokens",
                        "pooling_mode_lasttoken",
                    ]
                    .into_iter()
                    .filter(|k| on(k))
                    .collect();
                    if modes != ["pooling_mode_mean_tokens"] {
                        return Err(bad(&p, format!("pooling modes {modes:?} are not supported (only pooling_mode_mean_tokens alone)")));
                    }
                    if !v.get("include_prompt").and_then(Value::as_bool).unwrap_or(true) {
                        return Err(bad(&p, "include_prompt = false is not supported"));
                    }
                    let w = get_usize(&v, "word_embedding_dimension", &p)?;
                    if w != width {
                        return Err(bad(&p, format!("word_embedding_dimension {w} differs from the encoder's hidden size {width}")));
                    }
                    pooling = Some(Pooling::Mean);
                }
                "sentence_transformers.models.Dense" => {
                    if pooling.is_none() || normalize {
                        return Err(order_err("dense layers must come after pooling and before normalisation"));
                    }
                    let p = mdir.join("config.json");
                    let v = read_json(&p)?;
                    let in_features = get_usize(&v, "in_features", &p)?;
                    let out_features = get_usize(&v, "out_features", &p)?;
                    if in_features != width {
                        return Err(bad(&p, format!("in_features {in_features} does not match the previous width {width}")));
                    }
                    let act = v.get("activation_function").and_then(Value::as_str).unwrap_or("torch.nn.modules.activation.Tanh");
                    let activation = match act {
                        "torch.nn.modules.linear.Identity" => Activation::Identity,
                        "torch.nn.modules.activation.Tanh" => Activation::Tanh,
                        other => return Err(bad(&p, format!("activation_function '{other}' is not supported (Identity, Tanh)"))),
                    };
                    let has_bias = v.get("bias").and_then(Value::as_bool).unwrap_or(true);
                    dense.push(DenseLayer { in_features, out_features, weight: format!("{sub}/linear.weight"), bias: has_bias.then(|| format!("{sub}/linear.bias")), activation });
                    width = out_features;
                }
                "sentence_transformers.models.Normalize" => {
                    if pooling.is_none() || normalize {
                        return Err(order_err("normalisation must come after pooling, once"));
                    }
                    normalize = true;
                }
                other => return Err(bad(&modules_path, format!("module {i}: type '{other}' is not supported"))),
            }
        }
        let encoder = encoder.ok_or_else(|| bad(&modules_path, "no Transformer module"))?;
        let pooling = pooling.ok_or_else(|| bad(&modules_path, "no Pooling module"))?;
        let sb = dir.join("sentence_bert_config.json");
        let max_seq_length = if sb.exists() { get_usize(&read_json(&sb)?, "max_seq_length", &sb)? } else { encoder.context_length };
        if max_seq_length < 3 || max_seq_length > encoder.context_length {
            return Err(bad(&sb, format!("max_seq_length {max_seq_length} must be within 3..={}", encoder.context_length)));
        }
        let stc = dir.join("config_sentence_transformers.json");
        let mut prompts = BTreeMap::new();
        let mut default_prompt_name = None;
        if stc.exists() {
            let v = read_json(&stc)?;
            if let Some(p) = v.get("prompts").and_then(Value::as_object) {
                for (k, s) in p {
                    let s = s.as_str().ok_or_else(|| bad(&stc, format!("prompt '{k}' is not a string")))?;
                    prompts.insert(k.clone(), s.to_string());
                }
            }
            default_prompt_name = v.get("default_prompt_name").and_then(Value::as_str).map(str::to_string);
            if let Some(d) = &default_prompt_name {
                if !prompts.contains_key(d) {
                    return Err(bad(&stc, format!("default_prompt_name '{d}' is not among the prompts")));
                }
            }
        }
        Ok(EmbeddingConfig { encoder, max_seq_length, pooling, dense, normalize, prompts, default_prompt_name })
    }
}

/// Builds the embedding graph for `batch` texts packed into `tokens` tokens.
///
/// Inputs: `tokens` (i32 `[tokens]`), `positions` (i32 `[tokens]`, each text counting
/// from 0) and `segments` (i32 `[tokens]`, the text index `0..batch`, non-decreasing).
/// Output: `embeddings` (f32 `[batch, dim]`); when `dim` is below the model's width the
/// vector is truncated (Matryoshka) and normalised again.
pub fn build_embedding_graph(cfg: &EmbeddingConfig, weights: &dyn WeightShapes, names: &TensorNames, tokens: usize, batch: usize, dim: usize) -> Result<Graph, ModelError> {
    let e = &cfg.encoder;
    if tokens == 0 || batch == 0 || batch > tokens {
        return Err(ModelError::Request(format!("cannot embed {batch} texts in {tokens} tokens")));
    }
    if dim == 0 || dim > cfg.output_dim() {
        return Err(ModelError::Request(format!("output dimension {dim} must be within 1..={}", cfg.output_dim())));
    }
    let d = e.n_embd;
    let mut c = Ctx { b: GraphBuilder::new(), cfg: e, w: weights, names };
    let ids = c.b.input("tokens", &[tokens], DType::I32)?;
    let positions = c.b.input("positions", &[tokens], DType::I32)?;
    let segments = c.b.input("segments", &[tokens], DType::I32)?;
    let emb = c.weight(&names.global(Role::TokenEmbd), &[e.n_vocab, d])?;
    let x0 = c.b.gather(emb, ids)?;
    let mut x = c.b.scale(x0, (d as f64).sqrt())?;

    let pos = c.b.cast(positions, DType::F32)?;
    let pos = c.b.reshape(pos, &[tokens, 1, 1])?;
    let (cos, sin) = c.rope_tables_at(pos, e.rope_base_global)?;
    let mask = layers::segment_mask(&mut c.b, segments, positions, tokens, None)?;
    let global = LayerInputs { cos, sin, mask };
    let (cos, sin) = c.rope_tables_at(pos, e.rope_base_local)?;
    let mask = layers::segment_mask(&mut c.b, segments, positions, tokens, Some(bidirectional_window(e.sliding_window)))?;
    let local = LayerInputs { cos, sin, mask };
    for l in 0..e.n_layer {
        x = c.block(l, x, tokens, if e.is_global(l) { global } else { local })?;
    }
    let w = c.norm_weight(&names.global(Role::OutputNorm), d)?;
    let x = c.rms_norm(x, w)?;

    // Mean pooling as a product: P[b, t] = [segment(t) = b] / count(b).
    let b = &mut c.b;
    let rows = b.iota(&[batch, tokens], 0, DType::I32)?;
    let seg = b.reshape(segments, &[1, tokens])?;
    let member = b.compare(CmpOp::Eq, rows, seg)?;
    let member = b.cast(member, DType::F32)?;
    let count = b.reduce_last(ReduceOp::Sum, member)?;
    let p = b.div(member, count)?;
    let mut y = b.matmul(p, x, false)?; // [batch, d]

    for layer in &cfg.dense {
        let w = c.weight(&layer.weight, &[layer.out_features, layer.in_features])?;
        y = c.b.matmul(y, w, true)?;
        if let Some(bias) = &layer.bias {
            let bv = c.weight(bias, &[layer.out_features])?;
            y = c.b.add(y, bv)?;
        }
        if layer.activation == Activation::Tanh {
            y = c.b.unary(UnaryOp::Tanh, y)?;
        }
    }
    if cfg.normalize {
        y = layers::l2_normalize(&mut c.b, y)?;
    }
    if dim < cfg.output_dim() {
        y = c.b.slice(y, 1, 0, dim)?;
        y = layers::l2_normalize(&mut c.b, y)?;
    }
    c.b.output("embeddings", y)?;
    Ok(c.b.finish()?)
}

/// The exclusive distance bound of a bidirectional local layer: a key is visible when
/// `|i − j| < sliding_window / 2 + 1`. The configured window is the *span* of the
/// attention, split evenly around the query (Hugging Face's Gemma 3 configuration halves
/// it the same way when `use_bidirectional_attention` is set): EmbeddingGemma's 512 means
/// 256 tokens on each side.
pub fn bidirectional_window(sliding_window: usize) -> usize {
    sliding_window / 2 + 1
}

/// Embeddings of a batch of texts: `count` rows of `dim` values, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// Width of each vector.
    pub dim: usize,
    /// `count × dim` values.
    pub data: Vec<f32>,
    /// Tokens of each text as fed to the encoder (BOS, prompt, text, EOS).
    pub token_counts: Vec<usize>,
}

impl Embeddings {
    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.token_counts.len()
    }

    /// True when there are no vectors.
    pub fn is_empty(&self) -> bool {
        self.token_counts.is_empty()
    }

    /// Vector `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// Texts are packed into one run until their tokens reach this many (a text longer than
/// this runs alone). Attention over a packed run costs `tokens²`, so the budget keeps the
/// masked-out work small while still batching short texts into large matrix products.
pub const PACK_TOKENS: usize = 512;

/// The runs `seqs` are packed into: consecutive ranges whose tokens add up to at most
/// [`PACK_TOKENS`] (a longer sequence runs alone).
fn packs(seqs: &[Vec<u32>]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < seqs.len() {
        let mut end = start + 1;
        let mut tokens = seqs[start].len();
        while end < seqs.len() && tokens + seqs[end].len() <= PACK_TOKENS {
            tokens += seqs[end].len();
            end += 1;
        }
        out.push((start, end));
        start = end;
    }
    out
}

/// A loaded embedding model: the mapped weights, tokenizer, a CPU device and compiled plans.
pub struct EmbeddingGemma {
    /// The model's configuration.
    pub config: EmbeddingConfig,
    /// The tokenizer from `tokenizer.json`.
    pub tokenizer: Arc<HfTokenizer>,
    names: TensorNames,
    weights: Arc<SafetensorsWeights>,
    /// Plans by (tokens, texts, output width).
    plans: PlanCache<(usize, usize, usize)>,
    dir: PathBuf,
}

impl EmbeddingGemma {
    /// Loads a sentence-transformers folder and checks every tensor the model needs (name,
    /// shape, dtype) before anything runs. The weights are mapped, not copied.
    pub fn load(dir: impl AsRef<Path>, threads: usize) -> Result<EmbeddingGemma, ModelError> {
        let device: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).map_err(ModelError::Request)?);
        EmbeddingGemma::load_on(dir, device)
    }

    /// [`EmbeddingGemma::load`] with plans compiled for and run on `device`.
    pub fn load_on(dir: impl AsRef<Path>, device: Arc<dyn Device>) -> Result<EmbeddingGemma, ModelError> {
        EmbeddingGemma::load_on_devices(dir, vec![device])
    }

    /// [`EmbeddingGemma::load`] with plans compiled for `devices` together (the first is
    /// home), the planner placing each op on one of them.
    pub fn load_on_devices(dir: impl AsRef<Path>, devices: Vec<Arc<dyn Device>>) -> Result<EmbeddingGemma, ModelError> {
        if devices.is_empty() {
            return Err(ModelError::Request("no devices to run on".into()));
        }
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(ModelError::Request(format!("{}: not a directory (expected a sentence-transformers model folder)", dir.display())));
        }
        let config = EmbeddingConfig::from_dir(&dir)?;
        let mut files = vec![(String::new(), dir.join("model.safetensors"))];
        for layer in &config.dense {
            let sub = layer.weight.rsplit_once('/').map(|(s, _)| s.to_string()).unwrap_or_default();
            files.push((format!("{sub}/"), dir.join(&sub).join("model.safetensors")));
        }
        let weights = Arc::new(SafetensorsWeights::open(&files)?);
        let names =
            if weights.shape_of("embed_tokens.weight").is_ok() { TensorNames::HuggingFace { prefix: String::new() } } else { TensorNames::HuggingFace { prefix: "model.".into() } };
        for (name, shape) in config.encoder.expected_tensors_named(&names, true) {
            weights.check(&name, &shape, shape.len() == 1)?;
        }
        for layer in &config.dense {
            weights.check(&layer.weight, &[layer.out_features, layer.in_features], false)?;
            if let Some(b) = &layer.bias {
                weights.check(b, &[layer.out_features], true)?;
            }
        }
        let tokenizer = Arc::new(HfTokenizer::from_file(dir.join("tokenizer.json"))?);
        if tokenizer.vocab_size() < config.encoder.n_vocab {
            return Err(ModelError::Architecture {
                file: dir.join("tokenizer.json").display().to_string(),
                detail: format!("tokenizer has {} tokens, the embedding table {}", tokenizer.vocab_size(), config.encoder.n_vocab),
            });
        }
        Ok(EmbeddingGemma { config, tokenizer, names, weights, plans: PlanCache::new(devices), dir })
    }

    /// The folder the model was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The weight store (for the reference interpreter and memory checks).
    pub fn weights(&self) -> &SafetensorsWeights {
        &self.weights
    }

    /// How the checkpoint names its tensors.
    pub fn tensor_names(&self) -> &TensorNames {
        &self.names
    }

    /// Sets compiler options for plans compiled from now on (clears the plan cache).
    pub fn set_compile_options(&mut self, o: CompileOptions) {
        self.plans.set_options(o);
    }

    /// Where compiled plans are kept across processes: by default `plans/` in the cache
    /// directory ([`tg_compiler::PlanStore::default_store`]; `TG_PLAN_CACHE=off` disables
    /// it); `None` compiles every plan in this process.
    pub fn set_plan_store(&mut self, store: Option<tg_compiler::PlanStore>) {
        self.plans.set_store(store);
    }

    /// The report of the most recent compilation.
    pub fn last_report(&self) -> Option<&CompileReport> {
        self.plans.last_report()
    }

    /// The prompt text for `name` (`None` → the configured default, or no prompt).
    pub fn prompt(&self, name: Option<&str>) -> Result<&str, ModelError> {
        match name.or(self.config.default_prompt_name.as_deref()) {
            None => Ok(""),
            Some(n) => self.config.prompts.get(n).map(String::as_str).ok_or_else(|| {
                let known: Vec<&str> = self.config.prompts.keys().map(String::as_str).collect();
                ModelError::Request(format!("unknown prompt name '{n}'; this model has: {}", known.join(", ")))
            }),
        }
    }

    /// Tokens fed to the encoder for `text` with prompt `name`: BOS, prompt + text, EOS,
    /// truncated to `max_seq_length` (the end of the text is dropped, EOS kept).
    pub fn tokenize(&self, text: &str, prompt_name: Option<&str>) -> Result<Vec<u32>, ModelError> {
        let prompt = self.prompt(prompt_name)?;
        let full = format!("{prompt}{text}");
        let mut ids = self.tokenizer.encode(&full, true)?;
        let max = self.config.max_seq_length;
        if ids.len() > max {
            let last = *ids.last().unwrap_or(&0);
            let ends_special = self.tokenizer.eos() == Some(last);
            ids.truncate(max);
            if ends_special {
                ids[max - 1] = last;
            }
        }
        if let Some(&t) = ids.iter().find(|&&t| t as usize >= self.config.encoder.n_vocab) {
            let text = self.tokenizer.token_text(t).unwrap_or("?");
            return Err(ModelError::Request(format!(
                "token {t} ('{text}') is outside the model's embedding table of {} rows; remove it from the text",
                self.config.encoder.n_vocab
            )));
        }
        Ok(ids)
    }

    /// The graph for `batch` texts packed into `tokens` tokens, output width `dim`.
    pub fn graph(&self, tokens: usize, batch: usize, dim: usize) -> Result<Graph, ModelError> {
        build_embedding_graph(&self.config, &*self.weights, &self.names, tokens, batch, dim)
    }

    /// Checks pre-tokenized sequences for one packed run and returns its plan key.
    fn check_packed(&self, seqs: &[Vec<u32>], dim: usize) -> Result<(usize, usize, usize), ModelError> {
        if seqs.iter().any(Vec::is_empty) {
            return Err(ModelError::Request("cannot embed an empty token sequence".into()));
        }
        if let Some(s) = seqs.iter().find(|s| s.len() > self.config.max_seq_length) {
            return Err(ModelError::Request(format!("a sequence of {} tokens exceeds max_seq_length {}", s.len(), self.config.max_seq_length)));
        }
        if let Some(&t) = seqs.iter().flatten().find(|&&t| t as usize >= self.config.encoder.n_vocab) {
            return Err(ModelError::Request(format!("token id {t} is outside the vocabulary of {}", self.config.encoder.n_vocab)));
        }
        Ok((seqs.iter().map(Vec::len).sum(), seqs.len(), dim))
    }

    /// The plan for one packed run, compiled (or fetched from the caches) now.
    fn packed_plan(&mut self, key: (usize, usize, usize)) -> Result<&mut tg_runtime::Executable, ModelError> {
        let (config, names, weights) = (&self.config, &self.names, self.weights.clone());
        let (total, batch, dim) = key;
        self.plans.get_or_compile(key, weights.clone(), || build_embedding_graph(config, &*weights, names, total, batch, dim))
    }

    /// Runs pre-tokenized sequences as one packed batch; returns `batch × dim` values.
    pub fn embed_tokens(&mut self, seqs: &[Vec<u32>], dim: usize) -> Result<Vec<f32>, ModelError> {
        let key = self.check_packed(seqs, dim)?;
        let total = key.0;
        let mut ids = Vec::with_capacity(total);
        let mut pos = Vec::with_capacity(total);
        let mut seg = Vec::with_capacity(total);
        for (i, s) in seqs.iter().enumerate() {
            ids.extend(s.iter().map(|&t| t as i32));
            pos.extend(0..s.len() as i32);
            seg.extend(std::iter::repeat_n(i as i32, s.len()));
        }
        let exe = self.packed_plan(key)?;
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), HostTensor::i32(&[total], ids)?);
        inputs.insert("positions".to_string(), HostTensor::i32(&[total], pos)?);
        inputs.insert("segments".to_string(), HostTensor::i32(&[total], seg)?);
        let mut out = exe.run(&inputs)?;
        let t = out.remove("embeddings").ok_or_else(|| ModelError::Request("plan produced no embeddings".into()))?;
        match t.data {
            tg_ir::HostData::F32(v) => Ok(v),
            _ => Err(ModelError::Request("embeddings are not f32".into())),
        }
    }

    /// Embeds `texts` with the task prompt `prompt_name` (see [`EmbeddingGemma::prompt`]),
    /// truncated to `dim` values (`None`: the full width) and L2-normalised. Texts are packed
    /// into runs of up to [`PACK_TOKENS`] tokens.
    pub fn embed(&mut self, texts: &[&str], prompt_name: Option<&str>, dim: Option<usize>) -> Result<Embeddings, ModelError> {
        let dim = dim.unwrap_or(self.config.output_dim());
        let seqs: Vec<Vec<u32>> = texts.iter().map(|t| self.tokenize(t, prompt_name)).collect::<Result<_, _>>()?;
        let data = self.embed_packed(&seqs, dim)?;
        Ok(Embeddings { dim, data, token_counts: seqs.iter().map(Vec::len).collect() })
    }

    /// Embeds pre-tokenized sequences, packed into runs of up to [`PACK_TOKENS`] tokens;
    /// returns `seqs.len() × dim` values.
    pub fn embed_packed(&mut self, seqs: &[Vec<u32>], dim: usize) -> Result<Vec<f32>, ModelError> {
        let mut data = Vec::with_capacity(seqs.len() * dim);
        for (start, end) in packs(seqs) {
            data.extend(self.embed_tokens(&seqs[start..end], dim)?);
        }
        Ok(data)
    }

    /// Times every step of every run from now on (see [`EmbeddingGemma::step_times`]).
    pub fn set_profiling(&mut self, on: bool) {
        self.plans.set_profiling(on);
    }

    /// Kernel name and time (ns) of every step of the last run of the plan for `tokens`
    /// tokens in `batch` texts at width `dim`, when profiling is on.
    pub fn step_times(&self, tokens: usize, batch: usize, dim: usize) -> Option<Vec<(String, u64)>> {
        let exe = self.plans.get(&(tokens, batch, dim))?;
        let times = exe.step_times()?;
        Some(exe.plan().steps.iter().zip(times).map(|(s, &t)| (s.kernel.name(), t)).collect())
    }

    /// The plan of the last run, how it was made and — with profiling on — its step times
    /// (for a report).
    pub fn last_plan(&self) -> Option<crate::PlanView<'_>> {
        self.plans.last_view()
    }

    /// Drops cached plans.
    pub fn clear_plans(&mut self) {
        self.plans.clear();
    }

    /// The number of cached plans.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }
}

/// The registry entry ([`crate::KINDS`]): a sentence-transformers folder (`modules.json`)
/// whose encoder is Gemma 3 (`config.json`: `model_type` `gemma3_text`).
pub const KIND: ModelKind = ModelKind {
    name: "embedding-gemma",
    what: "a sentence-transformers folder whose encoder is Gemma 3 (modules.json, config.json model_type gemma3_text)",
    detect,
    open: open_model,
    decoder: None,
};

fn detect(path: &Path) -> Detect {
    if !path.is_dir() {
        return Detect::No;
    }
    let model_type = read_json(&path.join("config.json")).ok().and_then(|v| v.get("model_type").and_then(Value::as_str).map(str::to_string));
    match (path.join("modules.json").is_file(), model_type.as_deref()) {
        (true, Some("gemma3_text") | None) => Detect::Yes,
        (true, Some(other)) => Detect::Near(format!("a sentence-transformers folder whose encoder is '{other}'")),
        (false, Some("gemma3_text")) => Detect::Near("a Gemma 3 folder without modules.json (not a sentence-transformers model)".into()),
        (false, _) => Detect::No,
    }
}

fn open_model(path: &Path, o: OpenOptions) -> Result<Box<dyn Model>, ModelError> {
    let mut m = EmbeddingGemma::load_on_devices(path, o.devices)?;
    m.set_compile_options(o.compile);
    Ok(Box::new(m))
}

impl EmbeddingGemma {
    /// The token sequences of [`Model::run`]'s inputs: row `b` is the ids of `input_ids[b]`
    /// where `attention_mask[b]` is 1, in order.
    fn rows(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<Vec<u32>>, ModelError> {
        let free = check_inputs(&self.dir, &Model::inputs(self), inputs)?;
        let (batch, len) = (free.get("batch").copied().unwrap_or(0), free.get("sequence").copied().unwrap_or(0));
        let ints = |name: &str| match &inputs[name].data {
            tg_ir::HostData::I32(v) => Some(v),
            _ => None,
        };
        let (Some(ids), Some(mask)) = (ints("input_ids"), ints("attention_mask")) else {
            return Err(input_error(&self.dir, InputProblem::DType, "input_ids and attention_mask must be integers"));
        };
        if batch == 0 {
            return Err(input_error(&self.dir, InputProblem::Shape, "input 'input_ids': no rows"));
        }
        let n_vocab = self.config.encoder.n_vocab;
        let mut rows = Vec::with_capacity(batch);
        for b in 0..batch {
            let mut row = Vec::new();
            for j in 0..len {
                match mask[b * len + j] {
                    0 => continue,
                    1 => {}
                    m => return Err(input_error(&self.dir, InputProblem::Value, format!("input 'attention_mask': value {m} at [{b}, {j}] (1 marks a token, 0 padding)"))),
                }
                let t = ids[b * len + j];
                if t < 0 || t as usize >= n_vocab {
                    return Err(input_error(&self.dir, InputProblem::Value, format!("input 'input_ids': token id {t} at [{b}, {j}] is outside the vocabulary of {n_vocab}")));
                }
                row.push(t as u32);
            }
            if row.is_empty() {
                return Err(input_error(&self.dir, InputProblem::Value, format!("input 'attention_mask': row {b} has no tokens")));
            }
            rows.push(row);
        }
        Ok(rows)
    }
}

/// EmbeddingGemma as a [`Model`]: inputs `input_ids` and `attention_mask` (int64
/// `[batch, sequence]`, as a Hugging Face tokenizer pads them: row `b` is the tokens where
/// the mask is 1, at positions `0, 1, …` in order), output `embeddings` (float32
/// `[batch, output_dim]`, what [`EmbeddingGemma::embed_packed`] gives for those rows). It
/// embeds texts ([`Model::as_embedder`]).
impl Model for EmbeddingGemma {
    fn kind(&self) -> &'static str {
        KIND.name
    }

    fn path(&self) -> &Path {
        &self.dir
    }

    fn inputs(&self) -> Vec<TensorSpec> {
        let dims = || vec![Dim::free("batch", None), Dim::free("sequence", Some(self.config.max_seq_length))];
        vec![TensorSpec::new("input_ids", ElemType::I64, dims()), TensorSpec::new("attention_mask", ElemType::I64, dims())]
    }

    fn outputs(&self) -> Vec<TensorSpec> {
        vec![TensorSpec::new("embeddings", ElemType::F32, vec![Dim::free("batch", None), Dim::Fixed(self.config.output_dim())])]
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.plans.devices().to_vec()
    }

    fn set_compile_options(&mut self, options: CompileOptions) {
        EmbeddingGemma::set_compile_options(self, options)
    }

    fn compile(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<CompileTimes, ModelError> {
        let rows = self.rows(inputs)?;
        let dim = self.config.output_dim();
        let before = self.plans.stats();
        for (start, end) in packs(&rows) {
            let key = self.check_packed(&rows[start..end], dim)?;
            self.packed_plan(key)?;
        }
        Ok(self.plans.stats().since(before))
    }

    fn graphs(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<tg_ir::Graph>, ModelError> {
        let rows = self.rows(inputs)?;
        let dim = self.config.output_dim();
        let mut out = Vec::new();
        for (start, end) in packs(&rows) {
            let (total, batch, dim) = self.check_packed(&rows[start..end], dim)?;
            out.push(build_embedding_graph(&self.config, &*self.weights, &self.names, total, batch, dim)?);
        }
        Ok(out)
    }

    fn run(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, ModelError> {
        let rows = self.rows(inputs)?;
        let dim = self.config.output_dim();
        let data = self.embed_packed(&rows, dim)?;
        Ok(vec![("embeddings".to_string(), HostTensor::f32(&[rows.len(), dim], data)?)])
    }

    fn last_report(&self) -> Option<&CompileReport> {
        EmbeddingGemma::last_report(self)
    }

    fn config(&self) -> serde_json::Value {
        serde_json::to_value(&self.config).unwrap_or_default()
    }

    fn as_embedder(&mut self) -> Option<&mut dyn Embed> {
        Some(self)
    }
}

impl Embed for EmbeddingGemma {
    fn embed(&mut self, texts: &[&str], prompt_name: Option<&str>, dim: Option<usize>) -> Result<Embeddings, ModelError> {
        EmbeddingGemma::embed(self, texts, prompt_name, dim)
    }

    fn output_dim(&self) -> usize {
        self.config.output_dim()
    }

    fn prompt_names(&self) -> Vec<String> {
        self.config.prompts.keys().cloned().collect()
    }
}

/// Cosine similarity of two vectors (f64 accumulation).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt()).max(1e-300)
}
