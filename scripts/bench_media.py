#!/usr/bin/env python3
"""Speed of the media models as a user meets them: terrain samples per second
(``TerrainDiffusion.generate``, one consistency step) and the real-time factor of audio
embedding (``AudioEmbedder.embed``: seconds of 16 kHz audio embedded per second; sliding, the
default, and window by window), side by
side with onnxruntime (CPU, default graph optimisations) running the same ONNX files with
the packages' pre/post-processing in numpy, same inputs, at 1 and 2 threads.

    target/py-venv/bin/python scripts/bench_media.py [--models DIR] [--runs N] [--threads 1,2]
                                                    [--batches 1,8] [--seconds 10]

Each figure is the median of N timed runs (after a first run that compiles the plan, so
compile time is excluded on both sides), onnxruntime's and ours alternating in rounds of
an untimed and a timed run each, so that both see the same machine (its speed drifts on a
shared host) with their weights in cache. Prints a Markdown table with the ratio
(Tensor Graphs / onnxruntime throughput: above 1 means Tensor Graphs is faster) and the
largest relative difference (terrain) or lowest cosine (audio) of the outputs.
"""
import argparse
import os
import statistics
import time

import numpy as np
import onnxruntime as ort

import tensor_graphs as tg
from bench_onnx import default_models  # the same model folder

SIGMA_MAX = 80.0


def paired_s(a, b, n):
    """The median seconds of runs `a` and `b` over `n` rounds that alternate between them:
    each round runs `a` twice and times the second run, then `b` likewise. On a shared
    machine whose speed drifts by tens of percent within a minute, both sides then see the
    same conditions, so their ratio is fair where two medians taken one after the other are
    not; the untimed run first brings the side's weights back into cache (the other side's
    run evicted them) and lets the other side's worker threads, which spin-wait for a while
    after a run (onnxruntime's and rayon's do), go to sleep."""
    ta, tb = [], []
    for _ in range(n):
        for run, ts in ((a, ta), (b, tb)):
            run()
            t = time.perf_counter()
            run()
            ts.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


def session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def terrain_rows(models, threads, batches, runs):
    path = os.path.join(models, "terrain_consistency_unet_difficulty100.onnx")
    o = session(path, threads)
    t = tg.TerrainDiffusion(models, threads=threads)
    for b in batches:
        z = np.random.default_rng(b).standard_normal((b, 1, 128, 128), dtype=np.float32)
        d = [1 + (37 * i) % 100 for i in range(b)]
        feeds = {
            "noisy": z * np.float32(SIGMA_MAX),
            "sigma": np.full(b, SIGMA_MAX, np.float32),
            "difficulty": ((np.asarray(d, np.float64) - 1) / 99).astype(np.float32),
        }

        def ref():
            return o.run(None, feeds)[0][:, 0]

        def ours():
            return t.generate(d, noise=z, batch=b)

        want, got = ref(), ours()
        diff = float(np.abs(got - want).max() / np.abs(want).max())
        s_o, s_t = paired_s(ref, ours, runs)
        yield f"| terrain, batch {b} | {threads} | {b / s_o:.2f} samples/s | {b / s_t:.2f} samples/s | {s_o / s_t:.2f} | rel. {diff:.1e} |"


def audio_rows(models, threads, seconds, runs):
    mel = session(os.path.join(models, "melspectrogram.onnx"), threads)
    emb = session(os.path.join(models, "embedding_model.onnx"), threads)
    rng = np.random.default_rng(3)
    # Speech-like level: noise modulated by a slow envelope (the speed does not depend on
    # what is said).
    n = int(seconds * 16000)
    env = 0.5 + 0.5 * np.sin(np.arange(n) / 16000 * 2 * np.pi * 3)
    x = np.clip(rng.standard_normal(n) * 4000 * env, -32768, 32767).astype(np.int16)

    def ref():
        m = mel.run(None, {"input": x.astype(np.float32)[None]})[0][0, 0] / 10 + 2
        w = np.stack([m[s : s + 76] for s in range(0, m.shape[0] - 75, 8)])[..., None].astype(np.float32)
        return emb.run(None, {"input_1": w})[0].reshape(-1, 96)

    want = ref()
    # The default (windows embedded in runs over many windows' frames), then window by
    # window as openwakeword does.
    for sliding, how in [(True, "sliding"), (False, "window by window")]:
        t = tg.AudioEmbedder(models, threads=threads, sliding=sliding)

        def ours():
            return t.embed(x, 16000)

        got = ours()
        cos = float(((got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)).min())
        s_o, s_t = paired_s(ref, ours, runs)
        yield f"| audio embedding, {seconds:g} s clip, {how} | {threads} | {seconds / s_o:.1f}x real time | {seconds / s_t:.1f}x real time | {s_o / s_t:.2f} | cos {cos:.7f} |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=default_models())
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--only", choices=["terrain", "audio"], default=None)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    print("| what | threads | onnxruntime | Tensor Graphs | ratio | agreement |")
    print("|---|---:|---:|---:|---:|---:|")
    for threads in [int(x) for x in args.threads.split(",")]:
        if args.only in (None, "terrain"):
            for row in terrain_rows(args.models, threads, batches, args.runs):
                print(row, flush=True)
        if args.only in (None, "audio"):
            for row in audio_rows(args.models, threads, args.seconds, args.runs):
                print(row, flush=True)


if __name__ == "__main__":
    main()
