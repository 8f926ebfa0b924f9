//! Kernel costs for planning: the built-in estimate, or times measured on this machine
//! (`tg profile`, [`tg_profile::Profile`]).
//!
//! [`MeasuredCost`] answers the planner's question "what does this e-node cost?" by naming
//! the kernel and operand layouts lowering would give the node (the same choice as the
//! `lower` stage for contiguous operands) and asking the profile: the measurement of that
//! exact key when there is one, otherwise the profile's fitted fallback. `planning_keys`
//! wraps whichever model the compile uses to record every key it is asked about, which is
//! how `tg profile` knows what to measure.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tg_egraph::CostModel;
use tg_ir::{DType, Op};
use tg_profile::{Fingerprint, Profile, ProfileError, ProfileKey, Roofline};
use tg_runtime::{Kernel, Layout, Operand};

/// Where the planner's kernel times come from.
#[derive(Debug, Clone, Default)]
pub enum CostSource {
    /// The built-in estimate ([`tg_egraph::KernelCost`]: launch + bytes + flops).
    #[default]
    Estimate,
    /// A profile measured on this machine (fallbacks for what it lacks).
    Profile(Arc<Profile>),
}

impl CostSource {
    /// The profile of this machine if one exists at the default path
    /// ([`tg_profile::default_path`]), else the estimate. `TG_PROFILE=off` forces the estimate;
    /// `TG_PROFILE=PATH` names the file. A profile that exists but was measured under another
    /// fingerprint (other machine, kernels or build) is not used: the second value says why,
    /// for the caller to show.
    pub fn for_this_machine() -> (CostSource, Option<String>) {
        let current = Fingerprint::current();
        let path = match std::env::var("TG_PROFILE") {
            Ok(v) if v == "off" => return (CostSource::Estimate, None),
            Ok(v) if !v.is_empty() => PathBuf::from(v),
            _ => tg_profile::default_path(&current),
        };
        if !path.exists() {
            // A profile of an older kernel revision or another build has another file name:
            // say so rather than fall back silently.
            let stale = tg_profile::stale_profiles(&tg_profile::default_dir(), &current);
            let why = stale.first().map(|(p, diff)| format!("{} was measured under another fingerprint ({}); run `tg profile` again", p.display(), diff.join("; ")));
            return (CostSource::Estimate, why);
        }
        // Loaded once per file version: a process that compiles many graphs (Python) pays for
        // reading the profile once, and still sees a profile `tg profile` has since extended.
        static LAST: Mutex<Option<LoadedProfile>> = Mutex::new(None);
        let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        if let Ok(last) = LAST.lock() {
            if let Some((p, t, prof)) = last.as_ref() {
                if *p == path && *t == mtime && mtime.is_some() && prof.fingerprint() == &current {
                    return (CostSource::Profile(prof.clone()), None);
                }
            }
        }
        match Profile::load(&path, &current) {
            Ok(p) => {
                let p = Arc::new(p);
                if let Ok(mut last) = LAST.lock() {
                    *last = Some((path, mtime, p.clone()));
                }
                (CostSource::Profile(p), None)
            }
            Err(e) => (CostSource::Estimate, Some(format!("not using the kernel profile: {e}"))),
        }
    }

    /// The profile at `path`, checked against `current`.
    pub fn load(path: &Path, current: &Fingerprint) -> Result<CostSource, ProfileError> {
        Ok(CostSource::Profile(Arc::new(Profile::load(path, current)?)))
    }

    /// Short description for reports.
    pub fn describe(&self) -> String {
        match self {
            CostSource::Estimate => "kernel cost estimate (no profile)".into(),
            CostSource::Profile(p) => format!("measured profile {} ({} kernels measured)", p.fingerprint().id(), p.len()),
        }
    }
}

/// The last profile [`CostSource::for_this_machine`] read: its path, modification time and
/// contents.
type LoadedProfile = (PathBuf, Option<std::time::SystemTime>, Arc<Profile>);

/// Nominal cost of a view (ns), as in the estimate: reshapes, expands and slices are free
/// (a permute is costed as the copy its reader usually needs, see [`key_of`]).
const VIEW_NS: f64 = 1.0;

/// Kernel times from a measured profile, for one device and thread count.
pub struct MeasuredCost {
    profile: Arc<Profile>,
    device: String,
    threads: usize,
    quantize_activations: bool,
}

impl MeasuredCost {
    /// Costs from `profile` for kernels on `device` with `threads` workers.
    pub fn new(profile: Arc<Profile>, device: &str, threads: usize, quantize_activations: bool) -> MeasuredCost {
        MeasuredCost { profile, device: device.to_string(), threads, quantize_activations }
    }
}

