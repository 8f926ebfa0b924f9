//! Tests against the real Gemma 3 vocabulary (needs the model file; see
//! `common::gemma_tokenizer`). Expected ids here are read off the GGUF
//! vocabulary itself (with gguf-py); token-for-token agreement with llama.cpp
//! is checked by `llama_cpp_fixture.rs`.

mod common;

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_tokenizer::{StreamDecoder, TokenType, Tokenizer};

macro_rules! tokenizer_or_skip {
    () => {
        match common::gemma_tokenizer() {
            Some((tok, _)) => tok,
            None => return,
        }
    };
}

const BYTE0: u32 = 238; // <0x00>
const NL: u32 = 107; // "\n" (user-defined)
const START_OF_TURN: u32 = 105;
const END_OF_TURN: u32 = 106;

#[test]
fn metadata() {
    let Some((tok, load_time)) = common::gemma_tokenizer() else {
        return;
    };
    println!("Tokenizer::from_gguf took {load_time:?}");
    assert!(
        load_time.as_secs_f64() < 1.0,
        "loading the vocabulary took {load_time:?}"
    );
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(
        (tok.bos(), tok.eos(), tok.unk(), tok.pad()),
        (2, 1, Some(3), Some(0))
    );
    assert!(tok.add_bos() && !tok.add_eos());
    // llama.cpp also ends generation at "</s>" (a user-defined token in
    // Gemma 3 that it turns into a control token by its text).
    assert_eq!(tok.eog_ids(), &[1, END_OF_TURN, 212]);
    assert_eq!(tok.token_type(212).unwrap(), TokenType::UserDefined);
    assert!(tok.is_special(212) && !tok.is_special(NL) && tok.is_special(START_OF_TURN));
    assert!(
        tok.is_eog(1) && tok.is_eog(END_OF_TURN) && !tok.is_eog(2) && !tok.is_eog(START_OF_TURN)
    );
    assert_eq!(tok.token_type(START_OF_TURN).unwrap(), TokenType::Control);
    assert_eq!(tok.token_type(NL).unwrap(), TokenType::UserDefined);
    assert_eq!(tok.token_type(BYTE0).unwrap(), TokenType::Byte);
    assert_eq!(tok.token_text(BYTE0 + 0xAB).unwrap(), "<0xAB>");
    assert_eq!(tok.token_bytes(BYTE0 + 0xAB, false).unwrap(), &[0xAB]);
    assert_eq!(tok.token_bytes(2430, false).unwrap(), b" user");
    assert_eq!(tok.token_bytes(START_OF_TURN, false).unwrap(), b"");
    assert_eq!(
        tok.token_bytes(START_OF_TURN, true).unwrap(),
        b"<start_of_turn>"
    );
}

#[test]
fn structural_cases() {
    let tok = tokenizer_or_skip!();
    assert_eq!(tok.encode("", false, false), Vec::<u32>::new());
    assert_eq!(tok.encode("", true, false), vec![2]);
    assert_eq!(tok.encode("", true, true), vec![2]);

    // Newline, tab and space runs are user-defined tokens: matched in both
    // modes, longest first (the longest newline run is 31).
    for ps in [false, true] {
        assert_eq!(tok.encode("\n", false, ps), vec![NL]);
        assert_eq!(tok.encode("\n\n\n", false, ps), vec![NL + 2]);
        assert_eq!(tok.encode(&"\n".repeat(32), false, ps), vec![NL + 30, NL]);
        assert_eq!(tok.encode("\t", false, ps), vec![255_968]);
        assert_eq!(tok.encode("  ", false, ps), vec![138]);
        assert_eq!(tok.encode("user", false, ps), vec![2364]);
        assert_eq!(tok.encode(" user", false, ps), vec![2430]);
        assert_eq!(tok.encode(" ", false, ps), vec![236_743]);
    }

    // Control tokens only with parse_special.
    let text = "<start_of_turn>user\nHello<end_of_turn>\n";
    let special = tok.encode(text, true, true);
    assert_eq!(
        special,
        vec![2, START_OF_TURN, 2364, NL, 9259, END_OF_TURN, NL]
    );
    let plain = tok.encode(text, false, false);
    assert!(
        !plain.contains(&START_OF_TURN) && !plain.contains(&END_OF_TURN),
        "{plain:?}"
    );
    assert_eq!(tok.decode(&plain, false).unwrap(), text);
    assert_eq!(tok.decode(&special, false).unwrap(), "user\nHello\n");
    assert_eq!(tok.decode(&special, true).unwrap(), format!("<bos>{text}"));

    // Byte fallback for a character the vocabulary lacks.
    assert_eq!(tok.token_id("\u{10FFFF}"), None);
    assert_eq!(
        tok.encode("\u{10FFFF}", false, false),
        [0xF4, 0x8F, 0xBF, 0xBF].map(|b| BYTE0 + b).to_vec()
    );
    assert_eq!(tok.encode("😀", false, false), vec![242_398]);
}

