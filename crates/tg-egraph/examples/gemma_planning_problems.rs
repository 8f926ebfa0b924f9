//! Writes Gemma 3 270M's one-device planning problems, the fixtures of
//! `crates/tg-extract/tests/gemma.rs` (`tests/fixtures/planning/`, see its README).
//!
//! For each sequence length the whole-sequence graph (`tg_models::gemma3::build_graph`, last
//! position's logits, tensor shapes and types from the GGUF file) is rewritten as the
//! compiler does (`tg_egraph::rewrite`, default options), and the planning problem its
//! extraction solves (`tg_egraph::planning_problem` over the default `KernelCost`) is
//! written as `gemma-<seq>.json` (`docs/planner.md` JSON).
//!
//! `cargo run --release -p tg-egraph --example gemma_planning_problems -- [--model GGUF] [--out DIR] [SEQ...]`
//! (model: `TG_MODEL`, else the default cache path; out: `tests/fixtures/planning`; lengths
//! 1, 6 and 128).

use std::cell::RefCell;
use std::path::PathBuf;
use tg_egraph::{planning_problem, rewrite_with, EgraphError, Extraction, Extractor, Id, PlannerExtractor, RewriteOptions, TEGraph};
use tg_models::gemma3::{build_graph, Gemma3Config, Logits};

/// The default extractor, keeping the planning problem it was given.
struct Capture {
    inner: PlannerExtractor<tg_egraph::KernelCost>,
    problem: RefCell<Option<tg_planner::Problem>>,
}

impl Extractor for Capture {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn extract(&self, egraph: &TEGraph, roots: &[Id]) -> Result<Extraction, EgraphError> {
        let (p, _) = planning_problem(egraph, roots, &self.inner.cost);
        *self.problem.borrow_mut() = Some(p);
        self.inner.extract(egraph, roots)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut model = std::env::var_os("TG_MODEL").map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join(tg_models::cache::DEFAULT_MODEL));
    let mut out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/planning");
    let mut seqs = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--model" => model = args.next().ok_or("--model needs a path")?.into(),
            "--out" => out = args.next().ok_or("--out needs a directory")?.into(),
            s => seqs.push(s.parse::<usize>().map_err(|e| format!("{s}: {e}"))?),
        }
    }
    if seqs.is_empty() {
        seqs = vec![1, 6, 128];
    }
    let f = tg_gguf::GgufFile::open(&model).map_err(|e| format!("{}: {e} (run scripts/fetch_model.py or set TG_MODEL)", model.display()))?;
    let cfg = Gemma3Config::from_gguf(&f)?;
    std::fs::create_dir_all(&out)?;
    for seq in seqs {
        let g = build_graph(&cfg, &f, seq, Logits::Last)?;
        let capture = Capture { inner: PlannerExtractor::default(), problem: RefCell::new(None) };
        let r = rewrite_with(&g, &RewriteOptions::default(), &capture)?;
        let p = capture.problem.into_inner().ok_or("the extractor was not called")?;
        let path = out.join(format!("gemma-{seq}.json"));
        std::fs::write(&path, serde_json::to_string(&p)?)?;
        let proof = r.report.extraction_proof.as_ref();
        println!(
            "{}: {} classes, {} nodes; saturation {:?}; planner makespan {} (bound {:?}, optimal {:?})",
            path.display(),
            p.classes.len(),
            p.nodes.len(),
            r.report.saturation.stop_reason,
            r.report.cost_out_search,
            proof.map(|p| p.lower_bound),
            proof.map(|p| p.optimal)
        );
    }
    Ok(())
}
