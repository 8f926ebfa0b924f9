#!/usr/bin/env bash
# The whole test suite, as CI runs it: fetch the default model if it is not cached yet
# (the model tests need it), then every test of every crate in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
TG_MODEL="$(python3 scripts/fetch_model.py)"
export TG_MODEL
echo "model: $TG_MODEL"
cargo test --workspace --release --locked "$@"
