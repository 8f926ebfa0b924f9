use std::collections::HashMap;
use std::sync::Arc;
use tg_gguf::GgufFile;
use crate::gemma3::WeightShapes;
use crate::ModelError;
use tg_ir::{DType, WeightStore};
use tg_quant::GgmlType;
use tg_safetensors::{Dtype, SafetensorsFile};

/// The tensors of a memory-mapped GGUF file as a [`WeightStore`] (read in place, never
/// copied).
pub struct GgufWeights {
    file: Arc<GgufFile>,
    index: HashMap<String, usize>,
}

impl GgufWeights {
    /// Indexes the tensors of `file` by name.
    pub fn new(file: Arc<GgufFile>) -> GgufWeights {
        let index = file.tensors().iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        GgufWeights { file, index }
    }

    /// The underlying file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }
}

impl WeightStore for GgufWeights {
    fn bytes(&self, name: &str) -> Option<&[u8]> {
        let i = *self.index.get(name)?;
        Some(self.file.tensor_bytes(&self.file.tensors()[i]))
    }
}

/// The tensors of one or more memory-mapped safetensors files as a [`WeightStore`] (read in
/// place, never copied). Each file contributes its tensors under a name prefix, so the
/// sentence-transformers modules (`2_Dense/model.safetensors` → `2_Dense/linear.weight`)
/// share one namespace with the encoder.
pub struct SafetensorsWeights {
    files: Vec<SafetensorsFile>,
    index: HashMap<String, (usize, String)>,
}

impl SafetensorsWeights {
    /// Maps every `(prefix, path)` and indexes its tensors as `prefix + name`.
    pub fn open(files: &[(String, std::path::PathBuf)]) -> Result<SafetensorsWeights, ModelError> {
        let mut out = SafetensorsWeights { files: Vec::new(), index: HashMap::new() };
        for (prefix, path) in files {
            let f = SafetensorsFile::open(path)?;
            let fi = out.files.len();
            for t in f.tensors() {
                let full = format!("{prefix}{}", t.name);
                if out.index.insert(full.clone(), (fi, t.name.to_string())).is_some() {
                    return Err(ModelError::Architecture { file: path.display().to_string(), detail: format!("tensor '{full}' appears twice") });
                }
            }
            out.files.push(f);
        }
        Ok(out)
    }

    fn view(&self, name: &str) -> Option<(&SafetensorsFile, tg_safetensors::TensorView<'_>)> {
        let (fi, local) = self.index.get(name)?;
        let f = &self.files[*fi];
        f.tensor(local).ok().map(|v| (f, v))
    }

    /// Checks that `name` exists with `shape`, in a dtype the kernels read (F32, or F16/BF16
    /// for matrices when `need_f32` is false).
    pub fn check(&self, name: &str, shape: &[usize], need_f32: bool) -> Result<(), ModelError> {
        let (f, v) = self.view(name).ok_or_else(|| ModelError::Request(format!("tensor '{name}' is missing from the model's safetensors files")))?;
        let file = f.name().to_string();
        if v.shape != shape {
            return Err(ModelError::Architecture { file, detail: format!("tensor '{name}' has shape {:?}, expected {shape:?}", v.shape) });
        }
        match (v.dtype, need_f32) {
            (Dtype::F32, _) | (Dtype::F16 | Dtype::BF16, false) => Ok(()),
            (d, _) => Err(ModelError::Architecture { file, detail: format!("tensor '{name}' has dtype {d:?}, which this engine cannot use here") }),
        }
    }

    /// Bytes of all mapped files.
    pub fn mapped_bytes(&self) -> usize {
        self.files.iter().map(|f| f.len()).sum()
    }
}

impl WeightShapes for SafetensorsWeights {
    fn shape_of(&self, name: &str) -> Result<(Vec<usize>, DType), ModelError> {
        let (_, v) = self.view(name).ok_or_else(|| ModelError::Request(format!("tensor '{name}' is missing from the model's safetensors files")))?;
        let dtype = match v.dtype {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::Quant(GgmlType::F16),
            Dtype::BF16 => DType::Quant(GgmlType::BF16),
            d => return Err(ModelError::Request(format!("tensor '{name}' has unsupported dtype {d:?}"))),
        };
        Ok((v.shape.to_vec(), dtype))
    }
}

impl WeightStore for SafetensorsWeights {
    fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.view(name).map(|(_, v)| v.data)
    }
}
