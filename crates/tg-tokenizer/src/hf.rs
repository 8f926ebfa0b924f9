//! Hugging Face `tokenizer.json` tokenizers, through the `tokenizers` crate.
//!
//! [`HfTokenizer`] is a thin wrapper: the `tokenizers` crate (the library
//! behind `tokenizers.Tokenizer` in Python and the "fast" tokenizers of
//! `transformers`) loads the document and encodes and decodes; the wrapper
//! adds per-call options, errors of this crate, checks of ids, and a refusal
//! of the settings that would make a single encoding change length or vary
//! from run to run.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;
use tokenizers::models::ModelWrapper;
use tokenizers::{Encoding, Model, PaddingStrategy, Token, Tokenizer};

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

/// A tokenizer loaded from a Hugging Face `tokenizer.json` document by the
/// `tokenizers` crate (0.23, pure-Rust build: `fancy-regex` for Regex
/// patterns), so every model, normalizer, pre-tokenizer, post-processor and
/// decoder type that `tokenizers` knows is supported, with its ids (checked
/// against the Python `tokenizers` 0.23.3 on EmbeddingGemma-300M's tokenizer).
///
/// What the wrapper adds:
///
/// * per-call [`EncodeOptions`] (`parse_special: false` uses a copy of the
///   tokenizer with `encode_special_tokens` set, made on first use);
/// * [`decode`](Self::decode) refuses unknown ids (`tokenizers` drops them);
/// * documents whose settings change a single encoding's length or make it
///   random are refused at load with [`TokenizerError::HfUnsupported`]:
///   `truncation`, padding other than `BatchLongest` or with
///   `pad_to_multiple_of`, BPE `dropout`. A `TemplateProcessing` that names
///   a special token it does not list, or a single template that uses `$B`,
///   is refused with [`TokenizerError::HfInvalid`] (`tokenizers` would
///   panic on the first encode);
/// * errors and panics of `tokenizers` come back as [`TokenizerError`]s.
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
pub struct HfTokenizer {
    inner: Tokenizer,
    /// `inner` with `encode_special_tokens` set, for `parse_special: false`.
    plain_specials: OnceLock<Tokenizer>,
    /// Text of every id, for [`token_text`](Self::token_text) (`tokenizers`
    /// hands out owned strings only); built on first use.
    texts: OnceLock<TokenTexts>,
    /// Added tokens as (id, special), sorted by id.
    added: Vec<(u32, bool)>,
    bos: Option<u32>,
    eos: Option<u32>,
    pad: Option<u32>,
    unk: Option<u32>,
    merge_count: OnceLock<usize>,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("added_tokens", &self.added.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("pad", &self.pad)
            .field("unk", &self.unk)
            .finish_non_exhaustive()
    }
}

/// Id → token text: all texts in one string, ids sorted.
struct TokenTexts {
    text: String,
    /// (id, end of its text in `text`); an entry's text starts where the previous one ends.
    ends: Vec<(u32, usize)>,
}

impl TokenTexts {
    /// The text `tokenizers` decodes each id to: an added token's content,
    /// else the model vocabulary's entry.
    fn new(tok: &Tokenizer) -> TokenTexts {
        let model = tok.get_model();
        let mut vocab: Vec<(u32, String)> = model
            .get_vocab()
            .into_iter()
            .map(|(t, id)| (id, t))
            .collect();
        vocab.sort_unstable_by_key(|&(id, _)| id);
        let mut entries: Vec<(u32, String)> = Vec::with_capacity(vocab.len());
        for (id, text) in vocab {
            match entries.last_mut() {
                // Two texts with one id (a malformed vocabulary): the one it decodes to.
                Some(last) if last.0 == id => {
                    if let Some(t) = model.id_to_token(id) {
                        last.1 = t;
                    }
                }
                _ => entries.push((id, text)),
            }
        }
        for (id, added) in tok.get_added_tokens_decoder() {
            match entries.binary_search_by_key(&id, |&(x, _)| x) {
                Ok(i) => entries[i].1 = added.content,
                Err(_) => entries.push((id, added.content)),
            }
        }
        entries.sort_unstable_by_key(|&(id, _)| id);
        let mut text = String::with_capacity(entries.iter().map(|(_, t)| t.len()).sum());
        let ends = entries
            .into_iter()
            .map(|(id, t)| {
                text.push_str(&t);
                (id, text.len())
            })
            .collect();
        TokenTexts { text, ends }
    }

