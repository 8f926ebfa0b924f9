//! Unit tests on a small synthetic vocabulary.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{StreamDecoder, TokenType, Tokenizer, TokenizerError, Vocab};

const N: i32 = TokenType::Normal.code();
const C: i32 = TokenType::Control.code();
const U: i32 = TokenType::UserDefined.code();
const B: i32 = TokenType::Byte.code();

/// A Gemma-shaped toy vocabulary: control tokens first, user-defined
/// whitespace runs, 256 byte tokens, then normal pieces.
fn toy_vocab() -> Vocab {
    let mut tokens: Vec<(String, f32, i32)> = vec![
        ("<pad>".into(), -1000.0, C),
        ("<eos>".into(), -1000.0, C),
        ("<bos>".into(), -1000.0, C),
        ("<unk>".into(), -1000.0, C),
        ("<start_of_turn>".into(), -1000.0, C),
        ("<end_of_turn>".into(), -1000.0, C),
        ("\n".into(), -1000.0, U),
        ("\n\n".into(), -1000.0, U),
        ("  ".into(), -1000.0, U),
        ("   ".into(), -1000.0, U),
        ("<b>".into(), -1000.0, U),
    ];
    for b in 0..=255u8 {
        tokens.push((format!("<0x{b:02X}>"), 0.0, B));
    }
    let normal: &[(&str, f32)] = &[
        ("▁", -50.0),
        ("a", -10.0),
        ("b", -11.0),
        ("c", -12.0),
        ("h", -13.0),
        ("e", -14.0),
        ("l", -15.0),
        ("o", -16.0),
        ("<", -17.0),
        (">", -18.0),
        ("s", -19.0),
        ("t", -20.0),
        ("ab", -3.0),
        ("bc", -2.0),
        ("aa", -4.0),
        ("he", -5.0),
        ("ll", -6.0),
        ("llo", -7.0),
        ("hello", -8.0),
        ("▁hello", -1.0),
        ("▁a", -9.0),
        ("<s", -30.0),
        ("<st", -31.0),
        ("ü", -40.0),
        ("日本", -41.0),
        ("日", -42.0),
        ("本", -43.0),
    ];
    for &(t, s) in normal {
        tokens.push((t.into(), s, N));
    }
    Vocab {
        tokens: tokens.iter().map(|t| t.0.clone()).collect(),
        scores: tokens.iter().map(|t| t.1).collect(),
        token_types: tokens.iter().map(|t| t.2).collect(),
        bos: 2,
        eos: 1,
        unk: Some(3),
        pad: Some(0),
        eot: None,
        eom: None,
        add_bos: true,
        add_eos: false,
        add_space_prefix: false,
        bpe: None,
    }
}

fn toy() -> Tokenizer {
    Tokenizer::from_vocab(toy_vocab()).expect("toy vocab is valid")
}

fn ids(tok: &Tokenizer, pieces: &[&str]) -> Vec<u32> {
    pieces
        .iter()
        .map(|p| tok.token_id(p).unwrap_or_else(|| panic!("no token {p:?}")))
        .collect()
}

/// The merge loop written the obvious quadratic way: repeatedly merge the
/// best-scoring adjacent pair (leftmost on ties).
fn spm_naive(tok: &Tokenizer, text: &str) -> Vec<u32> {
    let mut syms: Vec<String> = text.chars().map(|c| c.to_string()).collect();
    loop {
        let mut best: Option<(f32, usize)> = None;
        for i in 0..syms.len().saturating_sub(1) {
            let joined = format!("{}{}", syms[i], syms[i + 1]);
            if let Some(id) = tok.token_id(&joined) {
                let s = tok.token_score(id).unwrap();
                if !matches!(best, Some((bs, _)) if s <= bs) {
                    best = Some((s, i));
                }
            }
        }
        let Some((_, i)) = best else { break };
        let right = syms.remove(i + 1);
        syms[i].push_str(&right);
    }
    let mut out = Vec::new();
    for s in syms {
        match tok.token_id(&s) {
            Some(id) => out.push(id),
            None => out.extend(
                s.bytes()
                    .map(|b| tok.token_id(&format!("<0x{b:02X}>")).unwrap()),
            ),
        }
    }
    out
}

#[test]
fn tokenizer_is_shareable_across_threads() {
    fn check<T: Send + Sync>() {}
    check::<Tokenizer>();
}

#[test]
fn empty_string() {
    let tok = toy();
    assert_eq!(tok.encode("", false, false), Vec::<u32>::new());
    assert_eq!(tok.encode("", false, true), Vec::<u32>::new());
    assert_eq!(tok.encode("", true, false), vec![2]);
    assert_eq!(tok.decode(&[], false).unwrap(), "");
}

