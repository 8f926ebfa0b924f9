//! Reading the vocabulary from GGUF metadata.

use tg_gguf::{GgufFile, Value};

use crate::{BpeVocab, Tokenizer, TokenizerError, Vocab};

/// GGUF metadata keys read by the tokenizer.
pub mod keys {
    /// Tokenizer model name: `"llama"` (SentencePiece) or `"gpt2"` (byte-level BPE).
    pub const MODEL: &str = "tokenizer.ggml.model";
    /// BPE merges, `"left right"` strings, highest priority first (`"gpt2"` only).
    pub const MERGES: &str = "tokenizer.ggml.merges";
    /// BPE pre-tokenizer name, e.g. `"qwen2"` (`"gpt2"` only; default `"default"`).
    pub const PRE: &str = "tokenizer.ggml.pre";
    /// The Jinja chat template (Hugging Face's `chat_template`).
    pub const CHAT_TEMPLATE: &str = "tokenizer.chat_template";
    /// Token texts.
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    /// Token scores.
    pub const SCORES: &str = "tokenizer.ggml.scores";
    /// Token types.
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    /// BOS id.
    pub const BOS: &str = "tokenizer.ggml.bos_token_id";
    /// EOS id.
    pub const EOS: &str = "tokenizer.ggml.eos_token_id";
    /// Unknown-token id.
    pub const UNK: &str = "tokenizer.ggml.unknown_token_id";
    /// Padding id.
    pub const PAD: &str = "tokenizer.ggml.padding_token_id";
    /// End-of-turn id.
    pub const EOT: &str = "tokenizer.ggml.eot_token_id";
    /// End-of-message id.
    pub const EOM: &str = "tokenizer.ggml.eom_token_id";
    /// Whether to prepend BOS.
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    /// Whether to append EOS.
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    /// Whether to prepend a space to raw text.
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
}

