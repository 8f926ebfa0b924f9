//! The generation engine: any decoder language model from a GGUF file.
//!
//! A decoder architecture ([`DecoderArch`]: Gemma 3 in [`crate::gemma3`], …) is a
//! configuration read from the file's metadata and a pure whole-sequence graph
//! (`tokens` → `logits`) built from the shared layers — nothing else. [`LanguageModel`] does
//! the rest for every architecture: it maps the file, checks every tensor the architecture
//! reads, builds the tokenizer, compiles plans per sequence length, derives the incremental
//! plans and keeps their states (`session.rs`), samples and generates (`generate.rs`), and is
//! a [`Model`] with the generate capability. The architecture of a file is found by its
//! `general.architecture` among the kinds of [`crate::KINDS`] that are decoders
//! ([`crate::ModelKind::decoder`]); an architecture this build does not run is an error naming it
//! and listing the ones it does.

use crate::gemma3::{Logits, WeightShapes};
use crate::plans::PlanCache;
use crate::{
    check_inputs, input_error, CompileTimes, Detect, Dim, ElemType, GenTimings, Generate, GgufWeights, InputProblem, Model, ModelError, OpenOptions, SamplingParams, TensorSpec,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tg_compiler::{CompileOptions, CompileReport};
use tg_gguf::GgufFile;
use tg_ir::{DType, Graph, HostTensor};
use tg_runtime::{CpuDevice, Device, Executable};
use tg_tokenizer::{ChatTemplate, Message, Tokenizer};

/// A decoder architecture: what a model file provides to the engine.
pub trait DecoderArch: Send + Sync {
    /// Its registry name (`gemma3`, ...): the file's `general.architecture`.
    fn kind(&self) -> &'static str;

    /// Vocabulary size (rows of the embedding table and of the logits).
    fn n_vocab(&self) -> usize;

    /// The longest sequence it takes.
    fn context_length(&self) -> usize;

    /// Transformer blocks.
    fn n_layer(&self) -> usize;

    /// Every tensor it reads, with its row-major shape (checked when the file is loaded).
    fn expected_tensors(&self) -> Vec<(String, Vec<usize>)>;

    /// The forward pass for `seq` tokens: input `tokens` (i32 `[seq]`), output `logits`
    /// (`[1, n_vocab]` or `[seq, n_vocab]`). A pure function of the tokens: no cache, no
    /// fused ops.
    fn graph(&self, weights: &dyn WeightShapes, seq: usize, logits: Logits) -> Result<Graph, ModelError>;

    /// The configuration as JSON (`tg info`, Python's `config`).
    fn config_json(&self) -> serde_json::Value;

    /// The configuration as its concrete type ([`LanguageModel::config_as`]).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Reads a decoder architecture from a GGUF file's metadata ([`crate::ModelKind::decoder`]).
pub type DecoderFn = fn(&GgufFile) -> Result<Box<dyn DecoderArch>, ModelError>;

/// The decoder architectures of [`crate::KINDS`], by name.
pub fn architectures() -> Vec<&'static str> {
    crate::KINDS.iter().filter(|k| k.decoder.is_some()).map(|k| k.name).collect()
}

/// The architecture of `file`: the decoder kind named by its `general.architecture`; an
/// architecture this build does not run is an error naming it and those it runs.
pub fn arch_from_gguf(file: &GgufFile) -> Result<Box<dyn DecoderArch>, ModelError> {
    let arch = file.get_str("general.architecture")?;
    match crate::KINDS.iter().find(|k| k.name == arch).and_then(|k| k.decoder) {
        Some(read) => read(file),
        None => Err(ModelError::Architecture {
            file: file.name().to_string(),
            detail: format!("architecture '{arch}' is not one this build runs (it runs: {})", architectures().join(", ")),
        }),
    }
}

/// [`crate::ModelKind::detect`] of every decoder kind: a GGUF file whose `general.architecture` is
/// one of them (a damaged GGUF file too: the loader says what is wrong with it).
pub fn detect(path: &Path) -> Detect {
    if !path.is_file() || crate::head(path, 4) != b"GGUF" {
        return Detect::No;
    }
    match GgufFile::open(path) {
        Ok(f) => match f.get_str("general.architecture") {
            Ok(arch) if architectures().contains(&arch) => Detect::Yes,
            Ok(arch) => Detect::Near(format!("a GGUF file of architecture '{arch}'")),
            Err(_) => Detect::Near("a GGUF file with no general.architecture".into()),
        },
        Err(_) => Detect::Yes,
    }
}

/// [`crate::ModelKind::open`] of every decoder kind.
pub fn open_model(path: &Path, o: OpenOptions) -> Result<Box<dyn Model>, ModelError> {
    let mut m = LanguageModel::load_on_devices(path, o.devices)?;
    m.set_compile_options(o.compile);
    Ok(Box::new(m))
}

/// A decoder language model loaded from a GGUF file, of any architecture of [`crate::KINDS`]:
/// the mapped file, its tokenizer, the architecture's graph function, and the engine around
/// it — plans per sequence length, the incremental session, sampling, generation.
pub struct LanguageModel {
    /// The architecture read from the file (its configuration and graph function).
    arch: Arc<dyn DecoderArch>,
    /// Tokenizer built from the file's metadata.
    pub tokenizer: Arc<Tokenizer>,
    pub(crate) file: Arc<GgufFile>,
    pub(crate) weights: Arc<GgufWeights>,
    /// Plans by (sequence length, which logits).
    pub(crate) plans: PlanCache<(usize, Logits)>,
    /// The incremental path: plans by (new rows, capacity), and the kept states.
    pub(crate) session: crate::session::Session,
    /// The chat template: the file's `tokenizer.chat_template`, or one given
    /// ([`LanguageModel::set_chat_template`]).
    chat: Option<ChatTemplate>,
    path: PathBuf,
}

impl LanguageModel {
    /// Maps `path`, reads the architecture's configuration and the tokenizer, and checks
    /// every tensor the model needs (name, shape, type) before anything runs.
    pub fn load(path: impl AsRef<Path>, threads: usize) -> Result<LanguageModel, ModelError> {
        let device: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).map_err(ModelError::Request)?);
        LanguageModel::load_on(path, device)
    }

    /// [`LanguageModel::load`] with plans compiled for and run on `device` (its weights bound there
    /// once, its kept states living there).
    pub fn load_on(path: impl AsRef<Path>, device: Arc<dyn Device>) -> Result<LanguageModel, ModelError> {
        LanguageModel::load_on_devices(path, vec![device])
    }

    /// [`LanguageModel::load`] with plans compiled for `devices` together (the first is home: inputs
    /// arrive, logits leave and kept states live there): the planner places each op on one of
    /// them, from the kernel times measured on each (see `tg_compiler::compile`).
    pub fn load_on_devices(path: impl AsRef<Path>, devices: Vec<Arc<dyn Device>>) -> Result<LanguageModel, ModelError> {
        if devices.is_empty() {
            return Err(ModelError::Request("no devices to run on".into()));
        }
        let file = Arc::new(GgufFile::open(path.as_ref())?);
        let arch: Arc<dyn DecoderArch> = Arc::from(arch_from_gguf(&file)?);
        for (name, shape) in arch.expected_tensors() {
            let (got, dtype) = file.shape_of(&name)?;
            let got = if got.len() == 2 && got[0] == 1 && shape.len() == 1 { vec![got[1]] } else { got };
            if got != shape {
                return Err(ModelError::Architecture { file: file.name().to_string(), detail: format!("tensor '{name}' has shape {got:?}, expected {shape:?}") });
            }
            if let DType::Quant(t) = dtype {
                if matches!(t, tg_quant::GgmlType::I8 | tg_quant::GgmlType::I16 | tg_quant::GgmlType::I32 | tg_quant::GgmlType::I64 | tg_quant::GgmlType::F64) {
                    return Err(ModelError::Architecture { file: file.name().to_string(), detail: format!("tensor '{name}' has unsupported type {t}") });
                }
            }
        }
        let tokenizer = Arc::new(Tokenizer::from_gguf(&file)?);
        if tokenizer.vocab_size() > arch.n_vocab() {
            return Err(ModelError::Architecture {
                file: file.name().to_string(),
                detail: format!("tokenizer has {} tokens, embedding table {}", tokenizer.vocab_size(), arch.n_vocab()),
            });
        }
        let chat = ChatTemplate::from_gguf(&file)?;
        let weights = Arc::new(GgufWeights::new(file.clone()));
        let session = crate::session::Session::new(devices.clone());
        Ok(LanguageModel { arch, tokenizer, file, weights, plans: PlanCache::new(devices), session, chat, path: path.as_ref().to_path_buf() })
    }

    /// The chat template in use (`None`: the file has none and none was given).
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }

    /// Uses the Jinja template `source` for chats instead of the file's, with the file's BOS
    /// and EOS texts as `bos_token` and `eos_token`.
    pub fn set_chat_template(&mut self, source: &str) -> Result<(), ModelError> {
        let text = |id: u32| self.tokenizer.token_text(id).map(str::to_string).unwrap_or_default();
        self.chat = Some(ChatTemplate::from_str(source, &text(self.tokenizer.bos()), &text(self.tokenizer.eos()))?);
        Ok(())
    }

    /// The prompt for the assistant's next turn after `messages`: the chat template rendered
    /// with `add_generation_prompt`, tokenized with special tokens parsed, BOS added when
    /// the file asks for it and the template did not write it already.
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<Vec<u32>, ModelError> {
        let Some(t) = &self.chat else {
            return Err(ModelError::Request(format!(
                "{} has no chat template (no tokenizer.chat_template in the file): give one with --chat-template FILE (Python: chat_template=)",
                self.path.display()
            )));
        };
        let text = t.render(messages, true)?;
        let bos_written = !t.bos_token().is_empty() && text.starts_with(t.bos_token());
        let mut ids = self.tokenizer.encode(&text, false, true);
        if self.tokenizer.add_bos() && !bos_written {
            ids.insert(0, self.tokenizer.bos());
        }
        Ok(ids)
    }

    /// The (home) device the model's plans run on.
    pub fn device(&self) -> Arc<dyn Device> {
        self.plans.device().clone()
    }

    /// Every device the model's plans are compiled for, home first.
    pub fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.plans.devices().to_vec()
    }

    /// The mapped file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The weight store (for the reference interpreter).
    pub fn weights(&self) -> &GgufWeights {
        &self.weights
    }

    /// Sets compiler options for plans compiled from now on (clears the plan caches).
    pub fn set_compile_options(&mut self, o: CompileOptions) {
        self.plans.set_options(o.clone());
        self.session.plans.set_options(o);
    }

    /// Where compiled plans are kept across processes: by default `plans/` in the cache
    /// directory ([`tg_compiler::PlanStore::default_store`]; `TG_PLAN_CACHE=off` disables
    /// it); `None` compiles every plan in this process.
    pub fn set_plan_store(&mut self, store: Option<tg_compiler::PlanStore>) {
        self.plans.set_store(store.clone());
        self.session.plans.set_store(store);
    }

    /// Times every step of every run from now on (see [`LanguageModel::generation_plan`]).
    pub fn set_profiling(&mut self, on: bool) {
        self.plans.set_profiling(on);
        self.session.plans.set_profiling(on);
    }

    /// The report of the most recent compilation (of a whole-sequence plan, or of an
    /// incremental one, whichever came last).
    pub fn last_report(&self) -> Option<&CompileReport> {
        match (self.plans.last_report(), self.session.plans.last_report()) {
            (Some(a), Some(b)) => Some(if self.session.last_compiled_incremental { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// The forward graph for `seq` tokens (the architecture's, on this file's weights).
    pub fn graph(&self, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
        self.arch.graph(&*self.file, seq, logits)
    }

    /// The architecture: its name, configuration and graph function.
    pub fn arch(&self) -> &dyn DecoderArch {
        &*self.arch
    }

    /// The architecture's configuration as its concrete type (e.g.
    /// [`crate::Gemma3Config`]), when it is one.
    pub fn config_as<T: 'static>(&self) -> Option<&T> {
        self.arch.as_any().downcast_ref::<T>()
    }

    /// Vocabulary size (rows of the embedding table and of the logits).
    pub fn n_vocab(&self) -> usize {
        self.arch.n_vocab()
    }

    /// The longest sequence the model takes.
    pub fn context_length(&self) -> usize {
        self.arch.context_length()
    }

    pub(crate) fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Request("empty token sequence".into()));
        }
        if tokens.len() > self.arch.context_length() {
            return Err(ModelError::Request(format!("{} tokens exceed the model's context length of {}", tokens.len(), self.arch.context_length())));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.arch.n_vocab()) {
            return Err(ModelError::Request(format!("token id {t} is outside the vocabulary of {}", self.arch.n_vocab())));
        }
        Ok(())
    }

    /// Compiles (or fetches from the cache) the plan for `seq` tokens.
    pub fn prepare(&mut self, seq: usize, logits: Logits) -> Result<(), ModelError> {
        self.plan(seq, logits).map(|_| ())
    }

    fn plan(&mut self, seq: usize, logits: Logits) -> Result<&mut Executable, ModelError> {
        if !self.plans.contains(&(seq, logits)) {
            self.session.last_compiled_incremental = false;
        }
        let (arch, file) = (&self.arch, &self.file);
        self.plans.get_or_compile((seq, logits), self.weights.clone(), || arch.graph(&**file, seq, logits))
    }

    /// Runs the model on `tokens` and returns the logits (`[1, n_vocab]` for
    /// [`Logits::Last`], `[seq, n_vocab]` for [`Logits::All`]) as a flat vector.
    pub fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>, ModelError> {
        self.check_tokens(tokens)?;
        let exe = self.plan(tokens.len(), logits)?;
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let input = HostTensor::i32(&[ids.len()], ids)?;
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), input);
        let mut out = exe.run(&inputs)?;
        let t = out.remove("logits").ok_or_else(|| ModelError::Request("plan produced no logits".into()))?;
        match t.data {
            tg_ir::HostData::F32(v) => Ok(v),
            _ => Err(ModelError::Request("logits are not f32".into())),
        }
    }

    /// Drops cached plans (e.g. to bound memory during long generations).
    pub fn clear_plans(&mut self) {
        self.plans.clear();
        self.session.plans.clear();
    }

    /// The number of cached plans.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }
}

