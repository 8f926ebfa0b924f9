//! Speech embeddings and wake-word scores with openwakeword 0.4.0's ONNX models: the
//! melspectrogram front end, Google's speech_embedding model and wake-word classifiers such
//! as `hey_jarvis`, each run through [`Onnx`].
//!
//! The pipeline, as the package runs it:
//!
//! 1. 16 kHz mono samples in int16 units (a float WAV's ±1 is ±32768) → the mel model →
//!    32-band frames of 512 samples at a hop of 160: `frames = (n − 512)/160 + 1`; each value
//!    then becomes `x/10 + 2`;
//! 2. windows of 76 frames at a stride of 8 (0.775 s, every 80 ms) → the embedding model →
//!    one 96-d embedding per window: `windows = (frames − 76)/8 + 1`;
//! 3. a wake-word classifier takes 16 consecutive embeddings (1.28 s of windows) and gives
//!    the score of the last; before the 16th window the history is the embedding of
//!    silence, as the package's feature buffer starts out.
//!
//! The mel model is not local in time: its log scale is floored at 80 dB below the
//! loudest frame of its whole input (the whole tensor, batch included). So a clip's mel
//! frames come from one run over the whole clip, as the package computes them; the clip is
//! padded with zeros to the next of a few lengths (1 s·√2^k), whose frames are dropped —
//! silence cannot raise the loudest frame, so the frames kept are the unpadded run's — and
//! only a few plans are compiled whatever the lengths of the files. The embedding model is
//! local: windows go through it in batches of fixed sizes. [`AudioStream`] runs the mel
//! model on each 80 ms of new frames, as the package's streaming does (its floor is then
//! that of the 8 frames, which is why the package's streaming and whole-clip results differ
//! in quiet stretches).

use crate::onnx::Onnx;
use crate::{Model, ModelError};
use std::collections::HashMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tg_compiler::CompileOptions;
use tg_ir::HostTensor;
use tg_runtime::Device;

/// The models' sample rate (Hz).
pub const SAMPLE_RATE: u32 = 16_000;
/// Samples per mel frame.
pub const FRAME_LEN: usize = 512;
/// Samples between mel frames.
pub const HOP: usize = 160;
/// Mel bands per frame.
pub const MEL_BANDS: usize = 32;
/// Frames per embedding window.
pub const WINDOW: usize = 76;
/// Frames between windows.
pub const STRIDE: usize = 8;
/// Size of an embedding.
pub const EMBED_DIM: usize = 96;
/// Embeddings a wake-word classifier looks at.
pub const CONTEXT: usize = 16;
/// The shortest mel run of the whole-clip path, in frames (1 s); longer clips are padded
/// to this times √2^k.
pub const MEL_BUCKET: usize = 100;
/// Samples of audio the streaming path takes at a time (80 ms: one window stride).
pub const STREAM_CHUNK: usize = HOP * STRIDE;
/// The mel model's file name in the model folder.
pub const MEL_FILE: &str = "melspectrogram.onnx";
/// The embedding model's file name in the model folder.
pub const EMBED_FILE: &str = "embedding_model.onnx";
/// The shortest audio that gives one window (12,512 samples: 0.782 s at 16 kHz).
pub const MIN_SAMPLES: usize = FRAME_LEN + HOP * (WINDOW - 1);

/// Frames of the mel run for a clip of `frames` frames: the first of [`MEL_BUCKET`]·√2^k
/// that holds them.
pub fn mel_bucket(frames: usize) -> usize {
    let mut b = MEL_BUCKET as f64;
    while (b.ceil() as usize) < frames {
        b *= std::f64::consts::SQRT_2;
    }
    b.ceil() as usize
}
/// Windows per run of the embedding model, largest first.
const EMBED_BATCHES: &[usize] = &[32, 8, 1];

/// Windows per run of the sliding embedding model ([`sliding_model`]), largest first: a run
/// of `n` windows reads `76 + 8·(n − 1)` frames (128 windows: 10.9 s of audio).
const SLIDING_WINDOWS: &[usize] = &[128, 16];

