//! Models: Gemma 3 (GGUF) and EmbeddingGemma (sentence-transformers folder).
//!
//! Every call into a model releases the GIL. A model is guarded by a mutex, so calls from
//! several Python threads are served one after another (with the GIL released while they
//! wait). Streaming generation runs the model's own generation loop on a background
//! thread that hands tokens to the Python iterator through a channel.

use crate::compiled::parse_numerics;
use crate::errors::{self, err, guard, Error, Kind, Res};
use crate::json::to_py;
use numpy::ndarray::Array2;
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, MutexGuard};
use tg_compiler::CompileOptions;
use tg_models::{EmbeddingGemma, LanguageModel, GenTimings, Logits, SamplingParams, StreamDecoder, Tokenizer};

use tg_models::cache::{cache_dir, DEFAULT_EMBEDDING_MODEL, DEFAULT_MODEL};

/// The path to load: the given one, else `$env`, else the default in the cache; it must
/// exist (a file, or a folder for `folder`).
fn resolve(path: Option<PathBuf>, env: &str, default: &str, folder: bool, fetch: &str) -> Res<PathBuf> {
    let p = path.or_else(|| std::env::var_os(env).filter(|v| !v.is_empty()).map(PathBuf::from)).unwrap_or_else(|| cache_dir().join(default));
    let ok = if folder { p.is_dir() } else { p.is_file() };
    if !ok {
        let what = if folder { "model folder" } else { "model file" };
        return Err(err(
            Kind::ModelNotFound,
            format!("{what} not found: {} (pass a path, set {env}, or run `python3 scripts/{fetch}` to download the default model into {})", p.display(), cache_dir().display()),
        ));
    }
    Ok(p)
}

/// A model error while loading: a "request" error there is about the files (a missing
/// `modules.json`, say), so it becomes `ModelError` like every other load failure.
fn load_error(e: tg_models::ModelError) -> Error {
    let e = errors::model(e);
    if e.kind == Kind::Request {
        err(Kind::Model, e.msg)
    } else {
        e
    }
}

/// A Python list of `{"role", "content"}` dicts as messages, checked as `tg generate
/// --messages` checks its file (the entry that is wrong is named).
pub(crate) fn messages(py: Python<'_>, list: &Bound<'_, PyAny>) -> PyResult<Vec<tg_models::Message>> {
    let json: String = py.import("json")?.call_method1("dumps", (list,)).map_err(|e| err(Kind::Request, format!("messages: {e}")))?.extract()?;
    Ok(tg_models::parse_messages(&json).map_err(|e| err(Kind::Request, format!("messages: {e}")))?)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn json_value<T: serde::Serialize>(v: &T) -> Res<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| err(Kind::Execution, e.to_string()))
}

/// A prompt given as text or as token ids.
#[derive(FromPyObject)]
enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

/// A decoder language model from a GGUF file (Gemma 3, Llama 2/3, Mistral, Qwen2/2.5, Qwen3):
/// tokenizer, logits, generation and chat, compiled and run by Tensor Graphs.
#[pyclass(module = "tensor_graphs", name = "LanguageModel", frozen)]
pub struct PyLanguageModel {
    model: Arc<Mutex<LanguageModel>>,
    tokenizer: Arc<Tokenizer>,
    path: PathBuf,
    config: serde_json::Value,
    n_vocab: usize,
    context_length: usize,
}

