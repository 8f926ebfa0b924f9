//! Preprocessing shared by the heuristics and the exact search: the time sweep that finds
//! the *sections* (the sets of buffers live together just before some buffer dies — the
//! maximal cliques of the interval graph), each buffer's contiguous range of sections, and
//! the conflict lists.
//!
//! Zero-size buffers are dropped here: they conflict with nothing and sit at offset 0.

use crate::Problem;

/// The problem in solver form: only buffers with a non-zero size, renumbered `0..n`.
pub(crate) struct Prep {
    /// Active index → index in the problem.
    pub orig: Vec<usize>,
    pub size: Vec<u64>,
    pub align: Vec<u64>,
    /// `upper − lower`.
    pub width: Vec<u64>,
    pub lower: Vec<i64>,
    /// Buffer `b` belongs to sections `sec_lo[b]..sec_hi[b]` (never empty).
    pub sec_lo: Vec<u32>,
    pub sec_hi: Vec<u32>,
    /// Conflicts of `b`: `adj[adj_start[b]..adj_start[b + 1]]`.
    adj_start: Vec<u32>,
    adj: Vec<u32>,
    /// Members of section `s`: `members[mem_start[s]..mem_start[s + 1]]`.
    mem_start: Vec<u32>,
    members: Vec<u32>,
    /// Total size of each section's members.
    pub load: Vec<u64>,
}

impl Prep {
    pub fn new(problem: &Problem) -> Prep {
        let orig: Vec<usize> = problem.buffers().iter().enumerate().filter(|(_, b)| b.size > 0).map(|(i, _)| i).collect();
        let bufs: Vec<_> = orig.iter().map(|&i| &problem.buffers()[i]).collect();
        let n = bufs.len();
        let size: Vec<u64> = bufs.iter().map(|b| b.size).collect();
        let align: Vec<u64> = bufs.iter().map(|b| b.alignment).collect();
        let width: Vec<u64> = bufs.iter().map(|b| b.upper.abs_diff(b.lower)).collect();
        let lower: Vec<i64> = bufs.iter().map(|b| b.lower).collect();

        // Events: (time, 0 = end / 1 = start, buffer). Ends first at equal times.
        let mut events: Vec<(i64, u8, u32)> = Vec::with_capacity(2 * n);
        for (i, b) in bufs.iter().enumerate() {
            events.push((b.lower, 1, i as u32));
            events.push((b.upper, 0, i as u32));
        }
        events.sort_unstable();

        let mut sec_lo = vec![0u32; n];
        let mut sec_hi = vec![0u32; n];
        let mut active: Vec<u32> = Vec::new();
        let mut pos = vec![usize::MAX; n];
        let mut grown = false;
        let mut mem_start: Vec<u32> = vec![0];
        let mut members: Vec<u32> = Vec::new();
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for &(_, kind, b) in &events {
            let bu = b as usize;
            if kind == 0 {
                if grown {
                    // Snapshot: everything live now is live together just before this end.
                    members.extend_from_slice(&active);
                    mem_start.push(members.len() as u32);
                    grown = false;
                }
                sec_hi[bu] = (mem_start.len() - 1) as u32;
                let p = pos[bu];
                active.swap_remove(p);
                if let Some(&moved) = active.get(p) {
                    pos[moved as usize] = p;
                }
            } else {
                for &a in &active {
                    pairs.push((a, b));
                    pairs.push((b, a));
                }
                sec_lo[bu] = (mem_start.len() - 1) as u32;
                pos[bu] = active.len();
                active.push(b);
                grown = true;
            }
        }
        let nsec = mem_start.len() - 1;
        let load: Vec<u64> = (0..nsec).map(|s| members[mem_start[s] as usize..mem_start[s + 1] as usize].iter().map(|&b| size[b as usize]).sum()).collect();

        pairs.sort_unstable();
        let mut adj_start = vec![0u32; n + 1];
        for &(a, _) in &pairs {
            adj_start[a as usize + 1] += 1;
        }
        for i in 0..n {
            adj_start[i + 1] += adj_start[i];
        }
        let adj: Vec<u32> = pairs.into_iter().map(|(_, b)| b).collect();

        Prep { orig, size, align, width, lower, sec_lo, sec_hi, adj_start, adj, mem_start, members, load }
    }

    /// Number of (non-zero-size) buffers.
    pub fn n(&self) -> usize {
        self.size.len()
    }

    /// Number of sections.
    pub fn sections(&self) -> usize {
        self.load.len()
    }

    /// The buffers that conflict with `b`.
    pub fn conflicts(&self, b: usize) -> &[u32] {
        &self.adj[self.adj_start[b] as usize..self.adj_start[b + 1] as usize]
    }

    /// The buffers of section `s`.
    pub fn members(&self, s: usize) -> &[u32] {
        &self.members[self.mem_start[s] as usize..self.mem_start[s + 1] as usize]
    }

    /// The largest section load: a lower bound on any packing's height.
    pub fn max_load(&self) -> u64 {
        self.load.iter().copied().max().unwrap_or(0)
    }

    /// The largest load among the sections of `b`.
    pub fn max_load_of(&self, b: usize) -> u64 {
        (self.sec_lo[b]..self.sec_hi[b]).map(|s| self.load[s as usize]).max().unwrap_or(0)
    }

    /// Offsets per problem buffer from offsets per active buffer (zero-size ones at 0).
    pub fn expand(&self, problem_len: usize, active_offsets: &[u64]) -> Vec<u64> {
        let mut out = vec![0u64; problem_len];
        for (a, &o) in active_offsets.iter().enumerate() {
            out[self.orig[a]] = o;
        }
        out
    }
}

/// The smallest multiple of `align` that is ≥ `x` (no overflow for `x < 2^62`).
#[inline]
pub(crate) fn align_up(x: u64, align: u64) -> u64 {
    if align <= 1 {
        x
    } else {
        x.div_ceil(align) * align
    }
}
