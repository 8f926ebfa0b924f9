//! Placement across devices: the `rewrite` stage's extraction by the planner over every
//! device of the compile ([`tg_egraph::PlacingExtractor`]), and what lowering needs from its
//! answer.
//!
//! Each device gets the kernel times measured on it (`tg profile --device NAME`); a device
//! the profile has not measured is offered only for ops pinned to it (the planner has no
//! basis to move work there). Copies between two devices are priced by the profile's
//! measured link, else by [`DEFAULT_LINK`] (said in the report).

use std::collections::HashMap;
use std::sync::Arc;

use tg_egraph::{BudgetReport, CostModel, Id, Pin, PlaceTarget, Placement, PlacingExtractor, RewriteOptions, RewriteReport, StateBudget};
use tg_ir::Graph;
use tg_runtime::Device;

use crate::cost::{MeasuredCost, Recording};
use crate::lower::NodePlacement;
use crate::{CompileError, CompileOptions, CostSource, Numerics, PlacementReport};

/// Link assumed between two devices when the profile has not measured it: 20 µs and 8 GB/s
/// (the order of a PCIe copy from pageable memory).
pub const DEFAULT_LINK: (u64, u64) = (20_000, 8_000);

/// The index of the device `name` names among `devices`: its exact name, or a kind
/// (`opencl`) for the first device of that kind.
pub(crate) fn resolve_device(devices: &[Arc<dyn Device>], name: &str) -> Result<usize, CompileError> {
    devices.iter().position(|d| d.name() == name).or_else(|| devices.iter().position(|d| d.kind().name() == name)).ok_or_else(|| {
        CompileError::Options(format!("--place names device '{name}', not among this compile's devices ({})", devices.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")))
    })
}

type Rewrite = (Graph, RewriteReport, Vec<Id>, BudgetReport, Option<(Placement, PlacementReport)>);

/// The `rewrite` stage over several devices: saturation as for one, then extraction by the
/// planner placing every op. `home_cost` is the first device's model (the compile's cost
/// source, already checked against it); `record` collects the kernel keys every device's
/// model was asked about.
pub(crate) fn rewrite_placed(
    graph: &Graph,
    devices: &[Arc<dyn Device>],
    opts: &CompileOptions,
    home_cost: &dyn CostModel,
    ropts: &RewriteOptions,
    record: Option<&mut Vec<tg_profile::ProfileKey>>,
) -> Result<Rewrite, CompileError> {
    let q8 = opts.numerics == Numerics::Q8Activations;
    let mut notes = Vec::new();
    // One cost model per device (the home device's is given).
    let mut models: Vec<Option<MeasuredCost>> = Vec::new();
    let mut offered = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        if i == 0 {
            models.push(None);
            offered.push(true);
            notes.push(format!("{}: {} (home: inputs arrive, outputs leave here)", d.name(), home_cost.name()));
            continue;
        }
        match &opts.cost {
            CostSource::Profile(p) if p.device_fingerprint(d.name()) == Some(d.fingerprint().as_str()) => {
                models.push(Some(MeasuredCost::new(p.clone(), d.name(), d.threads(), q8)));
                offered.push(true);
                notes.push(format!("{}: kernel times measured on it", d.name()));
            }
            _ => {
                models.push(None);
                offered.push(false);
                notes.push(format!("{}: no kernel times measured on it (run `tg profile --device {}`): only pinned ops go there", d.name(), d.name()));
            }
        }
    }
    let estimate = tg_egraph::KernelCost::default();
    let base: Vec<&dyn CostModel> =
        models.iter().enumerate().map(|(i, m)| if i == 0 { home_cost } else { m.as_ref().map_or(&estimate as &dyn CostModel, |m| m as &dyn CostModel) }).collect();
    let recordings: Option<Vec<Recording>> = record.is_some().then(|| {
        devices.iter().zip(&base).map(|(d, &inner)| Recording { inner, device: d.name(), threads: d.threads(), quantize_activations: q8, keys: Default::default() }).collect()
    });
    let costs: Vec<&dyn CostModel> = match &recordings {
        Some(r) => r.iter().map(|r| r as &dyn CostModel).collect(),
        None => base.clone(),
    };
    let mut links = Vec::new();
    for (a, da) in devices.iter().enumerate() {
        for (b, db) in devices.iter().enumerate() {
            if a == b {
                continue;
            }
            let measured = match &opts.cost {
                CostSource::Profile(p) => p.links().iter().find(|(k, _)| k.src == da.name() && k.dst == db.name()).map(|(_, l)| l.clone()),
                CostSource::Estimate => None,
            };
            let (latency, bytes_per_us) = match &measured {
                Some(l) => (l.latency_ns.ceil().max(0.0) as u64, ((l.bytes_per_ns * 1000.0).round() as u64).max(1)),
                None => DEFAULT_LINK,
            };
            notes.push(format!(
                "{} -> {}: {} µs + {:.2} GB/s{}",
                da.name(),
                db.name(),
                latency as f64 / 1000.0,
                bytes_per_us as f64 / 1000.0,
                if measured.is_some() { " (measured)" } else { " (assumed: link not measured)" }
            ));
            links.push(tg_planner::Link { from: a, to: b, latency, bytes_per_us });
        }
    }
    let mut pins = Vec::new();
    for p in &opts.placement.pins {
        pins.push(Pin { pattern: p.pattern.clone(), device: resolve_device(devices, &p.device)? });
    }
    let mut state_devices = std::collections::BTreeMap::new();
    for (name, dev) in &opts.placement.states {
        state_devices.insert(name.clone(), resolve_device(devices, dev)?);
    }
    let targets: Vec<PlaceTarget> = devices.iter().zip(&costs).zip(&offered).map(|((d, &cost), &offered)| PlaceTarget { device: d.clone(), cost, offered }).collect();
    let limits = tg_planner::Limits { time: opts.placement.budget, ..Default::default() };
    let ex = PlacingExtractor { targets, links, pins, state_devices, quantize_activations: q8, limits, placement: Default::default() };
    let quick = tg_egraph::GreedyDagExtractor::new(crate::cost::Lent(home_cost));
    let device_of = |c: Id| ex.placement.borrow().as_ref().and_then(|p| p.classes.get(&c).map(|p| p.device)).unwrap_or(0);
    let budgeted = StateBudget {
        inner: &ex,
        // Rounds before the planner's first answer price everything on the home device (no
        // placement yet, so every state counts there: conservative); then the planner's.
        quick: Some(&quick),
        budgets: vec![opts.cache_budget.map(|b| b as u64); devices.len()],
        device_of: Some(&device_of),
        cost: home_cost,
        report: Default::default(),
    };
    let (g, r, classes) = crate::rewrite::run_with(graph, ropts, &budgeted)?;
    let kept = budgeted.report.into_inner();
    let placement = ex.placement.into_inner().ok_or_else(|| CompileError::Invalid("the planner returned no placement".into()))?;
    if let (Some(out), Some(recs)) = (record, &recordings) {
        for rec in recs {
            out.extend(rec.keys.lock().map(|k| k.clone()).unwrap_or_default());
        }
    }
    let lower_bound_ns = r.extraction_proof.map_or(0, |p| p.lower_bound as u64);
    let rep =
        PlacementReport { devices: devices.iter().map(|d| (d.name().to_string(), 0, 0)).collect(), makespan_ns: placement.makespan, lower_bound_ns, notes, states: Vec::new() };
    Ok((g, r, classes, kept, Some((placement, rep))))
}

/// Per node of the extracted graph `g` (whose nodes belong to `classes`): the device and
/// start the planner gave its class, and the starts of its copies.
pub(crate) fn node_placement(g: &Graph, classes: &[Id], pl: &Placement) -> NodePlacement {
    let mut np = NodePlacement::single(g, 0);
    let mut node_of: HashMap<Id, usize> = HashMap::new();
    for (i, c) in classes.iter().enumerate() {
        node_of.entry(*c).or_insert(i);
        if let Some(p) = pl.classes.get(c) {
            np.device[i] = p.device;
            np.start[i] = Some(p.start);
        }
    }
    for (c, _, to, p) in &pl.copies {
        if let Some(&n) = node_of.get(c) {
            np.copies.insert((n, *to), p.start);
        }
    }
    // A state lives where its in-place update runs (the planner placed the update).
    for (i, n) in g.nodes.iter().enumerate() {
        if matches!(n.op, tg_ir::Op::StoreRows { .. }) {
            if let Some(&s) = n.inputs.first() {
                np.device[s] = np.device[i];
            }
        }
    }
    np
}