impl PyLanguageModel {
    fn run_generation<'py>(&self, py: Python<'py>, ids: Vec<u32>, max_tokens: usize, params: SamplingParams, stream: bool) -> PyResult<Bound<'py, PyAny>> {
        if stream {
            return Ok(Bound::new(py, TokenStream::start(self.model.clone(), self.tokenizer.clone(), ids, max_tokens, params)?)?.into_any());
        }
        let model = self.model.clone();
        let tok = self.tokenizer.clone();
        let text = py.detach(move || {
            guard(|| {
                let (out, _) = lock(&model).generate_tokens(&ids, max_tokens, &params, |_| true).map_err(errors::model)?;
                let text = tok.decode(&out, false).map_err(|e| err(Kind::Execution, e.to_string()))?;
                Ok(tg_models::cut_at_stop(&text, &params.stop).to_string())
            })
        })?;
        Ok(PyString::new(py, &text).into_any())
    }

    fn encode(&self, prompt: Prompt, add_bos: bool) -> Res<Vec<u32>> {
        let ids = match prompt {
            Prompt::Text(t) => self.tokenizer.encode(&t, add_bos, true),
            Prompt::Ids(ids) => ids,
        };
        self.check_ids(&ids)?;
        Ok(ids)
    }

    fn check_ids(&self, ids: &[u32]) -> Res<()> {
        if let Some(&t) = ids.iter().find(|&&t| t as usize >= self.n_vocab) {
            return Err(err(Kind::Request, format!("token id {t} is outside the vocabulary of {}", self.n_vocab)));
        }
        Ok(())
    }
}

#[pymethods]
impl PyLanguageModel {
    /// Loads a decoder GGUF file: `path`, else `$TG_MODEL`, else the default model in the
    /// cache (`~/.cache/tensor-graphs/models/gemma-3-270m-q4_k_m.gguf`). `threads`: worker
    /// threads (0 = all cores). `numerics`: `"exact"` (f32 activations) or `"q8"`
    /// (activations rounded to 8-bit blocks, faster).
    #[new]
    #[pyo3(signature = (path=None, threads=0, numerics="exact", devices=vec!["cpu".to_string()], place=Vec::new()))]
    fn new(py: Python<'_>, path: Option<PathBuf>, threads: usize, numerics: &str, devices: Vec<String>, place: Vec<String>) -> PyResult<Self> {
        let numerics = parse_numerics(numerics)?;
        let devs = crate::compiled::devices_named(&devices, threads)?;
        let placement = crate::compiled::place_options(&place)?;
        let path = resolve(path, "TG_MODEL", DEFAULT_MODEL, false, "fetch_model.py")?;
        let p = path.clone();
        let m = py.detach(move || {
            guard(|| {
                let mut m = LanguageModel::load_on_devices(&p, devs).map_err(load_error)?;
                // The planner uses this machine's kernel profile (`tg profile`) when there is one.
                let (cost, _) = tg_compiler::CostSource::for_this_machine();
                m.set_compile_options(CompileOptions { numerics, cost, placement, ..Default::default() });
                Ok(m)
            })
        })?;
        let config = m.arch().config_json();
        Ok(PyLanguageModel { tokenizer: m.tokenizer.clone(), n_vocab: m.n_vocab(), context_length: m.context_length(), model: Arc::new(Mutex::new(m)), path, config })
    }

