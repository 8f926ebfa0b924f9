//! Tests against the real Qwen2.5-Coder-0.5B-Instruct vocabulary (byte-level
//! BPE, `tokenizer.ggml.pre = qwen2`; needs the model file, see
//! `common::qwen_tokenizer`). Expected ids are read off the GGUF vocabulary
//! itself; the expected chat renderings come from Python's jinja2 3.1.6 with
//! Hugging Face's settings (`trim_blocks`, `lstrip_blocks`) on the file's
//! template. Token-for-token agreement with llama.cpp on a corpus is checked
//! by `llama_cpp_fixture.rs`.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_tokenizer::{parse_messages, ChatTemplate, Message, ModelKind, StreamDecoder, TokenType, Tokenizer};

macro_rules! tokenizer_or_skip {
    () => {
        match common::qwen_tokenizer() {
            Some((tok, _)) => tok,
            None => return,
        }
    };
}

const ENDOFTEXT: u32 = 151_643;
const IM_START: u32 = 151_644;
const IM_END: u32 = 151_645;
const TOOL_CALL: u32 = 151_657;
const NL: u32 = 198; // "Ċ"
const USER: u32 = 872;
const SYSTEM: u32 = 8948;
const ASSISTANT: u32 = 77_091;

#[test]
fn metadata() {
    let Some((tok, load_time)) = common::qwen_tokenizer() else {
        return;
    };
    println!("Tokenizer::from_gguf took {load_time:?}");
    assert_eq!(tok.model_kind(), ModelKind::Bpe);
    assert_eq!(tok.pre_tokenizer(), Some("qwen2"));
    assert_eq!(tok.vocab_size(), 151_936);
    assert_eq!((tok.bos(), tok.eos(), tok.unk(), tok.pad()), (ENDOFTEXT, IM_END, None, Some(ENDOFTEXT)));
    assert!(!tok.add_bos() && !tok.add_eos());
    // EOG: EOS, <|endoftext|>, the FIM pad / repo / file-separator tokens,
    // and "</s>" (a normal token llama.cpp recognises by its text).
    assert_eq!(tok.eog_ids(), &[128_247, ENDOFTEXT, IM_END, 151_662, 151_663, 151_664]);
    assert_eq!(tok.token_text(128_247).unwrap(), "</s>");
    assert_eq!(tok.token_type(IM_START).unwrap(), TokenType::Control);
    assert_eq!(tok.token_type(TOOL_CALL).unwrap(), TokenType::UserDefined);
    assert_eq!(tok.token_type(151_665).unwrap(), TokenType::Unused);
    assert!(tok.is_special(IM_START) && !tok.is_special(TOOL_CALL) && !tok.is_special(NL));
    assert_eq!(tok.token_text(1879).unwrap(), "Ġworld");
    assert_eq!(tok.token_bytes(1879, false).unwrap(), b" world");
    assert_eq!(tok.token_bytes(NL, false).unwrap(), b"\n");
    assert_eq!(tok.token_bytes(IM_START, false).unwrap(), b"");
    assert_eq!(tok.token_bytes(IM_START, true).unwrap(), b"<|im_start|>");
    assert_eq!(tok.token_bytes(151_665, true).unwrap(), b"");
    // A byte of a multi-byte character: "ô" stands for 0xF4.
    assert_eq!(tok.token_text(176).unwrap(), "ô");
    assert_eq!(tok.token_bytes(176, false).unwrap(), &[0xF4]);
}

#[test]
fn structural_cases() {
    let tok = tokenizer_or_skip!();
    assert_eq!(tok.encode("", true, true), Vec::<u32>::new());
    assert_eq!(tok.encode("Hello world", true, false), vec![9707, 1879]);
    // Digits one by one.
    assert_eq!(tok.encode("123", false, false), vec![16, 17, 18]);
    // Indentation: a newline ends the punctuation run before it; three
    // spaces, then the word takes the fourth.
    assert_eq!(tok.encode("def fib(n):\n    return n", false, false), vec![750, 15_801, 1445, 982, 262, 470, 308]);
    // A character outside the vocabulary: its four bytes.
    assert_eq!(tok.encode("\u{10FFFF}", false, false), vec![176, 237, 123, 123]);

    let text = "<|im_start|>user\nHi<|im_end|>\n";
    let special = tok.encode(text, false, true);
    assert_eq!(special, vec![IM_START, USER, NL, 13_048, IM_END, NL]);
    let plain = tok.encode(text, false, false);
    assert!(!plain.contains(&IM_START) && !plain.contains(&IM_END), "{plain:?}");
    assert_eq!(tok.decode(&plain, false).unwrap(), text);
    assert_eq!(tok.decode(&special, false).unwrap(), "user\nHi\n");
    assert_eq!(tok.decode(&special, true).unwrap(), text);
    // <tool_call> is user-defined: matched and rendered in both modes.
    for ps in [false, true] {
        let e = tok.encode("a<tool_call>b", false, ps);
        assert_eq!(e.len(), 3);
        assert_eq!(e[1], TOOL_CALL);
        assert_eq!(tok.decode(&e, false).unwrap(), "a<tool_call>b");
    }
}

