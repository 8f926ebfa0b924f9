//! A small GGUF writer that builds a file image in memory (tests, synthetic models).

use std::path::Path;

use tg_quant::GgmlType;

use crate::value::type_id;
use crate::{GgufError, GgufFile, Value, DEFAULT_ALIGNMENT};

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    data: Vec<u8>,
    /// Explicit relative offset (table entry only, `data` is empty and not written).
    offset: Option<u64>,
}

/// Builds a GGUF v3 (or v2) image: metadata in insertion order, tensors laid out in
/// insertion order, each at the next multiple of the alignment.
///
/// The writer checks what it must to produce a well-formed encoding (array homogeneity,
/// tensor data length for [`add_tensor`](Self::add_tensor)); it deliberately does *not*
/// reject duplicate keys or names, so tests can produce such files for the reader to
/// refuse.
///
/// ```
/// use tg_gguf::{GgufWriter, GgufFile, GgmlType};
/// let mut w = GgufWriter::new();
/// w.add("general.architecture", "toy").add("toy.n", 3u32);
/// w.add_f32_tensor("w", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// let f = GgufFile::from_bytes(w.to_bytes()?)?;
/// assert_eq!(f.get_u32("toy.n")?, 3);
/// assert_eq!(f.tensor("w")?.ty, GgmlType::F32);
/// # Ok::<(), tg_gguf::GgufError>(())
/// ```
pub struct GgufWriter {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
    errors: Vec<String>,
    trailing: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty GGUF v3 image with the default alignment (32).
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
            errors: Vec::new(),
            trailing: Vec::new(),
        }
    }

    /// Sets the version field written (the encoding is the same for 2 and 3; other values
    /// produce files the reader rejects).
    pub fn set_version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Sets `general.alignment` (replacing an existing entry).
    pub fn set_alignment(&mut self, alignment: u32) -> &mut Self {
        if let Some(e) = self
            .metadata
            .iter_mut()
            .find(|(k, _)| k == "general.alignment")
        {
            e.1 = Value::U32(alignment);
        } else {
            self.metadata
                .push(("general.alignment".into(), Value::U32(alignment)));
        }
        self
    }

    /// Appends a metadata entry.
    pub fn add(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// Appends a tensor; `data.len()` must equal the byte size of `dims` in `ty` (checked
    /// when the image is built).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: impl Into<Vec<u8>>,
    ) -> &mut Self {
        let name = name.into();
        let data = data.into();
        let n: Option<u64> = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let expected = n
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| ty.row_bytes(n).ok());
        let row_ok = !matches!(dims.first(), Some(&d) if d % ty.block_size() as u64 != 0);
        match expected {
            Some(e) if e == data.len() && row_ok => {}
            _ => self.errors.push(format!(
                "tensor {name:?}: {} bytes do not match dims {dims:?} of type {ty} (expected {expected:?})",
                data.len()
            )),
        }
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            type_id: ty as u32,
            data,
            offset: None,
        });
        self
    }

    /// Appends an F32 tensor from values.
    pub fn add_f32_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        values: &[f32],
    ) -> &mut Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, dims, GgmlType::F32, bytes)
    }

    /// Appends a tensor table entry without any validation: any type id, any dims, any
    /// data. For negative tests of the reader.
    pub fn add_tensor_unchecked(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        type_id: u32,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push(PendingTensor {
            name: name.into(),
            dims: dims.to_vec(),
            type_id,
            data,
            offset: None,
        });
        self
    }

    /// Appends a tensor table entry with an explicit offset (relative to the data section)
    /// and no data of its own; provide the data section with
    /// [`append_raw_data`](Self::append_raw_data). For negative tests of the reader.
    pub fn add_tensor_entry(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        type_id: u32,
        offset: u64,
    ) -> &mut Self {
        self.tensors.push(PendingTensor {
            name: name.into(),
            dims: dims.to_vec(),
            type_id,
            data: Vec::new(),
            offset: Some(offset),
        });
        self
    }

    /// Appends raw bytes after the (padded) tensor data.
    pub fn append_raw_data(&mut self, bytes: &[u8]) -> &mut Self {
        self.trailing.extend_from_slice(bytes);
        self
    }

    fn alignment(&self) -> Result<usize, GgufError> {
        match self
            .metadata
            .iter()
            .rev()
            .find(|(k, _)| k == "general.alignment")
        {
            None => Ok(DEFAULT_ALIGNMENT),
            Some((_, v)) => match v.as_u32() {
                Some(a) if a.is_power_of_two() => Ok(a as usize),
                _ => Err(GgufError::Writer {
                    reason: format!("general.alignment {} is not a power of two", v.describe()),
                }),
            },
        }
    }

    /// Encodes the image.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        if let Some(e) = self.errors.first() {
            return Err(GgufError::Writer { reason: e.clone() });
        }
        let alignment = self.alignment()?;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend_from_slice(&v.type_id().to_le_bytes());
            put_value(&mut out, k, v)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.type_id.to_le_bytes());
            match t.offset {
                Some(explicit) => out.extend_from_slice(&explicit.to_le_bytes()),
                None => {
                    out.extend_from_slice(&offset.to_le_bytes());
                    offset += (t.data.len() as u64).div_ceil(alignment as u64) * alignment as u64;
                }
            }
        }
        pad(&mut out, alignment);
        for t in self.tensors.iter().filter(|t| t.offset.is_none()) {
            out.extend_from_slice(&t.data);
            pad(&mut out, alignment);
        }
        out.extend_from_slice(&self.trailing);
        Ok(out)
    }

    /// Encodes and parses the image.
    pub fn build(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.to_bytes()?)
    }

    /// Encodes the image and writes it to `path`.
    pub fn write_to(&self, path: impl AsRef<Path>) -> Result<(), GgufError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()?).map_err(|source| GgufError::Io {
            file: path.display().to_string(),
            source,
        })
    }
}

fn pad(out: &mut Vec<u8>, alignment: usize) {
    let n = out.len().div_ceil(alignment) * alignment;
    out.resize(n, 0);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, key: &str, v: &Value) -> Result<(), GgufError> {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(items) => {
            // An empty array is written with element type u8.
            let elem = items.first().map_or(type_id::U8, Value::type_id);
            if let Some(bad) = items.iter().find(|e| e.type_id() != elem) {
                return Err(GgufError::Writer {
                    reason: format!(
                        "metadata {key:?}: mixed array element types ({} and {})",
                        items[0].type_name(),
                        bad.type_name()
                    ),
                });
            }
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for e in items {
                put_value(out, key, e)?;
            }
        }
    }
    Ok(())
}
