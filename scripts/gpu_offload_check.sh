#!/usr/bin/env bash
# One short device call for CPU offload (issue 18) and the shared-GPU checks left from gpu_zero_ranks.sh, in
# priority order, each result appended to $OUT/offload_check.log as it lands (a run cut short at the call's
# limit still returns what it measured):
#   1. build the targets; the offload GPU tests (offloaded steps equal device steps bit for bit) and the
#      shared-GPU rank tests;
#   2. CPU AdamW: bench_cpu_adam (params/s, STREAM triad, Adam-like loop) against torch fused/foreach CPU
#      AdamW on the same host (scripts/bench_cpu_adam_vs_torch.py);
#   3. xlarge, seq 128, bf16 step: ZeRO-2 + optimizer offload (pinned), batch 40 with the offload segments
#      (--profile); world 2 under 24 GiB, stage 0: does batch 56 fit (the largest-batch search stopped at
#      48); then offload at batch 128, with the delayed update, and ZeRO-2 without offload.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-offload-out}
mkdir -p "$out"
log="$out/offload_check.log"
export NCCL_NVLS_ENABLE=0
say() { echo "$*" | tee -a "$log"; }
targets=(bench_train_step bench_cpu_adam test_zero_offload_gpu test_zero_training_gpu ${EXTRA_TARGETS:-})
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" -- -k 0 >"$out/build.log" 2>&1 ||
  { grep -B2 -A8 "error" "$out/build.log" | head -60; exit 1; }
say "build: $(( $(date +%s) - start )) s"
bin=build-gpu/bin
for t in test_zero_offload_gpu test_zero_training_gpu; do
  timeout 150 $bin/$t >"$out/$t.txt" 2>&1
  say "$t exit $?: $(grep -E "^\[  (PASSED|FAILED) " "$out/$t.txt" | tr '\n' ' ')"
  grep -B3 -A12 "Failure" "$out/$t.txt" | head -40 >>"$log"
done
timeout 120 python3 scripts/bench_cpu_adam_vs_torch.py --bench $bin/bench_cpu_adam --params 887M \
  --threads "$(nproc)" >>"$log" 2>&1
say "cpu adam exit $?"
step() {  # label, then bench_train_step flags
  local label=$1; shift
  local line
  line=$(timeout 90 $bin/bench_train_step --seq 128 --dtype bf16 --steps 5 "$@" 2>"$out/err.txt" | tail -1)
  say "$label: $(echo "$line" | head -c 900)"
  grep -E "optimizer|offload|backward|forward" "$out/err.txt" | head -12 >>"$log"
  [[ "$line" == \{* ]] || tail -3 "$out/err.txt" >>"$log"
}
step "zero2+offload bs40" --batch 40 --zero_stage 2 --offload optimizer --pin_memory --profile
step "world2 stage0 bs56 24GiB" --batch 56 --zero_stage 0 --world_size 2 --gpu_memory_limit 24GiB --steps 2
step "zero2+offload bs128" --batch 128 --zero_stage 2 --offload optimizer --pin_memory
step "zero2+offload+dpu bs40" --batch 40 --zero_stage 2 --offload optimizer --pin_memory --delayed_update
step "zero2 bs40" --batch 40 --zero_stage 2
say "total $(( $(date +%s) - start )) s"
