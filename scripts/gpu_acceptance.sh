#!/usr/bin/env bash
# The H200 acceptance runs of the ZeRO, offload and disk-tier issues, in parts that each fit one device call
# (≤ 10 min) and run back to back on one warm machine (the build directory stays between calls):
#
#   scripts/gpu_acceptance.sh zero      # issue 12: GPU tests; train_mrpc under `mpirun -np 1` (NCCL), stages 0-3
#                                       # against stage 0's bf16 curve; world 2 stage 0 batch 56 under 24 GiB
#   scripts/gpu_acceptance.sh offload   # issue 18: DeepSpeed ZeRO-2 (+ offload) and its largest batch under 24 GiB
#                                       # (.ds/ds_anchor.py parts b,d), then ours in the same call: CPU AdamW
#                                       # against torch fused/foreach and DeepSpeedCPUAdam and the host bandwidth;
#                                       # ZeRO-2 steps with and without offload, batch 40/64/128, the delayed update
#   scripts/gpu_acceptance.sh limits    # issue 18: DeepSpeed ZeRO-3 + both offloads (part c) beside ours; our
#                                       # largest batch under 24 GiB per configuration; the delayed update's loss
#                                       # curve beside the exact one (train_mrpc)
#   scripts/gpu_acceptance.sh disk      # issue 15: scripts/gpu_disk_bench.sh, then the largest model under a
#                                       # 32 GiB host cap with and without the disk tier
#   scripts/gpu_acceptance.sh ds_nvme   # issue 15: DeepSpeed's NVMe offload (scripts/ds_nvme_anchor.sh)
#   scripts/gpu_acceptance.sh big       # issue 18: the largest DeBERTa-v2-shaped model with ZeRO-3 + both offloads
#   scripts/gpu_acceptance.sh attention # issue 16: ncu's full set on the attention kernels,
#                                       # the attention per layer against disentangled-flash's kernels
#                                       # (carry .whl), the bs-8 step's profile (and nsys where present)
#   scripts/gpu_acceptance.sh validate  # a branch's GPU code: model/attention/trainer/ZeRO GPU tests, zt_bench's
#                                       # attention, world-2 steps with and without --overlap_comm (where the
#                                       # tree has it), batch 128 under 24 GiB with offload, the delayed update
#
# DeepSpeed comes from .ds/ (a git-ignored copy of ../shared/bench/deepspeed, carried to the device), liburing
# from .device-deps/ (scripts/device_deps.sh; carry both: carry [".ds", ".device-deps"]). Results
# are written under /tmp/gpu-acceptance/<part>/ (a one-line-per-result log, acceptance.log, beside the raw
# outputs) and packed into $OUT/<part>.tgz after every result line: the device brings back only a few files,
# and a call cut at its time limit still returns what it measured.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
part=${1:?usage: scripts/gpu_acceptance.sh zero|offload|limits|disk|ds_nvme|big|validate|attention}
results=${OUT:-$PWD/gpu-acceptance-out}
work=/tmp/gpu-acceptance
out=$work/$part
mkdir -p "$out" "$results"
log="$out/acceptance.log"
export NCCL_NVLS_ENABLE=0
pack() { tar czf "$results/$part.tgz.tmp" -C "$work" --exclude='*.h5' --exclude='*.zero' --exclude='*.ncu-rep' --exclude='*.nsys-rep' --exclude='*.sqlite' "$part" 2>/dev/null &&
  mv "$results/$part.tgz.tmp" "$results/$part.tgz"; }
say() {
  echo "$*" | tee -a "$log"
  pack
}
trap pack EXIT
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start)) s"; }

targets=(train_mrpc bench_train_step bench_cpu_adam bench_disk test_zero_offload_gpu test_zero_training_gpu)
# validate: the GPU tests of the model and the ZeRO engine (those this tree has).
validate_tests=(test_zero_offload_gpu test_zero_training_gpu test_flash_disentangled_attention_gpu
  test_disentangled_attention_gpu test_deberta_mixed_precision_gpu test_deberta_golden_gpu test_model_streams_gpu
  test_trainer_bf16_gpu test_zero_overlap_gpu)
# ds_nvme runs DeepSpeed only: nothing of ours to build.
if [[ $part != ds_nvme ]]; then
  # shellcheck disable=SC2046  # the flags are words
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release $(scripts/device_cmake_flags.sh) >"$out/configure.log" 2>&1 &&
    { [[ $part != validate && $part != attention ]] || for t in "${validate_tests[@]}" zt_bench; do
      grep -q "^$t:" <(cmake --build build-gpu --target help 2>/dev/null) && targets+=("$t"); done; } &&
    cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" -- -k 0 >"$out/build.log" 2>&1 ||
    { grep -B2 -A8 "error" "$out/build.log" | head -60; exit 1; }
  say "build: $(elapsed)"
