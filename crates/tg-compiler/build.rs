//! Build identity for the on-disk plan cache: a hash of every Rust source file of the
//! workspace's crates, so that a plan compiled by other compiler or kernel code is never
//! loaded (its cache key differs). Cargo reruns this when any of those sources change.

use std::path::Path;

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") || p.file_name().is_some_and(|n| n == "Cargo.toml") {
            files.push(p);
        }
    }
}

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let crates = Path::new(&manifest).join("..");
    let mut files = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&crates) {
        for e in rd.flatten() {
            let c = e.path();
            for sub in ["src", "build.rs", "Cargo.toml"] {
                let p = c.join(sub);
                if p.is_dir() {
                    println!("cargo:rerun-if-changed={}", p.display());
                    walk(&p, &mut files);
                } else if p.is_file() {
                    println!("cargo:rerun-if-changed={}", p.display());
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in &files {
        fnv(&mut h, f.strip_prefix(&crates).unwrap_or(f).to_string_lossy().as_bytes());
        if let Ok(bytes) = std::fs::read(f) {
            fnv(&mut h, &bytes);
        }
    }
    println!("cargo:rustc-env=TG_SOURCE_HASH={h:016x}");
}
