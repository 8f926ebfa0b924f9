//! Generation through the incremental path, for every decoder architecture: the pure
//! whole-sequence graph ([`crate::DecoderArch::graph`]) is derived by [`tg_compiler::incremental`] into plans
//! that take only the appended tokens; the values they keep between runs (the KV cache,
//! as the derivation chooses it) live in one [`StateSet`] per model.
//!
//! The session remembers which tokens the kept rows belong to. A new prompt that shares a
//! prefix with them is run from the end of the shared prefix; everything after it is
//! simply overwritten (rows past the current length are never read, see the derivation's
//! causality check). Capacities grow in steps (`384·2^i` rows: no power of two, so the
//! sequence axis never has the extent of a feature axis); growing copies the kept
//! rows into the larger states and compiles plans for the new capacity.

use crate::decoder::LanguageModel;
use crate::gemma3::Logits;
use crate::plans::PlanCache;
use crate::ModelError;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;
use tg_compiler::incremental::{derive, CachedValue, Incremental, IncrementalSpec, POS_INPUT};
use tg_ir::HostTensor;
use tg_runtime::{Device, StateSet};

/// Derives `model`'s run of `k` appended tokens at capacity `cap`, keeping `states`; with
/// `None`, every value that may be kept or recomputed is offered both ways, for the
/// compiler's planner to choose under measured kernel times and the cache budget.
fn derive_step(model: &LanguageModel, k: usize, cap: usize, states: Option<BTreeSet<String>>) -> Result<Incremental, ModelError> {
    let full = model.graph(cap, Logits::Last)?;
    // The cache budget is the compiler's (`PlanCache::set_cache_budget`); a given state set
    // was chosen under it.
    let spec = IncrementalSpec { input: "tokens".into(), new_rows: k, budget: None, alternatives: states.is_none(), states };
    Ok(derive(&full, &spec, &tg_compiler::KernelCost::default())?)
}

/// The kept states of a compiled plan (names).
fn plan_states(plan: &tg_runtime::Plan) -> BTreeSet<String> {
    plan.states().map(|(name, _)| name.to_string()).collect()
}

/// Smallest capacity step.
const BASE_CAPACITY: usize = 384;

/// What the session holds, for reports.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SessionInfo {
    /// Tokens whose rows the states hold.
    pub tokens: usize,
    /// Rows the states have room for.
    pub capacity: usize,
    /// Kept values (names, shapes, bytes).
    pub states: Vec<CachedValue>,
    /// Bytes of the states.
    pub bytes: usize,
    /// Tokens of the last prompt taken from the states instead of being recomputed.
    pub reused: usize,
    /// The derivation of the last incremental plan compiled.
    pub derivation: String,
}

/// The incremental path's plans and kept states.
pub(crate) struct Session {
    /// Plans by (new rows per run, capacity).
    pub(crate) plans: PlanCache<(usize, usize)>,
    states: StateSet,
    /// Tokens whose rows `0..len` the states hold.
    tokens: Vec<u32>,
    capacity: usize,
    /// The states every plan of this model keeps (chosen once, by the planner compiling
    /// the one-token plan).
    names: Option<BTreeSet<String>>,
    /// Their layouts at the current capacity.
    layout: Vec<CachedValue>,
    /// The one-token derivation at a new capacity, kept for compiling that plan.
    one_token: Option<Incremental>,
    /// Generation goes through this path.
    pub(crate) enabled: bool,
    pub(crate) last_compiled_incremental: bool,
    /// Milliseconds spent deriving and compiling the incremental plans (the one-token
    /// derivation that chooses the states included), summed over the model's life.
    pub(crate) compile_ms: f64,
    reused: usize,
    derivation: String,
}

impl Session {
    pub(crate) fn new(devices: Vec<Arc<dyn Device>>) -> Session {
        Session {
            plans: PlanCache::new(devices),
            states: StateSet::new(),
            tokens: Vec::new(),
            capacity: 0,
            names: None,
            layout: Vec::new(),
            one_token: None,
            enabled: true,
            last_compiled_incremental: false,
            compile_ms: 0.0,
            reused: 0,
            derivation: String::new(),
        }
    }
}

impl LanguageModel {
    /// Whether generation runs incrementally (the default: the prompt once, then one token
    /// per run, with what the derivation keeps) or recomputes the whole sequence per token.
    pub fn set_incremental(&mut self, on: bool) {
        self.session.enabled = on;
    }

