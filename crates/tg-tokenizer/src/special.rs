//! Special-token partitioning: splitting raw text at control, unknown and
//! user-defined tokens before the merge loop sees it.
//!
//! The defining procedure (llama.cpp's) is sequential: candidate tokens are
//! taken longest first; for each one, every still-raw fragment is scanned left
//! to right and split at each non-overlapping occurrence. Done literally this
//! costs (number of candidates) × (text length), with thousands of candidates.
//!
//! We compute the same result from the occurrence list instead. One pass over
//! the text with a trie of candidate texts lists every occurrence (overlapping
//! ones included) of every candidate. Occurrences are then replayed grouped by
//! candidate in priority order and by position within a candidate. An
//! occurrence lies inside a single raw fragment exactly when none of its
//! bytes was claimed by an earlier match; such an occurrence is a match and
//! claims its bytes. Processing positions in increasing order reproduces
//! "find the next occurrence after the previous match": an occurrence
//! overlapping an earlier match of the same token, or crossing into a token
//! matched earlier, is skipped, exactly as a fragment-bounded search misses it.

use crate::fxhash::FxHashMap;

/// A piece of the partitioned text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Bytes `start..end` of the input still have to be tokenized.
    Raw { start: usize, end: usize },
    /// A special token matched in the text.
    Token(u32),
}

/// One candidate special token.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    id: u32,
    len: usize,
    /// Only matched when `parse_special` is set (control and unknown tokens).
    needs_parse_special: bool,
}

/// Byte trie over the candidate texts. Node 0 is the root; the root's edges
/// live in a dense table because nearly every text position starts there.
#[derive(Debug)]
pub(crate) struct SpecialMatcher {
    /// Candidates in priority order (length descending, then id ascending).
    candidates: Vec<Candidate>,
    root: Box<[u32; 256]>,
    /// `(node, byte) -> child`, for nodes below the root.
    edges: FxHashMap<(u32, u8), u32>,
    /// Per node: the candidate (priority rank) whose text ends here.
    terminal: Vec<Option<u32>>,
    /// Whether any candidate is matched without `parse_special`.
    any_always: bool,
}

const NO_CHILD: u32 = u32::MAX;

