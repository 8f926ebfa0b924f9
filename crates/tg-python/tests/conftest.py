"""Shared fixtures of the tensor_graphs test suite.

Environment:
- ``TG_SEED``: base seed of every random test (default fixed; printed in the report header
  and in every failure message).
- ``TG_MODEL`` / ``TG_EMBED_MODEL``: the Gemma 3 GGUF file and the EmbeddingGemma folder
  (default: ``~/.cache/tensor-graphs/models/...``, fetched by ``scripts/fetch_model.py`` and
  ``scripts/fetch_embedding_model.py``). Missing models fail the model tests, unless
  ``TG_ALLOW_MISSING_MODEL=1``, which skips them with the reason.
- ``TG_CLI``: the ``tg`` binary the model tests compare with (default
  ``<repo>/target/release/tg``, or ``$CARGO_TARGET_DIR/release/tg``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
BASE_SEED = int(os.environ.get("TG_SEED", "20250601"))


def pytest_report_header(config):  # noqa: D103
    return f"tensor_graphs random tests: base seed {BASE_SEED} (set TG_SEED to change)"


def make_rng(what: str, offset: int = 0) -> tuple[np.random.Generator, str]:
    """A generator seeded from TG_SEED + offset, and a label naming the seed for messages."""
    seed = BASE_SEED + offset
    return np.random.default_rng(seed), f"{what} (seed TG_SEED={BASE_SEED} + {offset} = {seed})"


_OPTIONAL: list[str] = []


def optional_stages() -> list[str]:
    """The compiler stages that may be switched off, found by trying each of
    ``tensor_graphs.STAGES`` (a required stage raises OptionsError)."""
    import tensor_graphs as tg

    if not _OPTIONAL:
        g = tg.Graph()
        g.output("y", g.input("x", (1,)) + 1.0)
        for s in tg.STAGES:
            try:
                tg.compile(g, disable=[s])
                _OPTIONAL.append(s)
            except tg.OptionsError:
                pass
    return list(_OPTIONAL)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A per-test generator; the seed is printed (shown for failing tests)."""
    offset = sum(ord(c) for c in request.node.name)
    g, label = make_rng(request.node.name, offset)
    print(label)
    return g


def _cache_dir() -> Path:
    if os.environ.get("TG_CACHE_DIR"):
        return Path(os.environ["TG_CACHE_DIR"]) / "models"
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "tensor-graphs" / "models"


def _model_path(env: str, default: str, folder: bool, script: str) -> Path:
    p = Path(os.environ[env]) if os.environ.get(env) else _cache_dir() / default
    ok = p.is_dir() if folder else p.is_file()
    if not ok:
        msg = f"model not found at {p}: run scripts/{script} or set {env}"
        if os.environ.get("TG_ALLOW_MISSING_MODEL") == "1":
            pytest.skip(f"SKIPPED (TG_ALLOW_MISSING_MODEL=1): {msg}")
        pytest.fail(msg + " (or set TG_ALLOW_MISSING_MODEL=1 to skip the model tests)")
    return p


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """The Gemma 3 GGUF file."""
    return _model_path("TG_MODEL", "gemma-3-270m-q4_k_m.gguf", False, "fetch_model.py")


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    """The Qwen2.5-Coder-0.5B-Instruct GGUF file (architecture qwen2, byte-level BPE, a chat template)."""
    return _model_path("TG_QWEN_MODEL", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", False, "fetch_model.py --model qwen2.5-coder-0.5b")


@pytest.fixture(scope="session")
def embed_path() -> Path:
    """The EmbeddingGemma folder."""
    return _model_path("TG_EMBED_MODEL", "embeddinggemma-300m", True, "fetch_embedding_model.py")


def _onnx_folder(env: str, folder: str, what: str, script: str) -> Path:
    """``$env``, else ``folder`` in the cache's ``onnx/`` (where ``scripts/<script>`` extracts
    it), when complete; a failure otherwise (a skip with TG_ALLOW_MISSING_MODEL=1)."""
    p = Path(os.environ[env]) if os.environ.get(env) else _cache_dir().parent / "onnx" / folder
    if not (p / ".complete").is_file():
        msg = f"{what} not found at {p}: run scripts/{script} or set {env}"
        if os.environ.get("TG_ALLOW_MISSING_MODEL") == "1":
            pytest.skip(f"SKIPPED (TG_ALLOW_MISSING_MODEL=1): {msg}")
        pytest.fail(msg)
    return p


@pytest.fixture(scope="session")
def onnx_models() -> Path:
    """The ONNX target models: the terrain UNet and openwakeword's audio models
    (scripts/fetch_onnx_models.py)."""
    return _onnx_folder("TG_ONNX_MODELS", "models-1", "ONNX models", "fetch_onnx_models.py")


@pytest.fixture(scope="session")
def onnx_tests() -> Path:
    """The ONNX backend node tests of onnx 1.16.2 (scripts/fetch_onnx_tests.py)."""
    return _onnx_folder("TG_ONNX_TESTS", "node-tests-1.16.2", "ONNX node tests", "fetch_onnx_tests.py")


@pytest.fixture(scope="session")
def tg_cli() -> Path:
    """The `tg` binary."""
    if os.environ.get("TG_CLI"):
        p = Path(os.environ["TG_CLI"])
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
        p = target / "release" / "tg"
    if not p.is_file():
        pytest.fail(f"tg CLI not found at {p}: build it with `cargo build --release -p tg-cli` or set TG_CLI")
    return p


@pytest.fixture(scope="session")
def gemma(gemma_path):
    """Gemma 3, loaded once per session."""
    import tensor_graphs as tg

    return tg.Gemma3(gemma_path)


@pytest.fixture(scope="session")
def embedder(embed_path):
    """EmbeddingGemma, loaded once per session."""
    import tensor_graphs as tg

    return tg.EmbeddingGemma(embed_path)
