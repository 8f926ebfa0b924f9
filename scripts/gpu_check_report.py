#!/usr/bin/env python3
"""Small reports for scripts/gpu_check.sh (standard library only).

    gpu_check_report.py bench FILE.json     # a tg bench JSON file as a table (t/s and ms)
    gpu_check_report.py embed FILE.json     # a tg bench-embed --json file as a table
    gpu_check_report.py logits OUT          # NMSE of the logits files in OUT (cuda vs cpu)
    gpu_check_report.py greedy OUT          # greedy tokens of generate_{cpu,cuda}.json compared
    gpu_check_report.py summary OUT         # the final block: tg vs HF, NMSE, backend-ops totals

`logits` and `greedy` exit 1 when the check fails (NMSE above 1e-6 on the f32 path, tokens
differing), so the calling step is reported as failed.
"""
import array
import json
import math
import os
import sys

NMSE_GOAL = 1e-6


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def bench_rows_ms(rows):
    """{"pp5": ms for the whole prompt, "tg": ms per generated token} from tg bench JSON rows."""
    out = {}
    for r in rows or []:
        ts = r.get("avg_ts") or 0.0
        if r.get("n_prompt"):
            out[f"pp{r['n_prompt']}"] = 1000.0 * r["n_prompt"] / ts if ts else None
        elif r.get("n_gen"):
            out["tg"] = 1000.0 / ts if ts else None
    return out


def cmd_bench(path):
    rows = load_json(path)
    if not rows:
        print(f"{path}: no rows")
        return 1
    print(f"{'test':<8} {'backend':<14} {'threads':>7} {'t/s':>10} {'± t/s':>8} {'ms':>10}")
    for r in rows:
        ts = r.get("avg_ts") or 0.0
        if r.get("n_prompt"):
            test, ms = f"pp{r['n_prompt']}", (1000.0 * r["n_prompt"] / ts if ts else float("nan"))
        else:
            test, ms = f"tg{r.get('n_gen', 0)}", (1000.0 / ts if ts else float("nan"))
        backend = str(r.get("backends", r.get("backend", "?")))
        print(f"{test:<8} {backend:<14} {r.get('n_threads', '?'):>7} {ts:>10.2f} {r.get('stddev_ts', 0.0):>8.2f} {ms:>10.3f}")
    return 0


def cmd_embed(path):
    rows = load_json(path)
    if not rows:
        print(f"{path}: no rows")
        return 1
    print(f"{'workload':<10} {'threads':>7} {'texts':>6} {'tokens':>7} {'sent/s':>10} {'tok/s':>10} {'ms/call':>9}")
    for r in rows:
        print(f"{r.get('workload', '?'):<10} {r.get('threads', '?'):>7} {r.get('sentences', 0):>6} {r.get('tokens', 0):>7} {r.get('sentences_per_s_mean', 0):>10.2f} {r.get('tokens_per_s_mean', 0):>10.1f} {1000 * r.get('seconds_mean', 0):>9.2f}")
    return 0


def read_f32(path):
    if not os.path.exists(path):
        return None
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def nmse(a, b):
    num = math.fsum((x - y) * (x - y) for x, y in zip(a, b))
    den = math.fsum(y * y for y in b)
    return num / den if den else float("nan")


def argmax(a):
    return max(range(len(a)), key=a.__getitem__)


def cmd_logits(out):
    res = {}
    pairs = [("f32", "logits_cuda.f32", "logits_cpu.f32"), ("q8", "logits_cuda_q8.f32", "logits_cpu_q8.f32"), ("cpu q8 vs f32", "logits_cpu_q8.f32", "logits_cpu.f32")]
    for label, x, ref in pairs:
        a, b = read_f32(os.path.join(out, x)), read_f32(os.path.join(out, ref))
        if a is None or b is None or len(a) != len(b) or not len(a):
            print(f"{label:<14} missing or mismatched: {x} / {ref}")
            continue
        e = nmse(a, b)
        finite = all(math.isfinite(v) for v in a)
        r = {"nmse": e, "finite": finite, "argmax": [argmax(a), argmax(b)], "max_abs": max(abs(p - q) for p, q in zip(a, b)), "n": len(a)}
        res[label] = r
        goal = f" (goal <= {NMSE_GOAL:g}: {'met' if e <= NMSE_GOAL else 'NOT met'})" if label == "f32" else ""
        print(f"{label:<14} {x} vs {ref}: NMSE {e:.3e}{goal}, max |diff| {r['max_abs']:.3e}, argmax {r['argmax'][0]} vs {r['argmax'][1]}, all finite: {finite}")
    with open(os.path.join(out, "logits_nmse.json"), "w") as f:
        json.dump(res, f, indent=1)
    ok = "f32" in res and res["f32"]["finite"] and res["f32"]["nmse"] <= NMSE_GOAL
    return 0 if ok else 1


