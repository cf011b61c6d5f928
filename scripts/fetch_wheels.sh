#!/usr/bin/env bash
# The Python wheels the GPU benchmarks need that the GPU machine lacks, into .whl/ (git-ignored; name it in
# the device call's carry): disentangled-flash (HF DeBERTa attention as fused Triton kernels, pure Python),
# the lowest-memory PyTorch column of scripts/bench_vs_torch.py (--impls df,compile-df). Needs PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download --quiet --no-deps --dest .whl "disentangled-flash==1.1.1"
ls -l .whl
