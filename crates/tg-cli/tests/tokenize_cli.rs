//! `tg tokenize` end to end: a small byte-level BPE vocabulary written as a
//! GGUF file (no model needed: the command reads only the tokenizer
//! metadata), the real Qwen2.5-Coder and Gemma 3 vocabularies when present,
//! and bad vocabularies giving a clear error and a non-zero exit. Also the
//! chat front ends on those files: `tg chat` over two turns and the errors of
//! `tg generate --messages`.

use std::path::PathBuf;
use std::process::Command;

use tg_gguf::{GgufWriter, Value};

/// The default Gemma 3 model (`TG_MODEL` or the cache), or `None` after
/// printing SKIPPED with `TG_ALLOW_MISSING_MODEL=1`.
fn gemma() -> Option<PathBuf> {
    find("TG_MODEL", tg_models::cache::DEFAULT_MODEL, "scripts/fetch_model.py")
}

/// Qwen2.5-Coder-0.5B-Instruct (`TG_QWEN_MODEL` or the cache), like [`gemma`].
fn qwen() -> Option<PathBuf> {
    find("TG_QWEN_MODEL", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "scripts/fetch_model.py --model qwen2.5-coder-0.5b")
}

fn find(env: &str, file: &str, fetch: &str) -> Option<PathBuf> {
    let p = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join(file));
    if p.is_file() {
        Some(p)
    } else if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: model not found at {}", p.display());
        None
    } else {
        panic!("model not found at {}: run {fetch} or set {env}", p.display())
    }
}

fn tg(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tg")).args(args).output().expect("run tg");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The ids `tg tokenize --json ARGS` prints.
fn json_ids(args: &[&str]) -> Vec<u32> {
    let mut all = vec!["tokenize", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = tg(&all);
    assert_eq!(code, 0, "{all:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    v["ids"].as_array().unwrap_or_else(|| panic!("no ids in {out}")).iter().map(|x| x.as_u64().expect("an id") as u32).collect()
}

fn expect_error(args: &[&str], needles: &[&str]) {
    let (code, _, err) = tg(args);
    assert_ne!(code, 0, "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{args:?}: stderr should mention {needle:?}: {err}");
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tg-tokenize-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for
/// themselves, the other 68 bytes for U+0100.. in byte order.
fn byte_chars() -> Vec<char> {
    let mut next = 0x100u32;
    (0..=255u8)
        .map(|b| {
            if matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF) {
                char::from(b)
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap()
            }
        })
        .collect()
}

const MERGES: &[&str] = &["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"];

/// A byte-level BPE vocabulary: the 256 byte characters, the merge results
/// ("hello" = 261, "Ġworld" = 264 ... in merge order), then `<|endoftext|>`
/// and `<|im_start|>` (control) and `<tool_call>` (user-defined).
fn tiny_bpe(edit: impl Fn(&str, Value) -> Option<Value>) -> (PathBuf, Vec<String>) {
    let mut tokens: Vec<String> = byte_chars().iter().map(|c| c.to_string()).collect();
    for m in MERGES {
        tokens.push(m.replacen(' ', "", 1));
    }
    let mut types = vec![1i32; tokens.len()];
    for (t, ty) in [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<tool_call>", 4)] {
        tokens.push(t.into());
        types.push(ty);
    }
    let eot = tokens.len() as u32 - 3;
    let meta: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::from("qwen2")),
        ("tokenizer.ggml.model", Value::from("gpt2")),
        ("tokenizer.ggml.pre", Value::from("qwen2")),
        ("tokenizer.ggml.tokens", Value::from(tokens.clone())),
        ("tokenizer.ggml.token_type", Value::from(types)),
        ("tokenizer.ggml.merges", Value::from(MERGES.iter().map(|m| m.to_string()).collect::<Vec<_>>())),
        ("tokenizer.ggml.bos_token_id", Value::U32(eot)),
        ("tokenizer.ggml.eos_token_id", Value::U32(eot)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
    ];
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        if let Some(v) = edit(k, v) {
            w.add(k, v);
        }
    }
    let name = format!("tiny-bpe-{}.gguf", std::thread::current().name().unwrap_or("t").replace("::", "-"));
    let path = tmp(&name);
    w.write_to(&path).unwrap();
    (path, tokens)
}

fn id(tokens: &[String], text: &str) -> u32 {
    tokens.iter().position(|t| t == text).unwrap_or_else(|| panic!("no {text:?}")) as u32
}

#[test]
fn tokenizes_with_a_bpe_vocabulary() {
    let (path, tokens) = tiny_bpe(|_, v| Some(v));
    let m = path.to_str().unwrap();
    let (hello, world) = (id(&tokens, "hello"), id(&tokens, "Ġworld"));
    let (eot, im_start, tool) = (id(&tokens, "<|endoftext|>"), id(&tokens, "<|im_start|>"), id(&tokens, "<tool_call>"));

    assert_eq!(json_ids(&["-m", m, "hello world"]), [hello, world]);
    // add_bos_token is false: nothing added by default; --bos forces BOS.
    assert_eq!(json_ids(&["-m", m, "--bos", "hello"]), [eot, hello]);
    assert_eq!(json_ids(&["-m", m, "--no-bos", "hello"]), [hello]);
    // Control tokens only with --special; user-defined ones always.
    assert_eq!(json_ids(&["-m", m, "--special", "<|im_start|>hello"]), [im_start, hello]);
    let plain = json_ids(&["-m", m, "<|im_start|>hello"]);
    assert!(!plain.contains(&im_start) && plain.len() > 2, "{plain:?}");
    assert_eq!(json_ids(&["-m", m, "hello<tool_call>"]), [hello, tool]);

    // Text output: id and piece per line, bytes of partial characters as <0xNN>.
    let (code, out, err) = tg(&["tokenize", "-m", m, "--special", "<|im_start|>hello world é"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), [im_start.to_string().as_str(), "\"<|im_start|>\""]);
    assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), [hello.to_string().as_str(), "\"hello\""]);
    assert!(lines[2].ends_with(" \" world\""), "{}", lines[2]);
    assert!(lines[3].ends_with(" \" \""), "{}", lines[3]);
    assert!(lines[4].ends_with(" <0xC3>"), "{}", lines[4]);
    assert!(lines[5].ends_with(" <0xA9>"), "{}", lines[5]);
}

