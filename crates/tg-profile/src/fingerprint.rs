//! The machine fingerprint a profile is valid for.

use serde::{Deserialize, Serialize};

/// Revision of the kernel code's timing behaviour.
///
/// **Bump this whenever a change in `tg-kernels` or in the CPU device of `tg-runtime` can
/// change how long a kernel takes** (a new SIMD path, another blocking or threading scheme, a
/// new fast path...). It is part of the [`Fingerprint`], so every profile measured before the
/// change becomes stale and is re-measured instead of silently mis-predicting.
pub const KERNELS_REVISION: u32 = 2;

/// What a profile's measurements depend on. Two machines (or two builds) with equal
/// fingerprints are expected to time kernels alike; any difference makes a profile stale.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// CPU model (`model name` of `/proc/cpuinfo`, `"unknown"` where unavailable).
    pub cpu_model: String,
    /// The SIMD path the kernels use (`tg_kernels::isa()`, which honours `TG_ISA`).
    pub isa: String,
    /// The CPU features the kernels dispatch on (`tg_kernels::cpu_features()`).
    pub cpu_features: String,
    /// Logical cores the OS reports.
    pub logical_cores: usize,
    /// Version of the kernel crates (the workspace version `tg-kernels` shares).
    pub kernels_version: String,
    /// [`KERNELS_REVISION`] of the build that measured.
    pub kernels_revision: u32,
    /// Operating system (`std::env::consts::OS`).
    pub os: String,
    /// Architecture (`std::env::consts::ARCH`).
    pub arch: String,
    /// `"release"` or `"debug"`: an unoptimised build times kernels very differently.
    pub build: String,
}

impl Fingerprint {
    /// The fingerprint of this process on this machine.
    pub fn current() -> Fingerprint {
        Fingerprint {
            cpu_model: cpu_model(),
            isa: tg_kernels::isa().name().to_string(),
            cpu_features: tg_kernels::cpu_features(),
            logical_cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            // `tg-kernels` takes its version from the workspace, as this crate does.
            kernels_version: env!("CARGO_PKG_VERSION").to_string(),
            kernels_revision: KERNELS_REVISION,
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            build: if cfg!(debug_assertions) { "debug" } else { "release" }.to_string(),
        }
    }

    /// A stable 16-hex-digit hash of all fields (FNV-1a over the canonical JSON), used in
    /// profile file names. Equal fingerprints have equal ids on every platform and release.
    pub fn id(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    /// One line per field that differs: `field: <self> vs <other>`. Empty when equal.
    pub fn diff(&self, other: &Fingerprint) -> Vec<String> {
        let (a, b) = (serde_json::to_value(self).unwrap_or_default(), serde_json::to_value(other).unwrap_or_default());
        let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
            return vec!["fingerprint: not comparable".into()];
        };
        let mut out = Vec::new();
        for (field, va) in a {
            let vb = b.get(field).cloned().unwrap_or(serde_json::Value::Null);
            if *va != vb {
                out.push(format!("{field}: {va} vs {vb}"));
            }
        }
        out
    }
}

/// `model name` of the first processor in `/proc/cpuinfo`.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_stable_and_sensitive() {
        let a = Fingerprint::current();
        assert_eq!(a.id(), a.clone().id());
        assert_eq!(a.id().len(), 16);
        let mut b = a.clone();
        b.kernels_revision += 1;
        assert_ne!(a.id(), b.id());
        assert_eq!(a.diff(&b), vec![format!("kernels_revision: {} vs {}", a.kernels_revision, b.kernels_revision)]);
        assert!(a.diff(&a).is_empty());
    }
}
