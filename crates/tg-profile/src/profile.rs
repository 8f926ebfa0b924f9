//! The profile: measurements, rooflines and links of one machine, its file and predictions.

use crate::{work, FamilyFit, Fingerprint, Link, LinkKey, Measurement, ProfileError, ProfileKey, Roofline};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tg_runtime::Plan;

/// Version of the profile file layout (see `docs/profile.md`). Files of another version are
/// rejected as [`ProfileError::Format`].
pub const FORMAT_VERSION: u32 = 1;

/// The directory profiles live in: `$TG_CACHE_DIR/profiles`, else
/// `$XDG_CACHE_HOME/tensor-graphs/profiles`, else `~/.cache/tensor-graphs/profiles` (the
/// model cache's convention, with `profiles` beside `models`).
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TG_CACHE_DIR") {
        return PathBuf::from(d).join("profiles");
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("tensor-graphs").join("profiles")
}

/// The default file of a fingerprint: `default_dir()/<fingerprint id>.json`.
pub fn default_path(fingerprint: &Fingerprint) -> PathBuf {
    default_dir().join(format!("{}.json", fingerprint.id()))
}

/// Writes `text` and a newline to `path` atomically: a temporary file in the same directory,
/// synced, then renamed over `path` (a reader never sees half a file), creating the
/// directory if needed.
pub(crate) fn write_atomically(path: &Path, text: &[u8]) -> Result<(), ProfileError> {
    let io = |source: std::io::Error| ProfileError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// Profiles in `dir` that were measured under a fingerprint other than `current`, each with
/// the differing fields (or why it could not be read), so a caller that finds no profile for
/// this machine can say why instead of silently planning with guesses.
pub fn stale_profiles(dir: &Path, current: &Fingerprint) -> Vec<(PathBuf, Vec<String>)> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| match Profile::load(&p, current) {
            Ok(_) => None,
            Err(ProfileError::Stale { diff, .. }) => Some((p, diff)),
            Err(e) => Some((p, vec![format!("unreadable: {e}")])),
        })
        .collect()
}

/// Where a prediction comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// This exact key was measured.
    Measured,
    /// The family's fit to this many measured points (same device and threads).
    Fitted {
        /// Points of the family.
        points: usize,
    },
    /// The family has no measured points: the machine roofline with `c = 1`.
    Roofline,
    /// No roofline was measured for this device and thread count: the nearest thread
    /// count's, or a built-in guess.
    Guess,
}

impl Source {
    /// True for everything but [`Source::Measured`].
    pub fn is_fallback(self) -> bool {
        self != Source::Measured
    }
}

/// A predicted launch time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Nanoseconds per launch.
    pub ns: f64,
    /// Where it comes from.
    pub source: Source,
    /// The key's family.
    pub family: String,
}

/// Predicted time of a sequence of launches (a plan), and how much of it rests on fallbacks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanEstimate {
    /// Sum of all predictions (ns).
    pub total_ns: f64,
    /// Part predicted from measurements of the exact keys.
    pub measured_ns: f64,
    /// Part predicted by fallbacks (fits, rooflines, guesses).
    pub fallback_ns: f64,
    /// Launches predicted by a fallback.
    pub fallback_steps: usize,
    /// One prediction per launch, in order.
    pub steps: Vec<Prediction>,
}

impl PlanEstimate {
    /// Fraction of the predicted time that rests on fallbacks (0 for an empty plan).
    pub fn fallback_share(&self) -> f64 {
        if self.total_ns > 0.0 {
            self.fallback_ns / self.total_ns
        } else {
            0.0
        }
    }
}

/// On-disk layout (version [`FORMAT_VERSION`]).
#[derive(Serialize, Deserialize)]
struct ProfileFile {
    format: u32,
    fingerprint: Fingerprint,
    rooflines: Vec<Roofline>,
    links: Vec<LinkEntry>,
    entries: Vec<Entry>,
    /// Fingerprints of the devices other than the machine's CPU (`Device::fingerprint`), by
    /// device name: their measurements hold only for that device, driver and kernel build.
    #[serde(default)]
    devices: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    key: ProfileKey,
    measurement: Measurement,
}

#[derive(Serialize, Deserialize)]
struct LinkEntry {
    key: LinkKey,
    link: Link,
}

type FitKey = (String, String, usize);