    /// The model file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Hyper-parameters read from the file, as a dict.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.config)
    }

    /// Vocabulary size (length of a logits vector).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.n_vocab
    }

    /// Longest token sequence the model accepts.
    #[getter]
    fn context_length(&self) -> usize {
        self.context_length
    }

    /// Id of the beginning-of-sequence token.
    #[getter]
    fn bos_id(&self) -> u32 {
        self.tokenizer.bos()
    }

    /// Id of the end-of-sequence token.
    #[getter]
    fn eos_id(&self) -> u32 {
        self.tokenizer.eos()
    }

    /// Token ids of `text` (llama.cpp-compatible SentencePiece). `add_bos` puts the BOS
    /// token first; `parse_special` turns control-token text such as `<start_of_turn>`
    /// into those tokens (as `tg generate` does).
    #[pyo3(signature = (text, add_bos=true, parse_special=true))]
    fn tokenize(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<u32> {
        self.tokenizer.encode(text, add_bos, parse_special)
    }

    /// Text of token ids; control tokens appear only with `render_special`.
    #[pyo3(signature = (ids, render_special=false))]
    fn detokenize(&self, ids: Vec<u32>, render_special: bool) -> PyResult<String> {
        self.check_ids(&ids)?;
        self.tokenizer.decode(&ids, render_special).map_err(|e| err(Kind::Request, e.to_string()).into())
    }

    /// The vocabulary entry of one token id (SentencePiece text, `▁` for spaces).
    fn token_text(&self, id: u32) -> PyResult<String> {
        self.tokenizer.token_text(id).map(str::to_string).map_err(|e| err(Kind::Request, e.to_string()).into())
    }

    /// Logits for a token sequence (ids, or text tokenized with BOS): float32 of shape
    /// `(vocab_size,)` for the last position, or `(len(tokens), vocab_size)` with
    /// `all_positions=True`.
    #[pyo3(signature = (tokens, all_positions=false))]
    fn logits<'py>(&self, py: Python<'py>, tokens: Prompt, all_positions: bool) -> PyResult<Bound<'py, PyAny>> {
        let ids = self.encode(tokens, true)?;
        let which = if all_positions { Logits::All } else { Logits::Last };
        let model = self.model.clone();
        let n = ids.len();
        let v = py.detach(move || guard(|| lock(&model).forward(&ids, which).map_err(errors::model)))?;
        let vocab = self.n_vocab;
        if all_positions {
            let a = Array2::from_shape_vec((n, vocab), v).map_err(|e| err(Kind::Execution, e.to_string()))?;
            Ok(a.into_pyarray(py).into_any())
        } else {
            Ok(v.into_pyarray(py).into_any())
        }
    }

    /// Generates up to `max_tokens` tokens after `prompt` (text, tokenized with BOS unless
    /// `add_bos=False`, or token ids). `temperature=0` is greedy (argmax, first index on
    /// ties); otherwise sampling with `top_k` (0 = off), `top_p` (1 = off) and `seed`.
    /// Stops early at an end-of-generation token. Returns the generated text, or with
    /// `stream=True` a `TokenStream` that yields each `Token` as it is produced.
    #[pyo3(signature = (prompt, max_tokens=32, temperature=0.0, top_k=40, top_p=0.95, seed=0, add_bos=true, stream=false, min_p=0.05, repeat_penalty=1.0, stop=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: Prompt,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
        add_bos: bool,
        stream: bool,
        min_p: f32,
        repeat_penalty: f32,
        stop: Vec<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ids = self.encode(prompt, add_bos)?;
        let params = SamplingParams { temperature, top_k, top_p, min_p, repeat_penalty, stop, seed, ..Default::default() };
        self.run_generation(py, ids, max_tokens, params, stream)
    }

    /// The assistant's reply to `messages` (a list of `{"role": ..., "content": ...}`
    /// dicts), rendered with the model's chat template (the file's, or one given with
    /// `set_chat_template`) and generated as `generate` does; the states of the
    /// conversation so far are kept, so the next turn processes only its new tokens.
    #[pyo3(signature = (messages, max_tokens=256, temperature=0.0, top_k=40, top_p=0.95, seed=0, stream=false, min_p=0.05, repeat_penalty=1.0, stop=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn chat<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
        stream: bool,
        min_p: f32,
        repeat_penalty: f32,
        stop: Vec<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let msgs = self::messages(py, messages)?;
        let ids = lock(&self.model).chat_prompt(&msgs).map_err(errors::model)?;
        let params = SamplingParams { temperature, top_k, top_p, min_p, repeat_penalty, stop, seed, ..Default::default() };
        self.run_generation(py, ids, max_tokens, params, stream)
    }

    /// Uses the Jinja chat template `source` instead of the file's.
    fn set_chat_template(&self, source: &str) -> PyResult<()> {
        Ok(lock(&self.model).set_chat_template(source).map_err(errors::model)?)
    }

    /// Whether generation is incremental (default `True`): the prompt once, then one token
    /// per run, with the states the compiler chose to keep (the derived KV cache); a
    /// prompt sharing a prefix with the previous sequence starts after it. `False`
    /// recomputes the whole sequence for every token.
    #[getter]
    fn incremental(&self, py: Python<'_>) -> bool {
        let model = self.model.clone();
        py.detach(move || lock(&model).incremental())
    }

    #[setter]
    fn set_incremental(&self, py: Python<'_>, on: bool) {
        let model = self.model.clone();
        py.detach(move || lock(&model).set_incremental(on))
    }

    /// What the incremental path keeps between runs: tokens held, capacity, the kept values
    /// (name, op, shape, axis, bytes), total bytes, tokens of the last prompt reused, and
    /// the derivation's summary.
    fn session<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let model = self.model.clone();
        let info = py.detach(move || lock(&model).session_info());
        to_py(py, &json_value(&info)?)
    }

    /// The compiler's report for the most recently compiled plan (as `Compiled.explain()`
    /// gives its stages), or `None` before the first run.
    fn explain<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let model = self.model.clone();
        let r = py.detach(move || lock(&model).last_report().cloned());
        match r {
            Some(r) => Ok(Some(to_py(py, &serde_json::json!({ "stages": json_value(&r.stages)? }))?)),
            None => Ok(None),
        }
    }

    fn __repr__(&self) -> String {
        format!("LanguageModel(path='{}', vocab_size={}, context_length={})", self.path.display(), self.n_vocab, self.context_length)
    }
}

