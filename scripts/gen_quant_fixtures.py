#!/usr/bin/env python3
"""Generate the fixtures that pin tg-quant's dequantizers to gguf-py, bit for bit.

Outputs (under tests/fixtures/quant/):

* ``model_dequant_sha256.json`` -- for every tensor of the model file, the sha256 of
  gguf-py's dequantized output written as little-endian f32, plus type, dims and the
  gguf package version.  Skipped when the model file is absent (unless --require-model).
* ``random_<TYPE>.bin`` / ``random_<TYPE>.f32`` -- seeded random blocks of each format
  and gguf-py's dequantization of them (little-endian f32).  ``random_manifest.json``
  lists type, element count, seed and the sha256 of both files.

Random blocks are fully random bytes, except that the f16 scale fields are patched to
random *finite* f16 bit patterns (all exponents but 31: zeros, subnormals, negatives and
the largest values all occur), so the products are finite and NaN payload propagation
(which is not part of the contract) does not enter the comparison.  The F16 and BF16
fixtures use every bit pattern, NaNs and infinities included.

Usage: python3 scripts/gen_quant_fixtures.py [--model PATH] [--require-model] [--skip-model]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "quant"
DEFAULT_MODEL = Path.home() / ".cache" / "tensor-graphs" / "models" / "gemma-3-270m-q4_k_m.gguf"

# (type, byte offsets of f16 scale fields inside one block)
RANDOM_TYPES = [
    (T.F16, []),
    (T.BF16, []),
    (T.Q4_0, [0]),
    (T.Q4_1, [0, 2]),
    (T.Q5_0, [0]),
    (T.Q5_1, [0, 2]),
    (T.Q8_0, [0]),
    (T.Q2_K, [80, 82]),
    (T.Q3_K, [108]),
    (T.Q4_K, [0, 2]),
    (T.Q5_K, [0, 2]),
    (T.Q6_K, [208]),
]
RANDOM_ELEMENTS = 8 * 256 + 0  # per type; a multiple of every block size
BASE_SEED = 0x7E57_0001


def gguf_version() -> str:
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:  # pragma: no cover
        return "unknown"


def le_f32_bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


def model_hashes(model: Path) -> None:
    r = gguf.GGUFReader(str(model))
    out = []
    for t in r.tensors:
        deq = dequantize(t.data, t.tensor_type)
        raw = le_f32_bytes(deq)
        n = int(np.prod([int(x) for x in t.shape]))
        assert len(raw) == 4 * n, (t.name, len(raw), n)
        out.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "dims": [int(x) for x in t.shape],
            "n_elements": n,
            "sha256": hashlib.sha256(raw).hexdigest(),
        })
        print(f"{t.name:40s} {t.tensor_type.name:5s} {n:>10d}", file=sys.stderr)
    doc = {
        "generator": "scripts/gen_quant_fixtures.py",
        "gguf_py_version": gguf_version(),
        "numpy_version": np.__version__,
        "model_file": model.name,
        "model_size": model.stat().st_size,
        "tensors": out,
    }
    (OUT / "model_dequant_sha256.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(out)} tensor hashes", file=sys.stderr)


def random_finite_f16_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    # exponent 31 (inf/NaN) -> replace exponent by a random finite one
    bad = (bits & 0x7C00) == 0x7C00
    bits[bad] = (bits[bad] & 0x83FF) | (rng.integers(0, 31, size=int(bad.sum()), dtype=np.uint16) << 10)
    return bits


def random_fixtures() -> None:
    manifest = {"gguf_py_version": gguf_version(), "numpy_version": np.__version__, "types": []}
    for i, (ty, scale_offsets) in enumerate(RANDOM_TYPES):
        seed = BASE_SEED + i
        rng = np.random.default_rng(seed)
        block_size, type_size = gguf.GGML_QUANT_SIZES[ty]
        n_blocks = RANDOM_ELEMENTS // block_size
        blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint16).astype(np.uint8)
        for off in scale_offsets:
            blocks[:, off:off + 2] = random_finite_f16_bits(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
        if scale_offsets:
            # a few hand-picked scales: +-0, smallest subnormal, largest finite, 1.0
            specials = np.array([0x0000, 0x8000, 0x0001, 0x7BFF, 0xFBFF, 0x3C00], dtype=np.uint16)
            for b, s in enumerate(specials[:n_blocks]):
                for off in scale_offsets:
                    blocks[b, off:off + 2] = np.array([s], dtype=np.uint16).view(np.uint8)
        raw = blocks.tobytes()
        if ty == T.F16:
            deq = dequantize(np.frombuffer(raw, dtype=np.uint8).view(np.float16), ty)
        else:
            deq = dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(1, -1), ty)
        out = le_f32_bytes(deq.reshape(-1))
        assert len(out) == 4 * RANDOM_ELEMENTS, (ty.name, len(out))
        (OUT / f"random_{ty.name}.bin").write_bytes(raw)
        (OUT / f"random_{ty.name}.f32").write_bytes(out)
        manifest["types"].append({
            "type": ty.name,
            "n_elements": RANDOM_ELEMENTS,
            "seed": seed,
            "bin_sha256": hashlib.sha256(raw).hexdigest(),
            "f32_sha256": hashlib.sha256(out).hexdigest(),
        })
        print(f"random {ty.name:5s} seed={seed:#x} blocks={n_blocks}", file=sys.stderr)
    (OUT / "random_manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path(os.environ.get("TG_MODEL", DEFAULT_MODEL)))
    ap.add_argument("--require-model", action="store_true")
    ap.add_argument("--skip-model", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    random_fixtures()
    if not args.skip_model:
        if args.model.exists():
            model_hashes(args.model)
        elif args.require_model:
            print(f"model not found: {args.model}", file=sys.stderr)
            return 1
        else:
            print(f"model not found, skipping model hashes: {args.model}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
