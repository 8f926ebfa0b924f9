//! The BPE model of `tokenizer.json` (`"model": {"type": "BPE", ...}`).
//!
//! A word is split into characters (each looked up in the vocabulary, with
//! byte fallback or the unknown token for characters that are not), then
//! adjacent symbols are merged by merge rank. The merge loop is the
//! `tokenizers` crate's: a min-heap of candidate merges keyed by (rank,
//! position) over a doubly linked list of symbols, where a popped candidate
//! is applied if the pair now at its position still merges into the same
//! token. Reproducing that exact procedure (rather than "lowest rank first"
//! in the abstract) keeps the output identical even for merge tables where a
//! stale candidate can be revived by a different pair with the same result.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::vocab::Vocab;
use crate::fxhash::FxHashMap;
use crate::TokenizerError;

const NONE: usize = usize::MAX;

/// Options of the BPE model other than the vocabulary and merges.
#[derive(Debug, Clone, Default)]
pub(crate) struct BpeOptions {
    pub unk_token: Option<String>,
    pub continuing_subword_prefix: Option<String>,
    pub end_of_word_suffix: Option<String>,
    pub fuse_unk: bool,
    pub byte_fallback: bool,
    pub ignore_merges: bool,
}

/// The BPE model.
#[derive(Debug)]
pub(crate) struct Bpe {
    vocab: Vocab,
    /// `(left << 32 | right)` -> `(rank, merged id)`.
    merges: FxHashMap<u64, (u32, u32)>,
    opts: BpeOptions,
    /// Id of `unk_token` in the vocabulary (`None` also when there is no unk token).
    unk_id: Option<u32>,
    /// Id of the `<0xNN>` token of every byte, `u32::MAX` where absent.
    byte_ids: [u32; 256],
}

#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: usize,
    next: usize,
    /// Byte length; 0 once merged into its left neighbour.
    len: usize,
}

#[inline]
fn pair_key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

