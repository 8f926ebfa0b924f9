//! Measured cost model for Tensor Graphs (issue 7).
//!
//! The planner chooses kernels by predicted run time. This crate makes that prediction come
//! from measurements on this machine:
//!
//! - [`Fingerprint`] identifies the machine and the kernel code (CPU model, ISA, cores,
//!   kernels version and [`KERNELS_REVISION`], OS/arch, build profile). A profile measured
//!   under another fingerprint is *stale* and is never used silently ([`ProfileError::Stale`]).
//! - [`ProfileKey`] is one thing a plan asks about: a kernel on given operand layouts, on a
//!   device with a thread count. [`bench`] measures it ([`Measurement`]: median, min, p90, MAD).
//! - [`Roofline`] is the machine's measured memory bandwidth, f32 peak and launch overhead per
//!   (device, threads); [`work`] gives the bytes and flops of any key.
//! - [`Profile`] holds all of it, is saved as JSON (atomically) under [`default_dir`], and
//!   [`Profile::predict`]s a key's time: the measurement when there is one, otherwise a
//!   per-family fit `c0 + c1·bytes/BW + c2·flops/PEAK` (`c ≥ 0`, so monotone in problem size)
//!   floored by the roofline. [`PlanEstimate`] reports how much of a plan rests on fallbacks.
//! - [`Profiler`] measures a list of keys, skipping measured ones and saving after every
//!   measurement, so an interrupted run resumes without losing or repeating work.
//! - [`Link`] is a measured device-to-device copy cost (latency + bandwidth):
//!   [`measure_device_links`] times transfers both ways, [`Profile::predict_copy`] prices them.
//! - [`first_use`] measures a device's roofline and links quickly (bounded by a time budget)
//!   the first time a compile meets a device without measured kernel times, and caches them
//!   per device fingerprint, so the planner can use the device before `tg profile` has run.
//!
//! The file format and the fit are described in `docs/profile.md`.
#![warn(missing_docs)]

mod bench;
mod fingerprint;
mod first_use;
mod fit;
mod key;
mod profile;
mod profiler;
mod roofline;

pub use bench::{bench, BenchOptions, Measurement};
pub use fingerprint::{Fingerprint, KERNELS_REVISION};
pub use first_use::{first_use, first_use_path, load_or_measure, FirstUseOptions, FirstUseRecord, Origin, FIRST_USE_FORMAT};
pub use fit::FamilyFit;
pub use key::{work, ProfileKey, Work};
pub use profile::{default_dir, default_path, stale_profiles, PlanEstimate, Prediction, Profile, Source, FORMAT_VERSION};
pub use profiler::{CpuDevices, DeviceSource, Profiler, RunReport};
pub use roofline::{measure_device_links, measure_link, measure_roofline, Link, LinkKey, Roofline, RooflineOptions};

use std::path::PathBuf;
use thiserror::Error;

/// Errors of benchmarking, fitting and profile files. Nothing in this crate panics on a bad
/// key, a bad file or a failing kernel.
#[derive(Debug, Error)]
pub enum ProfileError {
    /// The device cannot run the kernel on these layouts (its `supports` said no), or the
    /// key names another device.
    #[error("{key}: not supported: {reason}")]
    Unsupported {
        /// The key, in short form.
        key: String,
        /// Why.
        reason: String,
    },
    /// A layout is malformed (negative reach, a quantized row that is not whole blocks...).
    #[error("{key}: bad layout: {detail}")]
    Layout {
        /// The key, in short form.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// Buffers for the benchmark could not be allocated.
    #[error("{key}: cannot allocate {bytes} bytes of benchmark buffers")]
    Alloc {
        /// The key, in short form.
        key: String,
        /// Bytes requested.
        bytes: usize,
    },
    /// The kernel returned an error (or panicked) while being measured.
    #[error("{key}: kernel failed (input seed {seed}): {detail}")]
    Launch {
        /// The key, in short form.
        key: String,
        /// Seed of the random inputs, to reproduce.
        seed: u64,
        /// The kernel's message.
        detail: String,
    },
    /// A device could not be created.
    #[error("device {device} with {threads} threads: {detail}")]
    Device {
        /// Device name.
        device: String,
        /// Thread count.
        threads: usize,
        /// Why.
        detail: String,
    },
    /// A measurement could not be fitted (e.g. a link measured at fewer than two sizes).
    #[error("fit: {0}")]
    Fit(String),
    /// Reading or writing a profile file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A profile file is not valid JSON of the expected shape, or has another format version.
    #[error("{path}: not a valid profile: {detail}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The profile was measured on another machine or with other kernel code.
    #[error("{path}: stale profile (measured under another fingerprint): {}", diff.join("; "))]
    Stale {
        /// The file.
        path: PathBuf,
        /// One line per differing fingerprint field: `field: profile value vs this machine`.
        diff: Vec<String>,
    },
}
