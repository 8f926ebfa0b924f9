#!/usr/bin/env bash
# Side by side on the extraction-gym tensat e-graphs: extraction-gym's faster-greedy-dag and
# ILP (COIN-OR CBC) extractors, then `tg extract` (tg_extract's anytime solver), in one
# sitting. Prints a markdown table (docs/extract.md records one).
#
# Environment:
#   EXTRACTION_GYM_BIN      extraction-gym binary, built with `--features ilp-cbc` and the
#                           300 s extractors of docs/extract.md (required)
#   TG_BIN                  the `tg` binary (default: target/release/tg)
#   TG_EXTRACTION_GYM_DATA  folder of the .json e-graphs (default /work/shared/data/extraction-gym)
#   ILP_EXTRACTOR           extraction-gym extractor for the ILP column
#                           (default faster-ilp-cbc-timeout-300)
#   TG_TIME_LIMITS          `tg extract` time limits in seconds, space separated (default "10 60")
#   FILES                   e-graph names (default: the six tensat files)
#   SKIP_ILP=1              leave the ILP column empty (it takes up to ~20 min per file)
set -euo pipefail
cd "$(dirname "$0")/.."

: "${EXTRACTION_GYM_BIN:?set EXTRACTION_GYM_BIN to the extraction-gym binary (see docs/extract.md)}"
TG_BIN="${TG_BIN:-target/release/tg}"
DATA="${TG_EXTRACTION_GYM_DATA:-/work/shared/data/extraction-gym}"
ILP="${ILP_EXTRACTOR:-faster-ilp-cbc-timeout-300}"
LIMITS="${TG_TIME_LIMITS:-10 60}"
FILES="${FILES:-vgg_acyclic resnet50_acyclic vgg resnet50 bert_acyclic bert}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

header="| file | classes | nodes | faster-greedy-dag: cost | s | ILP: cost | s | proven |"
rule="|---|---:|---:|---:|---:|---:|---:|:---:|"
for t in $LIMITS; do
    header="$header tg ${t}s: cost | lower bound | gap % | proven | s |"
    rule="$rule---:|---:|---:|:---:|---:|"
done
echo "$header"
echo "$rule"

for f in $FILES; do
    in="$DATA/$f.json"
    [ -f "$in" ] || { echo "| $f | absent |"; continue; }

    # faster-greedy-dag. Times are each tool's extraction time, file reading excluded
    # (extraction-gym's "micros", tg's "ms").
    "$EXTRACTION_GYM_BIN" "$in" --extractor=faster-greedy-dag --out="$TMP/fgd.json" 2>/dev/null
    fgd_cost=$(field "$TMP/fgd.json" dag)
    fgd_s=$(python3 -c "print(f'{$(field "$TMP/fgd.json" micros) / 1e6:.3f}')")

    # ILP: proven when CBC's last solve finished (the extractor then returns its optimum).
    if [ "${SKIP_ILP:-0}" = 1 ]; then
        ilp_cost="-"; ilp_s="-"; ilp_proven="-"
    else
        RUST_LOG=info "$EXTRACTION_GYM_BIN" "$in" --extractor="$ILP" --out="$TMP/ilp.json" 2>"$TMP/ilp.log"
        ilp_cost=$(field "$TMP/ilp.json" dag)
        ilp_s=$(python3 -c "print(f'{$(field "$TMP/ilp.json" micros) / 1e6:.3f}')")
        last=$(grep -o 'CBC status [A-Za-z]*' "$TMP/ilp.log" | tail -n 1 || true)
        if [ "$last" = "CBC status Finished" ] && ! grep -q 'Timed out\|Infeasible' "$TMP/ilp.log"; then
            ilp_proven=yes
        else
            ilp_proven=no
        fi
    fi

    row=""
    for t in $LIMITS; do
        "$TG_BIN" extract --input "$in" --time-limit "$t" --json >"$TMP/tg.json"
        row="$row $(python3 - "$TMP/tg.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
gap = 100 * (r["dag_cost"] - r["lower_bound"]) / r["dag_cost"] if r["dag_cost"] > 0 else 0.0
print(f'{r["dag_cost"]:.9f} | {r["lower_bound"]:.9f} | {gap:.4f} | {"yes" if r["optimal"] else "no"} | {r["ms"] / 1e3:.3f} |')
EOF
)"
        classes=$(field "$TMP/tg.json" classes)
        nodes=$(field "$TMP/tg.json" nodes)
    done
    printf '| %s | %s | %s | %.9f | %s | %s | %s | %s |%s\n' \
        "$f" "$classes" "$nodes" "$fgd_cost" "$fgd_s" \
        "$(python3 -c "x='$ilp_cost'; print(x if x == '-' else f'{float(x):.9f}')")" \
        "$ilp_s" "$ilp_proven" "$row"
done
