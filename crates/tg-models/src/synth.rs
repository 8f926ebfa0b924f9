//! Random-weight checkpoints with the exact layout of real ones (`tg synth`).
//!
//! A [`GgufLayout`] is everything about a GGUF file except its weights and its vocabulary
//! texts: the metadata (in file order, typed), the tensor table (names, ggml dims, types)
//! and a compact description of the vocabulary (its size, the special tokens with their
//! ids, runs of `<unusedN>` and byte tokens; the ordinary pieces are only counted).
//! [`GgufLayout::from_gguf`] reads it from a real file (`tg synth --dump-layout`); the
//! committed fixture [`GEMMA3_270M_LAYOUT`] was made that way from Gemma 3 270M Q4_K_M
//! (`docs/fixtures.md`).
//!
//! [`write_gguf`] writes a file with that layout: the same metadata, a synthetic
//! vocabulary of the same size with the same special tokens at the same ids (ordinary
//! pieces are made-up letter strings, so any text still tokenizes, through byte fallback
//! where needed), and seeded random weights in the same ggml types. Values are drawn so
//! activations stay in a sane range: a 1-D tensor (an RMSNorm weight, stored with Gemma's
//! `1 +` folded in) is `1 + N(0, 0.1)` clamped to `[0.6, 1.4]`, a matrix with rows of `k`
//! elements is `N(0, 1/sqrt(k))`. Quantized types are produced by simple round-to-nearest
//! quantizers (Q8_0 by `tg_quant`'s; Q5_0, Q4_K and Q6_K here), not by llama.cpp's
//! search; the bytes are valid blocks of each format either way. The output is the same
//! for the same seed whatever the number of threads.
//!
//! [`write_hf_gemma3`] writes the same weights, dequantized to f32, as a Hugging Face
//! Transformers checkpoint (`config.json` of a `Gemma3ForCausalLM` text model matching the
//! GGUF metadata, and `model.safetensors` under Hugging Face names, RMSNorm weights with
//! the 1 taken out again), so another implementation can run the very same function.
//!
//! [`write_tiny`] writes a [`TinyModel`] from scratch rather than from a layout: a toy-sized
//! Llama 3, Mistral, Qwen3 or RoPE-scaled Llama GGUF file (n_embd 128, a real tokenizer of
//! about 300 tokens), the same bytes for the same seed on every platform. llama.cpp's logits
//! on these files are the fixtures of `tests/fixtures/llama_cpp/synth/`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tg_gguf::{GgufFile, GgufWriter, Value};
use tg_quant::{f16_to_f32, f32_to_f16, GgmlType};
use tg_tokenizer::keys;

use crate::gemma3::{Gemma3Config, TensorNames};

/// The layout of Gemma 3 270M Q4_K_M (`gemma-3-270m-q4_k_m.gguf`, sha256 `a5fd3b62…6818`),
/// made with `tg synth --dump-layout` (see `docs/fixtures.md`).
pub const GEMMA3_270M_LAYOUT: &str = include_str!("../../../tests/fixtures/gemma3-270m-layout.json");

/// Errors of reading a layout or writing a synthetic checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// A GGUF file could not be read or written.
    #[error(transparent)]
    Gguf(#[from] tg_gguf::GgufError),
    /// A tensor of the written GGUF file could not be dequantized.
    #[error(transparent)]
    Dequant(#[from] tg_gguf::GgufDequantError),
    /// A safetensors file could not be written.
    #[error(transparent)]
    Safetensors(#[from] tg_safetensors::SafetensorsError),
    /// The file is not the model the operation needs (boxed: the model error is large).
    #[error(transparent)]
    Model(Box<crate::ModelError>),
    /// The layout is malformed or cannot be written as asked (names what is wrong).
    #[error("layout: {0}")]
    Layout(String),
    /// A file or folder could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl From<crate::ModelError> for SynthError {
    fn from(e: crate::ModelError) -> SynthError {
        SynthError::Model(Box::new(e))
    }
}

fn layout_err(msg: impl Into<String>) -> SynthError {
    SynthError::Layout(msg.into())
}

/// One metadata entry of a [`GgufLayout`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetaEntry {
    /// The key.
    pub key: String,
    /// The GGUF type: `u8`, `i8`, `u16`, `i16`, `u32`, `i32`, `u64`, `i64`, `f32`, `f64`,
    /// `bool`, `string`, or `array[T]` with one of those.
    #[serde(rename = "type")]
    pub ty: String,
    /// The value (absent for the vocabulary arrays, which are synthesized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
    /// Elements of a synthesized vocabulary array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<usize>,
}

/// One tensor of a [`GgufLayout`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// The tensor's name.
    pub name: String,
    /// Dimensions in ggml order (`dims[0]` is the row length).
    pub dims: Vec<u64>,
    /// The ggml type's name (`F32`, `Q8_0`, `Q4_K`, ...).
    #[serde(rename = "type")]
    pub ty: String,
}

impl TensorEntry {
    /// The ggml type.
    pub fn ggml_type(&self) -> Result<GgmlType, SynthError> {
        GgmlType::ALL.into_iter().find(|t| t.name() == self.ty).ok_or_else(|| layout_err(format!("tensor '{}': unknown ggml type '{}'", self.name, self.ty)))
    }

    fn n_elements(&self) -> Result<usize, SynthError> {
        self.dims
            .iter()
            .try_fold(1usize, |a, &d| usize::try_from(d).ok().and_then(|d| a.checked_mul(d)))
            .ok_or_else(|| layout_err(format!("tensor '{}': dims {:?} overflow", self.name, self.dims)))
    }
}

/// A token kept with its id, text, type code and score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecialToken {
    /// Token id.
    pub id: u32,
    /// Token text.
    pub text: String,
    /// `tokenizer.ggml.token_type` code (3 control, 4 user-defined, ...).
    #[serde(rename = "type")]
    pub ty: i32,
    /// Score.
    pub score: f32,
}

/// A run of consecutive ids holding `<unusedN>`, `<unusedN+1>`, ...
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnusedRun {
    /// First id of the run.
    pub first_id: u32,
    /// Tokens in the run.
    pub count: u32,
    /// `N` of the first token's `<unusedN>`.
    pub first_n: u32,
    /// Token type code of every token of the run.
    #[serde(rename = "type")]
    pub ty: i32,
    /// Score of every token of the run.
    pub score: f32,
}

/// A synthesized vocabulary: token texts, scores and type codes, one per id.
pub type SynthVocab = (Vec<String>, Vec<f32>, Vec<i32>);

/// The 256 byte-fallback tokens `<0x00>` … `<0xFF>` at consecutive ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ByteRun {
    /// Id of `<0x00>`.
    pub first_id: u32,
    /// Score of every byte token.
    pub score: f32,
}

/// The vocabulary of a [`GgufLayout`]: what must be kept exactly (special tokens and where
/// they are), and how many ordinary pieces fill the other ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VocabLayout {
    /// Number of tokens.
    pub size: u32,
    /// Element type of `tokenizer.ggml.scores` (`f32`).
    pub score_type: String,
    /// Element type of `tokenizer.ggml.token_type` (`i32`).
    pub token_type_type: String,
    /// Ordinary (type 1) tokens in the real file; their texts are synthesized.
    pub normal: u32,
    /// Every other token that is not in `unused` or `bytes`, with its id.
    pub special: Vec<SpecialToken>,
    /// Runs of `<unusedN>` tokens.
    pub unused: Vec<UnusedRun>,
    /// The byte tokens, when they are 256 consecutive ids.
    pub bytes: Option<ByteRun>,
}

/// Everything about a GGUF file but its weights and vocabulary texts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GgufLayout {
    /// What the layout was read from.
    pub source: String,
    /// GGUF version.
    pub version: u32,
    /// Data alignment.
    pub alignment: usize,
    /// Metadata in file order.
    pub metadata: Vec<MetaEntry>,
    /// The vocabulary, when the file has `tokenizer.ggml.tokens`.
    pub vocab: Option<VocabLayout>,
    /// The tensor table in file order.
    pub tensors: Vec<TensorEntry>,
}

/// The three vocabulary arrays that are synthesized rather than stored in a layout.
const VOCAB_KEYS: [&str; 3] = [keys::TOKENS, keys::SCORES, keys::TOKEN_TYPE];

fn scalar_type(v: &Value) -> Option<&'static str> {
    Some(match v {
        Value::U8(_) => "u8",
        Value::I8(_) => "i8",
        Value::U16(_) => "u16",
        Value::I16(_) => "i16",
        Value::U32(_) => "u32",
        Value::I32(_) => "i32",
        Value::U64(_) => "u64",
        Value::I64(_) => "i64",
        Value::F32(_) => "f32",
        Value::F64(_) => "f64",
        Value::Bool(_) => "bool",
        Value::String(_) => "string",
        Value::Array(_) => return None,
    })
}

fn value_type(key: &str, v: &Value) -> Result<String, SynthError> {
    match v {
        Value::Array(items) => {
            let elem = items.first().map_or(Some("u8"), scalar_type).ok_or_else(|| layout_err(format!("metadata '{key}': arrays of arrays are not supported")))?;
            Ok(format!("array[{elem}]"))
        }
        v => Ok(scalar_type(v).unwrap_or("?").to_string()),
    }
}

fn scalar_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::U8(x) => J::from(*x),
        Value::I8(x) => J::from(*x),
        Value::U16(x) => J::from(*x),
        Value::I16(x) => J::from(*x),
        Value::U32(x) => J::from(*x),
        Value::I32(x) => J::from(*x),
        Value::U64(x) => J::from(*x),
        Value::I64(x) => J::from(*x),
        Value::F32(x) => J::from(f64::from(*x)),
        Value::F64(x) => J::from(*x),
        Value::Bool(x) => J::from(*x),
        Value::String(s) => J::from(s.as_str()),
        Value::Array(items) => J::Array(items.iter().map(scalar_json).collect()),
    }
}

fn json_scalar(key: &str, ty: &str, j: &serde_json::Value) -> Result<Value, SynthError> {
    let bad = || layout_err(format!("metadata '{key}': {j} is not a {ty}"));
    let int = || j.as_i64().map(i128::from).or_else(|| j.as_u64().map(i128::from)).ok_or_else(bad);
    Ok(match ty {
        "u8" => Value::U8(u8::try_from(int()?).map_err(|_| bad())?),
        "i8" => Value::I8(i8::try_from(int()?).map_err(|_| bad())?),
        "u16" => Value::U16(u16::try_from(int()?).map_err(|_| bad())?),
        "i16" => Value::I16(i16::try_from(int()?).map_err(|_| bad())?),
        "u32" => Value::U32(u32::try_from(int()?).map_err(|_| bad())?),
        "i32" => Value::I32(i32::try_from(int()?).map_err(|_| bad())?),
        "u64" => Value::U64(u64::try_from(int()?).map_err(|_| bad())?),
        "i64" => Value::I64(i64::try_from(int()?).map_err(|_| bad())?),
        "f32" => Value::F32(j.as_f64().ok_or_else(bad)? as f32),
        "f64" => Value::F64(j.as_f64().ok_or_else(bad)?),
        "bool" => Value::Bool(j.as_bool().ok_or_else(bad)?),
        "string" => Value::String(j.as_str().ok_or_else(bad)?.to_string()),
        _ => return Err(layout_err(format!("metadata '{key}': unknown type '{ty}'"))),
    })
}

