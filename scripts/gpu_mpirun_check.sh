#!/usr/bin/env bash
# The NCCL backend in the trainer on a GPU machine: train_mrpc under `mpirun -np N` (default 1; N GPUs), the
# xlarge default in bf16, ZeRO stages 0-3, 40 steps each with the step losses logged every step, then each
# stage's curve against stage 0's (the issue's "stages 0-3 reproduce stage 0's bf16 curve"). Results in $OUT
# (or ./gpu-mpirun-out): the logs, metrics, and one summary line per stage on stdout.
#
#   scripts/gpu_mpirun_check.sh            # mpirun -np 1
#   NP=2 scripts/gpu_mpirun_check.sh       # one process per GPU on a 2-GPU machine
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-mpirun-out}
np=${NP:-1}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target train_mrpc -- -k 0 >"$out/build.log" 2>&1 ||
  { grep -B2 -A8 "error" "$out/build.log" | head -40; exit 1; }
for stage in 0 1 2 3; do
  echo "{\"zero_optimization\": {\"stage\": $stage}, \"bf16\": {\"enabled\": true}}" >"$out/z$stage.json"
  rm -rf "$out/run$stage"
  timeout 300 mpirun --allow-run-as-root -np "$np" -x NCCL_NVLS_ENABLE build-gpu/bin/train_mrpc \
    --deepspeed_config "$out/z$stage.json" --max_train_steps 40 --log_every 1 --per_device_train_batch_size 16 \
    --output_dir "$out/run$stage" >"$out/train_z$stage.txt" 2>&1
  echo "stage $stage exit $?: $(grep -E "^ZeRO stage|^done" "$out/train_z$stage.txt" | tr '\n' ' ')"
  rm -f "$out/run$stage/model.h5" "$out/run$stage"/step_*.h5
  rm -rf "$out/run$stage"/step_*.zero
done
python3 - "$out" <<'PY'
import json, sys
def losses(stage):
    path = f"{sys.argv[1]}/run{stage}/metrics.jsonl"
    try:
        lines = [json.loads(l) for l in open(path) if l.strip()]
        return [e["train/loss"] for e in lines if e.get("type") == "step"]
    except OSError:
        return []
ref = losses(0)
for stage in 1, 2, 3:
    cur = losses(stage)
    if not ref or len(cur) != len(ref):
        print(f"stage {stage}: {len(cur)} logged steps vs stage 0's {len(ref)}"); continue
    worst = max(abs(a - b) / abs(b) for a, b in zip(cur, ref))
    print(f"stage {stage} vs stage 0: {len(cur)} steps, largest relative loss difference {worst:.2e}")
PY
