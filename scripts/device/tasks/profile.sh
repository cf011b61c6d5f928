# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# profile [BATCHxSEQ ...]: where the step's time goes, per shape (default 8x128 40x128 8x512 16x512): the
# step profile (bench_train_step --profile: device time per segment over 10 steps) and, on a one-layer model,
# Nsight Compute's time of every kernel (scripts/ncu_kernel_times.py). Then, where .whl is carried
# (scripts/fetch_wheels.sh), the attention core per layer against disentangled-flash
# (scripts/bench_attention_vs_df.py). PROFILE_BUDGET_S (default 480): a shape starts only with 60 s left.
targets=(bench_train_step zt_bench)
shapes=(8x128 40x128 8x512 16x512)
task_args() {
  local shape
  for shape in "$@"; do [[ $shape =~ ^[0-9]+x[0-9]+$ ]] || refuse "profile: shape '$shape' is not BATCHxSEQ"; done
  (($#)) && shapes=("$@")
  return 0
}
task_run() {
  local shape batch seq name budget=${PROFILE_BUDGET_S:-480}
  for shape in "${shapes[@]}"; do
    IFS=x read -r batch seq <<<"$shape"
    name=bs${batch}_seq$seq
    if (($(date +%s) - start > budget - 60)); then
      say "skipped (time budget): $name"
      continue
    fi
    x --timeout 120 --to "$work/profile_$name.json" $bin/bench_train_step --batch "$batch" --seq "$seq" \
      --dtype bf16 --dropout 0.1 --steps 10 --profile
    ((dry_run)) || say "$name profile: $(python3 "$device_dir/summaries.py" step <"$work/profile_$name.json" 2>&1 | head -c 300)"
    if ((dry_run)) || command -v ncu >/dev/null; then
      x --timeout 180 --to "$work/ncu_$name.csv" ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        $bin/bench_train_step --batch "$batch" --seq "$seq" --dtype bf16 --dropout 0.1 --steps 1 --layers 1
      x --to "$work/ncu_$name.txt" python3 scripts/ncu_kernel_times.py "$work/ncu_$name.csv"
      ((dry_run)) || say "$name ncu: $(tail -1 "$work/ncu_$name.txt")"
      ((dry_run)) || rm -f "$work/ncu_$name.csv"  # bulky; the listing keeps every kernel's time
    fi
  done
  if ((dry_run)) || [[ -d .whl ]]; then
    x --timeout 240 --to "$work/attention_vs_df.txt" python3 scripts/bench_attention_vs_df.py \
      --zt-bench $bin/zt_bench --shapes 40x128,8x512,16x512
    ((dry_run)) || say "attention vs disentangled-flash: $(grep -E '^GOAL' "$work/attention_vs_df.txt" | tr '\n' ' ')"
  fi
  return 0
}
