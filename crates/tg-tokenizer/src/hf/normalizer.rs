//! Normalizers (`"normalizer"` of `tokenizer.json`).

use serde_json::Value;
use unicode_normalization_alignments::UnicodeNormalization;

use super::json::Obj;
use crate::TokenizerError;

/// A normalizer. Only the normalized text is computed (no offset alignments).
#[derive(Debug, Clone)]
pub(crate) enum Normalizer {
    Sequence(Vec<Normalizer>),
    /// Every non-overlapping occurrence of `pattern`, left to right, becomes `content`.
    Replace {
        pattern: String,
        content: String,
    },
    /// `prepend` is put in front of non-empty text.
    Prepend(String),
    Nfc,
    Nfd,
    Nfkc,
    Nfkd,
    /// Per-character `char::to_lowercase` (no context-dependent rules, so a
    /// final capital sigma becomes `σ`, as in `tokenizers`).
    Lowercase,
    /// Removes leading and/or trailing Unicode whitespace.
    Strip {
        left: bool,
        right: bool,
    },
}

impl Normalizer {
    /// Parses a normalizer object; `path` names it in error messages.
    pub(crate) fn from_json(v: &Value, path: &str) -> Result<Normalizer, TokenizerError> {
        let o = Obj::new(v, path)?;
        let ty = o.type_name()?;
        Ok(match ty {
            "Sequence" => {
                let items = o.array("normalizers")?;
                let mut seq = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    seq.push(Normalizer::from_json(
                        item,
                        &format!("{path}.normalizers[{i}]"),
                    )?);
                }
                Normalizer::Sequence(seq)
            }
            "Replace" => Normalizer::Replace {
                pattern: o.string_pattern("pattern")?,
                content: o.str("content")?.to_string(),
            },
            "Prepend" => Normalizer::Prepend(o.str("prepend")?.to_string()),
            "NFC" => Normalizer::Nfc,
            "NFD" => Normalizer::Nfd,
            "NFKC" => Normalizer::Nfkc,
            "NFKD" => Normalizer::Nfkd,
            "Lowercase" => Normalizer::Lowercase,
            "Strip" => Normalizer::Strip {
                left: o.bool("strip_left")?,
                right: o.bool("strip_right")?,
            },
            other => {
                return Err(o.unsupported(format!(
                    "normalizer type `{other}` (implemented: Sequence, Replace, Prepend, \
                     NFC, NFD, NFKC, NFKD, Lowercase, Strip)"
                )))
            }
        })
    }

    /// Normalizes `s`.
    pub(crate) fn normalize(&self, s: &str) -> String {
        match self {
            Normalizer::Sequence(seq) => {
                let mut cur = s.to_string();
                for n in seq {
                    cur = n.normalize(&cur);
                }
                cur
            }
            Normalizer::Replace { pattern, content } => s.replace(pattern.as_str(), content),
            Normalizer::Prepend(p) => {
                if s.is_empty() {
                    String::new()
                } else {
                    let mut out = String::with_capacity(p.len() + s.len());
                    out.push_str(p);
                    out.push_str(s);
                    out
                }
            }
            Normalizer::Nfc => s.nfc().map(|(c, _)| c).collect(),
            Normalizer::Nfd => s.nfd().map(|(c, _)| c).collect(),
            Normalizer::Nfkc => s.nfkc().map(|(c, _)| c).collect(),
            Normalizer::Nfkd => s.nfkd().map(|(c, _)| c).collect(),
            Normalizer::Lowercase => s.chars().flat_map(char::to_lowercase).collect(),
            Normalizer::Strip { left, right } => {
                let mut t = s;
                if *left {
                    t = t.trim_start_matches(char::is_whitespace);
                }
                if *right {
                    t = t.trim_end_matches(char::is_whitespace);
                }
                t.to_string()
            }
        }
    }
}