/// One generated token: its id and the text it completes (empty while a multi-byte
/// character is still incomplete; the texts of all tokens concatenate to the decoded
/// generation).
#[pyclass(module = "tensor_graphs", name = "Token", frozen, eq)]
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// Token id.
    #[pyo3(get)]
    id: u32,
    /// Text completed by this token.
    #[pyo3(get)]
    text: String,
}

#[pymethods]
impl Token {
    fn __repr__(&self) -> String {
        format!("Token(id={}, text={:?})", self.id, self.text)
    }
}

enum Msg {
    Token(u32, String),
    Done(GenTimings),
    Failed(Error),
}

struct StreamState {
    tokens: Vec<u32>,
    text: String,
    timings: Option<GenTimings>,
}

/// Tokens of a generation as they are produced (an iterator of `Token`). The model keeps
/// generating in the background until `max_tokens`, an end-of-generation token, or
/// `close()` (also called when the stream is garbage-collected).
#[pyclass(module = "tensor_graphs", name = "TokenStream", frozen)]
pub struct TokenStream {
    /// The channel from the generation thread; `None` once the stream has ended.
    rx: Mutex<Option<Receiver<Msg>>>,
    state: Mutex<StreamState>,
    stop: Arc<AtomicBool>,
    prompt_tokens: Vec<u32>,
}

impl TokenStream {
    fn start(model: Arc<Mutex<LanguageModel>>, tok: Arc<Tokenizer>, ids: Vec<u32>, n: usize, params: SamplingParams) -> Res<TokenStream> {
        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let prompt = ids.clone();
        std::thread::Builder::new()
            .name("tg-generate".into())
            .spawn(move || {
                let failed_tx = tx.clone();
                let r = guard(|| {
                    let mut dec = StreamDecoder::new(&tok, false);
                    // A token whose text ends inside a multi-byte character is held back
                    // until the next one arrives, so a stream that stops there can still
                    // append the replacement character to it.
                    let mut held: Option<(u32, String)> = None;
                    let result = lock(&model).generate_tokens(&ids, n, &params, |t| {
                        if let Some((id, text)) = held.take() {
                            if tx.send(Msg::Token(id, text)).is_err() {
                                return false;
                            }
                        }
                        let text = dec.push(t).unwrap_or_default();
                        if dec.pending_bytes().is_empty() {
                            if tx.send(Msg::Token(t, text)).is_err() {
                                return false;
                            }
                        } else {
                            held = Some((t, text));
                        }
                        !halt.load(Ordering::Relaxed)
                    });
                    if let Some((id, mut text)) = held.take() {
                        text.push_str(&dec.finish());
                        let _ = tx.send(Msg::Token(id, text));
                    }
                    let (_, timings) = result.map_err(errors::model)?;
                    let _ = tx.send(Msg::Done(timings));
                    Ok(())
                });
                if let Err(e) = r {
                    let _ = failed_tx.send(Msg::Failed(e));
                }
            })
            .map_err(|e| err(Kind::Execution, format!("cannot start the generation thread: {e}")))?;
        Ok(TokenStream { rx: Mutex::new(Some(rx)), state: Mutex::new(StreamState { tokens: Vec::new(), text: String::new(), timings: None }), stop, prompt_tokens: prompt })
    }
}

