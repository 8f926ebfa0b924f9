//! The raw vocabulary a [`Tokenizer`](crate::Tokenizer) is built from.

use crate::TokenizerError;

/// Token type as stored in `tokenizer.ggml.token_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0: undefined; never produced by merges' output rendering (decodes to nothing).
    Undefined,
    /// 1: an ordinary piece; `▁` in its text stands for a space
    /// (SentencePiece), or its text is in the byte-level alphabet (BPE).
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token (`<bos>`, `<start_of_turn>`, ...); matched in text
    /// only with `parse_special`, rendered only with `render_special`.
    Control,
    /// 4: a user-defined token; always matched in text and always rendered.
    UserDefined,
    /// 5: an unused slot; decodes to nothing.
    Unused,
    /// 6: a byte-fallback token `<0xNN>`.
    Byte,
}

impl TokenType {
    /// Converts the GGUF integer code; `None` when it is not one of 0..=6.
    pub fn from_code(code: i32) -> Option<TokenType> {
        Some(match code {
            0 => TokenType::Undefined,
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }

    /// The GGUF integer code.
    pub const fn code(self) -> i32 {
        match self {
            TokenType::Undefined => 0,
            TokenType::Normal => 1,
            TokenType::Unknown => 2,
            TokenType::Control => 3,
            TokenType::UserDefined => 4,
            TokenType::Unused => 5,
            TokenType::Byte => 6,
        }
    }
}

/// Everything the tokenizer needs, independent of where it was read from.
///
/// [`Tokenizer::from_vocab`](crate::Tokenizer::from_vocab) validates it.
#[derive(Debug, Clone)]
pub struct Vocab {
    /// Token texts, indexed by id (`tokenizer.ggml.tokens`).
    pub tokens: Vec<String>,
    /// Merge scores, higher merges first (`tokenizer.ggml.scores`).
    pub scores: Vec<f32>,
    /// Raw token type codes (`tokenizer.ggml.token_type`), see [`TokenType`].
    pub token_types: Vec<i32>,
    /// Beginning-of-sequence token.
    pub bos: u32,
    /// End-of-sequence token.
    pub eos: u32,
    /// Unknown token, used when a byte has no byte-fallback token.
    pub unk: Option<u32>,
    /// Padding token.
    pub pad: Option<u32>,
    /// End-of-turn token, when the metadata names one (`tokenizer.ggml.eot_token_id`).
    pub eot: Option<u32>,
    /// End-of-message token, when the metadata names one (`tokenizer.ggml.eom_token_id`).
    pub eom: Option<u32>,
    /// Whether encoding with `add_special` prepends BOS.
    pub add_bos: bool,
    /// Whether encoding with `add_special` appends EOS.
    pub add_eos: bool,
    /// Whether a space is prepended to raw text at the start and after
    /// special tokens (SentencePiece only), and whether decoding drops one
    /// leading space from the first token (both models, as llama.cpp does).
    pub add_space_prefix: bool,
    /// `None` for a SentencePiece vocabulary (`tokenizer.ggml.model =
    /// "llama"`); the merges and pre-tokenizer of a byte-level BPE vocabulary
    /// (`"gpt2"`) otherwise.
    pub bpe: Option<BpeVocab>,
}

/// The byte-level BPE part of a vocabulary (`tokenizer.ggml.model = "gpt2"`).
///
/// Token texts are in GPT-2's byte-level alphabet: every byte is one
/// printable character (`Ġ` for a space, `Ċ` for a newline, ...).
#[derive(Debug, Clone)]
pub struct BpeVocab {
    /// Merge rules, highest priority first, each two token texts separated by
    /// one space (`tokenizer.ggml.merges`, e.g. `"Ġ t"`).
    pub merges: Vec<String>,
    /// The pre-tokenizer name (`tokenizer.ggml.pre`, e.g. `"qwen2"`): which of
    /// llama.cpp's regex lists splits text into words before merging
    /// ([`BpeVocab::known_pre_tokenizers`] lists the accepted names).
    pub pre: String,
}

impl BpeVocab {
    /// The `tokenizer.ggml.pre` values this crate accepts: llama.cpp's names
    /// for the regex lists implemented here (`qwen2`, `llama-bpe`, `gpt-2`,
    /// `default`, ...).
    pub fn known_pre_tokenizers() -> impl Iterator<Item = &'static str> {
        crate::bpe::PRE_TOKENIZERS
            .iter()
            .flat_map(|p| p.names.iter().copied())
    }
}

impl Vocab {
    /// Checks array lengths, token types, scores and special ids.
    pub(crate) fn validate(&self) -> Result<Vec<TokenType>, TokenizerError> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        if u32::try_from(n).is_err() || n == u32::MAX as usize {
            return Err(TokenizerError::VocabTooLarge(n));
        }
        if self.scores.len() != n {
            return Err(TokenizerError::LengthMismatch {
                what: "scores",
                expected: n,
                found: self.scores.len(),
            });
        }
        if self.token_types.len() != n {
            return Err(TokenizerError::LengthMismatch {
                what: "token_type",
                expected: n,
                found: self.token_types.len(),
            });
        }
        let mut types = Vec::with_capacity(n);
        for (i, (&code, &score)) in self.token_types.iter().zip(&self.scores).enumerate() {
            let id = i as u32;
            let ty = TokenType::from_code(code)
                .ok_or(TokenizerError::BadTokenType { id, value: code })?;
            if score.is_nan() {
                return Err(TokenizerError::NanScore { id });
            }
            types.push(ty);
        }
        let check = |which: &'static str, id: Option<u32>| match id {
            Some(id) if id as usize >= n => Err(TokenizerError::SpecialTokenOutOfRange {
                which,
                id,
                vocab_size: n,
            }),
            _ => Ok(()),
        };
        check("bos", Some(self.bos))?;
        check("eos", Some(self.eos))?;
        check("unknown", self.unk)?;
        check("padding", self.pad)?;
        check("eot", self.eot)?;
        check("eom", self.eom)?;
        Ok(types)
    }
}