impl Bpe {
    /// Builds the model. `merges` are `(left, right)` token texts in rank order.
    pub(crate) fn new<'a>(
        vocab: Vocab,
        merges: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
        opts: BpeOptions,
    ) -> Result<Bpe, TokenizerError> {
        let prefix = opts.continuing_subword_prefix.as_deref().unwrap_or("");
        let mut map: FxHashMap<u64, (u32, u32)> = FxHashMap::default();
        map.reserve(merges.len());
        // Resolved in chunks so that the vocabulary lookups of a chunk overlap
        // their cache misses (see `Vocab::ids_batch`).
        const CHUNK: usize = 256;
        let mut chunk: Vec<(&str, &str)> = Vec::with_capacity(CHUNK);
        let mut keys: Vec<&str> = Vec::with_capacity(2 * CHUNK);
        let mut ids: Vec<Option<u32>> = Vec::with_capacity(2 * CHUNK);
        let mut joined = String::new();
        let mut joined_ends: Vec<usize> = Vec::with_capacity(CHUNK);
        let mut new_ids: Vec<Option<u32>> = Vec::with_capacity(CHUNK);
        let mut merges = merges.peekable();
        let mut rank = 0usize;
        while merges.peek().is_some() {
            chunk.clear();
            chunk.extend(merges.by_ref().take(CHUNK));
            keys.clear();
            for &(a, b) in &chunk {
                keys.push(a);
                keys.push(b);
            }
            ids.clear();
            vocab.ids_batch(&keys, &mut ids);
            joined.clear();
            joined_ends.clear();
            for (i, &(a, b)) in chunk.iter().enumerate() {
                let missing = |t: &str| {
                    TokenizerError::HfInvalid(format!(
                        "merge #{} ({a:?}, {b:?}): token {t:?} is not in model.vocab",
                        rank + i
                    ))
                };
                if ids[2 * i].is_none() {
                    return Err(missing(a));
                }
                if ids[2 * i + 1].is_none() {
                    return Err(missing(b));
                }
                let b_rest = b.strip_prefix(prefix).ok_or_else(|| {
                    TokenizerError::HfInvalid(format!(
                        "merge #{} ({a:?}, {b:?}): the right token lacks the \
                         continuing_subword_prefix {prefix:?}",
                        rank + i
                    ))
                })?;
                joined.push_str(a);
                joined.push_str(b_rest);
                joined_ends.push(joined.len());
            }
            let mut merged: Vec<&str> = Vec::with_capacity(chunk.len());
            let mut start = 0;
            for &end in &joined_ends {
                merged.push(&joined[start..end]);
                start = end;
            }
            new_ids.clear();
            vocab.ids_batch(&merged, &mut new_ids);
            for (i, &(a, b)) in chunk.iter().enumerate() {
                let (Some(a_id), Some(b_id)) = (ids[2 * i], ids[2 * i + 1]) else {
                    continue; // unreachable: checked above
                };
                let new_id = new_ids[i].ok_or_else(|| {
                    TokenizerError::HfInvalid(format!(
                        "merge #{} ({a:?}, {b:?}): token {:?} is not in model.vocab",
                        rank + i,
                        merged[i]
                    ))
                })?;
                let r = u32::try_from(rank + i)
                    .map_err(|_| TokenizerError::HfInvalid("more than 2^32 merges".to_string()))?;
                // A repeated pair keeps its last rank, as in `tokenizers`.
                map.insert(pair_key(a_id, b_id), (r, new_id));
            }
            rank += chunk.len();
        }
        let unk_id = opts.unk_token.as_deref().and_then(|u| vocab.id(u));
        let mut byte_ids = [u32::MAX; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            if let Some(id) = vocab.id(&format!("<0x{b:02X}>")) {
                *slot = id;
            }
        }
        Ok(Bpe {
            vocab,
            merges: map,
            opts,
            unk_id,
            byte_ids,
        })
    }

    /// The vocabulary.
    pub(crate) fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// Id of the unknown token, if the model has one in its vocabulary.
    pub(crate) fn unk_id(&self) -> Option<u32> {
        self.unk_id
    }

    /// Number of merges (distinct pairs).
    pub(crate) fn merge_count(&self) -> usize {
        self.merges.len()
    }

    /// Tokenizes one pre-tokenized word, appending ids to `out`.
    pub(crate) fn tokenize(&self, word: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        if word.is_empty() {
            return Ok(());
        }
        if self.opts.ignore_merges {
            if let Some(id) = self.vocab.id(word) {
                out.push(id);
                return Ok(());
            }
        }
        let mut syms = self.initial_symbols(word)?;
        self.merge_all(&mut syms);
        out.extend(syms.iter().filter(|s| s.len != 0).map(|s| s.id));
        Ok(())
    }

    /// One symbol per character (or per byte with byte fallback, or one per
    /// run of unknown characters with `fuse_unk`).
    fn initial_symbols(&self, word: &str) -> Result<Vec<Symbol>, TokenizerError> {
        let mut syms: Vec<Symbol> = Vec::with_capacity(word.len());
        let add = |syms: &mut Vec<Symbol>, id: u32, len: usize| {
            let n = syms.len();
            if let Some(last) = syms.last_mut() {
                last.next = n;
            }
            syms.push(Symbol {
                id,
                prev: if n == 0 { NONE } else { n - 1 },
                next: NONE,
                len,
            });
        };
        let prefix = self.opts.continuing_subword_prefix.as_deref();
        let suffix = self.opts.end_of_word_suffix.as_deref();
        // Pending unknown token: (id, byte length).
        let mut unk: Option<(u32, usize)> = None;
        for (i, c) in word.char_indices() {
            let byte_len = c.len_utf8();
            let ch = &word[i..i + byte_len];
            let is_first = i == 0;
            let is_last = i + byte_len == word.len();
            let s: Cow<'_, str> = match (prefix.filter(|_| !is_first), suffix.filter(|_| is_last)) {
                (None, None) => Cow::Borrowed(ch),
                (p, q) => Cow::Owned(format!("{}{ch}{}", p.unwrap_or(""), q.unwrap_or(""))),
            };
            if let Some(id) = self.vocab.id(&s) {
                if let Some((uid, ulen)) = unk.take() {
                    add(&mut syms, uid, ulen);
                }
                add(&mut syms, id, byte_len);
                continue;
            }
            if self.opts.byte_fallback && s.bytes().all(|b| self.byte_ids[b as usize] != u32::MAX) {
                // Like `tokenizers`, a pending unknown token is not flushed
                // here: it lands after these byte tokens.
                for b in s.bytes() {
                    add(&mut syms, self.byte_ids[b as usize], 1);
                }
                continue;
            }
            if let Some(unk_text) = &self.opts.unk_token {
                let unk_id = self.unk_id.ok_or_else(|| {
                    TokenizerError::HfInvalid(format!(
                        "model.unk_token {unk_text:?} is not in model.vocab"
                    ))
                })?;
                unk = match unk {
                    Some((uid, ulen)) if self.opts.fuse_unk => Some((uid, ulen + byte_len)),
                    Some((uid, ulen)) => {
                        add(&mut syms, uid, ulen);
                        Some((unk_id, byte_len))
                    }
                    None => Some((unk_id, byte_len)),
                };
            }
            // Without an unknown token the character is dropped, as in `tokenizers`.
        }
        if let Some((uid, ulen)) = unk {
            add(&mut syms, uid, ulen);
        }
        Ok(syms)
    }

    fn merge_all(&self, syms: &mut [Symbol]) {
        // Min-heap on (rank, position); the merged id rides along.
        let mut heap: BinaryHeap<Reverse<(u32, usize, u32)>> =
            BinaryHeap::with_capacity(syms.len());
        for (pos, w) in syms.windows(2).enumerate() {
            if let Some(&(rank, new_id)) = self.merges.get(&pair_key(w[0].id, w[1].id)) {
                heap.push(Reverse((rank, pos, new_id)));
            }
        }
        while let Some(Reverse((_, pos, new_id))) = heap.pop() {
            let cur = syms[pos];
            if cur.len == 0 || cur.next == NONE {
                continue;
            }
            let right = syms[cur.next];
            // Skip candidates made stale by earlier merges.
            match self.merges.get(&pair_key(cur.id, right.id)) {
                Some(&(_, id)) if id == new_id => {}
                _ => continue,
            }
            let removed = cur.next;
            syms[pos].id = new_id;
            syms[pos].len += right.len;
            syms[pos].next = right.next;
            syms[removed].len = 0;
            if right.next != NONE {
                syms[right.next].prev = pos;
            }
            let cur = syms[pos];
            if cur.prev != NONE {
                let prev = syms[cur.prev];
                if let Some(&(rank, id)) = self.merges.get(&pair_key(prev.id, cur.id)) {
                    heap.push(Reverse((rank, cur.prev, id)));
                }
            }
            if cur.next != NONE {
                let next = syms[cur.next];
                if let Some(&(rank, id)) = self.merges.get(&pair_key(cur.id, next.id)) {
                    heap.push(Reverse((rank, pos, id)));
                }
            }
        }
    }
}
