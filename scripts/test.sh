#!/usr/bin/env bash
# The whole test suite, as CI runs it: install the system packages it needs (PoCL, the
# OpenCL runtime on the CPU; Chromium, headless, for the plan reports), fetch NVRTC and ptxas (the CUDA kernels are
# compiled without a GPU), fetch the models if they are not cached yet (the
# model tests need them: Gemma 3 270M GGUF and EmbeddingGemma-300M) and the ONNX node tests, point the data tests
# at the shared data, then every test of every crate in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
# An OpenCL runtime on the CPU (PoCL) for the OpenCL device's tests; Chromium for the report's.
bash scripts/install_system_deps.sh
TG_MODEL="$(python3 scripts/fetch_model.py)"
export TG_MODEL
TG_QWEN_MODEL="$(python3 scripts/fetch_model.py --model qwen2.5-coder-0.5b)"
export TG_QWEN_MODEL
TG_EMBED_MODEL="$(python3 scripts/fetch_embedding_model.py)"
export TG_EMBED_MODEL
# The ONNX backend node tests (from the onnx 1.16.2 wheel, extracted, never installed).
TG_ONNX_TESTS="$(python3 scripts/fetch_onnx_tests.py)"
export TG_ONNX_TESTS
# The ONNX target models (terrain UNet, openwakeword's audio models), from their wheels.
TG_ONNX_MODELS="$(python3 scripts/fetch_onnx_models.py)"
export TG_ONNX_MODELS
# NVRTC and ptxas (CUDA 12.9 wheels, extracted, never installed): exports TG_NVRTC and TG_PTXAS,
# so the CUDA tests compile every kernel without a GPU (under CI they fail without them).
CUDA_TOOLS="$(python3 scripts/fetch_cuda_tools.py)"
eval "$CUDA_TOOLS"
# The shared data sets (extraction-gym, MiniMalloc) lie next to the repository in
# ../shared/data; the data tests fail under CI when they are missing (tests/support/data.rs).
TG_DATA_DIR="${TG_DATA_DIR:-$(cd .. && pwd)/shared/data}"
export TG_DATA_DIR
echo "model: $TG_MODEL"
echo "embedding model: $TG_EMBED_MODEL"
echo "onnx node tests: $TG_ONNX_TESTS"
echo "onnx models: $TG_ONNX_MODELS"
echo "nvrtc: $TG_NVRTC; ptxas: $TG_PTXAS"
echo "data: $TG_DATA_DIR"
cargo test --workspace --release --locked "$@"
bash scripts/test_python.sh   # the Python package: wheel in target/py-venv, pytest suite (docs/python.md)
