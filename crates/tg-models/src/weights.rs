use std::collections::HashMap;
use std::sync::Arc;
use tg_gguf::GgufFile;
use tg_ir::WeightStore;

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
