//! Decoders (`"decoder"` of `tokenizer.json`): they rewrite the list of token
//! texts, which is then concatenated.

use serde_json::Value;

use super::json::Obj;
use super::pretok::PrependScheme;
use crate::TokenizerError;

/// A decoder.
#[derive(Debug, Clone)]
pub(crate) enum Decoder {
    Sequence(Vec<Decoder>),
    /// In each token, occurrences of `pattern` become `content`.
    Replace {
        pattern: String,
        content: String,
    },
    /// Runs of `<0xNN>` tokens become the text of their bytes (one `U+FFFD`
    /// per byte when the run is not valid UTF-8).
    ByteFallback,
    /// All tokens are joined into one.
    Fuse,
    /// Removes up to `start` leading and `stop` trailing `content` characters
    /// from each token.
    Strip {
        content: char,
        start: usize,
        stop: usize,
    },
    /// `replacement` becomes a space, except that it is dropped from the first
    /// token unless the scheme is `Never`.
    Metaspace {
        replacement: char,
        prepend: PrependScheme,
    },
}

impl Decoder {
    /// Parses a decoder object; `path` names it in error messages.
    pub(crate) fn from_json(v: &Value, path: &str) -> Result<Decoder, TokenizerError> {
        let o = Obj::new(v, path)?;
        let ty = o.type_name()?;
        Ok(match ty {
            "Sequence" => {
                let items = o.array("decoders")?;
                let mut seq = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    seq.push(Decoder::from_json(item, &format!("{path}.decoders[{i}]"))?);
                }
                Decoder::Sequence(seq)
            }
            "Replace" => Decoder::Replace {
                pattern: o.string_pattern("pattern")?,
                content: o.str("content")?.to_string(),
            },
            "ByteFallback" => Decoder::ByteFallback,
            "Fuse" => Decoder::Fuse,
            "Strip" => Decoder::Strip {
                content: o.char("content")?,
                start: o.usize("start")?,
                stop: o.usize("stop")?,
            },
            "Metaspace" => {
                // Same fields as the Metaspace pre-tokenizer.
                let PreTokenizerFields {
                    replacement,
                    prepend,
                } = metaspace_fields(&o)?;
                Decoder::Metaspace {
                    replacement,
                    prepend,
                }
            }
            other => {
                return Err(o.unsupported(format!(
                    "decoder type `{other}` (implemented: Sequence, Replace, ByteFallback, Fuse, \
                     Strip, Metaspace)"
                )))
            }
        })
    }

    /// Rewrites the token texts.
    pub(crate) fn decode_chain(&self, tokens: Vec<String>) -> Vec<String> {
        match self {
            Decoder::Sequence(seq) => seq.iter().fold(tokens, |t, d| d.decode_chain(t)),
            Decoder::Replace { pattern, content } => tokens
                .into_iter()
                .map(|t| t.replace(pattern.as_str(), content))
                .collect(),
            Decoder::ByteFallback => byte_fallback(tokens),
            Decoder::Fuse => vec![tokens.concat()],
            Decoder::Strip {
                content,
                start,
                stop,
            } => tokens
                .into_iter()
                .map(|t| strip(&t, *content, *start, *stop))
                .collect(),
            Decoder::Metaspace {
                replacement,
                prepend,
            } => tokens
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let drop_first = i == 0 && *prepend != PrependScheme::Never;
                    t.chars()
                        .filter_map(|c| {
                            if c != *replacement {
                                Some(c)
                            } else if drop_first {
                                // `tokenizers` drops every replacement of the first token.
                                None
                            } else {
                                Some(' ')
                            }
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

struct PreTokenizerFields {
    replacement: char,
    prepend: PrependScheme,
}

fn metaspace_fields(o: &Obj<'_>) -> Result<PreTokenizerFields, TokenizerError> {
    let replacement = o.char("replacement")?;
    let prepend = match o.get("prepend_scheme") {
        None => PrependScheme::Always,
        Some(Value::String(s)) => match s.as_str() {
            "always" => PrependScheme::Always,
            "first" => PrependScheme::First,
            "never" => PrependScheme::Never,
            other => return Err(o.invalid(format!("unknown prepend_scheme `{other}`"))),
        },
        Some(_) => return Err(o.invalid("`prepend_scheme` must be a string")),
    };
    if o.opt_bool("add_prefix_space")? == Some(false) && prepend != PrependScheme::Never {
        return Err(o.invalid("add_prefix_space does not match declared prepend_scheme"));
    }
    Ok(PreTokenizerFields {
        replacement,
        prepend,
    })
}

/// The byte of a `<0xNN>` token (parsed as `tokenizers` does).
fn byte_token(t: &str) -> Option<u8> {
    if t.len() == 6 && t.starts_with("<0x") && t.ends_with('>') {
        t.get(3..5).and_then(|h| u8::from_str_radix(h, 16).ok())
    } else {
        None
    }
}

fn flush_bytes(out: &mut Vec<String>, bytes: &mut Vec<u8>) {
    if bytes.is_empty() {
        return;
    }
    match String::from_utf8(std::mem::take(bytes)) {
        Ok(s) => out.push(s),
        Err(e) => {
            let n = e.as_bytes().len();
            out.extend(std::iter::repeat_n("\u{FFFD}".to_string(), n));
        }
    }
}

fn byte_fallback(tokens: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut bytes = Vec::new();
    for t in tokens {
        if let Some(b) = byte_token(&t) {
            bytes.push(b);
        } else {
            flush_bytes(&mut out, &mut bytes);
            out.push(t);
        }
    }
    flush_bytes(&mut out, &mut bytes);
    out
}

fn strip(t: &str, content: char, start: usize, stop: usize) -> String {
    let chars: Vec<char> = t.chars().collect();
    let lead = chars
        .iter()
        .take(start)
        .take_while(|&&c| c == content)
        .count();
    let trail = chars[lead..]
        .iter()
        .rev()
        .take(stop)
        .take_while(|&&c| c == content)
        .count();
    chars[lead..chars.len() - trail].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_bounds() {
        assert_eq!(strip("__a__", '_', 1, 1), "_a_");
        assert_eq!(strip("__a__", '_', 5, 5), "a");
        assert_eq!(strip("___", '_', 2, 5), "");
        assert_eq!(strip("", '_', 2, 2), "");
        assert_eq!(strip("a_", '_', 0, 0), "a_");
    }

    #[test]
    fn byte_fallback_runs() {
        let toks = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            byte_fallback(toks(&["a", "<0xE2>", "<0x96>", "<0x81>", "b"])),
            toks(&["a", "▁", "b"])
        );
        assert_eq!(
            byte_fallback(toks(&["<0xE2>", "<0x96>", "x", "<0xFF>"])),
            toks(&["\u{FFFD}", "\u{FFFD}", "x", "\u{FFFD}"])
        );
        assert_eq!(
            byte_fallback(toks(&["<0x4G>", "<0x41>"])),
            toks(&["<0x4G>", "A"])
        );
    }
}
