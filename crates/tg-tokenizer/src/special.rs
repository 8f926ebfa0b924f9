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
    /// Edges of node `n` below the root: `edge_bytes[edge_start[n]..edge_start[n + 1]]`
    /// (sorted) with the matching `edge_child` entries.
    edge_start: Vec<u32>,
    edge_bytes: Vec<u8>,
    edge_child: Vec<u32>,
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
            edge_start: Vec::new(),
            edge_bytes: Vec::new(),
            edge_child: Vec::new(),
            terminal: vec![None],
            any_always: false,
        };
        let mut edges: FxHashMap<(u32, u8), u32> = FxHashMap::default();
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
                    edges.entry((node, b)).or_insert(NO_CHILD)
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

        let mut flat: Vec<((u32, u8), u32)> = edges.into_iter().collect();
        flat.sort_unstable();
        let n_nodes = m.terminal.len();
        m.edge_start = vec![0; n_nodes + 1];
        for &((node, _), _) in &flat {
            m.edge_start[node as usize + 1] += 1;
        }
        for i in 1..=n_nodes {
            m.edge_start[i] += m.edge_start[i - 1];
        }
        m.edge_bytes = flat.iter().map(|&((_, b), _)| b).collect();
        m.edge_child = flat.iter().map(|&(_, c)| c).collect();
        m
    }

    /// The child of a non-root `node` along byte `b`.
    #[inline]
    fn child(&self, node: u32, b: u8) -> u32 {
        let lo = self.edge_start[node as usize] as usize;
        let hi = self.edge_start[node as usize + 1] as usize;
        match self.edge_bytes[lo..hi].iter().position(|&x| x == b) {
            Some(i) => self.edge_child[lo + i],
            None => NO_CHILD,
        }
    }

    /// Calls `f(rank, pos)` for every occurrence of an eligible candidate
    /// starting at an unclaimed position and covering no claimed byte, in
    /// text order, up to `max_len` bytes long. `claimed` is either empty
    /// (nothing claimed) or text-sized.
    fn walk(
        &self,
        text: &[u8],
        parse_special: bool,
        claimed: &[bool],
        max_len: usize,
        mut f: impl FnMut(usize, usize),
    ) {
        let is_claimed = |i: usize| claimed.get(i).copied().unwrap_or(false);
        for pos in 0..text.len() {
            if is_claimed(pos) {
                continue;
            }
            let mut node = self.root[text[pos] as usize];
            let mut depth = 1;
            while node != NO_CHILD {
                if let Some(rank) = self.terminal[node as usize] {
                    if parse_special || !self.candidates[rank as usize].needs_parse_special {
                        f(rank as usize, pos);
                    }
                }
                let next = pos + depth;
                let Some(&b) = text.get(next) else { break };
                if depth >= max_len || is_claimed(next) {
                    break;
                }
                node = self.child(node, b);
                depth += 1;
            }
        }
    }

    /// Splits `text` into raw fragments and special tokens.
    pub(crate) fn partition(&self, text: &[u8], parse_special: bool, out: &mut Vec<Fragment>) {
        self.partition_with_budget(text, parse_special, text.len().max(1 << 20), out);
    }

    /// `partition`, replaying at most `budget` occurrences per batch.
    fn partition_with_budget(
        &self,
        text: &[u8],
        parse_special: bool,
        budget: usize,
        out: &mut Vec<Fragment>,
    ) {
        out.clear();
        if text.is_empty() {
            return;
        }
        if !parse_special && !self.any_always {
            out.push(Fragment::Raw {
                start: 0,
                end: text.len(),
            });
            return;
        }

        // Occurrences are replayed in batches of consecutive priority ranks,
        // each holding at most `budget` occurrences, so memory stays linear
        // in the text even where occurrences overlap heavily (a run of n
        // spaces holds ~30n occurrences of the space-run tokens). Usually
        // everything fits one batch and the first walk's list is used as is.
        let budget = budget.max(1);
        let mut counts: Vec<usize> = Vec::new();
        let mut occ: Vec<(u32, usize)> = Vec::new();
        let mut total = 0usize;
        self.walk(text, parse_special, &[], usize::MAX, |rank, pos| {
            if counts.is_empty() {
                counts = vec![0; self.candidates.len()];
            }
            counts[rank] += 1;
            total += 1;
            if total <= budget {
                occ.push((rank as u32, pos));
            }
        });
        if total == 0 {
            out.push(Fragment::Raw {
                start: 0,
                end: text.len(),
            });
            return;
        }
        if total > budget {
            occ = Vec::new();
        }

        let mut claimed = vec![false; text.len()];
        let mut matches: Vec<(usize, usize, u32)> = Vec::new();
        let mut positions: Vec<usize> = Vec::new();
        let mut starts: Vec<usize> = Vec::new();
        let mut lo = 0;
        while lo < counts.len() {
            // The batch is ranks lo..hi.
            let mut hi = lo;
            let mut sum = 0;
            while hi < counts.len() && (sum == 0 || sum + counts[hi] <= budget) {
                sum += counts[hi];
                hi += 1;
            }
            if total > budget {
                occ.clear();
                // Ranks are sorted by length, so rank `lo` is the longest.
                self.walk(
                    text,
                    parse_special,
                    &claimed,
                    self.candidates[lo].len,
                    |rank, pos| {
                        if (lo..hi).contains(&rank) {
                            occ.push((rank as u32, pos));
                        }
                    },
                );
            }

            // Stable counting sort by rank: positions stay in text order
            // within each candidate.
            starts.clear();
            starts.resize(hi - lo + 1, 0);
            for &(rank, _) in &occ {
                starts[rank as usize - lo + 1] += 1;
            }
            for r in 1..starts.len() {
                starts[r] += starts[r - 1];
            }
            positions.clear();
            positions.resize(occ.len(), 0);
            for &(rank, pos) in &occ {
                let slot = &mut starts[rank as usize - lo];
                positions[*slot] = pos;
                *slot += 1;
            }
            // `starts[r]` is now the end of rank lo + r's bucket.

            // An occurrence lies inside one raw fragment exactly when none of
            // its bytes has been claimed by an earlier match.
            let mut begin = 0;
            for (r, &end) in starts[..hi - lo].iter().enumerate() {
                let cand = self.candidates[lo + r];
                for &pos in &positions[begin..end] {
                    let span = &mut claimed[pos..pos + cand.len];
                    if span.iter().any(|&c| c) {
                        continue;
                    }
                    span.fill(true);
                    matches.push((pos, cand.len, cand.id));
                }
                begin = end;
            }
            lo = hi;
        }
        matches.sort_unstable_by_key(|m| m.0);

        let mut cursor = 0;
        for (pos, len, id) in matches {
            if pos > cursor {
                out.push(Fragment::Raw {
                    start: cursor,
                    end: pos,
                });
            }
            out.push(Fragment::Token(id));
            cursor = pos + len;
        }
        if cursor < text.len() {
            out.push(Fragment::Raw {
                start: cursor,
                end: text.len(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literal llama.cpp procedure, used as the oracle.
    fn partition_naive(
        specials: &[(u32, &str, bool)],
        text: &str,
        parse_special: bool,
    ) -> Vec<Fragment> {
        let mut order: Vec<_> = specials.to_vec();
        order.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut frags = vec![Fragment::Raw {
            start: 0,
            end: text.len(),
        }];
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
        let m = SpecialMatcher::new(
            specials
                .iter()
                .map(|&(id, t, n)| (id, t.as_bytes().to_vec(), n)),
        );
        let seed = 0x5eed_0001u64;
        println!("seed {seed:#x}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let alphabet = ['a', 'b', '<', '>', '\n', ' ', 'x'];
        let mut out = Vec::new();
        for _ in 0..3000 {
            let len = rng.gen_range(0..40);
            let text: String = (0..len)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
                .collect();
            for parse_special in [false, true] {
                let want = partition_naive(&specials, &text, parse_special);
                m.partition(text.as_bytes(), parse_special, &mut out);
                assert_eq!(out, want, "text {text:?} parse_special {parse_special}");
                // Small budgets force the multi-batch path.
                for budget in [1, 2, 5, 17] {
                    m.partition_with_budget(text.as_bytes(), parse_special, budget, &mut out);
                    assert_eq!(
                        out, want,
                        "text {text:?} parse_special {parse_special} budget {budget}"
                    );
                }
            }
        }
    }
}
