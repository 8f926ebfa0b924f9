//! `tg run MODEL --input NAME=FILE.npy …`: any model the registry opens (an ONNX file, a
//! Gemma 3 GGUF file, an EmbeddingGemma folder; `tg_models::KINDS`) on `.npy` inputs, each
//! output written as `NAME.npy`; `tg info MODEL`: its kind, inputs, outputs and
//! capabilities. Both go through `tg_models::open` and the `Model` interface only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use tg_ir::{HostData, HostTensor};
use tg_models::{Dim, ElemType, Model, OpenOptions, TensorSpec};

/// Arguments of `tg run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The model: an ONNX file, a Gemma 3 GGUF file or an EmbeddingGemma folder (`tg info`
    /// shows its inputs).
    model: PathBuf,
    /// An input: `NAME=FILE.npy` (float32, int64, int32 or bool, C order); repeatable. Every
    /// model input needs one; its shape binds the plan's.
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
pub(crate) struct Npy {
    pub(crate) shape: Vec<usize>,
    pub(crate) descr: String,
    pub(crate) data: HostData,
}

pub(crate) fn read_npy(path: &Path) -> Result<Npy, String> {
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

pub(crate) fn write_npy(path: &Path, t: &HostTensor, int64: bool) -> Result<(), String> {
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

/// The devices and compiler options of `--device` / `--threads`.
fn options(device: &str, threads: usize) -> Result<OpenOptions, String> {
    let mut o = OpenOptions::on(crate::devices_named(device, threads)?);
    o.compile = crate::machine_options();
    Ok(o)
}

/// Whether a `.npy` dtype feeds an input of `elem` (integers of either width feed either).
fn npy_fits(elem: ElemType, descr: &str) -> bool {
    match elem {
        ElemType::F32 => descr == "<f4",
        ElemType::I32 | ElemType::I64 => descr == "<i4" || descr == "<i8",
        ElemType::Bool => descr == "|b1",
    }
}

/// `--input NAME=VALUE` arguments by name, each name given once (`form` says what VALUE is,
/// for the error).
pub(crate) fn named_inputs(args: &[String], form: &str) -> Result<HashMap<String, String>, String> {
    let mut given = HashMap::new();
    for spec in args {
        let (name, v) = spec.split_once('=').ok_or_else(|| format!("--input '{spec}': expected {form}"))?;
        if given.insert(name.to_string(), v.to_string()).is_some() {
            return Err(format!("--input {name} given twice"));
        }
    }
    Ok(given)
}

/// The tensor of input `s` read from a `.npy` file, whose dtype must feed it.
pub(crate) fn npy_input(s: &TensorSpec, file: &str) -> Result<HostTensor, String> {
    let npy = read_npy(Path::new(file))?;
    if !npy_fits(s.elem, &npy.descr) {
        return Err(format!("input '{}': the model takes {}, {file} holds {}", s.name, s.elem, npy.descr));
    }
    HostTensor::new(&npy.shape, npy.data).map_err(|e| e.to_string())
}

/// The feed of every input in `specs` from the `--input`s given (`make` builds one from its
/// value, or from nothing when it was not given); a given name the model does not have is
/// refused with the names it has.
pub(crate) fn feed_inputs(
    specs: &[TensorSpec],
    mut given: HashMap<String, String>,
    mut make: impl FnMut(&TensorSpec, Option<String>) -> Result<HostTensor, String>,
) -> Result<HashMap<String, HostTensor>, String> {
    let mut feed = HashMap::new();
    for s in specs {
        let v = given.remove(&s.name);
        feed.insert(s.name.clone(), make(s, v)?);
    }
    if let Some(name) = given.keys().next() {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        return Err(format!("--input {name}: the model has no input '{name}' (its inputs are: {})", names.join(", ")));
    }
    Ok(feed)
}

pub fn run(a: RunArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let mut model = tg_models::open(&a.model, options(&a.device, a.threads)?).map_err(|e| e.to_string())?;
    let given = named_inputs(&a.inputs, "NAME=FILE.npy")?;
    let feed = feed_inputs(&model.inputs(), given, |s, v| {
        let file = v.ok_or_else(|| format!("no --input for the model's input '{}' ({}, {})", s.name, s.shape_text(), s.elem))?;
        npy_input(s, &file)
    })?;
    let open_ms = t0.elapsed().as_secs_f64() * 1e3;
    let times = model.compile(&feed).map_err(|e| e.to_string())?;
    // As before: "import" is reading the model and the inputs and building (importing) the
    // graph; "compile" the compiler.
    let (import_ms, compile_ms) = (open_ms + times.graph_ms, times.compile_ms);
    let t2 = Instant::now();
    let outs = model.run(&feed).map_err(|e| e.to_string())?;
    let run_ms = t2.elapsed().as_secs_f64() * 1e3;
    std::fs::create_dir_all(&a.output_dir).map_err(|e| format!("{}: {e}", a.output_dir.display()))?;
    let out_specs = model.outputs();
    let mut listed = Vec::new();
    for (name, t) in &outs {
        let elem = out_specs.iter().find(|s| &s.name == name).map_or(ElemType::F32, |s| s.elem);
        let path = a.output_dir.join(format!("{}.npy", file_name(name)));
        write_npy(&path, t, elem == ElemType::I64)?;
        listed.push(serde_json::json!({ "name": name, "shape": t.shape, "dtype": elem.name(), "file": path.display().to_string() }));
        if !a.json {
            println!("{name}: {:?} {} -> {}", t.shape, elem, path.display());
        }
    }
    if a.json {
        let obj = serde_json::json!({
            "model": a.model.display().to_string(),
            "kind": model.kind(),
            "outputs": listed,
            "timings": { "import_ms": import_ms, "compile_ms": compile_ms, "run_ms": run_ms },
        });
        println!("{}", serde_json::to_string_pretty(&obj).map_err(|e| e.to_string())?);
    } else {
        eprintln!("[import {import_ms:.1} ms, compile {compile_ms:.1} ms, run {run_ms:.2} ms]");
    }
    Ok(())
}

/// Arguments of `tg info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The model: an ONNX file, a Gemma 3 GGUF file or an EmbeddingGemma folder.
    model: PathBuf,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

fn spec_json(s: &TensorSpec) -> serde_json::Value {
    let shape = s.dims.as_ref().map(|d| {
        d.iter()
            .map(|d| match d {
                Dim::Fixed(n) => serde_json::json!(n),
                Dim::Free { name, .. } => serde_json::json!(name),
            })
            .collect::<Vec<_>>()
    });
    let limits: serde_json::Map<String, serde_json::Value> = s
        .dims
        .iter()
        .flatten()
        .filter_map(|d| match d {
            Dim::Free { name, max: Some(m) } => Some((name.clone(), serde_json::json!(m))),
            _ => None,
        })
        .collect();
    serde_json::json!({ "name": s.name, "dtype": s.elem.name(), "shape": shape, "limits": limits })
}

/// `tg info MODEL`: the model's kind, inputs, outputs and capabilities, through the model
/// interface.
pub fn info(a: InfoArgs) -> Result<(), String> {
    let mut model: Box<dyn Model> = tg_models::open(&a.model, options("cpu", 1)?).map_err(|e| e.to_string())?;
    let kind = model.kind();
    let what = tg_models::KINDS.iter().find(|k| k.name == kind).map_or("", |k| k.what);
    let caps = tg_models::capabilities(&mut *model);
    let (inputs, outputs, config) = (model.inputs(), model.outputs(), model.config());
    if a.json {
        let obj = serde_json::json!({
            "model": a.model.display().to_string(),
            "kind": kind,
            "what": what,
            "inputs": inputs.iter().map(spec_json).collect::<Vec<_>>(),
            "outputs": outputs.iter().map(spec_json).collect::<Vec<_>>(),
            "capabilities": caps,
            "config": config,
        });
        println!("{}", serde_json::to_string_pretty(&obj).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!("model:   {}", a.model.display());
    println!("kind:    {kind} ({what})");
    for (title, specs) in [("inputs:", &inputs), ("outputs:", &outputs)] {
        println!("{title}");
        for s in specs {
            println!("  {:<24} {:<8} {}", s.name, s.elem, s.shape_text());
        }
    }
    println!("can:     {}", caps.join(", "));
    if let serde_json::Value::Object(c) = &config {
        println!("config:");
        for (k, v) in c {
            let text = v.to_string();
            if text.len() <= 100 {
                println!("  {k:<24} {text}");
            } else {
                println!("  {k:<24} ({} characters of JSON; see --json)", text.len());
            }
        }
    }
    Ok(())
}
