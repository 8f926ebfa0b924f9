#!/usr/bin/env python3
"""Fetch NVRTC and ptxas (CUDA 12.9) from the Python package registry, for the CUDA device.

The CUDA device (crates/tg-cuda) compiles its kernels at run time with NVRTC, and its
compile report (`tg devices --compile cuda`, the tests) assembles them with ptxas; neither
needs a GPU or a CUDA install. NVIDIA publishes both as wheels: `nvidia-cuda-nvrtc-cu12`
(libnvrtc.so.12 and its builtins library) and `nvidia-cuda-nvcc-cu12` (ptxas). This script
downloads the two wheels, at matching pinned versions, with `pip download --no-deps` (it never
installs or imports them), extracts only the files needed into
`~/.cache/tensor-graphs/cuda-tools/<version>/` (override the base with `TG_CACHE_DIR`),
checks that they are there and that ptxas runs, and prints the shell lines to use them:

    export TG_NVRTC=<...>/nvidia/cuda_nvrtc/lib/libnvrtc.so.12
    export TG_PTXAS=<...>/nvidia/cuda_nvcc/bin/ptxas

A complete folder is left alone (nothing is downloaded); a partial one is rebuilt next to it
and swapped in atomically.

Usage: eval "$(python3 scripts/fetch_cuda_tools.py)"    [--dest DIR]
"""
import argparse
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

VERSION = "12.9.86"
PACKAGES = [f"nvidia-cuda-nvrtc-cu12=={VERSION}", f"nvidia-cuda-nvcc-cu12=={VERSION}"]
NVRTC = "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
PTXAS = "nvidia/cuda_nvcc/bin/ptxas"
# What is extracted: NVRTC, its builtins (it loads them from its own folder), and ptxas.
WANTED = [NVRTC, "nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.9", PTXAS]
EXECUTABLE = [PTXAS]
COMPLETE = ".complete"


def default_dest() -> str:
    base = os.environ.get("TG_CACHE_DIR")
    if base:
        return os.path.join(base, "cuda-tools")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tensor-graphs", "cuda-tools")


def log(msg: str) -> None:
    print(f"[fetch_cuda_tools] {msg}", file=sys.stderr, flush=True)


def complete(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, COMPLETE)) and all(os.path.isfile(os.path.join(folder, f)) for f in WANTED)


def ptxas_release(path: str) -> str:
    r = subprocess.run([path, "--version"], capture_output=True, text=True)
    if r.returncode != 0 or "release" not in r.stdout:
        raise RuntimeError(f"{path} --version failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r.stdout.split("release", 1)[1].split(",", 1)[0].strip()


def exports(folder: str) -> str:
    return f"export TG_NVRTC={shlex.quote(os.path.join(folder, NVRTC))}\nexport TG_PTXAS={shlex.quote(os.path.join(folder, PTXAS))}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=default_dest(), help="tools folder, one subfolder per version (default: %(default)s)")
    args = ap.parse_args()
    folder = os.path.join(args.dest, VERSION)
    if complete(folder):
        print(exports(folder))
        return 0
    os.makedirs(args.dest, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tg-fetch-cuda-") as tmp:
        log(f"downloading {', '.join(PACKAGES)} with pip download --no-deps ...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", tmp] + PACKAGES
        r = subprocess.run(cmd, stdout=sys.stderr)
        if r.returncode != 0:
            log(f"pip download failed with exit code {r.returncode} (the wheels exist for Linux x86-64 and aarch64)")
            return 1
        staging = tempfile.mkdtemp(prefix=f".{VERSION}.partial-", dir=args.dest)
        try:
            found = set()
            for w in sorted(f for f in os.listdir(tmp) if f.endswith(".whl")):
                with zipfile.ZipFile(os.path.join(tmp, w)) as z:
                    for name in z.namelist():
                        if name in WANTED:
                            z.extract(name, staging)
                            found.add(name)
            missing = [f for f in WANTED if f not in found]
            if missing:
                log(f"the wheels lack {missing}")
                return 1
            for f in EXECUTABLE:
                p = os.path.join(staging, f)
                os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            release = ptxas_release(os.path.join(staging, PTXAS))
            if not VERSION.startswith(release + "."):
                log(f"ptxas says release {release}, expected {VERSION}")
                return 1
            with open(os.path.join(staging, COMPLETE), "w") as f:
                f.write(VERSION + "\n")
            os.chmod(staging, 0o755)  # mkdtemp makes it private
            if os.path.exists(folder):
                old = folder + f".old-{os.getpid()}"
                os.replace(folder, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not complete(folder):
        log(f"{folder} is incomplete after extraction")
        return 1
    log(f"CUDA tools ready: {folder}")
    print(exports(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
