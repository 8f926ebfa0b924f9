//! ONNX import.
//!
//! - [`OnnxModel::open`] memory-maps a `.onnx` file and decodes it with `prost` (types
//!   generated from the official `onnx.proto` at build time); initializer bytes stay in the
//!   map (`bytes::Bytes` slices of it), and external data (`location` / `offset` / `length`,
//!   relative to the model's folder) is mapped the same way, a location outside the folder
//!   refused.
//! - [`import`] turns the graph into the IR for given input shapes (static shapes: one graph
//!   per shape). Shape arithmetic (`Shape`, `Gather`/`Slice` on shapes, `Concat`,
//!   `Unsqueeze`, `ConstantOfShape`, arithmetic on constants, `Reshape` with a computed
//!   target) is folded at import. Each ONNX op becomes IR primitives (compositions where the
//!   op is one, so the e-graph can fuse them); an op with no mapping is refused with an error
//!   naming the op type, the node and the opset ([`OnnxError::Unsupported`]). Graph inputs
//!   that decide shapes may be bound to values ([`import_with`]).
//!
//! Integers: ONNX `int64` values are computed as `i32` (a value outside its range is an
//! error); `float` is `f32`; `bool` is bool. Other element types are refused.

mod import;
mod tensor;

pub use import::{import, import_with, supported_ops, Imported};
pub use tensor::{decode_tensor, Value, ValueData};

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The protobuf types of `onnx.proto`.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

/// What can go wrong reading or importing a model.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Not a valid ONNX protobuf.
    #[error("{path}: not an ONNX model: {detail}")]
    Decode {
        /// The file.
        path: String,
        /// What the decoder said.
        detail: String,
    },
    /// Valid protobuf, but not a model this reader accepts (no graph, bad tensor data, ...).
    #[error("{0}")]
    Invalid(String),
    /// An op with no mapping to the IR.
    #[error("unsupported op {op_type} (node '{node}', opset {opset}){}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Unsupported {
        /// The ONNX op type.
        op_type: String,
        /// The node's name (or its index when it has none).
        node: String,
        /// The default domain's opset the model imports.
        opset: i64,
        /// Which variant or attribute is not supported, if not the op as a whole.
        detail: String,
    },
    /// A value of a type the importer does not compute with (an element type other than
    /// float, int32, int64 and bool; a sequence, map or optional).
    #[error("{0}")]
    UnsupportedType(String),
    /// The IR refused what the importer built (shapes that do not fit).
    #[error("node '{node}' ({op_type}): {source}")]
    Ir {
        /// The node.
        node: String,
        /// Its op type.
        op_type: String,
        /// The IR's error.
        source: Box<tg_ir::IrError>,
    },
}

/// A decoded ONNX model, its initializer data left in the file's memory map.
pub struct OnnxModel {
    /// The file.
    pub path: PathBuf,
    /// The decoded model (checked to have a graph).
    proto: proto::ModelProto,
    /// The default (`ai.onnx`) domain's opset version.
    pub opset: i64,
    /// External data files, mapped on first use.
    external: std::sync::Mutex<HashMap<PathBuf, bytes::Bytes>>,
}

fn map_file(path: &Path) -> Result<bytes::Bytes, OnnxError> {
    let io = |source| OnnxError::Io { path: path.display().to_string(), source };
    let f = std::fs::File::open(path).map_err(io)?;
    if f.metadata().map_err(io)?.len() == 0 {
        return Ok(bytes::Bytes::new());
    }
    // SAFETY: the map is read-only; a file changed underneath while mapped is the one
    // hazard of mapping, the same as for the GGUF and safetensors readers.
    let m = unsafe { memmap2::Mmap::map(&f) }.map_err(io)?;
    Ok(bytes::Bytes::from_owner(m))
}

impl OnnxModel {
    /// Maps and decodes `path`, and checks that it has a graph and a default-domain opset.
    pub fn open(path: impl AsRef<Path>) -> Result<OnnxModel, OnnxError> {
        let path = path.as_ref().to_path_buf();
        let data = map_file(&path)?;
        Self::from_bytes(path, data)
    }

    /// Decodes a model held in `data` (its external data is looked up next to `path`).
    pub fn from_bytes(path: PathBuf, data: bytes::Bytes) -> Result<OnnxModel, OnnxError> {
        use prost::Message;
        let proto = proto::ModelProto::decode(data).map_err(|e| OnnxError::Decode { path: path.display().to_string(), detail: e.to_string() })?;
        if proto.graph.is_none() {
            return Err(OnnxError::Invalid(format!("{}: the model has no graph", path.display())));
        }
        let opset = proto.opset_import.iter().find(|o| o.domain.as_deref().unwrap_or("").is_empty() || o.domain.as_deref() == Some("ai.onnx")).and_then(|o| o.version);
        // A model importing no default-domain opset has only nodes of other domains, which
        // the importer refuses one by one.
        let opset = match opset {
            Some(v) => v,
            None if proto.opset_import.is_empty() => 1,
            None => 0,
        };
        Ok(OnnxModel { path, proto, opset, external: Default::default() })
    }

