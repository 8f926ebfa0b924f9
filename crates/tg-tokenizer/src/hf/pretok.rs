//! Pre-tokenizers (`"pre_tokenizer"` of `tokenizer.json`).

use serde_json::Value;

use super::json::Obj;
use crate::TokenizerError;

/// What a split does with the matched delimiters (`SplitDelimiterBehavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behavior {
    /// Delimiters are dropped.
    Removed,
    /// Each delimiter is a piece of its own.
    Isolated,
    /// A delimiter joins the piece before it (a delimiter directly after
    /// another delimiter stays on its own).
    MergedWithPrevious,
    /// A delimiter joins the piece after it (a delimiter directly before
    /// another delimiter stays on its own).
    MergedWithNext,
    /// Runs of consecutive delimiters become one piece.
    Contiguous,
}

/// When Metaspace puts a replacement character in front of a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrependScheme {
    Always,
    /// Only for the piece that starts the input.
    First,
    Never,
}

/// A pre-tokenizer.
#[derive(Debug, Clone)]
pub(crate) enum PreTokenizer {
    Sequence(Vec<PreTokenizer>),
    /// Split on the literal `pattern` (with `invert`, the text between
    /// occurrences are the delimiters).
    Split {
        pattern: String,
        behavior: Behavior,
        invert: bool,
    },
    /// Spaces become `replacement`, which is prepended per `prepend`; with
    /// `split`, pieces are split before each `replacement`.
    Metaspace {
        replacement: char,
        prepend: PrependScheme,
        split: bool,
    },
}

/// A piece of text being pre-tokenized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    pub text: String,
    /// Whether the piece starts at offset 0 of the original input (Metaspace's
    /// `first` scheme). Tracked through splits as "the first piece of a
    /// fragment that starts the input", which is exact unless a normalizer
    /// inserts or removes text at the very start of such a fragment and a
    /// later split cuts inside that text.
    pub first: bool,
}

impl PreTokenizer {
    /// Parses a pre-tokenizer object; `path` names it in error messages.
    pub(crate) fn from_json(v: &Value, path: &str) -> Result<PreTokenizer, TokenizerError> {
        let o = Obj::new(v, path)?;
        let ty = o.type_name()?;
        Ok(match ty {
            "Sequence" => {
                let items = o.array("pretokenizers")?;
                let mut seq = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    seq.push(PreTokenizer::from_json(
                        item,
                        &format!("{path}.pretokenizers[{i}]"),
                    )?);
                }
                PreTokenizer::Sequence(seq)
            }
            "Split" => {
                let behavior = match o.str("behavior")? {
                    "Removed" => Behavior::Removed,
                    "Isolated" => Behavior::Isolated,
                    "MergedWithPrevious" => Behavior::MergedWithPrevious,
                    "MergedWithNext" => Behavior::MergedWithNext,
                    "Contiguous" => Behavior::Contiguous,
                    other => return Err(o.invalid(format!("unknown split behavior `{other}`"))),
                };
                PreTokenizer::Split {
                    pattern: o.string_pattern("pattern")?,
                    behavior,
                    invert: o.bool("invert")?,
                }
            }
            "Metaspace" => {
                let replacement = o.char("replacement")?;
                let scheme = match o.get("prepend_scheme") {
                    None => PrependScheme::Always,
                    Some(Value::String(s)) => match s.as_str() {
                        "always" => PrependScheme::Always,
                        "first" => PrependScheme::First,
                        "never" => PrependScheme::Never,
                        other => return Err(o.invalid(format!("unknown prepend_scheme `{other}`"))),
                    },
                    Some(_) => return Err(o.invalid("`prepend_scheme` must be a string")),
                };
                // Legacy field: as in `tokenizers`, `add_prefix_space: false`
                // requires `prepend_scheme: "never"` (whose default is "always").
                if o.opt_bool("add_prefix_space")? == Some(false) && scheme != PrependScheme::Never
                {
                    return Err(
                        o.invalid("add_prefix_space does not match declared prepend_scheme")
                    );
                }
                PreTokenizer::Metaspace {
                    replacement,
                    prepend: scheme,
                    split: o.opt_bool("split")?.unwrap_or(true),
                }
            }
            other => {
                return Err(o.unsupported(format!(
                    "pre-tokenizer type `{other}` (implemented: Sequence, Split with a String \
                     pattern, Metaspace)"
                )))
            }
        })
    }

    /// Pre-tokenizes `pieces` in place (pieces may be split, rewritten or removed).
    pub(crate) fn pre_tokenize(&self, pieces: &mut Vec<Piece>) {
        match self {
            PreTokenizer::Sequence(seq) => {
                for p in seq {
                    p.pre_tokenize(pieces);
                }
            }
            PreTokenizer::Split {
                pattern,
                behavior,
                invert,
            } => {
                let old = std::mem::take(pieces);
                for piece in old {
                    let spans = split_spans(&piece.text, pattern, *behavior, *invert);
                    push_spans(pieces, &piece, &spans);
                }
            }
            PreTokenizer::Metaspace {
                replacement,
                prepend,
                split,
            } => {
                let mut rep = [0u8; 4];
                let rep: &str = replacement.encode_utf8(&mut rep);
                let old = std::mem::take(pieces);
                for mut piece in old {
                    let mut text = piece.text.replace(' ', rep);
                    let add = match prepend {
                        PrependScheme::Always => true,
                        PrependScheme::First => piece.first,
                        PrependScheme::Never => false,
                    };
                    if add && !text.starts_with(*replacement) {
                        text.insert_str(0, rep);
                    }
                    piece.text = text;
                    if *split {
                        let spans = split_spans(&piece.text, rep, Behavior::MergedWithNext, false);
                        push_spans(pieces, &piece, &spans);
                    } else if !piece.text.is_empty() {
                        pieces.push(piece);
                    }
                }
            }
        }
    }
}