    fn get(&self, id: u32) -> Option<&str> {
        // Ids are usually dense from 0, so the entry at index `id` is it.
        let i = match self.ends.get(id as usize) {
            Some(&(x, _)) if x == id => id as usize,
            _ => self.ends.binary_search_by_key(&id, |&(x, _)| x).ok()?,
        };
        let start = if i == 0 { 0 } else { self.ends[i - 1].1 };
        Some(&self.text[start..self.ends[i].1])
    }

    /// One more than the largest id.
    fn id_limit(&self) -> usize {
        self.ends.last().map_or(0, |&(id, _)| id as usize + 1)
    }
}

fn unsupported(component: &str, detail: impl Into<String>) -> TokenizerError {
    TokenizerError::HfUnsupported {
        component: component.to_string(),
        detail: detail.into(),
    }
}

/// An error of the `tokenizers` crate during `operation`.
fn library_error(operation: &'static str, e: tokenizers::Error) -> TokenizerError {
    TokenizerError::HfLibrary {
        operation,
        message: e.to_string(),
    }
}

/// Runs `f`, turning a panic inside `tokenizers` into an error: the document
/// and the texts are user input, and some inputs make the library panic.
fn no_panic<T>(operation: &'static str, f: impl FnOnce() -> T) -> Result<T, TokenizerError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload: Box<dyn Any + Send>| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        TokenizerError::HfLibrary {
            operation,
            message: format!("the tokenizers library panicked: {what}"),
        }
    })
}

impl HfTokenizer {
    /// Loads a `tokenizer.json` file. Errors name the file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<HfTokenizer, TokenizerError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        HfTokenizer::from_bytes(&bytes).map_err(|e| TokenizerError::HfFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    }

    /// Loads a `tokenizer.json` document from a string.
    pub fn from_json(json: &str) -> Result<HfTokenizer, TokenizerError> {
        HfTokenizer::from_bytes(json.as_bytes())
    }

    /// Loads a `tokenizer.json` document from UTF-8 bytes.
    pub fn from_bytes(json: &[u8]) -> Result<HfTokenizer, TokenizerError> {
        let inner =
            no_panic("load tokenizer.json", || Tokenizer::from_bytes(json))?.map_err(|e| {
                match e.downcast::<serde_json::Error>() {
                    Ok(e) => TokenizerError::HfJson(*e),
                    Err(e) => library_error("load tokenizer.json", e),
                }
            })?;
        HfTokenizer::new(inner)
    }

