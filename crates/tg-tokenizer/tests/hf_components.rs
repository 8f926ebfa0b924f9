//! `HfTokenizer` on small hand-written `tokenizer.json` documents, one or a
//! few per component and option (BPE merge order, legacy merges, unk/fuse_unk,
//! byte fallback, ignore_merges, subword prefix/suffix, every Split behavior
//! with and without `invert`, Metaspace schemes, each normalizer, added-token
//! flags, the template post-processor, each decoder), plus documents that
//! must be refused at load with a clear message.
//!
//! The cases live in `tests/fixtures/tokenizer_hf/tiny_cases.json`; their
//! expected ids and texts were worked out by hand from the `tokenizers`
//! semantics and are checked against `tokenizers` itself by
//! `gen_fixture.py --check-tiny`. This test needs neither Python nor a model.

use std::path::PathBuf;

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

#[test]
fn refused_documents() {
    let all = cases();
    let errors = list(&all, "load_errors");
    let mut failures = Vec::new();
    for case in errors {
        let name = case["name"].as_str().expect("name");
        let expect = case["expect"].as_str().expect("expect");
        let json = match &case["json"] {
            Value::String(s) => s.clone(),
            other => serde_json::to_string(other).expect("re-serialize"),
        };
        match HfTokenizer::from_json(&json) {
            Ok(_) => failures.push(format!(
                "{name}: loaded, expected an error containing {expect:?}"
            )),
            Err(e) => {
                let msg = e.to_string();
                println!("{name}: {msg}");
                if !msg.contains(expect) {
                    failures.push(format!("{name}: error {msg:?} does not contain {expect:?}"));
                }
            }
        }
    }
    println!("{} documents refused", errors.len() - failures.len());
    assert!(errors.len() >= 20, "too few error cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn tokenizer_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<HfTokenizer>();
}

#[test]
fn error_kinds() {
    // Unsupported components are HfUnsupported and name where they are.
    let doc = r#"{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"},
        {"type": "Precompiled", "precompiled_charsmap": ""}]},
        "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}"#;
    match HfTokenizer::from_json(doc) {
        Err(TokenizerError::HfUnsupported { component, detail }) => {
            assert_eq!(component, "normalizer.normalizers[1]");
            assert!(detail.contains("Precompiled"), "{detail}");
        }
        other => panic!("expected HfUnsupported, got {other:?}"),
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
    // An unk_token missing from the vocabulary fails when it is needed.
    let doc =
        r#"{"model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0}, "merges": []}}"#;
    let tok = HfTokenizer::from_json(doc).expect("loads");
    assert_eq!(
        tok.encode("aa", false).expect("no unknown char"),
        vec![0, 0]
    );
    let err = tok.encode("ab", false).expect_err("needs <unk>");
    assert!(err.to_string().contains("<unk>"), "{err}");
    // Padding that leaves a single encoding unchanged is accepted (and
    // gives the pad id); padding to a fixed length is refused.
    let pad = |strategy: &str| {
        format!(
            r#"{{"padding": {{"strategy": {strategy}, "direction": "Right", "pad_to_multiple_of": null,
               "pad_id": 7, "pad_type_id": 0, "pad_token": "<pad>"}},
               "model": {{"type": "BPE", "vocab": {{"a": 0}}, "merges": []}}}}"#
        )
    };
    let tok_pad = HfTokenizer::from_json(&pad("\"BatchLongest\"")).expect("BatchLongest loads");
    assert_eq!(tok_pad.pad(), Some(7));
    assert_eq!(tok_pad.encode("a", true).expect("encodes"), vec![0]);
    match HfTokenizer::from_json(&pad(r#"{"Fixed": 16}"#)) {
        Err(TokenizerError::HfUnsupported { component, .. }) => assert_eq!(component, "padding"),
        other => panic!("expected HfUnsupported, got {other:?}"),
    }
    // Unknown ids are refused by decode.
    assert!(matches!(
        tok.decode(&[0, 7], false),
        Err(TokenizerError::InvalidTokenId { id: 7, .. })
    ));
}