#[test]
fn bos_and_eos_handling() {
    let tok = toy();
    let plain = tok.encode("hello", false, false);
    assert_eq!(plain, ids(&tok, &["hello"]));
    let with = tok.encode("hello", true, false);
    assert_eq!(with[0], tok.bos());
    assert_eq!(&with[1..], &plain[..]);
    // BOS is a control token: hidden unless rendered.
    assert_eq!(tok.decode(&with, false).unwrap(), "hello");
    assert_eq!(tok.decode(&with, true).unwrap(), "<bos>hello");

    let mut v = toy_vocab();
    v.add_bos = false;
    v.add_eos = true;
    let tok2 = Tokenizer::from_vocab(v).unwrap();
    assert_eq!(
        tok2.encode("hello", true, false),
        [&plain[..], &[1]].concat()
    );
    assert_eq!(tok2.encode("hello", false, false), plain);
}

#[test]
fn spaces_are_escaped_and_merged() {
    let tok = toy();
    assert_eq!(tok.encode(" hello", false, false), ids(&tok, &["▁hello"]));
    assert_eq!(
        tok.encode("a hello", false, false),
        ids(&tok, &["a", "▁hello"])
    );
    // Two or three spaces are user-defined tokens, matched before escaping.
    assert_eq!(
        tok.encode("a  hello", false, false),
        ids(&tok, &["a", "  ", "hello"])
    );
    assert_eq!(
        tok.encode("a     hello", false, false),
        ids(&tok, &["a", "   ", "  ", "hello"])
    );
    assert_eq!(
        tok.decode(&tok.encode("a     hello", false, false), false)
            .unwrap(),
        "a     hello"
    );
}

#[test]
fn add_space_prefix() {
    let mut v = toy_vocab();
    v.add_space_prefix = true;
    let tok = Tokenizer::from_vocab(v).unwrap();
    assert_eq!(tok.encode("hello", false, false), ids(&tok, &["▁hello"]));
    // After a special token the prefix is added again.
    assert_eq!(
        tok.encode("hello<start_of_turn>hello", false, true),
        ids(&tok, &["▁hello", "<start_of_turn>", "▁hello"])
    );
    // The first decoded token loses its leading space; like llama.cpp's
    // detokenizer (without `remove_special`), a leading BOS takes that role.
    assert_eq!(tok.decode(&ids(&tok, &["▁hello"]), false).unwrap(), "hello");
    let e = tok.encode("hello", true, false);
    assert_eq!(tok.decode(&e, false).unwrap(), " hello");
}

#[test]
fn merge_priority_and_ties() {
    let tok = toy();
    // "bc" (-2) beats "ab" (-3).
    assert_eq!(tok.encode("abc", false, false), ids(&tok, &["a", "bc"]));
    // Equal scores: the leftmost pair merges first.
    assert_eq!(tok.encode("aaa", false, false), ids(&tok, &["aa", "a"]));
    assert_eq!(
        tok.encode("aaaaa", false, false),
        ids(&tok, &["aa", "aa", "a"])
    );
    // Multi-step merges go through intermediate pieces.
    assert_eq!(tok.encode("hello", false, false), ids(&tok, &["hello"]));
    assert_eq!(
        tok.encode("hellohe", false, false),
        ids(&tok, &["hello", "he"])
    );
}

#[test]
fn negative_zero_ties_with_zero() {
    // llama.cpp compares scores with `==`, so -0.0 and 0.0 tie and the
    // leftmost pair wins; a total order would put 0.0 first.
    let mut v = toy_vocab();
    let set = |v: &mut Vocab, t: &str, s: f32| {
        let i = v.tokens.iter().position(|x| x == t).unwrap();
        v.scores[i] = s;
    };
    set(&mut v, "ab", -0.0);
    set(&mut v, "bc", 0.0);
    let tok = Tokenizer::from_vocab(v).unwrap();
    assert_eq!(tok.encode("abc", false, false), ids(&tok, &["ab", "c"]));
}

#[test]
fn byte_fallback() {
    let tok = toy();
    // 'é' is not in the vocabulary: its UTF-8 bytes come out as byte tokens.
    assert_eq!(
        tok.encode("é", false, false),
        ids(&tok, &["<0xC3>", "<0xA9>"])
    );
    assert_eq!(
        tok.encode("aé", false, false),
        ids(&tok, &["a", "<0xC3>", "<0xA9>"])
    );
    // 'ü' is in the vocabulary.
    assert_eq!(tok.encode("ü", false, false), ids(&tok, &["ü"]));
    assert_eq!(
        tok.encode("日本語", false, false),
        ids(&tok, &["日本", "<0xE8>", "<0xAA>", "<0x9E>"])
    );
    let e = tok.encode("é😀x", false, false);
    // 2 + 4 byte tokens, and "x" is not in the vocabulary either.
    assert_eq!(e.len(), 7);
    assert_eq!(tok.decode(&e, false).unwrap(), "é😀x");
    // Lone byte tokens that do not form UTF-8 decode to U+FFFD.
    assert_eq!(
        tok.decode(&ids(&tok, &["<0xC3>", "a"]), false).unwrap(),
        "\u{FFFD}a"
    );
    assert_eq!(
        tok.decode_bytes(&ids(&tok, &["<0xC3>", "a"]), false)
            .unwrap(),
        b"\xC3a"
    );
}

