//! The [`Tokenizer`]: construction, encoding and decoding.

use crate::bpe::{self, BpeEncoder};
use crate::compat;
use crate::index::{Insert, TextIndex};
use crate::special::{Fragment, SpecialMatcher};
use crate::spm::SpmSession;
use crate::{TokenType, TokenizerError, Vocab};

/// The escaped form of a space inside SentencePiece pieces.
pub(crate) const SPACE_MARK: char = '\u{2581}';

/// Token attribute bits (llama.cpp derives these from the token type and a
/// few token texts).
pub(crate) mod attr {
    pub const UNKNOWN: u8 = 1 << 0;
    pub const UNUSED: u8 = 1 << 1;
    pub const NORMAL: u8 = 1 << 2;
    pub const CONTROL: u8 = 1 << 3;
    pub const USER_DEFINED: u8 = 1 << 4;
    pub const BYTE: u8 = 1 << 5;
    /// Matched and rendered only on request.
    pub const SPECIAL: u8 = UNKNOWN | CONTROL;
}

/// Which tokenization algorithm a [`Tokenizer`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    /// SentencePiece with byte fallback (`tokenizer.ggml.model = "llama"`:
    /// Gemma, Llama 2, ...): `▁` stands for a space, merges by score.
    Spm,
    /// Byte-level BPE (`"gpt2"`: Qwen 2, Llama 3, GPT-2, ...): token texts
    /// in GPT-2's byte-level alphabet, regex pre-tokenizer, ranked merges.
    Bpe,
}

/// What differs between the two models.
enum Model {
    /// Token emitted for each byte that is not part of a vocabulary piece.
    Spm { byte_tokens: Box<[u32; 256]> },
    Bpe(Box<BpeEncoder>),
}

