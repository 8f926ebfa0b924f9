//! Deserialization of the large parts of `tokenizer.json` (the model's vocab
//! and merges are streamed into compact buffers; the small components are
//! kept as `serde_json::Value`s and parsed by their modules).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::added::RawAddedToken;
use super::vocab::VocabBuilder;
use crate::TokenizerError;

/// The top level of `tokenizer.json`. Unknown keys are ignored, as in `tokenizers`.
#[derive(Deserialize)]
pub(crate) struct RawFile {
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub truncation: Option<Value>,
    #[serde(default)]
    pub padding: Option<Value>,
    #[serde(default)]
    pub added_tokens: Option<Vec<RawAddedToken>>,
    #[serde(default)]
    pub normalizer: Option<Value>,
    #[serde(default)]
    pub pre_tokenizer: Option<Value>,
    #[serde(default)]
    pub post_processor: Option<Value>,
    #[serde(default)]
    pub decoder: Option<Value>,
    #[serde(default)]
    pub model: Option<RawModel>,
}

/// The `"model"` object. Fields of other model types are tolerated here so
/// that the type can be reported as unsupported.
#[derive(Deserialize)]
pub(crate) struct RawModel {
    #[serde(rename = "type", default)]
    pub ty: Option<String>,
    #[serde(default)]
    pub dropout: Option<f64>,
    #[serde(default)]
    pub unk_token: Option<Value>,
    #[serde(default)]
    pub continuing_subword_prefix: Option<Value>,
    #[serde(default)]
    pub end_of_word_suffix: Option<String>,
    #[serde(default)]
    pub fuse_unk: Option<bool>,
    #[serde(default)]
    pub byte_fallback: Option<bool>,
    #[serde(default)]
    pub ignore_merges: Option<bool>,
    #[serde(default)]
    pub vocab: Option<RawVocab>,
    #[serde(default)]
    pub merges: Option<RawMerges>,
}

/// `model.vocab`: a `{text: id}` object (BPE), or anything else (other model
/// types), which is skipped.
pub(crate) enum RawVocab {
    Map(VocabBuilder),
    NotAMap,
}

impl<'de> Deserialize<'de> for RawVocab {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawVocab;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from token text to id")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawVocab, A::Error> {
                let mut b = VocabBuilder::default();
                let mut key = String::new();
                loop {
                    key.clear();
                    if map.next_key_seed(StrInto(&mut key))?.is_none() {
                        break;
                    }
                    let id: u32 = map.next_value()?;
                    b.push(&key, id).map_err(de::Error::custom)?;
                }
                Ok(RawVocab::Map(b))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawVocab, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(RawVocab::NotAMap)
            }
        }
        d.deserialize_any(V)
    }
}

/// Deserializes a string by appending it to a buffer.
struct StrInto<'b>(&'b mut String);

impl<'de> DeserializeSeed<'de> for StrInto<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        struct V<'b>(&'b mut String);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
                self.0.push_str(s);
                Ok(())
            }
        }
        d.deserialize_str(V(self.0))
    }
}

/// `model.merges`: `["a b", ...]` (legacy) or `[["a", "b"], ...]`, stored as
/// one text buffer with (start, middle, end) offsets.
#[derive(Default)]
pub(crate) struct RawMerges {
    text: String,
    spans: Vec<(usize, usize, usize)>,
}

impl RawMerges {
    /// The merges in rank order.
    pub(crate) fn pairs(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.spans
            .iter()
            .map(|&(s, m, e)| (&self.text[s..m], &self.text[m..e]))
    }
}

impl<'de> Deserialize<'de> for RawMerges {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMerges;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of merges")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawMerges, A::Error> {
                let mut m = RawMerges::default();
                let mut line = String::new();
                while let Some(kind) = seq.next_element_seed(MergeSeed {
                    merges: &mut m,
                    line: &mut line,
                })? {
                    if kind == MergeKind::Line {
                        // Legacy "a b" form; `#version` lines are comments.
                        if line.starts_with("#version") {
                            continue;
                        }
                        let rank = m.spans.len();
                        let mut parts = line.split(' ');
                        let (Some(a), Some(b), None) = (parts.next(), parts.next(), parts.next())
                        else {
                            return Err(de::Error::custom(format!(
                                "merge #{rank} {line:?} is not two tokens separated by one space"
                            )));
                        };
                        let s = m.text.len();
                        m.text.push_str(a);
                        let mid = m.text.len();
                        m.text.push_str(b);
                        m.spans.push((s, mid, m.text.len()));
                    }
                }
                Ok(m)
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(PartialEq, Eq)]
enum MergeKind {
    /// Stored directly into the merges.
    Pair,
    /// A legacy line, left in the line buffer.
    Line,
}

struct MergeSeed<'b> {
    merges: &'b mut RawMerges,
    line: &'b mut String,
}

impl<'de> DeserializeSeed<'de> for MergeSeed<'_> {
    type Value = MergeKind;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<MergeKind, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MergeSeed<'_> {
    type Value = MergeKind;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a merge: \"a b\" or [\"a\", \"b\"]")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<MergeKind, E> {
        self.line.clear();
        self.line.push_str(s);
        Ok(MergeKind::Line)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MergeKind, A::Error> {
        let m = self.merges;
        let s = m.text.len();
        let first = seq.next_element_seed(StrInto(&mut m.text))?;
        let mid = m.text.len();
        let second = seq.next_element_seed(StrInto(&mut m.text))?;
        let end = m.text.len();
        if first.is_none() || second.is_none() || seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom(format!(
                "merge #{} is not a pair of two strings",
                m.spans.len()
            )));
        }
        m.spans.push((s, mid, end));
        Ok(MergeKind::Pair)
    }
}

/// Reads the whole document.
pub(crate) fn parse(bytes: &[u8]) -> Result<RawFile, TokenizerError> {
    // serde would also accept a JSON array for the top-level struct (as a
    // tuple of its fields), with a confusing message; refuse it up front.
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{') {
        return Err(TokenizerError::HfInvalid(
            "the document must be a JSON object".to_string(),
        ));
    }
    Ok(serde_json::from_slice(bytes)?)
}
