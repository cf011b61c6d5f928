# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# bench: every kernel (zt_bench, 20 reps, JSON) and zerotrain's step alone at the goals' shapes (seq 128 bs
# 40/8/64, seq 512 bs 8/16; bf16, dropout 0.1, 20 steps), then one profiled step at bs 40. For zerotrain beside
# torch.compile at the same shapes, the goals task.
targets=(zt_bench bench_train_step)
task_run() {
  x --timeout 240 --to "$work/zt_bench.txt" $bin/zt_bench --reps 20 --json "$work/zt_bench.json"
  ((dry_run)) || say "zt_bench exit $?: $(grep -c . "$work/zt_bench.txt") lines"
  local shape batch seq
  for shape in 40x128 8x128 64x128 8x512 16x512; do
    IFS=x read -r batch seq <<<"$shape"
    step "bs$batch seq$seq" --batch "$batch" --seq "$seq" --dropout 0.1 --steps 20
  done
  x --timeout 120 --to "$work/profile_bs40.json" $bin/bench_train_step --batch 40 --seq 128 --dtype bf16 \
    --dropout 0.1 --steps 10 --profile
  return 0
}
