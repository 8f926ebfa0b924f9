//! Seeded mutation testing of the GGUF parser: no input may panic.
//!
//! Seeds: several synthetic files from `GgufWriter`, a "condensed real" file (the real
//! model's metadata with big arrays cut to 64 entries, and its tensor table with the same
//! names, types and ranks but tiny dims and random data), and, with fewer iterations
//! because it is 6.5 MB, the real model's raw header (metadata + tensor table) itself.
//!
//! Env: `TG_FUZZ_ITERS` (default 100000), `TG_FUZZ_SEED` (default fixed; printed),
//! `TG_FUZZ_REAL_ITERS` (default 40), `TG_FUZZ_WRITE_SEEDS=DIR` (also write the seeds
//! there, e.g. as the cargo-fuzz corpus). A failure prints the seed, iteration and mutation
//! list, and writes the input to the system temp dir for `tests/crashers/`.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_gguf::{GgmlType, GgufFile, GgufWriter, Value};

fn synthetic_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();

    let mut w = GgufWriter::new();
    w.add("general.architecture", "toy")
        .add("u8", 1u8)
        .add("i8", -1i8)
        .add("u16", 2u16)
        .add("i16", -2i16)
        .add("u32", 3u32)
        .add("i32", -3i32)
        .add("u64", 4u64)
        .add("i64", -4i64)
        .add("f32", 0.5f32)
        .add("f64", 0.25f64)
        .add("bool", true)
        .add("str", "héllo")
        .add("arr", Value::from(vec![1i32, 2, 3]))
        .add("strs", Value::from(vec!["a", "bc", ""]))
        .add(
            "nested",
            Value::Array(vec![Value::from(vec![1u8]), Value::from(vec![2u8, 3])]),
        );
    for (i, ty) in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ]
    .into_iter()
    .enumerate()
    {
        let n = ty.block_size() * 2;
        w.add_tensor(
            format!("t{i}.{ty}"),
            &[ty.block_size() as u64, 2],
            ty,
            tg_quant::random_blocks(ty, n, i as u64),
        );
    }
    seeds.push(("synthetic-all-types".to_string(), w.to_bytes().unwrap()));

    let mut w = GgufWriter::new();
    w.set_version(2).set_alignment(64);
    w.add_f32_tensor("a", &[3], &[1.0, 2.0, 3.0])
        .add_f32_tensor("b", &[1, 1, 1, 1], &[4.0]);
    w.add_tensor("s", &[], GgmlType::F32, 1f32.to_le_bytes().to_vec());
    seeds.push(("synthetic-v2-align64".to_string(), w.to_bytes().unwrap()));

    let mut w = GgufWriter::new();
    w.add("only", "metadata");
    seeds.push(("synthetic-metadata-only".to_string(), w.to_bytes().unwrap()));
    seeds
}

/// The real model's structure at a small size (see the module docs).
fn condensed_real(f: &GgufFile) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        let v = match v {
            Value::Array(items) if items.len() > 64 => Value::Array(items[..64].to_vec()),
            v => v.clone(),
        };
        w.add(k.clone(), v);
    }
    for (i, t) in f.tensors().iter().enumerate() {
        let mut dims = vec![t.ty.block_size() as u64];
        dims.extend(t.dims.iter().skip(1).map(|&d| d.min(2)));
        let n: u64 = dims.iter().product();
        w.add_tensor(
            t.name.clone(),
            &dims,
            t.ty,
            tg_quant::random_blocks(t.ty, n as usize, i as u64),
        );
    }
    w.to_bytes().unwrap()
}

const INTERESTING_U8: [u8; 9] = [0, 1, 2, 0x7f, 0x80, 0xff, 0xfe, 9, 12];
const INTERESTING_U64: [u64; 14] = [
    0,
    1,
    2,
    3,
    4,
    5,
    32,
    0x7f,
    0xffff,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
];