/// Random text over a pool of code, whitespace, digits, scripts, emoji and
/// Qwen's special-token texts, plus arbitrary scalar values.
fn random_text(rng: &mut ChaCha8Rng, max_items: usize) -> String {
    const POOL: &[&str] = &[
        "def",
        " f",
        "(x):",
        "\n",
        "    ",
        "\t",
        "\r\n",
        "  ",
        " ",
        "return",
        " x",
        "'s",
        "'LL",
        "0",
        "42",
        "3.14",
        "1,000",
        "é",
        "ß",
        "日本語",
        "中文",
        "한국어",
        "مرحبا",
        "😀",
        "👍🏽",
        "\u{301}",
        "\u{3000}",
        "\u{A0}",
        "\u{85}",
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<tool_call>",
        "</tool_call>",
        "[PAD151700]",
        "</s>",
        "<|fim_prefix|>",
        "<",
        "|",
        ">",
        "\u{0}",
        "\u{FEFF}",
    ];
    let n = rng.gen_range(0..max_items);
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
    let tok = tokenizer_or_skip!();
    let seed = 0x0e77_a5ed_u64;
    println!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..2000 {
        let s = random_text(&mut rng, 40);
        for ps in [false, true] {
            let ids = tok.encode(&s, false, ps);
            assert_eq!(tok.decode(&ids, true).unwrap(), s, "round trip of {s:?} (parse_special {ps})");
            let mut sd = StreamDecoder::new(tok, true);
            let mut streamed = String::new();
            for &id in &ids {
                streamed.push_str(&sd.push(id).unwrap());
            }
            streamed.push_str(&sd.finish());
            assert_eq!(streamed, s);
        }
    }
    // A character split over byte tokens appears once complete.
    let mut sd = StreamDecoder::new(tok, false);
    let pieces: Vec<String> = tok.encode("\u{10FFFF}", false, false).iter().map(|&id| sd.push(id).unwrap()).collect();
    assert_eq!(pieces, ["", "", "", "\u{10FFFF}"]);
}

/// A long input (130 KB of code) encodes and decodes back to itself; the time is printed,
/// not asserted (a benchmark is a command, not a test).
#[test]
fn long_inputs_round_trip() {
    let tok = tokenizer_or_skip!();
    let text = "fn main() {\n    println!(\"Hello, world! 12345\");\n}\n".repeat(2000);
    let t0 = std::time::Instant::now();
    let ids = tok.encode(&text, false, false);
    let took = t0.elapsed();
    println!("{} bytes -> {} tokens in {took:?}", text.len(), ids.len());
    assert_eq!(tok.decode(&ids, false).unwrap(), text);
}

const DEFAULT_SYSTEM_PROMPT: &str = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a quicksort in Python.<|im_end|>\n<|im_start|>assistant\n";

const MULTI_TURN: &str = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n";

#[test]
fn chat_template_renders_like_hugging_face() {
    let Some(f) = common::qwen_gguf() else {
        return;
    };
    let tok = tokenizer_or_skip!();
    let template = ChatTemplate::from_gguf(&f).expect("template compiles").expect("the file has a chat template");
    assert_eq!(template.bos_token(), "<|endoftext|>");
    assert_eq!(template.eos_token(), "<|im_end|>");

    // Without a system message the template supplies Qwen's default one.
    let messages = parse_messages(r#"[{"role": "user", "content": "Write a quicksort in Python."}]"#).unwrap();
    let prompt = template.render(&messages, true).unwrap();
    assert_eq!(prompt, DEFAULT_SYSTEM_PROMPT);

    let messages = [Message::new("system", "You are terse."), Message::new("user", "Hi"), Message::new("assistant", "Hello."), Message::new("user", "Bye")];
    assert_eq!(template.render(&messages, false).unwrap(), MULTI_TURN);

    // The prompt tokenizes into the turn markers (parse_special), ending
    // with the assistant turn's opening.
    let ids = tok.encode(&prompt, true, true);
    assert_eq!(&ids[..3], &[IM_START, SYSTEM, NL]);
    assert_eq!(&ids[ids.len() - 3..], &[IM_START, ASSISTANT, NL]);
    assert_eq!(ids.iter().filter(|&&i| i == IM_END).count(), 2);
    assert_eq!(tok.decode(&ids, true).unwrap(), prompt);
}

#[test]
fn gemma_stays_sentencepiece() {
    // The SentencePiece path through the same API.
    let Some((gemma, _)) = common::gemma_tokenizer() else {
        return;
    };
    assert_eq!(gemma.model_kind(), ModelKind::Spm);
    assert_eq!(gemma.pre_tokenizer(), None);
    let _: &Tokenizer = gemma;
}