/// All measurements of one machine (one [`Fingerprint`]): kernel keys, rooflines per
/// (device, threads) and device links. Keys are normalised on every insert and lookup.
#[derive(Debug, Clone)]
pub struct Profile {
    fingerprint: Fingerprint,
    rooflines: Vec<Roofline>,
    links: Vec<(LinkKey, Link)>,
    entries: Vec<(ProfileKey, Measurement)>,
    devices: std::collections::BTreeMap<String, String>,
    index: HashMap<ProfileKey, usize>,
    /// Fits of families with points, computed on first prediction, reset on change.
    fits: OnceLock<HashMap<FitKey, FamilyFit>>,
}

impl Profile {
    /// An empty profile for `fingerprint`.
    pub fn new(fingerprint: Fingerprint) -> Profile {
        Profile { fingerprint, rooflines: Vec::new(), links: Vec::new(), entries: Vec::new(), devices: Default::default(), index: HashMap::new(), fits: OnceLock::new() }
    }

    /// The fingerprint the measurements of device `name` were taken under, for devices other
    /// than the machine's CPU (whose fingerprint is the profile's own).
    pub fn device_fingerprint(&self, name: &str) -> Option<&str> {
        self.devices.get(name).map(String::as_str)
    }

    /// Records that the measurements of device `name` are taken under `fingerprint`. When it
    /// differs from the one recorded, every measurement, roofline and link of that device is
    /// dropped first (they are of another device, driver or kernel build); returns how many
    /// kernel measurements were dropped.
    pub fn bind_device(&mut self, name: &str, fingerprint: &str) -> usize {
        if self.devices.get(name).is_some_and(|f| f == fingerprint) {
            return 0;
        }
        let had = self.devices.contains_key(name);
        self.devices.insert(name.to_string(), fingerprint.to_string());
        if !had {
            return 0;
        }
        let before = self.entries.len();
        let kept: Vec<(ProfileKey, Measurement)> = self.entries.drain(..).filter(|(k, _)| k.device != name).collect();
        self.index.clear();
        for (k, m) in kept {
            self.insert(k, m);
        }
        self.rooflines.retain(|r| r.device != name);
        self.links.retain(|(k, _)| k.src != name && k.dst != name);
        self.fits = OnceLock::new();
        before - self.entries.len()
    }

    /// A what-if profile for planning experiments: this profile plus, for device `to` =
    /// (name, workers, fingerprint), every measurement and roofline of `from` = (name,
    /// workers) with its times divided by `speedup`, and `links` (`(src, dst, link)`) set.
    /// The copied entries are measurements of another device scaled, not of `to`: for asking
    /// what the planner would do with such a device.
    pub fn what_if(&self, from: (&str, usize), to: (&str, usize, &str), speedup: f64, links: &[(String, String, Link)]) -> Profile {
        let ((from, from_threads), (to, to_threads, to_fingerprint)) = (from, to);
        let mut p = self.clone();
        // Whatever was measured on `to` itself is replaced.
        p.entries.retain(|(k, _)| k.device != to);
        p.index = p.entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
        p.rooflines.retain(|r| r.device != to);
        p.links.retain(|(k, _)| k.src != to && k.dst != to);
        p.fits = OnceLock::new();
        p.devices.insert(to.to_string(), to_fingerprint.to_string());
        let scale =
            |m: &Measurement| Measurement { median_ns: m.median_ns / speedup, min_ns: m.min_ns / speedup, p90_ns: m.p90_ns / speedup, mad_ns: m.mad_ns / speedup, ..m.clone() };
        for (k, m) in &self.entries {
            if k.device == from && k.threads == from_threads {
                let mut k2 = k.clone();
                k2.device = to.to_string();
                k2.threads = to_threads;
                p.insert(k2, scale(m));
            }
        }
        for r in &self.rooflines {
            if r.device == from && r.threads == from_threads {
                p.set_roofline(Roofline {
                    device: to.to_string(),
                    threads: to_threads,
                    launch_ns: r.launch_ns / speedup,
                    bytes_per_ns: r.bytes_per_ns * speedup,
                    flops_per_ns: r.flops_per_ns * speedup,
                });
            }
        }
        for (src, dst, l) in links {
            p.set_link(LinkKey { src: src.clone(), dst: dst.clone() }, l.clone());
        }
        p
    }

    /// The fingerprint the measurements were taken under.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// Measured keys in measurement order.
    pub fn entries(&self) -> &[(ProfileKey, Measurement)] {
        &self.entries
    }

