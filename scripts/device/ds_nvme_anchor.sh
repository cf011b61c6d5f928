#!/usr/bin/env bash
# DeepSpeed's NVMe offload on the GPU machine (issue 15's anchor for the disk tier): installs the DeepSpeed
# wheels of .ds/ (as .ds/run.sh does), points the async_io op's JIT build at the libaio that
# scripts/device_deps.sh carried in .device-deps/libaio (the machine has no libaio-dev), builds it and runs
# ZeRO-2 and ZeRO-3 with offload_optimizer nvme on DeBERTa-v2-xlarge, batch 40 (ds_nvme_anchor.py beside
# this file says what each phase measures). About 5 minutes; each phase fails soft, with its reason in the JSON.
# The disk task runs it: scripts/device/run.sh disk --deepspeed (carry [".ds", ".device-deps"]).
#
#   scripts/device/ds_nvme_anchor.sh [ds_nvme_anchor.py arguments]
#   ZT_NVME_DIR=/tmp/zt-nvme (the swap folder is its deepspeed/), ZT_DS_NVME_BUDGET_S=270 (soft), ZT_DS_DIR=.ds
# Results: $OUT/ds_nvme_anchor.json (or ./ds-nvme-out/), ds_nvme_anchor.log and the builds' logs beside it.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-$PWD/ds-nvme-out}
ds=${ZT_DS_DIR:-.ds}
libaio=$PWD/.device-deps/libaio
mkdir -p "$out"
fail() {  # the reason, as the JSON a reader of $out expects
  echo "ds_nvme_anchor: $1" >&2
  python3 -c 'import json, sys; json.dump({"errors": {"setup": sys.argv[1]}}, open(sys.argv[2], "w"))' \
    "$1" "$out/ds_nvme_anchor.json"
  exit 1
}
[[ -d $ds/wheels ]] || fail "$ds/wheels missing: copy ../shared/bench/deepspeed to .ds and carry it"
[[ -f $libaio/lib/libaio.a && -f $libaio/include/libaio.h && -f $libaio/libaio.map ]] ||
  fail "$libaio incomplete: run scripts/device_deps.sh here and carry .device-deps"
site=/tmp/ds_site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$ds"/wheels/*.whl \
  >"$out/pip.log" 2>&1 || fail "pip install of $ds/wheels failed: $(tail -c 600 "$out/pip.log")"
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import pydantic" 2>/dev/null ||
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$ds"/wheels/extra/*.whl \
    >>"$out/pip.log" 2>&1 || fail "pip install of $ds/wheels/extra failed: $(tail -c 600 "$out/pip.log")"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_EXTENSIONS_DIR=/tmp/tx DS_ACCELERATOR=cuda TORCH_CUDA_ARCH_LIST=9.0 DS_SKIP_CUDA_CHECK=1
# PYTHONFAULTHANDLER: a crash inside DeepSpeed (a SIGSEGV at the first step, sessions 3-5) prints every thread's
# Python stack into the log, so the report can say where it died.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# DeepSpeed's libaio probe (AsyncIOBuilder.is_compatible: compile and link a call of io_submit with -laio) reads
# CFLAGS and LDFLAGS; the op's own build gets the paths from ds_nvme_anchor.py.
export CFLAGS="-I$libaio/include${CFLAGS:+ $CFLAGS}" LDFLAGS="-L$libaio/lib${LDFLAGS:+ $LDFLAGS}"
mkdir -p /tmp/tx
find /tmp/tx -name lock -delete 2>/dev/null # a killed earlier run's JIT lock would hang the build
command -v nvcc >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
budget=${ZT_DS_NVME_BUDGET_S:-270}
timeout -k 10 $((budget + 60)) python3 scripts/device/ds_nvme_anchor.py --out "$out" --libaio "$libaio" \
  --nvme-dir "${ZT_NVME_DIR:-/tmp/zt-nvme}/deepspeed" --budget-s "$budget" "$@" 2>&1 | tee "$out/ds_nvme_anchor.log"
rc=${PIPESTATUS[0]}
rm -rf "${ZT_NVME_DIR:-/tmp/zt-nvme}/deepspeed" # a run cut by the timeout leaves its swap files
exit "$rc"
