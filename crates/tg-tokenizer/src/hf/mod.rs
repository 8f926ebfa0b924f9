//! Hugging Face `tokenizer.json` tokenizers with a BPE model.
//!
//! [`HfTokenizer`] reproduces the `tokenizers` crate (the library behind
//! `tokenizers.Tokenizer` in Python and the "fast" tokenizers of
//! `transformers`) for the component types listed on the struct, and refuses
//! to load a document that uses anything else.

mod added;
mod bpe;
mod decoder;
mod json;
mod load;
mod normalizer;
mod post;
mod pretok;
mod vocab;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::path::Path;

use serde_json::Value;

use self::added::{AddedVocab, Split};
use self::bpe::{Bpe, BpeOptions};
use self::decoder::Decoder;
use self::json::Obj;
use self::load::{RawFile, RawVocab};
use self::normalizer::Normalizer;
use self::post::Template;
use self::pretok::{Piece, PreTokenizer};
use crate::TokenizerError;

/// Options of [`HfTokenizer::encode_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Apply the post-processor's template (e.g. `<bos> … <eos>`), like
    /// `add_special_tokens=True` in `tokenizers`.
    pub add_special_tokens: bool,
    /// Match *special* added tokens written in the text (`"<bos>"` in the
    /// input becomes the `<bos>` id). With `false` their text is tokenized
    /// like any other text, as with `tokenizer.encode_special_tokens = True`
    /// in `tokenizers` (`split_special_tokens=True` in `transformers`).
    /// Non-special added tokens are matched either way.
    pub parse_special: bool,
}

impl Default for EncodeOptions {
    /// `add_special_tokens: true, parse_special: true` (the `tokenizers` defaults).
    fn default() -> Self {
        EncodeOptions {
            add_special_tokens: true,
            parse_special: true,
        }
    }
}

/// A tokenizer loaded from a Hugging Face `tokenizer.json` document,
/// producing the same ids as the `tokenizers` library (checked against
/// `tokenizers` 0.23.3 on EmbeddingGemma-300M's tokenizer).
///
/// Encoding runs the `tokenizers` pipeline:
///
/// 1. **Added tokens** (`added_tokens`) are found in the raw input,
///    leftmost-longest, honouring `single_word`, `lstrip` and `rstrip`; tokens
///    with `normalized: true` are instead matched after normalization, in
///    their normalized form. Special ones can be treated as plain text
///    ([`EncodeOptions::parse_special`]).
/// 2. The remaining text is **normalized**: `Sequence`, `Replace` (String
///    pattern), `Prepend`, `NFC`/`NFD`/`NFKC`/`NFKD`, `Lowercase`, `Strip`.
/// 3. **Pre-tokenization** splits it into words: `Sequence`, `Split` (String
///    pattern, any behavior, `invert`), `Metaspace`.
/// 4. The **BPE model** encodes each word: merges (as `["a", "b"]` pairs or
///    legacy `"a b"` strings) applied by rank, `byte_fallback` to `<0xNN>`
///    tokens, `unk_token` with `fuse_unk`, `ignore_merges`,
///    `continuing_subword_prefix`, `end_of_word_suffix`. `dropout` must be
///    null (or 0).
/// 5. With special tokens requested, the **post-processor**
///    (`TemplateProcessing`) wraps the ids.
///
/// Decoding maps ids to token texts (dropping special added tokens on
/// request) and runs the **decoder**: `Sequence`, `Replace` (String pattern),
/// `ByteFallback`, `Fuse`, `Strip`, `Metaspace`; without a decoder the texts
/// are joined with spaces.
///
/// Anything else — other component types, Regex patterns (Oniguruma syntax),
/// `truncation`, padding that changes a single encoding — is rejected at
/// load with [`TokenizerError::HfUnsupported`] naming the component.
///
/// **Ids beyond the model vocabulary.** Like `tokenizers`, an added token
/// whose text is not in `model.vocab` gets the next id after it, so
/// [`encode`](Self::encode) can return ids `>= vocab_size()`.
/// EmbeddingGemma-300M has one: `<image_soft_token>` is id 262144, one past
/// the 262,144-row embedding table. Such files load; code that indexes an
/// embedding table must check the ids, e.g. with
/// [`check_ids_below`](Self::check_ids_below).
///
/// Built once; encoding and decoding take `&self` and can run from several
/// threads at once.
///
/// ```no_run
/// use tg_tokenizer::HfTokenizer;
/// # fn main() -> Result<(), tg_tokenizer::TokenizerError> {
/// let tok = HfTokenizer::from_file("embeddinggemma-300m/tokenizer.json")?;
/// let ids = tok.encode("task: search result | query: Which planet?", true)?;
/// assert_eq!(ids.first().copied(), tok.bos());
/// HfTokenizer::check_ids_below(&ids, 262_144)?; // rows of the embedding table
/// let text = tok.decode(&ids, true)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct HfTokenizer {
    bpe: Bpe,
    added: AddedVocab,
    normalizer: Option<Normalizer>,
    pre_tokenizer: Option<PreTokenizer>,
    template: Option<Template>,
    decoder: Option<Decoder>,
    pad: Option<u32>,
}

