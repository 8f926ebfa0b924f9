#!/usr/bin/env bash
# System packages the test suite needs: an OpenCL runtime on the CPU (Debian's PoCL with the
# ICD loader), so the OpenCL device's kernels and models run without a GPU. Installs only what
# is missing; needs root (or sudo). Prints what it did.
set -euo pipefail
need=()
# The ICD loader (libOpenCL.so.1) and at least one platform (PoCL registers pocl.icd).
if ! ldconfig -p 2>/dev/null | grep -q 'libOpenCL\.so\.1'; then need+=(ocl-icd-libopencl1); fi
if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then need+=(pocl-opencl-icd); fi
if ! command -v clinfo >/dev/null 2>&1; then need+=(clinfo); fi
if [ ${#need[@]} -eq 0 ]; then
    echo "system deps: OpenCL runtime present ($(ls /etc/OpenCL/vendors/ | tr '\n' ' '))"
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
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
clinfo -l || true