fn array_elem(ty: &str) -> Option<&str> {
    ty.strip_prefix("array[").and_then(|t| t.strip_suffix(']'))
}

impl MetaEntry {
    /// The GGUF value of a stored entry (not of a synthesized vocabulary array).
    pub fn to_value(&self) -> Result<Value, SynthError> {
        let j = self.value.as_ref().ok_or_else(|| layout_err(format!("metadata '{}': no value", self.key)))?;
        match array_elem(&self.ty) {
            Some(elem) => {
                let items = j.as_array().ok_or_else(|| layout_err(format!("metadata '{}': not an array", self.key)))?;
                Ok(Value::Array(items.iter().map(|e| json_scalar(&self.key, elem, e)).collect::<Result<_, _>>()?))
            }
            None => json_scalar(&self.key, &self.ty, j),
        }
    }
}

fn unused_n(text: &str) -> Option<u32> {
    let n = text.strip_prefix("<unused")?.strip_suffix('>')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    n.parse().ok()
}

impl VocabLayout {
    /// Describes a vocabulary: ordinary (type 1) tokens are only counted, `<unusedN>` and
    /// byte tokens are kept as runs, every other token is kept with its id.
    pub fn from_tokens(tokens: &[&str], scores: &[f32], types: &[i32], score_type: &str, token_type_type: &str) -> Result<VocabLayout, SynthError> {
        let n = tokens.len();
        if scores.len() != n || types.len() != n {
            return Err(layout_err(format!("vocabulary arrays differ in length: {n} tokens, {} scores, {} types", scores.len(), types.len())));
        }
        let size = u32::try_from(n).map_err(|_| layout_err(format!("{n} tokens")))?;
        let bytes = (0..n).find(|&i| tokens[i] == "<0x00>" && types[i] == 6).and_then(|first| {
            let all = (0..256).all(|b| first + b < n && tokens[first + b] == format!("<0x{b:02X}>") && types[first + b] == 6 && scores[first + b] == scores[first]);
            all.then(|| ByteRun { first_id: first as u32, score: scores[first] })
        });
        let in_bytes = |i: usize| bytes.as_ref().is_some_and(|b| (b.first_id as usize..b.first_id as usize + 256).contains(&i));
        let mut v =
            VocabLayout { size, score_type: score_type.into(), token_type_type: token_type_type.into(), normal: 0, special: Vec::new(), unused: Vec::new(), bytes: bytes.clone() };
        for i in 0..n {
            if in_bytes(i) {
                continue;
            }
            if types[i] == 1 {
                v.normal += 1;
                continue;
            }
            if let Some(k) = unused_n(tokens[i]) {
                if let Some(r) = v.unused.last_mut() {
                    if (r.first_id + r.count) as usize == i && r.first_n + r.count == k && r.ty == types[i] && r.score == scores[i] {
                        r.count += 1;
                        continue;
                    }
                }
                v.unused.push(UnusedRun { first_id: i as u32, count: 1, first_n: k, ty: types[i], score: scores[i] });
                continue;
            }
            v.special.push(SpecialToken { id: i as u32, text: tokens[i].to_string(), ty: types[i], score: scores[i] });
        }
        Ok(v)
    }

    /// The synthetic vocabulary: token texts, scores and type codes, one per id. Special
    /// tokens, `<unusedN>` runs and byte tokens are where the layout says; every other id
    /// gets an ordinary piece (made-up letter strings: `▁`, single characters, `▁x`, then
    /// ever longer lowercase strings with and without `▁` and a capital), scored `-k` for
    /// the `k`-th such piece, so shorter pieces merge first.
    pub fn synthesize(&self) -> Result<SynthVocab, SynthError> {
        let n = self.size as usize;
        let mut slots: Vec<Option<(String, f32, i32)>> = vec![None; n];
        let mut put = |id: usize, text: String, score: f32, ty: i32| -> Result<(), SynthError> {
            let slot = slots.get_mut(id).ok_or_else(|| layout_err(format!("token id {id} ({text:?}) is outside the vocabulary of {n}")))?;
            if let Some((other, _, _)) = slot {
                return Err(layout_err(format!("token id {id} is claimed twice ({other:?} and {text:?})")));
            }
            *slot = Some((text, score, ty));
            Ok(())
        };
        for s in &self.special {
            put(s.id as usize, s.text.clone(), s.score, s.ty)?;
        }
        for r in &self.unused {
            for k in 0..r.count {
                put((r.first_id + k) as usize, format!("<unused{}>", r.first_n + k), r.score, r.ty)?;
            }
        }
        if let Some(b) = &self.bytes {
            for k in 0..256u32 {
                put((b.first_id + k) as usize, format!("<0x{k:02X}>"), b.score, 6)?;
            }
        }
        let taken: HashSet<String> = slots.iter().flatten().map(|(t, _, _)| t.clone()).collect();
        let mut pieces = Pieces::new().filter(|p| !taken.contains(p));
        let (mut tokens, mut scores, mut types) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let mut k = 0u32;
        for slot in slots {
            let (t, s, ty) = match slot {
                Some(x) => x,
                None => {
                    let p = pieces.next().ok_or_else(|| layout_err("ran out of synthetic pieces"))?;
                    k += 1;
                    (p, -((k - 1) as f32), 1)
                }
            };
            tokens.push(t);
            scores.push(s);
            types.push(ty);
        }
        Ok((tokens, scores, types))
    }
}

/// Made-up ordinary pieces, shortest first, never repeating.
struct Pieces {
    fixed: std::vec::IntoIter<String>,
    len: u32,
    index: u64,
    variant: u8,
}

impl Pieces {
    fn new() -> Pieces {
        let chars: Vec<char> = ('a'..='z').chain('A'..='Z').chain('0'..='9').chain(".,;:!?'\"()-/".chars()).collect();
        let mut fixed = vec!["\u{2581}".to_string()];
        fixed.extend(chars.iter().map(|c| c.to_string()));
        fixed.extend(chars.iter().map(|c| format!("\u{2581}{c}")));
        Pieces { fixed: fixed.into_iter(), len: 2, index: 0, variant: 0 }
    }
}

impl Iterator for Pieces {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if let Some(p) = self.fixed.next() {
            return Some(p);
        }
        if self.len > 12 {
            return None;
        }
        let mut s: Vec<u8> = Vec::with_capacity(self.len as usize);
        let mut i = self.index;
        for _ in 0..self.len {
            s.push(b'a' + (i % 26) as u8);
            i /= 26;
        }
        s.reverse();
        if self.variant >= 2 {
            s[0] = s[0].to_ascii_uppercase();
        }
        let word = String::from_utf8(s).unwrap_or_default();
        let piece = if self.variant.is_multiple_of(2) { format!("\u{2581}{word}") } else { word };
        self.variant += 1;
        if self.variant == 4 {
            self.variant = 0;
            self.index += 1;
            if self.index == 26u64.pow(self.len) {
                self.index = 0;
                self.len += 1;
            }
        }
        Some(piece)
    }
}

impl GgufLayout {
    /// Reads the layout of a GGUF file (`source` says what it was, for the record).
    pub fn from_gguf(f: &GgufFile, source: &str) -> Result<GgufLayout, SynthError> {
        let mut metadata = Vec::new();
        for (key, v) in f.metadata() {
            let ty = value_type(key, v)?;
            if VOCAB_KEYS.contains(&key.as_str()) {
                let len = v.as_array().map(<[Value]>::len);
                metadata.push(MetaEntry { key: key.clone(), ty, value: None, len });
            } else {
                metadata.push(MetaEntry { key: key.clone(), ty, value: Some(scalar_json(v)), len: None });
            }
        }
        let vocab = match f.get(keys::TOKENS) {
            None => None,
            Some(_) => {
                let tokens = f.get_str_array(keys::TOKENS)?;
                let scores = f.get_f32_array(keys::SCORES)?;
                let types = f.get_i32_array(keys::TOKEN_TYPE)?;
                let elem = |k: &str| f.get(k).map(|v| value_type(k, v)).transpose().map(|t| t.as_deref().and_then(array_elem).unwrap_or("?").to_string());
                Some(VocabLayout::from_tokens(&tokens, &scores, &types, &elem(keys::SCORES)?, &elem(keys::TOKEN_TYPE)?)?)
            }
        };
        let tensors = f.tensors().iter().map(|t| TensorEntry { name: t.name.clone(), dims: t.dims.clone(), ty: t.ty.name().to_string() }).collect();
        Ok(GgufLayout { source: source.to_string(), version: f.version(), alignment: f.alignment(), metadata, vocab, tensors })
    }

    /// Parses a layout from its JSON text.
    pub fn from_json(text: &str) -> Result<GgufLayout, SynthError> {
        serde_json::from_str(text).map_err(|e| layout_err(format!("not a layout: {e}")))
    }

    /// The built-in layout of Gemma 3 270M Q4_K_M ([`GEMMA3_270M_LAYOUT`]).
    pub fn gemma3_270m() -> Result<GgufLayout, SynthError> {
        GgufLayout::from_json(GEMMA3_270M_LAYOUT)
    }

    /// The layout as JSON: one line per metadata entry, special token and tensor (so the
    /// committed fixture diffs well).
    pub fn to_json(&self) -> String {
        let list = |items: Vec<String>| if items.is_empty() { "[]".to_string() } else { format!("[\n    {}\n  ]", items.join(",\n    ")) };
        let mut s = String::from("{\n");
        s.push_str(&format!("  \"source\": {},\n", line(&self.source)));
        s.push_str(&format!("  \"version\": {},\n  \"alignment\": {},\n", self.version, self.alignment));
        s.push_str(&format!("  \"metadata\": {},\n", list(self.metadata.iter().map(line).collect())));
        match &self.vocab {
            None => s.push_str("  \"vocab\": null,\n"),
            Some(v) => {
                s.push_str("  \"vocab\": {\n");
                s.push_str(&format!(
                    "    \"size\": {}, \"score_type\": {}, \"token_type_type\": {}, \"normal\": {},\n",
                    v.size,
                    line(&v.score_type),
                    line(&v.token_type_type),
                    v.normal
                ));
                s.push_str(&format!("    \"bytes\": {},\n", line(&v.bytes)));
                let inner = |items: Vec<String>| if items.is_empty() { "[]".to_string() } else { format!("[\n      {}\n    ]", items.join(",\n      ")) };
                s.push_str(&format!("    \"unused\": {},\n", inner(v.unused.iter().map(line).collect())));
                s.push_str(&format!("    \"special\": {}\n  }},\n", inner(v.special.iter().map(line).collect())));
            }
        }
        s.push_str(&format!("  \"tensors\": {}\n}}\n", list(self.tensors.iter().map(line).collect())));
        s
    }

