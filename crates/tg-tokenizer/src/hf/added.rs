//! Added tokens (`"added_tokens"` of `tokenizer.json`): registration with the
//! ids the `tokenizers` crate assigns, and leftmost-longest matching in text.

use std::sync::OnceLock;

use super::normalizer::Normalizer;
use super::vocab::Vocab;
use crate::fxhash::FxHashMap;
use crate::TokenizerError;

/// One `added_tokens` entry as written in the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct RawAddedToken {
    pub id: u32,
    pub content: String,
    pub single_word: bool,
    pub lstrip: bool,
    pub rstrip: bool,
    pub normalized: bool,
    pub special: bool,
}

/// A registered added token.
#[derive(Debug, Clone)]
pub(crate) struct AddedToken {
    pub id: u32,
    pub content: String,
    pub single_word: bool,
    pub lstrip: bool,
    pub rstrip: bool,
    pub normalized: bool,
    pub special: bool,
    /// The normalized content, when `normalized` and the normalizer changes it:
    /// what is matched in normalized text and what decoding renders.
    pub normalized_content: Option<String>,
}

impl AddedToken {
    fn same_flags(&self, t: &RawAddedToken) -> bool {
        self.content == t.content
            && self.single_word == t.single_word
            && self.lstrip == t.lstrip
            && self.rstrip == t.rstrip
            && self.normalized == t.normalized
            && self.special == t.special
    }

    /// Text used for decoding (`simple_id_to_token` in `tokenizers`).
    pub(crate) fn decode_text(&self) -> &str {
        self.normalized_content.as_deref().unwrap_or(&self.content)
    }
}

/// A byte trie over token texts, for leftmost-longest matching.
#[derive(Debug, Default)]
struct Trie {
    /// Node 0 is the root. Children are sorted by byte.
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Default)]
struct TrieNode {
    children: Vec<(u8, u32)>,
    /// Added token id ending here.
    value: Option<u32>,
}

impl Trie {
    fn insert(&mut self, pattern: &str, id: u32) -> Result<(), u32> {
        if self.nodes.is_empty() {
            self.nodes.push(TrieNode::default());
        }
        let mut node = 0usize;
        for &b in pattern.as_bytes() {
            node = match self.nodes[node].children.binary_search_by_key(&b, |c| c.0) {
                Ok(k) => self.nodes[node].children[k].1 as usize,
                Err(k) => {
                    let new = self.nodes.len();
                    self.nodes.push(TrieNode::default());
                    self.nodes[node].children.insert(k, (b, new as u32));
                    new
                }
            };
        }
        match self.nodes[node].value {
            Some(other) => Err(other),
            None => {
                self.nodes[node].value = Some(id);
                Ok(())
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The longest pattern starting at `text[start..]`: (end, id).
    #[inline]
    fn longest_at(&self, text: &[u8], start: usize) -> Option<(usize, u32)> {
        let mut node = 0usize;
        let mut best = None;
        for (i, &b) in text[start..].iter().enumerate() {
            let children = &self.nodes[node].children;
            match children.binary_search_by_key(&b, |c| c.0) {
                Ok(k) => node = children[k].1 as usize,
                Err(_) => break,
            }
            if let Some(id) = self.nodes[node].value {
                best = Some((start + i + 1, id));
            }
        }
        best
    }

    /// Non-overlapping leftmost-longest matches: (start, end, id).
    fn find_iter<'a>(&'a self, text: &'a str) -> impl Iterator<Item = (usize, usize, u32)> + 'a {
        let bytes = text.as_bytes();
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            if self.nodes.is_empty() {
                return None;
            }
            while pos < bytes.len() {
                if let Some((end, id)) = self.longest_at(bytes, pos) {
                    let start = pos;
                    pos = end;
                    return Some((start, end, id));
                }
                // Patterns are whole UTF-8 strings, so matches start on char boundaries.
                pos += 1;
                while pos < bytes.len() && (bytes[pos] & 0xC0) == 0x80 {
                    pos += 1;
                }
            }
            None
        })
    }
}

/// A piece of text after splitting on added tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Split {
    /// Plain text `text[start..end]`.
    Text(usize, usize),
    /// An added token (covering `text[start..end]`, spaces stripped by
    /// `lstrip`/`rstrip` included).
    Token(u32, usize, usize),
}

/// All added tokens.
#[derive(Debug, Default)]
pub(crate) struct AddedVocab {
    by_id: FxHashMap<u32, AddedToken>,
    by_content: FxHashMap<String, u32>,
    special_contents: FxHashMap<String, ()>,
    /// Tokens with `normalized: false`, matched in the raw input.
    raw: Trie,
    /// Tokens with `normalized: true`, matched (in normalized form) in normalized text.
    normalized: Trie,
}

/// `\w` of the `regex` crate (what `tokenizers` uses for `single_word`).
fn is_word_char(c: char) -> bool {
    static WORD: OnceLock<Option<regex::Regex>> = OnceLock::new();
    match WORD.get_or_init(|| regex::Regex::new(r"\w").ok()) {
        Some(re) => {
            let mut buf = [0u8; 4];
            re.is_match(c.encode_utf8(&mut buf))
        }
        None => c.is_alphanumeric() || c == '_',
    }
}