/// The values of an integer initializer (raw little-endian or `int64_data`).
fn ints(t: &tg_onnx::proto::TensorProto) -> Option<Vec<i64>> {
    match &t.raw_data {
        Some(r) if !r.is_empty() => (r.len() % 8 == 0).then(|| r.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default())).collect()),
        _ => Some(t.int64_data.clone()),
    }
}

/// The embedding model rewritten to embed every window of a whole sequence of frames in one
/// run, when it is openwakeword's speech_embedding model; `None` for any other graph.
///
/// That model is convolutional along time with no padding in time, and its three poolings
/// that stride in time (by 2 each) make its total stride 8 frames — the stride of the
/// windows. So on a sequence of `76 + 8·(n − 1)` frames, output position `j` of the last
/// layer sees exactly the frames of window `j` through the same weights in the same order:
/// the `n` windows' embeddings, with the 9.5-fold overlap of neighbouring windows computed
/// once instead of for every window. Two reshapes pin the window length, and are rewritten:
/// the first (`[−1, 1, 76, 34]`, the padded frames as one NCHW plane) becomes
/// `[1, 1, −1, 34]`; the last (`[−1, 1, 1, 96]`, one window's channels as its embedding)
/// becomes a transpose of `[1, 96, n, 1]` to `[1, n, 1, 96]`. The input's declared shape
/// becomes `[1, frames, 32, 1]`.
pub fn sliding_model(m: &tg_onnx::OnnxModel) -> Option<tg_onnx::OnnxModel> {
    use tg_onnx::proto::{tensor_shape_proto::dimension::Value as D, type_proto::Value as T};
    let mut p = m.proto().clone();
    let g = p.graph.as_mut()?;
    if g.input.len() != 1 + g.initializer.iter().filter(|t| g.input.iter().any(|i| i.name == t.name)).count() || g.output.len() != 1 {
        return None;
    }
    let out_name = g.output[0].name.clone()?;
    let reshapes: Vec<usize> = (0..g.node.len()).filter(|&i| g.node[i].op_type.as_deref() == Some("Reshape")).collect();
    let [first, last] = reshapes[..] else { return None };
    let shape_of = |g: &tg_onnx::proto::GraphProto, i: usize| -> Option<(usize, Vec<i64>)> {
        let name = g.node[i].input.get(1)?;
        let k = g.initializer.iter().position(|t| t.name.as_ref() == Some(name))?;
        Some((k, ints(&g.initializer[k])?))
    };
    let (k1, s1) = shape_of(g, first)?;
    let (_, s2) = shape_of(g, last)?;
    let (w, e) = (WINDOW as i64, EMBED_DIM as i64);
    if s1.len() != 4 || s1[..3] != [-1, 1, w] || s2 != [-1, 1, 1, e] || g.node[last].output.first() != Some(&out_name) {
        return None;
    }
    // The first reshape's target must be read by it alone.
    let target = g.node[first].input[1].clone();
    if g.node.iter().filter(|n| n.input.contains(&target)).count() != 1 {
        return None;
    }
    let t = &mut g.initializer[k1];
    t.raw_data = None;
    t.int64_data = vec![1, 1, -1, s1[3]];
    let n = &mut g.node[last];
    n.op_type = Some("Transpose".into());
    n.input.truncate(1);
    n.attribute = vec![tg_onnx::proto::AttributeProto {
        name: Some("perm".into()),
        r#type: Some(tg_onnx::proto::attribute_proto::AttributeType::Ints as i32),
        ints: vec![0, 2, 3, 1],
        ..Default::default()
    }];
    let input = g.input.iter_mut().find(|i| !g.initializer.iter().any(|t| t.name == i.name))?;
    let Some(T::TensorType(tt)) = input.r#type.as_mut()?.value.as_mut() else { return None };
    let dims = &mut tt.shape.as_mut()?.dim;
    if dims.len() != 4 {
        return None;
    }
    dims[0].value = Some(D::DimValue(1));
    dims[1].value = Some(D::DimParam("frames".into()));
    if let Some(T::TensorType(ot)) = g.output[0].r#type.as_mut().and_then(|t| t.value.as_mut()) {
        ot.shape = None;
    }
    tg_onnx::OnnxModel::from_proto(m.path.clone(), p).ok()
}