/// Kernel times of a device known only by its roofline (measured on its first use, before
/// `tg profile --device` has measured its kernels, [`crate::FirstUse`]): each e-node costs
/// `launch + bytes / bandwidth + flops / peak` of the kernel lowering gives it
/// ([`tg_runtime::work`]), the built-in estimate's formula with the device's measured figures
/// instead of the built-in constants. It is [`MeasuredCost`] over a profile holding only that
/// roofline (every key then takes the profile's roofline fallback, `Source::Roofline`), so
/// kernels, views and permutes are named and priced as for a measured device, and the
/// formula is the profile's, not a copy.
pub struct RooflineCost {
    inner: MeasuredCost,
    roofline: Roofline,
}

impl RooflineCost {
    /// Costs of kernels on `roofline.device` with `roofline.threads` workers.
    pub fn new(roofline: Roofline, quantize_activations: bool) -> RooflineCost {
        let mut p = Profile::new(Fingerprint::current());
        p.set_roofline(roofline.clone());
        let inner = MeasuredCost::new(Arc::new(p), &roofline.device, roofline.threads, quantize_activations);
        RooflineCost { inner, roofline }
    }

    /// The roofline it prices with.
    pub fn roofline(&self) -> &Roofline {
        &self.roofline
    }
}

impl CostModel for RooflineCost {
    fn name(&self) -> String {
        format!("roofline of {} measured on first use", self.roofline.device)
    }
    fn node_cost(&self, op: &Op, out: (&[usize], DType), ins: &[Operand]) -> f64 {
        self.inner.node_cost(op, out, ins)
    }
}

/// Any cost model, remembering the kernel key of every e-node it is asked about (what
/// `tg profile` measures).
pub(crate) struct Recording<'a> {
    pub inner: &'a dyn CostModel,
    pub device: &'a str,
    pub threads: usize,
    pub quantize_activations: bool,
    pub keys: Mutex<Vec<ProfileKey>>,
}

impl CostModel for Recording<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn node_cost(&self, op: &Op, out: (&[usize], DType), ins: &[Operand]) -> f64 {
        if let Some(k) = key_of(op, out, ins, self.device, self.threads, self.quantize_activations) {
            if let Ok(mut v) = self.keys.lock() {
                v.push(k);
            }
        }
        self.inner.node_cost(op, out, ins)
    }
}

/// A cost model lent to an extractor (which owns its model), so the caller keeps it.
pub(crate) struct Lent<'a>(pub &'a dyn CostModel);

impl CostModel for Lent<'_> {
    fn name(&self) -> String {
        self.0.name()
    }
    fn node_cost(&self, op: &Op, out: (&[usize], DType), ins: &[Operand]) -> f64 {
        self.0.node_cost(op, out, ins)
    }
}

impl CostModel for MeasuredCost {
    fn name(&self) -> String {
        "measured-profile".into()
    }

    fn node_cost(&self, op: &Op, out: (&[usize], DType), ins: &[Operand]) -> f64 {
        match op {
            Op::Input { .. } | Op::Weight { .. } | Op::State { .. } => return 0.0,
            Op::Reshape | Op::Expand | Op::Slice { .. } => return VIEW_NS,
            _ => {}
        }
        let Some(key) = key_of(op, out, ins, &self.device, self.threads, self.quantize_activations) else { return VIEW_NS };
        let ns = self.profile.predict(&key).ns;
        if ns.is_finite() {
            ns.max(1.0)
        } else {
            f64::MAX / 1e6
        }
    }
}

/// The profile key of the kernel lowering gives `op` on contiguous operands `ins`, writing
/// `out` (the choice is [`tg_runtime::select`], the one lowering makes); `None` for ops that
/// are not kernels (sources, views).
pub fn key_of(op: &Op, (os, od): (&[usize], DType), ins: &[Operand], device: &str, threads: usize, quantize_activations: bool) -> Option<ProfileKey> {
    let out = Layout::contiguous(os, od);
    let (kernel, inputs) = match op {
        // A permute is a view, but almost every reader (matmuls, fused kernels) needs it
        // contiguous, and lowering then copies it: cost it as that copy, so that a plan with
        // transposes is not measured as free.
        Op::Permute { perm } => {
            let o = ins.first()?;
            let src = Layout::contiguous(o.shape, o.dtype);
            let view = Layout { shape: perm.iter().map(|&p| src.shape[p]).collect(), strides: perm.iter().map(|&p| src.strides[p]).collect(), offset: 0, dtype: o.dtype };
            (Kernel::Copy, vec![view])
        }
        _ => tg_runtime::select(op, ins, os, quantize_activations)?,
    };
    Some(ProfileKey::new(kernel, inputs, out, device, threads))
}