/// Random text over a pool mixing words, specials, whitespace runs and
/// arbitrary scalar values (never U+2581, which decodes to a space by design).
fn random_text(rng: &mut ChaCha8Rng, max_items: usize) -> String {
    const POOL: &[&str] = &[
        "the",
        " the",
        "token",
        "izer",
        " ",
        "  ",
        "   ",
        "\n",
        "\n\n",
        "\t",
        "\r\n",
        ".",
        ",",
        "<",
        ">",
        "</",
        "-",
        "é",
        "ß",
        "日本語",
        "中文",
        "한국어",
        "😀",
        "👍🏽",
        "\u{301}",
        "<start_of_turn>",
        "<end_of_turn>",
        "<bos>",
        "<unused12>",
        "<table>",
        "[multimodal]",
        "<0x41>",
        "def f(x):",
        "1234567",
        "\u{0}",
        "\u{FEFF}",
    ];
    let n = rng.gen_range(0..max_items);
    let mut s = String::new();
    for _ in 0..n {
        if rng.gen_bool(0.2) {
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
fn random_round_trip() {
    let tok = tokenizer_or_skip!();
    let seed = 0x6e33_2a11_u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..2000 {
        let s = random_text(&mut rng, 40);
        for ps in [false, true] {
            let ids = tok.encode(&s, false, ps);
            assert_eq!(
                tok.decode(&ids, true).unwrap(),
                s,
                "round trip of {s:?} (parse_special {ps})"
            );
            // Streaming gives the same text.
            let mut sd = StreamDecoder::new(tok, true);
            let mut streamed = String::new();
            for &id in &ids {
                streamed.push_str(&sd.push(id).unwrap());
            }
            streamed.push_str(&sd.finish());
            assert_eq!(streamed, s);
        }
    }
}

/// The merge loop the obvious quadratic way, for cross-checking the heap.
fn spm_naive(tok: &Tokenizer, text: &str) -> Vec<u32> {
    let mut syms: Vec<String> = text.replace(' ', "▁").chars().map(String::from).collect();
    loop {
        let mut best: Option<(f32, usize)> = None;
        for i in 0..syms.len().saturating_sub(1) {
            if let Some(id) = tok.token_id(&format!("{}{}", syms[i], syms[i + 1])) {
                let s = tok.token_score(id).unwrap();
                if !matches!(best, Some((b, _)) if s <= b) {
                    best = Some((s, i));
                }
            }
        }
        let Some((_, i)) = best else { break };
        let r = syms.remove(i + 1);
        syms[i].push_str(&r);
    }
    syms.iter()
        .flat_map(|s| match tok.token_id(s) {
            Some(id) => vec![id],
            None => s.bytes().map(|b| BYTE0 + u32::from(b)).collect(),
        })
        .collect()
}

#[test]
fn heap_merge_matches_quadratic_merge() {
    let tok = tokenizer_or_skip!();
    let seed = 0xa11_0c8e_u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut checked = 0;
    for _ in 0..400 {
        // No user-defined/control texts, so the whole string is one fragment.
        let mut s: String = random_text(&mut rng, 25)
            .chars()
            .filter(|c| !matches!(c, '\n' | '\t' | '<' | '['))
            .collect();
        while s.contains("  ") {
            s = s.replace("  ", " ");
        }
        assert_eq!(
            tok.encode(&s, false, false),
            spm_naive(tok, &s),
            "text {s:?}"
        );
        checked += 1;
    }
    assert_eq!(checked, 400);
}

#[test]
fn long_inputs_are_fast() {
    let tok = tokenizer_or_skip!();
    let seed = 0x10_9e57_u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let words = [
        "the",
        "quick",
        "brown",
        "fox",
        "tokenizer",
        "Gemma",
        "語",
        "😀",
        "12345",
        "\n",
        "  ",
        "<start_of_turn>",
    ];
    let mut prose = String::new();
    while prose.len() < 2_000_000 {
        prose.push_str(words[rng.gen_range(0..words.len())]);
        prose.push(' ');
    }
    let cases: Vec<(&str, String)> = vec![
        ("2 MB prose", prose),
        (
            "500k letters, no spaces",
            (0..500_000)
                .map(|i| (b'a' + (i * 7 % 26) as u8) as char)
                .collect(),
        ),
        ("200k spaces", " ".repeat(200_000)),
        (
            "2M spaces and tabs",
            " ".repeat(1_000_000) + &"\t".repeat(1_000_000),
        ),
        ("200k newlines", "\n".repeat(200_000)),
        (
            "specials x 20k",
            "<unused7><start_of_turn>x<table>".repeat(20_000),
        ),
        ("300k 'a'", "a".repeat(300_000)),
    ];
    for (name, text) in &cases {
        for ps in [false, true] {
            let t0 = Instant::now();
            let ids = tok.encode(text, false, ps);
            let dt = t0.elapsed();
            println!(
                "{name} (parse_special {ps}): {} bytes -> {} tokens in {dt:?} ({:.1} MB/s)",
                text.len(),
                ids.len(),
                text.len() as f64 / dt.as_secs_f64() / 1e6
            );
            assert!(dt.as_secs_f64() < 10.0, "{name}: {dt:?}");
            assert_eq!(tok.decode(&ids, true).unwrap(), *text);
        }
    }
}