#[pymethods]
impl TokenStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Token>> {
        if self.stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // Waits for the next message with the GIL released. Only `__next__` takes `rx`, so
        // holding its lock while waiting blocks nothing but another `__next__`.
        let msg = py.detach(|| {
            let mut rx = lock(&self.rx);
            let m = rx.as_ref().map(|r| r.recv());
            if !matches!(m, Some(Ok(Msg::Token(..)))) {
                *rx = None;
            }
            m
        });
        match msg {
            None => Ok(None),
            Some(Ok(Msg::Token(id, text))) => {
                let mut st = lock(&self.state);
                st.tokens.push(id);
                st.text.push_str(&text);
                Ok(Some(Token { id, text }))
            }
            Some(Ok(Msg::Done(t))) => {
                lock(&self.state).timings = Some(t);
                Ok(None)
            }
            Some(Ok(Msg::Failed(e))) => Err(e.into()),
            Some(Err(_)) => Err(err(Kind::Execution, "the generation thread ended without finishing").into()),
        }
    }

    /// Stops the generation (after the token being computed) and ends the iteration.
    fn close(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Ids of the tokens yielded so far.
    #[getter]
    fn tokens(&self) -> Vec<u32> {
        lock(&self.state).tokens.clone()
    }

    /// Text of the tokens yielded so far.
    #[getter]
    fn text(&self) -> String {
        lock(&self.state).text.clone()
    }

    /// The prompt's token ids.
    #[getter]
    fn prompt_tokens(&self) -> Vec<u32> {
        self.prompt_tokens.clone()
    }

    /// Timings in milliseconds (`prompt_ms`, `generate_ms`, `compile_ms`) once the stream
    /// has ended, else `None`.
    #[getter]
    fn timings<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let t = lock(&self.state).timings.clone();
        match t {
            Some(t) => Ok(Some(to_py(py, &json_value(&t)?)?)),
            None => Ok(None),
        }
    }
}

impl Drop for TokenStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Texts given as one string or a sequence of strings.
#[derive(FromPyObject)]
enum Texts {
    One(String),
    Many(Vec<String>),
}

/// EmbeddingGemma (a sentence-transformers folder with F32 safetensors): text embeddings
/// computed by Tensor Graphs on the CPU.
#[pyclass(module = "tensor_graphs", name = "EmbeddingGemma", frozen)]
pub struct PyEmbeddingGemma {
    model: Arc<Mutex<EmbeddingGemma>>,
    path: PathBuf,
    config: serde_json::Value,
    output_dim: usize,
    max_seq_length: usize,
    prompts: std::collections::BTreeMap<String, String>,
    default_prompt_name: Option<String>,
}

