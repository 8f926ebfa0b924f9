//! Seeded mutation testing of the safetensors reader: no input may panic, and every
//! accepted input must satisfy the reader's documented invariants.
//!
//! Seeds: synthetic files from `SafetensorsWriter` (all dtypes, scalars, zero-size
//! tensors, metadata), a "condensed real" file (the EmbeddingGemma header's names, dtypes,
//! metadata and ranks, with every dim cut to at most 2 and random data), and the real
//! header itself, verbatim, with no data section (1.2 GB is not synthesized: those inputs
//! are all rejected, at the latest by the range check, after every entry's own checks).
//! The real model is optional: without it the synthetic seeds are used alone.
//!
//! Mutations: byte-level (flips, interesting values, truncation, deletion, duplication,
//! insertion), header-length edits, and JSON edits of the header (numbers in shapes and
//! data_offsets, dtype strings, shapes, swapped offsets, copied strings for duplicate names,
//! spliced tokens, deleted spans), half of them with the header length fixed up.
//!
//! Env: `TG_FUZZ_ITERS` (default 100000), `TG_FUZZ_REAL_ITERS` (default 5000), `TG_SEED`
//! (default fixed; printed). A failure prints the seed, iteration and mutation list and
//! writes the input to the system temp dir, for `tests/crashers/`.

mod common;

use std::collections::BTreeMap;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_safetensors::{Dtype, SafetensorsError, SafetensorsFile, SafetensorsWriter};

fn random_bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.gen()).collect()
}

fn synthetic_seeds(rng: &mut ChaCha8Rng) -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();

    let mut w = SafetensorsWriter::new();
    w.add_metadata("format", "pt")
        .add_metadata("note", "x\"y\\z");
    let f32s: Vec<f32> = (0..24).map(|i| i as f32 * 0.25 - 3.0).collect();
    w.add_f32("f32.matrix", &[4, 6], &f32s)
        .add_f32("f32.scalar", &[], &[1.5])
        .add_f32("f32.empty", &[0, 3], &[])
        .add_tensor("f16", Dtype::F16, &[3, 5], random_bytes(rng, 30))
        .add_tensor("bf16", Dtype::BF16, &[7], random_bytes(rng, 14))
        .add_tensor("i64", Dtype::I64, &[2], random_bytes(rng, 16))
        .add_tensor("f8", Dtype::F8E4M3, &[1, 3], random_bytes(rng, 3))
        .add_tensor("f4", Dtype::F4, &[2, 3], random_bytes(rng, 3))
        .add_tensor("f6", Dtype::F6E3M2, &[4], random_bytes(rng, 3))
        .add_tensor("bool", Dtype::Bool, &[2], [0u8, 1])
        .add_tensor("c64", Dtype::C64, &[1], random_bytes(rng, 8));
    seeds.push(("synthetic-mixed".to_string(), w.to_bytes().unwrap()));

    let mut w = SafetensorsWriter::new();
    w.add_f32("w", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .add_tensor("b", Dtype::BF16, &[2], [0x80u8, 0x3f, 0x00, 0x40]);
    seeds.push(("synthetic-small".to_string(), w.to_bytes().unwrap()));

    seeds.push((
        "synthetic-empty".to_string(),
        SafetensorsWriter::new().to_bytes().unwrap(),
    ));
    seeds
}

/// The real header's bytes (length prefix + JSON), read without the data.
fn real_header() -> Option<Vec<u8>> {
    use std::io::Read;
    let path = common::embed_model_file("mutation_fuzz (real-header seeds)", "model.safetensors")?;
    let mut f = std::fs::File::open(&path).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    let n = u64::from_le_bytes(len);
    if n > 100_000_000 {
        println!(
            "{}: implausible header length {n}, not used",
            path.display()
        );
        return None;
    }
    let mut out = len.to_vec();
    out.resize(8 + n as usize, 0);
    f.read_exact(&mut out[8..]).ok()?;
    Some(out)
}

