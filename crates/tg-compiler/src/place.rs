//! Placement across devices: the `rewrite` stage's extraction by the planner over every
//! device of the compile ([`tg_egraph::PlacingExtractor`]), and what lowering needs from its
//! answer.
//!
//! Each device gets the kernel times measured on it (`tg profile --device NAME`). A device
//! the profile has not measured is, with [`FirstUse::Measure`], priced by its roofline
//! measured on first use ([`RooflineCost`], [`tg_profile::first_use`]); otherwise (or when
//! that measurement fails) it is offered only for ops pinned to it (the planner has no basis
//! to move work there). Copies between two devices are priced by the profile's measured
//! link (between home and a device measured on first use, by the links measured then), else
//! by [`DEFAULT_LINK`] (said in the report).

use std::collections::HashMap;
use std::sync::Arc;

use tg_egraph::{BudgetReport, CostModel, Id, Pin, PlaceTarget, Placement, PlacingExtractor, RewriteOptions, RewriteReport, StateBudget};
use tg_ir::Graph;
use tg_runtime::Device;

use crate::cost::{MeasuredCost, Recording, RooflineCost};
use crate::lower::NodePlacement;
use crate::{CompileError, CompileOptions, CostSource, FirstUse, Numerics, PlacementReport};

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

/// The rewritten graph, its report and classes, the kept states, the placement and its
/// report, and the profile the plan's timeline is to be simulated with when first-use
/// measurements joined the cost source's (`None`: the cost source's own).
type Rewrite = (Graph, RewriteReport, Vec<Id>, BudgetReport, Option<(Placement, PlacementReport)>, Option<tg_profile::Profile>);

/// True when the cost source has kernel times measured on `d` under its current fingerprint.
fn measured_on(opts: &CompileOptions, d: &dyn Device) -> bool {
    matches!(&opts.cost, CostSource::Profile(p) if p.device_fingerprint(d.name()) == Some(d.fingerprint().as_str()))
}