    fn meta(&self, key: &str) -> Option<&MetaEntry> {
        self.metadata.iter().find(|m| m.key == key)
    }

    /// The `general.architecture` string.
    pub fn architecture(&self) -> Result<String, SynthError> {
        match self.meta("general.architecture").map(MetaEntry::to_value).transpose()? {
            Some(Value::String(s)) => Ok(s),
            _ => Err(layout_err("no general.architecture string")),
        }
    }

    /// The layout with only the first `layers` blocks (`blk.N.*` tensors for `N < layers`,
    /// `ARCH.block_count` set to `layers`): a smaller model of the same shape per layer.
    pub fn with_layers(&self, layers: usize) -> Result<GgufLayout, SynthError> {
        let key = format!("{}.block_count", self.architecture()?);
        let entry = self.meta(&key).ok_or_else(|| layout_err(format!("no {key}")))?;
        let total = entry.to_value()?.as_u64().ok_or_else(|| layout_err(format!("{key} is not an integer")))?;
        if layers == 0 || layers as u64 > total {
            return Err(layout_err(format!("--layers {layers}: the model has {total} layers (1..={total})")));
        }
        let mut out = self.clone();
        for m in &mut out.metadata {
            if m.key == key {
                m.value = Some(serde_json::Value::from(layers as u64));
            }
        }
        out.tensors.retain(|t| match t.name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => n < layers,
            None => true,
        });
        Ok(out)
    }
}

/// Compact JSON of a value, for [`GgufLayout::to_json`].
fn line<T: Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// Options of [`write_gguf`].
#[derive(Debug, Clone, Default)]
pub struct SynthOptions {
    /// Seed of every random value (the same seed gives the same file).
    pub seed: u64,
    /// Worker threads (0: all cores); the output does not depend on it.
    pub threads: usize,
}

/// What [`write_gguf`] wrote.
#[derive(Debug, Clone)]
pub struct SynthSummary {
    /// Tensors written.
    pub tensors: usize,
    /// Weight elements written.
    pub elements: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// Tokens of the vocabulary (0 without one).
    pub vocab: usize,
}

/// SplitMix64: one well-mixed word from a seed and a stream index.
fn mix(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3))
}

/// Standard normal values (Box–Muller).
struct Normal {
    rng: ChaCha8Rng,
    spare: Option<f32>,
}

impl Normal {
    fn new(seed: u64) -> Normal {
        Normal { rng: ChaCha8Rng::seed_from_u64(seed), spare: None }
    }

    fn sample(&mut self) -> f32 {
        if let Some(s) = self.spare.take() {
            return s;
        }
        let u1: f64 = 1.0 - self.rng.gen::<f64>(); // (0, 1]
        let u2: f64 = self.rng.gen();
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        self.spare = Some((r * t.sin()) as f32);
        (r * t.cos()) as f32
    }
}

fn f16_round(x: f32) -> f32 {
    f16_to_f32(f32_to_f16(x))
}

/// Q5_0 by rounding to the nearest of 32 levels of `d = max|x| / 15`.
fn quantize_q5_0(x: &[f32], out: &mut [u8]) {
    for (xb, b) in x.chunks_exact(32).zip(out.chunks_exact_mut(22)) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = f16_round(amax / 15.0);
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let q: Vec<u32> = xb.iter().map(|&v| ((v * id).round().clamp(-16.0, 15.0) as i32 + 16) as u32).collect();
        b[0..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        let qh = q.iter().enumerate().fold(0u32, |h, (i, &v)| h | (((v >> 4) & 1) << i));
        b[2..6].copy_from_slice(&qh.to_le_bytes());
        for j in 0..16 {
            b[6 + j] = (q[j] & 0x0F) as u8 | (((q[j + 16] & 0x0F) as u8) << 4);
        }
    }
}