#[test]
fn bad_vocabularies_are_clear_errors() {
    expect_error(&["tokenize", "-m", "/nonexistent/tiny.gguf", "x"], &["/nonexistent/tiny.gguf"]);
    let (path, _) = tiny_bpe(|k, v| Some(if k == "tokenizer.ggml.pre" { Value::from("qwen9") } else { v }));
    expect_error(&["tokenize", "-m", path.to_str().unwrap(), "x"], &["tokenizer.ggml.pre", "qwen9"]);
    let (path, _) = tiny_bpe(|k, v| (k != "tokenizer.ggml.merges").then_some(v));
    expect_error(&["tokenize", "-m", path.to_str().unwrap(), "x"], &["tokenizer.ggml.merges"]);
    let (path, _) = tiny_bpe(|k, v| Some(if k == "tokenizer.ggml.model" { Value::from("bert") } else { v }));
    expect_error(&["tokenize", "-m", path.to_str().unwrap(), "x"], &["unsupported tokenizer model", "bert"]);
    let (path, _) = tiny_bpe(|k, v| Some(if k == "tokenizer.ggml.merges" { Value::from(vec!["h e".to_string(), "x y".to_string()]) } else { v }));
    expect_error(&["tokenize", "-m", path.to_str().unwrap(), "x"], &["merge 1", "\"xy\""]);
}

#[test]
fn qwen_chat_markers() {
    let Some(m) = qwen() else { return };
    let m = m.to_str().unwrap();
    let text = "<|im_start|>user\nHi<|im_end|>\n";
    assert_eq!(json_ids(&["-m", m, "--special", text]), [151_644, 872, 198, 13_048, 151_645, 198]);
    // Qwen adds no BOS by default.
    assert_eq!(json_ids(&["-m", m, "Hello world"]), [9707, 1879]);
}

#[test]
fn gemma_adds_bos_by_default() {
    let Some(m) = gemma() else { return };
    let m = m.to_str().unwrap();
    // The ids llama.cpp gives (tests/fixtures/tokenizer), BOS = 2 first.
    assert_eq!(json_ids(&["-m", m, "The capital of France is"]), [2, 818, 5279, 529, 7001, 563]);
    assert_eq!(json_ids(&["-m", m, "--no-bos", "The capital of France is"]), [818, 5279, 529, 7001, 563]);
    let (code, out, err) = tg(&["tokenize", "-m", m, "--special", "<start_of_turn>user"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().map(|l| l.split_whitespace().next().unwrap()).collect::<Vec<_>>(), ["2", "105", "2364"]);
}

/// `tg chat` keeps the states across turns: the second turn takes the first turn's tokens
/// from them and processes only its new ones.
#[test]
fn chat_two_turns_reuse_the_first() {
    let Some(q) = qwen() else { return };
    let mut child = Command::new(env!("CARGO_BIN_EXE_tg"))
        .args(["chat", "-m", q.to_str().unwrap(), "-n", "8", "-t", "2"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tg chat");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"Name a prime number.\nAnd another?\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let turns: Vec<(usize, usize)> = err
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("[turn ")?;
            let n: Vec<usize> = rest.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            Some((n[1], n[2])) // (prompt tokens, kept from earlier turns)
        })
        .collect();
    eprintln!("{err}");
    assert_eq!(turns.len(), 2, "{err}");
    assert_eq!(turns[0].1, 0);
    assert!(turns[1].1 > turns[0].0 / 2 && turns[1].1 < turns[1].0, "{turns:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
}

/// `--messages` errors: no chat template in the file (names `--chat-template`), and a
/// message list that is wrong (names the entry).
#[test]
fn messages_errors_are_clear() {
    let dir = std::env::temp_dir().join(format!("tg-messages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    std::fs::write(&good, r#"[{"role": "user", "content": "hi"}]"#).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"[{"role": "user", "content": "hi"}, {"content": "no role"}]"#).unwrap();
    if let Some(g) = gemma() {
        let (code, _, err) = tg(&["generate", "-m", g.to_str().unwrap(), "--messages", good.to_str().unwrap(), "-n", "1"]);
        assert_ne!(code, 0);
        assert!(err.contains("no chat template") && err.contains("--chat-template"), "{err}");
    }
    if let Some(q) = qwen() {
        let (code, _, err) = tg(&["generate", "-m", q.to_str().unwrap(), "--messages", bad.to_str().unwrap(), "-n", "1"]);
        assert_ne!(code, 0);
        assert!(err.contains("entry 1") && err.contains("role"), "{err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
