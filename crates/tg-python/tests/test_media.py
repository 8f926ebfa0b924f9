"""``TerrainDiffusion``, ``AudioEmbedder``, ``tg diffuse`` and ``tg embed-audio`` against the
reference pipelines: onnxruntime (CPU, default graph optimisations) running the same ONNX
files, with the packages' pre- and post-processing written out in numpy here.

* terrain (adaptive-terrain-diffusion 0.4.2's ``TerrainGenerator``): noise × σ (+ the source
  in model space for image to image) → the UNet; multistep sampling over a Karras schedule
  (ρ = 7) with fresh noise ``sqrt(σ_next² − σ_min²)·ε``; the asinh height transform to
  metres. Relative error ``max|tg − ref| / max|ref| ≤ 1e-4``.
* audio (openwakeword 0.4.0's ``AudioFeatures`` and ``Model.predict``): int16 16 kHz samples
  → mel → ``x/10 + 2`` → windows of 76 frames at a stride of 8 → embeddings (cosine ≥ 0.9999
  per window) → 16 embeddings, the history before the first window being the embedding of
  silence → hey_jarvis (scores within 1e-3). Speech is made with espeak-ng; other sample
  rates are resampled in numpy by FFT for the reference (an independent resampler, so the
  bound there is looser: cosine ≥ 0.999).
"""

import json
import os
import struct
import subprocess
import wave

import numpy as np
import pytest

import tensor_graphs as tg
from onnx_reference import ort_session, rel_err

TERRAIN = "terrain_consistency_unet_difficulty100.onnx"
SIGMA_MIN, SIGMA_MAX, RHO = 0.002, 80.0, 7.0
HEIGHT_RANGE, ASINH_SCALE = 22.16864013671875, 0.1


# ---------------------------------------------------------------- terrain


@pytest.fixture(scope="module")
def unet(onnx_models):
    return ort_session(onnx_models / TERRAIN)


@pytest.fixture(scope="module")
def terrain(onnx_models):
    return tg.TerrainDiffusion(onnx_models)


def denoise(unet, x, sigma, difficulty):
    b = x.shape[0]
    feeds = {
        "noisy": np.ascontiguousarray(x.reshape(b, 1, 128, 128), np.float32),
        "sigma": np.full(b, sigma, np.float32),
        "difficulty": ((np.asarray(difficulty, np.float64) - 1) / 99).astype(np.float32).reshape(b),
    }
    return unet.run(None, feeds)[0][:, 0]


def karras(start, steps):
    hi, lo = start ** (1 / RHO), SIGMA_MIN ** (1 / RHO)
    return [(hi + i / steps * (lo - hi)) ** RHO for i in range(steps)]


def from_model_space(v):
    """The package's ``_from_model_space(values, zero_floor=True)``."""
    unit = np.clip((v + 1.0) * 0.5, 0.0, 1.0)
    norm = np.arcsinh(HEIGHT_RANGE / ASINH_SCALE)
    h = np.clip(ASINH_SCALE * np.sinh(unit * norm), 0.0, HEIGHT_RANGE)
    return h - h.min(axis=(-2, -1), keepdims=True)


def to_model_space(h):
    """The package's ``_to_model_space`` (without its channel axis)."""
    h = np.clip(h - h.min(axis=(-2, -1), keepdims=True), 0.0, HEIGHT_RANGE)
    return np.arcsinh(h / ASINH_SCALE) / np.arcsinh(HEIGHT_RANGE / ASINH_SCALE) * 2.0 - 1.0


def test_one_step_matches_onnxruntime(terrain, unet):
    z = np.random.default_rng(5).standard_normal((2, 1, 128, 128), dtype=np.float32)
    got = terrain.generate([1, 100], noise=z, batch=2)
    want = denoise(unet, z * np.float32(SIGMA_MAX), SIGMA_MAX, [1, 100])
    assert got.shape == (2, 128, 128) and got.dtype == np.float32
    err = rel_err(got, want)
    print(f"terrain one step, batch 2: relative error {err:.2e}")
    assert err <= 1e-4
    metres = terrain.generate([1, 100], noise=z, batch=2, metres=True)
    assert np.abs(metres - from_model_space(got)).max() < 1e-3
    assert (metres.min(axis=(1, 2)) == 0).all() and metres.max() <= HEIGHT_RANGE


