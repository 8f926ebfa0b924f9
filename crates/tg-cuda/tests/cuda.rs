//! The CUDA device without a GPU: every kernel compiles (NVRTC + ptxas) for the target
//! architectures, launches match the kernels' parameters, a missing driver is an error that
//! names libcuda (never a panic), and NVRTC's compile errors carry the log.
//!
//! NVRTC and ptxas come from `scripts/fetch_cuda_tools.py` (`scripts/test.sh` exports
//! `TG_NVRTC` / `TG_PTXAS`); without them these tests print `SKIPPED: …` and pass, except
//! under `CI`, where they fail. Launching kernels needs a GPU: that is the backend-ops table's
//! (`crates/tg-devices/tests/backend_ops.rs`), which runs on every CUDA device present.

use tg_cuda::{compile_report, CudaDevice, Output, Signatures};
use tg_ir::{BinaryOp, DType};
use tg_runtime::{Kernel, Layout};

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Skips (or, under CI, fails) when the CUDA tools are missing.
fn tools_missing(e: &str) {
    if ci() {
        panic!("CI is set and the CUDA tools are missing (run scripts/fetch_cuda_tools.py): {e}");
    }
    println!("SKIPPED: {e}");
}

#[test]
fn every_kernel_compiles_for_sm80_and_sm90() {
    let archs: Vec<String> = vec!["sm_80".into(), "sm_90".into()];
    let rows = match compile_report(&archs) {
        Ok(r) => r,
        Err(e) => return tools_missing(&e),
    };
    assert_eq!(rows.len(), tg_gpu::KERNEL_NAMES.len() * archs.len());
    for a in &archs {
        for k in tg_gpu::KERNEL_NAMES {
            let n = rows.iter().filter(|r| &r.arch == a && r.kernel == k).count();
            assert_eq!(n, 1, "{k} on {a}: {n} rows");
        }
    }
    let failed: Vec<String> = rows.iter().filter(|r| !r.ok).map(|r| format!("{} {}: {}", r.kernel, r.arch, r.error.as_deref().unwrap_or("?"))).collect();
    assert!(failed.is_empty(), "{} failed:\n{}", failed.len(), failed.join("\n"));
    for r in &rows {
        assert!(r.registers > 0 && r.registers <= 255, "{} {}: {} registers", r.kernel, r.arch, r.registers);
        assert!(r.shared_bytes <= 48 << 10, "{} {}: {} bytes of static shared memory", r.kernel, r.arch, r.shared_bytes);
    }
    let max = rows.iter().max_by_key(|r| r.registers).map(|r| format!("{} {} registers ({})", r.kernel, r.registers, r.arch)).unwrap_or_default();
    let spills: Vec<String> = rows.iter().filter(|r| r.spill_stores + r.spill_loads > 0).map(|r| format!("{} {}", r.kernel, r.arch)).collect();
    println!(
        "{} kernels x {} archs compiled; most registers: {max}; spills: {}",
        tg_gpu::KERNEL_NAMES.len(),
        archs.len(),
        if spills.is_empty() { "none".into() } else { spills.join(", ") }
    );
    // The rows serialize (what `tg devices --compile cuda --json` prints).
    let json = serde_json::to_value(&rows[0]).expect("json");
    assert!(json["kernel"].is_string() && json["registers"].is_u64() && json["ok"].is_boolean());
}

#[test]
fn launches_match_the_kernels_parameters() {
    let sigs = match Signatures::for_arch("sm_90") {
        Ok(s) => s,
        Err(e) => return tools_missing(&e),
    };
    let f = |s: &[usize]| Layout::contiguous(s, DType::F32);
    // A fill, a broadcast add (strided operands, dims8 by value), a softmax (row kernel).
    let n = sigs.check(&Kernel::Fill { bits: 1.5f64.to_bits() }, &[], &f(&[3, 5])).expect("fill");
    assert_eq!(n, 1);
    let n = sigs.check(&Kernel::Binary(BinaryOp::Add), &[f(&[4, 6]), f(&[4, 6])], &f(&[4, 6])).expect("add");
    assert_eq!(n, 1);
    let n = sigs.check(&Kernel::Softmax, &[f(&[7, 33])], &f(&[7, 33])).expect("softmax");
    assert_eq!(n, 1);
}

#[test]
fn no_driver_is_an_error_naming_libcuda() {
    match tg_cuda::driver_version() {
        Err(e) => {
            // No driver here (CI, development machines): errors, not panics, saying what
            // was looked for.
            let open = CudaDevice::open(0).err().expect("open without a driver must fail");
            assert!(open.contains("libcuda") && open.contains("LD_LIBRARY_PATH"), "{open}");
            assert!(open.starts_with("cuda:0"), "{open}");
            let list = tg_cuda::list().expect_err("list without a driver must fail");
            assert!(list.contains("libcuda"), "{list}");
            assert!(e.contains("libcuda"), "{e}");
            println!("no CUDA driver: {list}");
        }
        Ok(v) => {
            // A driver: an absent device names the present ones.
            let err = CudaDevice::open(97).err().expect("cuda:97 must not exist");
            assert!(err.contains("cuda:97") && err.contains("no such CUDA device"), "{err}");
            println!("CUDA driver {}.{}: {err}", v.0, v.1);
        }
    }
}

#[test]
fn an_nvrtc_compile_error_returns_the_log() {
    let src = "extern \"C\" __global__ void broken(float* p) { p[0] = undefined_name_here; }\n";
    match tg_cuda::nvrtc::compile("broken_test", src, "compute_80", Output::Ptx) {
        Err(tg_cuda::NvrtcError::NotFound(e)) => tools_missing(&e),
        Err(e @ tg_cuda::NvrtcError::Compile { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("broken_test") && msg.contains("undefined_name_here") && msg.contains("compute_80"), "{msg}");
        }
        Err(e) => panic!("expected a compile error, got {e}"),
        Ok(_) => panic!("a broken program compiled"),
    }
    // And a good one compiles to PTX and to a CUBIN.
    let good = "extern \"C\" __global__ void twice(float* p) { p[threadIdx.x] *= 2.0f; }\n";
    match tg_cuda::nvrtc::compile("good", good, "compute_80", Output::Ptx) {
        Err(tg_cuda::NvrtcError::NotFound(_)) => {}
        Err(e) => panic!("{e}"),
        Ok(ptx) => {
            assert!(String::from_utf8_lossy(&ptx).contains(".entry twice"));
            let cubin = tg_cuda::nvrtc::compile("good", good, "sm_80", Output::Cubin).expect("cubin");
            assert_eq!(&cubin[..4], b"\x7fELF");
        }
    }
}
