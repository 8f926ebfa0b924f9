//! The BPE model vocabulary: token texts in one buffer, an open-addressing
//! text -> id table and an id -> text table. Ids come from the file and may
//! have gaps.

use std::hash::Hasher;

use crate::fxhash::FxHasher;
use crate::TokenizerError;

const EMPTY: u32 = u32::MAX;

/// Largest accepted id table relative to the number of tokens; ids sparser
/// than this would make the id -> text table mostly holes.
const MAX_ID_SLACK: usize = 1 << 20;

#[derive(Clone, Copy)]
struct Slot {
    tag: u32,
    /// Token id, or `EMPTY`.
    id: u32,
    /// The token's text is `text[start..start + len]`.
    start: u32,
    len: u32,
}

const EMPTY_SLOT: Slot = Slot {
    tag: 0,
    id: EMPTY,
    start: 0,
    len: 0,
};

#[derive(Clone, Copy)]
struct Entry {
    id: u32,
    start: u32,
    end: u32,
}

/// Builder: texts are appended as the JSON object is read.
#[derive(Default)]
pub(crate) struct VocabBuilder {
    text: String,
    entries: Vec<Entry>,
}

impl VocabBuilder {
    /// Appends one `text: id` entry.
    pub(crate) fn push(&mut self, text: &str, id: u32) -> Result<(), TokenizerError> {
        let start = self.text.len();
        let end = start + text.len();
        let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(end)) else {
            return Err(TokenizerError::HfInvalid(
                "the vocabulary texts exceed 4 GiB".to_string(),
            ));
        };
        self.text.push_str(text);
        self.entries.push(Entry { id, start, end });
        Ok(())
    }

    /// Builds the lookup tables. Duplicate texts and duplicate ids are errors.
    pub(crate) fn build(self) -> Result<Vocab, TokenizerError> {
        let n = self.entries.len();
        if n >= EMPTY as usize {
            return Err(TokenizerError::VocabTooLarge(n));
        }
        let max_id = self.entries.iter().map(|e| e.id).max();
        let id_len = max_id.map_or(0, |m| m as usize + 1);
        if id_len > n.saturating_mul(4).saturating_add(MAX_ID_SLACK) {
            return Err(TokenizerError::HfInvalid(format!(
                "model.vocab has {n} tokens but ids up to {}; ids this sparse are not supported",
                id_len - 1
            )));
        }
        let cap = (n.max(1) * 2).next_power_of_two();
        let mut v = Vocab {
            text: self.text,
            slots: vec![EMPTY_SLOT; cap],
            mask: cap - 1,
            by_id: vec![(EMPTY, 0); id_len],
            len: n,
        };
        for e in &self.entries {
            let s = &v.text[e.start as usize..e.end as usize];
            let h = hash(s.as_bytes());
            let tag = (h >> 32) as u32;
            let mut k = h as usize & v.mask;
            loop {
                let slot = v.slots[k];
                if slot.id == EMPTY {
                    break;
                }
                if slot.tag == tag && v.slot_text(slot) == s {
                    return Err(TokenizerError::HfInvalid(format!(
                        "model.vocab lists the token {s:?} twice (ids {} and {})",
                        slot.id, e.id
                    )));
                }
                k = (k + 1) & v.mask;
            }
            v.slots[k] = Slot {
                tag,
                id: e.id,
                start: e.start,
                len: e.end - e.start,
            };
            let by_id = &mut v.by_id[e.id as usize];
            if by_id.0 != EMPTY {
                let other = &v.text[by_id.0 as usize..(by_id.0 + by_id.1) as usize];
                return Err(TokenizerError::HfInvalid(format!(
                    "model.vocab gives id {} to both {other:?} and {s:?}",
                    e.id
                )));
            }
            *by_id = (e.start, e.end - e.start);
        }
        Ok(v)
    }
}

/// The model vocabulary.
pub(crate) struct Vocab {
    text: String,
    slots: Vec<Slot>,
    mask: usize,
    /// id -> (start, len) of its text, start `EMPTY` for ids not in the vocabulary.
    by_id: Vec<(u32, u32)>,
    len: usize,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocab")
            .field("tokens", &self.len())
            .field("text_bytes", &self.text.len())
            .finish()
    }
}

#[inline]
fn hash(bytes: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(bytes);
    h.write_usize(bytes.len());
    h.finish()
}

impl Vocab {
    #[inline]
    fn slot_text(&self, slot: Slot) -> &str {
        self.text
            .get(slot.start as usize..(slot.start + slot.len) as usize)
            .unwrap_or_default()
    }

    /// Number of tokens (the `tokenizers` crate's model vocabulary size).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// One more than the largest id (0 when empty).
    pub(crate) fn id_limit(&self) -> usize {
        self.by_id.len()
    }

    /// The id of the token with exactly this text.
    #[inline]
    pub(crate) fn id(&self, s: &str) -> Option<u32> {
        let h = hash(s.as_bytes());
        self.probe(h as usize & self.mask, (h >> 32) as u32, s)
    }

    #[inline]
    fn probe(&self, mut k: usize, tag: u32, s: &str) -> Option<u32> {
        loop {
            let slot = self.slots[k];
            if slot.id == EMPTY {
                return None;
            }
            if slot.tag == tag && slot.len as usize == s.len() && self.slot_text(slot) == s {
                return Some(slot.id);
            }
            k = (k + 1) & self.mask;
        }
    }

    /// `id` for many texts at once: the hash-table reads of all of them are
    /// issued before any is resolved, so their cache misses overlap (this is
    /// what makes building a 500k-merge table fast).
    pub(crate) fn ids_batch(&self, keys: &[&str], out: &mut Vec<Option<u32>>) {
        const B: usize = 16;
        for chunk in keys.chunks(B) {
            let mut first = [EMPTY_SLOT; B];
            let mut pos = [0usize; B];
            let mut tags = [0u32; B];
            for (i, s) in chunk.iter().enumerate() {
                let h = hash(s.as_bytes());
                pos[i] = h as usize & self.mask;
                tags[i] = (h >> 32) as u32;
            }
            for i in 0..chunk.len() {
                first[i] = self.slots[pos[i]];
            }
            // Touch the candidate texts of tag hits (independent loads).
            let mut acc = 0u8;
            for i in 0..chunk.len() {
                let slot = first[i];
                if slot.id != EMPTY && slot.tag == tags[i] {
                    acc ^= self
                        .text
                        .as_bytes()
                        .get(slot.start as usize)
                        .copied()
                        .unwrap_or(0);
                }
            }
            std::hint::black_box(acc);
            for (i, s) in chunk.iter().enumerate() {
                out.push(self.probe(pos[i], tags[i], s));
            }
        }
    }

    /// The text of token `id`, if the vocabulary has that id.
    #[inline]
    pub(crate) fn text(&self, id: u32) -> Option<&str> {
        match self.by_id.get(id as usize) {
            Some(&(start, len)) if start != EMPTY => {
                self.text.get(start as usize..(start + len) as usize)
            }
            _ => None,
        }
    }
}