/// The real structure at a small size (see the module docs).
fn condensed_real(header: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let json: serde_json::Value = serde_json::from_slice(&header[8..]).unwrap();
    let mut entries: Vec<(u64, String, Dtype, Vec<usize>)> = Vec::new();
    let mut w = SafetensorsWriter::new();
    for (k, v) in json.as_object().unwrap() {
        if k == "__metadata__" {
            for (mk, mv) in v.as_object().unwrap() {
                w.add_metadata(mk.clone(), mv.as_str().unwrap());
            }
            continue;
        }
        let dtype = Dtype::from_name(v["dtype"].as_str().unwrap()).unwrap();
        let shape = v["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap().min(2) as usize)
            .collect();
        entries.push((
            v["data_offsets"][0].as_u64().unwrap(),
            k.clone(),
            dtype,
            shape,
        ));
    }
    entries.sort();
    for (_, name, dtype, shape) in entries {
        let n: usize = shape.iter().product();
        w.add_tensor(name, dtype, &shape, random_bytes(rng, n * dtype.bits() / 8));
    }
    w.to_bytes().unwrap()
}

const INTERESTING_U8: [u8; 12] = [
    0, 1, 2, 0x7f, 0x80, 0xff, b'"', b'{', b'}', b'[', b',', b'0',
];
const INTERESTING_NUMBERS: [&str; 20] = [
    "0",
    "1",
    "2",
    "3",
    "4",
    "8",
    "255",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "1.5",
    "1e3",
    "null",
    "\"1\"",
    "[]",
    "1000000000000",
];
const DTYPE_JUNK: [&str; 6] = [
    "F33",
    "",
    "f32",
    "F8_E4M3FN",
    "FLOAT",
    "\\u0046\\u0033\\u0032",
];
const TOKENS: [&str; 14] = [
    "null", "[]", "{}", "\"x\"", ",", "]", "}", "[", "{", ":", "\"", "0", "-0", "true",
];

fn header_range(b: &[u8]) -> Range<usize> {
    if b.len() < 8 {
        return 0..0;
    }
    let n = u64::from_le_bytes(b[..8].try_into().unwrap());
    let end = usize::try_from(n)
        .unwrap_or(usize::MAX)
        .saturating_add(8)
        .min(b.len());
    8..end
}

fn find_all(h: &[u8], pat: &[u8]) -> Vec<usize> {
    if h.len() < pat.len() {
        return Vec::new();
    }
    (0..=h.len() - pat.len())
        .filter(|&i| &h[i..i + pat.len()] == pat)
        .collect()
}

/// Byte ranges of runs of ASCII digits.
fn digit_runs(h: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < h.len() {
        if h[i].is_ascii_digit() {
            let s = i;
            while i < h.len() && h[i].is_ascii_digit() {
                i += 1;
            }
            out.push(s..i);
        } else {
            i += 1;
        }
    }
    out
}

/// The `[...]` after each occurrence of `key` (e.g. `"shape":`), up to the first `]`.
fn bracket_values(h: &[u8], key: &[u8]) -> Vec<Range<usize>> {
    find_all(h, key)
        .into_iter()
        .filter_map(|p| {
            let s = p + key.len();
            if h.get(s) != Some(&b'[') {
                return None;
            }
            let e = h[s..].iter().position(|&c| c == b']')? + s + 1;
            Some(s..e)
        })
        .collect()
}

/// Ranges of quoted strings (naive: from a quote to the next quote).
fn quoted(h: &[u8]) -> Vec<Range<usize>> {
    let q = find_all(h, b"\"");
    q.chunks_exact(2).map(|p| p[0]..p[1] + 1).collect()
}

fn pick<T: Clone>(rng: &mut ChaCha8Rng, v: &[T]) -> Option<T> {
    v.choose(rng).cloned()
}

/// One JSON-aware edit of the header text; returns a description, or `None` if the header
/// offered nothing to edit.
fn json_edit(rng: &mut ChaCha8Rng, h: &mut Vec<u8>) -> Option<String> {
    match rng.gen_range(0..9) {
        0 | 1 => {
            // A number, mostly inside shapes and data_offsets.
            let r = pick(rng, &digit_runs(h))?;
            let old = String::from_utf8_lossy(&h[r.clone()]).into_owned();
            let v: u64 = old.parse().unwrap_or(0);
            let new = match rng.gen_range(0..3) {
                0 => INTERESTING_NUMBERS[rng.gen_range(0..INTERESTING_NUMBERS.len())].to_string(),
                1 => (v.wrapping_add(rng.gen_range(1..=8))).to_string(),
                _ => v.saturating_sub(rng.gen_range(1..=8)).to_string(),
            };
            h.splice(r.clone(), new.bytes());
            Some(format!("number @{} {old} -> {new}", r.start))
        }
        2 => {
            // A dtype string.
            let p = pick(rng, &find_all(h, b"\"dtype\":\""))? + 9;
            let end = h[p..].iter().position(|&c| c == b'"')? + p;
            let new = if rng.gen_ratio(3, 4) {
                Dtype::ALL[rng.gen_range(0..Dtype::ALL.len())].name()
            } else {
                DTYPE_JUNK[rng.gen_range(0..DTYPE_JUNK.len())]
            };
            h.splice(p..end, new.bytes());
            Some(format!("dtype @{p} -> {new:?}"))
        }
        3 => {
            // A whole shape.
            let r = pick(rng, &bracket_values(h, b"\"shape\":"))?;
            let new = match rng.gen_range(0..6) {
                0 => "[]".to_string(),
                1 => "[0]".to_string(),
                2 => "[1,1,1]".to_string(),
                3 => {
                    let inner = String::from_utf8_lossy(&h[r.start + 1..r.end - 1]).into_owned();
                    if inner.is_empty() {
                        "[2]".to_string()
                    } else {
                        format!("[{inner},2]")
                    }
                }
                4 => "[18446744073709551615,2]".to_string(),
                _ => format!("[{}]", rng.gen_range(0..100)),
            };
            h.splice(r.clone(), new.bytes());
            Some(format!("shape @{} -> {new}", r.start))
        }
        4 => {
            // Swap two data_offsets arrays (overlaps, holes, size mismatches).
            let all = bracket_values(h, b"\"data_offsets\":");
            let a = pick(rng, &all)?;
            let b = pick(rng, &all)?;
            if a == b {
                return None;
            }
            let (first, second) = if a.start < b.start { (a, b) } else { (b, a) };
            let t1 = h[first.clone()].to_vec();
            let t2 = h[second.clone()].to_vec();
            h.splice(second.clone(), t1);
            h.splice(first.clone(), t2);
            Some(format!(
                "swap data_offsets @{} and @{}",
                first.start, second.start
            ))
        }
        8 => {
            // Move a range keeping its size (overlaps, holes), or copy another one's range.
            let all = bracket_values(h, b"\"data_offsets\":");
            let r = pick(rng, &all)?;
            let new = if rng.gen() {
                let text = String::from_utf8_lossy(&h[r.start + 1..r.end - 1]).into_owned();
                let (a, b) = text.split_once(',')?;
                let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                let d = [1, 2, 4, 8, b.wrapping_sub(a)][rng.gen_range(0..5)];
                if rng.gen() {
                    format!("[{},{}]", a.wrapping_add(d), b.wrapping_add(d))
                } else {
                    format!("[{},{}]", a.wrapping_sub(d), b.wrapping_sub(d))
                }
            } else {
                let src = pick(rng, &all)?;
                String::from_utf8_lossy(&h[src]).into_owned()
            };
            h.splice(r.clone(), new.bytes());
            Some(format!("data_offsets @{} -> {new}", r.start))
        }
        5 => {
            // Copy one quoted string over another (duplicate names, keys as values, ...).
            let all = quoted(h);
            let src = pick(rng, &all)?;
            let dst = pick(rng, &all)?;
            let text = h[src.clone()].to_vec();
            h.splice(dst.clone(), text);
            Some(format!("string @{} over @{}", src.start, dst.start))
        }
        6 => {
            // Splice a token after a structural character.
            let structural: Vec<usize> = (0..h.len())
                .filter(|&i| b"{}[],:".contains(&h[i]))
                .collect();
            let p = pick(rng, &structural)? + 1;
            let tok = TOKENS[rng.gen_range(0..TOKENS.len())];
            if rng.gen() {
                h.splice(p..p, tok.bytes());
                Some(format!("insert {tok:?} @{p}"))
            } else {
                let end = h[p..]
                    .iter()
                    .position(|c| b"{}[],:".contains(c))
                    .map_or(h.len(), |e| e + p);
                h.splice(p..end, tok.bytes());
                Some(format!("replace @{p}..{end} by {tok:?}"))
            }
        }
        _ => {
            // Delete from one comma to a later one (drops fields or whole entries).
            let commas = find_all(h, b",");
            let a = pick(rng, &commas)?;
            let b = commas.iter().copied().filter(|&c| c > a).take(8).last()?;
            h.drain(a..b);
            Some(format!("delete @{a}..{b}"))
        }
    }
}

/// Applies one random mutation, returning a description.
fn mutate(rng: &mut ChaCha8Rng, b: &mut Vec<u8>) -> String {
    if b.is_empty() {
        b.push(rng.gen());
        return "push byte".into();
    }
    let len = b.len();
    let hr = header_range(b);
    // Bias positions toward the length prefix and the header.
    let pos = match rng.gen_range(0..4) {
        0 => rng.gen_range(0..len.min(8)),
        1 | 2 if !hr.is_empty() => rng.gen_range(hr.clone()),
        _ => rng.gen_range(0..len),
    };
    match rng.gen_range(0..16) {
        0 => {
            let bit = rng.gen_range(0..8);
            b[pos] ^= 1 << bit;
            format!("flip bit {bit} @{pos}")
        }
        1 => {
            let v = INTERESTING_U8[rng.gen_range(0..INTERESTING_U8.len())];
            b[pos] = v;
            format!("set @{pos} = {v:#x}")
        }
        2 => {
            let n = rng.gen_range(0..len);
            b.truncate(n);
            format!("truncate to {n}")
        }
        3 => {
            let n = rng.gen_range(1..=64.min(len - pos));
            b.drain(pos..pos + n);
            format!("delete {n} @{pos}")
        }
        4 => {
            let n = rng.gen_range(1..=64.min(len - pos));
            let chunk = b[pos..pos + n].to_vec();
            let at = rng.gen_range(0..=b.len());
            b.splice(at..at, chunk);
            format!("duplicate {n} from @{pos} to @{at}")
        }
        5 => {
            let n = rng.gen_range(1..16);
            let bytes = random_bytes(rng, n);
            b.splice(pos..pos, bytes);
            format!("insert {n} random @{pos}")
        }
        6 | 7 => {
            // Header length edits.
            if len < 8 {
                b.resize(8, 0);
            }
            let n = u64::from_le_bytes(b[..8].try_into().unwrap());
            let file_len = b.len() as u64;
            let nv = match rng.gen_range(0..8) {
                0 => n.wrapping_add(1),
                1 => n.wrapping_sub(1),
                2 => n.wrapping_add(8),
                3 => n.wrapping_sub(8),
                4 => file_len - 8,
                5 => file_len - 7,
                6 => [0, 100_000_000, 100_000_001, 1 << 32, u64::MAX][rng.gen_range(0..5)],
                _ => rng.gen_range(0..=file_len),
            };
            b[..8].copy_from_slice(&nv.to_le_bytes());
            format!("header length {n} -> {nv}")
        }
        _ => {
            // JSON edits of the header, with the length prefix fixed up 3 times in 4.
            if hr.is_empty() {
                b.truncate(pos);
                return format!("truncate to {pos} (no header)");
            }
            let mut h = b[hr.clone()].to_vec();
            let Some(what) = json_edit(rng, &mut h) else {
                return "json edit: nothing to edit".into();
            };
            let tail = b.split_off(hr.end);
            b.truncate(8);
            b.extend_from_slice(&h);
            b.extend_from_slice(&tail);
            if rng.gen_ratio(3, 4) {
                b[..8].copy_from_slice(&(h.len() as u64).to_le_bytes());
                format!("{what} (length fixed)")
            } else {
                what
            }
        }
    }
}

/// Parses `input`; when valid, checks the reader's invariants through every accessor.
/// Returns `None` when accepted, else the error variant's name.
fn exercise(input: &[u8]) -> Option<String> {
    let f = match SafetensorsFile::from_bytes(input, "fuzz") {
        Ok(f) => f,
        Err(e) => {
            assert!(e.to_string().starts_with("fuzz"), "{e}");
            let dbg = format!("{e:?}");
            let end = dbg.find([' ', '{', '(']).unwrap_or(dbg.len());
            return Some(dbg[..end].to_string());
        }
    };
    assert_eq!(f.data_offset(), 8 + f.header_len());
    assert!(f.header_json().starts_with('{'));
    let mut next = f.data_offset();
    for t in f.tensors() {
        assert_eq!(
            t.file_offset, next,
            "{}: tensors must tile the data section",
            t.name
        );
        next += t.data.len();
        let n = t.n_elements();
        assert_eq!(
            Some(t.data.len() as u64),
            t.dtype.bytes_for(n as u64),
            "{}",
            t.name
        );
        assert_eq!(f.tensor(t.name).unwrap(), t);
        match t.dtype {
            Dtype::F32 | Dtype::F16 | Dtype::BF16 => {
                assert_eq!(t.to_f32_vec().unwrap().len(), n)
            }
            _ => assert!(matches!(
                t.to_f32_vec(),
                Err(SafetensorsError::WrongDtype { .. })
            )),
        }
        match (t.dtype, t.as_f32_slice()) {
            (Dtype::F32, Ok(s)) => assert_eq!(s.len(), n),
            // from_bytes keeps file offsets' alignment.
            (Dtype::F32, Err(SafetensorsError::Misaligned { .. })) => {
                assert!(t.file_offset % 4 != 0 && n > 0)
            }
            (_, Err(SafetensorsError::WrongDtype { .. })) => assert_ne!(t.dtype, Dtype::F32),
            (d, r) => panic!("{}: {d}: unexpected as_f32_slice result {r:?}", t.name),
        }
    }
    assert_eq!(next, f.len(), "tensors must cover the data section");
    let mut keys: Vec<_> = f.metadata().iter().map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), f.metadata().len());
    None
}

