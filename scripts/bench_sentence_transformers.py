#!/usr/bin/env python3
"""CPU throughput of sentence-transformers on EmbeddingGemma-300M, as a baseline for our engine.

Two workloads (no prompt, float32, ``model.encode`` end to end, tokenization included):
  (a) one batch of 32 short sentences (~10-20 tokens each incl. BOS/EOS) -> sentences/second
  (b) one text of exactly 512 tokens incl. BOS/EOS, encoded alone        -> sentences/second
Each workload runs 1 warm-up + R timed repeats; mean and sample stddev are reported.

Run (outside the repo venv; never commit the venv):
    /work/peers/st-venv/bin/python scripts/bench_sentence_transformers.py --threads 2 --repeats 5 [--json]
Model folder: --model, else $TG_EMBED_MODEL, else ~/.cache/tensor-graphs/models/embeddinggemma-300m.
"""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

DEFAULT_MODEL = Path.home() / ".cache" / "tensor-graphs" / "models" / "embeddinggemma-300m"

# The same texts as `tg bench-embed` (one file, read by both tools).
_TEXTS = json.loads((Path(__file__).resolve().parent / "embed_bench_texts.json").read_text())
SHORT_SENTENCES = _TEXTS["short"]
LONG_WORDS = _TEXTS["long_words"]


def exact_token_text(count_tokens, target: int) -> str:
    """Deterministic text of exactly ``target`` tokens (as counted by ``count_tokens``)."""
    def words(n: int) -> str:
        return " ".join(LONG_WORDS[i % len(LONG_WORDS)] for i in range(n))

    lo, hi = 0, 1
    while count_tokens(words(hi)) <= target:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_tokens(words(mid)) <= target:
            lo = mid
        else:
            hi = mid
    text = words(lo)
    for _ in range(64):
        n = count_tokens(text)
        if n == target:
            return text
        if n > target:
            break
        text += " and"
    raise RuntimeError(f"could not build a text of exactly {target} tokens")


def timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def stats(n_sentences: int, n_tokens: int, times: list[float]) -> dict:
    sps = [n_sentences / t for t in times]
    tps = [n_tokens / t for t in times]
    sd = statistics.stdev if len(times) > 1 else (lambda _: 0.0)
    return {
        "sentences": n_sentences,
        "tokens": n_tokens,
        "seconds_mean": statistics.fmean(times),
        "seconds_std": sd(times),
        "sentences_per_s_mean": statistics.fmean(sps),
        "sentences_per_s_std": sd(sps),
        "tokens_per_s_mean": statistics.fmean(tps),
        "tokens_per_s_std": sd(tps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.environ.get("TG_EMBED_MODEL", str(DEFAULT_MODEL)))
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats after 1 warm-up (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    if args.threads < 1 or args.repeats < 1:
        sys.exit("--threads and --repeats must be >= 1")

    import numpy as np
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    model = SentenceTransformer(args.model, device="cpu", local_files_only=True)
    model.eval()
    tok = model[0].tokenizer

    def count(text: str) -> int:
        return len(tok(text, truncation=False)["input_ids"])

    batch = SHORT_SENTENCES[:32]
    short_counts = [count(s) for s in batch]
    long_text = exact_token_text(count, 512)
    long_ids = model.preprocess([long_text])["input_ids"]
    if long_ids.shape[1] != 512 or long_ids[0, 0].item() != tok.bos_token_id or long_ids[0, -1].item() != tok.eos_token_id:
        sys.exit("512-token text check failed")

    def run_batch() -> np.ndarray:
        return model.encode(batch, batch_size=32, convert_to_numpy=True)

    def run_long() -> np.ndarray:
        return model.encode([long_text], batch_size=1, convert_to_numpy=True)

    load_start = list(os.getloadavg())
    # padded batch width, i.e. what the transformer actually computes for workload (a)
    padded = int(model.preprocess(batch)["input_ids"].shape[1])
    res_a = stats(len(batch), sum(short_counts), timed(run_batch, args.repeats))
    res_a.update(
        avg_tokens=statistics.fmean(short_counts),
        min_tokens=min(short_counts),
        max_tokens=max(short_counts),
        padded_width=padded,
    )
    res_b = stats(1, 512, timed(run_long, args.repeats))

    result = {
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "loadavg_1_5_15_start": load_start,
        "loadavg_1_5_15_end": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "attn_implementation": model[0].auto_model.config._attn_implementation,
        "batch32_short": res_a,
        "single_512": res_b,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(
        f"sentence-transformers {sentence_transformers.__version__} / torch {torch.__version__} / "
        f"{result['attn_implementation']}, threads={result['threads']}, repeats={args.repeats}, "
        f"loadavg(1/5/15 min) start {' '.join(f'{x:.2f}' for x in load_start)}, "
        f"end {' '.join(f'{x:.2f}' for x in result['loadavg_1_5_15_end'])}"
    )
    print(
        f"(a) 32 short sentences: avg {res_a['avg_tokens']:.2f} tokens (min {res_a['min_tokens']}, "
        f"max {res_a['max_tokens']}, padded to {padded}); (b) 1 text of 512 tokens"
    )
    print(f"{'workload':<16}{'sentences/s':>20}{'tokens/s':>20}{'s/call':>10}")
    for name, r in (("batch32_short", res_a), ("single_512", res_b)):
        sps = f"{r['sentences_per_s_mean']:.2f} ± {r['sentences_per_s_std']:.2f}"
        tps = f"{r['tokens_per_s_mean']:.1f} ± {r['tokens_per_s_std']:.1f}"
        print(f"{name:<16}{sps:>20}{tps:>20}{r['seconds_mean']:>10.4f}")


if __name__ == "__main__":
    main()