fi
bin=build-gpu/bin

# One bench_train_step run: label, then its flags; the JSON line (or the error's last lines) to the log.
step() {
  local label=$1
  shift
  local line
  line=$(timeout "${STEP_TIMEOUT:-150}" $bin/bench_train_step --seq 128 --dtype bf16 "$@" 2>"$out/err.txt" | tail -1)
  if [[ "$line" == \{* ]]; then
    echo "$line" >>"$out/steps.jsonl"
    say "$label: $(echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); print({k: r.get(k) for k in ("batch","zero_stage","offload","delayed_update","overlap_update","params","first_step_s","step_ms","samples_per_s","peak_gib","peak_reserved_gib")}, "estimate", r["estimate_gib"]["total"], "host", r["estimate_gib"]["host"])')"
    grep -E "optimizer|forward|backward" "$out/err.txt" | head -12 >>"$log"
    return 0
  fi
  say "$label: FAILED $(grep -v '^\s*$' "$out/err.txt" | tail -2 | head -c 400)"
  return 1
}

# The largest batch (multiple of 8) that runs under 24 GiB: `guess` must fit, guess + 8 must not.
largest_batch() {  # label, guess, then flags
  local label=$1 b=$2
  shift 2
  while ((b > 8)) && ! step "$label b$b" --batch "$b" --steps 1 --gpu_memory_limit 24GiB "$@"; do b=$((b - 8)); done
  while step "$label b$((b + 8))" --batch $((b + 8)) --steps 1 --gpu_memory_limit 24GiB "$@"; do b=$((b + 8)); done
  say "LARGEST under 24 GiB, $label: batch $b"
}

deepspeed() {  # ds_anchor.py parts and a time budget; results in $out/ds/
  if [[ ! -f .ds/run.sh ]]; then
    say "DeepSpeed anchor: .ds/ missing (copy ../shared/bench/deepspeed there and carry it)"
    return
  fi
  OUT="$out/ds" bash .ds/run.sh --parts "$1" --budget-s "$2" >"$out/ds_stdout.txt" 2>&1
  say "DeepSpeed parts $1: exit $? ($(elapsed)); $(tr -d '\n' <"$out/ds/ds_anchor.json" 2>/dev/null | head -c 3000)"
}

case $part in
zero)
  for t in test_zero_offload_gpu test_zero_training_gpu; do
    timeout 200 $bin/$t >"$out/$t.txt" 2>&1
    say "$t exit $?: $(grep -E "^\[  (PASSED|FAILED) " "$out/$t.txt" | tr '\n' ' ')"
    grep -B3 -A12 "Failure" "$out/$t.txt" | head -40 >>"$log"
  done
  OUT="$out/mpirun" bash scripts/gpu_mpirun_check.sh 2>&1 | tee -a "$log"
  step "world 2 stage 0 bs56 24GiB" --batch 56 --zero_stage 0 --world_size 2 --gpu_memory_limit 24GiB --steps 2
  step "world 2 stage 0 bs64 24GiB" --batch 64 --zero_stage 0 --world_size 2 --gpu_memory_limit 24GiB --steps 2
  ;;
offload)
  deepspeed b,d 300
  # DeepSpeedCPUAdam beside ours: run.sh installed the wheels under /tmp/ds_site.
  PYTHONPATH=/tmp/ds_site TORCH_EXTENSIONS_DIR=/tmp/tx DS_ACCELERATOR=cuda DS_SKIP_CUDA_CHECK=1 \
    timeout 150 python3 scripts/bench_cpu_adam_vs_torch.py --bench $bin/bench_cpu_adam --params 887M \
    --threads "$(nproc)" >>"$log" 2>&1
  say "cpu adam exit $? ($(elapsed))"
  step "zero2 bs40" --batch 40 --zero_stage 2 --steps 5
  step "zero2+offload bs40" --batch 40 --zero_stage 2 --offload optimizer --pin_memory --steps 5 --profile
  step "zero2+offload+dpu bs40" --batch 40 --zero_stage 2 --offload optimizer --pin_memory --delayed_update \
    --steps 5 --profile
  step "zero2+offload bs64" --batch 64 --zero_stage 2 --offload optimizer --pin_memory --steps 5
  step "zero2 bs128" --batch 128 --zero_stage 2 --steps 5
  step "zero2+offload bs128" --batch 128 --zero_stage 2 --offload optimizer --pin_memory --steps 5 --profile
  largest_batch "zero2+offload" 112 --zero_stage 2 --offload optimizer --pin_memory
  ;;
