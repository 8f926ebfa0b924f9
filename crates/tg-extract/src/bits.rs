//! Sets of class indices as sparse bitsets: the non-zero 64-bit words of a bitset over all
//! classes, sorted by word index. A set of `k` classes numbered close together takes
//! about `k / 64` words; unions and intersections go word by word through a dense scratch
//! bitset ([`Accum`]), so their cost is the number of words involved, not of classes.

/// A set of `u32` as sorted `(word index, bits)` pairs without zero words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SparseBits {
    words: Vec<(u32, u64)>,
}

impl SparseBits {
    /// `{x}`.
    pub fn singleton(x: u32) -> SparseBits {
        SparseBits { words: vec![(x >> 6, 1u64 << (x & 63))] }
    }

    pub fn contains(&self, x: u32) -> bool {
        match self.words.binary_search_by_key(&(x >> 6), |w| w.0) {
            Ok(i) => self.words[i].1 & (1u64 << (x & 63)) != 0,
            Err(_) => false,
        }
    }

    pub fn insert(&mut self, x: u32) {
        match self.words.binary_search_by_key(&(x >> 6), |w| w.0) {
            Ok(i) => self.words[i].1 |= 1u64 << (x & 63),
            Err(i) => self.words.insert(i, (x >> 6, 1u64 << (x & 63))),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.1.count_ones() as usize).sum()
    }

    /// Elements in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().flat_map(|&(i, mut b)| {
            std::iter::from_fn(move || {
                if b == 0 {
                    return None;
                }
                let t = b.trailing_zeros();
                b &= b - 1;
                Some((i << 6) | t)
            })
        })
    }

    /// Number of words stored (the cost of a union or intersection with it).
    pub fn words(&self) -> usize {
        self.words.len()
    }
}

/// A dense scratch bitset that remembers which words it touched, for unions of sparse sets
/// and intersections with them. Starts and is left empty by [`Accum::take`] and
/// [`Accum::clear`].
#[derive(Debug, Default)]
pub(crate) struct Accum {
    dense: Vec<u64>,
    touched: Vec<u32>,
}

impl Accum {
    /// An empty accumulator for elements below `universe`.
    pub fn new(universe: usize) -> Accum {
        Accum { dense: vec![0; universe.div_ceil(64)], touched: Vec::new() }
    }

    /// Adds every element of `s`.
    pub fn or(&mut self, s: &SparseBits) {
        for &(i, b) in &s.words {
            let w = &mut self.dense[i as usize];
            if *w == 0 {
                self.touched.push(i);
            }
            *w |= b;
        }
    }

    /// Keeps in `s` only the elements also in the accumulator.
    pub fn and_into(&self, s: &mut SparseBits) {
        s.words.retain_mut(|w| {
            w.1 &= self.dense[w.0 as usize];
            w.1 != 0
        });
    }

    /// The accumulated set; empties the accumulator.
    pub fn take(&mut self) -> SparseBits {
        self.touched.sort_unstable();
        let words = self.touched.iter().map(|&i| (i, std::mem::take(&mut self.dense[i as usize]))).collect();
        self.touched.clear();
        SparseBits { words }
    }

    /// Empties the accumulator.
    pub fn clear(&mut self) {
        for &i in &self.touched {
            self.dense[i as usize] = 0;
        }
        self.touched.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeSet;

    fn random_set(rng: &mut ChaCha8Rng, universe: u32) -> BTreeSet<u32> {
        let k = rng.gen_range(0..40);
        (0..k).map(|_| rng.gen_range(0..universe)).collect()
    }

    fn sparse(s: &BTreeSet<u32>) -> SparseBits {
        let mut b = SparseBits::default();
        for &x in s {
            b.insert(x);
        }
        b
    }

    /// Unions, intersections, membership, length and iteration against `BTreeSet`.
    #[test]
    fn matches_btreeset() {
        let seed = 0x5eed_b175u64;
        println!("seed {seed:#x}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..500 {
            let universe = rng.gen_range(1..700);
            let mut acc = Accum::new(universe as usize);
            let sets: Vec<BTreeSet<u32>> = (0..rng.gen_range(1..5)).map(|_| random_set(&mut rng, universe)).collect();
            let union: BTreeSet<u32> = sets.iter().flatten().copied().collect();
            for s in &sets {
                acc.or(&sparse(s));
            }
            let u = acc.take();
            assert_eq!(u.iter().collect::<BTreeSet<u32>>(), union);
            assert_eq!(u.len(), union.len());
            assert_eq!(u.is_empty(), union.is_empty());
            for x in 0..universe {
                assert_eq!(u.contains(x), union.contains(&x));
            }
            // The accumulator was emptied by `take`.
            let other = random_set(&mut rng, universe);
            acc.or(&sparse(&other));
            let mut inter = u.clone();
            acc.and_into(&mut inter);
            acc.clear();
            assert_eq!(inter.iter().collect::<BTreeSet<u32>>(), union.intersection(&other).copied().collect());
            assert!(acc.take().is_empty());
        }
    }
}