#[pymethods]
impl PyEmbeddingGemma {
    /// Loads a sentence-transformers folder: `path`, else `$TG_EMBED_MODEL`, else the
    /// default model in the cache (`~/.cache/tensor-graphs/models/embeddinggemma-300m`).
    /// `threads`: worker threads (0 = all cores).
    #[new]
    #[pyo3(signature = (path=None, threads=0, devices=vec!["cpu".to_string()], place=Vec::new()))]
    fn new(py: Python<'_>, path: Option<PathBuf>, threads: usize, devices: Vec<String>, place: Vec<String>) -> PyResult<Self> {
        let devs = crate::compiled::devices_named(&devices, threads)?;
        let placement = crate::compiled::place_options(&place)?;
        let path = resolve(path, "TG_EMBED_MODEL", DEFAULT_EMBEDDING_MODEL, true, "fetch_embedding_model.py")?;
        let p: PathBuf = path.clone();
        let mut m = py.detach(move || guard(|| EmbeddingGemma::load_on_devices(Path::new(&p), devs).map_err(load_error)))?;
        m.set_compile_options(CompileOptions { cost: tg_compiler::CostSource::for_this_machine().0, placement, ..Default::default() });
        let config = json_value(&m.config)?;
        Ok(PyEmbeddingGemma {
            output_dim: m.config.output_dim(),
            max_seq_length: m.config.max_seq_length,
            prompts: m.config.prompts.clone(),
            default_prompt_name: m.config.default_prompt_name.clone(),
            model: Arc::new(Mutex::new(m)),
            path,
            config,
        })
    }

    /// Embeds `texts` (one string → shape `(dim,)`; a sequence → `(len(texts), dim)`,
    /// float32, L2-normalised) with the task prompt `prompt_name` (`None`: the model's
    /// default prompt, if any; see `prompts`), truncated to `dim` values (Matryoshka:
    /// 768, 512, 256 or 128 for EmbeddingGemma) and normalised again.
    #[pyo3(signature = (texts, prompt_name=None, dim=None))]
    fn embed<'py>(&self, py: Python<'py>, texts: Texts, prompt_name: Option<String>, dim: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
        let (texts, single) = match texts {
            Texts::One(t) => (vec![t], true),
            Texts::Many(v) => (v, false),
        };
        let model = self.model.clone();
        let e = py.detach(move || {
            guard(|| {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                lock(&model).embed(&refs, prompt_name.as_deref(), dim).map_err(errors::model)
            })
        })?;
        let n = e.len();
        let d = e.dim;
        if single {
            Ok(e.data.into_pyarray(py).into_any())
        } else {
            let a = Array2::from_shape_vec((n, d), e.data).map_err(|x| err(Kind::Execution, x.to_string()))?;
            Ok(a.into_pyarray(py).into_any())
        }
    }

    /// Token ids fed to the encoder for `text` with prompt `prompt_name` (BOS, prompt +
    /// text, EOS; truncated to the model's maximum sequence length).
    #[pyo3(signature = (text, prompt_name=None))]
    fn tokenize(&self, py: Python<'_>, text: &str, prompt_name: Option<&str>) -> PyResult<Vec<u32>> {
        let model = self.model.clone();
        Ok(py.detach(|| guard(|| lock(&model).tokenize(text, prompt_name).map_err(errors::model)))?)
    }

    /// Task prompts by name (e.g. `query`, `document`, `STS`).
    #[getter]
    fn prompts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.prompts {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The prompt used when `prompt_name` is `None`, if the model names one.
    #[getter]
    fn default_prompt_name(&self) -> Option<String> {
        self.default_prompt_name.clone()
    }

    /// Width of the full embedding.
    #[getter]
    fn output_dim(&self) -> usize {
        self.output_dim
    }

    /// Longest token sequence embedded (longer texts are truncated).
    #[getter]
    fn max_seq_length(&self) -> usize {
        self.max_seq_length
    }

    /// The model folder.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The model's configuration, as a dict.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.config)
    }

    /// The compiler's report for the most recently compiled plan, or `None`.
    fn explain<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let model = self.model.clone();
        let r = py.detach(move || lock(&model).last_report().cloned());
        match r {
            Some(r) => Ok(Some(to_py(py, &serde_json::json!({ "stages": json_value(&r.stages)? }))?)),
            None => Ok(None),
        }
    }

    fn __repr__(&self) -> String {
        format!("EmbeddingGemma(path='{}', output_dim={})", self.path.display(), self.output_dim)
    }
}
