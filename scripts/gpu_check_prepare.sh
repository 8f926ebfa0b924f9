#!/usr/bin/env bash
# Prepares .gpu/ for scripts/gpu_check.sh. Run it HERE (a machine with the Rust toolchain), not on
# the GPU machine (which has none):
#
#     bash scripts/gpu_check_prepare.sh
#
# - .gpu/bin/tg.xz: `tg` (release), stripped, xz-compressed;
# - .gpu/bin/backend_ops-<hash>.xz: the backend-ops test binary
#   (`cargo test --release -p tg-devices --test backend_ops --no-run`), stripped, xz-compressed;
# - .gpu/ocl/: the OpenCL ICD loader (libOpenCL.so.1) as an unpacked Debian package, for a GPU
#   machine without one: `apt-get download ocl-icd-libopencl1` then `dpkg -x` of the .deb
#   (no installation; gpu_check.sh puts its library folder on LD_LIBRARY_PATH when the system has
#   no libOpenCL.so.1). Skipped with a warning when apt cannot fetch it.
# - `/.gpu/` is added to .git/info/exclude (not .gitignore): the folder stays out of git, and
#   the device tool copies it only when it is named in `carry` (carry: [".gpu"]).
#
# The binaries need glibc >= the newest GLIBC_x.y symbol they reference (printed below; the
# GPU machine's glibc is printed by gpu_check.sh's first step). Prints the sizes: the whole
# folder must stay under ~45 MB (what can travel with the tree).
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT_MB="${GPU_PREPARE_LIMIT_MB:-45}"

mkdir -p .gpu/bin
rm -f .gpu/bin/*

echo "== building tg (release)"
cargo build --release -p tg-cli
echo "== building the backend-ops test binary (release)"
exe="$(cargo test --release -p tg-devices --test backend_ops --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "backend_ops" and m.get("executable"):
        print(m["executable"])
')"
if [ -z "$exe" ] || [ ! -x "$exe" ]; then
    echo "error: no backend_ops test executable from cargo" >&2
    exit 1
fi

pack() { # SRC NAME
    strip -o ".gpu/bin/$2" "$1"
    xz -T0 -6 -f ".gpu/bin/$2"
    echo "  .gpu/bin/$2.xz: $(du -h ".gpu/bin/$2.xz" | cut -f1) (from $(du -h "$1" | cut -f1) unstripped)"
}
echo "== stripping and compressing"
pack target/release/tg tg
pack "$exe" "$(basename "$exe")"
for f in target/release/tg "$exe"; do
    echo "  $(basename "$f") needs glibc >= $(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)"
done

echo "== OpenCL ICD loader (ocl-icd-libopencl1, unpacked)"
rm -rf .gpu/ocl
tmp="$(mktemp -d)"
if (cd "$tmp" && apt-get download ocl-icd-libopencl1 >/dev/null 2>&1); then
    dpkg -x "$tmp"/ocl-icd-libopencl1_*.deb .gpu/ocl
    rm -rf .gpu/ocl/usr/share
    # The device tool copies plain files only (no links): keep the library as a plain
    # libOpenCL.so.1, the name programs load.
    for l in $(find .gpu/ocl -type l); do
        t="$(readlink -f "$l")"
        rm "$l"
        mv "$t" "$l"
    done
    echo "  $(find .gpu/ocl -name 'libOpenCL.so*' | sort | tr '\n' ' ')"
else
    echo "  warning: apt-get download ocl-icd-libopencl1 failed (run 'apt-get update' first?); the GPU machine's own loader will be needed for OpenCL"
fi
rm -rf "$tmp"

if [ -d .git ] && ! grep -qx '/.gpu/' .git/info/exclude 2>/dev/null; then
    mkdir -p .git/info
    echo '/.gpu/' >>.git/info/exclude
    echo "== added /.gpu/ to .git/info/exclude"
fi

echo "== .gpu/"
find .gpu -type f -printf '  %8s  %p\n' | sort -k2
bytes=$(du -sb .gpu | cut -f1)
mb=$(python3 -c "print(f'{$bytes / 1e6:.1f}')")
echo "total: $mb MB ($bytes bytes; limit ${LIMIT_MB} MB)"
if [ "$bytes" -gt $((LIMIT_MB * 1000 * 1000)) ]; then
    echo "error: .gpu/ is over ${LIMIT_MB} MB" >&2
    exit 1
fi
echo "run on the GPU machine (device tool: carry [\".gpu\"]): bash scripts/gpu_check.sh"