fn push_spans(out: &mut Vec<Piece>, piece: &Piece, spans: &[(usize, usize)]) {
    for &(s, e) in spans {
        out.push(Piece {
            text: piece.text[s..e].to_string(),
            first: piece.first && s == 0,
        });
    }
}

/// The pieces of `text` (as byte ranges, empty ones omitted) after splitting
/// on the literal `pattern` with `behavior`; with `invert`, the stretches
/// between occurrences are the delimiters instead.
pub(crate) fn split_spans(
    text: &str,
    pattern: &str,
    behavior: Behavior,
    invert: bool,
) -> Vec<(usize, usize)> {
    // (start, end, is_delimiter), covering `text`.
    let mut parts: Vec<(usize, usize, bool)> = Vec::new();
    let mut prev = 0usize;
    for (start, m) in text.match_indices(pattern) {
        if prev != start {
            parts.push((prev, start, invert));
        }
        parts.push((start, start + m.len(), !invert));
        prev = start + m.len();
    }
    if prev != text.len() {
        parts.push((prev, text.len(), invert));
    }

    let mut spans: Vec<(usize, usize)> = Vec::with_capacity(parts.len());
    match behavior {
        Behavior::Removed => {
            spans.extend(parts.iter().filter(|p| !p.2).map(|p| (p.0, p.1)));
        }
        Behavior::Isolated => spans.extend(parts.iter().map(|p| (p.0, p.1))),
        Behavior::Contiguous => {
            let mut prev_delim = false;
            for &(s, e, delim) in &parts {
                match spans.last_mut() {
                    Some(last) if delim == prev_delim => last.1 = e,
                    _ => spans.push((s, e)),
                }
                prev_delim = delim;
            }
        }
        Behavior::MergedWithPrevious => {
            let mut prev_delim = false;
            for &(s, e, delim) in &parts {
                match spans.last_mut() {
                    Some(last) if delim && !prev_delim => last.1 = e,
                    _ => spans.push((s, e)),
                }
                prev_delim = delim;
            }
        }
        Behavior::MergedWithNext => {
            let mut prev_delim = false;
            for &(s, e, delim) in parts.iter().rev() {
                match spans.last_mut() {
                    Some(last) if delim && !prev_delim => last.0 = s,
                    _ => spans.push((s, e)),
                }
                prev_delim = delim;
            }
            spans.reverse();
        }
    }
    spans.retain(|&(s, e)| s < e);
    spans
}
