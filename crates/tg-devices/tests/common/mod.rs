//! Shared by the device tests: opening a device, or saying it was skipped.
#![allow(dead_code)]

use std::sync::Arc;
use tg_runtime::Device;

/// True under CI (`CI` set, not empty, `0` or `false`), where a missing device is a failure.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Device `name` with one worker, or `None` after printing `SKIPPED` (a failure under CI).
pub fn open_or_skip(name: &str) -> Option<Arc<dyn Device>> {
    match tg_devices::open(name, 1) {
        Ok(d) => Some(d),
        Err(e) => {
            assert!(!ci(), "no {name} device under CI: {e}");
            eprintln!("SKIPPED: no {name} device ({e})");
            None
        }
    }
}
