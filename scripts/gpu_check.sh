#!/usr/bin/env bash
# The CUDA device's check on a lent GPU machine (one NVIDIA H100, driver at /usr/local/nvidia,
# CUDA toolkit at /usr/local/cuda, PyTorch + Transformers, no Rust toolchain, no network),
# run from the repository root in under 10 minutes:
#
#     bash scripts/gpu_check.sh            # prebuilt binaries from scripts/gpu_check_prepare.sh in .gpu/
#
# Steps (each timed, its output in $OUT/gpu_check.log; none stops the ones after it):
#   a. environment: nvidia-smi, kernel, glibc, loader path, NVRTC/ptxas, `tg devices`
#   b. `tg devices --compile cuda --arch sm_90`: every kernel through NVRTC + ptxas
#   c. the backend-ops table on every device present (cpu, cuda, NVIDIA's OpenCL if an ICD works)
#   d. `tg synth gemma3-270m` (random weights, the real layout, plus a Hugging Face copy) and
#      `tg bench` on cuda, cpu+cuda, cpu (and --numerics q8 on cuda); JSON rows kept
#   e. correctness: final-position logits cuda vs cpu (NMSE), greedy tokens cuda vs cpu
#   f. Hugging Face Transformers on the same GPU with the same weights (scripts/gpu_check_hf.py)
#   g. a synthetic EmbeddingGemma-300M (`tg synth embeddinggemma-300m`): `tg bench-embed` on cuda
#      and cpu; the terrain UNet (tg diffuse) when its ONNX model is present
#   h. a summary: tg cuda vs HF eager/sdpa, NMSE, backend-ops totals, every step's status
#
# Environment: OUT (results, default /tmp/gpu_check_out), TG_BIN (binaries, default ./.gpu/bin:
# tg and backend_ops-*, possibly .xz), GPU_CHECK_QUICK=1 (short settings and a 2-layer model, to
# try the script on a machine without a GPU), PYTHON (the one with PyTorch), GPU_CHECK_BUDGET (seconds, default 560: later
# steps get what is left), TG_ONNX_MODELS (folder with the terrain UNet), GPU_CHECK_WORK
# (scratch, default /tmp/gpu_check_work). docs/gpu-check.md says more.
set -u
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

OUT="${OUT:-/tmp/gpu_check_out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: >"$LOG"
WORK="${GPU_CHECK_WORK:-/tmp/gpu_check_work}"
mkdir -p "$WORK/bin"
QUICK="${GPU_CHECK_QUICK:-0}"
BUDGET="${GPU_CHECK_BUDGET:-560}"
TG_BIN="${TG_BIN:-./.gpu/bin}"
START=$(date +%s)
PROMPT="The capital of France is"

# Settings: the real workload on the GPU machine, a short one to try the script elsewhere.
if [ "$QUICK" = 1 ]; then
    SYNTH_LAYERS="--layers 2"
    BENCH_ARGS="-p 5,16 -n 4 -r 1"
    GEN_N=4
    HF_ARGS="--pp 5,16 --gen 4 --reps 1"
    EMB_REPS=1
    CPU_THREADS=2
else
    SYNTH_LAYERS=""
    BENCH_ARGS="-p 5,128 -n 32 -r 3"
    GEN_N=16
    HF_ARGS="--pp 5,128 --gen 32 --reps 3"
    EMB_REPS=3
    CPU_THREADS=16
fi
REPORT="python3 $ROOT/scripts/gpu_check_report.py"
export ROOT OUT WORK PROMPT SYNTH_LAYERS BENCH_ARGS GEN_N HF_ARGS EMB_REPS CPU_THREADS REPORT

say() { echo "$*" | tee -a "$LOG"; }

STEP_NAMES=()
STEP_STATUS=()
STEP_SECS=()

# run_step NAME LIMIT_S 'shell command' [RESERVE_S]: runs it under `timeout`, never past the
# budget less RESERVE_S (time kept for the steps after it), output shown and appended to the
# log, status and time recorded for the summary.
run_step() {
    local name="$1" limit="$2" cmd="$3" reserve=$((${4:-0} * BUDGET / 560))   # reserves scale with the budget
    local now left t0 t1 rc status
    now=$(date +%s)
    left=$((BUDGET - (now - START) - 15 - reserve))
    if [ "$left" -lt 5 ]; then
        say ""
        say "=== [$name] SKIPPED: the time budget (${BUDGET} s, ${reserve} s of it kept for later steps) is spent"
        STEP_NAMES+=("$name"); STEP_STATUS+=("SKIPPED (budget)"); STEP_SECS+=("0")
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    say ""
    say "=== [$name] (limit ${limit} s)"
    say "\$ $cmd"
    t0=$(date +%s.%N)
    timeout -k 5 "$limit" bash -o pipefail -c "$cmd" 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)
    local secs
    secs=$(python3 -c "print(f'{$t1 - $t0:.1f}')" 2>/dev/null || echo "?")
    case "$rc" in
        0) status="ok" ;;
        124 | 137) status="FAILED (timed out after ${limit} s)" ;;
        77) status="SKIPPED" ;;
        *) status="FAILED (exit $rc)" ;;
    esac
    say "--- [$name] $status in ${secs} s"
    STEP_NAMES+=("$name"); STEP_STATUS+=("$status"); STEP_SECS+=("$secs")
    return 0
}