impl Vocab {
    /// Reads the vocabulary through a metadata lookup (`key -> value`), as
    /// stored in GGUF files.
    ///
    /// SentencePiece (`tokenizer.ggml.model = "llama"`): required `tokens`,
    /// `scores`, `token_type`, `bos_token_id`, `eos_token_id`; optional the
    /// unknown, padding, eot and eom ids, `add_bos_token` (default true),
    /// `add_eos_token` (default false) and `add_space_prefix` (default true,
    /// llama.cpp's default for SentencePiece vocabularies).
    ///
    /// Byte-level BPE (`"gpt2"`): required `tokens`, `merges`,
    /// `bos_token_id`, `eos_token_id`; optional `token_type` (default all
    /// normal), `scores` (unused; default 0), `pre` (default `"default"`;
    /// an unknown name is [`TokenizerError::UnknownPreTokenizer`]), the
    /// other ids, `add_bos_token` (default true for the Llama 3 family,
    /// false otherwise, as in llama.cpp), `add_eos_token` (default false)
    /// and `add_space_prefix` (default false).
    pub fn from_metadata<'a>(
        get: impl Fn(&str) -> Option<&'a Value>,
    ) -> Result<Vocab, TokenizerError> {
        let require = |key: &'static str| get(key).ok_or(TokenizerError::MissingKey(key));
        let wrong =
            |key: &'static str, expected: &'static str, found: String| TokenizerError::WrongType {
                key,
                expected,
                found,
            };

        let model_val = require(keys::MODEL)?;
        let model = model_val
            .as_str()
            .ok_or_else(|| wrong(keys::MODEL, "string", model_val.describe()))?;
        let is_bpe = match model {
            "llama" => false,
            "gpt2" => true,
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };

        let array =
            |key: &'static str, expected: &'static str| -> Result<&'a [Value], TokenizerError> {
                let v = require(key)?;
                v.as_array()
                    .ok_or_else(|| wrong(key, expected, v.describe()))
            };
        let elem_err = |key: &'static str, expected: &'static str, i: usize, v: &Value| {
            wrong(key, expected, format!("element {i} is {}", v.describe()))
        };

        const STRINGS: &str = "array of strings";
        let tokens = array(keys::TOKENS, STRINGS)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| elem_err(keys::TOKENS, STRINGS, i, v))
            })
            .collect::<Result<Vec<_>, _>>()?;

        // BPE vocabularies may omit scores (unused) and token types (all
        // normal), as llama.cpp allows.
        const FLOATS: &str = "array of f32";
        let scores = if is_bpe && get(keys::SCORES).is_none() {
            vec![0.0; tokens.len()]
        } else {
            array(keys::SCORES, FLOATS)?
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_f32()
                        .ok_or_else(|| elem_err(keys::SCORES, FLOATS, i, v))
                })
                .collect::<Result<Vec<_>, _>>()?
        };

        const INTS: &str = "array of i32";
        let token_types = if is_bpe && get(keys::TOKEN_TYPE).is_none() {
            vec![crate::TokenType::Normal.code(); tokens.len()]
        } else {
            array(keys::TOKEN_TYPE, INTS)?
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_i32()
                        .ok_or_else(|| elem_err(keys::TOKEN_TYPE, INTS, i, v))
                })
                .collect::<Result<Vec<_>, _>>()?
        };

        let bpe = if is_bpe {
            let merges = array(keys::MERGES, STRINGS)?
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| elem_err(keys::MERGES, STRINGS, i, v))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let pre = match get(keys::PRE) {
                None => "default".to_string(),
                Some(v) => v
                    .as_str()
                    .ok_or_else(|| wrong(keys::PRE, "string", v.describe()))?
                    .to_string(),
            };
            Some(BpeVocab { merges, pre })
        } else {
            None
        };
        let pre = match &bpe {
            Some(b) => Some(crate::bpe::find_pre(&b.pre).ok_or_else(|| {
                TokenizerError::UnknownPreTokenizer {
                    key: keys::PRE,
                    value: b.pre.clone(),
                    known: crate::bpe::known_pre_names(),
                }
            })?),
            None => None,
        };

        let id = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
            match get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_u32()
                    .map(Some)
                    .ok_or_else(|| wrong(key, "u32", v.describe())),
            }
        };
        let flag = |key: &'static str, default: bool| -> Result<bool, TokenizerError> {
            match get(key) {
                None => Ok(default),
                Some(v) => v.as_bool().ok_or_else(|| wrong(key, "bool", v.describe())),
            }
        };

        Ok(Vocab {
            tokens,
            scores,
            token_types,
            bos: id(keys::BOS)?.ok_or(TokenizerError::MissingKey(keys::BOS))?,
            eos: id(keys::EOS)?.ok_or(TokenizerError::MissingKey(keys::EOS))?,
            unk: id(keys::UNK)?,
            pad: id(keys::PAD)?,
            eot: id(keys::EOT)?,
            eom: id(keys::EOM)?,
            add_bos: flag(keys::ADD_BOS, pre.is_none_or(|p| p.add_bos))?,
            add_eos: flag(keys::ADD_EOS, false)?,
            add_space_prefix: flag(keys::ADD_SPACE_PREFIX, !is_bpe)?,
            bpe,
        })
    }

    /// Reads the vocabulary from a GGUF file's metadata; see [`Vocab::from_metadata`].
    pub fn from_gguf(f: &GgufFile) -> Result<Vocab, TokenizerError> {
        Vocab::from_metadata(|key| f.get(key))
    }
}

impl Tokenizer {
    /// Builds the tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(f: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_vocab(Vocab::from_gguf(f)?)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn meta() -> HashMap<&'static str, Value> {
        let mut tokens: Vec<String> = vec![
            "<pad>".into(),
            "<eos>".into(),
            "<bos>".into(),
            "<unk>".into(),
        ];
        let mut types = vec![3i32, 3, 3, 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        for t in ["▁", "h", "i", "▁h", "▁hi"] {
            tokens.push(t.into());
            types.push(1);
        }
        let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
        HashMap::from([
            (keys::MODEL, Value::from("llama")),
            (keys::TOKENS, Value::from(tokens)),
            (keys::SCORES, Value::from(scores)),
            (keys::TOKEN_TYPE, Value::from(types)),
            (keys::BOS, Value::U32(2)),
            (keys::EOS, Value::U32(1)),
            (keys::UNK, Value::U32(3)),
            (keys::ADD_SPACE_PREFIX, Value::Bool(false)),
        ])
    }