impl LanguageModel {
    /// The file the model was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token ids of the `tokens` input of [`Model::run`], each checked against the
    /// vocabulary.
    fn token_input(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<u32>, ModelError> {
        check_inputs(&self.path, &Model::inputs(self), inputs)?;
        let t = &inputs["tokens"];
        let tg_ir::HostData::I32(ids) = &t.data else { return Err(input_error(&self.path, InputProblem::DType, "input 'tokens': expected int32")) };
        if ids.is_empty() {
            return Err(input_error(&self.path, InputProblem::Shape, "input 'tokens': no tokens"));
        }
        match ids.iter().find(|&&t| t < 0 || t as usize >= self.arch.n_vocab()) {
            Some(t) => Err(input_error(&self.path, InputProblem::Value, format!("input 'tokens': token id {t} is outside the vocabulary of {}", self.arch.n_vocab()))),
            None => Ok(ids.iter().map(|&t| t as u32).collect()),
        }
    }
}

/// A decoder LLM as a [`Model`]: input `tokens` (int32 `[tokens]`, at most the context
/// length), output `logits` (float32 `[tokens, n_vocab]`: every position, as
/// [`LanguageModel::forward`] with [`Logits::All`]); it generates ([`Model::as_generator`]).
impl Model for LanguageModel {
    fn kind(&self) -> &'static str {
        self.arch.kind()
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn inputs(&self) -> Vec<TensorSpec> {
        vec![TensorSpec::new("tokens", ElemType::I32, vec![Dim::free("tokens", Some(self.arch.context_length()))])]
    }