# ---------------------------------------------------------------- binaries
# `tg` and the backend-ops test binary, decompressed into $WORK/bin when they are .xz.
unpack() { # SRC DEST
    if [ "${1%.xz}" != "$1" ]; then
        if command -v xz >/dev/null 2>&1; then
            xz -dc "$1" >"$2"
        else
            python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
        fi
    else
        cp "$1" "$2"
    fi && chmod +x "$2"
}
TG=""
BACKEND_OPS=""
for f in "$TG_BIN"/tg "$TG_BIN"/tg.xz; do
    if [ -f "$f" ]; then
        unpack "$f" "$WORK/bin/tg" && TG="$WORK/bin/tg"
        break
    fi
done
if [ -z "$TG" ] && [ -x "$ROOT/target/release/tg" ]; then
    say "note: no tg in $TG_BIN; using $ROOT/target/release/tg"
    TG="$ROOT/target/release/tg"
fi
for f in "$TG_BIN"/backend_ops-*; do
    [ -f "$f" ] || continue
    unpack "$f" "$WORK/bin/backend_ops" && BACKEND_OPS="$WORK/bin/backend_ops"
    break
done
say "gpu_check: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), quick=$QUICK, budget ${BUDGET} s, OUT=$OUT"
say "tg: ${TG:-MISSING}; backend-ops test: ${BACKEND_OPS:-MISSING} (from TG_BIN=$TG_BIN)"
export TG BACKEND_OPS TG_BIN