/// Applies one random mutation, returning a description.
fn mutate(rng: &mut ChaCha8Rng, b: &mut Vec<u8>) -> String {
    if b.is_empty() {
        b.push(rng.gen());
        return "push byte".into();
    }
    let len = b.len();
    // Bias positions toward the start (header and tables) half the time.
    let pos = if rng.gen::<bool>() {
        rng.gen_range(0..len.min(256))
    } else {
        rng.gen_range(0..len)
    };
    match rng.gen_range(0..10) {
        0 => {
            let bit = rng.gen_range(0..8);
            b[pos] ^= 1 << bit;
            format!("flip bit {bit} @{pos}")
        }
        1 => {
            let v = INTERESTING_U8[rng.gen_range(0..INTERESTING_U8.len())];
            b[pos] = v;
            format!("set u8 @{pos} = {v:#x}")
        }
        2 => {
            let v = INTERESTING_U64[rng.gen_range(0..INTERESTING_U64.len())];
            let width = if rng.gen::<bool>() { 4 } else { 8 };
            let bytes = v.to_le_bytes();
            let end = (pos + width).min(len);
            b[pos..end].copy_from_slice(&bytes[..end - pos]);
            format!("set u{} @{pos} = {v:#x}", width * 8)
        }
        3 => {
            // Length-field fiddling: find a small little-endian u64 at or after pos and
            // nudge it or blow it up.
            let Some(p) = (pos..len.saturating_sub(8)).find(|&p| {
                let v = u64::from_le_bytes(b[p..p + 8].try_into().unwrap());
                v > 0 && v < 1 << 20
            }) else {
                b.truncate(pos);
                return format!("truncate to {pos} (no length found)");
            };
            let v = u64::from_le_bytes(b[p..p + 8].try_into().unwrap());
            let nv = match rng.gen_range(0..5) {
                0 => v + 1,
                1 => v - 1,
                2 => v * 2,
                3 => v + (1 << rng.gen_range(8..63)),
                _ => 0,
            };
            b[p..p + 8].copy_from_slice(&nv.to_le_bytes());
            format!("length @{p}: {v} -> {nv}")
        }
        4 => {
            let n = rng.gen_range(0..len);
            b.truncate(n);
            format!("truncate to {n}")
        }
        5 => {
            let n = rng.gen_range(1..=64.min(len - pos));
            b.drain(pos..pos + n);
            format!("delete {n} @{pos}")
        }
        6 => {
            let n = rng.gen_range(1..=64.min(len - pos));
            let chunk = b[pos..pos + n].to_vec();
            let at = rng.gen_range(0..=b.len());
            b.splice(at..at, chunk);
            format!("duplicate {n} from @{pos} to @{at}")
        }
        7 => {
            let n = rng.gen_range(1..16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            b.splice(pos..pos, bytes);
            format!("insert {n} random @{pos}")
        }
        8 => {
            let n = rng.gen_range(1..=8.min(len - pos));
            for x in &mut b[pos..pos + n] {
                *x = rng.gen();
            }
            format!("randomize {n} @{pos}")
        }
        _ => {
            // Overwrite a chunk with a copy of another part of the file.
            let n = rng.gen_range(1..=32.min(len - pos));
            let src = rng.gen_range(0..=len - n);
            let chunk = b[src..src + n].to_vec();
            b[pos..pos + n].copy_from_slice(&chunk);
            format!("copy {n} from @{src} over @{pos}")
        }
    }
}

/// Parses `input` and, when it is valid, exercises the accessors a model loader uses.
fn exercise(input: &[u8]) -> bool {
    if GgufFile::validate(input).is_err() {
        return false;
    }
    let f = GgufFile::from_bytes(input.to_vec()).expect("validate and from_bytes disagree");
    for (k, _) in f.metadata() {
        let _ = (
            f.get_u32(k),
            f.get_f32(k),
            f.get_str(k),
            f.get_str_array(k),
            f.get_i32_array(k),
            f.get_bool(k),
        );
    }
    for t in f.tensors() {
        let bytes = f.tensor_bytes(t);
        assert_eq!(bytes.len(), t.n_bytes);
        let _ = (t.row_len(), t.n_rows(), t.row_bytes());
        if t.n_elements() <= 1 << 16 && tg_quant::can_dequantize(t.ty) {
            let mut out = vec![0f32; t.n_elements() as usize];
            tg_quant::dequantize_row(t.ty, bytes, &mut out).expect("validated tensor dequantizes");
        }
    }
    true
}

fn run(name: &str, seed_bytes: &[u8], iters: u64, base_seed: u64, stats: &mut (u64, u64)) {
    for i in 0..iters {
        let iter_seed = base_seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut rng = ChaCha8Rng::seed_from_u64(iter_seed);
        let mut input = seed_bytes.to_vec();
        let n_mut = rng.gen_range(1..=4);
        let log: Vec<String> = (0..n_mut).map(|_| mutate(&mut rng, &mut input)).collect();
        match catch_unwind(AssertUnwindSafe(|| exercise(&input))) {
            Ok(ok) => {
                stats.0 += 1;
                stats.1 += u64::from(ok);
            }
            Err(_) => {
                let out =
                    std::env::temp_dir().join(format!("gguf-crasher-{name}-{iter_seed:016x}.gguf"));
                let _ = std::fs::write(&out, &input);
                panic!(
                    "PANIC on seed {name:?}, base seed {base_seed:#x}, iteration {i} (iter seed {iter_seed:#x}), \
                     mutations {log:?}; input written to {}",
                    out.display()
                );
            }
        }
    }
}

#[test]
fn mutated_inputs_never_panic() {
    let iters: u64 = std::env::var("TG_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let real_iters: u64 = std::env::var("TG_FUZZ_REAL_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let base_seed: u64 = std::env::var("TG_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x6767_5546_0000_0001);
    println!(
        "mutation fuzz: base seed {base_seed:#x} (TG_FUZZ_SEED to change), {iters} iterations"
    );

    let mut seeds = synthetic_seeds();
    let mut real_header = None;
    let path = std::env::var_os("TG_MODEL")
        .map(Into::into)
        .unwrap_or_else(common::default_model_path);
    if path.is_file() {
        let f = GgufFile::open(&path).unwrap();
        seeds.push(("condensed-real".to_string(), condensed_real(&f)));
        real_header = Some(f.bytes()[..f.data_offset() as usize].to_vec());
    } else {
        println!(
            "model not found at {}: synthetic seeds only",
            path.display()
        );
    }
    for (name, s) in &seeds {
        assert!(exercise(s), "seed {name} must be valid");
    }
    if let Some(dir) = std::env::var_os("TG_FUZZ_WRITE_SEEDS") {
        // Seed corpus for cargo-fuzz (see fuzz/fuzz_targets/gguf_parse.rs).
        std::fs::create_dir_all(&dir).unwrap();
        for (name, s) in &seeds {
            std::fs::write(std::path::Path::new(&dir).join(format!("{name}.gguf")), s).unwrap();
        }
    }

    let t0 = Instant::now();
    let mut stats = (0u64, 0u64);
    let per_seed = iters.div_ceil(seeds.len() as u64);
    for (k, (name, s)) in seeds.iter().enumerate() {
        run(
            name,
            s,
            per_seed,
            base_seed.wrapping_add(k as u64),
            &mut stats,
        );
    }
    if let Some(h) = &real_header {
        run(
            "real-header",
            h,
            real_iters,
            base_seed.wrapping_add(1000),
            &mut stats,
        );
    }
    println!(
        "mutation fuzz: {} inputs parsed ({} still valid) in {:?}, no panic; seeds: {:?}",
        stats.0,
        stats.1,
        t0.elapsed(),
        seeds
            .iter()
            .map(|(n, s)| format!("{n} ({} B)", s.len()))
            .collect::<Vec<_>>()
    );
    assert!(stats.0 >= iters);
}