def test_multistep_matches_the_numpy_sampler(terrain, unet):
    steps = 3
    z = np.random.default_rng(6).standard_normal((steps, 1, 1, 128, 128), dtype=np.float32)
    got = terrain.generate(40, noise=z, steps=steps)
    sig = karras(SIGMA_MAX, steps)
    x = z[0, :, 0] * np.float32(sig[0])
    for i, s in enumerate(sig):
        d = denoise(unet, x, s, [40])
        if i + 1 < steps:
            x = d + np.float32(np.sqrt(sig[i + 1] ** 2 - SIGMA_MIN**2)) * z[i + 1, :, 0]
    err = rel_err(got, d)
    print(f"terrain 3 steps: relative error {err:.2e}")
    assert err <= 1e-4
    # The seed alone makes the same noise every time, and other noise for another seed.
    a, b, c = (terrain.generate(40, seed=s, steps=2) for s in (9, 9, 10))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_image_to_image_matches_onnxruntime(terrain, unet):
    rng = np.random.default_rng(7)
    src = terrain.generate(80, seed=3, metres=True)[0]
    z = rng.standard_normal((1, 1, 128, 128), dtype=np.float32)
    strength = 0.4
    got = terrain.generate(20, noise=z, init=src, strength=strength)
    sigma = SIGMA_MIN * (SIGMA_MAX / SIGMA_MIN) ** strength
    x = z[:, 0] * np.float32(sigma) + np.clip(to_model_space(src[None]), -1, 1).astype(np.float32)
    want = denoise(unet, x, np.float32(sigma), [20])
    err = rel_err(got, want)
    print(f"terrain image to image (strength {strength}): relative error {err:.2e}")
    assert err <= 1e-4


def test_bad_terrain_requests(terrain):
    with pytest.raises(tg.RequestError, match="1–100"):
        terrain.generate(0)
    with pytest.raises(tg.RequestError, match="1–100"):
        terrain.generate([5, 101], batch=2)
    with pytest.raises(tg.ShapeError, match="noise"):
        terrain.generate(5, noise=np.zeros((1, 64, 64), np.float32))
    with pytest.raises(tg.RequestError, match="strength"):
        terrain.generate(5, init=np.zeros((128, 128), np.float32), strength=1.5)


def png_header(path):
    """(width, height, bit depth, colour type) from a PNG's IHDR."""
    b = open(path, "rb").read(33)
    assert b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR"
    w, h, depth, colour = struct.unpack(">IIBB", b[16:26])
    return w, h, depth, colour


def run_tg(tg_cli, *args, ok=True, **kw):
    r = subprocess.run([str(tg_cli), *map(str, args)], capture_output=True, text=True, timeout=600, **kw)
    assert "panicked" not in r.stderr, r.stderr
    if ok:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0, r.stdout
    return r


def test_tg_diffuse_writes_what_it_says(tg_cli, onnx_models, unet, tmp_path):
    z = np.random.default_rng(8).standard_normal((3, 1, 128, 128), dtype=np.float32)
    np.save(tmp_path / "z.npy", z)
    r = run_tg(
        tg_cli, "diffuse", "--model", onnx_models, "--difficulty", "1,50,100", "--noise", tmp_path / "z.npy", "--batch", 2,
        "-o", tmp_path / "t.png", "--png16", tmp_path / "t16.png", "--heights", tmp_path / "h.npy", "--json",
    )
    info = json.loads(r.stdout)
    assert info["samples"] == 3 and info["timings"]["samples_per_s"] > 0
    got = np.load(tmp_path / "h.npy")
    want = np.concatenate([denoise(unet, z[:2, 0] * np.float32(80), 80.0, [1, 50]), denoise(unet, z[2:, 0] * np.float32(80), 80.0, [100])])
    err = rel_err(got, want)
    print(f"tg diffuse, 3 samples in batches of 2: relative error {err:.2e}")
    assert err <= 1e-4
    # Three tiles: a 2×2 grid of 128-pixel tiles with 4-pixel gaps.
    assert png_header(tmp_path / "t.png") == (260, 260, 8, 2)
    assert png_header(tmp_path / "t16.png") == (260, 260, 16, 0)
    # Image to image from the 16-bit heightmap (a 260×260 grid: resampled, and said so).
    r = run_tg(tg_cli, "diffuse", "--model", onnx_models, "--init", tmp_path / "t16.png", "--strength", "0.3", "--heights", tmp_path / "v.npy", "--quiet")
    assert "resampled" in r.stderr
    assert np.load(tmp_path / "v.npy").shape == (1, 128, 128)


