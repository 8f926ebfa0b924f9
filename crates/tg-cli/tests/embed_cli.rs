//! `tg embed` end to end on EmbeddingGemma-300M: the model card's ranking, JSON output,
//! and bad input (missing, malformed or mismatched model folders, bad options) giving a
//! clear error and a non-zero exit, never a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

fn model() -> Option<PathBuf> {
    let p = std::env::var_os("TG_EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| tg_models::cache::cache_dir().join(tg_models::cache::DEFAULT_EMBEDDING_MODEL));
    if p.join("modules.json").is_file() {
        Some(p)
    } else if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: embedding model not found at {}", p.display());
        None
    } else {
        panic!("embedding model not found at {}: run scripts/fetch_embedding_model.py or set TG_EMBED_MODEL", p.display())
    }
}

fn tg(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tg")).args(args).output().expect("run tg");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn expect_error(args: &[&str], needle: &str) {
    let (code, _, err) = tg(args);
    assert_ne!(code, 0, "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(err.contains(needle), "{args:?}: stderr should mention {needle:?}: {err}");
}

/// A copy of the model folder made of symlinks, with `edit` applied to named files.
fn variant(src: &Path, name: &str, edit: &[(&str, Vec<u8>)]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tg-embed-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    fn link_tree(src: &Path, dst: &Path) {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            let to = dst.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                link_tree(&e.path(), &to);
            } else {
                std::os::unix::fs::symlink(e.path(), &to).unwrap();
            }
        }
    }
    link_tree(src, &d);
    for (rel, bytes) in edit {
        let p = d.join(rel);
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, bytes).unwrap();
    }
    d
}

fn json_edit(src: &Path, rel: &str, f: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join(rel)).unwrap()).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

const QUERY: &str = "Which planet is known as the Red Planet?";
const DOCS: [&str; 4] = [
    "Venus is often called Earth's twin because of its similar size and proximity.",
    "Mars, known for its reddish appearance, is often referred to as the Red Planet.",
    "Jupiter, the largest planet in our solar system, has a prominent red spot.",
    "Saturn, famous for its rings, is sometimes mistaken for the Red Planet.",
];

