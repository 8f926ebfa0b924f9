//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`: Qwen 2, Llama 3, GPT-2,
//! ...), token for token compatible with llama.cpp's BPE tokenizer and
//! built on the `tokenizers` crate.
//!
//! A raw text fragment (what is left between special tokens) is encoded by
//! a `tokenizers` pipeline assembled from the GGUF metadata:
//!
//! 1. **Pre-tokenizer.** llama.cpp's regex list for `tokenizer.ggml.pre`,
//!    each regex a `Split` with the `Isolated` behaviour (matches and the
//!    text between matches both become words; every regex splits the words
//!    the previous one produced), then `ByteLevel` without a prefix space or
//!    regex of its own, which rewrites each byte of a word as one printable
//!    character of GPT-2's byte-level alphabet.
//! 2. **Model.** A `BPE` over the file's vocabulary and merges (first
//!    occurrence of a repeated merge wins, as in llama.cpp); with
//!    `ignore_merges` (the Llama 3 family) a word that is itself a
//!    vocabulary entry is emitted without merging.
//!
//! Decoding does not go through `tokenizers`: every token's bytes are
//! computed once (the byte-level characters mapped back to bytes), so that
//! [`Tokenizer::token_bytes`](crate::Tokenizer::token_bytes) and the
//! [`StreamDecoder`](crate::StreamDecoder) see raw, possibly incomplete
//! UTF-8 exactly as llama.cpp's `token_to_piece` produces it.

use std::sync::OnceLock;

use tokenizers::models::bpe::{Vocab as HfVocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use crate::index::TextIndex;
use crate::TokenizerError;

/// llama.cpp's pre-tokenizer regexes (`llm_tokenizer_bpe`), verbatim.
mod regex {
    /// GPT-2's split.
    pub const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
    /// Llama 3's split (`(?i:...)` spelled out), digits in runs of up to three.
    pub const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    /// Qwen 2's split: Llama 3's with single digits.
    pub const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    /// Qwen 3.5's split: Qwen 2's with combining marks inside letter runs.
    pub const QWEN35: &str =
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    /// Runs of punctuation and ASCII symbols (the `default` list).
    pub const PUNCT: &str = r"[\p{P}\$\+<=>\^~\|]+";
    /// The same with the backtick (Falcon).
    pub const FALCON_PUNCT: &str = r"[\p{P}\$\+<=>\^~\|`]+";
    /// One digit.
    pub const DIGIT: &str = r"\p{N}";
    /// A run of digits.
    pub const DIGITS: &str = r"\p{N}+";
    /// Three ASCII digits.
    pub const THREE_DIGITS: &str = r"[0-9][0-9][0-9]";
    /// Lines and runs of newlines.
    pub const LINES: &str = r"[^\n]+|[\n]+";
}

/// One llama.cpp pre-tokenizer: the names `tokenizer.ggml.pre` gives it,
/// its regex list and the vocabulary settings llama.cpp ties to the name.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    /// Accepted values of `tokenizer.ggml.pre`.
    pub(crate) names: &'static [&'static str],
    /// Applied in order.
    pub(crate) regexes: &'static [&'static str],
    /// A word that is a vocabulary entry is emitted without merging.
    pub(crate) ignore_merges: bool,
    /// `add_bos_token` when the metadata does not set it.
    pub(crate) add_bos: bool,
    /// Whether the detokenizer removes the spaces llama.cpp's
    /// `clean_spaces` removes (before `?!.,`, around a lone `'`, before
    /// `'s 'm 're 've`).
    pub(crate) clean_spaces: bool,
}

const fn pre(names: &'static [&'static str], regexes: &'static [&'static str], clean_spaces: bool) -> PreTokenizer {
    PreTokenizer { names, regexes, ignore_merges: false, add_bos: false, clean_spaces }
}

const STARCODER: &[&str] = &[regex::DIGIT, regex::GPT2];

