//! Unit tests of the `tokenizer.json` internals against small independent
//! references (the end-to-end checks against `tokenizers` are in
//! `tests/hf_*.rs`).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::added::{AddedVocab, RawAddedToken, Split};
use super::bpe::{Bpe, BpeOptions};
use super::pretok::{split_spans, Behavior};
use super::vocab::VocabBuilder;

fn pieces<'a>(text: &'a str, spans: &[(usize, usize)]) -> Vec<&'a str> {
    spans.iter().map(|&(s, e)| &text[s..e]).collect()
}

#[test]
fn split_behaviors_on_the_documented_example() {
    // The example of `NormalizedString::split` in `tokenizers`, with empty
    // pieces dropped as the pre-tokenizer does.
    let t = "the-final--countdown";
    let cases: [(Behavior, &[&str]); 5] = [
        (Behavior::Removed, &["the", "final", "countdown"]),
        (
            Behavior::Isolated,
            &["the", "-", "final", "-", "-", "countdown"],
        ),
        (
            Behavior::MergedWithPrevious,
            &["the-", "final-", "-", "countdown"],
        ),
        (
            Behavior::MergedWithNext,
            &["the", "-final", "-", "-countdown"],
        ),
        (
            Behavior::Contiguous,
            &["the", "-", "final", "--", "countdown"],
        ),
    ];
    for (b, want) in cases {
        assert_eq!(pieces(t, &split_spans(t, "-", b, false)), want, "{b:?}");
    }
    // Delimiters at both ends and nothing but delimiters.
    assert_eq!(
        pieces(
            "-a-",
            &split_spans("-a-", "-", Behavior::MergedWithPrevious, false)
        ),
        ["-", "a-"]
    );
    assert_eq!(
        pieces(
            "-a-",
            &split_spans("-a-", "-", Behavior::MergedWithNext, false)
        ),
        ["-a", "-"]
    );
    assert_eq!(
        pieces("---", &split_spans("---", "-", Behavior::Contiguous, false)),
        ["---"]
    );
    assert!(split_spans("---", "-", Behavior::Removed, false).is_empty());
    assert!(split_spans("", "-", Behavior::Isolated, false).is_empty());
    // Inverted: the text between dashes is the delimiter.
    assert_eq!(
        pieces(t, &split_spans(t, "-", Behavior::Removed, true)),
        ["-", "-", "-"]
    );
}

/// The split pieces always tile the text (except for removed delimiters).
#[test]
fn split_pieces_cover_the_text() {
    let seed = 0x5b17_u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let alphabet = ['a', 'b', '-', 'é'];
    for _ in 0..2000 {
        let len = rng.gen_range(0..12);
        let text: String = (0..len).map(|_| alphabet[rng.gen_range(0..4)]).collect();
        let pattern = ["-", "a", "-a", "é"][rng.gen_range(0..4)];
        for b in [
            Behavior::Isolated,
            Behavior::MergedWithPrevious,
            Behavior::MergedWithNext,
            Behavior::Contiguous,
        ] {
            for invert in [false, true] {
                let spans = split_spans(&text, pattern, b, invert);
                let joined: String = pieces(&text, &spans).concat();
                assert_eq!(joined, text, "{text:?} {pattern:?} {b:?} {invert}");
                assert!(spans.iter().all(|&(s, e)| s < e));
            }
        }
    }
}

/// Reference BPE: repeatedly merge the adjacent pair of lowest rank, the
/// leftmost one on ties, until none applies. Works on token texts.
fn reference_bpe(word: &str, merges: &[(String, String)]) -> Vec<String> {
    let mut syms: Vec<String> = word.chars().map(String::from).collect();
    loop {
        let mut best: Option<(usize, usize)> = None; // (rank, position)
        for i in 0..syms.len().saturating_sub(1) {
            // The last occurrence of a repeated pair is its rank.
            if let Some(r) = merges
                .iter()
                .rposition(|(a, b)| *a == syms[i] && *b == syms[i + 1])
            {
                if best.is_none_or(|(br, _)| r < br) {
                    best = Some((r, i));
                }
            }
        }
        let Some((_, i)) = best else {
            return syms;
        };
        let right = syms.remove(i + 1);
        syms[i].push_str(&right);
    }
}

