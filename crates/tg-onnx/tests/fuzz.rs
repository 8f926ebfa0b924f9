//! Mutation fuzzing of the reader and importer: real ONNX files (the backend node tests'
//! models, a few hundred of them), half with bytes flipped, runs overwritten, cut short or
//! repeated, half with one decoded field changed (a dimension, an attribute, an input, an
//! element type, a payload, an op type, the opset), must give a model or an error — never a
//! panic. 10^5 mutants, seeded; a mutant
//! that ever panicked is kept under `tests/crashers/` and re-run first.

use std::collections::HashMap;
use std::path::PathBuf;

mod common;
use common::{cases_dir, models_dir};

/// xorshift64*: a small, seeded generator (the test must not depend on a crate's stream).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A structural mutation: the model decoded, one field changed (a dimension, an attribute,
/// an input, an element type, a payload, an op type, the opset), encoded again.
fn mutate_fields(rng: &mut Rng, src: &[u8]) -> Vec<u8> {
    use prost::Message;
    use tg_onnx::proto::ModelProto;
    let Ok(mut m) = ModelProto::decode(src) else { return src.to_vec() };
    let Some(g) = m.graph.as_mut() else { return src.to_vec() };
    let odd = |rng: &mut Rng| [-3i64, -1, 0, 1, 2, 3, 7, 64, 1 << 20, i64::MAX, i64::MIN][rng.below(11)];
    match rng.below(8) {
        0 => {
            let n = g.input.len();
            if let Some(v) = g.input.get_mut(rng.below(n)) {
                if let Some(tg_onnx::proto::type_proto::Value::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut()) {
                    if let Some(d) = t.shape.as_mut().and_then(|s| {
                        let n = s.dim.len();
                        s.dim.get_mut(rng.below(n))
                    }) {
                        d.value = Some(tg_onnx::proto::tensor_shape_proto::dimension::Value::DimValue(odd(rng)));
                    }
                }
            }
        }
        1 => {
            let n = g.node.len();
            if let Some(node) = g.node.get_mut(rng.below(n)) {
                let k = node.attribute.len();
                if let Some(a) = node.attribute.get_mut(rng.below(k)) {
                    if a.i.is_some() || rng.below(2) == 0 {
                        a.i = Some(odd(rng));
                    }
                    if !a.ints.is_empty() {
                        let j = rng.below(a.ints.len());
                        a.ints[j] = odd(rng);
                    }
                }
            }
        }
        2 => {
            let n = g.node.len();
            if let Some(node) = g.node.get_mut(rng.below(n)) {
                if !node.input.is_empty() && rng.below(2) == 0 {
                    node.input.pop();
                } else {
                    node.input.push(["", "x", "nowhere"][rng.below(3)].into());
                }
            }
        }
        3 => {
            let n = g.initializer.len();
            if let Some(t) = g.initializer.get_mut(rng.below(n)) {
                t.data_type = Some([0, 1, 6, 7, 9, 11, 99][rng.below(7)]);
            }
        }
        4 => {
            let n = g.initializer.len();
            if let Some(t) = g.initializer.get_mut(rng.below(n)) {
                if let Some(r) = t.raw_data.as_mut() {
                    let keep = rng.below(r.len() + 1);
                    r.truncate(keep);
                } else if !t.dims.is_empty() {
                    let j = rng.below(t.dims.len());
                    t.dims[j] = odd(rng);
                }
            }
        }
        5 => {
            let n = g.node.len();
            let ops = ["Reshape", "Slice", "Gather", "Concat", "Transpose", "Unsqueeze", "Squeeze", "MatMul", "Softmax", "ReduceSum", "Expand", "Cast", "Range", "Where", "Gemm"];
            if let Some(node) = g.node.get_mut(rng.below(n)) {
                node.op_type = Some(ops[rng.below(ops.len())].into());
            }
        }
        6 => {
            if let Some(o) = m.opset_import.first_mut() {
                o.version = Some([1, 6, 9, 11, 13, 18, 21, 99][rng.below(8)]);
            }
        }
        _ => {
            if let Some(v) = g.output.get_mut(0) {
                v.name = Some(["", "x", "nowhere"][rng.below(3)].into());
            }
        }
    }
    m.encode_to_vec()
}

fn mutate(rng: &mut Rng, src: &[u8]) -> Vec<u8> {
    if rng.below(2) == 0 {
        return mutate_fields(rng, src);
    }
    let mut b = src.to_vec();
    for _ in 0..1 + rng.below(2) {
        if b.is_empty() {
            break;
        }
        match rng.below(5) {
            0 => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(b.len());
                b[i] = [0, 0xff, 0x7f, 0x80, 1][rng.below(5)];
            }
            2 if rng.below(4) == 0 => {
                let n = rng.below(b.len());
                b.truncate(n);
            }
            3 => {
                let (i, n) = (rng.below(b.len()), 1 + rng.below(16));
                let run: Vec<u8> = b[i..(i + n).min(b.len())].to_vec();
                let at = rng.below(b.len());
                b.splice(at..at, run);
            }
            _ => {
                let i = rng.below(b.len());
                let v = rng.next().to_le_bytes();
                for (k, x) in v.iter().enumerate().take(b.len() - i) {
                    b[i + k] = *x;
                }
            }
        }
    }
    b
}

