#!/usr/bin/env python3
"""Hugging Face Transformers on the synthetic Gemma 3 270M (`tg synth gemma3-270m --hf-dir DIR`):
the reference timings and logits for scripts/gpu_check.sh, on the same GPU, with the same
random weights as the GGUF file tg runs.

For each attention implementation (default: eager and sdpa), in float32:

* prompt processing: one forward pass over N random tokens (N from --pp, default 5,128),
  logits of the last position only, a fresh cache; one warm-up, then --reps timed runs, mean ms;
* generation: after a one-token prompt (BOS), --gen greedy tokens one at a time with the
  cache (as `tg bench`'s tg N does); mean ms per token over --reps runs after a warm-up;
* with --prompt-from (tg generate's --json output: prompt_tokens, tokens) and --ref-logits
  (tg logits --out of the same prompt): the final-position logits' NMSE against tg's, and
  whether the greedy continuation equals tg's tokens.

`torch.cuda.synchronize()` brackets every timed region. No network: HF_HUB_OFFLINE=1 is set
before Transformers is imported, and the model is read from --model only.

    python3 scripts/gpu_check_hf.py --model /tmp/g-hf [--pp 5,128] [--gen 32] [--reps 3]
        [--impls eager,sdpa] [--prompt-from generate_cpu.json] [--ref-logits logits_cpu.f32]
        [--out hf.json] [--device cuda|cpu]

Exit status: 0 when it ran, 77 when torch/Transformers or the GPU are missing (the check is
skipped; --out still says why), 1 when the logits or tokens disagree with tg's.
"""
import argparse
import array
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SKIP = 77


def write(path, obj):
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)


