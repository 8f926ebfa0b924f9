//! The on-disk plan store: a second request for the same plan loads it; anything that
//! changes the plan changes the key; a damaged or invalid entry is recompiled, never used.

use std::path::PathBuf;
use std::sync::Arc;
use tg_compiler::{compile_cached, CacheOutcome, CompileOptions, CostSource, Numerics, PlanStore};
use tg_ir::{DType, Graph, GraphBuilder, ReduceOp, UnaryOp};
use tg_profile::{Fingerprint, Measurement, Profile};
use tg_runtime::{CpuDevice, Device};

fn graph(n: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[4, n], DType::F32).unwrap();
    let m = b.reduce_last(ReduceOp::Max, x).unwrap();
    let d = b.sub(x, m).unwrap();
    let e = b.unary(UnaryOp::Exp, d).unwrap();
    let s = b.reduce_last(ReduceOp::Sum, e).unwrap();
    let y = b.div(e, s).unwrap();
    b.output("y", y).unwrap();
    b.finish().unwrap()
}

fn store(name: &str) -> (PlanStore, PathBuf) {
    let dir = std::env::temp_dir().join(format!("tg-plan-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    (PlanStore::new(&dir), dir)
}

fn entries(dir: &PathBuf) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).map(|rd| rd.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    v.sort();
    v
}

fn cpu(t: usize) -> Arc<dyn Device> {
    Arc::new(CpuDevice::new(t).unwrap())
}

#[test]
fn a_second_request_loads_the_same_plan() {
    let (st, dir) = store("hit");
    let g = graph(16);
    let opts = CompileOptions::default();
    let (a, oa) = compile_cached(&g, &[cpu(1)], &opts, Some(&st)).unwrap();
    assert_eq!(oa, CacheOutcome::Stored);
    let (b, ob) = compile_cached(&g, &[cpu(1)], &opts, Some(&st)).unwrap();
    assert_eq!(ob, CacheOutcome::Hit);
    assert_eq!(a.plan, b.plan);
    assert!(b.report.cache.as_deref().is_some_and(|c| c.starts_with("loaded")), "{:?}", b.report.cache);
    // The stages of the original compile travel with the plan.
    let names: Vec<&str> = b.report.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, tg_compiler::STAGES);
    assert_eq!(entries(&dir).len(), 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn whatever_changes_the_plan_changes_the_key() {
    let (st, dir) = store("keys");
    let base = CompileOptions::default();
    let mut profile = Profile::new(Fingerprint::current());
    let mut variants: Vec<(Graph, CompileOptions, usize)> = vec![(graph(16), base.clone(), 1)];
    variants.push((graph(17), base.clone(), 1)); // another shape
    variants.push((graph(16), base.clone(), 2)); // another thread count
    variants.push((graph(16), CompileOptions { numerics: Numerics::Q8Activations, ..base.clone() }, 1));
    variants.push((graph(16), CompileOptions { alignment: 128, ..base.clone() }, 1));
    variants.push((graph(16), CompileOptions::disabling(&["rewrite:fusion.softmax"]).unwrap(), 1));
    variants.push((graph(16), CompileOptions { cost: CostSource::Profile(Arc::new(profile.clone())), ..base.clone() }, 1));
    // The same profile with one measurement more.
    let key = tg_compiler::planning_keys(&graph(16), &[cpu(1)], &base).unwrap().remove(0);
    profile.insert(key, Measurement { median_ns: 5.0, min_ns: 5.0, p90_ns: 5.0, mad_ns: 0.0, reps: 5, warmup: 1, seed: 0 });
    variants.push((graph(16), CompileOptions { cost: CostSource::Profile(Arc::new(profile)), ..base.clone() }, 1));
    for (i, (g, o, t)) in variants.iter().enumerate() {
        let (_, out) = compile_cached(g, &[cpu(*t)], o, Some(&st)).unwrap();
        assert_eq!(out, CacheOutcome::Stored, "variant {i} hit another variant's entry");
    }
    assert_eq!(entries(&dir).len(), variants.len());
    for (g, o, t) in &variants {
        assert_eq!(compile_cached(g, &[cpu(*t)], o, Some(&st)).unwrap().1, CacheOutcome::Hit);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn damaged_or_invalid_entries_are_recompiled() {
    let (st, dir) = store("damaged");
    let g = graph(16);
    let opts = CompileOptions::default();
    let (good, _) = compile_cached(&g, &[cpu(1)], &opts, Some(&st)).unwrap();
    let path = entries(&dir).remove(0);
    let text = std::fs::read_to_string(&path).unwrap();
    // Truncated file.
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    let (c, out) = compile_cached(&g, &[cpu(1)], &opts, Some(&st)).unwrap();
    assert_eq!(out, CacheOutcome::Stored);
    assert_eq!(c.plan, good.plan);
    // A plan that fails validation (an arena too small for its buffers) under the right key.
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["plan"]["arenas"][0]["bytes"] = serde_json::json!(4);
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    let (c, out) = compile_cached(&g, &[cpu(1)], &opts, Some(&st)).unwrap();
    assert_eq!(out, CacheOutcome::Stored, "an invalid stored plan was used");
    assert_eq!(c.plan, good.plan);
    // The right file name with another key's check digest: not used either.
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["check"] = serde_json::json!("0000000000000000");
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    assert_eq!(compile_cached(&g, &[cpu(1)], &opts, Some(&st)).unwrap().1, CacheOutcome::Stored);
    // A store that cannot be written: compiled, and the report says why.
    let blocked = PlanStore::new(path.join("not-a-dir"));
    let (c, out) = compile_cached(&g, &[cpu(1)], &opts, Some(&blocked)).unwrap();
    assert_eq!(out, CacheOutcome::Compiled);
    assert!(c.report.cache.as_deref().is_some_and(|m| m.starts_with("not stored")));
    std::fs::remove_dir_all(&dir).ok();
}

/// The store stays under its limit by deleting the least recently used entries (a load
/// counts as a use); files that are not entries are never touched.
#[test]
fn the_least_recently_used_entries_are_evicted() {
    let (st, dir) = store("evict");
    let opts = CompileOptions::default();
    // Measure one entry, then allow about three.
    compile_cached(&graph(8), &[cpu(1)], &opts, Some(&st)).unwrap();
    let one = std::fs::metadata(&entries(&dir)[0]).unwrap().len();
    std::fs::remove_dir_all(&dir).ok();
    let st = st.with_limit(3 * one + one / 2);
    std::fs::create_dir_all(&dir).unwrap();
    let mine = dir.join("notes.json");
    std::fs::write(&mine, vec![b' '; 10 * one as usize]).unwrap();
    let path_of = |n: usize| {
        let before: std::collections::BTreeSet<PathBuf> = entries(&dir).into_iter().collect();
        let (_, o) = compile_cached(&graph(n), &[cpu(1)], &opts, Some(&st)).unwrap();
        (o, entries(&dir).into_iter().find(|p| !before.contains(p)))
    };
    let (_, a) = path_of(8);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (_, b) = path_of(9);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (_, c) = path_of(10);
    std::thread::sleep(std::time::Duration::from_millis(20));
    // Use the oldest again: the next store must evict the second one instead.
    let (_, hit) = compile_cached(&graph(8), &[cpu(1)], &opts, Some(&st)).unwrap();
    assert_eq!(hit, CacheOutcome::Hit);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (_, d) = path_of(11);
    let left = entries(&dir);
    println!("entry {one} bytes; left {left:?}");
    for (p, kept) in [(a, true), (b, false), (c, true), (d, true)] {
        let p = p.unwrap();
        assert_eq!(left.contains(&p), kept, "{}", p.display());
    }
    assert!(mine.exists(), "a file that is not an entry was deleted");
    std::fs::remove_dir_all(&dir).ok();
}