    /// True when generation runs incrementally.
    pub fn incremental(&self) -> bool {
        self.session.enabled
    }

    /// Limits the bytes the kept states may take on each device; the planner then keeps less
    /// and recomputes more (`None`: no limit). Forgets the session.
    pub fn set_cache_budget(&mut self, bytes: Option<usize>) {
        self.session.plans.set_cache_budget(bytes);
        self.forget_states();
    }

    /// Forgets the session's tokens: the next prompt shares no prefix. The states stay
    /// allocated and the plans compiled (their rows are simply overwritten).
    pub fn reset_session(&mut self) {
        self.session.tokens.clear();
        self.session.reused = 0;
    }

    /// Drops the kept states, their choice and the incremental plans.
    fn forget_states(&mut self) {
        let s = &mut self.session;
        s.states.clear();
        s.tokens.clear();
        s.names = None;
        s.layout.clear();
        s.one_token = None;
        s.capacity = 0;
        s.plans.clear();
        s.plans.unpin_states();
    }

    /// The one-token plan generation runs at the session's capacity (`None` before the
    /// first prompt), how it was made, the derivation's summary, and — with
    /// [`LanguageModel::set_profiling`] on — its last run's step times.
    pub fn generation_plan(&self) -> Option<crate::PlanView<'_>> {
        let mut v = self.session.plans.view(&(1, self.session.capacity))?;
        v.derivation = Some(&self.session.derivation);
        Some(v)
    }

    /// What the session holds.
    pub fn session_info(&self) -> SessionInfo {
        let s = &self.session;
        SessionInfo { tokens: s.tokens.len(), capacity: s.capacity, states: s.layout.clone(), bytes: s.states.bytes(), reused: s.reused, derivation: s.derivation.clone() }
    }

    /// The capacity step that holds `len` tokens. Clamped to the context length, a step
    /// may land on the extent of a weight axis (a context of 2048 beside `n_ff = 2048`), which
    /// the derivation refuses (it could not tell the sequence axis from that one): it then
    /// takes the largest smaller capacity that is no weight extent and still holds `len`.
    fn capacity_for(&self, len: usize) -> usize {
        let mut c = BASE_CAPACITY;
        while c < len {
            c *= 2;
        }
        let mut c = c.min(self.context_length().max(len));
        let extents: BTreeSet<usize> = self.arch().expected_tensors().into_iter().flat_map(|(_, shape)| shape).collect();
        while extents.contains(&c) && c > len {
            c -= 1;
        }
        c
    }

    /// The derived graph of a run appending `k` tokens to a sequence of capacity `cap`, with
    /// every value that may be kept offered both ways (what the planner chooses from when
    /// generation compiles its first plan; `tg plan --incremental` and `tg profile` show and
    /// measure it).
    pub fn incremental_graph(&self, k: usize, cap: usize) -> Result<Incremental, ModelError> {
        derive_step(self, k, cap, None)
    }

    /// Chooses the kept states (once per model and budget: the planner, compiling the
    /// one-token plan) and grows them to `cap`.
    fn ensure_capacity(&mut self, cap: usize) -> Result<(), ModelError> {
        if self.session.names.is_some() && self.session.capacity == cap {
            return Ok(());
        }
        let t = Instant::now();
        let one = derive_step(self, 1, cap, self.session.names.clone())?;
        self.session.compile_ms += t.elapsed().as_secs_f64() * 1e3;
        let old_cap = self.session.capacity;
        let weights = self.weights.clone();
        let s = &mut self.session;
        // Plans of another capacity are of no use any more.
        s.plans.clear();
        if s.names.is_some() && old_cap > 0 {
            for v in &one.states {
                let outer: usize = v.shape[..v.axis].iter().product();
                let row_bytes = v.bytes / (outer * v.shape[v.axis]).max(1);
                s.states.resize_rows(&v.name, outer, old_cap, cap, row_bytes)?;
            }
            s.names = Some(one.state_names());
            s.layout = one.states.clone();
            s.derivation = one.summary();
            s.one_token = Some(one);
        } else {
            s.states.clear();
            s.tokens.clear();
            s.plans.unpin_states();
            // The planner chooses: compile the one-token plan now, and keep what it keeps.
            let t = Instant::now();
            let (summary, candidates) = (one.summary(), one.candidates.clone());
            let exe = s.plans.get_or_compile((1, cap), weights, || Ok(one.graph))?;
            let names = plan_states(exe.plan());
            let pins = state_devices(exe.plan());
            s.compile_ms += t.elapsed().as_secs_f64() * 1e3;
            s.plans.pin_states(pins);
            s.layout = candidates.into_iter().filter(|c| names.contains(&c.name)).collect();
            s.names = Some(names);
            s.derivation = summary;
            s.one_token = None;
            s.last_compiled_incremental = true;
        }
        s.capacity = cap;
        Ok(())
    }

    /// Runs `new` tokens appended to the session's tokens and returns the last row's logits.
    pub fn extend(&mut self, new: &[u32]) -> Result<Vec<f32>, ModelError> {
        if new.is_empty() {
            return Err(ModelError::Request("no tokens to append".into()));
        }
        let pos = self.session.tokens.len();
        let mut all = self.session.tokens.clone();
        all.extend_from_slice(new);
        self.check_tokens(&all)?;
        if self.session.names.is_none() || all.len() > self.session.capacity {
            self.ensure_capacity(self.capacity_for(all.len()))?;
        }
        let (k, cap) = (new.len(), self.session.capacity);
        let compiled_before = self.session.plans.contains(&(k, cap));
        let mut summary = None;
        let derived = match (compiled_before, self.session.one_token.take()) {
            (true, kept) => {
                self.session.one_token = kept;
                None
            }
            // The derivation that chose the states is this plan's (same k, capacity, states).
            (false, Some(one)) if k == 1 => Some(one),
            (false, kept) => {
                self.session.one_token = kept;
                let t = Instant::now();
                let d = derive_step(self, k, cap, self.session.names.clone())?;
                self.session.compile_ms += t.elapsed().as_secs_f64() * 1e3;
                Some(d)
            }
        };
        let s = &mut self.session;
        let t = Instant::now();
        let exe = s.plans.get_or_compile((k, cap), self.weights.clone(), || {
            let inc = derived.ok_or_else(|| ModelError::Request("internal: no derived graph for an uncached plan".into()))?;
            summary = Some(inc.summary());
            Ok(inc.graph)
        })?;
        if !compiled_before {
            s.compile_ms += t.elapsed().as_secs_f64() * 1e3;
        }
        let pins = if compiled_before { Vec::new() } else { state_devices(exe.plan()) };
        s.plans.pin_states(pins);
        let Some(exe) = s.plans.get_mut(&(k, cap)) else { return Err(ModelError::Request("internal: the plan just compiled is not cached".into())) };
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), HostTensor::i32(&[k], new.iter().map(|&t| t as i32).collect())?);
        inputs.insert(POS_INPUT.to_string(), HostTensor::i32(&[1], vec![pos as i32])?);
        let mut out = exe.run_with_states(&inputs, &mut s.states)?;
        if let Some(sm) = summary {
            s.derivation = sm;
        }
        if !compiled_before {
            s.last_compiled_incremental = true;
        }
        s.tokens = all;
        let t = out.remove("logits").ok_or_else(|| ModelError::Request("plan produced no logits".into()))?;
        match t.data {
            tg_ir::HostData::F32(v) => Ok(v),
            _ => Err(ModelError::Request("logits are not f32".into())),
        }
    }

    /// Starts a sequence with `prompt` and returns its last row's logits: the prefix it
    /// shares with the session's tokens is taken from the kept states, the rest is run in
    /// one plan of exactly that many rows.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>, ModelError> {
        self.check_tokens(prompt)?;
        let s = &mut self.session;
        let mut common = s.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        // At least one row must run to produce logits.
        common = common.min(prompt.len() - 1);
        s.tokens.truncate(common);
        s.reused = common;
        self.extend(&prompt[common..])
    }
}

/// The device of every kept state of a plan over several devices (none for one device).
fn state_devices(plan: &tg_runtime::Plan) -> Vec<(String, String)> {
    if plan.devices.len() < 2 {
        return Vec::new();
    }
    plan.states().filter_map(|(name, d)| plan.devices.get(d).map(|dev| (name.to_string(), dev.clone()))).collect()
}
