# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# long [--candidate DIR|FILE.patch [--candidate-only]] [--with-compile]: the long-document issue's acceptance runs
# (xlarge, bf16, dropout 0.1) in parts, most wanted first; a part starts only with its budget left of LONG_BUDGET_S
# (default 580, the build included) and is marked done in .long/, so the same command on the warm machine runs the
# rest. Budgets are from the H100 runs of 2026-12-06 (docs/bench/2026-12-06-h100-flash: each step's process 5-12 s,
# 1x16384 30 s, a zt_bench core 1-2 s) and the H200 torch runs (a torch eager/df process 23-43 s, 18-20 s of it
# start, import and build; torch.compile 100-190 s a shape). Each part prints its budget and what it took.
#
#   part            budget  what
#   tests             50 s  the flash attention's GPU tests, HF golden data past 512 tokens (f32; bf16/f16
#                           with the flash and the automatic attention), L 2048 deterministic run to run
#   candidate_tests   20 s  (--candidate) the candidate tree's flash attention GPU tests
#   goals_side       150 s  zerotrain, FlashDeBERTa, disentangled-flash at 4x2048 and 1x8192 (bench_vs_torch.py
#                           --long-goals --shapes; 4 processes: zerotrain's 2, fdb's and df's one each, ~20 s
#                           of start each plus 3 warmup and 5 timed steps a shape) into .long/long.json
#   steps_16384       40 s  1 x 16384 on a repeated batch: trains on one 80 GB GPU, loss finite and falling
#   candidate_ab      60 s  (--candidate) zt_bench --only flash at 4x2048 and 1x8192, this tree's and the
#                           candidate's in turn, the ratios; the 4x2048 step, 2 rounds of both in turn
#   goals_cores       60 s  the attention core per layer at 4x2048 and 1x8192 beside FlashDeBERTa's and df's
#                           kernels (bench_attention_vs_df.py; a torch process each for df and fdb)
#   steps_checkpoint  25 s  1 x 8192 with --gradient_checkpointing (the flash attention under recomputation)
#   short_side       110 s  zerotrain, FlashDeBERTa, df at 16x512 and 40x128 into the same .long/long.json
#   short_cores       65 s  the cores at 40x128, 16x512 and 8x1024 (stored and flash: the automatic choice
#                           takes flash from 1024, measured faster there on 2026-12-06)
#   compile          330 s  (--with-compile) torch.compile at 40x128 and 16x512 (two compiles of 100-190 s)
# then the verdicts from .long/long.json: the speed and peak goals, and the estimator's plan within 5 % of the
# measured peak at 4x2048 and 1x8192 (the goals of shapes not yet run say n/a).
#
# A fresh H100 builds this tree in ~100-150 s (a candidate beside it, side by side); the decisive parts take
# ~250 s more (tests 50, goals_side 150, steps_16384 40; the candidate's: candidate_tests 20, candidate_ab
# 60): call 1 (LONG_BUDGET_S 580) reaches them, then goals_cores, steps_checkpoint, short_side and short_cores
# (~285 s; on 2026-12-06 all of them ran in 312 s on a warm H100 with a candidate). torch.compile (the 2x goal
# at 40x128 and 16x512) only in a call of its own on the warm machine within 30 s. From /work/main:
#
#   scripts/fetch_wheels.sh                     # .whl/: flashdeberta 0.0.8, einops, disentangled-flash 1.1.1
#   call 1: run(command="scripts/device/run.sh long", timeout_s=600, carry=[".device-deps", ".whl"])
#   call 2: run(command="LONG_BUDGET_S=400 scripts/device/run.sh long --with-compile", timeout_s=430,
#               carry=[".device-deps", ".whl"])
#   a kernel candidate (a branch): git diff main NAME > .plan/NAME.patch, then `long --candidate
#   .plan/NAME.patch` with ".plan" in carry (run.sh makes .candidates/NAME from this tree and the patch; a
#   whole tree, `git archive NAME | tar -x -C .wt-NAME`, works too, ~14 MB of carry each); with
#   --candidate-only just its tests and its A/B against this tree (~70 s on a warm H100 after a first build,
#   ~20 s of it the candidate's rebuild): several candidates in one call, each with OUT=$OUT/NAME
#   scripts/device/run.sh --dry-run long [--candidate DIR|FILE.patch]    # here: the plan, every part's budget
#
# The candidate builds into build-gpu-candidate/ at the top of this tree, not inside the carried folder (a
# carried folder replaces its copy on the machine, which would drop its build between the calls); another
# candidate in its place rebuilds what differs (run.sh: by content, not mtime). A fresh machine for call 2
# needs ".long" in carry too (its done markers and long.json) and rebuilds (~100-150 s). A candidate's parts
# are done per candidate (by its sources' content): the next candidate's run in the same call or on the same
# machine. Remove .long/ to start over.
targets=(test_flash_disentangled_attention_gpu test_deberta_golden_gpu test_deberta_mixed_precision_gpu
  test_long_training_determinism_gpu bench_train_step zt_bench)
