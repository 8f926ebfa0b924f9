//! Id-for-id agreement of `HfTokenizer` with the Hugging Face `tokenizers`
//! library (0.23.3) on EmbeddingGemma-300M's `tokenizer.json`, over the
//! corpus in `tests/fixtures/tokenizer_hf/hf_tokens.jsonl` (written by
//! `tests/fixtures/tokenizer_hf/gen_fixture.py`). Every entry is checked in
//! every mode and all disagreements are reported, not just the first.
//!
//! The model folder lives outside the repository: `$TG_EMBED_MODEL`, else
//! `~/.cache/tensor-graphs/models/embeddinggemma-300m`. Without it the tests
//! print SKIPPED and pass, except under `CI`, where a missing model fails.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tg_tokenizer::{EncodeOptions, HfTokenizer};

/// The fixture must have at least this many entries.
const MIN_ENTRIES: usize = 500;

fn model_dir() -> PathBuf {
    match std::env::var_os("TG_EMBED_MODEL") {
        Some(p) => PathBuf::from(p),
        None => {
            let home =
                std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
            home.join(".cache/tensor-graphs/models/embeddinggemma-300m")
        }
    }
}

/// Whether the tests run under CI (`CI` set, not empty, `0` or `false`).
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tokenizer_hf/hf_tokens.jsonl")
}

/// The EmbeddingGemma tokenizer and its load time, or `None` (after printing
/// SKIPPED) when the model folder is absent.
fn tokenizer() -> Option<&'static (HfTokenizer, Duration)> {
    static TOK: OnceLock<Option<(HfTokenizer, Duration)>> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = model_dir().join("tokenizer.json");
        if !path.exists() {
            let msg = format!(
                "{} not found (set TG_EMBED_MODEL to the EmbeddingGemma-300M folder, \
                 e.g. from scripts/fetch_embedding_model.py)",
                path.display()
            );
            assert!(!under_ci(), "{msg} (a missing model fails under CI)");
            println!("SKIPPED: {msg}");
            return None;
        }
        let t0 = Instant::now();
        let tok = HfTokenizer::from_file(&path)
            .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
        Some((tok, t0.elapsed()))
    })
    .as_ref()
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

fn str_of<'a>(v: &'a Value, field: &str, line: usize) -> &'a str {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("line {line}: `{field}` is not a string"))
}