/// Per device (home first): its first-use measurement when [`FirstUse::Measure`] applies to
/// it (a device other than home that the cost source has no kernel times for), measured or
/// read from the cache at most once per process; `None` where it does not apply.
pub(crate) fn first_use_records(devices: &[Arc<dyn Device>], opts: &CompileOptions) -> Vec<Option<Result<Arc<tg_profile::FirstUseRecord>, String>>> {
    let fu = opts.placement.first_use.options();
    devices
        .iter()
        .enumerate()
        .map(|(i, d)| match &fu {
            Some(fu) if i > 0 && devices.len() > 1 && !measured_on(opts, &**d) => Some(tg_profile::first_use(&*devices[0], &**d, fu)),
            _ => None,
        })
        .collect()
}

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
    let first = first_use_records(devices, opts);
    // One cost model per device (the home device's is given).
    let mut models: Vec<Option<Box<dyn CostModel>>> = Vec::new();
    let mut offered = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        if i == 0 {
            models.push(None);
            offered.push(true);
            notes.push(format!("{}: {} (home: inputs arrive, outputs leave here)", d.name(), home_cost.name()));
            continue;
        }
        match (&opts.cost, &first[i]) {
            (CostSource::Profile(p), _) if measured_on(opts, &**d) => {
                models.push(Some(Box::new(MeasuredCost::new(p.clone(), d.name(), d.threads(), q8))));
                offered.push(true);
                notes.push(format!("{}: kernel times measured on it", d.name()));
            }
            (_, Some(Ok(f))) => {
                models.push(Some(Box::new(RooflineCost::new(f.roofline.clone(), q8))));
                offered.push(true);
                let r = &f.roofline;
                notes.push(format!(
                    "{}: roofline measured on first use (no kernel times): launch {:.1} µs, {:.1} GB/s, {:.1} GFLOP/s (run `tg profile --device {}` for kernel times)",
                    d.name(),
                    r.launch_ns / 1e3,
                    r.bytes_per_ns,
                    r.flops_per_ns,
                    d.name()
                ));
            }
            (_, Some(Err(e))) => {
                models.push(None);
                offered.push(false);
                notes.push(format!("{}: no kernel times measured on it, and measuring its roofline on first use failed ({e}): only pinned ops go there", d.name()));
            }
            (_, None) => {
                models.push(None);
                offered.push(false);
                let why = if opts.placement.first_use == FirstUse::Off { " (first-use measurement off)" } else { "" };
                notes.push(format!("{}: no kernel times measured on it (run `tg profile --device {}`){why}: only pinned ops go there", d.name(), d.name()));
            }
        }
    }
    let estimate = tg_egraph::KernelCost::default();
    let base: Vec<&dyn CostModel> = models.iter().enumerate().map(|(i, m)| if i == 0 { home_cost } else { m.as_deref().unwrap_or(&estimate as &dyn CostModel) }).collect();
    let recordings: Option<Vec<Recording>> = record.is_some().then(|| {
        devices.iter().zip(&base).map(|(d, &inner)| Recording { inner, device: d.name(), threads: d.threads(), quantize_activations: q8, keys: Default::default() }).collect()
    });
    let costs: Vec<&dyn CostModel> = match &recordings {
        Some(r) => r.iter().map(|r| r as &dyn CostModel).collect(),
        None => base.clone(),
    };
    // The link from device `a` to device `b` measured on first use, when one is home and the
    // other was measured on first use.
    let first_link = |a: usize, b: usize| -> Option<tg_profile::Link> {
        match (a, b) {
            (0, b) => first.get(b)?.as_ref()?.as_ref().ok().map(|f| f.to_device.clone()),
            (a, 0) => first.get(a)?.as_ref()?.as_ref().ok().map(|f| f.from_device.clone()),
            _ => None,
        }
    };
    let mut links = Vec::new();
    for (a, da) in devices.iter().enumerate() {
        for (b, db) in devices.iter().enumerate() {
            if a == b {
                continue;
            }
            let profiled = match &opts.cost {
                CostSource::Profile(p) => p.links().iter().find(|(k, _)| k.src == da.name() && k.dst == db.name()).map(|(_, l)| l.clone()),
                CostSource::Estimate => None,
            };
            // A first-use device has no measurements in the profile under its current
            // fingerprint, so a link the profile has for its name is of another device.
            let (measured, how) = match (first_link(a, b), profiled) {
                (Some(l), _) => (Some(l), " (measured on first use)"),
                (None, Some(l)) => (Some(l), " (measured)"),
                (None, None) => (None, " (assumed: link not measured)"),
            };
            let (latency, bytes_per_us) = match &measured {
                Some(l) => (l.latency_ns.ceil().max(0.0) as u64, ((l.bytes_per_ns * 1000.0).round() as u64).max(1)),
                None => DEFAULT_LINK,
            };
            notes.push(format!("{} -> {}: {} µs + {:.2} GB/s{how}", da.name(), db.name(), latency as f64 / 1000.0, bytes_per_us as f64 / 1000.0));
            links.push(tg_planner::Link { from: a, to: b, latency, bytes_per_us });
        }
    }
    // The finished plan's timeline prices a first-use device by its roofline and its links
    // as measured: the cost source's profile (or an empty one) with those added.
    let timeline_profile = first.iter().any(|f| matches!(f, Some(Ok(_)))).then(|| {
        let mut p = match &opts.cost {
            CostSource::Profile(p) => (**p).clone(),
            CostSource::Estimate => tg_profile::Profile::new(tg_profile::Fingerprint::current()),
        };
        for f in first.iter().flatten().flatten() {
            // Measurements under this name of another device or build go first.
            p.bind_device(&f.device, &f.fingerprint);
            p.set_roofline(f.roofline.clone());
            p.set_link(tg_profile::LinkKey { src: f.home.clone(), dst: f.device.clone() }, f.to_device.clone());
            p.set_link(tg_profile::LinkKey { src: f.device.clone(), dst: f.home.clone() }, f.from_device.clone());
        }
        p
    });
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
    Ok((g, r, classes, kept, Some((placement, rep)), timeline_profile))
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
