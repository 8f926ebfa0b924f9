//! The first-use measurement of a device (roofline and links with the CPU), as a compile for
//! several devices takes it when the device has no measured kernel times:
//! `cargo run --release -p tg-profile --example first_use -- opencl [CACHE_DIR]`. Without a
//! cache directory it measures into a fresh temporary one (so always measures).

use std::time::Instant;
use tg_profile::{load_or_measure, FirstUseOptions, Origin};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "opencl".into());
    let (dir, temp) = match args.next() {
        Some(d) => (std::path::PathBuf::from(d), false),
        None => (std::env::temp_dir().join(format!("tg-first-use-example-{}", std::process::id())), true),
    };
    let home = tg_devices::open("cpu", 1)?;
    let dev = tg_devices::open(&name, 1)?;
    let t0 = Instant::now();
    let (f, origin, path) = load_or_measure(&*home, &*dev, &FirstUseOptions::in_dir(dir.clone()))?;
    let how = match origin {
        Origin::Cached => "read from the cache".to_string(),
        Origin::Measured { replaced } => format!("measured in {:.2} s{}", f.seconds, replaced.map(|r| format!(" (the cached one was {r})")).unwrap_or_default()),
    };
    println!("{}: {} ({how}; {:.2} s in all), {}", dev.name(), f.summary(), t0.elapsed().as_secs_f64(), path.display());
    if temp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
