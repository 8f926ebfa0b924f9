#!/usr/bin/env python3
"""Time per run of the ONNX target models: Tensor Graphs (`tensor_graphs.onnx`) side by side
with onnxruntime (CPU, default graph optimisations), same inputs, at 1 and 2 threads.

    target/py-venv/bin/python scripts/bench_onnx.py [--models DIR] [--runs N] [--threads 1,2]

Each measurement is the median of N runs after two warm-up runs (the first compiles the
plan). Prints a Markdown table: model, input, threads, ms per run for each engine, the ratio
(onnxruntime / Tensor Graphs: above 1 means Tensor Graphs is faster) and the largest relative
difference of the outputs.
"""
import argparse
import os
import statistics
import time

import numpy as np
import onnxruntime as ort

import tensor_graphs.onnx as tgx


def default_models() -> str:
    if os.environ.get("TG_ONNX_MODELS"):
        return os.environ["TG_ONNX_MODELS"]
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tensor-graphs", "onnx", "models-1")


def cases():
    rng = np.random.default_rng(0)
    yield "terrain_consistency_unet_difficulty100.onnx", "batch 1", {
        "noisy": (rng.standard_normal((1, 1, 128, 128)) * 80).astype(np.float32),
        "sigma": np.array([80.0], np.float32),
        "difficulty": np.array([0.5], np.float32),
    }
    yield "melspectrogram.onnx", "1 s of audio", {"input": (rng.standard_normal((1, 16000)) * 3000).astype(np.float32)}
    yield "embedding_model.onnx", "16 windows", {"input_1": rng.standard_normal((16, 76, 32, 1)).astype(np.float32)}
    yield "hey_jarvis_v0.1.onnx", "16 embeddings", {"x.1": rng.standard_normal((1, 16, 96)).astype(np.float32)}


def timed(run, n):
    run()
    run()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        run()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=default_models())
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    print("| model | input | threads | onnxruntime ms | Tensor Graphs ms | ratio | max rel. diff |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, what, feeds in cases():
        path = os.path.join(args.models, name)
        for threads in [int(t) for t in args.threads.split(",")]:
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            t = tgx.load(path, threads=threads)
            want = o.run(None, feeds)
            got = t.run(None, feeds)
            diff = max(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)) for g, w in zip(got, want))
            ms_o = timed(lambda: o.run(None, feeds), args.runs)
            ms_t = timed(lambda: t.run(None, feeds), args.runs)
            print(f"| {name} | {what} | {threads} | {ms_o:.2f} | {ms_t:.2f} | {ms_o / ms_t:.2f} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
