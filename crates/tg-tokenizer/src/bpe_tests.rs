//! Unit tests of the byte-level BPE tokenizer on small hand-made
//! vocabularies (no model file needed).

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_gguf::Value;

use crate::bpe::byte_chars;
use crate::{keys, ModelKind, StreamDecoder, TokenType, Tokenizer, TokenizerError, Vocab};

const N: i32 = TokenType::Normal.code();
const C: i32 = TokenType::Control.code();
const U: i32 = TokenType::UserDefined.code();
const UNUSED: i32 = TokenType::Unused.code();

/// Merges of the toy vocabulary, highest priority first.
const MERGES: &[&str] = &["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "Ġ Ġ", "ĠĠ ĠĠ", "a b", "b c", "1 2", "12 3", "' s", "Ċ Ċ", "Ġ hello"];

/// Token texts beyond the 256 byte characters: the merge results, a token
/// no merge reaches (`xyz`), and special tokens.
fn toy_tokens() -> Vec<(String, i32)> {
    let mut tokens: Vec<(String, i32)> = byte_chars().iter().map(|c| (c.to_string(), N)).collect();
    for m in MERGES {
        let joined = m.replacen(' ', "", 1);
        if !tokens.iter().any(|t| t.0 == joined) {
            tokens.push((joined, N));
        }
    }
    tokens.push(("xyz".into(), N));
    tokens.push(("<|endoftext|>".into(), C));
    tokens.push(("<|im_start|>".into(), C));
    tokens.push(("<|im_end|>".into(), C));
    tokens.push(("<tool_call>".into(), U));
    tokens.push(("[PAD1]".into(), UNUSED));
    tokens
}

fn toy_vocab(pre: &str) -> Vocab {
    let tokens = toy_tokens();
    let eot = tokens.iter().position(|t| t.0 == "<|endoftext|>").unwrap() as u32;
    let im_end = tokens.iter().position(|t| t.0 == "<|im_end|>").unwrap() as u32;
    Vocab {
        scores: vec![0.0; tokens.len()],
        token_types: tokens.iter().map(|t| t.1).collect(),
        tokens: tokens.into_iter().map(|t| t.0).collect(),
        bos: eot,
        eos: im_end,
        unk: None,
        pad: Some(eot),
        eot: None,
        eom: None,
        add_bos: false,
        add_eos: false,
        add_space_prefix: false,
        bpe: Some(crate::BpeVocab { merges: MERGES.iter().map(|m| m.to_string()).collect(), pre: pre.to_string() }),
    }
}

fn toy(pre: &str) -> Tokenizer {
    Tokenizer::from_vocab(toy_vocab(pre)).expect("toy BPE vocabulary is valid")
}

fn id(tok: &Tokenizer, text: &str) -> u32 {
    tok.token_id(text).unwrap_or_else(|| panic!("no token {text:?}"))
}

fn ids(tok: &Tokenizer, texts: &[&str]) -> Vec<u32> {
    texts.iter().map(|t| id(tok, t)).collect()
}

fn texts(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter().map(|&i| tok.token_text(i).unwrap().to_string()).collect()
}

#[test]
fn metadata_selects_bpe() {
    let v = toy_vocab("qwen2");
    let mut m: HashMap<&str, Value> = HashMap::from([
        (keys::MODEL, Value::from("gpt2")),
        (keys::TOKENS, Value::from(v.tokens.clone())),
        (keys::TOKEN_TYPE, Value::from(v.token_types.clone())),
        (keys::MERGES, Value::from(MERGES.iter().map(|s| s.to_string()).collect::<Vec<_>>())),
        (keys::PRE, Value::from("qwen2")),
        (keys::BOS, Value::U32(v.bos)),
        (keys::EOS, Value::U32(v.eos)),
    ]);
    let load = |m: &HashMap<&str, Value>| Tokenizer::from_vocab(Vocab::from_metadata(|k| m.get(k))?);
    let tok = load(&m).unwrap();
    assert_eq!(tok.model_kind(), ModelKind::Bpe);
    assert_eq!(tok.pre_tokenizer(), Some("qwen2"));
    // BPE defaults: no BOS, no space prefix; scores may be absent.
    assert!(!tok.add_bos() && !tok.add_eos());
    assert_eq!(tok.encode("hello", true, false), ids(&tok, &["hello"]));

    // The Llama 3 family adds BOS unless the file says otherwise.
    m.insert(keys::PRE, Value::from("llama-bpe"));
    assert!(load(&m).unwrap().add_bos());
    m.insert(keys::ADD_BOS, Value::Bool(false));
    assert!(!load(&m).unwrap().add_bos());

    // Token types may be absent (all normal); a missing `pre` means "default".
    m.remove(keys::TOKEN_TYPE);
    m.remove(keys::PRE);
    let tok = load(&m).unwrap();
    assert_eq!(tok.pre_tokenizer(), Some("default"));
    assert_eq!(tok.token_type(id(&tok, "<|im_end|>")).unwrap(), TokenType::Normal);

    // An unknown pre-tokenizer names the key and the value.
    m.insert(keys::PRE, Value::from("qwen9"));
    let e = load(&m).unwrap_err();
    assert!(matches!(&e, TokenizerError::UnknownPreTokenizer { key, value, .. } if *key == keys::PRE && value == "qwen9"), "{e:?}");
    let shown = e.to_string();
    assert!(shown.contains("tokenizer.ggml.pre") && shown.contains("\"qwen9\"") && shown.contains("qwen2"), "{shown}");
    m.insert(keys::PRE, Value::U32(2));
    assert!(matches!(load(&m), Err(TokenizerError::WrongType { key, .. }) if key == keys::PRE));
    m.insert(keys::PRE, Value::from("qwen2"));
    m.insert(keys::MERGES, Value::from(vec![1u32, 2]));
    assert!(matches!(load(&m), Err(TokenizerError::WrongType { key, .. }) if key == keys::MERGES));
}

#[test]
fn bad_merges_are_refused() {
    let check = |merge: &str, want: &str| {
        let mut v = toy_vocab("qwen2");
        v.bpe.as_mut().unwrap().merges.insert(3, merge.to_string());
        match Tokenizer::from_vocab(v) {
            Err(TokenizerError::BadMerge { index: 3, merge: m, reason }) => {
                assert_eq!(m, merge);
                assert!(reason.contains(want), "{merge:?}: {reason}");
            }
            other => panic!("{merge:?}: {other:?}"),
        }
    };
    check("hello", "no space");
    check("q zz", "\"zz\" is not a token");
    check("x y", "merged text \"xy\" is not a token");
    // A repeated merge keeps its first rank (llama.cpp's `emplace`).
    let mut v = toy_vocab("qwen2");
    v.bpe.as_mut().unwrap().merges.push("h e".into());
    assert!(Tokenizer::from_vocab(v).is_ok());
}

#[test]
fn merges_words() {
    let tok = toy("qwen2");
    assert_eq!(tok.encode("hello world", false, false), ids(&tok, &["hello", "Ġworld"]));
    assert_eq!(tok.encode(" hello", false, false), ids(&tok, &["Ġhello"]));
    // Merge order: "a b" outranks "b c".
    assert_eq!(tok.encode("abc", false, false), ids(&tok, &["ab", "c"]));
    // Equal pairs merge leftmost first.
    assert_eq!(tok.encode("lll", false, false), ids(&tok, &["ll", "l"]));
    // Unmerged characters are their byte tokens.
    assert_eq!(tok.encode("zq", false, false), ids(&tok, &["z", "q"]));
    // Non-ASCII text goes through the byte alphabet: "é" is C3 A9.
    assert_eq!(tok.encode("é", false, false), ids(&tok, &["Ã", "©"]));
    assert_eq!(tok.encode("", true, true), Vec::<u32>::new());
}

#[test]
fn pre_tokenizers_split_like_llama_cpp() {
    let words = |pre: &str, text: &str| toy(pre).bpe_encoder().unwrap().pre_tokenize(text);
    // Qwen 2: contractions in either case, single digits, newline runs with
    // the spaces before them, a trailing space run kept whole.
    assert_eq!(words("qwen2", "Hello world's 123  \n\n x'S  "), ["Hello", "Ġworld", "'s", "Ġ", "1", "2", "3", "ĠĠĊĊ", "Ġx", "'S", "ĠĠ"]);
    // Llama 3: digits in threes.
    assert_eq!(words("llama-bpe", "12345 a"), ["123", "45", "Ġa"]);
    // GPT-2: lowercase contractions only; a space run before a word leaves
    // its last space to the word.
    assert_eq!(words("gpt-2", "it's IT'S   go 42"), ["it", "'s", "ĠIT", "'", "S", "ĠĠ", "Ġgo", "Ġ42"]);
    // `default`: punctuation runs first, then GPT-2, digits, three digits.
    assert_eq!(words("default", "a+=b 12345"), ["a", "+=", "b", "Ġ", "123", "45"]);
    // Punctuation runs take trailing newlines (Qwen 2, Llama 3).
    assert_eq!(words("qwen2", "a.\n\nb"), ["a", ".ĊĊ", "b"]);
    // A tab before a letter is the letter's prefix; other whitespace is not.
    assert_eq!(words("qwen2", "\tx \u{3000}y"), ["ĉx", "Ġ", "ãĢĢy"]);
}

#[test]
fn ignore_merges_for_llama3() {
    // "xyz" is a token but no merge reaches it.
    assert_eq!(texts(&toy("llama-bpe"), &toy("llama-bpe").encode("xyz", false, false)), ["xyz"]);
    assert_eq!(texts(&toy("qwen2"), &toy("qwen2").encode("xyz", false, false)), ["x", "y", "z"]);
    // Digits: "123" is a token (and reachable by merges).
    let tok = toy("llama-bpe");
    assert_eq!(texts(&tok, &tok.encode("1234", false, false)), ["123", "4"]);
    let tok = toy("qwen2");
    assert_eq!(texts(&tok, &tok.encode("1234", false, false)), ["1", "2", "3", "4"]);
}

#[test]
fn special_tokens() {
    let tok = toy("qwen2");
    let text = "<|im_start|>hello<tool_call><|im_end|>";
    assert_eq!(tok.encode(text, false, true), ids(&tok, &["<|im_start|>", "hello", "<tool_call>", "<|im_end|>"]));
    // Without parse_special control tokens are text; user-defined ones
    // still match.
    let plain = tok.encode(text, false, false);
    assert!(!plain.contains(&id(&tok, "<|im_start|>")) && !plain.contains(&id(&tok, "<|im_end|>")));
    assert!(plain.contains(&id(&tok, "<tool_call>")));
    assert_eq!(tok.decode(&plain, false).unwrap(), text);
    // Control tokens are hidden unless rendered; user-defined ones are not.
    let special = tok.encode(text, false, true);
    assert_eq!(tok.decode(&special, false).unwrap(), "hello<tool_call>");
    assert_eq!(tok.decode(&special, true).unwrap(), text);
    assert!(tok.is_special(id(&tok, "<|im_end|>")) && !tok.is_special(id(&tok, "<tool_call>")));
    // End of generation: EOS and the texts llama.cpp recognises.
    assert_eq!(tok.eog_ids(), &[id(&tok, "<|endoftext|>"), id(&tok, "<|im_end|>")]);
    // Unused slots decode to nothing.
    assert_eq!(tok.token_bytes(id(&tok, "[PAD1]"), true).unwrap(), b"");
    // add_special with add_bos false adds nothing.
    assert_eq!(tok.encode("hello", true, true), ids(&tok, &["hello"]));
}

#[test]
fn byte_tokens_decode_to_raw_bytes() {
    let tok = toy("qwen2");
    let e = tok.encode("é€", false, false);
    assert_eq!(e.len(), 5);
    assert_eq!(tok.token_bytes(e[0], false).unwrap(), &[0xC3]);
    assert_eq!(tok.token_bytes(id(&tok, "Ġworld"), false).unwrap(), b" world");
    assert_eq!(tok.decode_bytes(&e[..1], false).unwrap(), &[0xC3]);
    assert_eq!(tok.decode(&e[..1], false).unwrap(), "\u{FFFD}");
    let mut sd = StreamDecoder::new(&tok, false);
    let pushed: Vec<String> = e.iter().map(|&i| sd.push(i).unwrap()).collect();
    assert_eq!(pushed, ["", "é", "", "", "€"]);
    assert_eq!(sd.finish(), "");
}

#[test]
fn clean_spaces_only_where_llama_cpp_cleans() {
    // GPT-2's pre-tokenizer cleans spaces when decoding; Qwen 2's does not.
    let text = "hello , world .";
    let gpt2 = toy("gpt-2");
    let e = gpt2.encode(text, false, false);
    assert_eq!(gpt2.decode(&e, false).unwrap(), "hello, world.");
    let mut sd = StreamDecoder::new(&gpt2, false);
    let streamed: String = e.iter().map(|&i| sd.push(i).unwrap()).collect();
    assert_eq!(streamed, text);
    let qwen = toy("qwen2");
    assert_eq!(qwen.decode(&qwen.encode(text, false, false), false).unwrap(), text);
}

/// Random text mixing vocabulary pieces, specials, whitespace and
/// arbitrary scalar values.
fn random_text(rng: &mut ChaCha8Rng) -> String {
    const POOL: &[&str] = &[
        "hello",
        " world",
        "'s",
        "'S",
        "12",
        "3",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "\r\n",
        ".",
        ",",
        "<|im_start|>",
        "<|im_end|>",
        "<tool_call>",
        "<|endoftext|>",
        "[PAD1]",
        "é",
        "日本",
        "😀",
        "\u{301}",
        "\u{3000}",
        "\u{85}",
        "\u{0}",
        "abc",
        "xyz",
    ];
    let n = rng.gen_range(0..25);
    let mut s = String::new();
    for _ in 0..n {
        if rng.gen_bool(0.2) {
            if let Some(c) = char::from_u32(rng.gen_range(0..0x11_0000)) {
                s.push(c);
            }
        } else {
            s.push_str(POOL[rng.gen_range(0..POOL.len())]);
        }
    }
    s
}

#[test]
fn random_round_trip_and_stream() {
    let seed = 0xb9e_5eedu64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let toks = [toy("qwen2"), toy("llama-bpe"), toy("qwen35"), toy("starcoder")];
    for _ in 0..1500 {
        let s = random_text(&mut rng);
        for tok in &toks {
            for ps in [false, true] {
                let e = tok.encode(&s, false, ps);
                // llama-bpe cleans spaces when decoding: compare raw pieces.
                let raw: Vec<u8> = e.iter().flat_map(|&i| tok.token_bytes(i, true).unwrap().to_vec()).collect();
                assert_eq!(raw, s.as_bytes(), "{s:?} pre {:?} parse_special {ps}", tok.pre_tokenizer());
                let mut sd = StreamDecoder::new(tok, true);
                let mut streamed = String::new();
                for &i in &e {
                    streamed.push_str(&sd.push(i).unwrap());
                    assert!(sd.pending_bytes().len() < 4);
                }
                streamed.push_str(&sd.finish());
                assert_eq!(streamed, s);
            }
        }
        // `tokenizers`' ByteLevel decoder agrees with our pieces.
        let tok = &toks[0];
        let e = tok.encode(&s, false, false);
        assert_eq!(tok.bpe_encoder().unwrap().hf_decode(&e).as_deref(), Some(s.as_str()));
    }
}

/// The merge loop the obvious quadratic way: repeatedly merge the adjacent
/// pair of lowest rank, leftmost first.
fn bpe_naive(ranks: &HashMap<(String, String), usize>, word: &str) -> Vec<String> {
    let mut syms: Vec<String> = word.chars().map(String::from).collect();
    loop {
        let best = (0..syms.len().saturating_sub(1)).filter_map(|i| ranks.get(&(syms[i].clone(), syms[i + 1].clone())).map(|&r| (r, i))).min();
        let Some((_, i)) = best else { break };
        let right = syms.remove(i + 1);
        syms[i].push_str(&right);
    }
    syms
}

#[test]
fn random_merges_agree_with_naive_bpe() {
    let seed = 0x3e_26e5u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for round in 0..20 {
        // A random merge table over the letters a..d.
        let mut tokens: Vec<String> = byte_chars().iter().map(|c| c.to_string()).collect();
        let mut merges: Vec<String> = Vec::new();
        let mut pool: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        while merges.len() < 40 {
            let l = pool[rng.gen_range(0..pool.len())].clone();
            let r = pool[rng.gen_range(0..pool.len())].clone();
            let joined = format!("{l}{r}");
            if joined.len() > 7 || merges.contains(&format!("{l} {r}")) {
                continue;
            }
            merges.push(format!("{l} {r}"));
            if !tokens.contains(&joined) {
                tokens.push(joined.clone());
                pool.push(joined);
            }
        }
        let ranks: HashMap<(String, String), usize> = merges
            .iter()
            .enumerate()
            .rev() // the first rank of a repeated pair wins
            .map(|(i, m)| {
                let (l, r) = m.split_once(' ').unwrap();
                ((l.to_string(), r.to_string()), i)
            })
            .collect();
        let n = tokens.len();
        let tok = Tokenizer::from_vocab(Vocab {
            tokens,
            scores: vec![0.0; n],
            token_types: vec![N; n],
            bos: 0,
            eos: 0,
            unk: None,
            pad: None,
            eot: None,
            eom: None,
            add_bos: false,
            add_eos: false,
            add_space_prefix: false,
            bpe: Some(crate::BpeVocab { merges, pre: "qwen2".into() }),
        })
        .unwrap();
        for _ in 0..200 {
            let len = rng.gen_range(1..24);
            let word: String = (0..len).map(|_| ['a', 'b', 'c', 'd'][rng.gen_range(0..4)]).collect();
            // A letter run is one word for the Qwen 2 pre-tokenizer.
            let got = texts(&tok, &tok.encode(&word, false, false));
            assert_eq!(got, bpe_naive(&ranks, &word), "round {round} word {word}");
        }
    }
}

#[test]
fn long_whitespace_runs_split_exactly() {
    // The regex engine must not give up on long runs (a failed match would
    // leave the rest of the text as one word).
    let tok = toy("qwen2");
    let enc = tok.bpe_encoder().unwrap();
    let n = 50_000;
    let text = format!("{}x{}", " ".repeat(n), "\n".repeat(n));
    let words = enc.pre_tokenize(&text);
    assert_eq!(words.len(), 3, "{:?}", words.iter().map(|w| w.len()).collect::<Vec<_>>());
    assert_eq!(words[0].chars().count(), n - 1);
    assert_eq!(words[1], "Ġx");
    assert_eq!(words[2].chars().count(), n);
    let e = tok.encode(&text, false, false);
    // 49999 spaces: 12499 "ĠĠĠĠ", one "ĠĠ", one "Ġ"; "Ġ" "x"; 25000 "ĊĊ".
    assert_eq!(e.len(), 12_501 + 2 + 25_000);
    assert_eq!(tok.decode(&e, false).unwrap(), text);
}
