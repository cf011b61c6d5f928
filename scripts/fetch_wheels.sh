#!/usr/bin/env bash
# The Python wheels the GPU benchmarks need that the GPU machine lacks, into .whl/ (git-ignored; name it in
# the device call's carry): disentangled-flash (HF DeBERTa attention as fused Triton kernels, pure Python),
# the lowest-memory PyTorch column of scripts/bench_vs_torch.py (--impls df,compile-df); FlashDeBERTa
# (knowledgator's flash-style disentangled attention in Triton, its own DeBERTa-v2 model classes) and einops,
# which it imports, for --impls fdb and scripts/bench_attention_vs_df.py's fdb rows. Needs PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download --quiet --no-deps --dest .whl "disentangled-flash==1.1.1" "flashdeberta==0.0.8" einops
ls -l .whl
