# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# delayed: the delayed update's floor (issue 40; xlarge, seq 128, bf16, ZeRO-2 + optimizer offload, pinned,
# one GPU): its GPU tests (the three landings bit for bit, the in-backward upload waiting for the backward's
# reads), then the step at batch 40 landed whole (the reference), after the norm and in the backward, and at
# batch 128 whole and in the backward, each with --profile; every step line has cpu_update_ms,
# forward_backward_ms and floor_ratio = step_ms / max(those two) (the goal: <= 1.15 at batch 40).
targets=(bench_train_step test_zero_offload_gpu test_zero_training_gpu)
task_args() {
  [[ $# -eq 0 ]] || refuse "delayed takes no arguments (got: $*)"
}
task_run() {
  local t status
  for t in test_zero_offload_gpu test_zero_training_gpu; do
    x --timeout 240 --to "$work/$t.txt" $bin/"$t" --gtest_filter='*Delayed*'
    status=$?
    ((dry_run)) && continue
    say "$t (delayed) exit $status: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$work/$t.txt" | tr '\n' ' ')"
    grep -B3 -A12 "Failure" "$work/$t.txt" | head -40 >>"$work/failures.txt"
  done
  local landing
  for landing in whole after_norm in_backward; do
    step "dpu bs40 $landing" --batch 40 --zero_stage 2 --offload optimizer --pin_memory --delayed_update \
      --delayed_landing "$landing" --steps 8 --profile
  done
  for landing in whole in_backward; do
    step "dpu bs128 $landing" --batch 128 --zero_stage 2 --offload optimizer --pin_memory --delayed_update \
      --delayed_landing "$landing" --steps 5 --profile
  done
  return 0
}