/// Q4_K by per-32 min/max scales, the 6-bit scales and mins rounded against the largest.
fn quantize_q4_k(x: &[f32], out: &mut [u8]) {
    for (xb, b) in x.chunks_exact(256).zip(out.chunks_exact_mut(144)) {
        let mut scale = [0f32; 8];
        let mut min = [0f32; 8];
        for j in 0..8 {
            let s = &xb[32 * j..32 * j + 32];
            let lo = s.iter().fold(0f32, |m, &v| m.min(v));
            let hi = s.iter().fold(0f32, |m, &v| m.max(v));
            scale[j] = (hi - lo) / 15.0;
            min[j] = -lo;
        }
        let d = f16_round(scale.iter().fold(0f32, |m, &v| m.max(v)) / 63.0);
        let dmin = f16_round(min.iter().fold(0f32, |m, &v| m.max(v)) / 63.0);
        let six = |v: f32, unit: f32| if unit > 0.0 { (v / unit).round().clamp(0.0, 63.0) as u8 } else { 0 };
        let sc: Vec<u8> = scale.iter().map(|&v| six(v, d)).collect();
        let m: Vec<u8> = min.iter().map(|&v| six(v, dmin)).collect();
        b.fill(0);
        b[0..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        b[2..4].copy_from_slice(&f32_to_f16(dmin).to_le_bytes());
        for j in 0..4 {
            b[4 + j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            b[4 + j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
            b[4 + j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
        }
        for (e, &v) in xb.iter().enumerate() {
            let jb = e / 32;
            let dl = d * f32::from(sc[jb]);
            let ml = dmin * f32::from(m[jb]);
            let q = if dl > 0.0 { ((v + ml) / dl).round().clamp(0.0, 15.0) as u8 } else { 0 };
            b[16 + 32 * (e / 64) + e % 32] |= q << (4 * ((e / 32) % 2));
        }
    }
}

/// Q6_K by per-16 scales `max|x| / 31`, the int8 scales rounded against the largest.
fn quantize_q6_k(x: &[f32], out: &mut [u8]) {
    for (xb, b) in x.chunks_exact(256).zip(out.chunks_exact_mut(210)) {
        let mut scale = [0f32; 16];
        for (j, s) in scale.iter_mut().enumerate() {
            *s = xb[16 * j..16 * j + 16].iter().fold(0f32, |m, v| m.max(v.abs())) / 31.0;
        }
        let d = f16_round(scale.iter().fold(0f32, |m, &v| m.max(v)) / 127.0);
        let sc: Vec<i8> = scale.iter().map(|&v| if d > 0.0 { (v / d).round().clamp(-128.0, 127.0) as i8 } else { 0 }).collect();
        b.fill(0);
        for (e, &v) in xb.iter().enumerate() {
            let dl = d * f32::from(sc[e / 16]);
            let q = if dl != 0.0 { (v / dl).round().clamp(-32.0, 31.0) as i32 } else { 0 };
            let u = (q + 32) as u8;
            let (h, n, k) = (e / 128, (e / 64) % 2, e % 64);
            b[64 * h + k] |= (u & 0x0F) << (4 * n);
            let (s, j) = ((e / 32) % 4, e % 32);
            b[128 + 32 * h + j] |= (u >> 4) << (2 * s);
        }
        for (o, &s) in b[192..208].iter_mut().zip(&sc) {
            *o = s as u8;
        }
        b[208..210].copy_from_slice(&f32_to_f16(d).to_le_bytes());
    }
}

/// Encodes `x` (whole rows) as `ty` into `out` (exactly `ty.row_bytes(x.len())` bytes).
fn encode(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), SynthError> {
    match ty {
        GgmlType::F32 => {
            for (o, v) in out.chunks_exact_mut(4).zip(x) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (o, v) in out.chunks_exact_mut(2).zip(x) {
                o.copy_from_slice(&f32_to_f16(*v).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (o, v) in out.chunks_exact_mut(2).zip(x) {
                let b = v.to_bits();
                let r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
                o.copy_from_slice(&r.to_le_bytes());
            }
        }
        GgmlType::Q8_0 => tg_quant::quantize_row_q8_0(x, out).map_err(|e| layout_err(e.to_string()))?,
        GgmlType::Q5_0 => quantize_q5_0(x, out),
        GgmlType::Q4_K => quantize_q4_k(x, out),
        GgmlType::Q6_K => quantize_q6_k(x, out),
        t => return Err(layout_err(format!("no quantizer for ggml type {t} (supported: F32, F16, BF16, Q8_0, Q5_0, Q4_K, Q6_K)"))),
    }
    Ok(())
}

/// The random values of one tensor chunk: RMSNorm-like 1-D tensors near 1, matrices
/// `N(0, 1/sqrt(row length))`.
fn values(t: &TensorEntry, n: usize, seed: u64) -> Vec<f32> {
    let mut g = Normal::new(seed);
    if t.dims.len() == 1 {
        // In [0.6, 1.4], so `w - 1` (the Hugging Face weight) is exact in f32.
        (0..n).map(|_| 1.0 + (0.1 * g.sample()).clamp(-0.4, 0.4)).collect()
    } else {
        let sd = 1.0 / (t.dims[0].max(1) as f32).sqrt();
        (0..n).map(|_| sd * g.sample()).collect()
    }
}

/// Elements per generation chunk (a whole number of rows): the unit of parallel work and of
/// seeding, so the output does not depend on the number of threads.
const CHUNK: usize = 1 << 16;

fn tensor_bytes(t: &TensorEntry, index: usize, seed: u64, threads: usize) -> Result<Vec<u8>, SynthError> {
    let ty = t.ggml_type()?;
    let n = t.n_elements()?;
    let row = t.dims.first().map_or(1, |&d| d as usize).max(1);
    let row_bytes = ty.row_bytes(row).map_err(|e| layout_err(format!("tensor '{}': {e}", t.name)))?;
    let rows = n / row;
    let chunk_rows = (CHUNK / row).max(1);
    let mut out = vec![0u8; rows * row_bytes];
    let parts: Vec<(usize, &mut [u8])> = out.chunks_mut(chunk_rows * row_bytes).enumerate().collect();
    let tensor_seed = mix(seed, name_hash(&t.name) ^ index as u64);
    let mut lanes: Vec<Vec<(usize, &mut [u8])>> = (0..threads.max(1)).map(|_| Vec::new()).collect();
    let nl = lanes.len();
    for (i, p) in parts {
        lanes[i % nl].push((i, p));
    }
    let results: Vec<Result<(), SynthError>> = std::thread::scope(|s| {
        let handles: Vec<_> = lanes
            .into_iter()
            .map(|lane| {
                s.spawn(move || {
                    for (i, bytes) in lane {
                        let m = bytes.len() / row_bytes * row;
                        let x = values(t, m, mix(tensor_seed, i as u64));
                        encode(ty, &x, bytes)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(layout_err("a worker thread panicked")))).collect()
    });
    results.into_iter().collect::<Result<(), _>>()?;
    Ok(out)
}

fn threads_or_all(threads: usize) -> usize {
    if threads > 0 {
        threads
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Writes a GGUF file with `layout`'s metadata, tensor table and vocabulary shape, a
/// synthetic vocabulary and seeded random weights (see the module docs).
pub fn write_gguf(layout: &GgufLayout, opts: &SynthOptions, path: &Path) -> Result<SynthSummary, SynthError> {
    let threads = threads_or_all(opts.threads);
    let mut w = GgufWriter::new();
    w.set_version(layout.version);
    let vocab = layout.vocab.as_ref().map(VocabLayout::synthesize).transpose()?;
    let mut alignment_seen = false;
    for m in &layout.metadata {
        if VOCAB_KEYS.contains(&m.key.as_str()) {
            let (tokens, scores, types) = vocab.as_ref().ok_or_else(|| layout_err(format!("metadata '{}' has no vocabulary to come from", m.key)))?;
            let elem = array_elem(&m.ty).unwrap_or("?");
            let value = match m.key.as_str() {
                keys::TOKENS => Value::Array(tokens.iter().map(|t| Value::String(t.clone())).collect()),
                keys::SCORES => Value::Array(scores.iter().map(|&s| json_scalar(&m.key, elem, &serde_json::Value::from(f64::from(s)))).collect::<Result<_, _>>()?),
                _ => Value::Array(types.iter().map(|&t| json_scalar(&m.key, elem, &serde_json::Value::from(t))).collect::<Result<_, _>>()?),
            };
            if let (Some(len), Value::Array(items)) = (m.len, &value) {
                if len != items.len() {
                    return Err(layout_err(format!("metadata '{}' has {len} elements, the vocabulary {}", m.key, items.len())));
                }
            }
            w.add(m.key.clone(), value);
        } else {
            alignment_seen |= m.key == "general.alignment";
            w.add(m.key.clone(), m.to_value()?);
        }
    }
    if !alignment_seen && layout.alignment != tg_gguf::DEFAULT_ALIGNMENT {
        w.set_alignment(layout.alignment as u32);
    }
    let mut elements = 0u64;
    for (i, t) in layout.tensors.iter().enumerate() {
        let bytes = tensor_bytes(t, i, opts.seed, threads)?;
        elements += t.n_elements()? as u64;
        w.add_tensor(t.name.clone(), &t.dims, t.ggml_type()?, bytes);
    }
    let image = w.to_bytes()?;
    let bytes = image.len() as u64;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| SynthError::Io { path: dir.to_path_buf(), source })?;
    }
    std::fs::write(path, image).map_err(|source| SynthError::Io { path: path.to_path_buf(), source })?;
    Ok(SynthSummary { tensors: layout.tensors.len(), elements, bytes, vocab: vocab.map_or(0, |v| v.0.len()) })
}

/// The Hugging Face name prefix of a `Gemma3ForCausalLM` checkpoint.
pub const HF_PREFIX: &str = "model.";

/// Every (GGUF name, Hugging Face name, row-major shape, is an RMSNorm weight) of a Gemma 3
/// text model with `cfg`, in the order the checkpoint writes them.
pub fn hf_tensor_map(cfg: &Gemma3Config) -> Vec<(String, String, Vec<usize>, bool)> {
    let hf = TensorNames::HuggingFace { prefix: HF_PREFIX.to_string() };
    let g = cfg.expected_tensors_named(&TensorNames::Gguf, true);
    let h = cfg.expected_tensors_named(&hf, true);
    // Every RMSNorm weight's GGUF name ends so (`output_norm`, `attn_norm`, `attn_q_norm`,
    // `post_ffw_norm`, ...), and no other's.
    g.into_iter().zip(h).map(|((gn, shape), (hn, _))| (gn.clone(), hn, shape, gn.ends_with("norm.weight"))).collect()
}

/// The Hugging Face `config.json` of a `Gemma3ForCausalLM` text model with `cfg` (float32,
/// tied embeddings; `bos`/`eos`/`pad` from the GGUF tokenizer metadata).
pub fn hf_config(cfg: &Gemma3Config, bos: u32, eos: u32, pad: u32) -> serde_json::Value {
    let layer_types: Vec<&str> = (0..cfg.n_layer).map(|l| if cfg.is_global(l) { "full_attention" } else { "sliding_attention" }).collect();
    // 1/sqrt(query_pre_attn_scalar) is the query scale: undo it.
    // (Transformers' config validation wants an integer.)
    let qpas = (1.0 / (f64::from(cfg.attn_scale) * f64::from(cfg.attn_scale))).round() as u64;
    serde_json::json!({
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "vocab_size": cfg.n_vocab,
        "hidden_size": cfg.n_embd,
        "intermediate_size": cfg.n_ff,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_head_kv,
        "head_dim": cfg.head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": cfg.context_length,
        "rms_norm_eps": f64::from(cfg.rms_eps),
        "rope_theta": f64::from(cfg.rope_base_global),
        "rope_local_base_freq": f64::from(cfg.rope_base_local),
        "rope_scaling": null,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": f64::from(cfg.rope_base_global)},
            "sliding_attention": {"rope_type": "default", "rope_theta": f64::from(cfg.rope_base_local)}
        },
        "sliding_window": cfg.sliding_window,
        "layer_types": layer_types,
        "query_pre_attn_scalar": qpas,
        "attention_bias": false,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": null,
        "final_logit_softcapping": null,
        "use_bidirectional_attention": false,
        "tie_word_embeddings": true,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "initializer_range": 0.02,
        "use_cache": true,
        "torch_dtype": "float32",
        "dtype": "float32"
    })
}

/// What [`write_hf_gemma3`] wrote.
#[derive(Debug, Clone)]
pub struct HfSummary {
    /// Tensors in `model.safetensors`.
    pub tensors: usize,
    /// Bytes of `model.safetensors`.
    pub bytes: u64,
}

/// Writes the weights of the Gemma 3 GGUF file at `gguf` as a Hugging Face Transformers
/// checkpoint in `dir`: `config.json` ([`hf_config`]) and `model.safetensors` (every tensor
/// dequantized to f32 under its Hugging Face name, RMSNorm weights minus 1, since
/// Transformers computes `1 + w`; exact for the synthetic weights, which lie in [0.6, 1.4]).
pub fn write_hf_gemma3(gguf: &Path, dir: &Path) -> Result<HfSummary, SynthError> {
    let f = GgufFile::open(gguf)?;
    let cfg = Gemma3Config::from_gguf(&f)?;
    let id = |k: &str, default: u32| f.get(k).and_then(Value::as_u32).unwrap_or(default);
    let config = hf_config(&cfg, id(keys::BOS, 2), id(keys::EOS, 1), id(keys::PAD, 0));
    std::fs::create_dir_all(dir).map_err(|source| SynthError::Io { path: dir.to_path_buf(), source })?;
    let config_path = dir.join("config.json");
    let text = serde_json::to_string_pretty(&config).map_err(|e| layout_err(e.to_string()))?;
    std::fs::write(&config_path, text + "\n").map_err(|source| SynthError::Io { path: config_path.clone(), source })?;
    let mut w = tg_safetensors::SafetensorsWriter::new();
    w.add_metadata("format", "pt");
    let map = hf_tensor_map(&cfg);
    for (gname, hname, shape, is_norm) in &map {
        let mut v = f.dequantize(gname)?;
        if *is_norm {
            v.iter_mut().for_each(|x| *x -= 1.0);
        }
        if v.len() != shape.iter().product::<usize>() {
            return Err(layout_err(format!("tensor '{gname}' has {} elements, {hname} needs shape {shape:?}", v.len())));
        }
        w.add_f32(hname.clone(), shape, &v);
    }
    let st = dir.join("model.safetensors");
    w.write(&st)?;
    let bytes = std::fs::metadata(&st).map(|m| m.len()).unwrap_or(0);
    Ok(HfSummary { tensors: map.len(), bytes })
}

/// The layout of EmbeddingGemma-300M's sentence-transformers folder, made with
/// `tg synth --dump-layout DIR` (see `docs/fixtures.md`).
pub const EMBEDDINGGEMMA_300M_LAYOUT: &str = include_str!("../../../tests/fixtures/embeddinggemma-300m-layout.json");

/// One tensor of a safetensors file in a [`FolderLayout`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StTensor {
    /// Name in the file.
    pub name: String,
    /// Dtype name (`F32`, ...).
    pub dtype: String,
    /// Row-major shape.
    pub shape: Vec<usize>,
}

/// The header of one safetensors file of a [`FolderLayout`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StLayout {
    /// `__metadata__` entries.
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Tensors in file order.
    pub tensors: Vec<StTensor>,
}

/// The tokenizer of a [`FolderLayout`]: its size and the special tokens kept at their ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokLayout {
    /// Tokens of the real vocabulary.
    pub vocab_size: usize,
    /// Special added tokens (`<pad>`, `<bos>`, ...) other than `<unusedN>`, with their ids.
    pub special: Vec<SpecialToken>,
    /// Text of the token the post-processor puts before a text.
    pub bos: String,
    /// Text of the token the post-processor puts after a text.
    pub eos: String,
    /// Text of the unknown token.
    pub unk: String,
}

/// Everything about a sentence-transformers folder but its weights and vocabulary: the JSON
/// configuration files (verbatim), the safetensors headers, the tokenizer's size and
/// special tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FolderLayout {
    /// What the layout was read from.
    pub source: String,
    /// Configuration files by path relative to the folder.
    pub files: std::collections::BTreeMap<String, serde_json::Value>,
    /// Safetensors files by path relative to the folder.
    pub safetensors: std::collections::BTreeMap<String, StLayout>,
    /// The tokenizer.
    pub tokenizer: TokLayout,
}

fn read_json_file(path: &Path) -> Result<serde_json::Value, SynthError> {
    let text = std::fs::read_to_string(path).map_err(|e| layout_err(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| layout_err(format!("{}: invalid JSON: {e}", path.display())))
}

impl FolderLayout {
    /// Reads the layout of a sentence-transformers folder: `config.json`, `modules.json`,
    /// `sentence_bert_config.json`, `config_sentence_transformers.json` and each module's
    /// `config.json`; the header of every `model.safetensors` beside them; the size and
    /// special tokens of `tokenizer.json`.
    pub fn from_dir(dir: &Path, source: &str) -> Result<FolderLayout, SynthError> {
        let mut files = std::collections::BTreeMap::new();
        let mut safetensors = std::collections::BTreeMap::new();
        let modules = read_json_file(&dir.join("modules.json"))?;
        let mut subdirs = vec![String::new()];
        for m in modules.as_array().into_iter().flatten() {
            if let Some(p) = m.get("path").and_then(serde_json::Value::as_str).filter(|p| !p.is_empty()) {
                subdirs.push(format!("{p}/"));
            }
        }
        for sub in &subdirs {
            let names: &[&str] = if sub.is_empty() { &["config.json", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"] } else { &["config.json"] };
            for n in names {
                let rel = format!("{sub}{n}");
                if dir.join(&rel).is_file() {
                    files.insert(rel.clone(), read_json_file(&dir.join(&rel))?);
                }
            }
            let rel = format!("{sub}model.safetensors");
            if dir.join(&rel).is_file() {
                let f = tg_safetensors::SafetensorsFile::open(dir.join(&rel))?;
                let tensors = f.tensors().map(|t| StTensor { name: t.name.to_string(), dtype: t.dtype.name().to_string(), shape: t.shape.to_vec() }).collect();
                let metadata = f.metadata().iter().cloned().collect();
                safetensors.insert(rel, StLayout { metadata, tensors });
            }
        }
        let tok = read_json_file(&dir.join("tokenizer.json"))?;
        let vocab_size = tok.pointer("/model/vocab").map_or(0, |v| v.as_object().map_or_else(|| v.as_array().map_or(0, Vec::len), serde_json::Map::len));
        let mut special = Vec::new();
        for t in tok.get("added_tokens").and_then(serde_json::Value::as_array).into_iter().flatten() {
            let (Some(id), Some(text)) = (t.get("id").and_then(serde_json::Value::as_u64), t.get("content").and_then(serde_json::Value::as_str)) else { continue };
            if t.get("special").and_then(serde_json::Value::as_bool) == Some(true) && unused_n(text).is_none() {
                special.push(SpecialToken { id: id as u32, text: text.to_string(), ty: 3, score: 0.0 });
            }
        }
        let template_token = |at: usize| -> Option<String> {
            let single = tok.pointer("/post_processor/single")?.as_array()?;
            let i = if at == 0 { 0 } else { single.len().checked_sub(1)? };
            single.get(i)?.pointer("/SpecialToken/id")?.as_str().map(str::to_string)
        };
        let bos = template_token(0).ok_or_else(|| layout_err("tokenizer.json: no special token before the text in post_processor.single"))?;
        let eos = template_token(1).ok_or_else(|| layout_err("tokenizer.json: no special token after the text in post_processor.single"))?;
        let unk = tok.pointer("/model/unk_token").and_then(serde_json::Value::as_str).unwrap_or("<unk>").to_string();
        Ok(FolderLayout { source: source.to_string(), files, safetensors, tokenizer: TokLayout { vocab_size, special, bos, eos, unk } })
    }

    /// Parses a layout from its JSON text.
    pub fn from_json(text: &str) -> Result<FolderLayout, SynthError> {
        serde_json::from_str(text).map_err(|e| layout_err(format!("not a folder layout: {e}")))
    }

    /// The built-in layout of EmbeddingGemma-300M ([`EMBEDDINGGEMMA_300M_LAYOUT`]).
    pub fn embeddinggemma_300m() -> Result<FolderLayout, SynthError> {
        FolderLayout::from_json(EMBEDDINGGEMMA_300M_LAYOUT)
    }

    /// The layout as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "null".into()) + "\n"
    }

    /// The layout with only the first `layers` encoder layers (`layers.N.*` tensors for
    /// `N < layers`, `num_hidden_layers` and `layer_types` of `config.json` cut to match).
    pub fn with_layers(&self, layers: usize) -> Result<FolderLayout, SynthError> {
        let mut out = self.clone();
        let cfg = out.files.get_mut("config.json").ok_or_else(|| layout_err("no config.json"))?;
        let total = cfg.get("num_hidden_layers").and_then(serde_json::Value::as_u64).ok_or_else(|| layout_err("config.json has no num_hidden_layers"))?;
        if layers == 0 || layers as u64 > total {
            return Err(layout_err(format!("--layers {layers}: the model has {total} layers (1..={total})")));
        }
        cfg["num_hidden_layers"] = serde_json::Value::from(layers as u64);
        if let Some(t) = cfg.get_mut("layer_types").and_then(serde_json::Value::as_array_mut) {
            t.truncate(layers);
        }
        for st in out.safetensors.values_mut() {
            st.tensors.retain(|t| match t.name.split('.').skip_while(|p| *p != "layers").nth(1).and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => n < layers,
                None => true,
            });
        }
        Ok(out)
    }
}

/// A `tokenizer.json` with a word-level model of the layout's size: the special tokens at their
/// ids, made-up lowercase words (`a` … `z`, `aa` …) everywhere else; texts are split at
/// whitespace and a word not in the vocabulary is the unknown token; the post-processor puts
/// `bos` before and `eos` after every text, as EmbeddingGemma's does.
pub fn synthetic_tokenizer_json(t: &TokLayout) -> Result<serde_json::Value, SynthError> {
    let mut slots: Vec<Option<String>> = vec![None; t.vocab_size];
    for s in &t.special {
        // An added token past the model's vocabulary (EmbeddingGemma's `<image_soft_token>`)
        // is only an added token, as in the real file.
        if let Some(slot) = slots.get_mut(s.id as usize) {
            *slot = Some(s.text.clone());
        }
    }
    let taken: HashSet<String> = slots.iter().flatten().cloned().collect();
    let mut words = (1u32..).flat_map(|len| (0..26u64.pow(len)).map(move |i| (len, i))).map(|(len, mut i)| {
        let mut w = vec![0u8; len as usize];
        for c in w.iter_mut().rev() {
            *c = b'a' + (i % 26) as u8;
            i /= 26;
        }
        String::from_utf8(w).unwrap_or_default()
    });
    let mut vocab = serde_json::Map::new();
    for (id, slot) in slots.into_iter().enumerate() {
        let text = match slot {
            Some(s) => s,
            None => loop {
                let w = words.next().ok_or_else(|| layout_err("ran out of synthetic words"))?;
                if !taken.contains(&w) {
                    break w;
                }
            },
        };
        vocab.insert(text, serde_json::Value::from(id as u64));
    }
    let id_of = |text: &str| vocab.get(text).and_then(serde_json::Value::as_u64).ok_or_else(|| layout_err(format!("tokenizer: {text:?} is not a special token of the layout")));
    let (bos, eos) = (id_of(&t.bos)?, id_of(&t.eos)?);
    if !vocab.contains_key(&t.unk) {
        return Err(layout_err(format!("tokenizer: the unknown token {:?} is not in the vocabulary", t.unk)));
    }
    let added: Vec<serde_json::Value> = t
        .special
        .iter()
        .map(|s| serde_json::json!({"id": s.id, "content": s.text, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
        .collect();
    Ok(serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": t.bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": t.eos, "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": t.bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": t.eos, "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": t.eos, "type_id": 1}}],
            "special_tokens": {
                t.bos.clone(): {"id": t.bos, "ids": [bos], "tokens": [t.bos]},
                t.eos.clone(): {"id": t.eos, "ids": [eos], "tokens": [t.eos]}
            }
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": t.unk}
    }))
}

/// Writes a sentence-transformers folder with `layout`'s configuration files and tensor
/// shapes, random F32 weights (RMSNorm weights, stored as `w` for `1 + w`, `N(0, 0.1)`
/// clamped to ±0.4; matrices `N(0, 1/sqrt(columns))`) and a synthetic word-level
/// `tokenizer.json` of the same size ([`synthetic_tokenizer_json`]). Returns the tensors and
/// bytes of weights written.
pub fn write_folder(layout: &FolderLayout, opts: &SynthOptions, dir: &Path) -> Result<(usize, u64), SynthError> {
    let threads = threads_or_all(opts.threads);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SynthError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (rel, v) in &layout.files {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let text = serde_json::to_string_pretty(v).map_err(|e| layout_err(e.to_string()))?;
        std::fs::write(&p, text + "\n").map_err(io(&p))?;
    }
    let tok = synthetic_tokenizer_json(&layout.tokenizer)?;
    let p = dir.join("tokenizer.json");
    std::fs::write(&p, serde_json::to_string(&tok).map_err(|e| layout_err(e.to_string()))?).map_err(io(&p))?;
    let (mut count, mut bytes) = (0usize, 0u64);
    for (fi, (rel, st)) in layout.safetensors.iter().enumerate() {
        let mut w = tg_safetensors::SafetensorsWriter::new();
        for (k, v) in &st.metadata {
            w.add_metadata(k.clone(), v.clone());
        }
        for (ti, t) in st.tensors.iter().enumerate() {
            if t.dtype != "F32" {
                return Err(layout_err(format!("{rel}: tensor '{}' is {}; only F32 weights are synthesized", t.name, t.dtype)));
            }
            // As a GGUF tensor entry (ggml dims: innermost first), so `tensor_bytes` draws its values.
            let norm = t.name.contains("norm");
            let dims: Vec<u64> = if norm { vec![t.shape.iter().product::<usize>() as u64] } else { t.shape.iter().rev().map(|&d| d as u64).collect() };
            let entry = TensorEntry { name: format!("{rel}/{}", t.name), dims, ty: "F32".into() };
            let mut data = tensor_bytes(&entry, fi * 100_000 + ti, opts.seed, threads)?;
            if norm {
                // Stored as `w` for `1 + w`: exact, since the drawn `1 + w` lies in [0.6, 1.4].
                for c in data.chunks_exact_mut(4) {
                    let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) - 1.0;
                    c.copy_from_slice(&v.to_le_bytes());
                }
            }
            bytes += data.len() as u64;
            w.add_tensor(t.name.clone(), tg_safetensors::Dtype::F32, &t.shape, data);
            count += 1;
        }
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        w.write(&p)?;
    }
    Ok((count, bytes))
}

// ---------------------------------------------------------------------------------------
// Tiny Llama-family checkpoints, written from scratch (`tg synth llama3-tiny` …).

/// A tiny Llama-family model that `tg synth` writes from scratch (no layout of a real file):
/// the metadata, tensor names and tokenizer of a real family at a toy size (n_embd 128, two
/// or three layers, a vocabulary of about 300 tokens), seeded random weights in a mix of
/// ggml types. Made to be run by llama.cpp and by this engine on the very same file
/// (`tests/fixtures/llama_cpp/synth/`, `docs/fixtures.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TinyModel {
    /// `llama`, Llama 3.1 style: grouped-query attention (4 query / 2 kv heads of 32),
    /// RoPE base 500000 with Llama 3.1 frequency factors (`rope_freqs.weight`), a separate
    /// `output.weight`, byte-level BPE (`llama-bpe`) with `<|begin_of_text|>` added; F16
    /// matrices but a Q8_0 embedding and a Q6_K `ffn_down` in the second layer.
    Llama3,
    /// `llama`, Mistral 7B style: `attention.sliding_window`, one kv head for 4 query heads,
    /// the output tied to the embedding, a SentencePiece vocabulary with byte fallback
    /// (`tokenizer.ggml.model = llama`, `<s>` added, a space prefix).
    Mistral,
    /// `qwen3`: per-head RMSNorm of queries and keys, heads of 64 (`attention.key_length`, so
    /// 4 · 64 ≠ n_embd 128), NEOX RoPE with base 1e6, tied output, byte-level BPE (`qwen2`) with
    /// `<|im_start|>`, `<|im_end|>` and the user-defined `<think>`, `</think>`; no BOS.
    Qwen3,
    /// `llama` with linear RoPE scaling (`rope.scaling.type = linear`, factor 4); F16
    /// matrices (the embedding Q8_0), so llama.cpp's own rounding stays small.
    LlamaLinear,
    /// `llama` with YaRN (`rope.scaling.type = yarn`, factor 4, original context 64); the
    /// weights of [`TinyModel::LlamaLinear`] (same seed, same names and types).
    LlamaYarn,
}

/// The vocabulary of a [`TinySpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TinyVocab {
    /// Byte-level BPE, `tokenizer.ggml.pre = llama-bpe`, Llama 3's special tokens.
    Llama3,
    /// Byte-level BPE, `tokenizer.ggml.pre = qwen2`, Qwen's special tokens.
    Qwen,
    /// SentencePiece (`tokenizer.ggml.model = llama`): `<unk>`, `<s>`, `</s>`, byte tokens.
    Spm,
}

/// Llama 3.1's RoPE frequency factors (`rope_freqs.weight`), as `convert_hf_to_gguf.py`
/// computes them from `rope_scaling` (`rope_type: llama3`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3RopeFactors {
    /// `factor`: the divisor of the low frequencies.
    pub factor: f64,
    /// `low_freq_factor`.
    pub low_freq_factor: f64,
    /// `high_freq_factor`.
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings` (8192 in Llama 3.1; small here, so the factors
    /// change angles within a short test sequence).
    pub original_context: f64,
}

impl Llama3RopeFactors {
    /// The `head_dim / 2` divisors of the pair frequencies `base^(-2i/head_dim)`: 1 for
    /// wavelengths below `original_context / high_freq_factor`, `factor` above
    /// `original_context / low_freq_factor`, a smooth blend between.
    pub fn divisors(&self, head_dim: usize, base: f64) -> Vec<f32> {
        let (low_wl, high_wl) = (self.original_context / self.low_freq_factor, self.original_context / self.high_freq_factor);
        (0..head_dim / 2)
            .map(|i| {
                let freq = 1.0 / base.powf((2 * i) as f64 / head_dim as f64);
                let wl = 2.0 * std::f64::consts::PI / freq;
                let d = if wl < high_wl {
                    1.0
                } else if wl > low_wl {
                    self.factor
                } else {
                    let smooth = (self.original_context / wl - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor);
                    1.0 / ((1.0 - smooth) / self.factor + smooth)
                };
                d as f32
            })
            .collect()
    }
}

/// Everything [`write_tiny`] needs to write a [`TinyModel`].
#[derive(Debug, Clone, PartialEq)]
pub struct TinySpec {
    /// `general.architecture`.
    pub arch: &'static str,
    /// `general.name`.
    pub name: &'static str,
    /// Hidden size.
    pub n_embd: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// FFN inner size.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Write `attention.key_length` / `value_length` (else the head dimension is
    /// `n_embd / n_head`, as llama.cpp and this engine both assume).
    pub key_length: bool,
    /// `context_length`.
    pub context_length: usize,
    /// `rope.freq_base`.
    pub rope_base: f32,
    /// `attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// `attention.sliding_window`.
    pub sliding_window: Option<usize>,
    /// `rope.scaling.type`, `rope.scaling.factor` and `rope.scaling.original_context_length`.
    pub rope_scaling: Option<(&'static str, f32, Option<usize>)>,
    /// A `rope_freqs.weight` tensor with these Llama 3.1 factors.
    pub rope_factors: Option<Llama3RopeFactors>,
    /// No `output.weight`: the output head is the embedding table.
    pub tied_output: bool,
    /// `blk.N.attn_q_norm.weight` / `attn_k_norm.weight` (Qwen3).
    pub qk_norm: bool,
    /// The vocabulary.
    pub vocab: TinyVocab,
    /// ggml type of each matrix: by full tensor name first, else by its name without
    /// `blk.N.` and `.weight` (`token_embd`, `output`, `attn_q`, …, `ffn_down`).
    pub types: &'static [(&'static str, GgmlType)],
    /// Scale of `output_norm.weight` (`scale · (1 + N(0, 0.1))`): spreads the logits so
    /// greedy choices are rarely near ties.
    pub output_norm_scale: f32,
}

impl TinyModel {
    /// Every tiny model.
    pub const ALL: [TinyModel; 5] = [TinyModel::Llama3, TinyModel::Mistral, TinyModel::Qwen3, TinyModel::LlamaLinear, TinyModel::LlamaYarn];

    /// The name `tg synth` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            TinyModel::Llama3 => "llama3-tiny",
            TinyModel::Mistral => "mistral-tiny",
            TinyModel::Qwen3 => "qwen3-tiny",
            TinyModel::LlamaLinear => "llama-linear-tiny",
            TinyModel::LlamaYarn => "llama-yarn-tiny",
        }
    }

    /// The model called `name`.
    pub fn from_name(name: &str) -> Option<TinyModel> {
        TinyModel::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Its configuration.
    pub fn spec(self) -> TinySpec {
        use GgmlType::*;
        let llama = TinySpec {
            arch: "llama",
            name: self.name(),
            n_embd: 128,
            n_layer: 2,
            n_ff: 256,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 32,
            key_length: false,
            context_length: 512,
            rope_base: 10_000.0,
            rms_eps: 1e-5,
            sliding_window: None,
            rope_scaling: None,
            rope_factors: None,
            tied_output: false,
            qk_norm: false,
            vocab: TinyVocab::Llama3,
            types: &[("token_embd", Q8_0), ("output", F16)],
            output_norm_scale: 3.0,
        };
        match self {
            TinyModel::Llama3 => TinySpec {
                rope_base: 500_000.0,
                rope_factors: Some(Llama3RopeFactors { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context: 64.0 }),
                types: &[("token_embd", Q8_0), ("output", F16), ("blk.1.ffn_down", Q6_K)],
                ..llama
            },
            TinyModel::Mistral => TinySpec {
                n_head_kv: 1,
                sliding_window: Some(64),
                tied_output: true,
                vocab: TinyVocab::Spm,
                types: &[("token_embd", F16), ("attn_q", Q5_0), ("attn_k", Q5_0), ("attn_v", Q8_0), ("attn_output", F16), ("ffn_gate", Q8_0), ("ffn_up", Q8_0), ("ffn_down", Q4_K)],
                ..llama
            },
            TinyModel::Qwen3 => TinySpec {
                arch: "qwen3",
                n_layer: 3,
                head_dim: 64,
                key_length: true,
                rope_base: 1_000_000.0,
                rms_eps: 1e-6,
                tied_output: true,
                qk_norm: true,
                vocab: TinyVocab::Qwen,
                types: &[
                    ("token_embd", Q8_0),
                    ("attn_q", Q8_0),
                    ("attn_k", F16),
                    ("attn_v", Q5_0),
                    ("attn_output", Q4_K),
                    ("ffn_gate", F16),
                    ("ffn_up", Q8_0),
                    ("ffn_down", Q6_K),
                    ("blk.2.ffn_down", Q4_K),
                ],
                ..llama
            },
            TinyModel::LlamaLinear => TinySpec { rope_scaling: Some(("linear", 4.0, None)), ..llama },
            TinyModel::LlamaYarn => TinySpec { rope_scaling: Some(("yarn", 4.0, Some(64))), ..llama },
        }
    }
}

