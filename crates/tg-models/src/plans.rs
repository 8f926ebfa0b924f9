//! Compiled plans cached per request shape, shared by the models: a model builds a graph
//! for a key (sequence length, batch, ...) once, and later runs of the same shape reuse the
//! executable.

use crate::ModelError;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use tg_compiler::{compile_cached, CompileOptions, CompileReport, PlanStore};
use tg_ir::{Graph, WeightStore};
use tg_runtime::{Device, Executable};

/// A cached plan, for reports (`tg_report`): how it was made and its last run's times.
pub struct PlanView<'a> {
    /// The plan.
    pub plan: &'a tg_runtime::Plan,
    /// How it was made.
    pub report: &'a CompileReport,
    /// Its last run's time per step (ns), when profiling is on.
    pub step_times: Option<&'a [u64]>,
    /// Its last run's spans per device, when profiling is on (several devices).
    pub spans: Option<&'a [tg_runtime::Span]>,
    /// Worker threads of each device.
    pub threads: Vec<usize>,
    /// For an incremental plan: the derivation's summary.
    pub derivation: Option<&'a str>,
}

/// Executables by key, compiled on first use with the current options.
pub(crate) struct PlanCache<K> {
    /// The devices plans are compiled for; the first is home (inputs, outputs).
    devices: Vec<Arc<dyn Device>>,
    plans: HashMap<K, Executable>,
    /// How each cached plan was made.
    reports: HashMap<K, CompileReport>,
    /// The key of the plan returned last.
    last_used: Option<K>,
    options: CompileOptions,
    last_report: Option<CompileReport>,
    profiling: bool,
    store: Option<PlanStore>,
    /// Plans compiled (or loaded from the store), and the milliseconds spent building
    /// their graphs and compiling them, over the cache's life.
    stats: CompileStats,
}

/// What a [`PlanCache`] has compiled so far.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CompileStats {
    pub(crate) plans: usize,
    pub(crate) graph_ms: f64,
    pub(crate) compile_ms: f64,
}

impl CompileStats {
    /// What was compiled between `before` and `self`.
    pub(crate) fn since(self, before: CompileStats) -> crate::CompileTimes {
        crate::CompileTimes { graph_ms: self.graph_ms - before.graph_ms, compile_ms: self.compile_ms - before.compile_ms, plans: self.plans - before.plans }
    }
}

impl<K: Hash + Eq + Clone> PlanCache<K> {
    /// The home device plans are compiled for.
    pub(crate) fn device(&self) -> &Arc<dyn Device> {
        &self.devices[0]
    }

    /// Every device plans are compiled for, home first.
    pub(crate) fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// A cache compiling for `devices` (at least one; the first is home).
    pub(crate) fn new(devices: Vec<Arc<dyn Device>>) -> Self {
        assert!(!devices.is_empty(), "a plan cache needs a device");
        PlanCache {
            devices,
            plans: HashMap::new(),
            reports: HashMap::new(),
            last_used: None,
            options: CompileOptions::default(),
            last_report: None,
            profiling: false,
            store: PlanStore::default_store(),
            stats: CompileStats::default(),
        }
    }

    /// Where compiled plans are also kept across processes (`None`: compile every plan).
    pub(crate) fn set_store(&mut self, store: Option<PlanStore>) {
        self.store = store;
    }

    /// New options apply to plans compiled from now on: the cache is cleared. The cache
    /// budget stays as [`PlanCache::set_cache_budget`] set it (the session owns it).
    pub(crate) fn set_options(&mut self, o: CompileOptions) {
        let budget = self.options.cache_budget;
        self.options = CompileOptions { cache_budget: budget, ..o };
        self.plans.clear();
        self.reports.clear();
    }

    /// Bytes the kept states may take on each device, for plans compiled from now on (the
    /// cache is cleared).
    pub(crate) fn set_cache_budget(&mut self, bytes: Option<usize>) {
        self.options.cache_budget = bytes;
        self.plans.clear();
        self.reports.clear();
    }

    /// Binds each kept state (name) to a device (name) for every plan compiled from now on:
    /// a session's plans share their states, so the first plan's placement of a state binds
    /// the rest. A state already bound keeps its device; cached plans stay (they agree).
    pub(crate) fn pin_states(&mut self, states: Vec<(String, String)>) {
        for (name, device) in states {
            self.options.placement.states.entry(name).or_insert(device);
        }
    }

    /// Forgets the bindings of [`PlanCache::pin_states`] (the states are gone).
    pub(crate) fn unpin_states(&mut self) {
        self.options.placement.states.clear();
    }

    pub(crate) fn last_report(&self) -> Option<&CompileReport> {
        self.last_report.as_ref()
    }

    /// Times every step of every run from now on.
    pub(crate) fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
        for exe in self.plans.values_mut() {
            exe.set_profiling(on);
        }
    }

    /// The executable for `key`, compiling `graph()` on `weights` if it is not cached.
    pub(crate) fn get_or_compile(
        &mut self,
        key: K,
        weights: Arc<dyn WeightStore + Send>,
        graph: impl FnOnce() -> Result<Graph, ModelError>,
    ) -> Result<&mut Executable, ModelError> {
        self.last_used = Some(key.clone());
        match self.plans.entry(key) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(v) => {
                let t = std::time::Instant::now();
                let graph = graph()?;
                let built = std::time::Instant::now();
                let (compiled, _) = compile_cached(&graph, &self.devices, &self.options, self.store.as_ref())?;
                self.stats.plans += 1;
                self.stats.graph_ms += (built - t).as_secs_f64() * 1e3;
                self.stats.compile_ms += built.elapsed().as_secs_f64() * 1e3;
                self.reports.insert(v.key().clone(), compiled.report.clone());
                self.last_report = Some(compiled.report);
                let mut exe = Executable::new(compiled.plan, self.devices.clone(), weights)?;
                exe.set_profiling(self.profiling);
                Ok(v.insert(exe))
            }
        }
    }

    /// What has been compiled so far (for [`crate::CompileTimes`]).
    pub(crate) fn stats(&self) -> CompileStats {
        self.stats
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.plans.contains_key(key)
    }

    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut Executable> {
        self.plans.get_mut(key)
    }

    pub(crate) fn get(&self, key: &K) -> Option<&Executable> {
        self.plans.get(key)
    }

    /// The cached plan for `key`, for a report.
    pub(crate) fn view(&self, key: &K) -> Option<PlanView<'_>> {
        let exe = self.plans.get(key)?;
        Some(PlanView {
            plan: exe.plan(),
            report: self.reports.get(key)?,
            step_times: exe.step_times(),
            spans: exe.timeline(),
            threads: exe.devices().iter().map(|d| d.threads()).collect(),
            derivation: None,
        })
    }

    /// The plan the last [`PlanCache::get_or_compile`] returned, for a report.
    pub(crate) fn last_view(&self) -> Option<PlanView<'_>> {
        self.view(self.last_used.as_ref()?)
    }

    pub(crate) fn clear(&mut self) {
        self.plans.clear();
        self.reports.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.plans.len()
    }
}
