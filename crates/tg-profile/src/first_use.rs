//! A device's roofline and links measured on its first use, for planning before `tg profile
//! --device` has measured its kernels.
//!
//! A compile for several devices has no basis for moving work to a device whose kernel times
//! were never measured. Rather than leave it idle, the compiler asks [`first_use`] for a
//! quick measurement ([`measure_roofline`] under [`RooflineOptions::first_use`], bounded by
//! its time budget, and [`measure_device_links`] at 4 KiB – 4 MiB both ways), cached in a small
//! JSON file per (device, home device) under [`default_dir`]`/first-use` and kept in memory
//! for the rest of the process.

use crate::profile::write_atomically;
use crate::{default_dir, measure_device_links, measure_roofline, BenchOptions, Link, ProfileError, Roofline, RooflineOptions};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tg_runtime::Device;

/// Version of the first-use file layout; a file of another version is remeasured.
pub const FIRST_USE_FORMAT: u32 = 1;

/// What the first use of a device measured: its roofline and its links with the home device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstUseRecord {
    /// [`FIRST_USE_FORMAT`] of the file.
    pub format: u32,
    /// The device measured (its name).
    pub device: String,
    /// Its `Device::fingerprint()` when measured.
    pub fingerprint: String,
    /// The home device the links connect it to (its name).
    pub home: String,
    /// The home device's fingerprint when measured.
    pub home_fingerprint: String,
    /// `"release"` or `"debug"` (the host side of a launch is part of its overhead).
    pub build: String,
    /// Launch overhead, streaming bandwidth and f32 matmul throughput.
    pub roofline: Roofline,
    /// Home → device transfers.
    pub to_device: Link,
    /// Device → home transfers.
    pub from_device: Link,
    /// Seconds the measurement took.
    pub seconds: f64,
}

impl FirstUseRecord {
    /// Why this record does not hold for `device` with home `home` (another device, driver,
    /// kernel build or file format; implausible figures), or `None` when it holds.
    pub fn stale_for(&self, home: &dyn Device, device: &dyn Device) -> Option<String> {
        let build = build();
        let finite_link = |l: &Link| l.latency_ns.is_finite() && l.latency_ns >= 0.0 && l.bytes_per_ns.is_finite() && l.bytes_per_ns > 0.0;
        let r = &self.roofline;
        if self.format != FIRST_USE_FORMAT {
            Some(format!("format {} (this build reads {FIRST_USE_FORMAT})", self.format))
        } else if self.device != device.name() || r.device != device.name() || r.threads != device.threads() {
            Some(format!("measured for {} x{} threads", r.device, r.threads))
        } else if self.fingerprint != device.fingerprint() {
            Some("another device, driver or kernel build".into())
        } else if self.home != home.name() || self.home_fingerprint != home.fingerprint() {
            Some(format!("links measured with another home device ({})", self.home))
        } else if self.build != build {
            Some(format!("measured by a {} build", self.build))
        } else if ![r.launch_ns, r.bytes_per_ns, r.flops_per_ns].iter().all(|x| x.is_finite() && *x > 0.0) || !finite_link(&self.to_device) || !finite_link(&self.from_device) {
            Some("implausible figures".into())
        } else {
            None
        }
    }

    /// One line: `launch 45 µs, 12.1 GB/s, 38 GFLOP/s; cpu -> opencl:0 20 µs + 5.10 GB/s,
    /// back 25 µs + 6.00 GB/s`.
    pub fn summary(&self) -> String {
        let r = &self.roofline;
        format!(
            "launch {}, {:.1} GB/s, {:.1} GFLOP/s; {} -> {} {} + {:.2} GB/s, back {} + {:.2} GB/s",
            micros(r.launch_ns),
            r.bytes_per_ns,
            r.flops_per_ns,
            self.home,
            self.device,
            micros(self.to_device.latency_ns),
            self.to_device.bytes_per_ns,
            micros(self.from_device.latency_ns),
            self.from_device.bytes_per_ns
        )
    }
}

/// `"release"` or `"debug"`, as in the [`crate::Fingerprint`].
fn build() -> String {
    if cfg!(debug_assertions) { "debug" } else { "release" }.to_string()
}

