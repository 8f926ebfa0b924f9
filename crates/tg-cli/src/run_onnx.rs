//! `tg run MODEL.onnx --input NAME=FILE.npy …`: any ONNX model on `.npy` inputs, each output
//! written as `NAME.npy`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use tg_ir::{DType, HostData, HostTensor};

/// Arguments of `tg run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The ONNX model.
    model: PathBuf,
    /// An input: `NAME=FILE.npy` (float32, int64, int32 or bool, C order); repeatable. Every
    /// graph input needs one; its shape binds the plan's.
    #[arg(long = "input", short = 'i')]
    inputs: Vec<String>,
    /// Folder the outputs are written to, as `NAME.npy`.
    #[arg(long, default_value = ".")]
    output_dir: PathBuf,
    /// Devices to run on, comma separated (`cpu`, `opencl`, `cpu,opencl`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Print the outputs (names, shapes, dtypes, files) and timings as JSON.
    #[arg(long)]
    json: bool,
}

/// A `.npy` array: shape, and the data as the IR takes it.
struct Npy {
    shape: Vec<usize>,
    descr: String,
    data: HostData,
}

fn read_npy(path: &Path) -> Result<Npy, String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |why: &str| format!("{}: not a .npy file this reader takes: {why}", path.display());
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad("no NUMPY magic"));
    }
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        _ => return Err(bad("unknown format version")),
    };
    let header = std::str::from_utf8(b.get(start..start + hlen).ok_or_else(|| bad("truncated header"))?).map_err(|_| bad("header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let i = header.find(&format!("'{key}'"))? + key.len() + 2;
        Some(header[i..].trim_start_matches([' ', ':']))
    };
    let descr = field("descr").and_then(|s| s.strip_prefix('\'')).and_then(|s| s.split('\'').next()).ok_or_else(|| bad("no descr"))?.to_string();
    if field("fortran_order").is_some_and(|s| s.starts_with("True")) {
        return Err(bad("Fortran order (save it C-contiguous)"));
    }
    let shape_s = field("shape").and_then(|s| s.strip_prefix('(')).and_then(|s| s.split(')').next()).ok_or_else(|| bad("no shape"))?;
    let shape: Vec<usize> = shape_s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| s.parse().map_err(|_| bad("bad shape"))).collect::<Result<_, _>>()?;
    let n: usize = shape.iter().product();
    let body = &b[start + hlen..];
    let need = |size: usize| -> Result<&[u8], String> { body.get(..n * size).ok_or_else(|| bad(&format!("{} data bytes for {n} elements of {size}", body.len()))) };
    let data = match descr.as_str() {
        "<f4" => HostData::F32(need(4)?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        "<i4" => HostData::I32(need(4)?.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        "<i8" => HostData::I32(
            need(8)?
                .chunks_exact(8)
                .map(|c| {
                    let v = i64::from_le_bytes(c.try_into().expect("8 bytes"));
                    i32::try_from(v).map_err(|_| format!("{}: int64 value {v} does not fit the engine's i32", path.display()))
                })
                .collect::<Result<_, _>>()?,
        ),
        "|b1" => HostData::Bool(need(1)?.to_vec()),
        d => return Err(format!("{}: dtype {d} is not supported (float32, int64, int32, bool are)", path.display())),
    };
    Ok(Npy { shape, descr, data })
}

fn write_npy(path: &Path, t: &HostTensor, int64: bool) -> Result<(), String> {
    let (descr, bytes): (&str, Vec<u8>) = match &t.data {
        HostData::F32(v) => ("<f4", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        HostData::I32(v) if int64 => ("<i8", v.iter().flat_map(|&x| (x as i64).to_le_bytes()).collect()),
        HostData::I32(v) => ("<i4", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        HostData::Bool(v) => ("|b1", v.clone()),
    };
    let shape = match t.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", t.shape[0]),
        _ => format!("({})", t.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(bytes);
    // Whole or not at all: a temporary file renamed into place.
    let tmp = path.with_extension("npy.tmp");
    std::fs::write(&tmp, &out).and_then(|_| std::fs::rename(&tmp, path)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })
}

/// A file name for an output (ONNX names may hold `/` or `:`).
fn file_name(name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with('.') {
        format!("output{s}")
    } else {
        s
    }
}

pub fn run(a: RunArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let model = tg_onnx::OnnxModel::open(&a.model).map_err(|e| e.to_string())?;
    let mut given: HashMap<String, Npy> = HashMap::new();
    for spec in &a.inputs {
        let (name, file) = spec.split_once('=').ok_or_else(|| format!("--input '{spec}': expected NAME=FILE.npy"))?;
        if given.insert(name.to_string(), read_npy(Path::new(file))?).is_some() {
            return Err(format!("--input {name} given twice"));
        }
    }
    let shapes: HashMap<String, Vec<usize>> = given.iter().map(|(k, v)| (k.clone(), v.shape.clone())).collect();
    let imported = tg_onnx::import(&model, &shapes).map_err(|e| e.to_string())?;
    let mut feed = HashMap::new();
    for (name, shape, dtype, onnx_type) in &imported.inputs {
        let npy = given.remove(name).ok_or_else(|| format!("no --input for the model's input '{name}' ({shape:?}, {})", onnx_name(*onnx_type)))?;
        let ok = matches!((dtype, &npy.data), (DType::F32, HostData::F32(_)) | (DType::I32, HostData::I32(_)) | (DType::Bool, HostData::Bool(_)));
        if !ok {
            return Err(format!("input '{name}': the model takes {}, the file holds {}", onnx_name(*onnx_type), npy.descr));
        }
        feed.insert(name.clone(), HostTensor::new(&npy.shape, npy.data).map_err(|e| e.to_string())?);
    }
    let import_ms = t0.elapsed().as_secs_f64() * 1e3;
    let devices = crate::devices_named(&a.device, a.threads)?;
    let t1 = Instant::now();
    let opts = tg_compiler::CompileOptions { cost: crate::machine_cost(), ..Default::default() };
    let compiled = tg_compiler::compile(&imported.graph, &devices, &opts).map_err(|e| e.to_string())?;
    let compile_ms = t1.elapsed().as_secs_f64() * 1e3;
    let mut exe = tg_runtime::Executable::new(compiled.plan, devices, std::sync::Arc::new(imported.weights)).map_err(|e| e.to_string())?;
    let t2 = Instant::now();
    let mut outs = exe.run(&feed).map_err(|e| e.to_string())?;
    let run_ms = t2.elapsed().as_secs_f64() * 1e3;
    std::fs::create_dir_all(&a.output_dir).map_err(|e| format!("{}: {e}", a.output_dir.display()))?;
    let mut listed = Vec::new();
    for (name, onnx_type) in &imported.outputs {
        let t = outs.remove(name).ok_or_else(|| format!("the plan produced no output '{name}'"))?;
        let path = a.output_dir.join(format!("{}.npy", file_name(name)));
        write_npy(&path, &t, *onnx_type == 7)?;
        listed.push(serde_json::json!({ "name": name, "shape": t.shape, "dtype": onnx_name(*onnx_type), "file": path.display().to_string() }));
        if !a.json {
            println!("{name}: {:?} {} -> {}", t.shape, onnx_name(*onnx_type), path.display());
        }
    }
    if a.json {
        let obj =
            serde_json::json!({ "model": a.model.display().to_string(), "outputs": listed, "timings": { "import_ms": import_ms, "compile_ms": compile_ms, "run_ms": run_ms } });
        println!("{}", serde_json::to_string_pretty(&obj).map_err(|e| e.to_string())?);
    } else {
        eprintln!("[import {import_ms:.1} ms, compile {compile_ms:.1} ms, run {run_ms:.2} ms]");
    }
    Ok(())
}

fn onnx_name(t: i32) -> &'static str {
    match t {
        1 => "float32",
        6 => "int32",
        7 => "int64",
        9 => "bool",
        _ => "another type",
    }
}