limits)
  deepspeed c 150
  step "zero3+both offloads bs40" --batch 40 --zero_stage 3 --offload both --pin_memory --steps 5 --profile
  largest_batch "stage 0" 56 --zero_stage 0
  largest_batch "zero2" 48 --zero_stage 2
  largest_batch "zero3+both offloads" 120 --zero_stage 3 --offload both --pin_memory
  # Gradient checkpointing: the bs-40 step's time and peak (the estimator plans 16.4 GiB), and the largest
  # stage-0 batch under the cap (planned ~288).
  step "stage 0 bs40 gradient checkpointing" --batch 40 --zero_stage 0 --steps 10 --gradient_checkpointing --profile
  largest_batch "stage 0 + gradient checkpointing" 280 --zero_stage 0 --gradient_checkpointing
  # The delayed update's curve beside the exact one: train_mrpc, ZeRO-2 + optimizer offload, 40 steps.
  echo '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}},
         "bf16": {"enabled": true}}' >"$out/z2_offload.json"
  for mode in exact delayed; do
    flags=()
    [[ $mode == delayed ]] && flags=(--offload_delayed_update)
    timeout 150 $bin/train_mrpc --deepspeed_config "$out/z2_offload.json" --max_train_steps 40 --log_every 1 \
      --per_device_train_batch_size 40 --output_dir "$out/run_$mode" "${flags[@]}" >"$out/train_$mode.txt" 2>&1
    say "train_mrpc offload $mode exit $?: $(grep -E "^done|delayed|dev" "$out/train_$mode.txt" | tr '\n' ' ' | head -c 300)"
    rm -f "$out/run_$mode/model.h5"
  done
  python3 - "$out" <<'PY' | tee -a "$log"
import json, sys
def losses(mode):
    try:
        return [e["train/loss"] for e in map(json.loads, open(f"{sys.argv[1]}/run_{mode}/metrics.jsonl"))
                if e.get("type") == "step"]
    except OSError:
        return []
exact, delayed = losses("exact"), losses("delayed")
print("step  exact     delayed")
for i, (a, b) in enumerate(zip(exact, delayed)):
    print(f"{i + 1:4d}  {a:.5f}  {b:.5f}")
if exact and delayed:
    k = min(10, len(exact))
    print(f"mean of the last {k}: exact {sum(exact[-k:]) / k:.5f}, delayed {sum(delayed[-k:]) / k:.5f}")
PY
  ;;
validate)
  # GPU code that has not run yet (the streamed offload gradients, parameters on disk):
  # the engine's and the kernels' GPU tests, the model's and the trainer's bf16 curve against PyTorch; then
  # the steps (streamed offload steps plan 2.4 GiB less than the ones measured before).
  for t in "${validate_tests[@]}"; do
    [[ -x $bin/$t ]] || continue
    timeout 240 $bin/$t >"$out/$t.txt" 2>&1
    say "$t exit $?: $(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/$t.txt" | tr '\n' ' ')"
    grep -B3 -A12 "Failure" "$out/$t.txt" | head -40 >>"$log"
  done
  [[ -x $bin/zt_bench ]] && timeout 120 $bin/zt_bench --only attention >"$out/zt_bench_attention.txt" 2>&1
  step "stage 0 bs40" --batch 40 --zero_stage 0 --steps 10 --profile
  for stage in 2 3; do
    for overlap in "" --overlap_comm; do
      step "world 2 stage $stage bs40 ${overlap:-in order}" --batch 40 --zero_stage $stage --world_size 2 \
        --gpu_memory_limit 24GiB --steps 5 $overlap
    done
  done
  step "zero2+offload bs128 24GiB" --batch 128 --zero_stage 2 --offload optimizer --pin_memory --steps 1 \
    --gpu_memory_limit 24GiB
  step "zero3+both offloads bs128 24GiB" --batch 128 --zero_stage 3 --offload both --pin_memory --steps 1 \
    --gpu_memory_limit 24GiB
  step "zero2+offload+dpu bs40" --batch 40 --zero_stage 2 --offload optimizer --pin_memory --delayed_update \
    --steps 5 --profile
  # The GPU AdamW on its own stream beside the next forward (test_zero_training_gpu compared the curves above),
  # timed back to back (one sync around the window) with and without it.
  for b in 40 8; do
    step "stage 0 bs$b back to back" --batch $b --zero_stage 0 --steps 20 --back_to_back
    step "stage 0 bs$b back to back, overlap_optimizer" --batch $b --zero_stage 0 --steps 20 --back_to_back \
      --overlap_optimizer
  done
  # The exact update overlapping the next forward (on by default where it applies), beside the update
  # inside step() (test_zero_offload_gpu checked it bit for bit above).
  for b in 40 128; do
    step "zero2+offload bs$b, update inside step" --batch $b --zero_stage 2 --offload optimizer --pin_memory \
      --no_overlap_update --steps 5 --profile
    step "zero2+offload+overlap_update bs$b" --batch $b --zero_stage 2 --offload optimizer --pin_memory \
      --overlap_update --steps 5 --profile
  done
  ;;
