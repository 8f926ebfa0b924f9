//! The SentencePiece bigram merge loop for one raw text fragment.
//!
//! The fragment (already whitespace-escaped) starts as one symbol per UTF-8
//! character. Every adjacent pair whose concatenation is a vocabulary entry
//! is a candidate; the candidate with the highest score is merged first, ties
//! going to the leftmost pair. A merge only ever grows the left symbol, so
//! symbol `i` always starts where character `i` started and a candidate can
//! be recognised as stale purely from the symbols' lengths.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::tokenizer::Tokenizer;

const NONE: usize = usize::MAX;

/// Longest fragment merged as a whole; merge candidates store byte sizes and
/// symbol indices as `u32` to halve the heap's footprint. Longer fragments
/// (4 GiB without a newline) are merged in chunks of at most this size, cut
/// at character boundaries.
const MAX_FRAGMENT: usize = u32::MAX as usize;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

/// A merge candidate: symbols `left` and `right` whose joined text (`size`
/// bytes) is a token with score `score`.
#[derive(Clone, Copy)]
struct Bigram {
    score: f32,
    left: u32,
    right: u32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Greater = merged earlier: higher score, then smaller `left`.
    /// Scores are compared with IEEE semantics (`-0.0 == 0.0`, as llama.cpp
    /// does); NaN scores are rejected when the vocabulary is loaded.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Reusable buffers for the merge loop.
#[derive(Default)]
pub(crate) struct SpmSession {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

impl SpmSession {
    /// Appends the tokens of `text` (whitespace already escaped) to `out`;
    /// `byte_tokens[b]` is emitted for a byte `b` left outside every piece.
    pub(crate) fn tokenize(
        &mut self,
        tok: &Tokenizer,
        byte_tokens: &[u32; 256],
        mut text: &str,
        out: &mut Vec<u32>,
    ) {
        while text.len() > MAX_FRAGMENT {
            let mut cut = MAX_FRAGMENT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let (head, tail) = text.split_at(cut);
            self.tokenize_fragment(tok, byte_tokens, head, out);
            text = tail;
        }
        self.tokenize_fragment(tok, byte_tokens, text, out);
    }

    fn tokenize_fragment(
        &mut self,
        tok: &Tokenizer,
        byte_tokens: &[u32; 256],
        text: &str,
        out: &mut Vec<u32>,
    ) {
        self.symbols.clear();
        self.queue.clear();
        if text.is_empty() {
            return;
        }
        let bytes = text.as_bytes();

        for (i, (start, ch)) in text.char_indices().enumerate() {
            self.symbols.push(Symbol {
                start,
                len: ch.len_utf8(),
                prev: if i == 0 { NONE } else { i - 1 },
                next: i + 1,
            });
        }
        if let Some(last) = self.symbols.last_mut() {
            last.next = NONE;
        }

        for i in 1..self.symbols.len() {
            self.try_add_bigram(tok, bytes, i - 1, i);
        }

        while let Some(b) = self.queue.pop() {
            let (bl, br) = (b.left as usize, b.right as usize);
            let left = self.symbols[bl];
            let right = self.symbols[br];
            // Stale: one side was merged away or has grown since the push.
            if left.len == 0 || right.len == 0 || left.len + right.len != b.size as usize {
                continue;
            }
            let left_sym = &mut self.symbols[bl];
            left_sym.len += right.len;
            left_sym.next = right.next;
            let (new_prev, new_next) = (left_sym.prev, left_sym.next);
            self.symbols[br].len = 0;
            if new_next != NONE {
                self.symbols[new_next].prev = bl;
            }
            self.try_add_bigram(tok, bytes, new_prev, bl);
            self.try_add_bigram(tok, bytes, bl, new_next);
        }

        let mut i = 0;
        while i != NONE {
            let s = self.symbols[i];
            let piece = &bytes[s.start..s.start + s.len];
            match tok.lookup(piece) {
                Some(id) => out.push(id),
                None => out.extend(piece.iter().map(|&b| byte_tokens[b as usize])),
            }
            i = s.next;
        }
    }

    fn try_add_bigram(&mut self, tok: &Tokenizer, bytes: &[u8], left: usize, right: usize) {
        if left == NONE || right == NONE {
            return;
        }
        let l = self.symbols[left];
        let r = self.symbols[right];
        let size = l.len + r.len;
        // Adjacent symbols are contiguous in the text.
        let Some(id) = tok.lookup(&bytes[l.start..l.start + size]) else {
            return;
        };
        // Symbol indices and sizes fit in u32: see `MAX_FRAGMENT`.
        self.queue.push(Bigram {
            score: tok.score(id),
            left: left as u32,
            right: right as u32,
            size: size as u32,
        });
    }
}