/// Windows of one clip and their embeddings.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioEmbeddings {
    /// Number of windows.
    pub windows: usize,
    /// `[windows, 96]`, row-major.
    pub data: Vec<f32>,
}

impl AudioEmbeddings {
    /// Window `i`'s embedding.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * EMBED_DIM..(i + 1) * EMBED_DIM]
    }
}

/// Start and end time (s) of window `w` in the audio.
pub fn window_span(w: usize) -> (f64, f64) {
    let start = w * STRIDE * HOP;
    (start as f64 / SAMPLE_RATE as f64, (start + MIN_SAMPLES) as f64 / SAMPLE_RATE as f64)
}

/// Mel frames in `n` samples (0 below one frame).
pub fn frames_in(n: usize) -> usize {
    if n < FRAME_LEN {
        0
    } else {
        (n - FRAME_LEN) / HOP + 1
    }
}

/// Windows in `frames` mel frames.
pub fn windows_in(frames: usize) -> usize {
    if frames < WINDOW {
        0
    } else {
        (frames - WINDOW) / STRIDE + 1
    }
}

/// A run of consecutive windows scoring at least the threshold.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Detection {
    /// The wake word.
    pub wakeword: String,
    /// First and last window of the run.
    pub first_window: usize,
    /// Last window of the run.
    pub last_window: usize,
    /// Start of the first window (s).
    pub start_s: f64,
    /// End of the last window (s).
    pub end_s: f64,
    /// The highest score in the run.
    pub peak: f32,
}

/// Runs of `scores` at or above `threshold`.
pub fn detections(wakeword: &str, scores: &[f32], threshold: f32) -> Vec<Detection> {
    let mut out: Vec<Detection> = Vec::new();
    for (w, &s) in scores.iter().enumerate() {
        if s < threshold {
            continue;
        }
        match out.last_mut() {
            Some(d) if d.last_window + 1 == w => {
                d.last_window = w;
                d.end_s = window_span(w).1;
                d.peak = d.peak.max(s);
            }
            _ => out.push(Detection { wakeword: wakeword.to_string(), first_window: w, last_window: w, start_s: window_span(w).0, end_s: window_span(w).1, peak: s }),
        }
    }
    out
}

/// The three kinds of models of the pipeline.
pub struct AudioEmbedder {
    dir: PathBuf,
    mel: Onnx,
    embed: Onnx,
    /// The embedding model over whole sequences ([`sliding_model`]), when the model allows
    /// it and [`AudioEmbedder::set_sliding`] has not switched it off.
    sliding: Option<Onnx>,
    sliding_on: bool,
    wakewords: Vec<(String, Onnx)>,
    /// The embedding of silence (the history before the first windows).
    silence: Option<Vec<f32>>,
}

fn tensor(shape: &[usize], data: Vec<f32>) -> Result<HostTensor, ModelError> {
    Ok(HostTensor::f32(shape, data)?)
}

/// The only output of one run of `m` on one input.
fn run1(m: &mut Onnx, input: &str, t: HostTensor) -> Result<Vec<f32>, ModelError> {
    let mut feed = HashMap::new();
    feed.insert(input.to_string(), t);
    let out = m.run(&feed)?;
    let (name, t) = out.into_iter().next().ok_or_else(|| ModelError::Request(format!("{}: no output", m.path().display())))?;
    t.as_f32().map(|v| v.to_vec()).ok_or_else(|| ModelError::Request(format!("{}: output '{name}' is not float", m.path().display())))
}