fn show_ids(tok: &HfTokenizer, ids: &[u32]) -> String {
    ids.iter()
        .map(|&id| format!("{id}:{:?}", tok.token_text(id).unwrap_or("<unknown>")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn diff_ids(tok: &HfTokenizer, want: &[u32], got: &[u32]) -> String {
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
fn load_facts() {
    let Some((tok, load_time)) = tokenizer() else {
        return;
    };
    println!("tokenizer.json loaded in {load_time:.2?}");
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(tok.vocab_size_with_added_tokens(), 262_145);
    assert_eq!(tok.id_limit(), 262_145);
    assert_eq!(tok.added_token_count(), 6_415);
    assert_eq!(tok.merge_count(), 514_906);
    assert_eq!(tok.bos(), Some(2));
    assert_eq!(tok.eos(), Some(1));
    assert_eq!(tok.pad(), Some(0));
    assert_eq!(tok.unk(), Some(3));
    assert_eq!(tok.token_id("<image_soft_token>"), Some(262_144));
    assert_eq!(tok.token_text(262_144), Some("<image_soft_token>"));
    assert!(tok.is_special(262_144) && tok.is_special(2) && !tok.is_special(4));
    assert_eq!(tok.token_text(262_145), None);

    // An id past the embedding table is reported by `check_ids_below`.
    let ids = tok.encode("a <image_soft_token>", true).unwrap();
    assert!(ids.contains(&262_144));
    let err = HfTokenizer::check_ids_below(&ids, tok.vocab_size()).unwrap_err();
    assert!(err.to_string().contains("262144"), "{err}");
    HfTokenizer::check_ids_below(&tok.encode("a b", true).unwrap(), tok.vocab_size()).unwrap();

    // Unknown ids are an error (`tokenizers` drops them silently).
    let err = tok.decode(&[2, 300_000], false).unwrap_err();
    assert!(err.to_string().contains("300000"), "{err}");
}

/// A truncated copy of the real file is an error naming the file and the
/// position, not a panic.
#[test]
fn truncated_file_is_an_error() {
    if tokenizer().is_none() {
        return;
    }
    let bytes = std::fs::read(model_dir().join("tokenizer.json")).expect("read tokenizer.json");
    let path = std::env::temp_dir().join(format!(
        "tg-tokenizer-{}-truncated-tokenizer.json",
        std::process::id()
    ));
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write the truncated copy");
    let result = HfTokenizer::from_file(&path);
    std::fs::remove_file(&path).expect("remove the truncated copy");
    let msg = result
        .expect_err("a truncated tokenizer.json loaded")
        .to_string();
    println!("{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("EOF") && msg.contains("column"), "{msg}");
}

#[test]
fn matches_hf_tokenizers() {
    let Some((tok, _)) = tokenizer() else {
        return;
    };
    let path = fixture_path();
    let data = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}\nGenerate it with tests/fixtures/tokenizer_hf/gen_fixture.py",
            path.display()
        )
    });
    let mut lines = data
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().expect("empty fixture");
    let header: Value = serde_json::from_str(header).expect("bad header JSON");
    let header = header.get("header").expect("first line is not a header");
    println!(
        "fixture: tokenizers {}, tokenizer.json sha256 {}",
        header["tokenizers_version"], header["tokenizer_json_sha256"]
    );

    let mut entries = 0;
    let mut checks = 0;
    let mut failures: Vec<String> = Vec::new();
    let mut max_len = 0;
    let mut encode_time = Duration::ZERO;
    let mut encoded_tokens = 0usize;
    for (i, line) in lines {
        let line_no = i + 1;
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}:{line_no}: bad JSON: {e}", path.display()));
        let text = str_of(&v, "text", line_no);
        entries += 1;

        for (field, add_special_tokens, parse_special) in [
            ("ids", false, true),
            ("ids_special", true, true),
            ("ids_no_parse", false, false),
        ] {
            let want = ids_of(&v, field, line_no);
            max_len = max_len.max(want.len());
            checks += 1;
            let t0 = Instant::now();
            let got = tok.encode_with(
                text,
                EncodeOptions {
                    add_special_tokens,
                    parse_special,
                },
            );
            encode_time += t0.elapsed();
            match got {
                Ok(got) if got == want => encoded_tokens += got.len(),
                Ok(got) => failures.push(format!(
                    "line {line_no} {field} for {text:?}: {}",
                    diff_ids(tok, &want, &got)
                )),
                Err(e) => failures.push(format!("line {line_no} {field}: {e}")),
            }
        }

        for (field, ids_field, skip) in [
            ("decoded", "ids_special", false),
            ("decoded_skip", "ids_special", true),
            ("decoded_no_parse", "ids_no_parse", false),
        ] {
            let want = str_of(&v, field, line_no);
            let ids = ids_of(&v, ids_field, line_no);
            checks += 1;
            match tok.decode(&ids, skip) {
                Ok(got) if got == want => {}
                Ok(got) => {
                    failures.push(format!("line {line_no} {field}: want {want:?} got {got:?}"))
                }
                Err(e) => failures.push(format!("line {line_no} {field}: {e}")),
            }
        }
    }
    println!(
        "{entries} entries, {checks} checks, {} failures; longest {max_len} tokens; \
         encoding {encoded_tokens} tokens took {encode_time:.2?}",
        failures.len()
    );
    assert!(entries >= MIN_ENTRIES, "only {entries} fixture entries");
    if let Some(n) = header.get("count").and_then(Value::as_u64) {
        assert_eq!(
            entries as u64, n,
            "fixture entry count differs from its header"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {checks} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Encoding speed on the fixture's longest text (~2,200 tokens), as a
/// smoke check against quadratic behaviour.
#[test]
fn long_text_is_fast() {
    let Some((tok, _)) = tokenizer() else {
        return;
    };
    let unit = "Phobos and Deimos are small, irregularly shaped moons — captured asteroids? \n";
    let text = unit.repeat(120);
    let t0 = Instant::now();
    let ids = tok.encode(&text, true).unwrap();
    let first = t0.elapsed();
    let t0 = Instant::now();
    let runs = 20;
    for _ in 0..runs {
        assert_eq!(tok.encode(&text, true).unwrap(), ids);
    }
    let per = t0.elapsed() / runs;
    println!(
        "{} chars -> {} tokens: first {first:.2?}, then {per:.2?} per encode",
        text.chars().count(),
        ids.len()
    );
    assert!(ids.len() > 2_000);
    assert!(per < Duration::from_millis(200), "encoding took {per:?}");
}