disk)
  ZT_DD_BLOCKS=1024 ZT_DISK_BENCH_SIZE=2GiB ZT_DISK_BENCH_SUB_GROUPS=0 OUT="$out/disk" bash scripts/gpu_disk_bench.sh 2>&1 | tail -30 | tee -a "$log"
  pack
  # The largest model under --host_memory_limit 32GiB, ZeRO-3 + both offloads, batch 8, xlarge width, deeper:
  # the most layers whose plan (the estimator, equal to the measured peaks) fits the cap — and, with the disk
  # tier, 90 % of the disk's free space — then that run, and without the disk tier 4 layers more, which the
  # cap must refuse (estimator on this tree: 56 layers = 1.79 B without the disk tier, 160 layers = 4.74 B
  # with it, 57 GB of state on the disk — ~1.5 min a step at this machine's ~1.8 GB/s).
  cap=(--zero_stage 3 --offload both --batch 8 --host_memory_limit 32GiB --warmup 0 --steps 1 --repeat_batch)
  disk=(--nvme_path /tmp/zt-nvme --nvme_pipeline --sub_group_size 2e7)
  mkdir -p /tmp/zt-nvme
  largest_layers() {
    python3 - "$bin/bench_train_step" "$@" <<'PY'
import json, shutil, subprocess, sys
binary, flags = sys.argv[1], sys.argv[2:]
free_gib = shutil.disk_usage("/tmp/zt-nvme").free / 2**30
best = 0
for layers in range(4, 1000, 4):
    out = subprocess.run([binary, "--estimate_only", "--layers", str(layers), *flags], capture_output=True,
                         text=True, check=True).stdout
    plan = json.loads(out)["estimate_gib"]
    if plan["host"] > 32 or plan["disk"] > 0.9 * free_gib:
        break
    best = layers
print(best)
PY
  }
  plain=$(largest_layers "${cap[@]}")
  on_disk=$(largest_layers "${cap[@]}" "${disk[@]}")
  say "largest under a 32 GiB host cap by the plan: $plain layers without the disk tier, $on_disk with it"
  step "host cap 32 GiB, no disk, $plain layers" --layers "$plain" "${cap[@]}"
  step "host cap 32 GiB, no disk, $((plain + 4)) layers (over the cap)" --layers $((plain + 4)) "${cap[@]}"
  STEP_TIMEOUT=420 step "host cap 32 GiB, disk tier, $on_disk layers" --layers "$on_disk" "${cap[@]}" "${disk[@]}"
  ;;
big)
  free -g | tee -a "$log"
  export STEP_TIMEOUT=420
  # ≈6.2 B parameters: hidden 4096 (64 heads of 64, FFN 16384), 28 layers; ZeRO-3, both offloads, batch 8.
  step "6.2B zero3+both offloads" --batch 8 --zero_stage 3 --offload both --pin_memory --hidden 4096 --layers 28 \
    --steps 3 --repeat_batch --lr 1e-4 --profile ||
    step "6.2B zero3+both offloads (pageable)" --batch 8 --zero_stage 3 --offload both --hidden 4096 --layers 28 --steps 3 --repeat_batch --lr 1e-4
  ;;
