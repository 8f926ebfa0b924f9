//! A small safetensors writer (tests, synthetic models, converted weights).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::header::METADATA_KEY;
use crate::{Dtype, SafetensorsError};

struct Pending {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// Builds a safetensors file: metadata and tensors in insertion order, each tensor's data
/// directly after the previous one's (the format allows no padding between tensors), the
/// header padded with spaces to a multiple of 8 bytes.
///
/// Tensors are *not* reordered: a tensor after one whose size is not a multiple of 4 can
/// end up misaligned for zero-copy `f32` access. Add the widest dtypes first when that
/// matters.
///
/// Problems (data length not matching shape × dtype, duplicate or reserved names) are
/// reported by [`to_bytes`](Self::to_bytes) / [`write`](Self::write).
///
/// ```
/// use tg_safetensors::{Dtype, SafetensorsFile, SafetensorsWriter};
/// let mut w = SafetensorsWriter::new();
/// w.add_metadata("format", "pt")
///     .add_f32("w", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
///     .add_tensor("ids", Dtype::I32, &[2], [1u8, 0, 0, 0, 2, 0, 0, 0]);
/// let f = SafetensorsFile::from_bytes(&w.to_bytes()?, "toy")?;
/// assert_eq!(f.tensor("w")?.as_f32_slice()?[4], 5.0);
/// assert_eq!(f.metadata_value("format"), Some("pt"));
/// # Ok::<(), tg_safetensors::SafetensorsError>(())
/// ```
#[derive(Default)]
pub struct SafetensorsWriter {
    metadata: Vec<(String, String)>,
    tensors: Vec<Pending>,
}

impl SafetensorsWriter {
    /// An empty file (no tensors, no metadata).
    pub fn new() -> SafetensorsWriter {
        SafetensorsWriter::default()
    }

    /// Adds a `__metadata__` entry.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// Adds a tensor given its raw little-endian bytes (row-major).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: Dtype,
        shape: &[usize],
        data: impl Into<Vec<u8>>,
    ) -> &mut Self {
        self.tensors.push(Pending {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            data: data.into(),
        });
        self
    }

    /// Adds an `F32` tensor.
    pub fn add_f32(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        values: &[f32],
    ) -> &mut Self {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, Dtype::F32, shape, data)
    }

    fn check(&self) -> Result<(), SafetensorsError> {
        let err = |reason: String| Err(SafetensorsError::Writer { reason });
        let mut keys = std::collections::HashSet::new();
        for (k, _) in &self.metadata {
            if !keys.insert(k.as_str()) {
                return err(format!("duplicate metadata key {k:?}"));
            }
        }
        let mut names = std::collections::HashSet::new();
        for t in &self.tensors {
            if t.name == METADATA_KEY {
                return err(format!("tensor name {METADATA_KEY:?} is reserved"));
            }
            if !names.insert(t.name.as_str()) {
                return err(format!("duplicate tensor name {:?}", t.name));
            }
            let n = t
                .shape
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
            let expected = n.and_then(|n| t.dtype.bytes_for(n));
            if expected != Some(t.data.len() as u64) {
                return err(format!(
                    "tensor {:?}: {} shape {:?} needs {} bytes, got {}",
                    t.name,
                    t.dtype,
                    t.shape,
                    expected.map_or("a non-representable number of".to_string(), |e| e
                        .to_string()),
                    t.data.len()
                ));
            }
        }
        Ok(())
    }

    /// The header JSON, padded with spaces to a multiple of 8 bytes.
    fn header(&self) -> Result<Vec<u8>, SafetensorsError> {
        self.check()?;
        let json_str = |s: &str| {
            serde_json::to_string(s).map_err(|e| SafetensorsError::Writer {
                reason: format!("cannot encode {s:?}: {e}"),
            })
        };
        let mut h = String::from("{");
        if !self.metadata.is_empty() {
            h.push_str(&format!("{}:{{", json_str(METADATA_KEY)?));
            for (i, (k, v)) in self.metadata.iter().enumerate() {
                if i > 0 {
                    h.push(',');
                }
                h.push_str(&format!("{}:{}", json_str(k)?, json_str(v)?));
            }
            h.push('}');
        }
        let mut offset = 0usize;
        for (i, t) in self.tensors.iter().enumerate() {
            if i > 0 || !self.metadata.is_empty() {
                h.push(',');
            }
            let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
            let end = offset + t.data.len();
            h.push_str(&format!(
                "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{offset},{end}]}}",
                json_str(&t.name)?,
                t.dtype.name(),
                shape.join(",")
            ));
            offset = end;
        }
        h.push('}');
        let mut bytes = h.into_bytes();
        bytes.resize(bytes.len().next_multiple_of(8), b' ');
        Ok(bytes)
    }

    /// Writes the file image to `out`.
    fn emit(&self, header: &[u8], out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(header)?;
        for t in &self.tensors {
            out.write_all(&t.data)?;
        }
        Ok(())
    }

    /// The file image.
    pub fn to_bytes(&self) -> Result<Vec<u8>, SafetensorsError> {
        let header = self.header()?;
        let data_len: usize = self.tensors.iter().map(|t| t.data.len()).sum();
        let mut out = Vec::with_capacity(8 + header.len() + data_len);
        self.emit(&header, &mut out)
            .map_err(|source| SafetensorsError::Io {
                file: "<memory>".to_string(),
                source,
            })?;
        Ok(out)
    }

    /// Writes the file to `path` atomically: into a temporary file in the same directory,
    /// synced, then renamed over `path`. On error the temporary file is removed and `path`
    /// is untouched.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), SafetensorsError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = path.as_ref();
        let header = self.header()?;
        let io = |source| SafetensorsError::Io {
            file: path.display().to_string(),
            source,
        };
        let file_name = path.file_name().ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a file path",
            ))
        })?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(file_name);
        tmp_name.push(format!(
            ".tmp.{}.{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = path.with_file_name(tmp_name);
        let result = (|| {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            let mut out = std::io::BufWriter::new(file);
            self.emit(&header, &mut out)?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(io)
    }
}
