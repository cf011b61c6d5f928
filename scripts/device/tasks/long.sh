# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# long: the long-document issue's acceptance runs (xlarge, bf16, dropout 0.1), most wanted first, each only
# with the time it needs left of LONG_BUDGET_S (default 420, the build included):
#   1. tests: the flash attention's GPU tests, the HF golden data past 512 tokens (f32; bf16/f16 with the
#      flash and the automatic attention), training at L 2048 deterministic run to run;
#   2. 1 x 16384 on a repeated batch: trains on one 80 GB GPU, loss finite and falling (steps.jsonl); and
#      1 x 8192 with --gradient_checkpointing (the flash attention under recomputation; plan vs peak);
#   3. the side-by-side steps (scripts/bench_vs_torch.py --long-goals): zerotrain, FlashDeBERTa and
#      disentangled-flash at 40x128, 16x512, 4x2048, 1x8192 into .long/long.json;
#   4. the attention core per layer against FlashDeBERTa's and disentangled-flash's kernels at the same
#      shapes, forward and backward (scripts/bench_attention_vs_df.py; core.txt);
#   5. torch.compile at 40x128 and 16x512 into the same .long/long.json (HF eager and compile run out of
#      memory past that);
#   6. the verdicts from .long/long.json: the speed and peak goals, and the estimator's plan within 5 % of
#      the measured peak at 4x2048 and 1x8192.
# The torch runs need the wheels of scripts/fetch_wheels.sh: carry ".whl". What a call finishes is kept in
# .long/ (done markers, long.json): the same command again on the warm machine (or a fresh one given .long
# in carry) runs the rest. A first call on a fresh H100 builds for ~90-120 s and reaches step 3; the whole
# list takes ~15 minutes of GPU time, about three calls of 420 s. Remove .long/ to start over.
targets=(test_flash_disentangled_attention_gpu test_deberta_golden_gpu test_deberta_mixed_precision_gpu
  test_long_training_determinism_gpu bench_train_step zt_bench)
long_dir=.long
shapes=40x128,16x512,4x2048,1x8192
left() { echo $((${LONG_BUDGET_S:-420} - ($(date +%s) - start))); }
# part NAME NEED_S: whether part NAME is to run now: not done in an earlier call and NEED_S seconds left.
part() {
  ((dry_run)) && return 0
  [[ -f $long_dir/$1.done ]] && { say "$1: done in an earlier call (remove $long_dir/ to run it again)"; return 1; }
  (($(left) >= $2)) || { say "$1: $(left) s left, fewer than its $2: next call"; return 1; }
  return 0
}
finished() { ((dry_run)) || touch "$long_dir/$1.done"; }
long_tests() {
  gtest test_flash_disentangled_attention_gpu test_long_training_determinism_gpu
  local status=$?
  GTEST_FILTER='*Long*' gtest test_deberta_golden_gpu test_deberta_mixed_precision_gpu || status=1
  ((dry_run)) || grep -h "L 2048" "$work/test_long_training_determinism_gpu.txt" | tee -a "$summary"
  return "$status"
}
# The last bench_train_step line's losses: all finite and the last below the first.
losses_fall() {
  tail -1 "$work/steps.jsonl" | python3 -c '
import json, math, sys
losses = json.loads(sys.stdin.read())["losses"]
ok = all(math.isfinite(x) for x in losses) and len(losses) > 1 and losses[-1] < losses[0]
print(("finite and falling" if ok else "NOT finite and falling") + ": " + " ".join(f"{x:.4f}" for x in losses))
sys.exit(0 if ok else 1)'
}
torch_side() {  # IMPLS: bench_vs_torch --long-goals for these impls, resumed into .long/long.json
  x --timeout $(($(left) - 5)) --to "$work/vs_torch_${1//,/_}.txt" python3 scripts/bench_vs_torch.py \
    --zt-bin "$bin"/bench_train_step --long-goals --impls "$1" --steps 5 --timeout-s 240 \
    --json-out $long_dir/long.json --resume
}
task_run() {
  local status=0 rc verdict
  ((dry_run)) || mkdir -p "$long_dir"
  if part tests 60; then
    long_tests || status=1
    finished tests
  fi
  if part steps_16384 60; then
    if step "1x16384 repeated batch" --batch 1 --seq 16384 --dropout 0.1 --steps 4 --warmup 0 --repeat_batch \
      --lr 1e-4; then
      verdict=$(losses_fall) || status=1
      say "1x16384 losses $verdict"
    else
      ((dry_run)) || status=1
    fi
    step "1x8192 gradient checkpointing" --batch 1 --seq 8192 --dropout 0.1 --gradient_checkpointing \
      --steps 2 --warmup 1 || ((dry_run)) || status=1
    finished steps_16384
  fi
  if part side_by_side 120; then
    torch_side zerotrain,fdb,df
    rc=$?
    ((rc == 0)) && finished side_by_side
    ((dry_run)) || say "side by side (zerotrain, fdb, df): exit $rc after $(elapsed)"
  fi
  if part cores 90; then
    x --timeout $(($(left) - 5)) --to "$work/core.txt" python3 scripts/bench_attention_vs_df.py \
      --zt-bench "$bin"/zt_bench --shapes "$shapes" --reps 5
    rc=$?
    ((rc == 0)) && finished cores
    ((dry_run)) || say "cores: exit $rc after $(elapsed)"
    ((dry_run)) || grep -E "^(GOAL|CORE)|^ +shape|^ +[0-9]+x" "$work/core.txt" | tee -a "$summary"
  fi
  if part compile 150; then
    torch_side compile
    rc=$?
    ((rc == 0)) && finished compile
    ((dry_run)) || say "torch.compile at 40x128, 16x512: exit $rc after $(elapsed)"
  fi
  if ((dry_run)); then
    x python3 scripts/bench_vs_torch.py --verdict-from $long_dir/long.json --long-goals
    return 0
  fi
  [[ -f $long_dir/long.json ]] || { say "no side-by-side results yet ($long_dir/long.json absent)"; return 1; }
  cp $long_dir/long.json "$work/long.json"
  python3 scripts/bench_vs_torch.py --verdict-from $long_dir/long.json --long-goals >"$work/verdict.txt" 2>&1
  grep -v '^#' "$work/verdict.txt" | tee -a "$summary"
  pack
  return "$status"
}