#[derive(Default)]
struct Stats {
    inputs: u64,
    accepted: u64,
    rejected: BTreeMap<String, u64>,
}

fn run(name: &str, seed_bytes: &[u8], iters: u64, base_seed: u64, stats: &mut Stats) {
    for i in 0..iters {
        let iter_seed = base_seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut rng = ChaCha8Rng::seed_from_u64(iter_seed);
        let mut input = seed_bytes.to_vec();
        let n_mut = rng.gen_range(1..=4);
        let log: Vec<String> = (0..n_mut).map(|_| mutate(&mut rng, &mut input)).collect();
        match catch_unwind(AssertUnwindSafe(|| exercise(&input))) {
            Ok(outcome) => {
                stats.inputs += 1;
                match outcome {
                    None => stats.accepted += 1,
                    Some(variant) => *stats.rejected.entry(variant).or_default() += 1,
                }
            }
            Err(_) => {
                let out = std::env::temp_dir().join(format!(
                    "safetensors-crasher-{name}-{iter_seed:016x}.safetensors"
                ));
                let _ = std::fs::write(&out, &input);
                panic!(
                    "PANIC on seed {name:?}, base seed {base_seed:#x}, iteration {i} (iter seed \
                     {iter_seed:#x}), mutations {log:?}; input written to {}",
                    out.display()
                );
            }
        }
    }
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn mutated_inputs_never_panic() {
    let iters = env_u64("TG_FUZZ_ITERS", 100_000);
    let real_iters = env_u64("TG_FUZZ_REAL_ITERS", 5_000);
    let base_seed = common::seed("mutation_fuzz", 0x5afe_7e45_f022_0001);
    let mut rng = ChaCha8Rng::seed_from_u64(base_seed);

    let mut seeds = synthetic_seeds(&mut rng);
    let real = real_header();
    if let Some(h) = &real {
        seeds.push(("condensed-real".to_string(), condensed_real(h, &mut rng)));
    } else {
        println!("mutation_fuzz: real header unavailable, synthetic seeds only");
    }
    for (name, s) in &seeds {
        assert_eq!(exercise(s), None, "seed {name} must be valid");
    }

    let t0 = Instant::now();
    let mut stats = Stats::default();
    let per_seed = iters.div_ceil(seeds.len() as u64);
    for (k, (name, s)) in seeds.iter().enumerate() {
        run(
            name,
            s,
            per_seed,
            base_seed.wrapping_add(k as u64 + 1),
            &mut stats,
        );
    }
    if let Some(h) = &real {
        // The verbatim header without data: rejected (OutOfBounds at the latest), but every
        // mutation of it goes through the JSON parser and each entry's own checks.
        assert_eq!(exercise(h).as_deref(), Some("OutOfBounds"));
        run(
            "real-header",
            h,
            real_iters,
            base_seed.wrapping_add(1000),
            &mut stats,
        );
    }
    let rejected: u64 = stats.rejected.values().sum();
    println!(
        "mutation_fuzz: {} inputs in {:?}: {} accepted, {} rejected, no panic",
        stats.inputs,
        t0.elapsed(),
        stats.accepted,
        rejected
    );
    println!("mutation_fuzz: rejections by error: {:?}", stats.rejected);
    println!(
        "mutation_fuzz: seeds: {:?}",
        seeds
            .iter()
            .map(|(n, s)| format!("{n} ({} B)", s.len()))
            .chain(real.iter().map(|h| format!("real-header ({} B)", h.len())))
            .collect::<Vec<_>>()
    );
    assert!(stats.inputs >= iters);
    // The fuzzer must reach deep: some inputs stay valid, and the checks past the JSON
    // parser are hit.
    assert!(stats.accepted > 0);
    for v in [
        "InvalidEntry",
        "UnknownDtype",
        "SizeMismatch",
        "Overlap",
        "Hole",
        "HeaderOutOfBounds",
    ] {
        assert!(stats.rejected.contains_key(v), "no input rejected with {v}");
    }
}