/// Neutral merges of the tiny vocabularies (`' '` a space, `'\n'` a newline), highest
/// priority first: byte-level BPE merges (`Ġ t`, …) or SentencePiece pieces (`▁t`, …, scored
/// by rank) are made from them.
const TINY_MERGES: &[(&str, &str)] = &[
    (" ", "t"),
    ("h", "e"),
    ("i", "n"),
    (" ", "a"),
    ("e", "r"),
    ("o", "n"),
    (" t", "he"),
    ("r", "e"),
    ("a", "t"),
    (" ", "s"),
    ("e", "n"),
    (" ", "o"),
    ("o", "r"),
    (" ", "c"),
    ("i", "s"),
    (" ", "w"),
    ("a", "n"),
    ("e", "s"),
    (" ", "f"),
    (" ", "p"),
    ("i", "t"),
    ("a", "l"),
    (" ", "b"),
    ("in", "g"),
    (" o", "f"),
    (" ", "m"),
    ("e", "d"),
    (" ", "i"),
    ("o", "u"),
    (" ", "d"),
    ("a", "p"),
    (" c", "ap"),
    ("it", "al"),
    (" cap", "ital"),
    (" ", "F"),
    ("r", "an"),
    ("c", "e"),
    (" F", "ran"),
    (" Fran", "ce"),
    (" i", "s"),
    (" ", " "),
    ("  ", "  "),
    ("\n", "\n"),
    (" ", "n"),
    ("r", "n"),
    ("re", "t"),
    ("u", "rn"),
    ("ret", "urn"),
    (" ", "return"),
    ("d", "e"),
    ("de", "f"),
    ("f", "i"),
    ("b", "on"),
    ("fi", "bon"),
    ("a", "c"),
    ("c", "i"),
    ("ac", "ci"),
    ("fibon", "acci"),
    (" ", "fibonacci"),
    (" ", "T"),
    (" T", "he"),
    (" w", "h"),
    (" wh", "at"),
    (" ", "W"),
    (" W", "h"),
    (" Wh", "at"),
    (" ", "y"),
    (" y", "ou"),
    ("?", "\n"),
];