#[test]
fn query_ranks_the_model_card_documents() {
    let Some(m) = model() else { return };
    let ms = m.to_str().unwrap();
    let mut args = vec!["embed", "--model", ms, "--json", "--query", QUERY];
    args.extend(DOCS);
    let (code, out, err) = tg(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let sims: Vec<f64> = v["similarity"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    // sentence-transformers (CPU, f32) on the same folder: see tests/fixtures/embeddinggemma.
    let want = [0.30082, 0.63610, 0.49270, 0.48888];
    for (g, w) in sims.iter().zip(want) {
        assert!((g - w).abs() < 1e-4, "{sims:?}");
    }
    assert_eq!(v["query_prompt_name"], "query");
    assert_eq!(v["document_prompt_name"], "document");
}

#[test]
fn json_embeddings_have_the_requested_width_and_unit_norm() {
    let Some(m) = model() else { return };
    let (code, out, err) = tg(&["embed", "--model", m.to_str().unwrap(), "--json", "--dim", "128", "-p", "STS", "first text", "second"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["dim"], 128);
    let rows = v["embeddings"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let r: Vec<f64> = r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(r.len(), 128);
        let n: f64 = r.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((n - 1.0).abs() < 1e-5, "norm {n}");
    }
    assert_eq!(v["prompt"], "task: sentence similarity | query: ");
}

#[test]
fn bad_options_and_requests_are_errors() {
    let Some(m) = model() else { return };
    let ms = m.to_str().unwrap();
    expect_error(&["embed", "--model", "/nonexistent/model-folder", "x"], "does not exist");
    expect_error(&["embed", "--model", ms, "-p", "nope", "x"], "unknown prompt name 'nope'");
    expect_error(&["embed", "--model", ms, "--dim", "1000", "x"], "1000");
    expect_error(&["embed", "--model", ms, "image: <image_soft_token>"], "outside the model's embedding table");
}

#[test]
fn malformed_model_folders_are_clear_errors() {
    let Some(m) = model() else { return };
    // (variant name, files replaced in the copy, text the error must contain)
    type Case<'a> = (&'a str, Vec<(&'a str, Vec<u8>)>, &'a str);
    let cases: Vec<Case> = vec![
        ("model-type", vec![("config.json", json_edit(&m, "config.json", |v| v["model_type"] = "llama".into()))], "model_type is 'llama'"),
        ("softcap", vec![("config.json", json_edit(&m, "config.json", |v| v["attn_logit_softcapping"] = 50.0.into()))], "attn_logit_softcapping"),
        ("heads", vec![("config.json", json_edit(&m, "config.json", |v| v["num_attention_heads"] = 4.into()))], "self_attn.q_proj.weight"),
        ("bad-json", vec![("config.json", b"{ not json".to_vec())], "invalid JSON"),
        ("module", vec![("modules.json", json_edit(&m, "modules.json", |v| v[1]["type"] = "sentence_transformers.models.LSTM".into()))], "LSTM"),
        ("pooling", vec![("1_Pooling/config.json", json_edit(&m, "1_Pooling/config.json", |v| v["pooling_mode_cls_token"] = true.into()))], "pooling_mode_cls_token"),
        ("dense-width", vec![("3_Dense/config.json", json_edit(&m, "3_Dense/config.json", |v| v["in_features"] = 1000.into()))], "in_features 1000"),
        ("activation", vec![("2_Dense/config.json", json_edit(&m, "2_Dense/config.json", |v| v["activation_function"] = "torch.nn.modules.activation.GELU".into()))], "GELU"),
        ("truncated-weights", vec![("model.safetensors", std::fs::read(m.join("2_Dense/model.safetensors")).unwrap()[..4096].to_vec())], "model.safetensors"),
        ("empty-weights", vec![("3_Dense/model.safetensors", Vec::new())], "3_Dense/model.safetensors"),
        ("bad-tokenizer", vec![("tokenizer.json", b"{\"model\": {\"type\": \"Unigram\"}}".to_vec())], "tokenizer"),
    ];
    for (name, edits, needle) in cases {
        let d = variant(&m, name, &edits);
        expect_error(&["embed", "--model", d.to_str().unwrap(), "x"], needle);
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// `--device` takes a list here as in `tg generate` (it once said "unknown device
/// 'cpu,opencl'"): the same texts on `cpu` and on `cpu,opencl` give the same embeddings. The
/// second device gets only pinned ops (`TG_FIRST_USE=off`: no first-use measurement written to
/// the cache), so this checks how devices are opened, not placement.
#[test]
fn device_lists_open_like_every_other_command() {
    let Some(m) = model() else { return };
    if tg_devices::open("opencl", 1).is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI is set and there is no OpenCL device");
        eprintln!("SKIPPED: no OpenCL device");
        return;
    }
    let run = |device: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_tg"))
            .env("TG_FIRST_USE", "off")
            .args(["embed", "--model", m.to_str().unwrap(), "--json", "--device", device, "first text", "second"])
            .output()
            .expect("run tg");
        assert!(out.status.success(), "--device {device}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        v["embeddings"].as_array().expect("embeddings").iter().map(|r| r.as_array().expect("row").iter().map(|x| x.as_f64().expect("f64")).collect::<Vec<f64>>()).collect::<Vec<_>>()
    };
    let (one, two) = (run("cpu"), run("cpu,opencl"));
    assert_eq!(one.len(), two.len());
    for (a, b) in one.iter().zip(&two) {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(dot > 0.99999, "cosine {dot}");
    }
    let (code, _, err) = tg(&["embed", "--model", m.to_str().unwrap(), "--device", "cpu,nope", "x"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown device 'nope'") && !err.contains("panicked"), "{err}");
}
