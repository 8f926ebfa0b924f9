//! Graph → e-graph → graph.
//!
//! Without rules, extraction gives the original graph back (up to node order and merging
//! of structurally identical nodes) on random graphs; with all rules, the extracted graph
//! verifies and computes the same outputs (reference interpreter, random inputs).

mod common;
mod patterns;

use common::*;
use patterns::random_graph;
use std::collections::BTreeMap;
use tg_egraph::{canonical_outputs, load, rewrite, RewriteOptions, StopReason};
use tg_ir::Graph;

fn no_rules() -> RewriteOptions {
    let mut o = RewriteOptions::default();
    for f in ["layout", "simplify", "fusion"] {
        o.disable(f).unwrap();
    }
    o
}

/// Live nodes after merging structurally identical ones.
fn distinct_live_nodes(g: &Graph) -> usize {
    let mut interner = BTreeMap::new();
    let _ = canonical_outputs(g, &mut interner);
    interner.len()
}

fn check_lossless(what: &str, g: &Graph) {
    let out = rewrite(g, &no_rules()).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(out.report.saturation.stop_reason, StopReason::Saturated, "{what}");
    tg_ir::verify(&out.graph).unwrap();
    let mut interner = BTreeMap::new();
    let a = canonical_outputs(g, &mut interner);
    let b = canonical_outputs(&out.graph, &mut interner);
    assert_eq!(a, b, "{what}: the extracted graph computes its outputs differently");
    assert_eq!(out.graph.nodes.len(), distinct_live_nodes(g), "{what}: node count");
    assert_eq!(out.graph.nodes.len(), distinct_live_nodes(&out.graph), "{what}: duplicate nodes in the extraction");
}

#[test]
fn lossless_without_rules_on_random_graphs() {
    let base = base_seed("lossless_without_rules_on_random_graphs", 0xe9_9a);
    for i in 0..200 {
        let g = random_graph(&mut rng(base + i));
        check_lossless(&format!("seed {}", base + i), &g);
        // Loading alone: one class per distinct live node.
        let l = load(&g).unwrap();
        assert_eq!(l.egraph.number_of_classes(), distinct_live_nodes(&g), "seed {}", base + i);
    }
}

#[test]
fn all_rules_preserve_values_on_random_graphs() {
    let base = base_seed("all_rules_preserve_values_on_random_graphs", 0xa11);
    let mut fused: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..200 {
        let seed = base + i;
        let mut r = rng(seed);
        let g = random_graph(&mut r);
        let out = rewrite(&g, &RewriteOptions::default()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(out.report.saturation.stop_reason, StopReason::Saturated, "seed {seed}");
        tg_ir::verify(&out.graph).unwrap();
        assert!(out.report.cost_out <= out.report.cost_in * (1.0 + 1e-9), "seed {seed}: extraction made it costlier: {}", out.report);
        let (inputs, weights) = random_feeds(&g, &mut r, 1.5);
        assert_same_outputs(&format!("seed {seed}"), &g, &out.graph, &inputs, &weights, 1e-9);
        for (k, v) in &out.report.fused {
            *fused.entry(k.clone()).or_default() += v;
        }
    }
    eprintln!("fused ops extracted over the random graphs: {fused:?}");
    for op in ["rms_norm", "gelu_tanh", "gated_gelu", "softmax", "rope_neox", "attention"] {
        assert!(fused.get(op).copied().unwrap_or(0) > 0, "no {op} extracted in 200 random graphs: {fused:?}");
    }
}

#[test]
fn unknown_families_are_rejected() {
    let mut o = RewriteOptions::default();
    assert!(o.disable("fusion.nope").is_err());
    assert!(o.disable("fusion.rope").is_ok());
    assert!(o.disable("fuse-softmax").is_ok());
    let g = random_graph(&mut rng(7));
    let out = rewrite(&g, &o).unwrap();
    assert!(!out.report.saturation.applications.contains_key("fuse-rope-neox"));
    assert!(!out.report.saturation.applications.contains_key("fuse-softmax"));
    assert!(out.report.saturation.applications.contains_key("fuse-attention"));
}

#[test]
fn report_serializes_and_displays() {
    let g = random_graph(&mut rng(11));
    let out = rewrite(&g, &RewriteOptions::default()).unwrap();
    let j = serde_json::to_value(&out.report).unwrap();
    assert!(j["saturation"]["applications"].is_object());
    assert!(j["saturation"]["stop_reason"].is_string() || j["saturation"]["stop_reason"].is_object());
    let text = out.report.to_string();
    assert!(text.contains("saturation:") && text.contains("extraction"), "{text}");
}

#[test]
fn limits_stop_cleanly_and_extraction_stays_correct() {
    let base = base_seed("limits_stop_cleanly_and_extraction_stays_correct", 0x11b);
    for i in 0..40 {
        let seed = base + i;
        let mut r = rng(seed);
        let g = random_graph(&mut r);
        let (inputs, weights) = random_feeds(&g, &mut r, 1.5);
        for (iters, nodes) in [(1, 200_000), (30, 1)] {
            let o = RewriteOptions { iter_limit: iters, node_limit: nodes, ..RewriteOptions::default() };
            let out = rewrite(&g, &o).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let s = &out.report.saturation.stop_reason;
            assert!(matches!(s, StopReason::Saturated | StopReason::IterationLimit(_) | StopReason::NodeLimit(_)), "seed {seed}: {s:?}");
            if nodes == 1 {
                assert!(matches!(s, StopReason::NodeLimit(_)), "seed {seed}: {s:?}");
            }
            assert_same_outputs(&format!("seed {seed}, limits {iters}/{nodes}"), &g, &out.graph, &inputs, &weights, 1e-9);
        }
    }
}
