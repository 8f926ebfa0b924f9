//! Launch configurations of GPU devices (`tg_devices::launch`): stored per device, applied on
//! open, bad files refused with their path; `tune` measures every field and leaves a valid
//! configuration. Runs on the OpenCL device (PoCL in CI).

use tg_devices::launch;

/// The OpenCL device, or `None` (after saying so) without one; under `CI` its absence fails.
fn opencl() -> Option<std::sync::Arc<dyn tg_runtime::Device>> {
    match tg_devices::open("opencl", 1) {
        Ok(d) => Some(d),
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "CI is set and there is no OpenCL device: {e}");
            eprintln!("SKIPPED: no OpenCL device ({e})");
            None
        }
    }
}

#[test]
fn stored_configurations_apply_on_open_and_bad_files_are_refused() {
    let dir = std::env::temp_dir().join(format!("tg-launch-config-{}", std::process::id()));
    // The only test of this binary that reads the cache folder.
    std::env::set_var("TG_CACHE_DIR", &dir);
    let Some(dev) = opencl() else { return };
    let start: tg_gpu::Tuning = serde_json::from_str(&dev.launch_config().expect("a launch configuration")).expect("tuning json");
    assert!(dev.fingerprint().contains(" | launch "), "{}", dev.fingerprint());
    assert!(!launch::base_fingerprint(&dev.fingerprint()).contains(" | launch "));

    // Stored for this device: the next open applies it, and the fingerprint says so.
    let mut chosen = start.clone();
    chosen.row_group = 64;
    chosen.elementwise_group = 128;
    let path = launch::save(&dev.fingerprint(), &serde_json::to_string(&chosen).expect("json")).expect("save");
    assert!(path.starts_with(&dir), "{}", path.display());
    let again = tg_devices::open("opencl", 1).expect("reopen");
    let got: tg_gpu::Tuning = serde_json::from_str(&again.launch_config().expect("config")).expect("json");
    assert_eq!(got, chosen);
    assert_ne!(again.fingerprint(), dev.fingerprint(), "the launch part of the fingerprint changes with the configuration");
    assert_eq!(launch::base_fingerprint(&again.fingerprint()), launch::base_fingerprint(&dev.fingerprint()));

    // A malformed file: an error naming it; the device keeps its configuration.
    std::fs::write(&path, "{ not json").expect("write");
    let fresh = tg_devices::open("opencl", 1).expect("open with a bad file");
    let got: tg_gpu::Tuning = serde_json::from_str(&fresh.launch_config().expect("config")).expect("json");
    assert_eq!(got, start);
    let e = launch::apply_saved(&*fresh).expect_err("a malformed file is an error");
    assert!(e.contains(&path.display().to_string()) && e.contains("not a launch configuration"), "{e}");

    // A configuration out of range is refused by the device.
    let mut bad = serde_json::to_value(&start).expect("json");
    bad["mv_lanes"] = serde_json::json!(3);
    std::fs::write(&path, serde_json::to_string(&serde_json::json!({ "fingerprint": launch::base_fingerprint(&dev.fingerprint()), "config": bad })).expect("json")).expect("write");
    let e = launch::apply_saved(&*fresh).expect_err("an invalid configuration is an error");
    assert!(e.contains("mv_lanes 3"), "{e}");

    // Stored for another device under this file name: refused.
    std::fs::write(&path, serde_json::to_string(&serde_json::json!({ "fingerprint": "another device", "config": start })).expect("json")).expect("write");
    let e = launch::apply_saved(&*fresh).expect_err("a foreign file is an error");
    assert!(e.contains("another device"), "{e}");

    // Tuning measures every field it can and leaves a valid configuration on the device.
    let opts = tg_profile::BenchOptions::quick();
    let r = launch::tune(&*fresh, 1, &opts).expect("tune");
    assert!(r.fields.len() >= launch::FIELDS.len() - 1, "{:?}", r.fields.iter().map(|f| f.field).collect::<Vec<_>>());
    for f in &r.fields {
        assert!(f.candidates.iter().any(|(_, ns)| ns.is_finite() && *ns > 0.0), "{}: no candidate measured: {:?}", f.field, f.candidates);
    }
    let tuned: tg_gpu::Tuning = serde_json::from_str(&fresh.launch_config().expect("config")).expect("json");
    tuned.check().expect("a valid configuration");
    assert_eq!(serde_json::to_string(&tuned).expect("json"), r.config);
    let _ = std::fs::remove_dir_all(&dir);
}