/// A tokenizer compatible with llama.cpp's: SentencePiece
/// ([`ModelKind::Spm`]) or byte-level BPE ([`ModelKind::Bpe`]), chosen by
/// the vocabulary (`tokenizer.ggml.model`).
///
/// Built once from a [`Vocab`] or a GGUF file; encoding and decoding take
/// `&self` and can run from several threads at once.
pub struct Tokenizer {
    /// Token texts and the text -> id map over all tokens, whatever their type.
    texts: TextIndex,
    scores: Vec<f32>,
    types: Vec<TokenType>,
    attrs: Vec<u8>,
    /// Decoded bytes of every token (as rendered with `render_special`),
    /// concatenated; token `i` is `pieces[piece_offsets[i]..piece_offsets[i + 1]]`.
    pieces: Vec<u8>,
    piece_offsets: Vec<u32>,
    model: Model,
    special: SpecialMatcher,
    bos: u32,
    eos: u32,
    unk: Option<u32>,
    pad: Option<u32>,
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.model_kind())
            .field("pre_tokenizer", &self.pre_tokenizer())
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("unk", &self.unk)
            .field("pad", &self.pad)
            .field("eog", &self.eog)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("add_space_prefix", &self.add_space_prefix)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Builds a tokenizer, validating the vocabulary (array lengths, token
    /// types, scores, special ids, duplicate texts, byte tokens; for BPE the
    /// pre-tokenizer name and every merge).
    pub fn from_vocab(v: Vocab) -> Result<Tokenizer, TokenizerError> {
        let types = v.validate()?;
        let n = v.tokens.len();

        let total: usize = v.tokens.iter().map(|t| t.len()).sum();
        let mut texts = TextIndex::with_capacity(n, total);
        for (i, text) in v.tokens.iter().enumerate() {
            // llama.cpp gives empty entries a placeholder text.
            let placeholder;
            let text = if text.is_empty() {
                placeholder = format!("[EMPTY_{i}]");
                &placeholder
            } else {
                text
            };
            if let Insert::Duplicate(first) = texts.push(text) {
                return Err(TokenizerError::DuplicateToken {
                    text: text.clone(),
                    first,
                    second: i as u32,
                });
            }
        }
        drop(v.tokens);
        // The BPE part and its pre-tokenizer; `None` for SentencePiece.
        let bpe = match &v.bpe {
            Some(b) => {
                let pre = bpe::find_pre(&b.pre).ok_or_else(|| TokenizerError::UnknownPreTokenizer {
                    key: crate::keys::PRE,
                    value: b.pre.clone(),
                    known: bpe::known_pre_names(),
                })?;
                Some((b, pre))
            }
            None => None,
        };

        let mut attrs: Vec<u8> = types
            .iter()
            .map(|ty| match ty {
                TokenType::Undefined => 0,
                TokenType::Normal => attr::NORMAL,
                TokenType::Unknown => attr::UNKNOWN,
                TokenType::Control => attr::CONTROL,
                TokenType::UserDefined => attr::USER_DEFINED,
                TokenType::Unused => attr::UNUSED,
                TokenType::Byte => attr::BYTE,
            })
            .collect();
        let mut eog = vec![v.eos];
        eog.extend(v.eot);
        eog.extend(v.eom);
        compat::apply_text_rules(|t| texts.lookup(t.as_bytes()), &mut attrs, &mut eog);
        eog.sort_unstable();
        eog.dedup();

        let mut pieces = Vec::with_capacity(n * 4);
        let mut piece_offsets = Vec::with_capacity(n + 1);
        piece_offsets.push(0u32);
        for (i, &a) in attrs.iter().enumerate() {
            let text = texts.get(i as u32);
            if a & (attr::SPECIAL | attr::USER_DEFINED) != 0 {
                pieces.extend_from_slice(text.as_bytes());
            } else if a & attr::NORMAL != 0 {
                if bpe.is_some() {
                    bpe::decode_token_text(text, &mut pieces);
                } else {
                    let mut buf = [0u8; 4];
                    for ch in text.chars() {
                        let ch = if ch == SPACE_MARK { ' ' } else { ch };
                        pieces.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    }
                }
            } else if a & attr::BYTE != 0 {
                let byte = parse_byte_token(text).ok_or_else(|| TokenizerError::BadByteToken {
                    id: i as u32,
                    text: text.to_string(),
                })?;
                pieces.push(byte);
            }
            let end = u32::try_from(pieces.len()).map_err(|_| TokenizerError::VocabTooLarge(n))?;
            piece_offsets.push(end);
        }

        let model = match bpe {
            Some((b, pre)) => Model::Bpe(Box::new(BpeEncoder::new(&texts, &b.merges, &b.pre, pre)?)),
            None => {
                let mut byte_tokens = Box::new([0u32; 256]);
                for (b, slot) in byte_tokens.iter_mut().enumerate() {
                    let b = b as u8;
                    let hex = format!("<0x{b:02X}>");
                    *slot = texts
                        .lookup(hex.as_bytes())
                        .or_else(|| texts.lookup(&[b]))
                        .or(v.unk)
                        .ok_or(TokenizerError::NoByteFallback { byte: b })?;
                }
                Model::Spm { byte_tokens }
            }
        };

        let special = SpecialMatcher::new(attrs.iter().enumerate().filter_map(|(i, &a)| {
            let id = i as u32;
            (a & (attr::SPECIAL | attr::USER_DEFINED) != 0).then(|| {
                (
                    id,
                    texts.get(id).as_bytes().to_vec(),
                    a & attr::SPECIAL != 0,
                )
            })
        }));

        Ok(Tokenizer {
            texts,
            scores: v.scores,
            types,
            attrs,
            pieces,
            piece_offsets,
            model,
            special,
            bos: v.bos,
            eos: v.eos,
            unk: v.unk,
            pad: v.pad,
            eog,
            add_bos: v.add_bos,
            add_eos: v.add_eos,
            add_space_prefix: v.add_space_prefix,
        })
    }

    /// Tokenizes `text`.
    ///
    /// `add_special` adds the model's BOS token in front when the model asks
    /// for one (`add_bos_token`: true for Gemma, false for Qwen 2) and EOS at
    /// the end when it asks for that (`add_eos_token`), as llama.cpp's
    /// `add_special` does. `parse_special` lets control tokens written in the
    /// text (such as `<start_of_turn>` or `<|im_start|>`) become those tokens;
    /// user-defined tokens are matched either way.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.push(self.bos);
        }

        let mut frags = Vec::new();
        self.special
            .partition(text.as_bytes(), parse_special, &mut frags);
        let byte_tokens = match &self.model {
            Model::Spm { byte_tokens } => byte_tokens,
            Model::Bpe(encoder) => {
                for frag in frags {
                    match frag {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Raw { start, end } => match text.get(start..end) {
                            Some(raw) => encoder.encode(raw, &mut out),
                            None => debug_assert!(false, "fragment {start}..{end} is not on char boundaries"),
                        },
                    }
                }
                if add_special && self.add_eos {
                    out.push(self.eos);
                }
                return out;
            }
        };
        let mut session = SpmSession::default();
        let mut escaped = String::new();
        let mut prev_special = true;
        for frag in frags {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Raw { start, end } => {
                    // Fragment bounds are starts/ends of matched UTF-8 token
                    // texts, hence character boundaries.
                    let Some(raw) = text.get(start..end) else {
                        debug_assert!(false, "fragment {start}..{end} is not on char boundaries");
                        continue;
                    };
                    escaped.clear();
                    if self.add_space_prefix && prev_special {
                        escaped.push(SPACE_MARK);
                    }
                    for ch in raw.chars() {
                        escaped.push(if ch == ' ' { SPACE_MARK } else { ch });
                    }
                    session.tokenize(self, byte_tokens, &escaped, &mut out);
                    prev_special = false;
                }
            }
        }

        if add_special && self.add_eos {
            out.push(self.eos);
        }
        out
    }

    /// Decodes `ids` into text. Control and unknown tokens appear (as their
    /// text) only with `render_special`. Byte sequences that are not valid
    /// UTF-8 become U+FFFD, one per maximal invalid subpart; use
    /// [`Tokenizer::decode_bytes`] for the exact bytes.
    pub fn decode(&self, ids: &[u32], render_special: bool) -> Result<String, TokenizerError> {
        let bytes = self.decode_bytes(ids, render_special)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Decodes `ids` into the exact bytes llama.cpp's detokenizer produces.
    ///
    /// For BPE vocabularies whose pre-tokenizer llama.cpp marks with
    /// `clean_spaces` (GPT-2, Llama 3 and `default`, not Qwen 2) that
    /// includes its clean-up of spaces before punctuation and contractions
    /// (`"Hello , world"` decodes to `"Hello, world"`); [`crate::StreamDecoder`]
    /// and [`Tokenizer::token_bytes`] do not apply it, like llama.cpp's
    /// `token_to_piece`.
    pub fn decode_bytes(
        &self,
        ids: &[u32],
        render_special: bool,
    ) -> Result<Vec<u8>, TokenizerError> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for (i, &id) in ids.iter().enumerate() {
            let piece = self.token_bytes(id, render_special)?;
            out.extend_from_slice(self.strip_first(piece, i == 0));
        }
        if let Model::Bpe(encoder) = &self.model {
            if encoder.pre.clean_spaces {
                bpe::clean_spaces(&mut out);
            }
        }
        Ok(out)
    }

    /// With `add_space_prefix`, the first decoded token loses one leading space.
    pub(crate) fn strip_first<'a>(&self, piece: &'a [u8], first: bool) -> &'a [u8] {
        if first && self.add_space_prefix {
            piece.strip_prefix(b" ").unwrap_or(piece)
        } else {
            piece
        }
    }

    /// The bytes token `id` decodes to (empty for control and unknown tokens
    /// unless `render_special`). A byte token yields a single byte, which may
    /// be part of a multi-byte UTF-8 character; see [`crate::StreamDecoder`].
    pub fn token_bytes(&self, id: u32, render_special: bool) -> Result<&[u8], TokenizerError> {
        let i = self.check_id(id)?;
        if !render_special && self.attrs[i] & attr::SPECIAL != 0 {
            return Ok(&[]);
        }
        let (start, end) = (
            self.piece_offsets[i] as usize,
            self.piece_offsets[i + 1] as usize,
        );
        Ok(&self.pieces[start..end])
    }

    /// The vocabulary text of token `id` (SentencePiece: `▁` for spaces,
    /// `<0xNN>` for bytes; byte-level BPE: GPT-2's byte alphabet, `Ġ` for a
    /// space). [`Tokenizer::token_bytes`] gives the bytes it decodes to.
    pub fn token_text(&self, id: u32) -> Result<&str, TokenizerError> {
        let i = self.check_id(id)?;
        Ok(self.texts.get(i as u32))
    }

    /// The type of token `id`.
    pub fn token_type(&self, id: u32) -> Result<TokenType, TokenizerError> {
        Ok(self.types[self.check_id(id)?])
    }

    /// The merge score of token `id`.
    pub fn token_score(&self, id: u32) -> Result<f32, TokenizerError> {
        Ok(self.scores[self.check_id(id)?])
    }

    /// The id of the token whose vocabulary text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.lookup(text.as_bytes())
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    /// The tokenization algorithm: SentencePiece or byte-level BPE.
    pub fn model_kind(&self) -> ModelKind {
        match self.model {
            Model::Spm { .. } => ModelKind::Spm,
            Model::Bpe(_) => ModelKind::Bpe,
        }
    }

    /// The BPE pre-tokenizer's name (`tokenizer.ggml.pre`, e.g. `"qwen2"`);
    /// `None` for SentencePiece.
    pub fn pre_tokenizer(&self) -> Option<&str> {
        match &self.model {
            Model::Spm { .. } => None,
            Model::Bpe(encoder) => Some(&encoder.pre_name),
        }
    }

    /// The BPE encoder, for the crate's own tests.
    #[cfg(test)]
    pub(crate) fn bpe_encoder(&self) -> Option<&BpeEncoder> {
        match &self.model {
            Model::Spm { .. } => None,
            Model::Bpe(encoder) => Some(encoder),
        }
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> u32 {
        self.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> u32 {
        self.eos
    }

    /// Unknown token, if the vocabulary names one.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// Padding token, if the vocabulary names one.
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    /// Whether `encode` with `add_special` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode` with `add_special` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether generation stops at `id` (EOS, `<end_of_turn>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation tokens, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether `id` is a control or unknown token (hidden when decoding
    /// without `render_special`). False for out-of-range ids.
    pub fn is_special(&self, id: u32) -> bool {
        self.attrs
            .get(id as usize)
            .is_some_and(|a| a & attr::SPECIAL != 0)
    }

    fn check_id(&self, id: u32) -> Result<usize, TokenizerError> {
        let i = id as usize;
        if i < self.texts.len() {
            Ok(i)
        } else {
            Err(TokenizerError::InvalidTokenId {
                id,
                vocab_size: self.texts.len(),
            })
        }
    }

    #[inline]
    pub(crate) fn lookup(&self, text: &[u8]) -> Option<u32> {
        self.texts.lookup(text)
    }

    /// Score of a token known to be in range.
    #[inline]
    pub(crate) fn score(&self, id: u32) -> f32 {
        self.scores[id as usize]
    }
}

/// Parses `<0xNN>` (either hex case).
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