fn unsupported(component: &str, detail: impl Into<String>) -> TokenizerError {
    TokenizerError::HfUnsupported {
        component: component.to_string(),
        detail: detail.into(),
    }
}

impl HfTokenizer {
    /// Loads a `tokenizer.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<HfTokenizer, TokenizerError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        HfTokenizer::from_bytes(&bytes)
    }

    /// Loads a `tokenizer.json` document from a string.
    pub fn from_json(json: &str) -> Result<HfTokenizer, TokenizerError> {
        HfTokenizer::from_bytes(json.as_bytes())
    }

    /// Loads a `tokenizer.json` document from UTF-8 bytes.
    pub fn from_bytes(json: &[u8]) -> Result<HfTokenizer, TokenizerError> {
        let raw = load::parse(json)?;
        HfTokenizer::from_raw(raw)
    }

    fn from_raw(raw: RawFile) -> Result<HfTokenizer, TokenizerError> {
        if let Some(v) = &raw.version {
            if v != "1.0" {
                return Err(unsupported("version", format!("`{v}` (expected \"1.0\")")));
            }
        }
        if raw.truncation.is_some() {
            return Err(unsupported(
                "truncation",
                "truncation settings (null expected; truncate the ids yourself)",
            ));
        }
        let pad = match &raw.padding {
            Some(p) => parse_padding(p)?,
            None => None,
        };

        let normalizer = raw
            .normalizer
            .as_ref()
            .map(|v| Normalizer::from_json(v, "normalizer"))
            .transpose()?;
        let pre_tokenizer = raw
            .pre_tokenizer
            .as_ref()
            .map(|v| PreTokenizer::from_json(v, "pre_tokenizer"))
            .transpose()?;
        let template = raw
            .post_processor
            .as_ref()
            .map(|v| Template::from_json(v, "post_processor"))
            .transpose()?;
        let decoder = raw
            .decoder
            .as_ref()
            .map(|v| Decoder::from_json(v, "decoder"))
            .transpose()?;

        let model = raw
            .model
            .ok_or_else(|| TokenizerError::HfInvalid("missing field `model`".to_string()))?;
        match model.ty.as_deref() {
            Some("BPE") => {}
            None if model.merges.is_some() => {}
            None => {
                return Err(unsupported(
                    "model",
                    "a model without `type` and without `merges` (only BPE is implemented)",
                ))
            }
            Some(other) => {
                return Err(unsupported(
                    "model",
                    format!("model type `{other}` (only BPE is implemented)"),
                ))
            }
        }
        if let Some(p) = model.dropout {
            if p != 0.0 {
                return Err(unsupported(
                    "model.dropout",
                    format!("dropout {p} (BPE dropout makes encoding random; null expected)"),
                ));
            }
        }
        let opt_string =
            |v: &Option<Value>, name: &str| -> Result<Option<String>, TokenizerError> {
                match v {
                    None => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(TokenizerError::HfInvalid(format!(
                        "model.{name} must be a string or null"
                    ))),
                }
            };
        let opts = BpeOptions {
            unk_token: opt_string(&model.unk_token, "unk_token")?,
            continuing_subword_prefix: opt_string(
                &model.continuing_subword_prefix,
                "continuing_subword_prefix",
            )?,
            end_of_word_suffix: model.end_of_word_suffix,
            fuse_unk: model.fuse_unk.unwrap_or(false),
            byte_fallback: model.byte_fallback.unwrap_or(false),
            ignore_merges: model.ignore_merges.unwrap_or(false),
        };
        let vocab = match model.vocab {
            Some(RawVocab::Map(b)) => b.build()?,
            Some(RawVocab::NotAMap) => {
                return Err(TokenizerError::HfInvalid(
                    "model.vocab must be an object mapping token text to id".to_string(),
                ))
            }
            None => {
                return Err(TokenizerError::HfInvalid(
                    "missing field `model.vocab`".to_string(),
                ))
            }
        };
        let merges = model
            .merges
            .ok_or_else(|| TokenizerError::HfInvalid("missing field `model.merges`".to_string()))?;
        let bpe = Bpe::new(vocab, merges.pairs(), opts)?;
        let added = AddedVocab::new(
            raw.added_tokens.unwrap_or_default(),
            bpe.vocab(),
            normalizer.as_ref(),
        )?;
        Ok(HfTokenizer {
            bpe,
            added,
            normalizer,
            pre_tokenizer,
            template,
            decoder,
            pad,
        })
    }

    /// Encodes `text`, matching special tokens written in it; with
    /// `add_special_tokens` the post-processor's template is applied.
    /// Same as `tokenizer.encode(text, add_special_tokens=...).ids` in `tokenizers`.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        self.encode_with(
            text,
            EncodeOptions {
                add_special_tokens,
                parse_special: true,
            },
        )
    }

    /// Encodes `text` with explicit [`EncodeOptions`].
    pub fn encode_with(
        &self,
        text: &str,
        options: EncodeOptions,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 4);
        self.encode_sequence(text, options.parse_special, &mut ids)?;
        match &self.template {
            Some(t) if options.add_special_tokens => Ok(t.apply_single(&ids)),
            _ => Ok(ids),
        }
    }

    /// Encodes a pair of sequences (e.g. query and passage for a
    /// cross-encoder); with `add_special_tokens` the post-processor's `pair`
    /// template joins them, otherwise (or without a post-processor) they are
    /// concatenated.
    pub fn encode_pair(
        &self,
        a: &str,
        b: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut ids_a = Vec::new();
        self.encode_sequence(a, true, &mut ids_a)?;
        let mut ids_b = Vec::new();
        self.encode_sequence(b, true, &mut ids_b)?;
        match &self.template {
            Some(t) if add_special_tokens => Ok(t.apply_pair(&ids_a, &ids_b)),
            _ => {
                ids_a.extend_from_slice(&ids_b);
                Ok(ids_a)
            }
        }
    }

    fn encode_sequence(
        &self,
        text: &str,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let mut splits = Vec::new();
        if self.added.has_raw() {
            self.added.split_raw(text, parse_special, &mut splits);
        } else if !text.is_empty() {
            splits.push(Split::Text(0, text.len()));
        }
        let mut norm_splits = Vec::new();
        let mut pieces = Vec::new();
        for split in splits {
            let (start, end) = match split {
                Split::Token(id, ..) => {
                    out.push(id);
                    continue;
                }
                Split::Text(start, end) => (start, end),
            };
            let fragment = &text[start..end];
            let normalized: Cow<'_, str> = match &self.normalizer {
                Some(n) => Cow::Owned(n.normalize(fragment)),
                None => Cow::Borrowed(fragment),
            };
            norm_splits.clear();
            if self.added.has_normalized() {
                self.added
                    .split_normalized(&normalized, parse_special, &mut norm_splits);
            } else if !normalized.is_empty() {
                norm_splits.push(Split::Text(0, normalized.len()));
            }
            for &ns in &norm_splits {
                let (s, e) = match ns {
                    Split::Token(id, ..) => {
                        out.push(id);
                        continue;
                    }
                    Split::Text(s, e) => (s, e),
                };
                let Some(pt) = &self.pre_tokenizer else {
                    self.bpe.tokenize(&normalized[s..e], out)?;
                    continue;
                };
                pieces.clear();
                pieces.push(Piece {
                    text: normalized[s..e].to_string(),
                    first: start == 0 && s == 0,
                });
                pt.pre_tokenize(&mut pieces);
                for p in &pieces {
                    self.bpe.tokenize(&p.text, out)?;
                }
            }
        }
        Ok(())
    }

    /// Decodes ids to text; with `skip_special_tokens`, special added tokens
    /// are left out. Same as `tokenizer.decode(ids, skip_special_tokens=...)`
    /// in `tokenizers`, except that an unknown id is an error here
    /// (`tokenizers` silently drops it).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        let mut tokens = Vec::with_capacity(ids.len());
        for &id in ids {
            let text = self.token_text(id).ok_or(TokenizerError::InvalidTokenId {
                id,
                vocab_size: self.id_limit(),
            })?;
            if skip_special_tokens && self.added.is_special_text(text) {
                continue;
            }
            tokens.push(text.to_string());
        }
        Ok(match &self.decoder {
            Some(d) => d.decode_chain(tokens).concat(),
            None => tokens.join(" "),
        })
    }

    /// The id of a token text: an added token's content, else a model
    /// vocabulary entry (as `token_to_id` in `tokenizers`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.added.id(text).or_else(|| self.bpe.vocab().id(text))
    }

    /// The text of a token id (an added token first, else the model
    /// vocabulary), or `None` for an unknown id.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        match self.added.get(id) {
            Some(t) => Some(t.decode_text()),
            None => self.bpe.vocab().text(id),
        }
    }

    /// Whether `id` is a special added token (left out by
    /// `decode(.., skip_special_tokens = true)`).
    pub fn is_special(&self, id: u32) -> bool {
        self.added.get(id).is_some_and(|t| t.special)
    }

    /// Whether `id` is an added token.
    pub fn is_added(&self, id: u32) -> bool {
        self.added.get(id).is_some()
    }

    /// Number of entries of the model vocabulary (`get_vocab_size(False)` in
    /// `tokenizers`; 262,144 for EmbeddingGemma-300M).
    pub fn vocab_size(&self) -> usize {
        self.bpe.vocab().len()
    }

    /// Number of distinct token texts including added tokens that are not in
    /// the model vocabulary (`get_vocab_size(True)`; 262,145 for EmbeddingGemma-300M).
    pub fn vocab_size_with_added_tokens(&self) -> usize {
        let extra = self
            .added
            .contents()
            .filter(|c| self.bpe.vocab().id(c).is_none())
            .count();
        self.vocab_size() + extra
    }

    /// One more than the largest id this tokenizer can produce or decode
    /// (model vocabulary and added tokens).
    pub fn id_limit(&self) -> usize {
        let added_max = self
            .added
            .iter()
            .map(|t| t.id as usize + 1)
            .max()
            .unwrap_or(0);
        self.bpe.vocab().id_limit().max(added_max)
    }

    /// Checks that every id is below `limit` (e.g. the number of rows of a
    /// model's embedding table), naming the first one that is not.
    pub fn check_ids_below(ids: &[u32], limit: usize) -> Result<(), TokenizerError> {
        match ids.iter().find(|&&id| id as usize >= limit) {
            Some(&id) => Err(TokenizerError::InvalidTokenId {
                id,
                vocab_size: limit,
            }),
            None => Ok(()),
        }
    }

    /// The special token the single-sequence template puts before the text
    /// (`<bos>` for Gemma), if there is exactly one.
    pub fn bos(&self) -> Option<u32> {
        self.template.as_ref().and_then(|t| t.around_single().0)
    }

    /// The special token the single-sequence template puts after the text
    /// (`<eos>` for Gemma), if there is exactly one.
    pub fn eos(&self) -> Option<u32> {
        self.template.as_ref().and_then(|t| t.around_single().1)
    }

    /// The padding id: `padding.pad_id` when the document configures padding,
    /// else the special added token `<pad>` or `[PAD]` if there is one.
    pub fn pad(&self) -> Option<u32> {
        self.pad.or_else(|| {
            ["<pad>", "[PAD]"]
                .iter()
                .filter_map(|c| self.added.id(c))
                .find(|&id| self.is_special(id))
        })
    }

    /// The model's unknown token id, if it has one.
    pub fn unk(&self) -> Option<u32> {
        self.bpe.unk_id()
    }

    /// Number of added tokens.
    pub fn added_token_count(&self) -> usize {
        self.added.len()
    }

    /// Number of BPE merges (distinct pairs).
    pub fn merge_count(&self) -> usize {
        self.bpe.merge_count()
    }
}

/// `padding`: only settings that leave a single encoding unchanged are
/// accepted (they matter for batches, which this crate does not build).
fn parse_padding(v: &Value) -> Result<Option<u32>, TokenizerError> {
    let o = Obj::new(v, "padding")?;
    match o.get("strategy") {
        None => {}
        Some(Value::String(s)) if s == "BatchLongest" => {}
        Some(other) => {
            return Err(o.unsupported(format!(
                "padding strategy {other} (only BatchLongest, which leaves a single encoding \
                 unchanged)"
            )))
        }
    }
    if o.get("pad_to_multiple_of").is_some() {
        return Err(o.unsupported("pad_to_multiple_of (it pads single encodings)"));
    }
    match o.get("pad_id") {
        None => Ok(None),
        Some(id) => id
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| o.invalid("`pad_id` must be a u32")),
    }
}
