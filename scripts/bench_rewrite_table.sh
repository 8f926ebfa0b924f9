#!/usr/bin/env bash
# The rewrite-stage table of docs/perf-log.md: Gemma 3 270M prompt processing and generation
# with the e-graph rule families switched on one after another, and llama.cpp's llama-bench on
# the same file in the same run (when LLAMA_BENCH points at a llama-bench binary).
#
#   scripts/bench_rewrite_table.sh [threads (default 2)] [repetitions (default 3)]
#
# TG=path/to/tg benchmarks that binary instead of building one.
# Each row is `tg bench -p 5,128 -n 16 -t T -r R` with `--no-stage` options; the JSON rows are
# collected and printed as one markdown table (tokens/s, mean ± std).
set -euo pipefail
cd "$(dirname "$0")/.."
T="${1:-2}"
R="${2:-3}"
MODEL="$(python3 scripts/fetch_model.py)"
if [ -z "${TG:-}" ]; then
  cargo build --release --locked -q -p tg-cli
  TG=target/release/tg
fi
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

rows=(
  "baseline (no rewrite)|--no-stage rewrite"
  "+ layout, simplify|--no-stage rewrite:fusion"
  "+ fused RMSNorm|--no-stage rewrite:fusion.add-rmsnorm --no-stage rewrite:fusion.rope --no-stage rewrite:fusion.qknorm-rope --no-stage rewrite:fusion.gelu --no-stage rewrite:fusion.softmax --no-stage rewrite:fusion.attention"
  "+ fused GELU (gated)|--no-stage rewrite:fusion.add-rmsnorm --no-stage rewrite:fusion.rope --no-stage rewrite:fusion.qknorm-rope --no-stage rewrite:fusion.softmax --no-stage rewrite:fusion.attention"
  "+ fused RoPE|--no-stage rewrite:fusion.add-rmsnorm --no-stage rewrite:fusion.qknorm-rope --no-stage rewrite:fusion.softmax --no-stage rewrite:fusion.attention"
  "+ fused q/k-norm + RoPE|--no-stage rewrite:fusion.add-rmsnorm --no-stage rewrite:fusion.softmax --no-stage rewrite:fusion.attention"
  "+ fused softmax|--no-stage rewrite:fusion.add-rmsnorm --no-stage rewrite:fusion.attention"
  "+ fused attention|--no-stage rewrite:fusion.add-rmsnorm --no-stage rewrite:attention-seq-major"
  "+ fused residual add + RMSNorm|--no-stage rewrite:attention-seq-major"
  "+ copy chains removed (position-major attention; all rules)|"
)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
i=0
for row in "${rows[@]}"; do
  name="${row%%|*}"
  flags="${row#*|}"
  # shellcheck disable=SC2086
  "$TG" bench -m "$MODEL" -p 5,128 -n 16 -t "$T" -r "$R" -o json $flags > "$OUT/$i.json"
  echo "$name" > "$OUT/$i.name"
  i=$((i + 1))
done
if [ -n "${LLAMA_BENCH:-}" ]; then
  "$LLAMA_BENCH" -m "$MODEL" -p 5,128 -n 16 -t "$T" -r "$R" -o json > "$OUT/llama.json" 2>/dev/null
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$OUT" "$i" <<'EOF'
import json, os, sys
out, n = sys.argv[1], int(sys.argv[2])
def cells(rows):
    get = lambda p, g: next((r for r in rows if r["n_prompt"] == p and r["n_gen"] == g), None)
    return [f'{r["avg_ts"]:.1f} ± {r["stddev_ts"]:.1f}' if r else "-" for r in (get(5, 0), get(128, 0), get(0, 16))]
print("| step | pp5 t/s | pp128 t/s | tg16 t/s |")
print("|---|---|---|---|")
for i in range(n):
    name = open(os.path.join(out, f"{i}.name")).read().strip()
    print(f"| {name} | " + " | ".join(cells(json.load(open(os.path.join(out, f"{i}.json"))))) + " |")
p = os.path.join(out, "llama.json")
if os.path.exists(p):
    print("| llama.cpp (llama-bench, same file) | " + " | ".join(cells(json.load(open(p)))) + " |")
EOF