#[test]
fn special_tokens_need_parse_special() {
    let tok = toy();
    let text = "<start_of_turn>hello\n";
    let special = tok.encode(text, false, true);
    assert_eq!(special, ids(&tok, &["<start_of_turn>", "hello", "\n"]));
    let plain = tok.encode(text, false, false);
    // Without parse_special the control text is ordinary text, but the
    // user-defined "\n" is still matched.
    assert!(!plain.contains(&tok.token_id("<start_of_turn>").unwrap()));
    assert_eq!(plain.last(), tok.token_id("\n").as_ref());
    assert_eq!(&plain[..3], &ids(&tok, &["<st", "a", "<0x72>"])[..]);
    assert_eq!(tok.decode(&plain, false).unwrap(), text);
    assert_eq!(tok.decode(&special, false).unwrap(), "hello\n");
    assert_eq!(tok.decode(&special, true).unwrap(), text);
    // User-defined tags are always matched and always rendered.
    assert_eq!(
        tok.encode("a<b>b", false, false),
        ids(&tok, &["a", "<b>", "b"])
    );
    assert_eq!(tok.decode(&ids(&tok, &["<b>"]), false).unwrap(), "<b>");
    // Longest special first: "\n\n\n" = "\n\n" + "\n".
    assert_eq!(
        tok.encode("\n\n\n", false, false),
        ids(&tok, &["\n\n", "\n"])
    );
}

#[test]
fn eog() {
    let tok = toy();
    assert!(tok.is_eog(1));
    assert!(tok.is_eog(tok.token_id("<end_of_turn>").unwrap()));
    assert!(!tok.is_eog(2));
    assert!(!tok.is_eog(u32::MAX));
    assert_eq!(tok.eog_ids(), &[1, 5]);
}

#[test]
fn decode_rejects_bad_ids() {
    let tok = toy();
    let n = tok.vocab_size() as u32;
    assert!(
        matches!(tok.decode(&[0, n], false), Err(TokenizerError::InvalidTokenId { id, .. }) if id == n)
    );
    assert!(tok.token_bytes(u32::MAX, true).is_err());
    assert!(tok.token_text(n).is_err());
}

/// Random strings from a pool that mixes vocabulary pieces, specials,
/// whitespace runs and characters outside the vocabulary (never U+2581,
/// which decodes to a space by design).
fn random_text(rng: &mut ChaCha8Rng) -> String {
    const POOL: &[&str] = &[
        "a",
        "b",
        "c",
        "h",
        "e",
        "l",
        "o",
        "s",
        "t",
        "<",
        ">",
        " ",
        "  ",
        "\n",
        "\t",
        "\r",
        "hello",
        "ü",
        "日",
        "本",
        "é",
        "😀",
        "<start_of_turn>",
        "<b>",
        "<bos>",
        "\u{0}",
        "\u{7f}",
        "\u{10FFFF}",
    ];
    let len = rng.gen_range(0..30);
    let mut s = String::new();
    for _ in 0..len {
        if rng.gen_bool(0.15) {
            // Any scalar value except U+2581.
            let c = loop {
                if let Some(c) = char::from_u32(rng.gen_range(0..0x11_0000)) {
                    if c != '\u{2581}' {
                        break c;
                    }
                }
            };
            s.push(c);
        } else {
            s.push_str(POOL[rng.gen_range(0..POOL.len())]);
        }
    }
    s
}

#[test]
fn random_round_trip_and_naive_merge_agree() {
    let tok = toy();
    let seed = 0x7031_c0de_u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..3000 {
        let s = random_text(&mut rng);
        for parse_special in [false, true] {
            let e = tok.encode(&s, false, parse_special);
            assert_eq!(
                tok.decode(&e, true).unwrap(),
                s,
                "round trip of {s:?} (parse_special {parse_special})"
            );
        }
        // Without specials/user-defined runs in play, compare the heap merge
        // with the quadratic reference.
        let plain: String = s
            .chars()
            .filter(|c| !matches!(c, '\n' | ' ' | '<'))
            .collect();
        assert_eq!(
            tok.encode(&plain, false, false),
            spm_naive(&tok, &plain),
            "merge of {plain:?}"
        );
    }
}

