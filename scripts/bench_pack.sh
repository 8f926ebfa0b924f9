#!/usr/bin/env bash
# Side by side: `tg pack` and Google's MiniMalloc on MiniMalloc's benchmark instances
# (the README example at capacity 12, the "challenging" A–F at 1 MiB). Both packings
# are checked by our validator (`tg pack --check`). Prints a markdown table.
#
# Environment:
#   MINIMALLOC_BIN      the minimalloc binary (required; see docs/pack.md to build it)
#   TG_BIN              the tg binary (default: target/release/tg, built if missing)
#   TG_MINIMALLOC_DATA  the instances (default: /work/shared/data/minimalloc)
#   REPS                runs per tool and instance; the median time is shown (default 3)
#   TIME_LIMIT          seconds per run for both tools (default 60)
#   INSTANCES           space-separated file names (default: input.12.csv and A–F)
set -euo pipefail

cd "$(dirname "$0")/.."
DATA=${TG_MINIMALLOC_DATA:-/work/shared/data/minimalloc}
REPS=${REPS:-3}
TIME_LIMIT=${TIME_LIMIT:-60}
INSTANCES=${INSTANCES:-"input.12.csv A.1048576.csv B.1048576.csv C.1048576.csv D.1048576.csv E.1048576.csv F.1048576.csv"}
MM=${MINIMALLOC_BIN:?set MINIMALLOC_BIN to the minimalloc binary}
TG=${TG_BIN:-target/release/tg}
if [[ ! -x $TG ]]; then
    cargo build --release -p tg-cli >&2
fi
[[ -d $DATA ]] || { echo "no data at $DATA (set TG_MINIMALLOC_DATA)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# The capacity is the number in the file name (`X.<capacity>.csv`).
capacity_of() { local b=${1%.csv}; echo "${b##*.}"; }

echo "| instance | buffers | capacity | tg pack time (s) | tg pack height | MiniMalloc time (s) | MiniMalloc height | both valid |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for inst in $INSTANCES; do
    in="$DATA/$inst"
    cap=$(capacity_of "$inst")
    ours_t=() mm_t=()
    ours_h="-" mm_h="-" valid="yes" buffers="-"
    for ((r = 0; r < REPS; r++)); do
        # Ours: the solver's own time (parsing excluded), like MiniMalloc's "Elapsed time".
        if line=$("$TG" pack --capacity "$cap" --input "$in" --output "$work/ours.csv" --time-limit "$TIME_LIMIT" | grep '^result:'); then
            ours_t+=("$(sed -E 's/.* time_s=([0-9.]+).*/\1/' <<<"$line")")
            ours_h=$(sed -E 's/.* height=([0-9-]+).*/\1/' <<<"$line")
            buffers=$(sed -E 's/.* buffers=([0-9]+).*/\1/' <<<"$line")
        else
            ours_h="failed"
        fi
        # MiniMalloc logs "Elapsed time 1.234s" on stderr.
        if log=$("$MM" --capacity="$cap" --input="$in" --output="$work/mm.csv" --timeout="${TIME_LIMIT}s" 2>&1); then
            mm_t+=("$(grep -oE 'Elapsed time [0-9.]+' <<<"$log" | awk '{print $3}')")
            if check=$("$TG" pack --capacity "$cap" --input "$work/mm.csv" --check 2>&1 | grep '^result:'); then
                mm_h=$(sed -E 's/.* height=([0-9]+).*/\1/' <<<"$check")
            else
                mm_h="INVALID"
                valid="no"
            fi
        else
            mm_h="failed"
        fi
        if [[ $ours_h != failed && $ours_h != - ]]; then
            "$TG" pack --capacity "$cap" --input "$work/ours.csv" --check >/dev/null 2>&1 || valid="no"
        else
            valid="no"
        fi
    done
    ot=$( ((${#ours_t[@]})) && printf '%s\n' "${ours_t[@]}" | median || echo "-")
    mt=$( ((${#mm_t[@]})) && printf '%s\n' "${mm_t[@]}" | median || echo "-")
    printf '| %s | %s | %s | %.4f | %s | %.4f | %s | %s |\n' "${inst%.csv}" "$buffers" "$cap" "$ot" "$ours_h" "$mt" "$mm_h" "$valid"
done
