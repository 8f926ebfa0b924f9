//! `HfTokenizer` against small independent references on seeded random
//! documents: BPE merging (lowest rank first, leftmost on ties, the last
//! occurrence of a repeated merge is its rank) and leftmost-longest
//! matching of added tokens, plus how added tokens get their ids. The
//! end-to-end checks against the Python `tokenizers` are in `hf_fixture.rs`
//! and `hf_components.rs`. Needs neither Python nor a model.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use tg_tokenizer::HfTokenizer;

/// A `tokenizer.json` with only a BPE model (no normalizer, no
/// pre-tokenizer: the whole text is one word).
fn bpe_doc(vocab: &[(String, u32)], merges: &[(String, String)], added: Value) -> String {
    let vocab: serde_json::Map<String, Value> =
        vocab.iter().map(|(t, id)| (t.clone(), json!(id))).collect();
    let merges: Vec<Value> = merges.iter().map(|(a, b)| json!([a, b])).collect();
    json!({
        "version": "1.0",
        "added_tokens": added,
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
    })
    .to_string()
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
        let mut order: Vec<u32> = (0..tokens.len() as u32).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        let vocab: Vec<(String, u32)> = tokens.iter().cloned().zip(order.clone()).collect();
        let tok = HfTokenizer::from_json(&bpe_doc(&vocab, &merges, json!([])))
            .unwrap_or_else(|e| panic!("table {table}: {e}"));
        for _ in 0..100 {
            let len = rng.gen_range(1..24);
            let word: String = (0..len)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())].as_str())
                .collect();
            let want: Vec<u32> = reference_bpe(&word, &merges)
                .iter()
                .map(|t| order[tokens.iter().position(|x| x == t).expect("a token")])
                .collect();
            let got = tok.encode(&word, false).expect("encodes");
            assert_eq!(got, want, "table {table}, word {word:?}, merges {merges:?}");
        }
    }
}

fn added(content: &str, special: bool) -> Value {
    json!({"id": 0, "content": content, "single_word": false, "lstrip": false,
           "rstrip": false, "normalized": false, "special": special})
}

/// Reference leftmost-longest: at each position, the longest token starting
/// there; otherwise move one character on.
fn reference_matches<'a>(text: &str, tokens: &[&'a str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let best = tokens
            .iter()
            .filter(|t| text[i..].starts_with(**t))
            .max_by_key(|t| t.len());
        match best {
            Some(t) => {
                out.push(*t);
                i += t.len();
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
    // The model knows only "x", so text outside added tokens gives no ids
    // (no unk token): the ids are exactly the matched added tokens.
    let doc = bpe_doc(
        &[("x".to_string(), 0)],
        &[],
        tokens.iter().map(|t| added(t, false)).collect(),
    );
    let tok = HfTokenizer::from_json(&doc).expect("loads");
    let alphabet = ["<", ">", "a", "é", "\n", "b"];
    for _ in 0..3000 {
        let len = rng.gen_range(0..16);
        let text: String = (0..len).map(|_| alphabet[rng.gen_range(0..6)]).collect();
        let got: Vec<&str> = tok
            .encode(&text, false)
            .expect("encodes")
            .iter()
            .map(|&id| tok.token_text(id).expect("a known id"))
            .collect();
        assert_eq!(got, reference_matches(&text, &tokens), "{text:?}");
    }
}

#[test]
fn added_token_ids_follow_tokenizers() {
    let vocab: Vec<(String, u32)> = ["a", "b", "<s>"]
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), i as u32))
        .collect();
    // "<s>" is in the vocabulary; the others get 3, 4 in file order (the
    // ids written in the file are not used); a repeated content keeps its
    // first id; empty contents are ignored.
    let raw = json!([
        added("<x>", true),
        added("<s>", true),
        added("", true),
        added("<y>", false),
        added("<x>", false),
    ]);
    let tok = HfTokenizer::from_json(&bpe_doc(&vocab, &[], raw)).expect("loads");
    assert_eq!(tok.token_id("<x>"), Some(3));
    assert_eq!(tok.token_id("<s>"), Some(2));
    assert_eq!(tok.token_id("<y>"), Some(4));
    assert_eq!(tok.added_token_count(), 3);
    assert_eq!(tok.id_limit(), 5);
    assert_eq!(tok.vocab_size(), 3);
    assert_eq!(tok.vocab_size_with_added_tokens(), 5);
    assert_eq!(tok.token_text(4), Some("<y>"));
    assert!(tok.is_added(2) && tok.is_added(3) && !tok.is_added(0));
    // The later, non-special "<x>" replaced the flags, but a token once
    // special stays in the special set (as in `tokenizers`): decoding with
    // skip_special_tokens leaves it out.
    assert!(!tok.is_special(3));
    assert!(tok.is_special(2));
    assert_eq!(tok.decode(&[0, 3, 1], true).expect("decodes"), "a b");
    assert_eq!(tok.decode(&[0, 3, 4], false).expect("decodes"), "a <x> <y>");
}