/// GPT-2's byte-to-character table (`bytes_to_unicode`): `(byte, char)` in GPT-2's order
/// (the printable bytes first), so token ids 0..256 are those of GPT-2 / Llama 3 / Qwen.
fn gpt2_byte_chars() -> Vec<(u8, char)> {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    let mut v: Vec<(u8, char)> = (0..256u32).filter(|&b| printable(b)).map(|b| (b as u8, char::from_u32(b).unwrap_or('?'))).collect();
    for (n, b) in (0..256u32).filter(|&b| !printable(b)).enumerate() {
        v.push((b as u8, char::from_u32(256 + n as u32).unwrap_or('?')));
    }
    v
}

/// A tiny vocabulary as GGUF metadata entries (`tokenizer.*`), in file order.
fn tiny_vocab_metadata(vocab: TinyVocab) -> Result<Vec<(String, Value)>, SynthError> {
    let mut tokens: Vec<String> = Vec::new();
    let mut types: Vec<i32> = Vec::new();
    let mut scores: Vec<f32> = Vec::new();
    let mut meta: Vec<(String, Value)> = Vec::new();
    let push = |tokens: &mut Vec<String>, types: &mut Vec<i32>, scores: &mut Vec<f32>, t: String, ty: i32, s: f32| -> Result<u32, SynthError> {
        if tokens.contains(&t) {
            return Err(layout_err(format!("tiny vocabulary: token {t:?} twice")));
        }
        tokens.push(t);
        types.push(ty);
        scores.push(s);
        Ok(tokens.len() as u32 - 1)
    };
    match vocab {
        TinyVocab::Llama3 | TinyVocab::Qwen => {
            let table = gpt2_byte_chars();
            let mut map = [' '; 256];
            for &(b, c) in &table {
                map[b as usize] = c;
            }
            let enc = |s: &str| s.bytes().map(|b| map[b as usize]).collect::<String>();
            for &(_, c) in &table {
                push(&mut tokens, &mut types, &mut scores, c.to_string(), 1, 0.0)?;
            }
            let mut merges = Vec::new();
            for &(a, b) in TINY_MERGES {
                let (ea, eb) = (enc(a), enc(b));
                if !tokens.contains(&ea) || !tokens.contains(&eb) {
                    return Err(layout_err(format!("tiny vocabulary: merge ({a:?}, {b:?}) of pieces that are not tokens")));
                }
                merges.push(format!("{ea} {eb}"));
                let joined = format!("{ea}{eb}");
                if !tokens.contains(&joined) {
                    push(&mut tokens, &mut types, &mut scores, joined, 1, 0.0)?;
                }
            }
            let (pre, specials): (&str, &[(&str, i32)]) = match vocab {
                TinyVocab::Llama3 => ("llama-bpe", &[("<|begin_of_text|>", 3), ("<|end_of_text|>", 3), ("<|start_header_id|>", 3), ("<|end_header_id|>", 3), ("<|eot_id|>", 3)]),
                _ => ("qwen2", &[("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4), ("</think>", 4)]),
            };
            for &(t, ty) in specials {
                push(&mut tokens, &mut types, &mut scores, t.to_string(), ty, 0.0)?;
            }
            let id = |t: &str| tokens.iter().position(|x| x == t).map(|i| i as u32).ok_or_else(|| layout_err(format!("no token {t:?}")));
            meta.push((keys::MODEL.into(), Value::from("gpt2")));
            meta.push((keys::PRE.into(), Value::from(pre)));
            meta.push((keys::TOKENS.into(), Value::from(tokens.clone())));
            meta.push((keys::TOKEN_TYPE.into(), Value::from(types.clone())));
            meta.push((keys::MERGES.into(), Value::from(merges)));
            if vocab == TinyVocab::Llama3 {
                meta.push((keys::BOS.into(), Value::U32(id("<|begin_of_text|>")?)));
                meta.push((keys::EOS.into(), Value::U32(id("<|end_of_text|>")?)));
            } else {
                let eot = id("<|endoftext|>")?;
                meta.push((keys::EOS.into(), Value::U32(id("<|im_end|>")?)));
                meta.push((keys::PAD.into(), Value::U32(eot)));
                meta.push((keys::BOS.into(), Value::U32(eot)));
                meta.push((keys::ADD_BOS.into(), Value::Bool(false)));
            }
        }
        TinyVocab::Spm => {
            push(&mut tokens, &mut types, &mut scores, "<unk>".into(), 2, 0.0)?;
            push(&mut tokens, &mut types, &mut scores, "<s>".into(), 3, 0.0)?;
            push(&mut tokens, &mut types, &mut scores, "</s>".into(), 3, 0.0)?;
            for b in 0..256 {
                push(&mut tokens, &mut types, &mut scores, format!("<0x{b:02X}>"), 6, 0.0)?;
            }
            // Pieces of printable ASCII only ('\n' and anything else falls back to bytes).
            let enc = |s: &str| s.replace(' ', "\u{2581}");
            let spm_char = |c: char| c == ' ' || c.is_ascii_graphic();
            let mut rank = 0u32;
            for &(a, b) in TINY_MERGES {
                let joined = enc(&format!("{a}{b}"));
                if !format!("{a}{b}").chars().all(spm_char) || tokens.contains(&joined) {
                    continue;
                }
                push(&mut tokens, &mut types, &mut scores, joined, 1, -(rank as f32))?;
                rank += 1;
            }
            let chars = std::iter::once('\u{2581}').chain((b'!'..=b'~').map(char::from));
            for (j, c) in chars.enumerate() {
                if !tokens.contains(&c.to_string()) {
                    push(&mut tokens, &mut types, &mut scores, c.to_string(), 1, -1000.0 - j as f32)?;
                }
            }
            meta.push((keys::MODEL.into(), Value::from("llama")));
            meta.push((keys::TOKENS.into(), Value::from(tokens.clone())));
            meta.push((keys::SCORES.into(), Value::from(scores.clone())));
            meta.push((keys::TOKEN_TYPE.into(), Value::from(types.clone())));
            meta.push((keys::BOS.into(), Value::U32(1)));
            meta.push((keys::EOS.into(), Value::U32(2)));
            meta.push((keys::UNK.into(), Value::U32(0)));
            meta.push((keys::ADD_BOS.into(), Value::Bool(true)));
            meta.push((keys::ADD_EOS.into(), Value::Bool(false)));
        }
    }
    Ok(meta)
}

/// Approximately standard normal values from sums of four uniforms (Irwin–Hall), with
/// nothing but IEEE arithmetic, so the bytes do not depend on the platform's `ln`/`cos`.
struct IrwinHall(ChaCha8Rng);

impl IrwinHall {
    fn sample(&mut self) -> f32 {
        use rand::RngCore;
        let s: f64 = (0..4).map(|_| (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)).sum();
        ((s - 2.0) * 3f64.sqrt()) as f32
    }
}

/// One tensor of a tiny model: name, ggml dims, type, values.
type TinyTensor = (String, Vec<u64>, GgmlType, Vec<f32>);

/// The tensors of a tiny model in file order.
fn tiny_tensors(spec: &TinySpec, n_vocab: usize, seed: u64) -> Result<Vec<TinyTensor>, SynthError> {
    let (d, hd, ff) = (spec.n_embd, spec.head_dim, spec.n_ff);
    let (q, kv) = (spec.n_head * hd, spec.n_head_kv * hd);
    let mut names: Vec<(String, Vec<usize>)> = vec![("token_embd.weight".into(), vec![d, n_vocab])];
    if spec.rope_factors.is_some() {
        names.push(("rope_freqs.weight".into(), vec![hd / 2]));
    }
    for l in 0..spec.n_layer {
        let mut layer: Vec<(&str, Vec<usize>)> =
            vec![("attn_norm", vec![d]), ("attn_q", vec![d, q]), ("attn_k", vec![d, kv]), ("attn_v", vec![d, kv]), ("attn_output", vec![q, d])];
        if spec.qk_norm {
            layer.extend([("attn_q_norm", vec![hd]), ("attn_k_norm", vec![hd])]);
        }
        layer.extend([("ffn_norm", vec![d]), ("ffn_gate", vec![d, ff]), ("ffn_up", vec![d, ff]), ("ffn_down", vec![ff, d])]);
        names.extend(layer.into_iter().map(|(n, s)| (format!("blk.{l}.{n}.weight"), s)));
    }
    names.push(("output_norm.weight".into(), vec![d]));
    if !spec.tied_output {
        names.push(("output.weight".into(), vec![d, n_vocab]));
    }
    let mut out = Vec::new();
    for (name, dims) in names {
        let n: usize = dims.iter().product();
        let mut g = IrwinHall(ChaCha8Rng::seed_from_u64(mix(seed, name_hash(&name))));
        let (ty, values) = if name == "rope_freqs.weight" {
            let f = spec.rope_factors.ok_or_else(|| layout_err("rope_freqs without factors"))?;
            (GgmlType::F32, f.divisors(hd, f64::from(spec.rope_base)))
        } else if dims.len() == 1 {
            let scale = if name == "output_norm.weight" { spec.output_norm_scale } else { 1.0 };
            (GgmlType::F32, (0..n).map(|_| scale * (1.0 + (0.1 * g.sample()).clamp(-0.4, 0.4))).collect())
        } else {
            let role = name.strip_suffix(".weight").unwrap_or(&name);
            let short = role.split_once('.').filter(|_| role.starts_with("blk.")).and_then(|(_, r)| r.split_once('.')).map_or(role, |(_, r)| r);
            let ty = spec.types.iter().find(|(k, _)| *k == role).or_else(|| spec.types.iter().find(|(k, _)| *k == short)).map_or(GgmlType::F16, |&(_, t)| t);
            let sd = 1.0 / (dims[0] as f32).sqrt();
            (ty, (0..n).map(|_| sd * g.sample()).collect())
        };
        out.push((name, dims.iter().map(|&x| x as u64).collect(), ty, values));
    }
    Ok(out)
}

/// Writes the tiny model `model` with weights from `seed` to `path` (see [`TinyModel`]):
/// the same model and seed give the same bytes on every platform. Matrices are
/// `N(0, 1/sqrt(row length))` (approximately normal), RMSNorm weights `1 + N(0, 0.1)`
/// clamped to `[0.6, 1.4]` (the final one times [`TinySpec::output_norm_scale`]), quantized
/// with this module's round-to-nearest quantizers.
pub fn write_tiny(model: TinyModel, seed: u64, path: &Path) -> Result<SynthSummary, SynthError> {
    write_tiny_spec(model.spec(), seed, path)
}

/// [`write_tiny`] of a changed [`TinySpec`] (e.g. another context length).
pub fn write_tiny_spec(spec: TinySpec, seed: u64, path: &Path) -> Result<SynthSummary, SynthError> {
    let vocab = tiny_vocab_metadata(spec.vocab)?;
    let n_vocab = vocab.iter().find(|(k, _)| k == keys::TOKENS).and_then(|(_, v)| v.as_array()).map_or(0, <[Value]>::len);
    let arch = spec.arch;
    let mut w = GgufWriter::new();
    let u = |x: usize| Value::U32(x as u32);
    w.add("general.architecture", arch);
    w.add("general.type", "model");
    w.add("general.name", spec.name);
    w.add(format!("{arch}.block_count"), u(spec.n_layer));
    w.add(format!("{arch}.context_length"), u(spec.context_length));
    w.add(format!("{arch}.embedding_length"), u(spec.n_embd));
    w.add(format!("{arch}.feed_forward_length"), u(spec.n_ff));
    w.add(format!("{arch}.attention.head_count"), u(spec.n_head));
    w.add(format!("{arch}.attention.head_count_kv"), u(spec.n_head_kv));
    w.add(format!("{arch}.rope.freq_base"), Value::F32(spec.rope_base));
    w.add(format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(spec.rms_eps));
    if spec.key_length {
        w.add(format!("{arch}.attention.key_length"), u(spec.head_dim));
        w.add(format!("{arch}.attention.value_length"), u(spec.head_dim));
    }
    if arch == "llama" {
        w.add(format!("{arch}.vocab_size"), u(n_vocab));
        w.add(format!("{arch}.rope.dimension_count"), u(spec.head_dim));
    }
    if let Some((ty, factor, original)) = spec.rope_scaling {
        w.add(format!("{arch}.rope.scaling.type"), ty);
        w.add(format!("{arch}.rope.scaling.factor"), Value::F32(factor));
        if let Some(o) = original {
            w.add(format!("{arch}.rope.scaling.original_context_length"), u(o));
        }
    }
    if let Some(win) = spec.sliding_window {
        w.add(format!("{arch}.attention.sliding_window"), u(win));
    }
    w.add("general.quantization_version", Value::U32(2));
    for (k, v) in vocab {
        w.add(k, v);
    }
    let tensors = tiny_tensors(&spec, n_vocab, seed)?;
    let mut elements = 0u64;
    for (name, dims, ty, values) in &tensors {
        let mut bytes = vec![0u8; ty.row_bytes(values.len()).map_err(|e| layout_err(format!("tensor '{name}': {e}")))?];
        encode(*ty, values, &mut bytes)?;
        elements += values.len() as u64;
        w.add_tensor(name.clone(), dims, *ty, bytes);
    }
    let image = w.to_bytes()?;
    let bytes = image.len() as u64;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| SynthError::Io { path: dir.to_path_buf(), source })?;
    }
    std::fs::write(path, image).map_err(|source| SynthError::Io { path: path.to_path_buf(), source })?;
    Ok(SynthSummary { tensors: tensors.len(), elements, bytes, vocab: n_vocab })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
        let mut q = vec![0u8; ty.row_bytes(x.len()).unwrap()];
        encode(ty, x, &mut q).unwrap();
        tg_quant::dequantize_to_vec(ty, &q, x.len()).unwrap()
    }

    #[test]
    fn quantizers_roundtrip_within_a_step() {
        let seed = 0x5EED;
        println!("seed {seed:#x}");
        let mut g = Normal::new(seed);
        let mut x: Vec<f32> = (0..256 * 8).map(|_| 0.05 * g.sample()).collect();
        x[300] = 0.9; // an outlier in one block
        x[512..768].fill(0.0); // an all-zero block
        for (ty, levels) in [(GgmlType::Q8_0, 127.0), (GgmlType::Q5_0, 15.0), (GgmlType::Q4_K, 7.5), (GgmlType::Q6_K, 31.0)] {
            let y = roundtrip(ty, &x);
            let block = ty.block_size().max(32);
            for (i, (bx, by)) in x.chunks(block).zip(y.chunks(block)).enumerate() {
                let amax = bx.iter().fold(0f32, |m, v| m.max(v.abs()));
                // Half a step of the coarsest level spacing, plus the 6-bit / int8 rounding of the
                // sub-block scales (up to a whole step at the smallest scales).
                let tol = 1.5 * amax / levels + 1e-6;
                for (a, b) in bx.iter().zip(by) {
                    assert!((a - b).abs() <= tol, "{ty} block {i}: {a} vs {b} (tol {tol})");
                }
            }
            let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.iter().map(|a| a * a).sum::<f32>();
            assert!(err < 0.02, "{ty}: relative squared error {err}");
        }
    }

    #[test]
    fn vocab_layout_roundtrip() {
        let mut tokens = vec!["<pad>", "<eos>", "<bos>", "<unk>", "<unused0>", "<unused1>", "\n"];
        let mut types = vec![3, 3, 3, 3, 3, 3, 4];
        let bytes: Vec<String> = (0..256).map(|b| format!("<0x{b:02X}>")).collect();
        tokens.extend(bytes.iter().map(String::as_str));
        types.extend([6; 256]);
        tokens.extend(["▁a", "b", "<unused2>"]);
        types.extend([1, 1, 3]);
        let scores: Vec<f32> = types
            .iter()
            .map(|&t| {
                if t == 1 {
                    -1.0
                } else if t == 6 {
                    0.0
                } else {
                    -1000.0
                }
            })
            .collect();
        let v = VocabLayout::from_tokens(&tokens, &scores, &types, "f32", "i32").unwrap();
        assert_eq!(v.normal, 2);
        assert_eq!(v.bytes, Some(ByteRun { first_id: 7, score: 0.0 }));
        assert_eq!(v.unused.len(), 2, "{:?}", v.unused);
        assert_eq!(v.special.len(), 5);
        let (t, s, ty) = v.synthesize().unwrap();
        assert_eq!(t.len(), tokens.len());
        for i in 0..tokens.len() {
            if types[i] != 1 {
                assert_eq!((t[i].as_str(), s[i], ty[i]), (tokens[i], scores[i], types[i]));
            } else {
                assert_eq!(ty[i], 1);
            }
        }
    }

    #[test]
    fn layout_fixture_parses_and_roundtrips() {
        let l = GgufLayout::gemma3_270m().unwrap();
        assert_eq!(l.architecture().unwrap(), "gemma3");
        assert_eq!(l.tensors.len(), 236);
        assert_eq!(l.vocab.as_ref().unwrap().size, 262_144);
        assert_eq!(GgufLayout::from_json(&l.to_json()).unwrap(), l);
        let two = l.with_layers(2).unwrap();
        assert_eq!(two.tensors.len(), 2 + 2 * 13);
        assert!(l.with_layers(0).is_err() && l.with_layers(19).is_err());
        let (tokens, _, _) = l.vocab.as_ref().unwrap().synthesize().unwrap();
        assert_eq!(tokens.len(), 262_144);
        assert_eq!(tokens.iter().collect::<HashSet<_>>().len(), tokens.len());
        assert_eq!((tokens[2].as_str(), tokens[105].as_str(), tokens[106].as_str()), ("<bos>", "<start_of_turn>", "<end_of_turn>"));
    }

    #[test]
    fn hf_config_of_gemma3_270m() {
        let cfg = Gemma3Config {
            n_vocab: 262_144,
            n_embd: 640,
            n_layer: 18,
            n_ff: 2048,
            n_head: 4,
            n_head_kv: 1,
            head_dim: 256,
            rms_eps: 1e-6,
            rope_base_global: 1e6,
            rope_base_local: 1e4,
            sliding_window: 512,
            swa_pattern: 6,
            context_length: 32768,
            attn_scale: 1.0 / 16.0,
            layer_global: None,
            norm_offset: 0.0,
            causal: true,
        };
        let j = hf_config(&cfg, 2, 1, 0);
        let full: Vec<usize> = j["layer_types"].as_array().unwrap().iter().enumerate().filter(|(_, t)| *t == "full_attention").map(|(i, _)| i).collect();
        assert_eq!(full, vec![5, 11, 17]);
        assert_eq!(j["query_pre_attn_scalar"], 256);
        assert_eq!(j["rope_parameters"]["full_attention"]["rope_theta"], 1e6);
        let map = hf_tensor_map(&cfg);
        assert_eq!(map.len(), 2 + 18 * 13);
        assert_eq!(map.iter().filter(|m| m.3).count(), 1 + 18 * 6);
        assert!(map.iter().all(|(g, h, _, norm)| *norm == g.ends_with("norm.weight") && *norm == h.contains("norm")));
    }

    #[test]
    fn embedding_fixture_and_synthetic_tokenizer() {
        let l = FolderLayout::embeddinggemma_300m().unwrap();
        assert_eq!(l.safetensors["model.safetensors"].tensors.len(), 2 + 24 * 13);
        assert_eq!(l.files["config.json"]["hidden_size"], 768);
        assert_eq!(FolderLayout::from_json(&l.to_json()).unwrap(), l);
        let one = l.with_layers(1).unwrap();
        assert_eq!(one.safetensors["model.safetensors"].tensors.len(), 2 + 13);
        assert_eq!(one.files["config.json"]["layer_types"].as_array().unwrap().len(), 1);
        let json = synthetic_tokenizer_json(&l.tokenizer).unwrap();
        let tok = tg_tokenizer::HfTokenizer::from_json(&json.to_string()).unwrap();
        assert_eq!((tok.bos(), tok.eos()), (Some(2), Some(1)));
        let ids = tok.encode("a ab zzzzzzzz", true).unwrap();
        let vocab = &json["model"]["vocab"];
        let id = |w: &str| vocab[w].as_u64().unwrap() as u32;
        assert_eq!(ids, vec![2, id("a"), id("ab"), id("<unk>"), 1]);
    }

    #[test]
    fn gpt2_byte_table() {
        let t = gpt2_byte_chars();
        assert_eq!(t.len(), 256);
        assert_eq!(t.iter().map(|p| p.0).collect::<HashSet<_>>().len(), 256);
        assert_eq!(t.iter().map(|p| p.1).collect::<HashSet<_>>().len(), 256);
        // GPT-2's: '!' is id 0, a space is 'Ġ' (U+0120), a newline 'Ċ' (U+010A).
        assert_eq!(t[0], (b'!', '!'));
        assert!(t.contains(&(b' ', '\u{120}')) && t.contains(&(b'\n', '\u{10A}')));
    }

    #[test]
    fn tiny_models_load_and_tokenize() {
        let dir = std::env::temp_dir().join(format!("tg-synth-tiny-{}", std::process::id()));
        for m in TinyModel::ALL {
            assert_eq!(TinyModel::from_name(m.name()), Some(m));
            let path = dir.join(format!("{}.gguf", m.name()));
            let s = write_tiny(m, 3, &path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len() as u64, s.bytes);
            write_tiny(m, 3, &path).unwrap();
            assert!(std::fs::read(&path).unwrap() == bytes, "{}: same seed, different bytes", m.name());
            write_tiny(m, 4, &path).unwrap();
            assert!(std::fs::read(&path).unwrap() != bytes, "{}: another seed, same bytes", m.name());
            let f = GgufFile::open(&path).unwrap();
            let spec = m.spec();
            let cfg = crate::LlamaConfig::from_gguf(&f).unwrap();
            assert_eq!((cfg.arch, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_head_kv, cfg.head_dim), (spec.arch, 128, spec.n_layer, 4, spec.n_head_kv, spec.head_dim));
            assert_eq!(
                (cfg.tied_output, cfg.qk_norm, cfg.rope_freq_factors, cfg.sliding_window),
                (spec.tied_output, spec.qk_norm, spec.rope_factors.is_some(), spec.sliding_window)
            );
            assert_eq!(cfg.n_vocab, s.vocab);
            let tok = tg_tokenizer::Tokenizer::from_gguf(&f).unwrap();
            let ids = tok.encode("The capital of France is", true, true);
            assert!(ids.len() >= 5 && ids.len() <= 8, "{}: {ids:?}", m.name());
            assert_eq!(tok.decode(&ids, false).unwrap().trim_start(), "The capital of France is");
            // A merged piece is one token.
            assert!(ids.contains(&tok.token_id(if spec.vocab == TinyVocab::Spm { "\u{2581}capital" } else { "\u{120}capital" }).unwrap()));
        }
        let l3 = Llama3RopeFactors { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context: 64.0 }.divisors(32, 500_000.0);
        assert_eq!((l3.len(), l3[0], l3[1], l3[15]), (16, 1.0, 1.0, 8.0));
        assert!(l3[2] > 1.0 && l3[2] < 8.0, "{l3:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tensor_bytes_do_not_depend_on_threads() {
        let t = TensorEntry { name: "w".into(), dims: vec![256, 700], ty: "Q4_K".into() };
        let a = tensor_bytes(&t, 3, 9, 1).unwrap();
        assert_eq!(a, tensor_bytes(&t, 3, 9, 3).unwrap());
        assert_ne!(a, tensor_bytes(&t, 3, 10, 1).unwrap());
    }
}
