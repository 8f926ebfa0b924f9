//! A resumable profiling session.

use crate::{bench, measure_roofline, BenchOptions, Profile, ProfileError, ProfileKey, RooflineOptions};
use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use tg_runtime::{CpuDevice, Device};

/// Supplies the device to measure on for a (device name, thread count).
pub trait DeviceSource {
    /// The device `name` running `threads` workers (implementations should cache them).
    fn device(&mut self, name: &str, threads: usize) -> Result<Arc<dyn Device>, String>;
}

impl<F: FnMut(&str, usize) -> Result<Arc<dyn Device>, String>> DeviceSource for F {
    fn device(&mut self, name: &str, threads: usize) -> Result<Arc<dyn Device>, String> {
        self(name, threads)
    }
}

/// [`CpuDevice`]s by thread count, created on first use (the only device today).
#[derive(Default)]
pub struct CpuDevices {
    cache: HashMap<usize, Arc<dyn Device>>,
}

impl DeviceSource for CpuDevices {
    fn device(&mut self, name: &str, threads: usize) -> Result<Arc<dyn Device>, String> {
        if name != "cpu" {
            return Err(format!("unknown device {name:?} (only \"cpu\" exists)"));
        }
        if let Some(d) = self.cache.get(&threads) {
            return Ok(d.clone());
        }
        let d: Arc<dyn Device> = Arc::new(CpuDevice::new(threads)?);
        self.cache.insert(threads, d.clone());
        Ok(d)
    }
}

/// What one [`Profiler::run`] did.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// Keys measured now.
    pub measured: usize,
    /// Keys already in the profile (not measured again).
    pub skipped: usize,
    /// Rooflines measured now.
    pub rooflines: usize,
    /// Keys that could not be measured, with the reason (not recorded; retried next run).
    pub failed: Vec<(ProfileKey, String)>,
    /// True if the progress callback asked to stop before all keys were done.
    pub stopped: bool,
}

/// Measures keys into a profile, skipping those already measured and saving after every
/// measurement, so an interrupted session (Ctrl-C, a crash, a `Break` from the progress
/// callback) loses at most the measurement in flight and the next run resumes.
pub struct Profiler {
    profile: Profile,
    path: Option<PathBuf>,
    /// Timing budget per key.
    pub bench_options: BenchOptions,
    /// Sizes and budgets of roofline measurements.
    pub roofline_options: RooflineOptions,
}

impl Profiler {
    /// A session adding to `profile`, saved to `path` after every measurement (`None`: kept in
    /// memory only), with default options.
    pub fn new(profile: Profile, path: Option<PathBuf>) -> Profiler {
        Profiler { profile, path, bench_options: BenchOptions::default(), roofline_options: RooflineOptions::default() }
    }

    /// The profile so far.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The profile, ending the session.
    pub fn into_profile(self) -> Profile {
        self.profile
    }

    fn save(&self) -> Result<(), ProfileError> {
        match &self.path {
            Some(p) => self.profile.save(p),
            None => Ok(()),
        }
    }

    /// Measures every key of `keys` not yet in the profile (duplicates and keys equal after
    /// normalisation count once), in `bench_options.passes` interleaved passes (the pass with
    /// the lowest median is kept). First measures the roofline of each (device, threads) the
    /// keys use and the profile lacks (about a second each with default options). Calls
    /// `progress(done, total, key)` after each key measured or failed in each pass, where
    /// `total` is the skipped keys plus missing keys × passes and `done` starts at the
    /// skipped keys; returning `ControlFlow::Break(())` stops the session (the profile is
    /// saved). Errors: a device that cannot be created, a failed roofline, or a failed save;
    /// a key that fails is reported in [`RunReport::failed`] and the session goes on.
    pub fn run(
        &mut self,
        keys: &[ProfileKey],
        devices: &mut dyn DeviceSource,
        progress: &mut dyn FnMut(usize, usize, &ProfileKey) -> ControlFlow<()>,
    ) -> Result<RunReport, ProfileError> {
        let mut seen = HashSet::new();
        let keys: Vec<ProfileKey> = keys.iter().map(|k| k.clone().normalized()).filter(|k| seen.insert(k.clone())).collect();
        let mut report = RunReport::default();
        let dev_err = |k: &ProfileKey, detail: String| ProfileError::Device { device: k.device.clone(), threads: k.threads, detail };

        let mut pairs: Vec<(String, usize)> = keys.iter().map(|k| (k.device.clone(), k.threads)).collect();
        pairs.sort();
        pairs.dedup();
        for (name, threads) in pairs {
            if self.profile.roofline(&name, threads).is_none() {
                let dev = devices.device(&name, threads).map_err(|detail| ProfileError::Device { device: name.clone(), threads, detail })?;
                let r = measure_roofline(&*dev, threads, &self.roofline_options)?;
                self.profile.set_roofline(r);
                self.save()?;
                report.rooflines += 1;
            }
        }

        // Pass 1 measures every missing key and records it; later passes (see
        // `BenchOptions::passes`) time the keys again, in the same order, and keep for each
        // the pass with the lowest median. The profile is saved after every change, so an
        // interrupted session keeps every key measured at least once (a resumed session does
        // not refine keys already in the profile).
        let passes = self.bench_options.passes.max(1) as usize;
        let mut todo: Vec<&ProfileKey> = keys.iter().filter(|k| !self.profile.contains(k)).collect();
        report.skipped = keys.len() - todo.len();
        let total = report.skipped + todo.len() * passes;
        let mut done = report.skipped;
        'passes: for pass in 0..passes {
            let mut failed = HashSet::new();
            for &key in &todo {
                let dev = devices.device(&key.device, key.threads).map_err(|d| dev_err(key, d))?;
                match bench(&*dev, key, &self.bench_options) {
                    Ok(m) => {
                        let better = self.profile.get(key).is_none_or(|old| m.median_ns < old.median_ns);
                        if better {
                            self.profile.insert(key.clone(), m);
                            self.save()?;
                        }
                        if pass == 0 {
                            report.measured += 1;
                        }
                    }
                    // A key that fails in a later pass keeps its earlier measurement.
                    Err(e) if pass == 0 => {
                        report.failed.push((key.clone(), e.to_string()));
                        failed.insert(key.clone());
                    }
                    Err(_) => {}
                }
                done += 1;
                if progress(done, total, key).is_break() {
                    report.stopped = done < total;
                    break 'passes;
                }
            }
            todo.retain(|k| !failed.contains(*k));
        }
        Ok(report)
    }
}