    fn load(m: &HashMap<&'static str, Value>) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_vocab(Vocab::from_metadata(|k| m.get(k))?)
    }

    #[test]
    fn reads_metadata() {
        let tok = load(&meta()).unwrap();
        assert_eq!(tok.vocab_size(), 265);
        assert_eq!(
            (tok.bos(), tok.eos(), tok.unk(), tok.pad()),
            (2, 1, Some(3), None)
        );
        assert_eq!(tok.encode(" hi", true, false), vec![2, 264]);
        assert_eq!(tok.encode("hi", false, false), vec![261, 262]);
    }

    #[test]
    fn metadata_errors() {
        for key in [
            keys::MODEL,
            keys::TOKENS,
            keys::SCORES,
            keys::TOKEN_TYPE,
            keys::BOS,
            keys::EOS,
        ] {
            let mut m = meta();
            m.remove(key);
            match load(&m) {
                Err(TokenizerError::MissingKey(k)) => assert_eq!(k, key),
                other => panic!("removing {key}: {other:?}"),
            }
        }

        let mut m = meta();
        m.insert(keys::MODEL, Value::from("bert"));
        assert!(matches!(load(&m), Err(TokenizerError::UnsupportedModel(s)) if s == "bert"));

        // A byte-level BPE vocabulary needs merges.
        let mut m = meta();
        m.insert(keys::MODEL, Value::from("gpt2"));
        assert!(matches!(load(&m), Err(TokenizerError::MissingKey(k)) if k == keys::MERGES));

        let mut m = meta();
        m.insert(keys::SCORES, Value::from(vec![0.5f32; 3]));
        assert!(matches!(
            load(&m),
            Err(TokenizerError::LengthMismatch { what: "scores", .. })
        ));

        let mut m = meta();
        m.insert(keys::TOKEN_TYPE, Value::from(vec![1i32; 266]));
        assert!(matches!(
            load(&m),
            Err(TokenizerError::LengthMismatch {
                what: "token_type",
                ..
            })
        ));

        let mut m = meta();
        m.insert(keys::TOKENS, Value::from(vec![1u32, 2]));
        let e = load(&m).unwrap_err();
        assert!(
            matches!(
                e,
                TokenizerError::WrongType {
                    key: keys::TOKENS,
                    ..
                }
            ),
            "{e}"
        );

        let mut m = meta();
        m.insert(keys::TOKEN_TYPE, Value::from("x"));
        assert!(matches!(
            load(&m),
            Err(TokenizerError::WrongType {
                key: keys::TOKEN_TYPE,
                ..
            })
        ));

        let mut m = meta();
        m.insert(keys::BOS, Value::from("x"));
        assert!(matches!(
            load(&m),
            Err(TokenizerError::WrongType { key: keys::BOS, .. })
        ));

        let mut m = meta();
        m.insert(keys::BOS, Value::I32(-1));
        assert!(matches!(
            load(&m),
            Err(TokenizerError::WrongType { key: keys::BOS, .. })
        ));

        let mut m = meta();
        m.insert(keys::EOS, Value::U32(265));
        assert!(matches!(
            load(&m),
            Err(TokenizerError::SpecialTokenOutOfRange {
                which: "eos",
                id: 265,
                ..
            })
        ));

        let mut m = meta();
        m.insert(keys::ADD_BOS, Value::U32(1));
        assert!(matches!(
            load(&m),
            Err(TokenizerError::WrongType {
                key: keys::ADD_BOS,
                ..
            })
        ));

        let mut m = meta();
        let mut types = vec![3i32; 4];
        types.extend([6; 256]);
        types.extend([1, 1, 1, 1, 7]);
        m.insert(keys::TOKEN_TYPE, Value::from(types));
        assert!(matches!(
            load(&m),
            Err(TokenizerError::BadTokenType { id: 264, value: 7 })
        ));
    }
}
