//! The image and audio models: `TerrainDiffusion` (terrain heightmaps from the diffusion
//! UNet, `tg_models::terrain`) and `AudioEmbedder` (speech embeddings and wake-word scores
//! with openwakeword's models, `tg_models::audio`). Both release the GIL while they run and
//! guard their model with a mutex, like the other models.

use crate::errors::{self, err, guard, Kind, Res};
use numpy::ndarray::{Array1, Array2, Array3};
use numpy::{IntoPyArray, PyReadonlyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use tg_compiler::CompileOptions;
use tg_models::audio::{AudioEmbedder, EMBED_DIM, SAMPLE_RATE};
use tg_models::terrain::{self, Init, Request, TerrainDiffusion, SIZE};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ONNX models folder: `path`, else `$TG_ONNX_MODELS`, else the cache's; it must hold
/// `file`.
fn onnx_dir(path: Option<PathBuf>, file: &str) -> Res<PathBuf> {
    let dir = path.unwrap_or_else(tg_models::cache::onnx_models_dir);
    let p = if dir.is_file() { dir.clone() } else { dir.join(file) };
    if !p.is_file() {
        return Err(err(
            Kind::ModelNotFound,
            format!(
                "{} not found (pass a path, set TG_ONNX_MODELS, or run `python3 scripts/fetch_onnx_models.py` to download the models into {})",
                p.display(),
                tg_models::cache::onnx_cache_dir().display()
            ),
        ));
    }
    Ok(p)
}

fn options() -> CompileOptions {
    let mut o = CompileOptions { cost: tg_compiler::CostSource::for_this_machine().0, ..Default::default() };
    o.placement.first_use = tg_compiler::FirstUse::for_this_machine();
    o
}

/// A difficulty given as one int or a sequence.
#[derive(FromPyObject)]
enum Difficulty {
    One(u32),
    Many(Vec<u32>),
}

/// Terrain heightmaps (128×128) from the terrain diffusion consistency UNet
/// (adaptive-terrain-diffusion 0.4.2), compiled and run by Tensor Graphs.
#[pyclass(module = "tensor_graphs", name = "TerrainDiffusion", frozen)]
pub struct PyTerrainDiffusion {
    model: Arc<Mutex<TerrainDiffusion>>,
    path: PathBuf,
}

#[pymethods]
impl PyTerrainDiffusion {
    /// Loads the UNet: `path` (the `.onnx` file or its folder), else `$TG_ONNX_MODELS`, else
    /// the ONNX models folder of the cache. `threads`: worker threads (0 = all cores).
    #[new]
    #[pyo3(signature = (path=None, threads=0, devices=vec!["cpu".to_string()]))]
    fn new(py: Python<'_>, path: Option<PathBuf>, threads: usize, devices: Vec<String>) -> PyResult<Self> {
        let devs = crate::compiled::devices_named(&devices, threads)?;
        let path = onnx_dir(path, terrain::UNET_FILE)?;
        let p = path.clone();
        let mut m = py.detach(move || guard(|| TerrainDiffusion::open(&p, devs).map_err(errors::model)))?;
        m.set_compile_options(options());
        Ok(PyTerrainDiffusion { model: Arc::new(Mutex::new(m)), path })
    }

    /// Generates `batch` heightmaps, shape `(batch, 128, 128)`, float32: the UNet's values
    /// (about −1..1), or heights in metres with `metres=True` (the package's transform, each
    /// floor at 0). `difficulty`: 1–100, one or one per sample. `steps`: 1 is one
    /// consistency step; more is multistep consistency sampling. `noise`: instead of the
    /// seed's, the starting noise `(batch, 1, 128, 128)` or `(batch, 128, 128)`, or every
    /// step's `(steps, batch, 1, 128, 128)`. `init`:
    /// image to image from heights in metres `(128, 128)` or `(batch, 128, 128)` (other
    /// sizes resampled), departing from it by `strength` (0–1).
    #[pyo3(signature = (difficulty, seed=0, steps=1, batch=1, noise=None, init=None, strength=0.5, metres=false))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        difficulty: Difficulty,
        seed: u64,
        steps: usize,
        batch: usize,
        noise: Option<PyReadonlyArrayDyn<'py, f32>>,
        init: Option<PyReadonlyArrayDyn<'py, f32>>,
        strength: f32,
        metres: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let px = SIZE * SIZE;
        let noise = match noise {
            None => None,
            Some(a) => {
                let s = a.shape().to_vec();
                let ok = matches!(s[..], [n, 1, SIZE, SIZE] | [n, SIZE, SIZE] if n == batch) || matches!(s[..], [st, n, 1, SIZE, SIZE] if n == batch && st == steps);
                if !ok {
                    return Err(err(Kind::Shape, format!("noise has shape {s:?}; the starting noise ({batch}, 1, 128, 128) or ({batch}, 128, 128), or every step's ({steps}, {batch}, 1, 128, 128), is needed for batch={batch}, steps={steps}")).into());
                }
                Some(a.as_array().iter().copied().collect::<Vec<f32>>())
            }
        };
        let init = match init {
            None => None,
            Some(a) => {
                let s = a.shape().to_vec();
                let (n, h, w) = match s[..] {
                    [h, w] => (1, h, w),
                    [n, h, w] => (n, h, w),
                    _ => return Err(err(Kind::Shape, format!("init has shape {s:?}; (H, W) or (N, H, W) heights in metres are taken")).into()),
                };
                if h < 2 || w < 2 || (n != 1 && n != batch) {
                    return Err(err(Kind::Shape, format!("init has shape {s:?}: at least 2×2, and one heightmap or one per sample ({batch})")).into());
                }
                let v: Vec<f32> = a.as_array().iter().copied().collect();
                let resized: Vec<f32> = v.chunks(h * w).flat_map(|c| terrain::resize_bilinear(c, h, w, SIZE, SIZE)).collect();
                let values = terrain::from_metres(&resized, px).into_iter().map(|x| x.clamp(-1.0, 1.0)).collect();
                Some(Init { values, strength })
            }
        };
        let difficulty = match difficulty {
            Difficulty::One(d) => vec![d],
            Difficulty::Many(v) => v,
        };
        let req = Request { difficulty, count: batch, batch, steps, seed, noise, init };
        let model = self.model.clone();
        let out = py.detach(move || guard(|| lock(&model).generate(&req, &mut |_| {}).map_err(errors::model)))?;
        let out = if metres { terrain::to_metres(&out) } else { out };
        let a = Array3::from_shape_vec((batch, SIZE, SIZE), out).map_err(|e| err(Kind::Execution, e.to_string()))?;
        Ok(a.into_pyarray(py).into_any())
    }

    /// The UNet file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn __repr__(&self) -> String {
        format!("TerrainDiffusion('{}')", self.path.display())
    }
}