    /// Number of measured keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no key is measured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The measurement of `key` (normalised first), if any.
    pub fn get(&self, key: &ProfileKey) -> Option<&Measurement> {
        self.index.get(&key.clone().normalized()).map(|&i| &self.entries[i].1)
    }

    /// True if `key` (normalised) is measured.
    pub fn contains(&self, key: &ProfileKey) -> bool {
        self.get(key).is_some()
    }

    /// Records a measurement of `key` (normalised), replacing an earlier one.
    pub fn insert(&mut self, key: ProfileKey, m: Measurement) {
        let key = key.normalized();
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = m,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, m));
            }
        }
        self.fits = OnceLock::new();
    }

    /// Measured rooflines.
    pub fn rooflines(&self) -> &[Roofline] {
        &self.rooflines
    }

    /// The roofline of `device` at `threads`, if measured.
    pub fn roofline(&self, device: &str, threads: usize) -> Option<&Roofline> {
        self.rooflines.iter().find(|r| r.device == device && r.threads == threads)
    }

    /// Records a roofline, replacing the one of the same (device, threads).
    pub fn set_roofline(&mut self, r: Roofline) {
        self.rooflines.retain(|x| !(x.device == r.device && x.threads == r.threads));
        self.rooflines.push(r);
        self.rooflines.sort_by(|a, b| (&a.device, a.threads).cmp(&(&b.device, b.threads)));
        self.fits = OnceLock::new();
    }

    /// Measured device links.
    pub fn links(&self) -> &[(LinkKey, Link)] {
        &self.links
    }

    /// Records a link, replacing the one of the same device pair.
    pub fn set_link(&mut self, key: LinkKey, link: Link) {
        self.links.retain(|(k, _)| *k != key);
        self.links.push((key, link));
        self.links.sort_by(|a, b| a.0.cmp(&b.0));
    }

    /// Predicted nanoseconds of copying `bytes` from device `src` to `dst`: 0 on the same
    /// device, `None` when the link was never measured.
    pub fn predict_copy(&self, src: &str, dst: &str, bytes: usize) -> Option<f64> {
        if src == dst {
            return Some(0.0);
        }
        self.links.iter().find(|(k, _)| k.src == src && k.dst == dst).map(|(_, l)| l.predict(bytes))
    }

    /// The roofline used for `(device, threads)` and whether it was measured for exactly
    /// that: else the same device's nearest thread count, else [`Roofline::guess`].
    fn roofline_for(&self, device: &str, threads: usize) -> (Roofline, bool) {
        if let Some(r) = self.roofline(device, threads) {
            return (r.clone(), true);
        }
        let near = self.rooflines.iter().filter(|r| r.device == device).min_by_key(|r| r.threads.abs_diff(threads));
        (near.cloned().unwrap_or_else(|| Roofline::guess(device, threads)), false)
    }

    fn fit_table(&self) -> &HashMap<FitKey, FamilyFit> {
        self.fits.get_or_init(|| {
            let mut groups: HashMap<FitKey, Vec<(crate::Work, f64)>> = HashMap::new();
            for (k, m) in &self.entries {
                groups.entry((k.family(), k.device.clone(), k.threads)).or_default().push((work(k), m.median_ns));
            }
            groups
                .into_iter()
                .filter_map(|(fk, pts)| {
                    let (roof, exact) = self.roofline_for(&fk.1, fk.2);
                    exact.then(|| {
                        let f = FamilyFit::fit(&fk.0, &roof, &pts);
                        (fk, f)
                    })
                })
                .collect()
        })
    }

    /// The fits of every family with measured points on a measured roofline, sorted by
    /// (family, device, threads) (for reports).
    pub fn fits(&self) -> Vec<FamilyFit> {
        let mut v: Vec<FamilyFit> = self.fit_table().values().cloned().collect();
        v.sort_by(|a, b| (&a.family, &a.device, a.threads).cmp(&(&b.family, &b.device, b.threads)));
        v
    }

    /// Predicted launch time of `key`: its measurement if it was measured, otherwise the
    /// fallback of its family (see [`FamilyFit`]).
    pub fn predict(&self, key: &ProfileKey) -> Prediction {
        let key = key.clone().normalized();
        let family = key.family();
        if let Some(&i) = self.index.get(&key) {
            return Prediction { ns: self.entries[i].1.median_ns, source: Source::Measured, family };
        }
        let w = work(&key);
        let (roof, exact) = self.roofline_for(&key.device, key.threads);
        if !exact {
            let ns = FamilyFit::fit(&family, &roof, &[]).predict(&roof, w);
            return Prediction { ns, source: Source::Guess, family };
        }
        match self.fit_table().get(&(family.clone(), key.device.clone(), key.threads)) {
            Some(f) => Prediction { ns: f.predict(&roof, w), source: Source::Fitted { points: f.points }, family },
            None => Prediction { ns: FamilyFit::fit(&family, &roof, &[]).predict(&roof, w), source: Source::Roofline, family },
        }
    }

    /// Predictions of a sequence of launches and their split into measured and fallback time.
    pub fn estimate<'a>(&self, keys: impl IntoIterator<Item = &'a ProfileKey>) -> PlanEstimate {
        let mut e = PlanEstimate::default();
        for k in keys {
            let p = self.predict(k);
            e.total_ns += p.ns;
            if p.source.is_fallback() {
                e.fallback_ns += p.ns;
                e.fallback_steps += 1;
            } else {
                e.measured_ns += p.ns;
            }
            e.steps.push(p);
        }
        e
    }

    /// [`Profile::estimate`] of every step of `plan` run with `threads` workers.
    pub fn estimate_plan(&self, plan: &Plan, threads: usize) -> PlanEstimate {
        let keys: Vec<ProfileKey> = plan.steps.iter().map(|s| ProfileKey::from_step(plan, s, threads)).collect();
        self.estimate(&keys)
    }

    /// The profile as pretty JSON (the file format).
    pub fn to_json(&self) -> String {
        let file = ProfileFile {
            format: FORMAT_VERSION,
            fingerprint: self.fingerprint.clone(),
            rooflines: self.rooflines.clone(),
            links: self.links.iter().map(|(key, link)| LinkEntry { key: key.clone(), link: link.clone() }).collect(),
            entries: self.entries.iter().map(|(key, m)| Entry { key: key.clone(), measurement: m.clone() }).collect(),
            devices: self.devices.clone(),
        };
        serde_json::to_string_pretty(&file).unwrap_or_default()
    }

    /// Parses a profile (any fingerprint; `path` only names the source in errors).
    pub fn from_json(text: &str, path: &Path) -> Result<Profile, ProfileError> {
        let bad = |detail: String| ProfileError::Format { path: path.to_path_buf(), detail };
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        match v.get("format").and_then(|f| f.as_u64()) {
            Some(f) if f == u64::from(FORMAT_VERSION) => {}
            Some(f) => return Err(bad(format!("format version {f}, this build reads {FORMAT_VERSION}"))),
            None => return Err(bad("no format version".into())),
        }
        let file: ProfileFile = serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
        let mut p = Profile::new(file.fingerprint);
        p.rooflines = file.rooflines;
        p.links = file.links.into_iter().map(|l| (l.key, l.link)).collect();
        p.devices = file.devices;
        for e in file.entries {
            p.insert(e.key, e.measurement);
        }
        Ok(p)
    }

    /// Writes the profile to `path` atomically (a temporary file in the same directory,
    /// synced, then renamed over `path`), creating the directory if needed.
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        write_atomically(path, self.to_json().as_bytes())
    }

    /// Reads a profile and checks it was measured under `current`: a different fingerprint
    /// is [`ProfileError::Stale`] with one line per differing field (`field: profile vs this
    /// machine`).
    pub fn load(path: &Path, current: &Fingerprint) -> Result<Profile, ProfileError> {
        let p = Profile::load_any(path)?;
        let diff = p.fingerprint.diff(current);
        if !diff.is_empty() {
            return Err(ProfileError::Stale { path: path.to_path_buf(), diff });
        }
        Ok(p)
    }

    /// Reads a profile whatever its fingerprint (to inspect or report on it; never to plan
    /// with without checking [`Profile::fingerprint`]).
    pub fn load_any(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io { path: path.to_path_buf(), source })?;
        Profile::from_json(&text, path)
    }

    /// [`Profile::load`], or an empty profile for `current` when `path` does not exist.
    pub fn load_or_new(path: &Path, current: &Fingerprint) -> Result<Profile, ProfileError> {
        match Profile::load(path, current) {
            Err(ProfileError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(Profile::new(current.clone())),
            r => r,
        }
    }
}