#[test]
fn bpe_matches_reference_on_random_merge_tables() {
    let seed = 0xb9e_2026_u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for table in 0..60 {
        // A random merge table over a small alphabet; every merged text is
        // added to the vocabulary (in a shuffled id order).
        let alphabet: Vec<String> = ["a", "b", "c", "d", "é"][..rng.gen_range(2..=5)]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut tokens = alphabet.clone();
        let mut merges: Vec<(String, String)> = Vec::new();
        for _ in 0..rng.gen_range(1..40) {
            let a = tokens[rng.gen_range(0..tokens.len())].clone();
            let b = tokens[rng.gen_range(0..tokens.len())].clone();
            if a.chars().count() + b.chars().count() > 6 {
                continue;
            }
            let ab = format!("{a}{b}");
            if !tokens.contains(&ab) {
                tokens.push(ab);
            }
            merges.push((a, b));
        }
        let mut order: Vec<usize> = (0..tokens.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        let mut vb = VocabBuilder::default();
        for (i, t) in tokens.iter().enumerate() {
            vb.push(t, order[i] as u32).unwrap();
        }
        let vocab = vb.build().unwrap();
        let bpe = Bpe::new(
            vocab,
            merges
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect::<Vec<_>>()
                .into_iter(),
            BpeOptions::default(),
        )
        .unwrap();
        for _ in 0..100 {
            let len = rng.gen_range(1..24);
            let word: String = (0..len)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())].as_str())
                .collect();
            let want: Vec<u32> = reference_bpe(&word, &merges)
                .iter()
                .map(|t| order[tokens.iter().position(|x| x == t).unwrap()] as u32)
                .collect();
            // Poisoned output: ids are appended after what is already there.
            let mut got = vec![u32::MAX; 3];
            bpe.tokenize(&word, &mut got).unwrap();
            assert_eq!(&got[..3], &[u32::MAX; 3]);
            assert_eq!(
                got[3..],
                want[..],
                "table {table}, word {word:?}, merges {merges:?}"
            );
        }
    }
}

fn added(content: &str, special: bool) -> RawAddedToken {
    RawAddedToken {
        id: 0,
        content: content.to_string(),
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special,
    }
}

/// Reference leftmost-longest: at each position, the longest token starting
/// there; otherwise move one character on.
fn reference_matches(text: &str, tokens: &[&str]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let best = tokens
            .iter()
            .filter(|t| text[i..].starts_with(**t))
            .map(|t| t.len())
            .max();
        match best {
            Some(n) => {
                out.push((i, i + n));
                i += n;
            }
            None => i += text[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

#[test]
fn added_token_matching_is_leftmost_longest() {
    let seed = 0x000a_dded_u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let tokens = ["<", "<a>", "<a", "a>", "aa", "aaa", "é<", "\n", "\n\n"];
    let mut vb = VocabBuilder::default();
    vb.push("x", 0).unwrap();
    let vocab = vb.build().unwrap();
    let av = AddedVocab::new(
        tokens.iter().map(|t| added(t, false)).collect(),
        &vocab,
        None,
    )
    .unwrap();
    let alphabet = ["<", ">", "a", "é", "\n", "b"];
    for _ in 0..3000 {
        let len = rng.gen_range(0..16);
        let text: String = (0..len).map(|_| alphabet[rng.gen_range(0..6)]).collect();
        let mut splits = Vec::new();
        av.split_raw(&text, true, &mut splits);
        let got: Vec<(usize, usize)> = splits
            .iter()
            .filter_map(|s| match *s {
                Split::Token(id, s, e) => {
                    // Ids follow the file order after the 1-token vocabulary.
                    assert_eq!(tokens[id as usize - 1], &text[s..e]);
                    Some((s, e))
                }
                Split::Text(..) => None,
            })
            .collect();
        assert_eq!(got, reference_matches(&text, &tokens), "{text:?}");
        // The pieces tile the text.
        let mut pos = 0;
        for s in &splits {
            let (a, b) = match *s {
                Split::Token(_, a, b) | Split::Text(a, b) => (a, b),
            };
            assert_eq!(a, pos, "{text:?}: {splits:?}");
            assert!(a < b);
            pos = b;
        }
        assert_eq!(pos, text.len());
    }
}

#[test]
fn added_token_ids_follow_tokenizers() {
    let mut vb = VocabBuilder::default();
    for (i, t) in ["a", "b", "<s>"].iter().enumerate() {
        vb.push(t, i as u32).unwrap();
    }
    let vocab = vb.build().unwrap();
    // "<s>" is in the vocabulary; the others get 3, 4 in file order; a
    // repeated content keeps its first id; empty contents are ignored.
    let raw = vec![
        added("<x>", true),
        added("<s>", true),
        added("", true),
        added("<y>", false),
        added("<x>", false),
    ];
    let av = AddedVocab::new(raw, &vocab, None).unwrap();
    assert_eq!(av.id("<x>"), Some(3));
    assert_eq!(av.id("<s>"), Some(2));
    assert_eq!(av.id("<y>"), Some(4));
    assert_eq!(av.len(), 3);
    // The later, non-special "<x>" replaced the flags, but a token once
    // special stays in the special set (as in `tokenizers`).
    assert!(!av.get(3).unwrap().special);
    assert!(av.is_special_text("<x>"));
}