/// Decodes and imports `bytes` (inputs at their declared shapes, dynamic ones and ones of
/// `cap` or more as 2): 0 if it does not decode, 1 if it decodes and does not import, 2 if it
/// imports.
fn exercise(bytes: Vec<u8>) -> usize {
    exercise_capped(bytes, 64)
}

fn exercise_capped(bytes: Vec<u8>, cap: usize) -> usize {
    let Ok(m) = tg_onnx::OnnxModel::from_bytes(PathBuf::from("mutant.onnx"), bytes.into()) else { return 0 };
    let mut shapes = HashMap::new();
    for v in m.inputs() {
        if let Some((dims, _)) = tg_onnx::tensor_type(v) {
            let dims: Vec<usize> = dims.iter().map(|d| d.filter(|&x| x < cap).unwrap_or(2)).collect();
            shapes.insert(v.name.clone().unwrap_or_default(), dims);
        }
    }
    1 + tg_onnx::import(&m, &shapes).is_ok() as usize
}

#[test]
fn mutated_models_give_errors_not_panics() {
    let crashers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/crashers");
    if let Ok(rd) = std::fs::read_dir(&crashers) {
        for e in rd.flatten() {
            let b = std::fs::read(e.path()).unwrap();
            let r = std::panic::catch_unwind(|| exercise(b));
            let r = r.map(|_| ());
            assert!(r.is_ok(), "crasher {} panics again", e.path().display());
        }
    }
    let Some(root) = cases_dir() else { return };
    let mut models: Vec<Vec<u8>> = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root).unwrap().flatten().map(|e| e.path()).collect();
    dirs.sort();
    for d in dirs.iter().step_by(4) {
        if let Ok(b) = std::fs::read(d.join("model.onnx")) {
            if b.len() < 1 << 16 {
                models.push(b);
            }
        }
    }
    assert!(models.len() > 200, "{} models", models.len());
    let iterations: usize = std::env::var("TG_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let (outcomes, panics) = campaign(&models, iterations, 0x9e37_79b9_7f4a_7c15, 64, &format!("{} models", models.len()));
    assert!(outcomes[2] > iterations / 20, "too few mutants reach the importer's success path: {outcomes:?}");
    assert!(panics.is_empty(), "mutants that panic (copy them to tests/crashers/): {panics:?}");
}

/// `iterations` seeded mutants of randomly picked `models` through [`exercise_capped`]:
/// the count per outcome and the files the panicking mutants were written to.
fn campaign(models: &[Vec<u8>], iterations: usize, seed: u64, cap: usize, what: &str) -> ([usize; 3], Vec<PathBuf>) {
    let mut rng = Rng(seed);
    let t = std::time::Instant::now();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut panics = Vec::new();
    let mut outcomes = [0usize; 3];
    for i in 0..iterations {
        let src = &models[rng.below(models.len())];
        let m = mutate(&mut rng, src);
        let keep = m.clone();
        match std::panic::catch_unwind(|| exercise_capped(m, cap)) {
            Ok(k) => outcomes[k] += 1,
            Err(_) => {
                let p = std::env::temp_dir().join(format!("tg-onnx-crasher-{seed:x}-{i}.onnx"));
                std::fs::write(&p, &keep).unwrap();
                panics.push(p);
            }
        }
    }
    std::panic::set_hook(hook);
    eprintln!(
        "{iterations} mutants of {what} in {:.1} s: {} did not decode, {} decoded but were refused, {} imported; {} panics",
        t.elapsed().as_secs_f64(),
        outcomes[0],
        outcomes[1],
        outcomes[2],
        panics.len()
    );
    (outcomes, panics)
}

/// The same on the three audio target models (about 1 MB each; the 45 MB terrain UNet is
/// left to the node tests' op variety): `TG_FUZZ_MODEL_ITERATIONS` mutants (10^4 by default;
/// the closing notes give a 10^5 run).
#[test]
fn mutated_target_models_give_errors_not_panics() {
    let Some(dir) = models_dir() else { return };
    let models: Vec<Vec<u8>> = ["melspectrogram.onnx", "embedding_model.onnx", "hey_jarvis_v0.1.onnx"].iter().map(|n| std::fs::read(dir.join(n)).unwrap()).collect();
    // Dynamic dimensions are bound to 2: the embedding and wake-word models import as they
    // are; the melspectrogram (2 samples, shorter than its 512-tap window) is refused.
    let clean: Vec<usize> = models.iter().map(|m| exercise_capped(m.clone(), usize::MAX)).collect();
    assert_eq!(clean, [1, 2, 2], "the unmutated models");
    let iterations: usize = std::env::var("TG_FUZZ_MODEL_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let (_, panics) = campaign(&models, iterations, 0x2545_f491_4f6c_dd1d, usize::MAX, "the 3 audio models");
    assert!(panics.is_empty(), "mutants that panic (copy them to tests/crashers/): {panics:?}");
}
