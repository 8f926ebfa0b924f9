#!/usr/bin/env bash
# The Python package's test suite: builds the `tensor_graphs` wheel and runs its pytest
# suite in a fresh virtual environment.
#
#   scripts/test_python.sh [pytest args...]
#
# 1. creates (or reuses) a virtual environment in target/py-venv and installs maturin,
#    numpy, pytest, ortools and onnxruntime (the reference for the ONNX models) into it from PyPI (nothing outside target/ is touched);
# 2. builds the wheel with `maturin build --release` and installs it into the venv, the
#    way a user would (`pip install tensor_graphs-*.whl`);
# 3. builds the `tg` binary (the model tests compare Python with it);
# 4. runs pytest on crates/tg-python/tests and prints the test counts.
#
# Models: $TG_MODEL / $TG_QWEN_MODEL / $TG_EMBED_MODEL, else fetched into the cache like scripts/test.sh does
# (with TG_ALLOW_MISSING_MODEL=1, missing models skip the model tests instead).
# pytest's exit status 5 ("no tests collected") is a failure here, never a silent pass.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-target}"
VENV="target/py-venv"
WHEELS="target/py-wheels"
start=$(date +%s)

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[python] creating $VENV"
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.16,<2" "numpy>=1.21" "pytest>=7" "ortools>=9.15,<10" "onnxruntime==1.20.1"

if [[ -z "${TG_MODEL:-}" && "${TG_ALLOW_MISSING_MODEL:-}" != "1" ]]; then
    TG_MODEL="$("$PY" scripts/fetch_model.py)"
    export TG_MODEL
fi
if [[ -z "${TG_QWEN_MODEL:-}" && "${TG_ALLOW_MISSING_MODEL:-}" != "1" ]]; then
    TG_QWEN_MODEL="$("$PY" scripts/fetch_model.py --model qwen2.5-coder-0.5b)"
    export TG_QWEN_MODEL
fi
if [[ -z "${TG_EMBED_MODEL:-}" && "${TG_ALLOW_MISSING_MODEL:-}" != "1" ]]; then
    TG_EMBED_MODEL="$("$PY" scripts/fetch_embedding_model.py)"
    export TG_EMBED_MODEL
fi

if [[ -z "${TG_ONNX_MODELS:-}" && "${TG_ALLOW_MISSING_MODEL:-}" != "1" ]]; then
    TG_ONNX_MODELS="$("$PY" scripts/fetch_onnx_models.py)"
    export TG_ONNX_MODELS
fi

echo "[python] building the wheel (maturin build --release)"
rm -rf "$WHEELS"
"$VENV/bin/maturin" build --release --locked -q -m crates/tg-python/Cargo.toml -i "$VENV/bin/python" --out "$WHEELS"
wheel=$(ls "$WHEELS"/tensor_graphs-*.whl)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
echo "[python] installed $(basename "$wheel")"

echo "[python] building the tg binary (for the CLI comparisons)"
cargo build --release --locked -q -p tg-cli
TG_CLI="${TG_CLI:-$(cd "$TARGET" && pwd)/release/tg}"
export TG_CLI

junit="target/py-junit.xml"
rm -f "$junit"
set +e
# Run from the tests folder so `import tensor_graphs` finds the installed wheel, not a
# source tree.
(cd crates/tg-python/tests && "../../../$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider --junitxml="../../../$junit" "$@")
status=$?
set -e

if [[ $status -eq 5 ]]; then
    echo "[python] FAILED: pytest collected no tests (exit status 5): the suite in crates/tg-python/tests is missing or broken" >&2
    exit 1
fi
if [[ -f "$junit" ]]; then
    "$VENV/bin/python" - "$junit" <<'EOF'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
print(f"[python] {n['tests']} tests: {passed} passed, {n['failures']} failed, {n['errors']} errors, {n['skipped']} skipped")
EOF
fi
echo "[python] done in $(( $(date +%s) - start )) s (pytest exit status $status)"
exit $status