def nmse(a, b):
    num = math.fsum((x - y) * (x - y) for x, y in zip(a, b))
    den = math.fsum(y * y for y in b)
    return num / den if den else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="folder with config.json and model.safetensors")
    ap.add_argument("--pp", default="5,128", help="prompt lengths, comma separated")
    ap.add_argument("--gen", type=int, default=32, help="tokens generated per timed run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--impls", default="eager,sdpa", help="attention implementations")
    ap.add_argument("--prompt-from", help="tg generate --json output (prompt_tokens, tokens)")
    ap.add_argument("--ref-logits", help="tg logits --out file (raw f32) of the same prompt")
    ap.add_argument("--out", help="write the results here as JSON")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    result = {"model": a.model, "impls": {}}
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except Exception as e:  # noqa: BLE001 - any import failure means: skipped
        result["error"] = f"skipped: torch/transformers not importable ({type(e).__name__}: {e})"
        print(result["error"])
        write(a.out, result)
        return SKIP
    result.update(torch=torch.__version__, transformers=transformers.__version__)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        result["error"] = "skipped: torch.cuda.is_available() is False"
        print(result["error"])
        write(a.out, result)
        return SKIP
    dev = torch.device(a.device)
    result["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, device {result['device']}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    prompt, ref_tokens, ref_logits = None, None, None
    if a.prompt_from and os.path.exists(a.prompt_from):
        with open(a.prompt_from) as f:
            g = json.load(f)
        prompt, ref_tokens = g.get("prompt_tokens"), g.get("tokens")
    if a.ref_logits and os.path.exists(a.ref_logits):
        ref_logits = array.array("f")
        with open(a.ref_logits, "rb") as f:
            ref_logits.frombytes(f.read())

    def load(impl):
        kw = dict(attn_implementation=impl)
        try:
            m = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, **kw)
        except TypeError:
            m = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32, **kw)
        return m.to(dev).eval()

    def forward(m, ids, past=None, last_only=True):
        kw = dict(input_ids=ids, use_cache=True)
        if past is not None:
            kw["past_key_values"] = past
        if last_only:
            try:
                return m(**kw, logits_to_keep=1)
            except TypeError:
                pass
        return m(**kw)

    def greedy(m, ids, n):
        out = forward(m, ids)
        past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        toks = [tok]
        for _ in range(n - 1):
            out = forward(m, tok, past)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(tok)
        return torch.cat(toks, dim=1)[0].tolist()

    pp = [int(x) for x in a.pp.split(",") if x.strip()]
    status = 0
    for impl in [s.strip() for s in a.impls.split(",") if s.strip()]:
        r = {}
        t0 = time.perf_counter()
        try:
            m = load(impl)
        except Exception as e:  # noqa: BLE001 - reported, the next implementation still runs
            r["error"] = f"{type(e).__name__}: {e}"
            print(f"{impl}: cannot load: {r['error']}")
            result["impls"][impl] = r
            status = 1
            continue
        r["load_s"] = time.perf_counter() - t0
        cfg = m.config
        rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": getattr(cfg, "rope_theta", None), "rope_local_base_freq": getattr(cfg, "rope_local_base_freq", None)}
        print(f"{impl}: loaded in {r['load_s']:.1f} s; layers {cfg.num_hidden_layers}, layer_types {getattr(cfg, 'layer_types', None)}, rope {rope}, sliding_window {cfg.sliding_window}, query_pre_attn_scalar {cfg.query_pre_attn_scalar}")
        vocab = cfg.vocab_size
        gen = torch.Generator().manual_seed(a.seed)
        with torch.inference_mode():
            # Correctness against tg, on the prompt tg ran.
            if prompt:
                ids = torch.tensor([prompt], device=dev)
                logits = forward(m, ids).logits[0, -1].float().cpu().tolist()
                if ref_logits is not None and len(ref_logits) == len(logits):
                    r["logits_nmse_vs_tg_cpu"] = nmse(logits, ref_logits)
                    r["argmax"] = [max(range(len(logits)), key=logits.__getitem__), max(range(len(ref_logits)), key=ref_logits.__getitem__)]
                    print(f"{impl}: final logits vs tg cpu: NMSE {r['logits_nmse_vs_tg_cpu']:.3e}, argmax {r['argmax'][0]} (HF) vs {r['argmax'][1]} (tg)")
                    if not r["logits_nmse_vs_tg_cpu"] <= 1e-4:
                        status = 1
                if ref_tokens:
                    toks = greedy(m, ids, len(ref_tokens))
                    r["greedy_tokens"] = toks
                    r["greedy_matches_tg"] = toks == ref_tokens
                    print(f"{impl}: greedy {toks} {'==' if toks == ref_tokens else '!='} tg {ref_tokens}")
            # Prompt processing.
            for n in pp:
                ids = torch.randint(0, vocab, (1, n), generator=gen).to(dev)
                forward(m, ids)
                sync()
                times = []
                for _ in range(a.reps):
                    sync()
                    t0 = time.perf_counter()
                    forward(m, ids)
                    sync()
                    times.append(time.perf_counter() - t0)
                r[f"pp{n}"] = 1000.0 * sum(times) / len(times)
                print(f"{impl}: pp{n}: {r[f'pp{n}']:.3f} ms ({', '.join(f'{1000 * t:.2f}' for t in times)})")
            # Generation after a one-token prompt (BOS).
            bos = torch.tensor([[getattr(cfg, "bos_token_id", 2) or 2]], device=dev)
            greedy(m, bos, a.gen)
            sync()
            per_tok = []
            for _ in range(a.reps):
                out = forward(m, bos)
                past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                sync()
                t0 = time.perf_counter()
                for _ in range(a.gen):
                    out = forward(m, tok, past)
                    past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                sync()
                per_tok.append((time.perf_counter() - t0) / a.gen)
            r["tg"] = 1000.0 * sum(per_tok) / len(per_tok)
            r["gen_tokens"] = a.gen
            print(f"{impl}: tg{a.gen}: {r['tg']:.3f} ms per token ({', '.join(f'{1000 * t:.3f}' for t in per_tok)})")
        result["impls"][impl] = r
        del m
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    first = next(iter(result["impls"].values()), {})
    for k in ("logits_nmse_vs_tg_cpu", "greedy_matches_tg"):
        if k in first:
            result[k] = first[k]
    keys = sorted({k for r in result["impls"].values() for k in r if k.startswith("pp") or k == "tg"}, key=lambda k: (k == "tg", int(k[2:]) if k[2:].isdigit() else 0))
    print()
    print(f"{'HF ' + result.get('device', ''):<40}" + "".join(f"{k:>11}" for k in keys) + "   (ms; tg: per token)")
    for impl, r in result["impls"].items():
        print(f"{impl:<40}" + "".join(f"{r[k]:>11.3f}" if isinstance(r.get(k), float) else f"{'-':>11}" for k in keys))
    write(a.out, result)
    return status


if __name__ == "__main__":
    sys.exit(main())