impl AddedVocab {
    /// Registers the file's added tokens the way `tokenizers` does when it
    /// loads a `tokenizer.json`: a token whose text is in the model
    /// vocabulary (or was added before) gets that id, any other one the next
    /// free id after the model vocabulary; the `id` written in the file is not
    /// used (`tokenizers` only warns when it differs). Empty contents are
    /// ignored.
    pub(crate) fn new(
        raw_tokens: Vec<RawAddedToken>,
        vocab: &Vocab,
        normalizer: Option<&Normalizer>,
    ) -> Result<AddedVocab, TokenizerError> {
        let mut av = AddedVocab::default();
        let vocab_size = vocab.len() as u64;
        let mut next_id: u64 = vocab_size;
        for t in raw_tokens {
            if t.content.is_empty() {
                continue;
            }
            if let Some(id) = av.by_content.get(&t.content) {
                if av.by_id.get(id).is_some_and(|old| old.same_flags(&t)) {
                    continue;
                }
            }
            let id = match av
                .by_content
                .get(&t.content)
                .copied()
                .or_else(|| vocab.id(&t.content))
            {
                Some(id) => id,
                None => {
                    let id = u32::try_from(next_id).map_err(|_| {
                        TokenizerError::HfInvalid("added token ids exceed u32".to_string())
                    })?;
                    next_id += 1;
                    id
                }
            };
            let normalized_content = match normalizer {
                Some(n) if t.normalized => {
                    let s = n.normalize(&t.content);
                    (s != t.content).then_some(s)
                }
                _ => None,
            };
            av.by_content.insert(t.content.clone(), id);
            if t.special {
                av.special_contents.insert(t.content.clone(), ());
            }
            av.by_id.insert(
                id,
                AddedToken {
                    id,
                    content: t.content,
                    single_word: t.single_word,
                    lstrip: t.lstrip,
                    rstrip: t.rstrip,
                    normalized: t.normalized,
                    special: t.special,
                    normalized_content,
                },
            );
        }
        let mut ids: Vec<u32> = av.by_id.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let t = &av.by_id[&id];
            let (trie, pattern) = if t.normalized {
                (&mut av.normalized, t.decode_text())
            } else {
                (&mut av.raw, t.content.as_str())
            };
            if pattern.is_empty() {
                return Err(TokenizerError::HfInvalid(format!(
                    "added token {:?} (id {id}) normalizes to an empty string",
                    t.content
                )));
            }
            if let Err(other) = trie.insert(pattern, id) {
                return Err(TokenizerError::HfInvalid(format!(
                    "added tokens {other} and {id} both match the text {pattern:?}"
                )));
            }
        }
        Ok(av)
    }

    /// Number of added tokens.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The added token with this id.
    pub(crate) fn get(&self, id: u32) -> Option<&AddedToken> {
        self.by_id.get(&id)
    }

    /// The id of the added token with this content.
    pub(crate) fn id(&self, content: &str) -> Option<u32> {
        self.by_content.get(content).copied()
    }

    /// All added tokens, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &AddedToken> {
        self.by_id.values()
    }

    /// Contents of all added tokens (for the vocabulary size with added tokens).
    pub(crate) fn contents(&self) -> impl Iterator<Item = &str> {
        self.by_content.keys().map(String::as_str)
    }

    /// Whether `text` is the content of a special added token.
    pub(crate) fn is_special_text(&self, text: &str) -> bool {
        self.special_contents.contains_key(text)
    }

    /// Whether any token is matched in raw (non-normalized) text.
    pub(crate) fn has_raw(&self) -> bool {
        !self.raw.is_empty()
    }

    /// Whether any token is matched in normalized text.
    pub(crate) fn has_normalized(&self) -> bool {
        !self.normalized.is_empty()
    }

    /// Splits raw input on the tokens with `normalized: false`.
    pub(crate) fn split_raw(&self, text: &str, parse_special: bool, out: &mut Vec<Split>) {
        self.split(&self.raw, text, parse_special, out);
    }

    /// Splits normalized text on the tokens with `normalized: true`.
    pub(crate) fn split_normalized(&self, text: &str, parse_special: bool, out: &mut Vec<Split>) {
        self.split(&self.normalized, text, parse_special, out);
    }

    /// `AddedVocabulary::find_matches` of `tokenizers`: leftmost-longest
    /// matches, then per token `single_word` (discard a match touching word
    /// characters), `lstrip`/`rstrip` (absorb adjacent whitespace). Matches of
    /// special tokens are discarded when `!parse_special`; a discarded match
    /// still consumes its text (no shorter token is looked for inside it).
    /// The pieces cover `text`; empty pieces are not emitted.
    fn split(&self, trie: &Trie, text: &str, parse_special: bool, out: &mut Vec<Split>) {
        let mut start_offset = 0usize;
        for (mut start, mut stop, id) in trie.find_iter(text) {
            let Some(t) = self.by_id.get(&id) else {
                continue;
            };
            if !parse_special && self.special_contents.contains_key(&t.content) {
                continue;
            }
            if t.single_word {
                let start_space =
                    start == 0 || !text[..start].chars().next_back().is_some_and(is_word_char);
                let stop_space =
                    stop == text.len() || !text[stop..].chars().next().is_some_and(is_word_char);
                if !start_space || !stop_space {
                    continue;
                }
            }
            if t.lstrip {
                let trimmed = text[..start].trim_end_matches(char::is_whitespace).len();
                start = trimmed.max(start_offset);
            }
            if t.rstrip {
                let rest = &text[stop..];
                stop += rest.len() - rest.trim_start_matches(char::is_whitespace).len();
            }
            if start_offset < start {
                out.push(Split::Text(start_offset, start));
            }
            out.push(Split::Token(id, start, stop));
            start_offset = stop;
        }
        if start_offset < text.len() {
            out.push(Split::Text(start_offset, text.len()));
        }
    }
}