candidate_targets=(test_flash_disentangled_attention_gpu bench_train_step zt_bench)
long_dir=.long
with_compile=0 candidate_only=0
task_args() {
  while (($#)); do
    case $1 in
    --candidate)
      candidate_tree "${2:-}"
      shift
      ;;
    --with-compile) with_compile=1 ;;
    --candidate-only) candidate_only=1 ;;
    *) refuse "long takes [--candidate DIR|FILE.patch [--candidate-only]] [--with-compile] (got: $1)" ;;
    esac
    shift
  done
  ((candidate_only)) && [[ -z $candidate ]] && refuse "long: --candidate-only needs --candidate DIR"
  ((candidate_only)) && targets=(bench_train_step zt_bench)  # this tree's side of the A/B
  if [[ -n $candidate ]]; then
    other_tree_targets=("${candidate_targets[@]}")
    other_tree_optional=1  # a candidate that does not build must not cost the goals' measurements
  fi
}
left() { echo $((${LONG_BUDGET_S:-580} - ($(date +%s) - start))); }
# part NAME BUDGET_S: whether part NAME is to run now: not done in an earlier call and BUDGET_S seconds left.
# A candidate's parts are done per candidate, by the content of its sources (another candidate, or the same
# folder changed, runs them again; candidate_key is set in task_run).
part_start=0 candidate_key=""
marker() {  # NAME: the part's done marker
  if [[ $1 == candidate_* ]]; then echo "$long_dir/$1-$candidate_key.done"; else echo "$long_dir/$1.done"; fi
}
part() {
  ((candidate_only)) && [[ $1 != candidate_* ]] && return 1
  if ((dry_run)); then
    echo "part $1: budget $2 s"
    return 0
  fi
  [[ -f $(marker "$1") ]] && { say "$1: done in an earlier call (remove $long_dir/ to run it again)"; return 1; }
  (($(left) >= $2)) || { say "$1: $(left) s left, fewer than its budget of $2 s: next call"; return 1; }
  say "$1: starts at $(elapsed), budget $2 s, $(left) s left"
  part_start=$(date +%s)
  return 0
}
# finished NAME [RC [OUTPUT]]: marks part NAME done when RC (default 0) is 0; says what it took, and when it
# failed, the last line of OUTPUT's stderr (x --to's OUTPUT.err).
finished() {
  ((dry_run)) && return 0
  local rc=${2:-0} why=""
  ((rc == 0)) && touch "$(marker "$1")"
  ((rc != 0)) && [[ -s ${3:-}.err ]] && why=": $(grep -v '^\s*$' "$3.err" | tail -1 | head -c 300)"
  say "$1: exit $rc, took $(($(date +%s) - part_start)) s$why"
}
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
side_out() { echo "$work/vs_torch_${1//,/_}_${2//,/_}.txt"; }  # IMPLS SHAPES: torch_side's output
# torch_side IMPLS SHAPES: bench_vs_torch --long-goals for these impls and shapes, resumed into .long/long.json;
# 0 when the file then holds each of them measured (or out of memory), else the rest are named (run again).
torch_side() {
  x --timeout $(($(left) - 5)) --to "$(side_out "$1" "$2")" python3 scripts/bench_vs_torch.py \
    --zt-bin "$bin"/bench_train_step --long-goals --impls "$1" --shapes "$2" --steps 5 --timeout-s 240 \
    --json-out $long_dir/long.json --resume || return 1
  ((dry_run)) && return 0
  local line rc=0
  while read -r line; do
    rc=1
    say "  not measured: $line"
  done < <(python3 "$device_dir/summaries.py" side-complete $long_dir/long.json "$1" "$2")
  return "$rc"
}
cores() {  # SHAPES: the attention core per layer beside FlashDeBERTa's and df's kernels
  x --timeout $(($(left) - 5)) --to "$work/core_${1//,/_}.txt" python3 scripts/bench_attention_vs_df.py \
    --zt-bench "$bin"/zt_bench --shapes "$1" --reps 5
  local rc=$?
  ((dry_run)) || grep -E "^(GOAL|CORE)|^ +shape|^ +[0-9]+x" "$work/core_${1//,/_}.txt" | tee -a "$summary"
  return "$rc"
}
# The candidate's flash kernels beside this tree's at the goals' long shapes, each timed alone in turn, then
# the 4x2048 step of both in turn (ratios: this tree's time over the candidate's, > 1 when it is faster).
candidate_ab() {
  local shape batch seq tree tag failed=0
  for shape in 4x2048 1x8192; do
    IFS=x read -r batch seq <<<"$shape"
    for tree in . "$candidate"; do
      tag=base
      [[ $tree == . ]] || tag=candidate
      x --timeout 120 --to "$work/core_ab_${shape}_$tag.txt" "$(bin_of "$tree")/zt_bench" --only flash \
        --batch "$batch" --seq "$seq" --reps 5 --json "$work/core_ab_${shape}_$tag.json" || failed=1
    done
    ((dry_run)) && continue
    python3 "$device_dir/summaries.py" core-ab "$shape" "$work/core_ab_${shape}_base.json" \
      "$work/core_ab_${shape}_candidate.json" | while read -r line; do say "$line"; done
  done
  labels=(main candidate) variant_trees=(. "$candidate") envs=("" "") flags=("" "")
  variant_flags=(--seq 2048 --warmup 1)
  # The candidate's last loss may differ from main's (another summation order): reported, not a failure.
  variant_rounds "$work/candidate_step.log" 2 3 4
  ((dry_run)) || ! grep -q FAILED "$work/candidate_step_summary.txt" || failed=1
  return "$failed"
}
task_run() {
  local status=0 rc verdict
  ((dry_run)) || mkdir -p "$long_dir"
  [[ -n $candidate ]] && ! ((dry_run)) && candidate_key=$(sha1sum <"$(sources_list "$candidate")" | cut -c1-12)
  if [[ -n $candidate && " ${unbuilt_trees[*]} " == *" $candidate "* ]]; then
    say "candidate $candidate did not build (build log in the outputs): its parts left out"
    candidate="" status=1
  fi
  if part tests 50; then
    long_tests
    rc=$?
    ((rc == 0)) || status=1
    finished tests "$rc"
  fi
  if [[ -n $candidate ]] && part candidate_tests 20; then
    gtest_in "$candidate" test_flash_disentangled_attention_gpu
    rc=$?
    ((rc == 0)) || status=1
    finished candidate_tests "$rc"
  fi
  if part goals_side 150; then
    torch_side zerotrain,fdb,df 4x2048,1x8192
    finished goals_side $? "$(side_out zerotrain,fdb,df 4x2048,1x8192)"
  fi
  if part steps_16384 40; then
    rc=1
    if step "1x16384 repeated batch" --batch 1 --seq 16384 --dropout 0.1 --steps 4 --warmup 0 --repeat_batch \
      --lr 1e-4; then
      verdict=$(losses_fall)
      rc=$?
      say "1x16384 losses $verdict"
    fi
    ((rc == 0)) || ((dry_run)) || status=1
    finished steps_16384 "$rc"
  fi
  if [[ -n $candidate ]] && part candidate_ab 60; then
    candidate_ab
    rc=$?
    ((rc == 0)) || status=1
    finished candidate_ab "$rc"
  fi
  if part goals_cores 60; then
    cores 4x2048,1x8192
    finished goals_cores $? "$work/core_4x2048_1x8192.txt"
  fi
  if part steps_checkpoint 25; then
    step "1x8192 gradient checkpointing" --batch 1 --seq 8192 --dropout 0.1 --gradient_checkpointing \
      --steps 2 --warmup 1
    rc=$?
    ((rc == 0)) || ((dry_run)) || status=1
    finished steps_checkpoint "$rc"
  fi
  if part short_side 110; then
    torch_side zerotrain,fdb,df 16x512,40x128
    finished short_side $? "$(side_out zerotrain,fdb,df 16x512,40x128)"
  fi
  if part short_cores 65; then
    cores 40x128,16x512,8x1024
    finished short_cores $? "$work/core_40x128_16x512_8x1024.txt"
  fi
  if ((with_compile)) && part compile 330; then
    torch_side compile 16x512,40x128
    finished compile $? "$(side_out compile 16x512,40x128)"
  fi
  ((candidate_only)) && return "$status"  # no goal was measured: no verdicts
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