    fn new(inner: Tokenizer) -> Result<HfTokenizer, TokenizerError> {
        if inner.get_truncation().is_some() {
            return Err(unsupported(
                "truncation",
                "truncation settings (null expected; truncate the ids yourself)",
            ));
        }
        if let Some(p) = inner.get_padding() {
            if let PaddingStrategy::Fixed(n) = p.strategy {
                return Err(unsupported(
                    "padding",
                    format!(
                        "padding strategy Fixed({n}) (only BatchLongest, which leaves a single \
                         encoding unchanged)"
                    ),
                ));
            }
            if let Some(m) = p.pad_to_multiple_of {
                return Err(unsupported(
                    "padding",
                    format!("pad_to_multiple_of {m} (it pads single encodings)"),
                ));
            }
        }
        if let ModelWrapper::BPE(b) = inner.get_model() {
            if let Some(p) = b.dropout.filter(|&p| p != 0.0) {
                return Err(unsupported(
                    "model.dropout",
                    format!("dropout {p} (BPE dropout makes encoding random; null expected)"),
                ));
            }
        }
        if let Some(pp) = inner.get_post_processor() {
            let v = serde_json::to_value(pp).map_err(|e| {
                TokenizerError::HfInvalid(format!("post_processor cannot be inspected: {e}"))
            })?;
            check_templates(&v, "post_processor")?;
        }

        let added_tokens = inner.get_added_tokens_decoder();
        let mut added: Vec<(u32, bool)> = added_tokens
            .iter()
            .map(|(&id, t)| (id, t.special))
            .collect();
        added.sort_unstable();
        let (bos, eos) = around_single(&inner)?;
        let unk = match inner.get_model() {
            ModelWrapper::BPE(m) => m.unk_token.as_deref().and_then(|t| m.token_to_id(t)),
            ModelWrapper::WordPiece(m) => m.token_to_id(&m.unk_token),
            ModelWrapper::WordLevel(m) => m.token_to_id(&m.unk_token),
            // `tokenizers` does not expose a Unigram model's unk_id.
            ModelWrapper::Unigram(_) => None,
        };
        let mut tok = HfTokenizer {
            pad: inner.get_padding().map(|p| p.pad_id),
            inner,
            plain_specials: OnceLock::new(),
            texts: OnceLock::new(),
            added,
            bos,
            eos,
            unk,
            merge_count: OnceLock::new(),
        };
        if tok.pad.is_none() {
            tok.pad = ["<pad>", "[PAD]"]
                .iter()
                .filter_map(|c| tok.inner.token_to_id(c))
                .find(|&id| tok.is_special(id));
        }
        Ok(tok)
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
        let tok = if options.parse_special {
            &self.inner
        } else {
            self.plain_specials.get_or_init(|| {
                let mut t = self.inner.clone();
                t.set_encode_special_tokens(true);
                t
            })
        };
        let encoding = no_panic("encode", || {
            tok.encode_fast(text, options.add_special_tokens)
        })?
        .map_err(|e| library_error("encode", e))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Encodes a pair of sequences (e.g. query and passage for a
    /// cross-encoder), matching special tokens written in them; with
    /// `add_special_tokens` the post-processor's `pair` template joins them,
    /// otherwise (or without a post-processor) they are concatenated.
    pub fn encode_pair(
        &self,
        a: &str,
        b: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let encoding = no_panic("encode a pair", || {
            self.inner.encode_fast((a, b), add_special_tokens)
        })?
        .map_err(|e| library_error("encode a pair", e))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Decodes ids to text; with `skip_special_tokens`, special added tokens
    /// are left out. Same as `tokenizer.decode(ids, skip_special_tokens=...)`
    /// in `tokenizers`, except that an unknown id is an error here
    /// (`tokenizers` silently drops it).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        if let Some(&id) = ids.iter().find(|&&id| self.inner.id_to_token(id).is_none()) {
            return Err(TokenizerError::InvalidTokenId {
                id,
                vocab_size: self.id_limit(),
            });
        }
        no_panic("decode", || self.inner.decode(ids, skip_special_tokens))?
            .map_err(|e| library_error("decode", e))
    }

    /// The id of a token text: an added token's content, else a model
    /// vocabulary entry (as `token_to_id` in `tokenizers`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// The text of a token id (an added token first, else the model
    /// vocabulary), or `None` for an unknown id.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts().get(id)
    }

    fn texts(&self) -> &TokenTexts {
        self.texts.get_or_init(|| TokenTexts::new(&self.inner))
    }

    fn added_entry(&self, id: u32) -> Option<bool> {
        self.added
            .binary_search_by_key(&id, |&(x, _)| x)
            .ok()
            .map(|i| self.added[i].1)
    }

    /// Whether `id` is a special added token (left out by
    /// `decode(.., skip_special_tokens = true)`).
    pub fn is_special(&self, id: u32) -> bool {
        self.added_entry(id) == Some(true)
    }

    /// Whether `id` is an added token.
    pub fn is_added(&self, id: u32) -> bool {
        self.added_entry(id).is_some()
    }