#[test]
fn stream_decoder_matches_decode() {
    let tok = toy();
    let seed = 0x57_4ea3u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let byte0 = tok.token_id("<0x00>").unwrap();
    for _ in 0..2000 {
        let n = rng.gen_range(0..20);
        let seq: Vec<u32> = (0..n)
            .map(|_| {
                if rng.gen_bool(0.6) {
                    // Byte tokens, biased towards UTF-8 lead/continuation bytes.
                    let b: u32 = if rng.gen_bool(0.7) {
                        rng.gen_range(0x80..0x100)
                    } else {
                        rng.gen_range(0..0x100)
                    };
                    byte0 + b
                } else {
                    rng.gen_range(0..tok.vocab_size() as u32)
                }
            })
            .collect();
        for render in [false, true] {
            let mut sd = StreamDecoder::new(&tok, render);
            let mut got = String::new();
            for &id in &seq {
                got.push_str(&sd.push(id).unwrap());
                // Nothing decodable is ever held back.
                assert!(sd.pending_bytes().len() < 4);
            }
            got.push_str(&sd.finish());
            assert_eq!(got, tok.decode(&seq, render).unwrap(), "ids {seq:?}");
        }
    }
    // A character split across byte tokens appears once it is complete.
    let mut sd = StreamDecoder::new(&tok, false);
    let euro = ids(&tok, &["<0xE2>", "<0x82>", "<0xAC>"]);
    assert_eq!(sd.push(euro[0]).unwrap(), "");
    assert_eq!(sd.push(euro[1]).unwrap(), "");
    assert_eq!(sd.push(euro[2]).unwrap(), "€");
    assert!(sd.push(tok.vocab_size() as u32).is_err());
}

#[test]
fn vocab_validation_errors() {
    let check = |f: &dyn Fn(&mut Vocab), want: &dyn Fn(&TokenizerError) -> bool| {
        let mut v = toy_vocab();
        f(&mut v);
        match Tokenizer::from_vocab(v) {
            Ok(_) => panic!("expected an error"),
            Err(e) => assert!(want(&e), "unexpected error: {e}"),
        }
    };
    check(&|v| v.scores.pop().map(drop).unwrap_or(()), &|e| {
        matches!(e, TokenizerError::LengthMismatch { what: "scores", .. })
    });
    check(&|v| v.token_types.push(1), &|e| {
        matches!(
            e,
            TokenizerError::LengthMismatch {
                what: "token_type",
                ..
            }
        )
    });
    check(&|v| v.token_types[7] = 9, &|e| {
        matches!(e, TokenizerError::BadTokenType { id: 7, value: 9 })
    });
    check(&|v| v.token_types[7] = -1, &|e| {
        matches!(e, TokenizerError::BadTokenType { .. })
    });
    check(&|v| v.scores[280] = f32::NAN, &|e| {
        matches!(e, TokenizerError::NanScore { id: 280 })
    });
    check(&|v| v.bos = 1_000_000, &|e| {
        matches!(
            e,
            TokenizerError::SpecialTokenOutOfRange { which: "bos", .. }
        )
    });
    check(&|v| v.eos = v.tokens.len() as u32, &|e| {
        matches!(
            e,
            TokenizerError::SpecialTokenOutOfRange { which: "eos", .. }
        )
    });
    check(&|v| v.unk = Some(u32::MAX), &|e| {
        matches!(
            e,
            TokenizerError::SpecialTokenOutOfRange {
                which: "unknown",
                ..
            }
        )
    });
    check(&|v| v.tokens[20] = "a".into(), &|e| {
        matches!(e, TokenizerError::DuplicateToken { .. })
    });
    check(&|v| v.tokens[20] = "<0xZZ>".into(), &|e| {
        matches!(e, TokenizerError::BadByteToken { id: 20, .. })
    });
    check(
        &|v| {
            v.tokens.clear();
            v.scores.clear();
            v.token_types.clear();
        },
        &|e| matches!(e, TokenizerError::EmptyVocab),
    );
    // Remove a byte token and the unknown token: that byte has no fallback.
    check(
        &|v| {
            let i = v.tokens.iter().position(|t| t == "<0x41>").unwrap();
            v.tokens[i] = "zz".into();
            v.token_types[i] = 1;
            v.unk = None;
        },
        &|e| matches!(e, TokenizerError::NoByteFallback { byte: 0x41 }),
    );
}

#[test]
fn missing_byte_token_falls_back_to_unk() {
    let mut v = toy_vocab();
    let i = v.tokens.iter().position(|t| t == "<0xC3>").unwrap();
    v.tokens[i] = "zz".into();
    v.token_types[i] = 1;
    let tok = Tokenizer::from_vocab(v).unwrap();
    assert_eq!(
        tok.encode("é", false, false),
        vec![3, tok.token_id("<0xA9>").unwrap()]
    );
}
