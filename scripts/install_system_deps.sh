#!/usr/bin/env bash
# System packages the test suite needs:
# - an OpenCL runtime on the CPU (Debian's PoCL with the ICD loader and clinfo), so the OpenCL
#   device's kernels and models run without a GPU;
# - Debian's Chromium, headless, to render the HTML plan reports in a real browser;
# - Debian's espeak-ng, to speak the test audio of the audio models (wake word, rates).
# Installs only what is missing (judged by what works: a loader that clinfo finds platforms
# through; a chromium that prints its version); needs root or sudo. Prints what it did.
set -euo pipefail
platforms() { if command -v clinfo >/dev/null 2>&1; then clinfo -l 2>/dev/null | grep -c '^Platform' || true; else echo 0; fi; }
browser() { command -v chromium >/dev/null 2>&1 && chromium --headless --no-sandbox --version >/dev/null 2>&1; }
need=()
if [ "$(platforms)" = "0" ]; then need+=(ocl-icd-libopencl1 pocl-opencl-icd clinfo); fi
if ! browser; then need+=(chromium); fi
if ! command -v espeak-ng >/dev/null 2>&1; then need+=(espeak-ng); fi
if [ "${#need[@]}" -eq 0 ]; then
    echo "system deps: OpenCL present: $(clinfo -l 2>/dev/null | tr '\n' ' '); $(chromium --headless --no-sandbox --version 2>/dev/null); $(espeak-ng --version)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "system deps: missing ${need[*]} and not root: install them (apt-get install ${need[*]})" >&2
        exit 1
    fi
fi
echo "system deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --reinstall: a removed (not purged) package leaves its .icd file pointing at nothing.
$SUDO apt-get install -y -qq --no-install-recommends --reinstall "${need[@]}" >/dev/null
if [ "$(platforms)" = "0" ]; then
    echo "system deps: still no OpenCL platform after installing ${need[*]}" >&2
    exit 1
fi
if ! browser; then
    echo "system deps: chromium does not run after installing it" >&2
    exit 1
fi
if ! command -v espeak-ng >/dev/null 2>&1; then
    echo "system deps: espeak-ng missing after installing it" >&2
    exit 1
fi
echo "system deps: OpenCL present: $(clinfo -l 2>/dev/null | tr '\n' ' '); $(chromium --headless --no-sandbox --version 2>/dev/null); $(espeak-ng --version)"