ds_nvme)
  # Issue 15's anchor beside `disk` (run it in the next call on the same machine): DeepSpeed's async_io op,
  # its ZeRO-3 with offload_optimizer nvme (then offload_param nvme, then ZeRO-2 last: it crashed twice).
  # Its JIT builds take ~70 s of the budget.
  ZT_DS_NVME_BUDGET_S=${ZT_DS_NVME_BUDGET_S:-330} OUT="$out/ds_nvme" timeout 520 bash scripts/ds_nvme_anchor.sh \
    >"$out/ds_nvme.txt" 2>&1
  say "ds_nvme_anchor exit $?: $(grep -A1 'ds_nvme_anchor summary' "$out/ds_nvme.txt" | tail -1 | head -c 1500)"
  ;;
attention)
  # Issue 16: where the attention kernels' time goes — Nsight Compute's full set on every attention kernel
  # of zt_bench's attention rows (bs 40, seq 128, bf16), exported as
  # the details page (occupancy, memory and pipe throughput, warp stall reasons, shared-memory conflicts);
  # then where a bs-8 step's time goes (the step profile; nsys's GPU idle gaps where the machine has nsys).
  if command -v ncu >/dev/null; then
    timeout 400 ncu --set full --kernel-name regex:'attention|softmax|gather|dropped|flash' --launch-count 80 \
      -f -o "$out/attention" $bin/zt_bench --only attention --reps 1 >"$out/ncu_stdout.txt" 2>&1
    say "ncu exit $? ($(elapsed))"
    ncu --import "$out/attention.ncu-rep" --page details --csv >"$out/attention_details.csv" 2>&1
    python3 - "$out/attention_details.csv" <<'PY' | tee -a "$log"
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
want = ("Duration", "Achieved Occupancy", "Registers Per Thread", "Dynamic Shared Memory Per Block",
        "Memory Throughput", "Compute (SM) Throughput", "Block Limit Shared Mem", "Block Limit Registers")
seen = collections.OrderedDict()
for r in rows:
    name = r.get("Kernel Name", "")[:60]
    if r.get("Metric Name") in want and (name, r["Metric Name"]) not in seen:
        seen[(name, r["Metric Name"])] = f'{r["Metric Value"]} {r.get("Metric Unit", "")}'
for (name, metric), value in seen.items():
    print(f"{name:60s} {metric:34s} {value}")
PY
  else
    say "ncu: not on this machine"
  fi
  # The per-layer attention against disentangled-flash's Triton training kernels (issue 16's goal), one run.
  timeout 240 python3 scripts/bench_attention_vs_df.py --zt-bench $bin/zt_bench --shapes 40x128,8x512,16x512 \
    >"$out/attention_vs_df.txt" 2>&1
  say "attention vs df exit $?: $(grep -E '^GOAL' "$out/attention_vs_df.txt" | tr '\n' ' ')"
  tail -8 "$out/attention_vs_df.txt" >>"$log"
  step "stage 0 bs8 profile" --batch 8 --zero_stage 0 --steps 10 --profile
  grep -vE "^\s*$" "$out/err.txt" | tail -40 >"$out/profile_bs8.txt"
  # Is the bs-8 step launch-bound? The kernels' own time (ncu, serialized) of a 2- and a 4-layer step against
  # the wall time of the same steps: per layer, (4 - 2) / 2 of each.
  for layers in 2 4; do
    step "stage 0 bs8 $layers layers" --batch 8 --zero_stage 0 --steps 20 --layers $layers
    if command -v ncu >/dev/null; then
      timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv $bin/bench_train_step --seq 128 \
        --dtype bf16 --batch 8 --steps 1 --layers $layers >"$out/ncu_bs8_${layers}layers.csv" 2>/dev/null
      python3 scripts/ncu_kernel_times.py "$out/ncu_bs8_${layers}layers.csv" >"$out/ncu_bs8_${layers}layers.txt" 2>&1
      say "ncu bs8 $layers layers: $(tail -1 "$out/ncu_bs8_${layers}layers.txt")"
    fi
  done
  step "stage 0 bs8 24 layers" --batch 8 --zero_stage 0 --steps 20
  if command -v nsys >/dev/null; then
    timeout 200 nsys profile -o "$out/bs8" -f true --stats=true $bin/bench_train_step --seq 128 --dtype bf16 \
      --batch 8 --steps 5 >"$out/nsys_bs8.txt" 2>&1
    say "nsys exit $? ($(elapsed)); $(grep -A12 'cuda_gpu_kern_sum' "$out/nsys_bs8.txt" | head -14 | tr '\n' ' ' | head -c 1500)"
  else
    say "nsys: not on this machine"
  fi
  ;;
*)
  echo "unknown part $part" >&2
  exit 2
  ;;
esac
say "part $part done: $(elapsed)"
