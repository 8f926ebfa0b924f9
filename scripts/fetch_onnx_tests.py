#!/usr/bin/env python3
"""Fetch the ONNX backend node tests (onnx 1.16.2) from the Python package registry.

The `onnx==1.16.2` wheel ships `onnx/backend/test/data/node/`: 1,282 cases, each a folder with
`model.onnx` and `test_data_set_0/{input,output}_N.pb`. This script downloads the wheel with
`pip download --no-deps` (it never installs or imports it), checks its sha256, and extracts
only that folder into the cache directory, atomically (a temporary folder renamed into
place). An existing, complete extraction is left alone.

Usage: fetch_onnx_tests.py [--dest DIR]   (prints the folder of the cases on stdout)
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

VERSION = "1.16.2"
WHEEL = "onnx-1.16.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
SHA256 = "7b98aa9733bd4b781eb931d33b4078ff2837e7d68062460726d6dd011f332bd4"
PREFIX = "onnx/backend/test/data/node/"
CASES = 1282


def default_dest() -> str:
    base = os.environ.get("TG_CACHE_DIR")
    if base:
        return os.path.join(base, "onnx")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tensor-graphs", "onnx")


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def log(msg: str) -> None:
    print(f"[fetch_onnx_tests] {msg}", file=sys.stderr, flush=True)


def complete(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, ".complete"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=default_dest(), help="cache directory (default: %(default)s)")
    args = ap.parse_args()
    target = os.path.join(args.dest, f"node-tests-{VERSION}")
    if complete(target):
        print(target)
        return 0
    os.makedirs(args.dest, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tg-fetch-onnx-", dir=args.dest) as tmp:
        log(f"downloading onnx=={VERSION} (the wheel only) with pip download --no-deps ...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--only-binary=:all:",
               "--python-version", "3.11", "--platform", "manylinux2014_x86_64", "-d", tmp, f"onnx=={VERSION}"]
        r = subprocess.run(cmd)
        if r.returncode != 0:
            log(f"pip download failed with exit code {r.returncode}")
            return 1
        wheel = os.path.join(tmp, WHEEL)
        if not os.path.isfile(wheel):
            log(f"expected {WHEEL}, got {os.listdir(tmp)}")
            return 1
        digest = sha256_of(wheel)
        if digest != SHA256:
            log(f"sha256 mismatch: got {digest}, expected {SHA256}")
            return 1
        out = os.path.join(tmp, "node")
        n = 0
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if not name.startswith(PREFIX) or name.endswith("/"):
                    continue
                rel = name[len(PREFIX):]
                if ".." in rel.split("/"):
                    log(f"refusing a path that leaves the folder: {name}")
                    return 1
                dst = os.path.join(out, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with z.open(name) as src, open(dst, "wb") as f:
                    shutil.copyfileobj(src, f)
                n += rel.endswith("/model.onnx")
        if n != CASES:
            log(f"expected {CASES} cases, found {n}")
            return 1
        open(os.path.join(out, ".complete"), "w").write(f"onnx {VERSION}: {n} cases\n")
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(out, target)
    log(f"{CASES} node tests ready: {target}")
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
