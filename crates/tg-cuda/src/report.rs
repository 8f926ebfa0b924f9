//! What the kernels compile to, without a GPU: NVRTC's PTX assembled by `ptxas -v` for each
//! architecture (registers, spills, shared memory, stack per kernel), and the PTX parameter
//! lists every launch of `tg_gpu::plan` is checked against ([`Signatures`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tg_runtime::{Kernel, Layout};

use crate::marshal::marshal;
use crate::nvrtc::{nvrtc, Nvrtc};
use crate::paths;
use crate::program::{parse_arch, ptx};

/// One kernel on one architecture, as `ptxas -v` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CompileRow {
    /// Kernel function name (one of `tg_gpu::KERNEL_NAMES`).
    pub kernel: String,
    /// Real architecture (`sm_90`).
    pub arch: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of register spill stores.
    pub spill_stores: u64,
    /// Bytes of register spill loads.
    pub spill_loads: u64,
    /// Bytes of static shared memory per block.
    pub shared_bytes: u64,
    /// Bytes of stack frame per thread.
    pub stack_bytes: u64,
    /// Whether the kernel compiled and assembled.
    pub ok: bool,
    /// Why not, when not.
    pub error: Option<String>,
}

impl CompileRow {
    fn failed(kernel: &str, arch: &str, error: String) -> CompileRow {
        CompileRow {
            kernel: kernel.to_string(),
            arch: arch.to_string(),
            registers: 0,
            spill_stores: 0,
            spill_loads: 0,
            shared_bytes: 0,
            stack_bytes: 0,
            ok: false,
            error: Some(error),
        }
    }
}

/// The CUDA release of a `ptxas` (`ptxas --version`: `… release 12.9, V12.9.86`).
fn ptxas_release(path: &Path) -> Result<(i32, i32), String> {
    let out = Command::new(path).arg("--version").output().map_err(|e| format!("cannot run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rel = text.split("release ").nth(1).ok_or_else(|| format!("no `release X.Y` in its --version output: {}", text.trim()))?;
    let ver = rel.split(|c: char| c == ',' || c.is_whitespace()).next().unwrap_or("");
    let mut it = ver.split('.').map(|s| s.parse::<i32>());
    match (it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b))) => Ok((a, b)),
        _ => Err(format!("cannot read the release in `{}`", text.trim())),
    }
}

/// The folders searched for `ptxas` after `TG_PTXAS` and `PATH`.
fn ptxas_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for v in paths::tools_versions() {
        dirs.push(v.join("nvidia/cuda_nvcc/bin"));
        dirs.push(v.join("nvidia/cu13/bin"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    for site in paths::python_site_dirs().into_iter().filter(|d| d.join("nvidia").is_dir()) {
        dirs.push(site.join("nvidia/cuda_nvcc/bin"));
        dirs.push(site.join("nvidia/cu13/bin"));
    }
    dirs
}

/// Finds a `ptxas` of NVRTC's major version: `TG_PTXAS`, else `PATH`, else the tools folder
/// of `scripts/fetch_cuda_tools.py` and other known folders. An error names `TG_PTXAS` and
/// every place looked.
pub fn find_ptxas(nvrtc_version: (i32, i32)) -> Result<PathBuf, String> {
    let want = nvrtc_version.0;
    if let Some(p) = std::env::var_os("TG_PTXAS") {
        let p = PathBuf::from(p);
        let rel = ptxas_release(&p).map_err(|e| format!("TG_PTXAS={}: {e}", p.display()))?;
        if rel.0 != want {
            return Err(format!(
                "TG_PTXAS={} is ptxas of CUDA {}.{}, but NVRTC is {}.{}: the major versions must match",
                p.display(),
                rel.0,
                rel.1,
                nvrtc_version.0,
                nvrtc_version.1
            ));
        }
        return Ok(p);
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("ptxas")));
    }
    let dirs = ptxas_dirs();
    candidates.extend(dirs.iter().map(|d| d.join("ptxas")));
    // The tools folder is named even while it is empty.
    let mut looked = vec![format!("{}/<version>/nvidia/cuda_nvcc/bin", paths::tools_dir().display())];
    looked.extend(dirs.iter().map(|d| d.display().to_string()));
    looked.dedup();
    let mut mismatched = Vec::new();
    for c in &candidates {
        if !c.is_file() {
            continue;
        }
        match ptxas_release(c) {
            Ok(rel) if rel.0 == want => return Ok(c.clone()),
            Ok(rel) => mismatched.push(format!("{} (CUDA {}.{})", c.display(), rel.0, rel.1)),
            Err(e) => mismatched.push(format!("{} ({e})", c.display())),
        }
    }
    let mut msg = format!(
        "ptxas of CUDA {want}.x not found: set TG_PTXAS to one (`python3 scripts/fetch_cuda_tools.py` downloads it and prints the line to export); \
         looked on PATH and in {} (and Python's site-packages/nvidia/cuda_nvcc/bin, nvidia/cu13/bin)",
        looked.join(", ")
    );
    if !mismatched.is_empty() {
        msg.push_str(&format!("; unusable: {}", mismatched.join(", ")));
    }
    Err(msg)
}

