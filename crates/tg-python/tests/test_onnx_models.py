"""The ONNX target models through ``tensor_graphs.onnx`` against onnxruntime (CPU, default
graph optimisations) on the same inputs:

* the terrain diffusion consistency UNet (adaptive-terrain-diffusion 0.4.2): relative error
  ``max|tg − ort| / max|ort| ≤ 1e-4`` for the same noise, σ and difficulty, at batch 1 and 2;
* openwakeword 0.4.0's audio pipeline written out in numpy as the package runs it: the
  melspectrogram model on 16 kHz audio, ``mel / 10 + 2``, windows of 76 frames at a stride
  of 8 through the speech embedding model (cosine ≥ 0.9999 per window), and the
  ``hey_jarvis`` classifier on 16 consecutive embeddings (score within 1e-3).

The models come from ``scripts/fetch_onnx_models.py`` (the ``onnx_models`` fixture).
"""

import numpy as np
import pytest

import tensor_graphs.onnx as tgx
from onnx_reference import ort_session, rel_err

TERRAIN = "terrain_consistency_unet_difficulty100.onnx"


@pytest.mark.parametrize("batch", [1, 2])
def test_terrain_unet_matches_onnxruntime(onnx_models, batch):
    rng = np.random.default_rng(100 + batch)
    sigma = np.array([80.0, 0.5][:batch], np.float32)
    feeds = {
        "noisy": (rng.standard_normal((batch, 1, 128, 128)) * sigma[:, None, None, None]).astype(np.float32),
        "sigma": sigma,
        "difficulty": np.array([0.0, 1.0][:batch], np.float32),
    }
    (want,) = ort_session(onnx_models / TERRAIN).run(None, feeds)
    (got,) = tgx.load(onnx_models / TERRAIN).run(None, feeds)
    assert got.shape == want.shape == (batch, 1, 128, 128)
    err = rel_err(got, want)
    print(f"terrain batch {batch}: relative error {err:.2e}")
    assert err <= 1e-4, err


def speech(seconds=2.0, rate=16000, seed=7):
    """A voiced sound: a gliding harmonic tone with noise, as int16-range float samples."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 120 + 60 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    x = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2)
    x = x + 0.05 * rng.standard_normal(len(t))
    return (x / np.abs(x).max() * 12000).astype(np.float32)[None, :]


def windows(mel, n=76, stride=8):
    """The embedding model's input: [windows, 76, 32, 1] from mel frames [frames, 32]."""
    starts = range(0, mel.shape[0] - n + 1, stride)
    return np.stack([mel[s : s + n] for s in starts])[..., None].astype(np.float32)


def test_audio_embeddings_and_wakeword_match_onnxruntime(onnx_models):
    audio = speech()
    mel_o = ort_session(onnx_models / "melspectrogram.onnx")
    emb_o = ort_session(onnx_models / "embedding_model.onnx")
    cls_o = ort_session(onnx_models / "hey_jarvis_v0.1.onnx")
    mel_t = tgx.load(onnx_models / "melspectrogram.onnx")
    emb_t = tgx.load(onnx_models / "embedding_model.onnx")
    cls_t = tgx.load(onnx_models / "hey_jarvis_v0.1.onnx")

    (m_want,) = mel_o.run(None, {"input": audio})
    (m_got,) = mel_t.run(None, {"input": audio})
    assert m_got.shape == m_want.shape
    assert rel_err(m_got, m_want) <= 1e-4
    # openwakeword's transform of the mel frames.
    mel = np.squeeze(m_want) / 10 + 2
    x = windows(mel)
    assert x.shape[0] >= 16

    (e_want,) = emb_o.run(None, {"input_1": x})
    (e_got,) = emb_t.run(None, {"input_1": x})
    e_want, e_got = e_want.reshape(len(x), 96), e_got.reshape(len(x), 96)
    cos = (e_want * e_got).sum(1) / (np.linalg.norm(e_want, axis=1) * np.linalg.norm(e_got, axis=1))
    print(f"embeddings: {len(x)} windows, min cosine {cos.min():.8f}")
    assert cos.min() >= 0.9999, cos

    for start in range(0, len(x) - 15, 4):
        feats = e_want[start : start + 16][None].astype(np.float32)
        (s_want,) = cls_o.run(None, {"x.1": feats})
        (s_got,) = cls_t.run(None, {"x.1": feats})
        assert s_got.shape == s_want.shape == (1, 1)
        assert abs(float(s_got[0, 0]) - float(s_want[0, 0])) <= 1e-3, (start, s_got, s_want)