/// Every pre-tokenizer this crate implements, with llama.cpp's names and
/// settings (llama.cpp commit 0c1e57098, `llama_vocab::impl::load`).
pub(crate) const PRE_TOKENIZERS: &[PreTokenizer] = &[
    pre(&["default"], &[regex::PUNCT, regex::GPT2, regex::DIGITS, regex::THREE_DIGITS], true),
    PreTokenizer {
        names: &["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"],
        regexes: &[regex::LLAMA3],
        ignore_merges: true,
        add_bos: true,
        clean_spaces: true,
    },
    pre(&["dbrx", "smaug-bpe"], &[regex::LLAMA3], true),
    pre(
        &["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais", "exaone4"],
        &[regex::GPT2],
        true,
    ),
    pre(&["trillion", "granite-docling"], &[regex::GPT2], false),
    pre(&["starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"], STARCODER, true),
    pre(&["command-r", "smollm"], STARCODER, false),
    pre(&["falcon"], &[regex::FALCON_PUNCT, regex::GPT2, regex::THREE_DIGITS], true),
    pre(&["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"], &[regex::QWEN2], false),
    pre(&["stablelm2", "megrez"], &[regex::QWEN2], true),
    pre(&["qwen35"], &[regex::QWEN35], false),
    pre(&["laguna"], &[regex::LINES, regex::QWEN2], false),
];

/// The pre-tokenizer llama.cpp uses for `name`.
pub(crate) fn find_pre(name: &str) -> Option<&'static PreTokenizer> {
    PRE_TOKENIZERS.iter().find(|p| p.names.contains(&name))
}

/// All accepted `tokenizer.ggml.pre` names, comma-separated.
pub(crate) fn known_pre_names() -> String {
    PRE_TOKENIZERS.iter().flat_map(|p| p.names.iter().copied()).collect::<Vec<_>>().join(", ")
}

/// Bytes that GPT-2's byte-level alphabet writes as themselves (printable
/// Latin-1); the other 68 bytes become U+0100.. in byte order.
const fn is_self_mapped(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The byte-level alphabet: `byte_chars()[b]` stands for byte `b`.
pub(crate) fn byte_chars() -> &'static [char; 256] {
    static CHARS: OnceLock<[char; 256]> = OnceLock::new();
    CHARS.get_or_init(|| {
        let mut chars = ['\0'; 256];
        let mut next = 0x100u32;
        for (b, slot) in chars.iter_mut().enumerate() {
            let b = b as u8;
            *slot = if is_self_mapped(b) {
                char::from(b)
            } else {
                let c = char::from_u32(next).unwrap_or(char::REPLACEMENT_CHARACTER);
                next += 1;
                c
            };
        }
        chars
    })
}

/// The byte a byte-level character stands for.
pub(crate) fn char_byte(c: char) -> Option<u8> {
    static SHIFTED: OnceLock<Vec<u8>> = OnceLock::new();
    let cp = c as u32;
    if cp < 0x100 {
        let b = cp as u8;
        return is_self_mapped(b).then_some(b);
    }
    let shifted = SHIFTED.get_or_init(|| (0..=255u8).filter(|&b| !is_self_mapped(b)).collect());
    shifted.get((cp - 0x100) as usize).copied()
}

/// The bytes a normal token's byte-level text stands for, as llama.cpp's
/// detokenizer writes them: a character outside the alphabet becomes
/// `[UNK_BYTE_0x<its UTF-8 in hex><the whole token text>]`.
pub(crate) fn decode_token_text(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

/// The encoder of one byte-level BPE vocabulary.
pub(crate) struct BpeEncoder {
    /// Pre-tokenizer and model; no normalizer, added tokens or
    /// post-processor (special tokens are split out before).
    hf: tokenizers::Tokenizer,
    pub(crate) pre: &'static PreTokenizer,
    /// The `tokenizer.ggml.pre` value it was built for.
    pub(crate) pre_name: String,
    /// Token of each byte's byte-level character, if the vocabulary has one.
    byte_tokens: [Option<u32>; 256],
}

impl std::fmt::Debug for BpeEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpeEncoder").field("pre", &self.pre_name).field("regexes", &self.pre.regexes).field("ignore_merges", &self.pre.ignore_merges).finish_non_exhaustive()
    }
}

