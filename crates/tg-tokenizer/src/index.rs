//! Token texts in one buffer, with an open-addressing text -> id table.
//!
//! The merge loop looks up roughly three candidate strings per input
//! character, so this lookup is the tokenizer's hot path. Compared with a
//! `HashMap<Box<[u8]>, u32>` this avoids one heap allocation per token at
//! load time and, at lookup time, rejects most misses on a 32-bit hash tag
//! stored in the slot without touching the token text.

use std::hash::Hasher;

use crate::fxhash::FxHasher;

const EMPTY: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    tag: u32,
    id: u32,
}

/// All token texts plus the lookup table.
pub(crate) struct TextIndex {
    /// Concatenated token texts; token `i` is `text[offsets[i]..offsets[i + 1]]`.
    text: String,
    offsets: Vec<usize>,
    slots: Vec<Slot>,
    mask: usize,
}

impl std::fmt::Debug for TextIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextIndex")
            .field("tokens", &self.len())
            .field("text_bytes", &self.text.len())
            .field("slots", &self.slots.len())
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

/// Result of inserting a text.
pub(crate) enum Insert {
    /// New text, assigned the next id.
    New,
    /// The text already belongs to this id.
    Duplicate(u32),
}

impl TextIndex {
    /// An empty index sized for `n` tokens.
    pub(crate) fn with_capacity(n: usize, total_bytes: usize) -> TextIndex {
        let cap = (n.max(1) * 2).next_power_of_two();
        TextIndex {
            text: String::with_capacity(total_bytes),
            offsets: {
                let mut v = Vec::with_capacity(n + 1);
                v.push(0);
                v
            },
            slots: vec![Slot { tag: 0, id: EMPTY }; cap],
            mask: cap - 1,
        }
    }

    /// Number of tokens.
    pub(crate) fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Appends a token text with the next id, unless the text is present.
    /// The caller keeps the count below `u32::MAX` and within the capacity
    /// given to `with_capacity`.
    pub(crate) fn push(&mut self, s: &str) -> Insert {
        debug_assert!(self.len() < self.slots.len() / 2);
        let h = hash(s.as_bytes());
        let tag = (h >> 32) as u32;
        let mut i = h as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot.id == EMPTY {
                break;
            }
            if slot.tag == tag && self.get(slot.id).as_bytes() == s.as_bytes() {
                return Insert::Duplicate(slot.id);
            }
            i = (i + 1) & self.mask;
        }
        let id = self.len() as u32;
        self.slots[i] = Slot { tag, id };
        self.text.push_str(s);
        self.offsets.push(self.text.len());
        Insert::New
    }

    /// Text of token `id`; `id` must be below `len()`.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> &str {
        let i = id as usize;
        // Offsets are boundaries between whole strings pushed by `push`.
        self.text
            .get(self.offsets[i]..self.offsets[i + 1])
            .unwrap_or_default()
    }

    /// The id of the token with exactly this text.
    #[inline]
    pub(crate) fn lookup(&self, bytes: &[u8]) -> Option<u32> {
        let h = hash(bytes);
        let tag = (h >> 32) as u32;
        let mut i = h as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot.id == EMPTY {
                return None;
            }
            if slot.tag == tag {
                let id = slot.id as usize;
                if &self.text.as_bytes()[self.offsets[id]..self.offsets[id + 1]] == bytes {
                    return Some(slot.id);
                }
            }
            i = (i + 1) & self.mask;
        }
    }
}
