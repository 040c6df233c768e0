#!/usr/bin/env bash
# Print the CUPTI record layouts zym decodes (sizes and field offsets), from CUPTI's own headers:
#   generate.sh CUPTI_INCLUDE CUDA_INCLUDE KERNEL_STRUCT
# e.g. for layouts.py's tables (2026-11-29):
#   13.0: nvidia-cuda-cupti 13.0.85 (nvidia/cu13/include), CUpti_ActivityKernel10
#   12.8: nvidia-cuda-cupti-cu12 12.8.90 (nvidia/cuda_cupti/include), CUpti_ActivityKernel9
#   cuda.h from nvidia-cuda-runtime-cu12 12.8.90; stub/ stands in for nvcc's crt/host_defines.h.
set -euo pipefail
here=$(dirname "$0")
out=$(mktemp)
gcc -DKERNEL="$3" -I"$here/stub" -I"$1" -I"$2" "$here/layouts.c" -o "$out"
"$out"
rm -f "$out"