impl SpecialMatcher {
    /// Builds the matcher from `(id, text, needs_parse_special)` triples.
    /// Texts must be non-empty and distinct.
    pub(crate) fn new(specials: impl IntoIterator<Item = (u32, Vec<u8>, bool)>) -> SpecialMatcher {
        let mut list: Vec<(u32, Vec<u8>, bool)> = specials.into_iter().collect();
        // llama.cpp sorts by length only (with an unstable sort); the id
        // tie-break makes our order deterministic. Among equal-length tokens
        // the order only matters when two of them can overlap in a text,
        // which no Gemma special token can.
        list.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));

        let mut m = SpecialMatcher {
            candidates: Vec::with_capacity(list.len()),
            root: Box::new([NO_CHILD; 256]),
            edges: FxHashMap::default(),
            terminal: vec![None],
            any_always: false,
        };
        for (rank, (id, text, needs_parse_special)) in list.into_iter().enumerate() {
            m.any_always |= !needs_parse_special;
            m.candidates.push(Candidate {
                id,
                len: text.len(),
                needs_parse_special,
            });
            let mut node = 0u32;
            for (depth, &b) in text.iter().enumerate() {
                let next_id = m.terminal.len() as u32;
                let slot = if depth == 0 {
                    &mut m.root[b as usize]
                } else {
                    m.edges.entry((node, b)).or_insert(NO_CHILD)
                };
                if *slot == NO_CHILD {
                    *slot = next_id;
                    m.terminal.push(None);
                }
                node = *slot;
            }
            // Texts are distinct, so each terminal is claimed once.
            m.terminal[node as usize] = Some(rank as u32);
        }
        m
    }

    /// Splits `text` into raw fragments and special tokens.
    pub(crate) fn partition(&self, text: &[u8], parse_special: bool, out: &mut Vec<Fragment>) {
        out.clear();
        if text.is_empty() {
            return;
        }
        if !parse_special && !self.any_always {
            out.push(Fragment::Raw { start: 0, end: text.len() });
            return;
        }

        // Every occurrence of every eligible candidate, in text order.
        let mut occ: Vec<(u32, usize)> = Vec::new();
        for pos in 0..text.len() {
            let mut node = self.root[text[pos] as usize];
            let mut depth = 1;
            while node != NO_CHILD {
                if let Some(rank) = self.terminal[node as usize] {
                    if parse_special || !self.candidates[rank as usize].needs_parse_special {
                        occ.push((rank, pos));
                    }
                }
                let Some(&b) = text.get(pos + depth) else { break };
                node = self.edges.get(&(node, b)).copied().unwrap_or(NO_CHILD);
                depth += 1;
            }
        }
        if occ.is_empty() {
            out.push(Fragment::Raw { start: 0, end: text.len() });
            return;
        }

        // Group by candidate priority, keeping text order within a candidate
        // (a stable counting sort).
        let mut starts = vec![0usize; self.candidates.len() + 1];
        for &(rank, _) in &occ {
            starts[rank as usize + 1] += 1;
        }
        for r in 1..starts.len() {
            starts[r] += starts[r - 1];
        }
        let mut by_rank = vec![(0u32, 0usize); occ.len()];
        for &(rank, pos) in &occ {
            let slot = &mut starts[rank as usize];
            by_rank[*slot] = (rank, pos);
            *slot += 1;
        }
        drop(occ);

        // An occurrence lies inside one raw fragment exactly when none of
        // its bytes has been claimed by an earlier match.
        let mut claimed = vec![false; text.len()];
        let mut matches: Vec<(usize, usize, u32)> = Vec::new();
        for &(rank, pos) in &by_rank {
            let cand = self.candidates[rank as usize];
            let span = &mut claimed[pos..pos + cand.len];
            if span.iter().any(|&c| c) {
                continue;
            }
            span.fill(true);
            matches.push((pos, cand.len, cand.id));
        }
        matches.sort_unstable_by_key(|m| m.0);

        let mut cursor = 0;
        for (pos, len, id) in matches {
            if pos > cursor {
                out.push(Fragment::Raw { start: cursor, end: pos });
            }
            out.push(Fragment::Token(id));
            cursor = pos + len;
        }
        if cursor < text.len() {
            out.push(Fragment::Raw { start: cursor, end: text.len() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literal llama.cpp procedure, used as the oracle.
    fn partition_naive(specials: &[(u32, &str, bool)], text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut order: Vec<_> = specials.to_vec();
        order.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut frags = vec![Fragment::Raw { start: 0, end: text.len() }];
        for (id, tok, needs) in order {
            if needs && !parse_special {
                continue;
            }
            let mut next = Vec::new();
            for f in frags {
                let Fragment::Raw { start, end } = f else {
                    next.push(f);
                    continue;
                };
                let mut cur = start;
                while let Some(off) = text[cur..end].find(tok) {
                    let m = cur + off;
                    if m > cur {
                        next.push(Fragment::Raw { start: cur, end: m });
                    }
                    next.push(Fragment::Token(id));
                    cur = m + tok.len();
                }
                if cur < end {
                    next.push(Fragment::Raw { start: cur, end });
                }
            }
            frags = next;
        }
        frags
    }

    #[test]
    fn matches_naive_partition_on_random_texts() {
        use rand::{Rng, SeedableRng};
        let specials: Vec<(u32, &str, bool)> = vec![
            (0, "<a>", true),
            (1, "<ab>", true),
            (2, "\n", false),
            (3, "\n\n", false),
            (4, "\n\n\n", false),
            (5, "  ", false),
            (6, "   ", false),
            (7, "aba", false),
            (8, "bab", true),
            (9, "b", true),
            (10, "ab", false),
        ];
        let m = SpecialMatcher::new(specials.iter().map(|&(id, t, n)| (id, t.as_bytes().to_vec(), n)));
        let seed = 0x5eed_0001u64;
        println!("seed {seed:#x}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let alphabet = ['a', 'b', '<', '>', '\n', ' ', 'x'];
        let mut out = Vec::new();
        for _ in 0..3000 {
            let len = rng.gen_range(0..40);
            let text: String = (0..len).map(|_| alphabet[rng.gen_range(0..alphabet.len())]).collect();
            for parse_special in [false, true] {
                m.partition(text.as_bytes(), parse_special, &mut out);
                let want = partition_naive(&specials, &text, parse_special);
                assert_eq!(out, want, "text {text:?} parse_special {parse_special}");
            }
        }
    }
}