fn input_name(m: &Onnx) -> Result<String, ModelError> {
    m.inputs().into_iter().next().map(|s| s.name).ok_or_else(|| ModelError::Architecture { file: m.path().display().to_string(), detail: "the model has no input".into() })
}

impl AudioEmbedder {
    /// Opens the mel and embedding models in `dir` ([`MEL_FILE`], [`EMBED_FILE`]) for
    /// `devices` (home first).
    pub fn open(dir: impl AsRef<Path>, devices: Vec<Arc<dyn Device>>) -> Result<AudioEmbedder, ModelError> {
        let dir = dir.as_ref().to_path_buf();
        let file = |name: &str| -> Result<PathBuf, ModelError> {
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(ModelError::NotFound(format!("{} (the audio model folder must hold {MEL_FILE} and {EMBED_FILE})", p.display())))
            }
        };
        let mel = Onnx::open(file(MEL_FILE)?, devices.clone())?;
        let embed = Onnx::open(file(EMBED_FILE)?, devices.clone())?;
        let sliding = sliding_model(embed.model()).map(|m| Onnx::from_model(m, devices)).transpose()?;
        Ok(AudioEmbedder { dir, mel, embed, sliding, sliding_on: true, wakewords: Vec::new(), silence: None })
    }

    /// Whether clips embed their windows through the sliding model ([`sliding_model`]: one
    /// run over the frames of many windows; on by default) or window by window, as
    /// openwakeword does (the same embeddings, about 9 times the work).
    pub fn set_sliding(&mut self, on: bool) {
        self.sliding_on = on;
    }

    /// Whether windows are embedded through the sliding model (it applies to this model
    /// file and is switched on).
    pub fn sliding(&self) -> bool {
        self.sliding_on && self.sliding.is_some()
    }

    /// Every model of the pipeline: mel, embedding (window by window and sliding) and the
    /// wake words.
    fn models_mut(&mut self) -> impl Iterator<Item = &mut Onnx> {
        [&mut self.mel, &mut self.embed].into_iter().chain(self.sliding.as_mut()).chain(self.wakewords.iter_mut().map(|(_, m)| m))
    }

    /// Compile options of the plans compiled from now on (every model).
    pub fn set_compile_options(&mut self, options: CompileOptions) {
        for m in self.models_mut() {
            m.set_compile_options(options.clone());
        }
    }

    /// Where compiled plans are kept across processes.
    pub fn set_plan_store(&mut self, store: Option<tg_compiler::PlanStore>) {
        for m in self.models_mut() {
            m.set_plan_store(store.clone());
        }
    }

    /// Adds a wake-word classifier: a path to an `.onnx` file, or a name looked up in the
    /// model folder as `NAME_v0.1.onnx` or `NAME.onnx`. Returns the name its scores go by.
    pub fn add_wakeword(&mut self, name_or_path: &str) -> Result<String, ModelError> {
        let given = Path::new(name_or_path);
        let (path, name) = if given.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx")) {
            let stem = given.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
            (given.to_path_buf(), stem.trim_end_matches("_v0.1").to_string())
        } else {
            let cands = [self.dir.join(format!("{name_or_path}_v0.1.onnx")), self.dir.join(format!("{name_or_path}.onnx"))];
            match cands.iter().find(|p| p.is_file()) {
                Some(p) => (p.clone(), name_or_path.to_string()),
                None => {
                    return Err(ModelError::NotFound(format!(
                        "wake word '{name_or_path}': neither {} nor {} (give a name of a classifier in the model folder, or a path to an .onnx file)",
                        cands[0].display(),
                        cands[1].display()
                    )))
                }
            }
        };
        let m = Onnx::open(&path, self.mel.devices())?;
        let shape = m.inputs().into_iter().next().and_then(|s| s.dims).map(|d| d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","));
        if shape.as_deref() != Some(&format!("1,{CONTEXT},{EMBED_DIM}")) {
            return Err(ModelError::Architecture {
                file: path.display().to_string(),
                detail: format!("not a wake-word classifier: its input is [{}], expected [1, {CONTEXT}, {EMBED_DIM}]", shape.unwrap_or_default()),
            });
        }
        self.wakewords.push((name.clone(), m));
        Ok(name)
    }

    /// The wake words added, in order.
    pub fn wakewords(&self) -> Vec<String> {
        self.wakewords.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Mel frames (`[frames, 32]`, after `x/10 + 2`) of 16 kHz samples in int16 units: one
    /// run over the clip padded with zeros to [`mel_bucket`] frames.
    pub fn mel(&mut self, samples: &[f32]) -> Result<Vec<f32>, ModelError> {
        let frames = frames_in(samples.len());
        if frames == 0 {
            return Ok(Vec::new());
        }
        let len = FRAME_LEN + HOP * (mel_bucket(frames) - 1);
        let mut x = samples.to_vec();
        x.resize(len.max(samples.len()), 0.0);
        let mut y = self.mel_exact(&x)?;
        if y.len() < frames * MEL_BANDS {
            return Err(ModelError::Architecture { file: self.mel.path().display().to_string(), detail: format!("gave {} values for {frames} frames", y.len()) });
        }
        y.truncate(frames * MEL_BANDS);
        Ok(y)
    }

    /// Mel frames of exactly these samples in one run (a plan for this length).
    fn mel_exact(&mut self, samples: &[f32]) -> Result<Vec<f32>, ModelError> {
        let input = input_name(&self.mel)?;
        let y = run1(&mut self.mel, &input, tensor(&[1, samples.len()], samples.to_vec())?)?;
        Ok(y.iter().map(|v| v / 10.0 + 2.0).collect())
    }

    /// Embeddings of the windows of `mel` (`[frames, 32]`).
    pub fn embed_mel(&mut self, mel: &[f32]) -> Result<AudioEmbeddings, ModelError> {
        let windows = windows_in(mel.len() / MEL_BANDS);
        if self.sliding() && windows >= SLIDING_WINDOWS[SLIDING_WINDOWS.len() - 1] / 2 {
            return self.embed_sliding(mel, windows);
        }
        let input = input_name(&self.embed)?;
        let per = WINDOW * MEL_BANDS;
        let mut data = Vec::with_capacity(windows * EMBED_DIM);
        let mut w = 0;
        while w < windows {
            let b = EMBED_BATCHES.iter().copied().find(|&b| b <= windows - w).unwrap_or(1);
            let mut x = Vec::with_capacity(b * per);
            for k in 0..b {
                let f0 = (w + k) * STRIDE * MEL_BANDS;
                x.extend_from_slice(&mel[f0..f0 + per]);
            }
            let y = run1(&mut self.embed, &input, tensor(&[b, WINDOW, MEL_BANDS, 1], x)?)?;
            if y.len() != b * EMBED_DIM {
                return Err(ModelError::Architecture { file: self.embed.path().display().to_string(), detail: format!("gave {} values for {b} windows", y.len()) });
            }
            data.extend_from_slice(&y);
            w += b;
        }
        Ok(AudioEmbeddings { windows, data })
    }

    /// [`Self::embed_mel`] through the sliding model: runs of [`SLIDING_WINDOWS`] windows,
    /// the last one's frames past the clip zero (the windows they reach are dropped).
    fn embed_sliding(&mut self, mel: &[f32], windows: usize) -> Result<AudioEmbeddings, ModelError> {
        let Some(m) = self.sliding.as_mut() else { return Err(ModelError::Request("internal: no sliding model".into())) };
        let input = input_name(m)?;
        let mut data = Vec::with_capacity(windows * EMBED_DIM);
        let mut w = 0;
        while w < windows {
            let left = windows - w;
            let n = SLIDING_WINDOWS.iter().copied().find(|&n| n <= left || n / 2 < left).unwrap_or(SLIDING_WINDOWS[SLIDING_WINDOWS.len() - 1]);
            let frames = WINDOW + STRIDE * (n - 1);
            let f0 = w * STRIDE * MEL_BANDS;
            let mut x = vec![0f32; frames * MEL_BANDS];
            let have = (mel.len() - f0).min(x.len());
            x[..have].copy_from_slice(&mel[f0..f0 + have]);
            let y = run1(m, &input, tensor(&[1, frames, MEL_BANDS, 1], x)?)?;
            if y.len() < n * EMBED_DIM {
                return Err(ModelError::Architecture { file: m.path().display().to_string(), detail: format!("the sliding model gave {} values for {n} windows", y.len()) });
            }
            let take = n.min(left);
            data.extend_from_slice(&y[..take * EMBED_DIM]);
            w += take;
        }
        Ok(AudioEmbeddings { windows, data })
    }

    /// Embeddings of 16 kHz samples in int16 units; at least [`MIN_SAMPLES`] are needed.
    pub fn embed(&mut self, samples: &[f32]) -> Result<AudioEmbeddings, ModelError> {
        if samples.len() < MIN_SAMPLES {
            return Err(ModelError::Request(format!(
                "the audio is {:.3} s long ({} samples at 16 kHz); one embedding window needs {:.3} s ({MIN_SAMPLES} samples)",
                samples.len() as f64 / SAMPLE_RATE as f64,
                samples.len(),
                MIN_SAMPLES as f64 / SAMPLE_RATE as f64
            )));
        }
        let mel = self.mel(samples)?;
        self.embed_mel(&mel)
    }

    /// The embedding of silence: what the history holds before the first windows.
    pub fn silence(&mut self) -> Result<Vec<f32>, ModelError> {
        if self.silence.is_none() {
            let mel = self.mel(&vec![0f32; MIN_SAMPLES])?;
            self.silence = Some(self.embed_mel(&mel)?.data);
        }
        Ok(self.silence.clone().unwrap_or_default())
    }

    /// The score of wake word `k` (in [`Self::wakewords`] order) on the 16 embeddings of
    /// `context` (`[16, 96]`).
    pub fn score(&mut self, k: usize, context: &[f32]) -> Result<f32, ModelError> {
        let (_, m) = self.wakewords.get_mut(k).ok_or_else(|| ModelError::Request(format!("no wake word {k}")))?;
        let input = input_name(m)?;
        let y = run1(m, &input, tensor(&[1, CONTEXT, EMBED_DIM], context.to_vec())?)?;
        y.first().copied().ok_or_else(|| ModelError::Request("the wake-word model gave no score".into()))
    }

    /// Per wake word, the score of every window of `emb`.
    pub fn scores(&mut self, emb: &AudioEmbeddings) -> Result<Vec<(String, Vec<f32>)>, ModelError> {
        if self.wakewords.is_empty() {
            return Ok(Vec::new());
        }
        let silence = self.silence()?;
        let mut out = Vec::new();
        for k in 0..self.wakewords.len() {
            let mut s = Vec::with_capacity(emb.windows);
            let mut ctx = Vec::with_capacity(CONTEXT * EMBED_DIM);
            for w in 0..emb.windows {
                ctx.clear();
                for j in (w + 1) as isize - CONTEXT as isize..=w as isize {
                    ctx.extend_from_slice(if j < 0 { &silence } else { emb.row(j as usize) });
                }
                s.push(self.score(k, &ctx)?);
            }
            out.push((self.wakewords[k].0.clone(), s));
        }
        Ok(out)
    }
}

