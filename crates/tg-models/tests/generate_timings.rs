//! `generate_tokens`' timings on Gemma 3 270M (`TG_MODEL`, see `common::model_path`):
//! `compile_ms` counts the plans a generation compiles, on the default incremental path
//! (each prompt length's plan, the one-token plan and the derivations behind them) as with
//! recomputation, and nothing once every plan is cached.

mod common;

use common::*;
use std::time::Instant;
use tg_models::{LanguageModel, SamplingParams};

#[test]
fn compile_ms_counts_the_incremental_plans() {
    let Some(path) = model_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    // Compile in this process instead of loading plans another run stored.
    m.set_plan_store(None);
    assert!(m.incremental(), "incremental generation is the default");
    let p = SamplingParams::default();
    let ids = m.tokenizer.encode("The capital of France is", true, true);

    // First generation: the prompt's plan, the one-token derivation choosing the states,
    // the one-token plan.
    let (out, t) = m.generate_tokens(&ids, 3, &p, |_| true).unwrap();
    eprintln!("first: {} prompt tokens, {out:?}: {t:?}", ids.len());
    assert!(t.compile_ms > 0.0, "compiling the incremental plans took no time: {t:?}");
    assert!(t.compile_ms <= t.prompt_ms + t.generate_ms, "{t:?}");
    // What deriving those two graphs alone takes, measured again now, is part of it.
    let cap = m.session_info().capacity;
    let t0 = Instant::now();
    m.incremental_graph(ids.len(), cap).unwrap();
    m.incremental_graph(1, cap).unwrap();
    let derive_ms = t0.elapsed().as_secs_f64() * 1e3;
    eprintln!("deriving the prompt's and the one-token graph again: {derive_ms:.1} ms");
    assert!(t.compile_ms > 0.5 * derive_ms, "compile_ms {:.1} leaves out the derivations ({derive_ms:.1} ms)", t.compile_ms);

    // The same prompt again: its prefix is kept, one one-token run per token, all cached.
    let (out2, t2) = m.generate_tokens(&ids, 3, &p, |_| true).unwrap();
    eprintln!("again: {t2:?}");
    assert_eq!(out2, out);
    assert_eq!(t2.compile_ms, 0.0, "every plan was cached: {t2:?}");

    // A new prompt of another length: only its prefill plan is new.
    m.reset_session();
    let ids3 = m.tokenizer.encode("Water boils at a temperature of", true, true);
    assert_ne!(ids3.len(), ids.len());
    let (_, t3) = m.generate_tokens(&ids3, 2, &p, |_| true).unwrap();
    eprintln!("new prompt of {} tokens: {t3:?}", ids3.len());
    assert!(t3.compile_ms > 0.0 && t3.compile_ms <= t3.prompt_ms, "{t3:?}");

    // Recomputing the whole sequence per token compiles a plan per length.
    m.set_incremental(false);
    let (out4, t4) = m.generate_tokens(&ids, 2, &p, |_| true).unwrap();
    eprintln!("recomputing: {t4:?}");
    assert_eq!(out4[..], out[..2]);
    assert!(t4.compile_ms > 0.0 && t4.compile_ms <= t4.prompt_ms + t4.generate_ms, "{t4:?}");
}
