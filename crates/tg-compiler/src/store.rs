//! Compiled plans on disk: [`compile_cached`] returns a plan compiled earlier for exactly
//! the same request when one is stored, and compiles and stores it otherwise.
//!
//! An entry is keyed by a hash of everything that changes the plan: the graph (its ops,
//! shapes, dtypes and weight names), every compile option, the kernel times the planner used
//! (the profile's fingerprint and contents, or the estimate), the devices and their thread
//! counts, and the build (a hash of the workspace's sources, so other compiler or kernel code
//! never loads it). The file stores the full key's digest as well, and a loaded plan must
//! pass the plan validator on the caller's devices; an entry that does not match, does not
//! parse or does not validate is ignored and recompiled, never used.
//!
//! The store is bounded: after each write, the least recently used entries (by file time;
//! a load refreshes it) are deleted until the entries take at most the store's limit
//! ([`DEFAULT_LIMIT_BYTES`], or `TG_PLAN_CACHE_MB` for the default store). Only files named
//! like entries are ever deleted.

use crate::{compile, validate, CompileError, CompileOptions, CompileReport, Compiled, CostSource, Numerics, StageReport};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tg_ir::Graph;
use tg_runtime::{Device, Plan};

/// Version of the entry format.
const FORMAT: u32 = 1;

/// Bytes the default store's entries may take (256 MiB: over a thousand Gemma plans).
pub const DEFAULT_LIMIT_BYTES: u64 = 256 << 20;

/// Where compiled plans are stored.
#[derive(Debug, Clone)]
pub struct PlanStore {
    dir: PathBuf,
    limit: u64,
}

impl PlanStore {
    /// Entries beyond this many bytes are evicted, least recently used first.
    pub fn with_limit(mut self, bytes: u64) -> PlanStore {
        self.limit = bytes;
        self
    }

    /// A store in `dir` (created on first write), bounded by [`DEFAULT_LIMIT_BYTES`].
    pub fn new(dir: impl Into<PathBuf>) -> PlanStore {
        PlanStore { dir: dir.into(), limit: DEFAULT_LIMIT_BYTES }
    }

    /// The default store, `plans/` under the cache directory (`$TG_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/tensor-graphs`, else `~/.cache/tensor-graphs`); `None` when
    /// `TG_PLAN_CACHE=off` or no cache directory can be named. `TG_PLAN_CACHE_MB` sets its
    /// limit (an unreadable value keeps the default).
    pub fn default_store() -> Option<PlanStore> {
        if std::env::var("TG_PLAN_CACHE").is_ok_and(|v| v == "off") {
            return None;
        }
        let root = match (std::env::var_os("TG_CACHE_DIR"), std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")) {
            (Some(d), _, _) => PathBuf::from(d),
            (None, Some(x), _) => PathBuf::from(x).join("tensor-graphs"),
            (None, None, Some(h)) => PathBuf::from(h).join(".cache").join("tensor-graphs"),
            _ => return None,
        };
        let limit = std::env::var("TG_PLAN_CACHE_MB").ok().and_then(|v| v.trim().parse::<u64>().ok()).map_or(DEFAULT_LIMIT_BYTES, |mb| mb.saturating_mul(1 << 20));
        Some(PlanStore::new(root.join("plans")).with_limit(limit))
    }

    /// The directory of the store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store's limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Deletes the least recently used entries until the rest take at most the limit;
    /// `keep` is never deleted. Only files named like entries (`<16 hex digits>.json`) count
    /// or are deleted. Returns how many were deleted.
    pub fn evict(&self, keep: Option<&Path>) -> usize {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return 0 };
        let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = rd
            .filter_map(|e| e.ok())
            .filter(|e| is_entry_name(&e.file_name().to_string_lossy()))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        let mut deleted = 0;
        for (_, len, path) in entries {
            if total <= self.limit {
                break;
            }
            if Some(path.as_path()) == keep {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
                deleted += 1;
            }
        }
        deleted
    }
}

/// What is stored per entry.
#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    format: u32,
    /// Second, independent digest of the key (guards against a collision of the file name).
    check: String,
    plan: Plan,
    /// The compile report's stages at the time of compiling.
    stages: Vec<StageReport>,
}

fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The kernel-time source as key material: the profile's fingerprint and a digest of its
/// measurements, rooflines and links (it changes whenever `tg profile` adds or remeasures).
fn cost_key(c: &CostSource) -> String {
    match c {
        CostSource::Estimate => "estimate".into(),
        CostSource::Profile(p) => {
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            for (k, m) in p.entries() {
                h = fnv(h, k.short().as_bytes());
                h = fnv(h, &m.median_ns.to_bits().to_le_bytes());
            }
            for r in p.rooflines() {
                h = fnv(h, format!("{}/{}/{}/{}/{}", r.device, r.threads, r.launch_ns, r.bytes_per_ns, r.flops_per_ns).as_bytes());
            }
            format!("profile {} {} {h:016x}", p.fingerprint().id(), p.len())
        }
    }
}

