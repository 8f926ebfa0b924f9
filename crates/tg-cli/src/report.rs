//! `--report FILE.html` on the commands that run a model: the plan the run spent its time in,
//! with the runtime's measured step times next to the prediction (`tg_report`).

use std::path::Path;

/// Measured times of a profiled run: spans with several devices, else step durations.
pub fn measured(plan: &tg_runtime::Plan, step_times: Option<&[u64]>, spans: Option<&[tg_runtime::Span]>) -> Option<tg_report::Measured> {
    match spans {
        Some(spans) if plan.devices.len() > 1 => {
            let mut by_step = vec![(0, 0); plan.steps.len()];
            for s in spans {
                if let Some(e) = by_step.get_mut(s.step) {
                    *e = (s.start_ns, s.end_ns);
                }
            }
            Some(tg_report::Measured::Spans(by_step))
        }
        _ => step_times.map(|t| tg_report::Measured::Durations(t.to_vec())),
    }
}

/// Writes the report of the one-token plan generation ran (profiling must have been on).
pub fn generation(m: &tg_models::LanguageModel, path: &Path) -> Result<(), String> {
    let v = m.generation_plan().ok_or("--report: no incremental plan ran (the report shows the one-token plan generation runs; drop --recompute)")?;
    let title = format!("{} ({} layers): one generated token per run, measured, on {}", m.arch().kind(), m.arch().n_layer(), v.plan.devices.join(" + "));
    write(v, title, path)
}

/// Writes the report of the plan EmbeddingGemma ran last (profiling must have been on).
pub fn embedding(m: &tg_models::EmbeddingGemma, path: &Path) -> Result<(), String> {
    let v = m.last_plan().ok_or("--report: no plan ran")?;
    let title = format!("EmbeddingGemma: the last batch's plan, measured, on {}", v.plan.devices.join(" + "));
    write(v, title, path)
}

fn write(v: tg_models::PlanView<'_>, title: String, path: &Path) -> Result<(), String> {
    let input = tg_report::ReportInput {
        title,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        plan: v.plan,
        report: v.report,
        threads: v.threads.clone(),
        measured: measured(v.plan, v.step_times, v.spans),
        derivation: v.derivation.map(str::to_string),
    };
    let bytes = tg_report::write(&input, path).map_err(|e| e.to_string())?;
    eprintln!("report: {} ({} KiB)", path.display(), bytes / 1024);
    Ok(())
}