    /// Number of entries of the model vocabulary (`get_vocab_size(False)` in
    /// `tokenizers`; 262,144 for EmbeddingGemma-300M).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(false)
    }

    /// Number of distinct token texts including added tokens that are not in
    /// the model vocabulary (`get_vocab_size(True)`; 262,145 for EmbeddingGemma-300M).
    pub fn vocab_size_with_added_tokens(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// One more than the largest id this tokenizer can produce or decode
    /// (model vocabulary and added tokens).
    pub fn id_limit(&self) -> usize {
        self.texts().id_limit()
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

    /// The special token the single-sequence post-processing puts before the
    /// text (`<bos>` for Gemma), if there is exactly one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The special token the single-sequence post-processing puts after the
    /// text (`<eos>` for Gemma), if there is exactly one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The padding id: `padding.pad_id` when the document configures padding,
    /// else the special added token `<pad>` or `[PAD]` if there is one.
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    /// The model's unknown token id, if it has one (BPE, WordPiece and
    /// WordLevel models; `None` for Unigram, whose `unk_id` `tokenizers`
    /// does not expose).
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// Number of added tokens (distinct ids).
    pub fn added_token_count(&self) -> usize {
        self.added.len()
    }

    /// Number of BPE merges (distinct pairs; 0 for other models). Computed
    /// on the first call by serializing the model (`tokenizers` does not
    /// expose the count), which takes a while for a large vocabulary.
    pub fn merge_count(&self) -> usize {
        #[derive(serde::Deserialize)]
        struct Merges {
            merges: Vec<serde::de::IgnoredAny>,
        }
        *self
            .merge_count
            .get_or_init(|| match self.inner.get_model() {
                ModelWrapper::BPE(m) => serde_json::to_vec(m)
                    .ok()
                    .and_then(|v| serde_json::from_slice::<Merges>(&v).ok())
                    .map_or(0, |m| m.merges.len()),
                _ => 0,
            })
    }
}

/// Checks every `TemplateProcessing` in a serialized post-processor (nested
/// in `Sequence`s too): the special tokens its templates name are listed in
/// `special_tokens`, and the single template does not use `$B`. `tokenizers`
/// loads such templates but panics when it applies them.
fn check_templates(v: &Value, path: &str) -> Result<(), TokenizerError> {
    match v.get("type").and_then(Value::as_str) {
        Some("Sequence") => {
            let processors = v.get("processors").and_then(Value::as_array);
            for (i, p) in processors.into_iter().flatten().enumerate() {
                check_templates(p, &format!("{path}.processors[{i}]"))?;
            }
        }
        Some("TemplateProcessing") => {
            let specials = v.get("special_tokens").and_then(Value::as_object);
            for key in ["single", "pair"] {
                let pieces = v.get(key).and_then(Value::as_array);
                for (i, piece) in pieces.into_iter().flatten().enumerate() {
                    if let Some(name) = piece.pointer("/SpecialToken/id").and_then(Value::as_str) {
                        if !specials.is_some_and(|s| s.contains_key(name)) {
                            return Err(TokenizerError::HfInvalid(format!(
                                "{path}.{key}[{i}]: special token `{name}` is not listed in \
                                 {path}.special_tokens"
                            )));
                        }
                    }
                    let sequence = piece.pointer("/Sequence/id").and_then(Value::as_str);
                    if key == "single" && sequence == Some("B") {
                        return Err(TokenizerError::HfInvalid(format!(
                            "{path}.single[{i}]: the single template uses the second sequence $B"
                        )));
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The special tokens that single-sequence post-processing puts directly
/// around the text, when there is exactly one on that side: found by
/// post-processing a one-token stand-in sequence.
fn around_single(tok: &Tokenizer) -> Result<(Option<u32>, Option<u32>), TokenizerError> {
    const STAND_IN: u32 = u32::MAX;
    let probe = Encoding::from_tokens(vec![Token::new(STAND_IN, String::new(), (0, 0))], 0);
    let out = no_panic("apply the post-processor", || {
        tok.post_process(probe, None, true)
    })?
    .map_err(|e| library_error("apply the post-processor", e))?;
    let ids = out.get_ids();
    let Some(at) = ids.iter().position(|&id| id == STAND_IN) else {
        return Ok((None, None));
    };
    let bos = (at == 1).then(|| ids[0]);
    let eos = (ids.len() == at + 2).then(|| ids[at + 1]);
    Ok((bos, eos))
}
