//! Token-for-token agreement with llama.cpp on the reference corpora in
//! `tests/fixtures/tokenizer/llama_cpp_tokens.jsonl` (Gemma 3, SentencePiece)
//! and `tests/fixtures/tokenizer_qwen/llama_cpp_tokens.jsonl` (Qwen2.5-Coder,
//! byte-level BPE), written by the `gen_corpus.py` next to each through
//! llama.cpp's `llama_tokenize` / `llama_detokenize`. Every line is checked
//! in every mode and all disagreements are reported, not just the first.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;
use tg_tokenizer::Tokenizer;

/// Each corpus must have at least this many strings.
const MIN_LINES: usize = 250;

fn fixture_path(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(dir)
        .join("llama_cpp_tokens.jsonl")
}

fn ids_of(v: &Value, field: &str, line: usize) -> Vec<u32> {
    v.get(field)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("line {line}: `{field}` is not an array"))
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .unwrap_or_else(|| panic!("line {line}: `{field}` has a non-id element {x}"))
        })
        .collect()
}

/// Expected detokenized bytes: the string, or `<field>_hex` when the string
/// is null (llama.cpp produced invalid UTF-8).
fn detok_of(v: &Value, field: &str, line: usize) -> Vec<u8> {
    match v.get(field) {
        Some(Value::String(s)) => s.as_bytes().to_vec(),
        Some(Value::Null) => {
            let hex = v
                .get(format!("{field}_hex"))
                .and_then(Value::as_str)
                .unwrap_or_else(|| {
                    panic!("line {line}: `{field}` is null but `{field}_hex` is missing")
                });
            (0..hex.len() / 2)
                .map(|i| {
                    u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                        .unwrap_or_else(|_| panic!("line {line}: bad hex in `{field}_hex`"))
                })
                .collect()
        }
        other => panic!("line {line}: `{field}` is {other:?}"),
    }
}

fn show_ids(tok: &Tokenizer, ids: &[u32]) -> String {
    ids.iter()
        .map(|&id| format!("{id}:{:?}", tok.token_text(id).unwrap_or("<out of range>")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn diff_ids(tok: &Tokenizer, want: &[u32], got: &[u32]) -> String {
    let first = want.iter().zip(got).take_while(|(a, b)| a == b).count();
    let lo = first.saturating_sub(2);
    format!(
        "first difference at index {first} (len want {} got {})\n      want[{lo}..]: {}\n      got [{lo}..]: {}",
        want.len(),
        got.len(),
        show_ids(tok, &want[lo.min(want.len())..(first + 6).min(want.len())]),
        show_ids(tok, &got[lo.min(got.len())..(first + 6).min(got.len())]),
    )
}

#[test]
fn matches_llama_cpp() {
    let Some((tok, _)) = common::gemma_tokenizer() else {
        return;
    };
    compare(tok, &fixture_path("tokenizer"));
}

#[test]
fn qwen_matches_llama_cpp() {
    let Some((tok, _)) = common::qwen_tokenizer() else {
        return;
    };
    compare(tok, &fixture_path("tokenizer_qwen"));
}

/// Compares `tok` with every record of the fixture at `path`; prints the
/// counts and every mismatch, then fails if there was any.
fn compare(tok: &Tokenizer, path: &Path) {
    let data = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}\nGenerate it with the gen_corpus.py next to it (docs/fixtures.md)",
            path.display()
        )
    });

    let mut lines = 0;
    let mut checks = 0;
    let mut tokens = 0;
    let mut failures: Vec<String> = Vec::new();
    for (i, line) in data.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}:{line_no}: bad JSON: {e}", path.display()));
        let text = v
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("line {line_no}: `text` is not a string"));
        lines += 1;

        for (field, parse_special) in [("ids", false), ("ids_special", true)] {
            let want = ids_of(&v, field, line_no);
            let got = tok.encode(text, false, parse_special);
            checks += 1;
            tokens += want.len();
            if got != want {
                failures.push(format!(
                    "line {line_no} {field} for {text:?}: {}",
                    diff_ids(tok, &want, &got)
                ));
            }
        }

        for (field, ids_field, render) in [
            ("detok", "ids", false),
            ("detok_special", "ids_special", true),
            ("detok_special_plain", "ids_special", false),
        ] {
            if v.get(field).is_none() {
                continue;
            }
            let want = detok_of(&v, field, line_no);
            let ids = ids_of(&v, ids_field, line_no);
            checks += 1;
            match tok.decode_bytes(&ids, render) {
                Ok(got) if got == want => {}
                Ok(got) => failures.push(format!(
                    "line {line_no} {field}: want {:?} got {:?}",
                    String::from_utf8_lossy(&want),
                    String::from_utf8_lossy(&got)
                )),
                Err(e) => failures.push(format!("line {line_no} {field}: {e}")),
            }
        }
    }

    println!(
        "{}: {lines} corpus lines, {tokens} llama.cpp tokens, {checks} comparisons, {} mismatches",
        path.display(),
        failures.len()
    );
    for f in &failures {
        println!("MISMATCH {f}");
    }
    assert!(
        lines >= MIN_LINES,
        "the fixture has {lines} lines, expected at least {MIN_LINES}"
    );
    assert!(
        failures.is_empty(),
        "{} of {checks} comparisons differ from llama.cpp (listed above)",
        failures.len()
    );
}