/// `45 µs`, `0.8 µs`.
fn micros(ns: f64) -> String {
    if ns >= 10_000.0 {
        format!("{:.0} µs", ns / 1e3)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

/// Where the first-use measurements go and how they are taken.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstUseOptions {
    /// Directory of the cache files (default [`default_dir`]`/first-use`, which follows
    /// `TG_CACHE_DIR`).
    pub dir: PathBuf,
    /// The roofline measurement ([`RooflineOptions::first_use`]: bounded by 1.2 s).
    pub roofline: RooflineOptions,
    /// Transfer sizes of the link measurement (bytes; at least two distinct).
    pub link_sizes: Vec<usize>,
    /// Budget of the link measurement at each size and direction.
    pub link_bench: BenchOptions,
}

impl Default for FirstUseOptions {
    fn default() -> Self {
        FirstUseOptions::in_dir(default_dir().join("first-use"))
    }
}

impl FirstUseOptions {
    /// The default measurement, cached in `dir`. Links at 4 KiB, 64 KiB, 1 MiB and 4 MiB,
    /// each size within 3–40 ms: at most ~0.35 s for both directions.
    pub fn in_dir(dir: PathBuf) -> FirstUseOptions {
        FirstUseOptions {
            dir,
            roofline: RooflineOptions::first_use(),
            link_sizes: vec![4 << 10, 64 << 10, 1 << 20, 4 << 20],
            link_bench: BenchOptions {
                warmup: 1,
                min_reps: 3,
                max_reps: 1000,
                min_time: Duration::from_millis(3),
                max_time: Duration::from_millis(40),
                cold_bytes: 0,
                passes: 1,
                ..BenchOptions::default()
            },
        }
    }
}

/// The cache file of `device` with home `home` in `dir`: the device's name (`:` as `_`) and a
/// hash of both fingerprints, the device's thread count and the build, so another device,
/// driver, kernel build or home device has another file.
pub fn first_use_path(dir: &Path, home: &dyn Device, device: &dyn Device) -> PathBuf {
    let material = format!("{}\n{}\n{}\n{}\n{}\n{}", device.name(), device.fingerprint(), device.threads(), home.name(), home.fingerprint(), build());
    let name: String = device.name().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    dir.join(format!("{name}-{:016x}.json", crate::bench::fnv(&material)))
}

/// How [`load_or_measure`] got its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Read from the cache file.
    Cached,
    /// Measured now and written to the cache file; `replaced` says why a file that was
    /// there could not be used (unreadable or stale), if one was.
    Measured {
        /// Why the file present was not used.
        replaced: Option<String>,
    },
}

/// The first-use record of `device` (home `home`) from the cache file in `opts.dir` when it
/// holds for them, else measured now (roofline and both links, `device.threads()` workers)
/// and written to that file atomically. A file that cannot be read or parsed, or that is
/// stale ([`FirstUseRecord::stale_for`]), is measured over. A failure to write the cache is not an
/// error (the measurement is returned; the next process measures again).
pub fn load_or_measure(home: &dyn Device, device: &dyn Device, opts: &FirstUseOptions) -> Result<(FirstUseRecord, Origin, PathBuf), ProfileError> {
    let path = first_use_path(&opts.dir, home, device);
    let replaced = match std::fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(format!("unreadable: {e}")),
        Ok(text) => match serde_json::from_str::<FirstUseRecord>(&text) {
            Err(e) => Some(format!("unreadable: {e}")),
            Ok(f) => match f.stale_for(home, device) {
                None => return Ok((f, Origin::Cached, path)),
                Some(why) => Some(format!("stale: {why}")),
            },
        },
    };
    let t0 = Instant::now();
    let roofline = measure_roofline(device, device.threads(), &opts.roofline)?;
    let (to_device, from_device) = measure_device_links(home, device, &opts.link_sizes, &opts.link_bench)?;
    let f = FirstUseRecord {
        format: FIRST_USE_FORMAT,
        device: device.name().to_string(),
        fingerprint: device.fingerprint(),
        home: home.name().to_string(),
        home_fingerprint: home.fingerprint(),
        build: build(),
        roofline,
        to_device,
        from_device,
        seconds: t0.elapsed().as_secs_f64(),
    };
    if let Ok(text) = serde_json::to_string_pretty(&f) {
        // Best effort: a read-only cache directory only costs the next process a measurement.
        let _ = write_atomically(&path, text.as_bytes());
    }
    Ok((f, Origin::Measured { replaced }, path))
}

/// The answers of [`first_use`] in this process, by cache file.
type Memo = HashMap<PathBuf, Result<Arc<FirstUseRecord>, String>>;

static MEMO: Mutex<Option<Memo>> = Mutex::new(None);

/// [`load_or_measure`] at most once per process and cache file: later calls return the same
/// answer (a failure too) without touching the file or the device. Says on stderr, once,
/// what it did: measured (with the figures, the time taken and the file) or read from the
/// cache. Concurrent callers wait for the one measuring.
pub fn first_use(home: &dyn Device, device: &dyn Device, opts: &FirstUseOptions) -> Result<Arc<FirstUseRecord>, String> {
    let path = first_use_path(&opts.dir, home, device);
    let mut memo = MEMO.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = memo.get_or_insert_with(HashMap::new).get(&path) {
        return r.clone();
    }
    let name = device.name();
    let hint = format!("run `tg profile --device {name}` for kernel times");
    let r = match load_or_measure(home, device, opts) {
        Ok((f, Origin::Cached, path)) => {
            eprintln!("{name}: no kernel times measured; planning from its roofline measured on first use ({}), cached in {} ({hint})", f.summary(), path.display());
            Ok(Arc::new(f))
        }
        Ok((f, Origin::Measured { replaced }, path)) => {
            let was = replaced.map(|w| format!(" (the cached one was {w})")).unwrap_or_default();
            eprintln!(
                "{name}: no kernel times measured; measured its roofline and links ({}) in {:.1} s, cached in {}{was}; planning from it ({hint})",
                f.summary(),
                f.seconds,
                path.display()
            );
            Ok(Arc::new(f))
        }
        Err(e) => {
            eprintln!("{name}: no kernel times measured, and measuring its roofline failed: {e}; only pinned ops go there");
            Err(e.to_string())
        }
    };
    memo.get_or_insert_with(HashMap::new).insert(path, r.clone());
    r
}