/// One window's results in streaming.
#[derive(Debug, Clone)]
pub struct StreamWindow {
    /// Window index from the start of the stream.
    pub window: usize,
    /// Its embedding.
    pub embedding: Vec<f32>,
    /// Per wake word (in [`AudioEmbedder::wakewords`] order), its score.
    pub scores: Vec<f32>,
}

/// The incremental pipeline: audio in, windows out as soon as their samples have arrived.
///
/// It keeps three rings, each as long as the next stage looks back: the samples of the next
/// mel frames (at most 352 + 1,280), the last 84 mel frames and the last 16 embeddings. The
/// mel model runs on 1,632 samples at a time (8 new frames), the embedding model on one
/// window; so each 80 ms of audio costs one run of each, and nothing is computed twice.
/// Windows are numbered as in [`AudioEmbedder::embed`] and start once 76 frames have arrived
/// (the package fills its buffer with ones before that). The mel floor is that of each 8
/// frames, as in the package's streaming, so in quiet stretches the values differ from the
/// whole-clip ones (see the module docs).
///
/// This is a ring and not the compiler's derived incremental plans because every stage is a
/// fixed window sliding by a fixed stride: the state is exactly the rings, and there is no
/// graph over a growing sequence to derive from.
pub struct AudioStream {
    samples: Vec<f32>,
    frames: VecDeque<f32>,
    frames_total: usize,
    history: VecDeque<Vec<f32>>,
    windows: usize,
}