/// Numbers before `unit` in a `ptxas` info line, e.g. `n_before(line, "registers")`.
fn n_before(line: &str, unit: &str) -> Option<u64> {
    let i = line.find(unit)?;
    line[..i].split_whitespace().last()?.parse().ok()
}

/// Per kernel: (registers, spill stores, spill loads, shared bytes, stack bytes) from the
/// output of `ptxas -v`.
fn parse_ptxas(out: &str) -> HashMap<String, [u64; 5]> {
    let quoted = |line: &str| line.split('\'').nth(1).map(str::to_string);
    let mut map: HashMap<String, [u64; 5]> = HashMap::new();
    let (mut entry, mut props): (Option<String>, Option<String>) = (None, None);
    for line in out.lines() {
        if line.contains("Compiling entry function") {
            entry = quoted(line);
            if let Some(e) = &entry {
                map.entry(e.clone()).or_default();
            }
        } else if let Some(rest) = line.split("Function properties for ").nth(1) {
            props = Some(rest.trim().to_string());
        } else if line.contains("bytes stack frame") {
            if let Some(v) = props.as_ref().and_then(|p| map.get_mut(p)) {
                v[4] = n_before(line, "bytes stack frame").unwrap_or(0);
                v[1] = n_before(line, "bytes spill stores").unwrap_or(0);
                v[2] = n_before(line, "bytes spill loads").unwrap_or(0);
            }
        } else if line.contains(" registers") {
            if let Some(v) = entry.as_ref().and_then(|e| map.get_mut(e)) {
                v[0] = n_before(line, "registers").unwrap_or(0);
                v[3] = n_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    map
}

/// A temporary file path unique to this process and call.
fn temp_path(stem: &str, ext: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!("tg-cuda-{}-{}-{stem}.{ext}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
}

/// The rows of one architecture.
fn report_arch(nv: &Nvrtc, ptxas: &Path, arch: &str) -> Vec<CompileRow> {
    let all_failed = |e: String| tg_gpu::KERNEL_NAMES.iter().map(|k| CompileRow::failed(k, arch, e.clone())).collect();
    let text = match ptx(nv, arch) {
        Ok(t) => t,
        Err(e) => return all_failed(e.to_string()),
    };
    let (ptx_file, cubin) = (temp_path(arch, "ptx"), temp_path(arch, "cubin"));
    if let Err(e) = std::fs::write(&ptx_file, &text) {
        return all_failed(format!("writing {}: {e}", ptx_file.display()));
    }
    let run = Command::new(ptxas).arg("-v").arg("--gpu-name").arg(arch).arg("-o").arg(&cubin).arg(&ptx_file).output();
    let _ = std::fs::remove_file(&ptx_file);
    let _ = std::fs::remove_file(&cubin);
    let out = match run {
        Ok(o) => o,
        Err(e) => return all_failed(format!("cannot run {}: {e}", ptxas.display())),
    };
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return all_failed(format!("{} -v --gpu-name {arch} failed ({}):\n{}", ptxas.display(), out.status, log.trim()));
    }
    let found = parse_ptxas(&log);
    tg_gpu::KERNEL_NAMES
        .iter()
        .map(|k| match found.get(*k) {
            Some(v) => CompileRow {
                kernel: k.to_string(),
                arch: arch.to_string(),
                registers: v[0] as u32,
                spill_stores: v[1],
                spill_loads: v[2],
                shared_bytes: v[3],
                stack_bytes: v[4],
                ok: true,
                error: None,
            },
            None => CompileRow::failed(k, arch, format!("missing from the output of ptxas -v for {arch}")),
        })
        .collect()
}

/// Compiles the kernel program for each architecture (`sm_80`, `sm_90`, …) with NVRTC (to
/// PTX for `compute_XX`) and assembles it with `ptxas -v --gpu-name sm_XX`: one row per
/// kernel of `tg_gpu::KERNEL_NAMES` and architecture, in that order. Needs no GPU. An error
/// when NVRTC or a ptxas of its major version cannot be found (naming `TG_NVRTC` /
/// `TG_PTXAS`) or an architecture name is malformed; a compile failure gives failed rows.
pub fn compile_report(archs: &[String]) -> Result<Vec<CompileRow>, String> {
    let mut names = Vec::with_capacity(archs.len());
    for a in archs {
        let (n, suffix) = parse_arch(a)?;
        names.push(format!("sm_{n}{suffix}"));
    }
    let nv = nvrtc().map_err(|e| e.to_string())?;
    let ptxas = find_ptxas(nv.version())?;
    let per_arch: Vec<Vec<CompileRow>> = std::thread::scope(|s| {
        let handles: Vec<_> = names.iter().map(|a| (a, s.spawn(|| report_arch(&nv, &ptxas, a)))).collect();
        handles
            .into_iter()
            .map(|(a, h)| h.join().unwrap_or_else(|_| tg_gpu::KERNEL_NAMES.iter().map(|k| CompileRow::failed(k, a, "the compile thread panicked".into())).collect()))
            .collect()
    });
    Ok(per_arch.into_iter().flatten().collect())
}

/// One PTX kernel parameter: bytes, and whether it is a float.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PtxParam {
    size: usize,
    float: bool,
}

/// Parses `.param .u64 name`, `.param .u64 .ptr .global .align 1 name`,
/// `.param .align 8 .b8 name[64]`, `.param .f32 name`.
fn parse_param(decl: &str) -> Option<PtxParam> {
    let toks: Vec<&str> = decl.split_whitespace().collect();
    if toks.first() != Some(&".param") {
        return None;
    }
    let ty = toks.iter().skip(1).find(|t| {
        let b = t.trim_start_matches('.');
        b.len() >= 2 && matches!(b.as_bytes()[0], b'u' | b's' | b'b' | b'f') && b[1..].parse::<u32>().is_ok()
    })?;
    let bits: usize = ty.trim_start_matches('.')[1..].parse().ok()?;
    let name = toks.last()?;
    let count = match (name.find('['), name.find(']')) {
        (Some(a), Some(b)) if b > a => name[a + 1..b].parse().ok()?,
        _ => 1,
    };
    Some(PtxParam { size: bits / 8 * count, float: ty.starts_with(".f") })
}

/// The parameter lists of every `.entry` of a PTX program.
fn parse_entries(ptx: &str) -> HashMap<String, Vec<PtxParam>> {
    let mut out = HashMap::new();
    let mut rest = ptx;
    while let Some(i) = rest.find(".entry ") {
        rest = &rest[i + ".entry ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let Some(close) = rest[open..].find(')') else { break };
        let params = rest[open + 1..open + close].split(',').filter(|d| !d.trim().is_empty()).filter_map(parse_param).collect();
        out.insert(name, params);
        rest = &rest[open + close..];
    }
    out
}

/// The parameter lists of the compiled kernels (from NVRTC's PTX for one architecture):
/// checks, without a GPU, that what a launch passes is what each kernel takes.
pub struct Signatures {
    arch: String,
    entries: HashMap<String, Vec<PtxParam>>,
}

impl Signatures {
    /// Compiles the program to PTX for `arch` (cached on disk) and reads every kernel's
    /// parameters.
    pub fn for_arch(arch: &str) -> Result<Signatures, String> {
        let nv = nvrtc().map_err(|e| e.to_string())?;
        let text = ptx(&nv, arch).map_err(|e| e.to_string())?;
        let entries = parse_entries(&text);
        if let Some(k) = tg_gpu::KERNEL_NAMES.iter().find(|k| !entries.contains_key(**k)) {
            return Err(format!("kernel {k} is missing from the PTX for {arch}"));
        }
        Ok(Signatures { arch: arch.to_string(), entries })
    }

    /// Plans `kernel` on `ins` → `out` (`tg_gpu::plan`, with stand-in buffers) and checks every
    /// launch against its kernel's parameters: how many, each one's size (pointers 8, `int`
    /// 4, `long` 8, `dims8` 64) and float-ness, and the block (a multiple of 32 threads, the
    /// warp reductions' assumption, at most 1024) and grid (axis 0 below 2³¹, axes 1 and 2 at
    /// most 65535). Returns the launches checked (0 when the contract refuses the step).
    pub fn check(&self, kernel: &Kernel, ins: &[Layout], out: &Layout) -> Result<usize, String> {
        if tg_gpu::supports(kernel, ins, out).is_err() {
            return Ok(0);
        }
        let stand_in = 0u8;
        let tins: Vec<tg_gpu::Tensor<u8>> = ins.iter().map(|l| tg_gpu::Tensor { mem: &stand_in, byte_offset: 64, layout: l }).collect();
        let tout = tg_gpu::Tensor { mem: &stand_in, byte_offset: 64, layout: out };
        let plan = tg_gpu::plan(kernel, &tins, &tout, &tg_gpu::Tuning::default()).map_err(|e| format!("{}: plan: {e}", kernel.name()))?;
        let scratch = (plan.scratch_bytes > 0).then_some(0x3000);
        for (li, l) in plan.launches.iter().enumerate() {
            let at = || format!("{}: launch {li} ({})", kernel.name(), l.kernel);
            let params = marshal(l.kernel, &l.args, |_| 0x1000, 0x2000, scratch).map_err(|e| format!("{}: {e}", at()))?;
            let want = self.entries.get(l.kernel).ok_or_else(|| format!("{}: no such kernel in the PTX for {}", at(), self.arch))?;
            if params.len() != want.len() {
                return Err(format!("{}: {} arguments, the kernel takes {}", at(), params.len(), want.len()));
            }
            for (i, (p, w)) in params.iter().zip(want).enumerate() {
                if p.size() != w.size || p.is_float() != w.float {
                    return Err(format!(
                        "{}: argument {i} is {p:?} ({} bytes), the kernel's parameter {i} is {} bytes{}",
                        at(),
                        p.size(),
                        w.size,
                        if w.float { " (float)" } else { "" }
                    ));
                }
            }
            if l.group_size == 0 || l.group_size > 1024 || l.group_size % 32 != 0 {
                return Err(format!("{}: blocks of {} threads (must be a multiple of 32, at most 1024)", at(), l.group_size));
            }
            if l.groups[0] == 0 || l.groups[0] > i32::MAX as usize || l.groups[1] == 0 || l.groups[1] > 65_535 || l.groups[2] == 0 || l.groups[2] > 65_535 {
                return Err(format!("{}: grid {:?} out of CUDA's range", at(), l.groups));
            }
        }
        Ok(plan.launches.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_output_parses() {
        let out = "ptxas info    : 25 bytes gmem
ptxas info    : Compiling entry function 'tg_pool' for 'sm_90'
ptxas info    : Function properties for tg_pool
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 48 registers, used 0 barriers
ptxas info    : Compile time = 101.865 ms
ptxas info    : Compiling entry function 'tg_conv_t64' for 'sm_90'
ptxas info    : Function properties for tg_conv_t64
    64 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 72 registers, used 1 barriers, 64 bytes cumulative stack size, 8192 bytes smem
ptxas info    : Compiling entry function 'tg_old' for 'sm_80'
ptxas info    : Function properties for tg_old
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, 4096 bytes smem, 400 bytes cmem[0]
";
        let m = parse_ptxas(out);
        assert_eq!(m["tg_pool"], [48, 0, 0, 0, 0]);
        assert_eq!(m["tg_conv_t64"], [72, 8, 12, 8192, 64]);
        assert_eq!(m["tg_old"], [30, 0, 0, 4096, 0]);
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn ptx_parameters_parse() {
        let ptx = ".visible .entry tg_fill(
	.param .u64 tg_fill_param_0,
	.param .u64 .ptr .global .align 1 tg_fill_param_1,
	.param .u32 tg_fill_param_2,
	.param .f32 tg_fill_param_3,
	.param .align 8 .b8 tg_fill_param_4[64]
)
{
}
.visible .entry tg_none()
{
}";
        let e = parse_entries(ptx);
        let sizes: Vec<(usize, bool)> = e["tg_fill"].iter().map(|p| (p.size, p.float)).collect();
        assert_eq!(sizes, [(8, false), (8, false), (4, false), (4, true), (64, false)]);
        assert!(e["tg_none"].is_empty());
    }
}