/// The first-use measurements the placement would price devices with (measured or read
/// from their cache now if this process has not yet: compiling would do it anyway).
fn first_use_key(devices: &[Arc<dyn Device>], opts: &CompileOptions) -> Vec<String> {
    if opts.placement.first_use == crate::FirstUse::Off {
        return Vec::new();
    }
    crate::place::first_use_records(devices, opts)
        .into_iter()
        .flatten()
        .map(|r| match r {
            Ok(f) => format!(
                "{}/{}/{}/{}/{}/{}/{}/{}",
                f.device,
                f.roofline.launch_ns,
                f.roofline.bytes_per_ns,
                f.roofline.flops_per_ns,
                f.to_device.latency_ns,
                f.to_device.bytes_per_ns,
                f.from_device.latency_ns,
                f.from_device.bytes_per_ns
            ),
            Err(e) => format!("failed: {e}"),
        })
        .collect()
}

/// Everything that changes the plan, as one string.
fn key_material(graph: &Graph, devices: &[Arc<dyn Device>], opts: &CompileOptions) -> String {
    let r = &opts.rewrite;
    let meta = serde_json::json!({
        "format": FORMAT,
        "build": env!("TG_SOURCE_HASH"),
        "version": env!("CARGO_PKG_VERSION"),
        "kernels_revision": tg_profile::KERNELS_REVISION,
        "disabled": opts.disabled,
        "alignment": opts.alignment,
        "numerics": match opts.numerics { Numerics::Exact => "exact", Numerics::Q8Activations => "q8" },
        "rewrite": [format!("{:?}", r.disabled), r.iter_limit.to_string(), r.node_limit.to_string(), r.time_limit.as_millis().to_string(), r.match_limit.to_string(), r.ban_length.to_string()],
        "cost": cost_key(&opts.cost),
        "devices": devices.iter().map(|d| format!("{}/{}/{}", d.name(), d.threads(), d.fingerprint())).collect::<Vec<_>>(),
        "placement": [format!("{:?}", opts.placement.pins), opts.placement.budget.as_millis().to_string(), format!("{:?}", opts.placement.states)],
        "cache_budget": opts.cache_budget,
        "first_use": first_use_key(devices, opts),
    });
    let g = serde_json::to_string(graph).unwrap_or_default();
    format!("{meta}\n{g}")
}

/// How [`compile_cached`] got its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the store.
    Hit,
    /// Compiled and stored.
    Stored,
    /// Compiled; storing failed (the reason is in the report), or there is no store.
    Compiled,
}

/// [`compile`], through `store`: a stored plan for exactly this request is loaded (and
/// validated on `devices`) instead of compiled; otherwise the plan is compiled and written
/// to the store (atomically; a failed write only costs the next run a compile).
pub fn compile_cached(graph: &Graph, devices: &[Arc<dyn Device>], opts: &CompileOptions, store: Option<&PlanStore>) -> Result<(Compiled, CacheOutcome), CompileError> {
    let Some(store) = store else { return Ok((compile(graph, devices, opts)?, CacheOutcome::Compiled)) };
    let t = Instant::now();
    let material = key_material(graph, devices, opts);
    let name = format!("{:016x}", fnv(0xcbf2_9ce4_8422_2325, material.as_bytes()));
    let check = format!("{:016x}", fnv(0x84222325_cbf29ce4, material.as_bytes()));
    let path = store.dir.join(format!("{name}.json"));
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Ok(e) = serde_json::from_str::<Entry>(&text) {
            if e.format == FORMAT && e.check == check && validate(&e.plan, devices).is_ok() {
                // Mark it used, for the least-recently-used eviction.
                let _ = std::fs::File::options().append(true).open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
                let cache = format!(
                    "loaded {} ({} steps) in {:.1} ms; the stages above are from when it was compiled",
                    path.display(),
                    e.plan.steps.len(),
                    t.elapsed().as_secs_f64() * 1e3
                );
                let report = CompileReport { stages: e.stages, cost_source: opts.cost.describe(), cache: Some(cache), ..Default::default() };
                return Ok((Compiled { plan: e.plan, report }, CacheOutcome::Hit));
            }
        }
    }
    let mut c = compile(graph, devices, opts)?;
    let entry = Entry { format: FORMAT, check, plan: c.plan.clone(), stages: c.report.stages.clone() };
    let outcome = match write_atomic(&store.dir, &path, &entry) {
        Ok(()) => {
            let evicted = store.evict(Some(&path));
            c.report.cache = Some(if evicted > 0 {
                format!("stored as {}; {evicted} least recently used entries evicted (limit {} MiB)", path.display(), store.limit >> 20)
            } else {
                format!("stored as {}", path.display())
            });
            CacheOutcome::Stored
        }
        Err(e) => {
            c.report.cache = Some(format!("not stored in {}: {e}", store.dir.display()));
            CacheOutcome::Compiled
        }
    };
    Ok((c, outcome))
}

/// `<16 hex digits>.json`: the name of an entry.
fn is_entry_name(name: &str) -> bool {
    name.len() == 21 && name.ends_with(".json") && name[..16].bytes().all(|b| b.is_ascii_hexdigit())
}

fn write_atomic(dir: &Path, path: &Path, e: &Entry) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // Unique per process and per call: concurrent writers of one key never share a file.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}.{n}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec(e).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, path)
}