    /// A model from a decoded (for instance, edited) `proto`, checked as [`OnnxModel::open`]
    /// checks a file; its external data is looked up next to `path`.
    pub fn from_proto(path: PathBuf, proto: proto::ModelProto) -> Result<OnnxModel, OnnxError> {
        use prost::Message;
        Self::from_bytes(path, bytes::Bytes::from(proto.encode_to_vec()))
    }

    /// The decoded model.
    pub fn proto(&self) -> &proto::ModelProto {
        &self.proto
    }

    /// The graph (checked present by [`OnnxModel::open`]).
    pub fn graph(&self) -> &proto::GraphProto {
        self.proto.graph.as_ref().expect("checked at open")
    }

    /// The graph inputs that are not initializers: what a caller feeds.
    pub fn inputs(&self) -> Vec<&proto::ValueInfoProto> {
        let g = self.graph();
        let init: std::collections::HashSet<&str> = g.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
        g.input.iter().filter(|v| !init.contains(v.name.as_deref().unwrap_or(""))).collect()
    }

    /// The folder external data is relative to.
    pub fn folder(&self) -> PathBuf {
        self.path.parent().map(Path::to_path_buf).unwrap_or_default()
    }

    /// The bytes of an external data location, refusing a location outside the folder.
    pub(crate) fn external(&self, tensor: &str, location: &str, offset: usize, length: Option<usize>) -> Result<bytes::Bytes, OnnxError> {
        let bad = |why: String| OnnxError::Invalid(format!("{}: {tensor}: external data '{location}': {why}", self.path.display()));
        let folder = self.folder();
        let folder = if folder.as_os_str().is_empty() { PathBuf::from(".") } else { folder };
        let root = folder.canonicalize().map_err(|e| bad(format!("the model's folder: {e}")))?;
        let rel = Path::new(location);
        if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir | std::path::Component::Prefix(_))) {
            return Err(bad(format!("outside the model's folder {} (external data must be inside it)", root.display())));
        }
        let file = root.join(location).canonicalize().map_err(|e| bad(e.to_string()))?;
        if !file.starts_with(&root) {
            return Err(bad(format!("outside the model's folder {}", root.display())));
        }
        let mut cache = self.external.lock().unwrap_or_else(|e| e.into_inner());
        let all = match cache.get(&file) {
            Some(b) => b.clone(),
            None => {
                let b = map_file(&file)?;
                cache.insert(file.clone(), b.clone());
                b
            }
        };
        let end = match length {
            Some(l) => offset.checked_add(l).ok_or_else(|| bad("offset + length overflows".into()))?,
            None => all.len(),
        };
        if offset > end || end > all.len() {
            return Err(bad(format!("bytes {offset}..{end} of a {}-byte file", all.len())));
        }
        Ok(all.slice(offset..end))
    }
}

/// The tensor type of a graph input or output: its declared dimensions (`None` for a
/// dynamic one) and its ONNX element type; `None` when the value is not a tensor (a
/// sequence, map or optional).
pub fn tensor_type(v: &proto::ValueInfoProto) -> Option<(Vec<Option<usize>>, i32)> {
    let Some(proto::type_proto::Value::TensorType(t)) = v.r#type.as_ref()?.value.as_ref() else { return None };
    let dims = t
        .shape
        .as_ref()
        .map(|s| {
            s.dim
                .iter()
                .map(|d| match d.value {
                    Some(proto::tensor_shape_proto::dimension::Value::DimValue(x)) => usize::try_from(x).ok(),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some((dims, t.elem_type.unwrap_or(0)))
}

/// Weights of an imported graph: initializers (slices of the model's memory map) and the
/// constants the importer had to materialise.
#[derive(Default, Clone)]
pub struct OnnxWeights {
    map: HashMap<String, bytes::Bytes>,
}

/// Bytes held in `u32`s, so 4-byte aligned.
struct Aligned(Vec<u32>, usize);

impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `self.1` ≤ 4·`self.0.len()` bytes of initialised `u32`s viewed as bytes.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.1) }
    }
}

impl OnnxWeights {
    /// Adds a weight; bytes that are not 4-byte aligned (a tensor's `raw_data` sits anywhere
    /// in the protobuf) are copied into an aligned buffer, the rest stay in place.
    pub(crate) fn insert(&mut self, name: String, data: bytes::Bytes) {
        let data = if (data.as_ptr() as usize).is_multiple_of(4) {
            data
        } else {
            let mut words = vec![0u32; data.len().div_ceil(4)];
            for (w, c) in words.iter_mut().zip(data.chunks(4)) {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                *w = u32::from_ne_bytes(b);
            }
            bytes::Bytes::from_owner(Aligned(words, data.len()))
        };
        self.map.insert(name, data);
    }

    /// Number of weights.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl tg_ir::WeightStore for OnnxWeights {
    fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.map.get(name).map(|b| &b[..])
    }
}
