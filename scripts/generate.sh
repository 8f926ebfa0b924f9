#!/usr/bin/env bash
# The main job: Gemma 3 270M greedy generation on the default model (fetched if missing).
# Extra arguments are passed to `tg generate` (e.g. --prompt "..." -n 64 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then set -- --prompt "The capital of France is" -n 32; fi
cargo run --release --locked -q -p tg-cli -- generate "$@"
