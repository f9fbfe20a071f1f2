#!/bin/sh
# Regenerates kernels.ptx from kernels.cu with nvcc. Needs the CUDA toolkit,
# so it is not run by go generate; run it on a GPU machine and commit the
# result:
#
#   internal/kernels/gen-ptx.sh            # writes internal/kernels/kernels.ptx
#   internal/kernels/gen-ptx.sh out.ptx    # writes elsewhere (to compare)
#
# PTX for a low virtual architecture runs on every later GPU: the driver
# JIT-compiles it for the device at module load. ARCH overrides the target
# (default compute_75: CUDA 13.0 nvcc rejects compute_70, "Unsupported gpu
# architecture"; the hand-written kernels.ptx targets sm_70).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/kernels.ptx"}
arch=${ARCH:-compute_75}
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
nvcc -ptx -arch="$arch" -O3 -o "$tmp" "$here/kernels.cu"
mv "$tmp" "$out"
echo "wrote $out ($arch)"
