#!/usr/bin/env bash
# DeepSpeed's anchor for the plan goals (ds_plan_anchor.py beside this file says what it measures): installs the
# wheels of .ds/ (scripts/fetch_deepspeed.sh) into /tmp/ds_site as .ds/run.sh does, then runs it. The plan task
# runs it (carry [".ds", ".device-deps"]).
#
#   scripts/device/ds_plan_anchor.sh --out DIR [ds_plan_anchor.py arguments]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ds=${ZT_DS_DIR:-.ds}
site=/tmp/ds_site
[[ -d $ds/wheels ]] || { echo "ds_plan_anchor: $ds/wheels missing: scripts/fetch_deepspeed.sh, carry .ds" >&2; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$ds"/wheels/*.whl \
  >/tmp/ds_plan_pip.log 2>&1 || { echo "ds_plan_anchor: pip install failed: $(tail -c 400 /tmp/ds_plan_pip.log)" >&2; exit 1; }
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import pydantic" 2>/dev/null ||
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$ds"/wheels/extra/*.whl \
    >>/tmp/ds_plan_pip.log 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_EXTENSIONS_DIR=/tmp/tx DS_ACCELERATOR=${DS_ACCELERATOR:-cuda} TORCH_CUDA_ARCH_LIST=9.0 DS_SKIP_CUDA_CHECK=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p /tmp/tx
find /tmp/tx -name lock -delete 2>/dev/null  # a killed earlier run's JIT lock would hang the build
command -v nvcc >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
exec python3 scripts/device/ds_plan_anchor.py "$@"