impl Default for AudioStream {
    fn default() -> Self {
        Self::new()
    }
}

impl AudioStream {
    /// An empty stream.
    pub fn new() -> AudioStream {
        AudioStream { samples: Vec::new(), frames: VecDeque::new(), frames_total: 0, history: VecDeque::new(), windows: 0 }
    }

    /// Windows given out so far.
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// Adds 16 kHz samples (int16 units) and returns the windows they complete.
    pub fn push(&mut self, m: &mut AudioEmbedder, samples: &[f32]) -> Result<Vec<StreamWindow>, ModelError> {
        self.samples.extend_from_slice(samples);
        let need = FRAME_LEN + HOP * (STRIDE - 1);
        let mut out = Vec::new();
        while self.samples.len() >= need {
            let mel = m.mel_exact(&self.samples[..need])?;
            self.samples.drain(..HOP * STRIDE);
            self.frames.extend(mel);
            self.frames_total += STRIDE;
            // Window w covers frames [8w, 8w + 76): 76 is not a multiple of 8, so the ring
            // keeps 76 + 8 frames.
            while self.frames.len() > (WINDOW + STRIDE) * MEL_BANDS {
                self.frames.pop_front();
            }
            if self.frames_total >= self.windows * STRIDE + WINDOW {
                let first = self.frames_total - self.frames.len() / MEL_BANDS;
                let skip = (self.windows * STRIDE - first) * MEL_BANDS;
                let frames: Vec<f32> = self.frames.iter().skip(skip).take(WINDOW * MEL_BANDS).copied().collect();
                let e = m.embed_mel(&frames)?.data;
                if self.history.is_empty() {
                    let s = m.silence()?;
                    self.history.extend(std::iter::repeat_n(s, CONTEXT - 1));
                }
                self.history.push_back(e.clone());
                while self.history.len() > CONTEXT {
                    self.history.pop_front();
                }
                let ctx: Vec<f32> = self.history.iter().flatten().copied().collect();
                let scores = (0..m.wakewords.len()).map(|k| m.score(k, &ctx)).collect::<Result<_, _>>()?;
                out.push(StreamWindow { window: self.windows, embedding: e, scores });
                self.windows += 1;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(frames_in(511), 0);
        assert_eq!(frames_in(512), 1);
        assert_eq!(frames_in(16000), 97);
        assert_eq!(windows_in(75), 0);
        assert_eq!(windows_in(76), 1);
        assert_eq!(windows_in(84), 2);
        assert_eq!(windows_in(frames_in(MIN_SAMPLES)), 1);
        assert_eq!(windows_in(frames_in(MIN_SAMPLES - 1)), 0);
        assert_eq!(STREAM_CHUNK, 1280);
    }

    #[test]
    fn detections_merge_runs() {
        let d = detections("w", &[0.1, 0.6, 0.9, 0.2, 0.7], 0.5);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].first_window, d[0].last_window, d[0].peak), (1, 2, 0.9));
        assert_eq!((d[1].first_window, d[1].last_window), (4, 4));
        assert!((d[0].start_s - 0.08).abs() < 1e-9);
    }
}
