//! Opening a model by path: each kind says whether a path is one of its own
//! ([`ModelKind::detect`]) and opens it ([`ModelKind::open`]); [`crate::KINDS`] is the one
//! table of kinds, and [`open`] asks each in turn.

use crate::{Model, ModelError, KINDS};
use std::path::Path;
use std::sync::Arc;
use tg_compiler::CompileOptions;
use tg_runtime::{CpuDevice, Device};

/// How to open a model: the devices its plans run on and the compiler options.
#[derive(Clone)]
pub struct OpenOptions {
    /// Devices to compile for, home first (at least one).
    pub devices: Vec<Arc<dyn Device>>,
    /// Compiler options for every plan (front ends set the machine's kernel profile as the
    /// cost source).
    pub compile: CompileOptions,
}

impl OpenOptions {
    /// The CPU with `threads` workers (0 = every core) and default compiler options.
    pub fn cpu(threads: usize) -> Result<OpenOptions, ModelError> {
        let device: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).map_err(ModelError::Request)?);
        Ok(OpenOptions::on(vec![device]))
    }

    /// These devices (home first) and default compiler options.
    pub fn on(devices: Vec<Arc<dyn Device>>) -> OpenOptions {
        OpenOptions { devices, compile: CompileOptions::default() }
    }
}

/// A kind's answer to "is this path yours?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detect {
    /// Yes: its loader opens it (and reports what is wrong with it, if anything).
    Yes,
    /// No, but it looks like one (say why: shown when no kind takes the path).
    Near(String),
    /// No.
    No,
}

/// How a kind opens a path it claimed.
pub type OpenFn = fn(&Path, OpenOptions) -> Result<Box<dyn Model>, ModelError>;

/// One kind of model in [`crate::KINDS`].
pub struct ModelKind {
    /// Registry name (`tg info` shows it; `open_kind` takes it).
    pub name: &'static str,
    /// What a path of this kind is, for errors and docs.
    pub what: &'static str,
    /// Whether `path` is of this kind (cheap: magic bytes, a file name, a config key).
    pub detect: fn(&Path) -> Detect,
    /// Loads it.
    pub open: OpenFn,
    /// For a decoder language model architecture (run by [`crate::LanguageModel`]): how to
    /// read its configuration from a GGUF file whose `general.architecture` is [`Self::name`].
    pub decoder: Option<crate::decoder::DecoderFn>,
}

/// The kinds, as `name (what)`, for messages.
pub fn known_kinds() -> String {
    KINDS.iter().map(|k| format!("{} ({})", k.name, k.what)).collect::<Vec<_>>().join("; ")
}

/// Opens the model at `path`: the first kind of [`crate::KINDS`] that claims it loads it.
/// A path no kind claims is an error listing the kinds (and what the near misses were).
pub fn open(path: impl AsRef<Path>, options: OpenOptions) -> Result<Box<dyn Model>, ModelError> {
    let path = path.as_ref();
    if !path.exists() {
        return Err(ModelError::NotFound(path.display().to_string()));
    }
    let mut near = Vec::new();
    for k in KINDS {
        match (k.detect)(path) {
            Detect::Yes => return (k.open)(path, options),
            Detect::Near(why) => near.push(format!("{why} ({} needs {})", k.name, k.what)),
            Detect::No => {}
        }
    }
    let notes = if near.is_empty() { String::new() } else { format!(": {}", near.join("; ")) };
    Err(ModelError::UnknownKind { path: path.display().to_string(), detail: format!("not a model this build opens{notes}. It opens: {}", known_kinds()) })
}

/// Opens `path` as the kind named `kind`, without detection.
pub fn open_kind(kind: &str, path: impl AsRef<Path>, options: OpenOptions) -> Result<Box<dyn Model>, ModelError> {
    let path = path.as_ref();
    match KINDS.iter().find(|k| k.name == kind) {
        Some(k) => (k.open)(path, options),
        None => Err(ModelError::UnknownKind { path: path.display().to_string(), detail: format!("no model kind '{kind}'. Kinds: {}", known_kinds()) }),
    }
}

/// The first `n` bytes of a file (fewer when it is shorter; none when it cannot be read).
pub fn head(path: &Path, n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(n);
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(n as u64).read_to_end(&mut buf);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_paths_list_the_kinds() {
        let d = std::env::temp_dir().join(format!("tg-registry-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("notes.txt");
        std::fs::write(&f, b"hello").unwrap();
        let e = open(&f, OpenOptions::cpu(1).unwrap()).err().unwrap().to_string();
        for k in KINDS {
            assert!(e.contains(k.name) && e.contains("notes.txt"), "{e}");
        }
        let e = open(d.join("missing.onnx"), OpenOptions::cpu(1).unwrap()).err().unwrap();
        assert!(matches!(e, ModelError::NotFound(_)), "{e}");
        // A GGUF of another architecture is a near miss, said so.
        let g = d.join("mamba.gguf");
        let mut w = tg_gguf::GgufWriter::new();
        w.add("general.architecture", "mamba");
        w.write_to(&g).unwrap();
        let e = open(&g, OpenOptions::cpu(1).unwrap()).err().unwrap().to_string();
        assert!(e.contains("'mamba'") && ["gemma3", "llama", "qwen2", "qwen3"].iter().all(|k| e.contains(k)), "{e}");
        // One we run, but incomplete: the loader names what is missing.
        let g = d.join("llama.gguf");
        let mut w = tg_gguf::GgufWriter::new();
        w.add("general.architecture", "llama");
        w.write_to(&g).unwrap();
        let e = open(&g, OpenOptions::cpu(1).unwrap()).err().unwrap().to_string();
        assert!(e.contains("llama.embedding_length") || e.contains("llama."), "{e}");
        let e = open_kind("nope", &f, OpenOptions::cpu(1).unwrap()).err().unwrap().to_string();
        assert!(e.contains("'nope'") && e.contains("onnx"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }
}