def cmd_greedy(out):
    c, g = load_json(os.path.join(out, "generate_cpu.json")), load_json(os.path.join(out, "generate_cuda.json"))
    print("prompt tokens:", c and c.get("prompt_tokens"))
    print("cpu tokens:   ", c and c.get("tokens"))
    print("cuda tokens:  ", g and g.get("tokens"))
    for name, v in (("cpu", c), ("cuda", g)):
        if v:
            t = v.get("timings", {})
            print(f"{name}: load {t.get('load_ms', 0):.0f} ms, compile {t.get('compile_ms', 0):.0f} ms, prompt {t.get('prompt_ms', 0):.1f} ms, generation {t.get('generate_tokens_per_s', 0):.1f} tokens/s")
    if not (c and g):
        return 1
    same = c["tokens"] == g["tokens"]
    first = next((i for i, (a, b) in enumerate(zip(c["tokens"], g["tokens"])) if a != b), None)
    print("greedy tokens identical" if same else f"greedy tokens DIFFER from position {first}")
    with open(os.path.join(out, "greedy.json"), "w") as f:
        json.dump({"identical": same, "first_difference": first, "cpu": c["tokens"], "cuda": g["tokens"]}, f)
    return 0 if same else 1


def cmd_summary(out):
    cols = {}
    for label, name in [("tg cuda", "bench_cuda.json"), ("tg cuda q8", "bench_cuda_q8.json"), ("tg cpu,cuda", "bench_cpu_cuda.json"), ("tg cpu", "bench_cpu.json")]:
        cols[label] = bench_rows_ms(load_json(os.path.join(out, name)))
    hf = load_json(os.path.join(out, "hf.json")) or {}
    for impl, r in (hf.get("impls") or {}).items():
        cols[f"HF {impl}"] = {k: v for k, v in r.items() if k.startswith("pp") or k == "tg"}
    keys = sorted({k for c in cols.values() for k in c}, key=lambda k: (k == "tg", int(k[2:]) if k[2:].isdigit() else 0))

    def fmt(v):
        return f"{v:>11.3f}" if isinstance(v, (int, float)) else f"{'-':>11}"

    print("milliseconds: ppN = the whole N-token prompt, tg = per generated token")
    print(f"{'':<14}" + "".join(f"{k:>11}" for k in keys))
    for label, c in cols.items():
        print(f"{label:<14}" + "".join(fmt(c.get(k)) for k in keys))
    base = cols.get("tg cuda", {})
    for other in [label for label in cols if label.startswith("HF")]:
        ratios = [f"{k} {cols[other][k] / base[k]:.2f}x" for k in keys if base.get(k) and cols[other].get(k)]
        if ratios:
            print(f"{other} time / tg cuda time: " + ", ".join(ratios) + "  (> 1: tg faster)")
    for k, v in (load_json(os.path.join(out, "logits_nmse.json")) or {}).items():
        print(f"logits NMSE {k}: {v['nmse']:.3e} (argmax {v['argmax'][0]} vs {v['argmax'][1]})")
    greedy = load_json(os.path.join(out, "greedy.json"))
    if greedy:
        print(f"greedy tokens cuda vs cpu identical: {greedy['identical']}")
    if hf.get("logits_nmse_vs_tg_cpu") is not None:
        print(f"HF f32 logits vs tg cpu: NMSE {hf['logits_nmse_vs_tg_cpu']:.3e}; HF greedy == tg cpu: {hf.get('greedy_matches_tg')}")
    if hf.get("error"):
        print(f"HF: {hf['error']}")
    emb = {dev: {r.get("workload"): r for r in load_json(os.path.join(out, f"bench_embed_{dev}.json")) or []} for dev in ("cuda", "cpu")}
    for w in sorted({w for d in emb.values() for w in d}):
        parts = [f"{dev} {1000 * emb[dev][w]['seconds_mean']:.2f} ms/call" for dev in ("cuda", "cpu") if w in emb[dev]]
        print(f"bench-embed {w}: " + ", ".join(parts))
    try:
        with open(os.path.join(out, "backend_ops.txt")) as f:
            for line in f:
                s = line.strip()
                if s.startswith(("TOTAL", "SKIPPED", "FAIL:", "backend-ops:")) or "problem(s)" in s or s.startswith("test result"):
                    print("backend-ops:", s)
    except OSError:
        print("backend-ops: no table")
    try:
        with open(os.path.join(out, "compile_sm90.txt")) as f:
            lines = [line.rstrip() for line in f if line.strip()]
        print("compile sm_90:", lines[-1] if lines else "empty")
    except OSError:
        print("compile sm_90: no table")
    return 0


def main(argv):
    cmds = {"bench": cmd_bench, "embed": cmd_embed, "logits": cmd_logits, "greedy": cmd_greedy, "summary": cmd_summary}
    if len(argv) != 3 or argv[1] not in cmds:
        print(__doc__)
        return 2
    return cmds[argv[1]](argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
