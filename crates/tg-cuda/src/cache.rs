//! The compiled-program cache on disk: one file per (kernel source hash, target architecture,
//! NVRTC version, output kind) in `<cache base>/cuda/`. Entries end with a checksum and a
//! magic tag, are written atomically (a temporary file, then a rename), and one that is
//! unreadable, truncated or corrupt is ignored (and rebuilt by the caller).

use std::path::{Path, PathBuf};

use crate::nvrtc::Output;

/// The trailer's tag (and format version).
const MAGIC: &[u8; 8] = b"tgcuda01";

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The cache file of a program: `tg_kernels-<source hash>-<target>-nvrtc<major>.<minor>.<ptx|cubin>`.
pub fn entry_path(dir: &Path, source_hash: u64, target: &str, nvrtc: (i32, i32), output: Output) -> PathBuf {
    let ext = match output {
        Output::Ptx => "ptx",
        Output::Cubin => "cubin",
    };
    dir.join(format!("{}-{source_hash:016x}-{target}-nvrtc{}.{}.{ext}", tg_gpu::PROGRAM_NAME, nvrtc.0, nvrtc.1))
}

/// The cached bytes at `path`, or `None` when missing, unreadable or corrupt.
pub fn load(path: &Path) -> Option<Vec<u8>> {
    let mut bytes = std::fs::read(path).ok()?;
    if bytes.len() < 16 || &bytes[bytes.len() - 8..] != MAGIC {
        return None;
    }
    let body = bytes.len() - 16;
    let mut sum = [0u8; 8];
    sum.copy_from_slice(&bytes[body..body + 8]);
    if u64::from_le_bytes(sum) != fnv1a(&bytes[..body]) {
        return None;
    }
    bytes.truncate(body);
    Some(bytes)
}

/// Writes `bytes` to `path` atomically (a temporary file in the same folder, then a rename).
pub fn store(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().ok_or_else(|| format!("{}: no parent folder", path.display()))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let tmp = path.with_extension(format!("tmp.{}.{nanos}", std::process::id()));
    let mut data = Vec::with_capacity(bytes.len() + 16);
    data.extend_from_slice(bytes);
    data.extend_from_slice(&fnv1a(bytes).to_le_bytes());
    data.extend_from_slice(MAGIC);
    let r = std::fs::write(&tmp, &data).and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}: {e}", path.display()));
    }
    prune(dir);
    Ok(())
}

/// Most entries kept in a cache folder: storing one more removes the least recently written
/// (every edit of the kernel sources makes new entries).
pub const MAX_ENTRIES: usize = 24;

/// Removes the oldest entries of `dir` (files named `tg_kernels-*`) beyond [`MAX_ENTRIES`];
/// errors are ignored.
pub fn prune(dir: &Path) {
    let prefix = format!("{}-", tg_gpu::PROGRAM_NAME);
    let mut entries: Vec<(std::time::SystemTime, PathBuf)> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect(),
        Err(_) => return,
    };
    if entries.len() <= MAX_ENTRIES {
        return;
    }
    entries.sort();
    for (_, p) in &entries[..entries.len() - MAX_ENTRIES] {
        let _ = std::fs::remove_file(p);
    }
}

/// Removes a (bad) entry; errors are ignored.
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_corruption_is_ignored() {
        let dir = std::env::temp_dir().join(format!("tg-cuda-cache-{}", std::process::id()));
        let p = entry_path(&dir, 0x1234, "sm_90", (12, 9), Output::Cubin);
        assert!(p.file_name().unwrap().to_string_lossy().ends_with("0000000000001234-sm_90-nvrtc12.9.cubin"));
        assert_eq!(load(&p), None);
        store(&p, b"hello cubin").unwrap();
        assert_eq!(load(&p).as_deref(), Some(&b"hello cubin"[..]));
        // A flipped byte, a truncation, garbage: all ignored.
        let mut raw = std::fs::read(&p).unwrap();
        raw[0] ^= 1;
        std::fs::write(&p, &raw).unwrap();
        assert_eq!(load(&p), None);
        std::fs::write(&p, &raw[..raw.len() - 3]).unwrap();
        assert_eq!(load(&p), None);
        std::fs::write(&p, b"x").unwrap();
        assert_eq!(load(&p), None);
        store(&p, b"").unwrap();
        assert_eq!(load(&p).as_deref(), Some(&b""[..]));
        // No temporary files are left behind.
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).collect();
        assert_eq!(left.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn old_entries_are_pruned() {
        let dir = std::env::temp_dir().join(format!("tg-cuda-prune-{}", std::process::id()));
        for i in 0..MAX_ENTRIES as u64 + 3 {
            store(&entry_path(&dir, i, "sm_90", (12, 9), Output::Cubin), b"x").unwrap();
            // Distinct modification times, oldest first.
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::write(dir.join("unrelated"), b"kept").unwrap();
        store(&entry_path(&dir, 999, "sm_90", (12, 9), Output::Cubin), b"x").unwrap();
        let names: Vec<String> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), MAX_ENTRIES + 1, "{names:?}");
        assert!(names.iter().any(|n| n == "unrelated") && names.iter().any(|n| n.contains("00000000000003e7")), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("-0000000000000000-")), "the oldest is gone: {names:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
