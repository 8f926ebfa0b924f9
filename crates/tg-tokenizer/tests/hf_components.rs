//! `HfTokenizer` on small hand-written `tokenizer.json` documents, one or a
//! few per component and option (BPE merge order, legacy merges, unk/fuse_unk,
//! byte fallback, ignore_merges, subword prefix/suffix, every Split behavior
//! with and without `invert`, Metaspace schemes, each normalizer, added-token
//! flags, the template post-processor, each decoder), plus documents that
//! must be refused at load with a clear message, and truncated or garbage
//! documents, which must be errors, never panics.
//!
//! The cases live in `tests/fixtures/tokenizer_hf/tiny_cases.json`; their
//! expected ids and texts were worked out by hand from the `tokenizers`
//! semantics and are checked against `tokenizers` itself by
//! `gen_fixture.py --check-tiny`. This test needs neither Python nor a model.

use std::path::PathBuf;

use rand::{Rng, SeedableRng};
use serde_json::Value;
use tg_tokenizer::{EncodeOptions, HfTokenizer, TokenizerError};

fn cases() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tokenizer_hf/tiny_cases.json");
    let data = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids must be an array")
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .expect("bad id")
        })
        .collect()
}

fn flag(v: &Value, key: &str, default: bool) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(default)
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

#[test]
fn hand_written_cases() {
    let all = cases();
    let mut checks = 0;
    let mut failures = Vec::new();
    let case_list = list(&all, "cases");
    for case in case_list {
        let name = case["name"].as_str().expect("case name");
        let json = serde_json::to_string(&case["tokenizer"]).expect("re-serialize");
        let tok = match HfTokenizer::from_json(&json) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: load failed: {e}"));
                continue;
            }
        };
        for e in list(case, "encode") {
            let text = e["text"].as_str().expect("text");
            let want = ids(&e["ids"]);
            let opts = EncodeOptions {
                add_special_tokens: flag(e, "add_special_tokens", false),
                parse_special: flag(e, "parse_special", true),
            };
            checks += 1;
            match tok.encode_with(text, opts) {
                Ok(got) if got == want => {}
                Ok(got) => failures.push(format!(
                    "{name}: encode({text:?}, {opts:?}) = {got:?}, want {want:?}"
                )),
                Err(err) => failures.push(format!("{name}: encode({text:?}): {err}")),
            }
        }
        for p in list(case, "encode_pair") {
            let (a, b) = (p["a"].as_str().expect("a"), p["b"].as_str().expect("b"));
            let want = ids(&p["ids"]);
            let add = flag(p, "add_special_tokens", false);
            checks += 1;
            match tok.encode_pair(a, b, add) {
                Ok(got) if got == want => {}
                Ok(got) => failures.push(format!(
                    "{name}: encode_pair({a:?}, {b:?}, {add}) = {got:?}, want {want:?}"
                )),
                Err(err) => failures.push(format!("{name}: encode_pair: {err}")),
            }
        }
        for d in list(case, "decode") {
            let input = ids(&d["ids"]);
            let want = d["text"].as_str().expect("text");
            let skip = flag(d, "skip_special_tokens", false);
            checks += 1;
            match tok.decode(&input, skip) {
                Ok(got) if got == want => {}
                Ok(got) => failures.push(format!(
                    "{name}: decode({input:?}, skip={skip}) = {got:?}, want {want:?}"
                )),
                Err(err) => failures.push(format!("{name}: decode({input:?}): {err}")),
            }
        }
    }
    println!(
        "{} cases, {checks} checks, {} failures",
        case_list.len(),
        failures.len()
    );
    assert!(case_list.len() >= 40 && checks >= 100, "too few cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Messages of `HfTokenizer` (that is, of the `tokenizers` crate) for the
/// `load_errors` documents whose fixture `expect` describes the message of
/// the former reimplementation instead.
const MESSAGES: &[(&str, &str)] = &[
    ("not an object", "expected struct Tokenizer"),
    ("missing model", "Model missing"),
    ("unknown model type", "ModelUntagged"),
    ("unknown normalizer type", "NormalizerUntagged"),
    ("unknown split behavior", "unknown variant `Sideways`"),
    ("merge token not in vocab", "Token `c` out of vocabulary"),
    // `tokenizers` panics on this one (a merged token longer than every
    // vocabulary entry overruns a buffer); the wrapper reports the panic.
    ("merged token not in vocab", "panicked"),
    ("legacy merge with three parts", "Merges text file invalid"),
    ("merge not a pair", "MergeType"),
    ("vocab not a map", "expected a map"),
];

/// A text and its ids.
type Encoded = (&'static str, &'static [u32]);

/// `load_errors` documents that `tokenizers` loads (`hf_rejects: false`) and
/// so `HfTokenizer` loads too now, with texts whose ids are known (empty:
/// only checked not to panic).
const LOADED_NOW: &[(&str, &[Encoded])] = &[
    ("unigram model", &[("a", &[1]), ("aa", &[1, 1])]),
    ("unsupported normalizer type", &[("ab", &[2])]),
    ("unknown pre-tokenizer type", &[]),
    ("regex split pattern", &[("ab ab\tab", &[2, 2, 2])]),
    ("unknown decoder type", &[]),
    ("unknown post-processor type", &[]),
    ("duplicate vocab id", &[("ab", &[1])]),
    ("component without type", &[("ab", &[2])]),
    ("empty split pattern", &[]),
];

#[test]
fn refused_documents() {
    let all = cases();
    let errors = list(&all, "load_errors");
    let mut failures = Vec::new();
    let mut refused = 0;
    for case in errors {
        let name = case["name"].as_str().expect("name");
        let hf_rejects = flag(case, "hf_rejects", true);
        let json = match &case["json"] {
            Value::String(s) => s.clone(),
            other => serde_json::to_string(other).expect("re-serialize"),
        };
        let result = HfTokenizer::from_json(&json);
        if let Some((_, texts)) = LOADED_NOW.iter().find(|(n, _)| *n == name) {
            if hf_rejects {
                failures.push(format!(
                    "{name}: listed as loaded, but tokenizers refuses it"
                ));
            }
            let tok = match result {
                Ok(tok) => tok,
                Err(e) => {
                    failures.push(format!("{name}: {e} (tokenizers loads it)"));
                    continue;
                }
            };
            for &(text, want) in *texts {
                match tok.encode(text, false) {
                    Ok(got) if got == want => {}
                    other => failures.push(format!(
                        "{name}: encode({text:?}) = {other:?}, want {want:?}"
                    )),
                }
            }
            // Whatever the document, these return (Ok or Err) without panicking.
            for text in ["", "a b-c", "ab <x> \u{2581}é"] {
                let _ = tok.encode(text, true);
                let _ = tok.encode_with(
                    text,
                    EncodeOptions {
                        add_special_tokens: true,
                        parse_special: false,
                    },
                );
                let _ = tok.encode_pair(text, "b", true);
            }
            let _ = tok.decode(&[0, 1], false);
            let _ = tok.decode(&[0, 1], true);
            continue;
        }
        let expect = MESSAGES
            .iter()
            .find(|(n, _)| *n == name)
            .map_or_else(|| case["expect"].as_str().expect("expect"), |&(_, m)| m);
        match result {
            Ok(_) => failures.push(format!(
                "{name}: loaded, expected an error containing {expect:?}"
            )),
            Err(e) => {
                let msg = e.to_string();
                println!("{name}: {msg}");
                refused += 1;
                if !msg.contains(expect) {
                    failures.push(format!("{name}: error {msg:?} does not contain {expect:?}"));
                }
            }
        }
    }
    println!("{refused} documents refused, {} loaded", LOADED_NOW.len());
    assert!(errors.len() >= 20, "too few error cases");
    assert_eq!(
        refused + LOADED_NOW.len(),
        errors.len(),
        "a case is listed twice or is missing"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every prefix of a valid document, and seeded random garbage, is an error
/// (`HfJson`, or `HfLibrary` when `tokenizers` panics), never a panic.
#[test]
fn truncated_and_garbage_documents_are_errors() {
    let all = cases();
    let case = list(&all, "cases")
        .iter()
        .find(|c| c["name"] == "template processing")
        .expect("the template processing case");
    let json = serde_json::to_string(&case["tokenizer"]).expect("re-serialize");
    HfTokenizer::from_json(&json).expect("the whole document loads");
    let (mut cut, mut panicked) = (0, 0);
    for end in (0..json.len()).filter(|&i| json.is_char_boundary(i)) {
        match HfTokenizer::from_json(&json[..end]) {
            Err(TokenizerError::HfJson(_)) => cut += 1,
            // `tokenizers` panics on some truncated decoders (`expect("Helper")`).
            Err(TokenizerError::HfLibrary { message, .. }) if message.contains("EOF") => {
                panicked += 1
            }
            Err(e) => panic!("prefix of {end} bytes: unexpected error kind {e:?}"),
            Ok(_) => panic!("prefix of {end} bytes loaded"),
        }
    }
    println!("{cut} truncated documents refused, {panicked} more after a panic in tokenizers");

    let seed = 0x6a7b_u64;
    println!("seed {seed:#x}");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..500 {
        let mut bytes = json.as_bytes().to_vec();
        for _ in 0..rng.gen_range(1..8) {
            let i = rng.gen_range(0..bytes.len());
            bytes[i] = rng.gen();
        }
        // A mutant may still load; it must then encode without panicking.
        if let Ok(tok) = HfTokenizer::from_bytes(&bytes) {
            let _ = tok.encode("ab <cls> a", true);
            let _ = tok.encode_pair("a", "b", true);
        }
    }
    let garbage: Vec<u8> = (0..256).map(|_| rng.gen()).collect();
    assert!(HfTokenizer::from_bytes(&garbage).is_err());
}

#[test]
fn tokenizer_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<HfTokenizer>();
}

#[test]
fn error_kinds() {
    // Settings the wrapper refuses are HfUnsupported and name where they are.
    let doc = r#"{"model": {"type": "BPE", "dropout": 0.5, "vocab": {"a": 0}, "merges": []}}"#;
    match HfTokenizer::from_json(doc) {
        Err(TokenizerError::HfUnsupported { component, detail }) => {
            assert_eq!(component, "model.dropout");
            assert!(detail.contains("0.5"), "{detail}");
        }
        other => panic!("expected HfUnsupported, got {other:?}"),
    }
    // A document that makes `tokenizers` panic while loading (an invalid
    // precompiled charsmap) is an error naming the panic.
    let doc = r#"{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"},
        {"type": "Precompiled", "precompiled_charsmap": ""}]},
        "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}"#;
    match HfTokenizer::from_json(doc) {
        Err(e @ TokenizerError::HfLibrary { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("panicked") && msg.contains("Precompiled"),
                "{msg}"
            );
        }
        other => panic!("expected HfLibrary, got {other:?}"),
    }
    // Malformed JSON is HfJson, with serde_json's position.
    match HfTokenizer::from_json("{\"model\": [") {
        Err(e @ TokenizerError::HfJson(_)) => assert!(e.to_string().contains("line 1"), "{e}"),
        other => panic!("expected HfJson, got {other:?}"),
    }
    // A missing file is Io and names the path.
    match HfTokenizer::from_file("/nonexistent/tokenizer.json") {
        Err(e @ TokenizerError::Io { .. }) => {
            assert!(e.to_string().contains("/nonexistent/tokenizer.json"), "{e}")
        }
        other => panic!("expected Io, got {other:?}"),
    }
    // A file that does not load is HfFile: its path, then what is wrong.
    let path = std::env::temp_dir().join(format!("tg-tokenizer-{}-bad.json", std::process::id()));
    std::fs::write(
        &path,
        r#"{"model": {"type": "BPE", "vocab": {"a": 0}, "mer"#,
    )
    .expect("write");
    let result = HfTokenizer::from_file(&path);
    std::fs::remove_file(&path).expect("remove");
    let err = result.expect_err("a truncated file");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("malformed") && msg.contains("EOF"), "{msg}");
    assert!(std::error::Error::source(&err).is_some());
    match err {
        TokenizerError::HfFile { path: p, source } => {
            assert_eq!(p, path);
            assert!(matches!(*source, TokenizerError::HfJson(_)), "{source:?}");
        }
        other => panic!("expected HfFile, got {other:?}"),
    }
    // An unk_token missing from the vocabulary fails when it is needed.
    let doc =
        r#"{"model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0}, "merges": []}}"#;
    let tok = HfTokenizer::from_json(doc).expect("loads");
    assert_eq!(
        tok.encode("aa", false).expect("no unknown char"),
        vec![0, 0]
    );
    let err = tok.encode("ab", false).expect_err("needs <unk>");
    assert!(
        matches!(
            err,
            TokenizerError::HfLibrary {
                operation: "encode",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("<unk>"), "{err}");
    // Padding that leaves a single encoding unchanged is accepted (and
    // gives the pad id); padding to a fixed length or to a multiple is refused.
    let pad = |strategy: &str, multiple: &str| {
        format!(
            r#"{{"padding": {{"strategy": {strategy}, "direction": "Right", "pad_to_multiple_of": {multiple},
               "pad_id": 7, "pad_type_id": 0, "pad_token": "<pad>"}},
               "model": {{"type": "BPE", "vocab": {{"a": 0}}, "merges": []}}}}"#
        )
    };
    let tok_pad =
        HfTokenizer::from_json(&pad("\"BatchLongest\"", "null")).expect("BatchLongest loads");
    assert_eq!(tok_pad.pad(), Some(7));
    assert_eq!(tok_pad.encode("a", true).expect("encodes"), vec![0]);
    for (strategy, multiple) in [(r#"{"Fixed": 16}"#, "null"), ("\"BatchLongest\"", "8")] {
        match HfTokenizer::from_json(&pad(strategy, multiple)) {
            Err(TokenizerError::HfUnsupported { component, .. }) => {
                assert_eq!(component, "padding")
            }
            other => panic!("expected HfUnsupported, got {other:?}"),
        }
    }
    // A single template using $B is refused (`tokenizers` would panic on encode).
    let doc = r#"{"post_processor": {"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {}},
        "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}"#;
    match HfTokenizer::from_json(doc) {
        Err(e @ TokenizerError::HfInvalid(_)) => assert!(e.to_string().contains("$B"), "{e}"),
        other => panic!("expected HfInvalid, got {other:?}"),
    }
    // Unknown ids are refused by decode.
    assert!(matches!(
        tok.decode(&[0, 7], false),
        Err(TokenizerError::InvalidTokenId { id: 7, .. })
    ));
}
