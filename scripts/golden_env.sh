#!/usr/bin/env bash
# The Python environment that writes the HF golden fixtures (tools/golden/*.py): a git-ignored .venv-golden
# with torch, transformers, h5py, safetensors and sentencepiece. No GPU needed: the CPU-only torch wheel where
# its index is reachable, else PyPI's (larger: CUDA libraries it never loads here). Safe to run twice.
#   scripts/golden_env.sh && .venv-golden/bin/python tools/golden/make_model_fixtures.py --only long
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .venv-golden/bin/python ]] || python3 -m venv .venv-golden
.venv-golden/bin/python -m pip install --quiet --upgrade pip
.venv-golden/bin/python -m pip install --quiet --retries 1 --timeout 15 torch \
  --index-url https://download.pytorch.org/whl/cpu ||
  .venv-golden/bin/python -m pip install --quiet torch
.venv-golden/bin/python -m pip install --quiet transformers h5py safetensors sentencepiece numpy
.venv-golden/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