impl BpeEncoder {
    /// Builds the `tokenizers` pipeline from the token texts and merges.
    /// Each merge must be two token texts separated by a space (the first
    /// space after the first character) whose concatenation is a token too.
    pub(crate) fn new(texts: &TextIndex, merges: &[String], pre_name: &str, pre: &'static PreTokenizer) -> Result<BpeEncoder, TokenizerError> {
        let n = texts.len();
        let vocab: HfVocab = (0..n as u32).map(|id| (texts.get(id).to_string(), id)).collect();

        let mut pairs: Vec<(String, String)> = Vec::with_capacity(merges.len());
        let mut seen = std::collections::HashSet::with_capacity(merges.len());
        let mut joined = String::new();
        for (index, merge) in merges.iter().enumerate() {
            let bad = |reason: String| TokenizerError::BadMerge { index, merge: merge.clone(), reason };
            // The separator is the first space after the first character, so
            // that a left part starting with a space stays whole.
            let first_len = merge.chars().next().map_or(0, char::len_utf8);
            let Some(sep) = merge.get(first_len..).and_then(|rest| rest.find(' ')).map(|p| p + first_len) else {
                return Err(bad("no space separates its two parts".into()));
            };
            let (left, right) = (&merge[..sep], &merge[sep + 1..]);
            for part in [left, right] {
                if texts.lookup(part.as_bytes()).is_none() {
                    return Err(bad(format!("{part:?} is not a token")));
                }
            }
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            if texts.lookup(joined.as_bytes()).is_none() {
                return Err(bad(format!("the merged text {joined:?} is not a token")));
            }
            // llama.cpp keeps the first rank of a repeated merge.
            if seen.insert((left, right)) {
                pairs.push((left.to_string(), right.to_string()));
            }
        }

        let library = |operation: &'static str| move |e: Box<dyn std::error::Error + Send + Sync>| TokenizerError::HfLibrary { operation, message: e.to_string() };
        let model = BPE::builder().vocab_and_merges(vocab, pairs).ignore_merges(pre.ignore_merges).build().map_err(library("build the BPE model"))?;
        let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(pre.regexes.len() + 1);
        for re in pre.regexes {
            let split = Split::new(SplitPattern::Regex((*re).to_string()), SplitDelimiterBehavior::Isolated, false).map_err(library("compile a pre-tokenizer regex"))?;
            steps.push(split.into());
        }
        steps.push(ByteLevel::new(false, false, false).into());
        let mut hf = tokenizers::Tokenizer::new(model);
        hf.with_pre_tokenizer(Some(Sequence::new(steps)));
        hf.with_decoder(Some(ByteLevel::new(false, false, false)));

        let mut byte_tokens = [None; 256];
        let mut buf = [0u8; 4];
        for (slot, c) in byte_tokens.iter_mut().zip(byte_chars()) {
            *slot = texts.lookup(c.encode_utf8(&mut buf).as_bytes());
        }

        Ok(BpeEncoder { hf, pre, pre_name: pre_name.to_string(), byte_tokens })
    }

    /// Appends the tokens of one raw fragment (no special tokens in it).
    pub(crate) fn encode(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        match self.hf.encode_fast(text, false) {
            Ok(enc) => out.extend_from_slice(enc.get_ids()),
            // Not expected: the pipeline has no unknown token to miss and
            // regexes that compiled. Keep the bytes rather than lose text.
            Err(_) => out.extend(text.bytes().filter_map(|b| self.byte_tokens[b as usize])),
        }
    }

    /// The words the pre-tokenizer splits `text` into, in the byte-level
    /// alphabet (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn pre_tokenize(&self, text: &str) -> Vec<String> {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
        let mut pts = PreTokenizedString::from(text);
        if let Some(p) = self.hf.get_pre_tokenizer() {
            if p.pre_tokenize(&mut pts).is_err() {
                return Vec::new();
            }
        }
        pts.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|(s, _, _)| s.to_string()).collect()
    }

    /// `tokenizers`' own decoding (its `ByteLevel` decoder), for cross-checks.
    #[cfg(test)]
    pub(crate) fn hf_decode(&self, ids: &[u32]) -> Option<String> {
        self.hf.decode(ids, false).ok()
    }
}