# ---------------------------------------------------------------- a. environment
# The driver's libraries (libcuda, libnvidia-opencl) in the container's mount, the toolkit's.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
done
# The OpenCL ICD loader: the machine's, else the one carried in .gpu/ocl (an unpacked Debian
# ocl-icd-libopencl1, see scripts/gpu_check_prepare.sh).
if ! ldconfig -p 2>/dev/null | grep -q 'libOpenCL.so.1 '; then
    for d in "$ROOT"/.gpu/ocl/usr/lib/x86_64-linux-gnu "$ROOT"/.gpu/ocl/usr/lib/*-linux-gnu; do
        if [ -f "$d/libOpenCL.so.1" ]; then
            LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
            say "OpenCL: no system ICD loader; using the carried one in $d"
            break
        fi
    done
fi
export LD_LIBRARY_PATH
# NVIDIA's OpenCL platform: an .icd file naming libnvidia-opencl.so.1 when the system has none.
if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1 && [ -z "${OCL_ICD_VENDORS:-}" ]; then
    NV_OCL=""
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
        [ -f "$d/libnvidia-opencl.so.1" ] && NV_OCL="$d/libnvidia-opencl.so.1" && break
    done
    if [ -n "$NV_OCL" ]; then
        mkdir -p "$WORK/vendors"
        echo "$NV_OCL" >"$WORK/vendors/nvidia.icd"
        export OCL_ICD_VENDORS="$WORK/vendors"
        say "OpenCL: no /etc/OpenCL/vendors; OCL_ICD_VENDORS=$OCL_ICD_VENDORS -> $NV_OCL"
    fi
fi
# NVRTC (kernels are compiled at run time) and ptxas (the compile report): the toolkit's, else
# the ones in PyTorch's pip `nvidia` packages.
if [ -z "${TG_NVRTC:-}" ]; then
    for f in /usr/local/cuda/lib64/libnvrtc.so.1[0-9] /usr/local/cuda/lib64/libnvrtc.so.1[0-9].* /usr/local/cuda/lib64/libnvrtc.so; do
        [ -f "$f" ] && TG_NVRTC="$f" && break
    done
fi
TOOLS="${TG_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/tensor-graphs}/cuda-tools"
if [ -z "${TG_NVRTC:-}" ]; then   # scripts/fetch_cuda_tools.py's copy, where one was fetched
    TG_NVRTC="$(find "$TOOLS" -name 'libnvrtc.so.*' 2>/dev/null | grep -v builtins | sort | tail -1)"
    [ -z "${TG_PTXAS:-}" ] && TG_PTXAS="$(find "$TOOLS" -name ptxas -type f 2>/dev/null | sort | tail -1)"
    [ -n "${TG_PTXAS:-}" ] && export TG_PTXAS
fi
if [ -z "${TG_NVRTC:-}" ]; then
    NV_PY="$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]) + "/nvidia")' 2>/dev/null || true)"
    [ -n "$NV_PY" ] && TG_NVRTC="$(find "$NV_PY" -name 'libnvrtc.so*' 2>/dev/null | sort | head -1)"
fi
[ -n "${TG_NVRTC:-}" ] && export TG_NVRTC
if [ -z "${TG_PTXAS:-}" ] && [ -x /usr/local/cuda/bin/ptxas ]; then
    export TG_PTXAS=/usr/local/cuda/bin/ptxas
fi
for d in /usr/local/nvidia/bin /usr/local/cuda/bin; do
    [ -d "$d" ] && PATH="$PATH:$d"
done
export PATH
# The Python that has PyTorch (python3, else python), for step f.
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import torch' >/dev/null 2>&1 && command -v python >/dev/null 2>&1 && python -c 'import torch' >/dev/null 2>&1; then
    PYTHON=python
fi
export PYTHON
export TG_CACHE_DIR="$WORK/cache"   # plans, compiled kernels: fresh for this run
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

run_step "a. environment" 60 '
    nvidia-smi || echo "(nvidia-smi failed)"
    uname -a
    echo "glibc: $(ldd --version 2>&1 | head -1)"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "TG_NVRTC=${TG_NVRTC:-(not found)}  TG_PTXAS=${TG_PTXAS:-(not found)}  OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-(unset)}"
    [ -x /usr/local/cuda/bin/nvcc ] && /usr/local/cuda/bin/nvcc --version | tail -2
    "$PYTHON" -c "import torch, transformers; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"available\", torch.cuda.is_available(), \"transformers\", transformers.__version__)" 2>&1 | tail -1
    nproc; free -g | head -2
    [ -n "$TG" ] || { echo "no tg binary"; exit 1; }
    "$TG" devices
    "$TG" devices --json > "$OUT/devices.json"
    "$TG" devices --kernels > "$OUT/devices_kernels.txt" 2>&1
    head -40 "$OUT/devices_kernels.txt"
'
HAVE_CUDA=0
grep -q '"kind": *"cuda"' "$OUT/devices.json" 2>/dev/null && grep -q '"name": *"cuda:0"' "$OUT/devices.json" 2>/dev/null && HAVE_CUDA=1
say "CUDA device listed: $HAVE_CUDA"

# ---------------------------------------------------------------- b. kernel compile table
run_step "b. compile sm_90" 150 '"$TG" devices --compile cuda --arch sm_90 | tee "$OUT/compile_sm90.txt"' 360

# ---------------------------------------------------------------- c. backend-ops
run_step "c. backend-ops" 150 '
    [ -n "$BACKEND_OPS" ] || { echo "no backend_ops-* test binary in $TG_BIN"; exit 1; }
    "$BACKEND_OPS" --test-threads 1 2>&1 | tee "$OUT/backend_ops.txt"
    rc=${PIPESTATUS[0]}
    for f in "$ROOT/target/backend-ops.txt" /work/main/target/backend-ops.txt; do
        [ -f "$f" ] && cp "$f" "$OUT/backend-ops-cases.txt" && break
    done
    exit $rc
' 330

# ---------------------------------------------------------------- d. synth + bench
G="$WORK/g.gguf"
HF="$WORK/g-hf"
export G HF
run_step "d. synth gemma3-270m" 120 '"$TG" synth gemma3-270m --seed 1 $SYNTH_LAYERS --out "$G" --hf-dir "$HF" && ls -l "$G" "$HF"' 240

# Where the planner puts Gemma across cpu,cuda and why (no kernel profile of the GPU here:
# its roofline and links are measured on first use and planned from).
run_step "d. placement cpu,cuda" 90 '
    "$TG" plan -m "$G" -s 5 --device cpu,cuda -t $CPU_THREADS > "$OUT/plan_cpu_cuda_s5.txt" 2>&1
    "$TG" plan -m "$G" -s 1 --incremental 384 --device cpu,cuda -t $CPU_THREADS > "$OUT/plan_cpu_cuda_decode.txt" 2>&1
    grep -h "first use\|no kernel times" "$OUT/plan_cpu_cuda_s5.txt" | head -2
    for f in s5 decode; do echo "-- $f"; grep -A5 "placement:" "$OUT/plan_cpu_cuda_$f.txt"; done' 240

bench() { # STEP-NAME JSON-FILE TG-BENCH-ARGS
    run_step "$1" 120 '"$TG" bench -m "$G" $BENCH_ARGS '"$3"' -o json > "$OUT/'"$2"'" && $REPORT bench "$OUT/'"$2"'"' "$4"
}
# (each keeps time for the correctness checks and Hugging Face after it)
bench "d. bench cuda" bench_cuda.json "--device cuda -t 1" 200
bench "d. bench cuda q8" bench_cuda_q8.json "--device cuda -t 1 --numerics q8" 200
bench "d. bench cpu,cuda" bench_cpu_cuda.json "--device cpu,cuda -t $CPU_THREADS" 200
bench "d. bench cpu" bench_cpu.json "--device cpu -t $CPU_THREADS" 180

# ---------------------------------------------------------------- e. correctness
run_step "e. logits cuda vs cpu" 120 '
    "$TG" logits -m "$G" --prompt "$PROMPT" --device cpu -t $CPU_THREADS --out "$OUT/logits_cpu.f32" || exit 1
    "$TG" logits -m "$G" --prompt "$PROMPT" --device cpu -t $CPU_THREADS --numerics q8 --out "$OUT/logits_cpu_q8.f32"
    "$TG" logits -m "$G" --prompt "$PROMPT" --device cuda --out "$OUT/logits_cuda.f32"
    "$TG" logits -m "$G" --prompt "$PROMPT" --device cuda --numerics q8 --out "$OUT/logits_cuda_q8.f32"
    $REPORT logits "$OUT"
' 140
run_step "e. greedy cuda vs cpu" 120 '
    "$TG" generate -m "$G" --prompt "$PROMPT" -n $GEN_N --json --device cpu -t $CPU_THREADS > "$OUT/generate_cpu.json" || exit 1
    "$TG" generate -m "$G" --prompt "$PROMPT" -n $GEN_N --json --device cuda > "$OUT/generate_cuda.json"
    $REPORT greedy "$OUT"
' 120

# ---------------------------------------------------------------- f. Hugging Face
run_step "f. HF transformers" 200 '
    "$PYTHON" "$ROOT/scripts/gpu_check_hf.py" --model "$HF" $HF_ARGS --prompt-from "$OUT/generate_cpu.json" \
        --ref-logits "$OUT/logits_cpu.f32" --out "$OUT/hf.json"
'

# ---------------------------------------------------------------- g. other models
EMB="$WORK/emb"
export EMB
run_step "g. synth embeddinggemma" 90 '"$TG" synth embeddinggemma-300m --seed 1 $SYNTH_LAYERS --out "$EMB" && ls -l "$EMB"' 60
for dev in cuda cpu; do
    threads=1
    [ "$dev" = cpu ] && threads=$CPU_THREADS
    run_step "g. bench-embed $dev" 90 '
        [ -f "$EMB/modules.json" ] || { echo "no synthetic EmbeddingGemma folder"; exit 1; }
        "$TG" bench-embed -m "$EMB" --device '"$dev"' -t '"$threads"' -r $EMB_REPS --json > "$OUT/bench_embed_'"$dev"'.json" && $REPORT embed "$OUT/bench_embed_'"$dev"'.json"
    ' 45
done
run_step "g. terrain diffuse" 90 '
    unet=""
    [ -n "${TG_ONNX_MODELS:-}" ] && unet=$(find "$TG_ONNX_MODELS" -iname "*unet*.onnx" 2>/dev/null | head -1)
    if [ -z "$unet" ]; then
        echo "skipped: no terrain UNet ONNX under TG_ONNX_MODELS=${TG_ONNX_MODELS:-(unset)} (the 45 MB model does not fit the transfer to this machine)"
        exit 77
    fi
    for dev in cuda cpu; do
        t0=$(date +%s.%N)
        "$TG" diffuse --model "$unet" --difficulty 50 --steps 4 --seed 1 --device $dev -o "$OUT/terrain_$dev.png" || echo "$dev failed"
        echo "$dev: $(python3 -c "print(f\"{$(date +%s.%N) - $t0:.2f}\")") s"
    done
'

# ---------------------------------------------------------------- h. summary
say ""
say "=================================================================== summary"
$REPORT summary "$OUT" 2>&1 | tee -a "$LOG"
say ""
say "steps:"
for i in "${!STEP_NAMES[@]}"; do
    say "$(printf '  %-24s %8s s  %s' "${STEP_NAMES[$i]}" "${STEP_SECS[$i]}" "${STEP_STATUS[$i]}")"
done
say "total $(($(date +%s) - START)) s; results in $OUT"
exit 0
