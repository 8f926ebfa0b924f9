//! Where integration tests find data that lives outside the repository, and what they do
//! when it is missing. Shared by the crates' tests through
//! `#[path = "../../../tests/support/data.rs"] mod data;` (no crate of its own).
//!
//! The shared data sets (`extraction-gym`, `minimalloc`) lie in `../shared/data/` next to
//! the repository where CI runs; `scripts/test.sh` exports that folder, made absolute, as
//! `TG_DATA_DIR`. A test's own variable (e.g. `TG_EXTRACTION_GYM_DATA`) names the set's
//! folder directly and wins. Missing data fails the test when `CI` is set, and otherwise
//! skips it with a `SKIPPED:` line saying what is missing and where it was looked for.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// True under CI: `CI` is set to anything but the empty string, `0` or `false`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder of the shared data set `set` and how it was chosen: `$var` when set, else
/// `$TG_DATA_DIR/<set>`, else `<repository>/../shared/data/<set>`.
pub fn shared_dir(var: &str, set: &str) -> (PathBuf, String) {
    if let Some(d) = std::env::var_os(var).filter(|d| !d.is_empty()) {
        return (PathBuf::from(d), format!("from {var}"));
    }
    if let Some(d) = std::env::var_os("TG_DATA_DIR").filter(|d| !d.is_empty()) {
        return (PathBuf::from(d).join(set), "from TG_DATA_DIR".to_string());
    }
    (repo_root().join("../shared/data").join(set), format!("the default; neither {var} nor TG_DATA_DIR is set"))
}

/// What a test does when data it needs is absent: under CI it fails with `what` and
/// `looked` (where it was looked for) and `hint`; otherwise it prints `SKIPPED: ...` and
/// the caller returns.
pub fn missing(what: &str, looked: &str, hint: &str) {
    if in_ci() {
        panic!("{what} not found at {looked} ({hint}); CI is set, so missing data is a failure");
    }
    eprintln!("SKIPPED: {what} not found at {looked} ({hint})");
}

/// `file` of the shared data set `set` (see [`shared_dir`]) when it exists; otherwise
/// [`missing`] (a failure under CI) and `None`.
pub fn shared_file(var: &str, set: &str, file: &str) -> Option<PathBuf> {
    let (dir, how) = shared_dir(var, set);
    let path = dir.join(file);
    if path.is_file() {
        return Some(path);
    }
    missing(&format!("{set} data file {file}"), &format!("{} ({how})", path.display()), &format!("set {var} to the folder or TG_DATA_DIR to the folder holding {set}/; scripts/test.sh sets TG_DATA_DIR"));
    None
}