/// llama.cpp's `clean_spaces` pass over detokenized bytes: removes a space
/// before `?`, `!`, `.` or `,`; turns `" ' "` into `"'"`; removes the space
/// before `'s`, `'m`, `'re` and `'ve` (not before `'t`, `'d`, `'ll`).
pub(crate) fn clean_spaces(text: &mut Vec<u8>) {
    // 1. " ?", " !", " .", " ,"
    let mut out = Vec::with_capacity(text.len());
    for (i, &c) in text.iter().enumerate() {
        let next = text.get(i + 1).copied();
        if c == b' ' && matches!(next, Some(b'?' | b'!' | b'.' | b',')) {
            continue;
        }
        out.push(c);
    }

    // 2. " ' " -> "'": both spaces go; the removed second space no longer
    // counts as a space before what follows it.
    let src = std::mem::take(&mut out);
    let mut i = 0;
    let mut prev_removed = false;
    while i < src.len() {
        let c = src[i];
        let prev_space = i > 0 && !prev_removed && src[i - 1] == b' ';
        prev_removed = false;
        if c == b'\'' && prev_space && src.get(i + 1) == Some(&b' ') {
            out.pop();
            out.push(c);
            i += 2;
            prev_removed = true;
            continue;
        }
        out.push(c);
        i += 1;
    }

    // 3. " 's", " 'm", " 're", " 've" lose the space.
    let src = std::mem::take(&mut out);
    for (i, &c) in src.iter().enumerate() {
        if c == b'\'' && i > 0 && src[i - 1] == b' ' {
            let x1 = src.get(i + 1).copied();
            let x2 = src.get(i + 2).copied();
            let drop = matches!((x1, x2), (Some(b's' | b'm'), _) | (Some(b'r' | b'v'), Some(b'e')));
            if drop {
                out.pop();
            }
        }
        out.push(c);
    }
    *text = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_is_gpt2s() {
        let chars = byte_chars();
        // Known anchors of GPT-2's table.
        assert_eq!(chars[b' ' as usize], 'Ġ');
        assert_eq!(chars[b'\n' as usize], 'Ċ');
        assert_eq!(chars[b'\t' as usize], 'ĉ');
        assert_eq!(chars[0], 'Ā');
        assert_eq!(chars[0x7F], 'ġ');
        assert_eq!(chars[0xAD], 'Ń');
        assert_eq!(chars[b'a' as usize], 'a');
        assert_eq!(chars[0xE9], 'é');
        // A bijection onto 256 distinct characters, inverted by char_byte.
        let distinct: std::collections::HashSet<char> = chars.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
        for (b, &c) in chars.iter().enumerate() {
            assert_eq!(char_byte(c), Some(b as u8), "{c:?}");
        }
        assert_eq!(char_byte(' '), None);
        assert_eq!(char_byte('\u{144}'), None); // one past the last shifted char
        assert_eq!(char_byte('日'), None);
        // The same alphabet as the `tokenizers` crate's ByteLevel.
        let hf = ByteLevel::alphabet();
        assert_eq!(hf, distinct.into_iter().collect());
    }

    #[test]
    fn undecodable_characters_are_marked_like_llama_cpp() {
        let mut out = Vec::new();
        decode_token_text("Ġa", &mut out);
        assert_eq!(out, b" a");
        out.clear();
        decode_token_text("a日", &mut out);
        assert_eq!(out, b"a[UNK_BYTE_0xe697a5a\xe6\x97\xa5]");
    }

    #[test]
    fn pre_tokenizer_names() {
        assert_eq!(find_pre("qwen2").map(|p| p.regexes), Some(&[regex::QWEN2][..]));
        let l3 = find_pre("llama-bpe").expect("llama-bpe");
        assert!(l3.ignore_merges && l3.add_bos && l3.clean_spaces);
        assert!(find_pre("qwen").is_none());
        // Every name once.
        let mut names: Vec<&str> = PRE_TOKENIZERS.iter().flat_map(|p| p.names.iter().copied()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(known_pre_names().contains("gpt-2"));
    }

    #[test]
    fn every_regex_compiles() {
        for p in PRE_TOKENIZERS {
            for re in p.regexes {
                assert!(Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false).is_ok(), "{re}");
            }
        }
    }

    #[test]
    fn clean_spaces_like_llama_cpp() {
        let clean = |s: &str| {
            let mut v = s.as_bytes().to_vec();
            clean_spaces(&mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(clean("Hello , world . Yes ? No !"), "Hello, world. Yes? No!");
        assert_eq!(clean(" ."), ".");
        assert_eq!(clean("a ' b"), "a'b");
        assert_eq!(clean("a ' ' b"), "a'' b");
        assert_eq!(clean("it 's I 'm we 're you 've"), "it's I'm we're you've");
        assert_eq!(clean("don 't I 'd we 'll"), "don 't I 'd we 'll");
        assert_eq!(clean("x 'r"), "x 'r");
        assert_eq!(clean("'s"), "'s");
        assert_eq!(clean(""), "");
        assert_eq!(clean("no change here"), "no change here");
    }
}