    fn outputs(&self) -> Vec<TensorSpec> {
        vec![TensorSpec::new("logits", ElemType::F32, vec![Dim::free("tokens", Some(self.arch.context_length())), Dim::Fixed(self.arch.n_vocab())])]
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        LanguageModel::devices(self)
    }

    fn set_compile_options(&mut self, options: CompileOptions) {
        LanguageModel::set_compile_options(self, options)
    }

    fn compile(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<CompileTimes, ModelError> {
        let ids = self.token_input(inputs)?;
        let before = self.plans.stats();
        self.prepare(ids.len(), Logits::All)?;
        Ok(self.plans.stats().since(before))
    }

    fn graphs(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<tg_ir::Graph>, ModelError> {
        let ids = self.token_input(inputs)?;
        Ok(vec![self.graph(ids.len(), Logits::All)?])
    }

    fn run(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, ModelError> {
        let ids = self.token_input(inputs)?;
        let v = self.forward(&ids, Logits::All)?;
        Ok(vec![("logits".to_string(), HostTensor::f32(&[ids.len(), self.arch.n_vocab()], v)?)])
    }

    fn last_report(&self) -> Option<&CompileReport> {
        LanguageModel::last_report(self)
    }

    fn config(&self) -> serde_json::Value {
        self.arch.config_json()
    }

    fn as_generator(&mut self) -> Option<&mut dyn Generate> {
        Some(self)
    }
}

impl Generate for LanguageModel {
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, ModelError> {
        Ok(self.tokenizer.encode(text, add_bos, true))
    }

    fn chat_prompt(&self, messages: &[Message]) -> Result<Vec<u32>, ModelError> {
        LanguageModel::chat_prompt(self, messages)
    }

    fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        Ok(self.tokenizer.decode(ids, false)?)
    }

    fn generate(&mut self, prompt: &[u32], n: usize, params: &SamplingParams, on_token: &mut dyn FnMut(u32) -> bool) -> Result<(Vec<u32>, GenTimings), ModelError> {
        self.generate_tokens(prompt, n, params, on_token)
    }
}