/// Audio samples: int16 (as recorded), or float32 with full scale ±1.
#[derive(FromPyObject)]
enum Samples<'py> {
    I16(PyReadonlyArray1<'py, i16>),
    F32(PyReadonlyArray1<'py, f32>),
}

/// Speech embeddings (96-d per 0.775 s window, every 80 ms) and wake-word scores with
/// openwakeword 0.4.0's melspectrogram, speech embedding and classifier models.
#[pyclass(module = "tensor_graphs", name = "AudioEmbedder", frozen)]
pub struct PyAudioEmbedder {
    model: Arc<Mutex<AudioEmbedder>>,
    dir: PathBuf,
    wakewords: Vec<String>,
}

impl PyAudioEmbedder {
    /// 16 kHz samples in int16 units.
    fn prepare(samples: Samples<'_>, sample_rate: u32) -> Res<Vec<f32>> {
        let x: Vec<f32> = match samples {
            Samples::I16(a) => a.as_array().iter().map(|&v| v as f32 / 32768.0).collect(),
            Samples::F32(a) => a.as_array().to_vec(),
        };
        if let Some(v) = x.iter().find(|v| !v.is_finite()) {
            return Err(err(Kind::Request, format!("the samples hold a non-finite value ({v})")));
        }
        let y = tg_audio::resample(&x, sample_rate, SAMPLE_RATE).map_err(|e| err(Kind::Request, e.to_string()))?;
        Ok(y.into_iter().map(|v| v * 32768.0).collect())
    }
}

#[pymethods]
impl PyAudioEmbedder {
    /// Loads the models from `path` (the folder holding melspectrogram.onnx and
    /// embedding_model.onnx), else `$TG_ONNX_MODELS`, else the cache's ONNX models folder;
    /// `wakewords`: classifiers to score (names in that folder, e.g. "hey_jarvis", or
    /// paths); `sliding`: embed a clip's windows in runs over many windows' frames (the
    /// default; False: window by window, as openwakeword does — the same embeddings).
    #[new]
    #[pyo3(signature = (path=None, wakewords=Vec::new(), threads=0, devices=vec!["cpu".to_string()], sliding=true))]
    fn new(py: Python<'_>, path: Option<PathBuf>, wakewords: Vec<String>, threads: usize, devices: Vec<String>, sliding: bool) -> PyResult<Self> {
        let devs = crate::compiled::devices_named(&devices, threads)?;
        let mel = onnx_dir(path, tg_models::audio::MEL_FILE)?;
        let dir = mel.parent().map(PathBuf::from).unwrap_or_default();
        let d = dir.clone();
        let (m, names) = py.detach(move || {
            guard(|| {
                let mut m = AudioEmbedder::open(&d, devs).map_err(errors::model)?;
                m.set_compile_options(options());
                m.set_sliding(sliding);
                let names = wakewords.iter().map(|w| m.add_wakeword(w).map_err(errors::model)).collect::<Res<Vec<_>>>()?;
                Ok((m, names))
            })
        })?;
        Ok(PyAudioEmbedder { model: Arc::new(Mutex::new(m)), dir, wakewords: names })
    }

    /// Embeddings of `samples` (1-D int16, or float32 with full scale ±1) at `sample_rate`
    /// (resampled to 16 kHz): shape `(windows, 96)`, float32.
    #[pyo3(signature = (samples, sample_rate=16000))]
    fn embed<'py>(&self, py: Python<'py>, samples: Samples<'py>, sample_rate: u32) -> PyResult<Bound<'py, PyAny>> {
        let x = Self::prepare(samples, sample_rate)?;
        let model = self.model.clone();
        let e = py.detach(move || guard(|| lock(&model).embed(&x).map_err(errors::model)))?;
        let a = Array2::from_shape_vec((e.windows, EMBED_DIM), e.data).map_err(|e| err(Kind::Execution, e.to_string()))?;
        Ok(a.into_pyarray(py).into_any())
    }

    /// Per wake word, the score of every window of `samples`: `{name: (windows,) float32}`.
    #[pyo3(signature = (samples, sample_rate=16000))]
    fn scores<'py>(&self, py: Python<'py>, samples: Samples<'py>, sample_rate: u32) -> PyResult<Bound<'py, PyDict>> {
        let x = Self::prepare(samples, sample_rate)?;
        let model = self.model.clone();
        let s = py.detach(move || {
            guard(|| {
                let mut m = lock(&model);
                let e = m.embed(&x).map_err(errors::model)?;
                m.scores(&e).map_err(errors::model)
            })
        })?;
        let d = PyDict::new(py);
        for (k, v) in s {
            d.set_item(k, Array1::from_vec(v).into_pyarray(py))?;
        }
        Ok(d)
    }

    /// The wake words scored, in order.
    #[getter]
    fn wakewords(&self) -> Vec<String> {
        self.wakewords.clone()
    }

    /// The model folder.
    #[getter]
    fn path(&self) -> PathBuf {
        self.dir.clone()
    }

    fn __repr__(&self) -> String {
        format!("AudioEmbedder('{}', wakewords={:?})", self.dir.display(), self.wakewords)
    }
}