def test_tg_diffuse_refuses_bad_input(tg_cli, onnx_models, tmp_path):
    out = tmp_path / "never.png"
    for args, want in [
        (["--difficulty", "0"], "outside 1–100"),
        (["--difficulty", "101"], "outside 1–100"),
        (["--steps", "0"], "at least 1"),
        (["--init", tmp_path / "missing.npy"], "missing.npy"),
        (["-o", tmp_path / "no" / "such" / "dir.png"], "does not exist"),
        (["--batch", "1000000"], "largest batch that fits"),
    ]:
        outs = [] if "-o" in args else ["-o", out]
        r = run_tg(tg_cli, "diffuse", "--model", onnx_models, *outs, *args, ok=False)
        assert want in r.stderr, (args, r.stderr)
    np.save(tmp_path / "bad.npy", np.zeros((2, 64, 64), np.float32))
    r = run_tg(tg_cli, "diffuse", "--model", onnx_models, "--noise", tmp_path / "bad.npy", "-o", out, ok=False)
    assert "[N, 1, 128, 128]" in r.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


# ---------------------------------------------------------------- audio


def fft_resample(x, rate, to=16000):
    """Band-limited resampling by FFT (the reference's own resampler)."""
    if rate == to:
        return np.asarray(x, np.float64)
    n = int(np.ceil(len(x) * to / rate))
    spec = np.fft.rfft(x)
    m = n // 2 + 1
    out = np.zeros(m, complex)
    k = min(m, len(spec))
    out[:k] = spec[:k]
    return np.fft.irfft(out, n) * (n / len(x))


class Reference:
    """openwakeword's pipeline on onnxruntime."""

    def __init__(self, folder):
        self.mel = ort_session(folder / "melspectrogram.onnx")
        self.emb = ort_session(folder / "embedding_model.onnx")
        self.cls = ort_session(folder / "hey_jarvis_v0.1.onnx")
        silent = self.mel.run(None, {"input": np.zeros((1, 16000), np.float32)})[0][0, 0] / 10 + 2
        self.silence = self.emb.run(None, {"input_1": silent[None, :76, :, None]})[0].reshape(96)

    def embed(self, x16k):
        m = self.mel.run(None, {"input": np.asarray(x16k, np.float32)[None]})[0][0, 0] / 10 + 2
        w = np.stack([m[s : s + 76] for s in range(0, m.shape[0] - 75, 8)])[..., None].astype(np.float32)
        return self.emb.run(None, {"input_1": w})[0].reshape(-1, 96)

    def scores(self, e):
        h = np.concatenate([np.tile(self.silence, (15, 1)), e]).astype(np.float32)
        return np.array([self.cls.run(None, {"x.1": h[i : i + 16][None]})[0][0, 0] for i in range(len(e))])


@pytest.fixture(scope="module")
def reference(onnx_models):
    return Reference(onnx_models)


@pytest.fixture(scope="module")
def audio_model(onnx_models):
    return tg.AudioEmbedder(onnx_models, wakewords=["hey_jarvis"])


def espeak(text, tmp, name, voice="en"):
    """espeak-ng's 22.05 kHz int16 speech with 1 s of silence on each side."""
    path = tmp / f"{name}.raw.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", "140", "-w", str(path), text], check=True)
    with wave.open(str(path)) as f:
        rate = f.getframerate()
        x = np.frombuffer(f.readframes(f.getnframes()), np.int16)
    pad = np.zeros(rate, np.int16)
    return np.concatenate([pad, x, pad]), rate


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("speech")
    jarvis, rate = espeak("hey jarvis", tmp, "jarvis")
    other, _ = espeak("the weather today is cold and windy", tmp, "other")
    return {"tmp": tmp, "rate": rate, "jarvis": jarvis, "other": other}


def to16k_int16(x, rate):
    return np.clip(np.round(fft_resample(x.astype(np.float64), rate)), -32768, 32767).astype(np.int16)


def cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_embeddings_and_scores_match_onnxruntime(audio_model, reference, speech):
    for what in ["jarvis", "other"]:
        x = to16k_int16(speech[what], speech["rate"])
        got = audio_model.embed(x, 16000)
        want = reference.embed(x.astype(np.float32))
        assert got.shape == want.shape == ((((len(x) - 512) // 160 + 1) - 76) // 8 + 1, 96)
        cos = cosines(got, want).min()
        s_got = audio_model.scores(x, 16000)["hey_jarvis"]
        s_want = reference.scores(want)
        diff = np.abs(s_got - s_want).max()
        print(f"{what}: {len(got)} windows, min cosine {cos:.7f}, max score diff {diff:.2e}, max score {s_got.max():.4f}")
        assert cos >= 0.9999
        assert diff <= 1e-3
    assert audio_model.scores(to16k_int16(speech["jarvis"], speech["rate"]))["hey_jarvis"].max() > 0.5


def test_sliding_windows_equal_window_by_window(onnx_models, audio_model, speech):
    """The sliding embedding model (one run over many windows' frames) gives the windows'
    own embeddings: the same sums in the same order as one window at a time."""
    x = to16k_int16(np.concatenate([speech["jarvis"], speech["other"], speech["jarvis"]]), speech["rate"])
    each = tg.AudioEmbedder(onnx_models, sliding=False).embed(x)
    slid = audio_model.embed(x)
    print(f"{len(each)} windows: max |sliding - window by window| {np.abs(slid - each).max():.2e}")
    assert slid.shape == each.shape and len(each) > 128  # more than one sliding run
    assert np.abs(slid - each).max() <= 1e-5 * np.abs(each).max()


def test_noise_and_silence_score_low(audio_model):
    rng = np.random.default_rng(11)
    noise = (rng.standard_normal(3 * 16000) * 3000).astype(np.int16)
    silence = np.zeros(3 * 16000, np.int16)
    for what, x in [("noise", noise), ("silence", silence)]:
        s = audio_model.scores(x)["hey_jarvis"].max()
        print(f"{what}: max hey_jarvis score {s:.2e}")
        assert s < 0.01


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_any_rate_is_resampled(audio_model, reference, speech, rate):
    # The utterance at `rate` (from espeak's 22.05 kHz by FFT), as float32 full scale ±1.
    x = (fft_resample(speech["jarvis"].astype(np.float64), speech["rate"], rate) / 32768).astype(np.float32)
    got = audio_model.embed(x, rate)
    want = reference.embed(np.round(fft_resample(x.astype(np.float64) * 32768, rate)))
    n = min(len(got), len(want))
    cos = cosines(got[:n], want[:n]).min()
    score = audio_model.scores(x, rate)["hey_jarvis"].max()
    print(f"{rate} Hz: min cosine {cos:.6f} against an FFT-resampled reference, max score {score:.4f}")
    assert abs(len(got) - len(want)) <= 1
    assert cos >= 0.999
    # 8 kHz audio has nothing above 4 kHz: the word is still there, less sure.
    assert score > (0.2 if rate == 8000 else 0.5)


def write_wav(path, x, rate, kind="pcm16", channels=1):
    """A WAV file of float samples x (full scale ±1; [n] or [n, channels])."""
    x = np.asarray(x, np.float64).reshape(len(x), channels)
    if kind == "float32":
        code, bits, data = 3, 32, x.astype("<f4").tobytes()
    elif kind == "pcm24":
        q = np.clip(np.round(x * 8388608), -8388608, 8388607).astype("<i4")
        code, bits, data = 1, 24, b"".join(v.tobytes()[:3] for v in q.reshape(-1))
    else:
        code, bits, data = 1, 16, np.clip(np.round(x * 32768), -32768, 32767).astype("<i2").tobytes()
    ch = x.shape[1]
    fmt = struct.pack("<HHIIHH", code, ch, rate, rate * ch * bits // 8, ch * bits // 8, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(body)) + body)


def test_tg_embed_audio_files(tg_cli, onnx_models, audio_model, speech, tmp_path):
    x = speech["jarvis"].astype(np.float64) / 32768
    rate = speech["rate"]
    write_wav(tmp_path / "a.wav", x, rate)
    write_wav(tmp_path / "b.wav", x, rate, "pcm24")
    stereo = np.stack([x, x], 1)
    write_wav(tmp_path / "c.wav", fft_resample(stereo[:, 0], rate, 44100), 44100, "float32")
    write_wav(tmp_path / "d.wav", stereo, rate, "pcm16", 2)
    r = run_tg(tg_cli, "embed-audio", "--model", onnx_models, "--wakeword", "hey_jarvis", "--json", tmp_path / "a.wav")
    one = json.loads(r.stdout)
    assert set(one) >= {"file", "sample_rate", "windows", "embeddings", "scores", "detections"}
    assert one["sample_rate"] == rate and len(one["embeddings"]) == one["windows"] and len(one["embeddings"][0]) == 96
    want = audio_model.scores(speech["jarvis"], rate)["hey_jarvis"]
    assert np.abs(np.array(one["scores"]["hey_jarvis"]) - want).max() < 1e-5
    assert one["detections"] and one["detections"][0]["peak"] > 0.5
    r = run_tg(tg_cli, "embed-audio", "--model", onnx_models, "--wakeword", "hey_jarvis", "--json", "--npy", tmp_path / "npy", *[tmp_path / f"{c}.wav" for c in "abcd"])
    many = json.loads(r.stdout)
    assert [m["file"] for m in many] == [str(tmp_path / f"{c}.wav") for c in "abcd"]
    for m in many:
        assert max(m["scores"]["hey_jarvis"]) > 0.5, m["file"]
    # Stereo of two equal channels is the mono file.
    assert np.abs(np.array(many[3]["embeddings"]) - np.array(many[0]["embeddings"])).max() < 1e-6
    e = np.load(tmp_path / "npy" / "a.npy")
    assert e.shape == (one["windows"], 96) and np.abs(e - np.array(one["embeddings"])).max() < 1e-6
    assert np.load(tmp_path / "npy" / "a.hey_jarvis.npy").shape == (one["windows"],)


def test_tg_embed_audio_refuses_bad_files(tg_cli, onnx_models, speech, tmp_path):
    good = tmp_path / "good.wav"
    write_wav(good, speech["jarvis"] / 32768, speech["rate"])
    raw = good.read_bytes()
    (tmp_path / "truncated.wav").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "text.wav").write_text("not audio at all")
    write_wav(tmp_path / "empty.wav", np.zeros(0), 16000)
    write_wav(tmp_path / "short.wav", np.zeros(8000), 16000)
    alaw = bytearray(raw)
    alaw[20:22] = struct.pack("<H", 6)
    (tmp_path / "alaw.wav").write_bytes(bytes(alaw))
    for name, want in [
        ("truncated", "truncated"),
        ("text", "not a WAV file"),
        ("empty", "no samples"),
        ("short", "at least 0.782 s"),
        ("alaw", "A-law"),
        ("missing", "missing.wav"),
    ]:
        r = run_tg(tg_cli, "embed-audio", "--model", onnx_models, tmp_path / f"{name}.wav", ok=False)
        assert want in r.stderr, (name, r.stderr)


def stream_reference(reference, x):
    """openwakeword's streaming: the mel model on each 80 ms of new frames (1,632 samples
    for 8 frames), windows of the last 76 frames every 8, scores on the last 16."""
    frames = np.concatenate(
        [reference.mel.run(None, {"input": x[None, k : k + 1632].astype(np.float32)})[0][0, 0] / 10 + 2 for k in range(0, len(x) - 1631, 1280)]
    )
    w = np.stack([frames[s : s + 76] for s in range(0, frames.shape[0] - 75, 8)])[..., None].astype(np.float32)
    return reference.scores(reference.emb.run(None, {"input_1": w})[0].reshape(-1, 96))


def test_tg_embed_audio_stream(tg_cli, onnx_models, reference, speech):
    x = to16k_int16(speech["jarvis"], speech["rate"])
    pcm = x.astype("<i2").tobytes()
    cmd = [str(tg_cli), "embed-audio", "--model", str(onnx_models), "--wakeword", "hey_jarvis", "--stream"]
    p = subprocess.run(cmd + ["--json"], input=pcm, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    rows = [json.loads(line) for line in p.stdout.decode().splitlines()]
    want = stream_reference(reference, x)
    got = np.array([row["scores"]["hey_jarvis"] for row in rows])
    assert [row["window"] for row in rows] == list(range(len(want)))
    diff = np.abs(got - want).max()
    print(f"stream: {len(rows)} windows, max score difference to the streaming reference {diff:.2e}, max {got.max():.4f}")
    assert diff < 1e-3
    assert got.max() > 0.5
    p = subprocess.run(cmd, input=pcm, capture_output=True, timeout=600)
    assert b"DETECTED hey_jarvis" in p.stdout, p.stdout.decode()
