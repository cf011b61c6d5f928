# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# flash [--quick]: the flash attention's checks and timings (xlarge, bf16, dropout 0.1), most wanted first:
#   1. the attention GPU tests (flash, stored);
#   2. training steps (steps.jsonl): 4 x 2048, 40 x 128 with the stored and the flash attention, 1 x 8192,
#      16 x 512 with both, and 1 x 16384 on a repeated batch (loss finite and falling);
#   3. the attention core per layer (zt_bench --only attention; past 1024 --only flash) at 40 x 128,
#      16 x 512, 4 x 2048, 1 x 8192 (core.txt);
#   4. determinism at L 2048: two runs of 2 layers x 3 steps on a repeated batch, losses compared.
# --quick: the tests and the first four steps only.
targets=(test_flash_disentangled_attention_gpu test_disentangled_attention_gpu
  bench_train_step zt_bench)
quick=0
task_args() {
  case "$*" in
  "") ;;
  --quick) quick=1 ;;
  *) refuse "flash takes [--quick] (got: $*)" ;;
  esac
}
task_run() {
  gtest test_flash_disentangled_attention_gpu test_disentangled_attention_gpu
  step "4x2048" --batch 4 --seq 2048 --dropout 0.1 --steps 3 --warmup 1
  step "40x128 stored" --batch 40 --seq 128 --dropout 0.1 --attention stored --steps 6 --warmup 2
  step "40x128 flash" --batch 40 --seq 128 --dropout 0.1 --attention flash --steps 6 --warmup 2
  step "1x8192" --batch 1 --seq 8192 --dropout 0.1 --steps 3 --warmup 1
  ((quick)) && return 0
  step "16x512 stored" --batch 16 --seq 512 --dropout 0.1 --attention stored --steps 4 --warmup 2
  step "16x512 flash" --batch 16 --seq 512 --dropout 0.1 --attention flash --steps 4 --warmup 2
  step "1x16384 repeated batch" --batch 1 --seq 16384 --dropout 0.1 --steps 4 --warmup 0 --repeat_batch --lr 1e-4
  local shape batch seq only run
  for shape in 40x128 16x512 4x2048 1x8192; do
    IFS=x read -r batch seq <<<"$shape"
    only=attention
    ((seq > 1024)) && only=flash  # the stored attention stops at 1024
    x --timeout 120 --to "$work/core_$shape.txt" $bin/zt_bench --only "$only" --batch "$batch" --seq "$seq" --reps 5
    ((dry_run)) || say "core $shape exit $?"
  done
  for run in 1 2; do
    x --timeout 120 --to "$work/determinism_$run.json" $bin/bench_train_step --dtype bf16 --batch 2 --seq 2048 \
      --layers 2 --steps 3 --warmup 0 --repeat_batch
  done
  ((dry_run)) && return 0
  local a b
  a=$(grep -o '"losses":\[[^]]*\]' "$work/determinism_1.json")
  b=$(grep -o '"losses":\[[^]]*\]' "$work/determinism_2.json")
  say "determinism at L 2048: $([[ -n $a && $a == "$b" ]] && echo same || echo DIFFERENT) ($a vs $b)"
  [[ -n $a && $a == "$b" ]]
}
