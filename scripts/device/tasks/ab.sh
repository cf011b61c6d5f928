# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# ab <base-tree> [variant ...]: the xlarge training step of several variants timed in turn in one call, so
# drift on the machine shows in every column; the last losses say whether a change kept the bits.
#
#   git archive main | (mkdir -p .ab-base && tar -x -C .ab-base)      # here, before the call (carry .ab-base)
#   scripts/device/run.sh ab .ab-base                                   # main against this tree
#   scripts/device/run.sh ab . "flash|.||--attention flash" "overlap|.||--overlap_optimizer"
#
# A variant is label|tree|env words|bench_train_step flags; without any, the variant is "new|.||" (this tree).
# The base variant is "base|<base-tree>||". Each variant is compared with the first variant that ran with the
# same flags (the base, for switches), so one call can hold several pairs of trees, e.g. with the offload:
#   scripts/device/run.sh ab .ab-base "new|.||" "base-offload|.ab-base||--zero_stage 2 --offload optimizer" \
#     "new-offload|.||--zero_stage 2 --offload optimizer" Each distinct tree is built once (its build-gpu/). AB_TESTS names
# GPU test binaries of this tree that must pass first. Then for each batch of AB_BATCHES (default "40 8"; seq
# AB_SEQ (128), bf16, dropout 0.1, 20 steps, AB_COMMON extra flags) the variants run in turn AB_REPS rounds
# (default 3); then one profiled step of each at AB_PROFILE_BATCH (default 8). ab.log holds one line per run
# and the summary: mean step time per variant, its ratio to its reference, and whether its last loss is the
# reference's bit for bit. AB_BENCH (substrings, e.g. "layernorm gelu"): after the rounds, `zt_bench --only`
# each of them in every tree in turn at AB_BENCH_SHAPE (default "40 128": batch and seq), kernel against kernel.
# Exit status 1 when a test or a run failed or a variant's last loss differs.
targets=(bench_train_step)
other_tree_targets=(bench_train_step)
[[ -n ${AB_BENCH:-} ]] && targets+=(zt_bench) && other_tree_targets+=(zt_bench)
task_args() {
  (($# >= 1)) || refuse "ab needs a base tree: ab <base-tree> [label|tree|env|flags ...]"
  local specs=("base|$1||") spec label tree env_words flag_words
  shift
  (($#)) && specs+=("$@") || specs+=("new|.||")
  for spec in "${specs[@]}"; do
    [[ $spec == *"|"*"|"*"|"* ]] || refuse "variant '$spec' is not label|tree|env|flags"
    IFS='|' read -r label tree env_words flag_words <<<"$spec"
    [[ $label =~ ^[A-Za-z0-9_.+-]+$ ]] || refuse "variant label '$label': letters, digits and _.+- only"
    [[ " ${labels[*]} " != *" $label "* ]] || refuse "variant label '$label' given twice"
    [[ -f $tree/CMakeLists.txt ]] || refuse "variant $label: no source tree at '$tree'"
    for word in $env_words; do
      [[ $word =~ ^ZT_[A-Z0-9_]+=[^[:space:]]*$ ]] || refuse "variant $label: '$word' is not ZT_NAME=value"
    done
    labels+=("$label") variant_trees+=("$tree") envs+=("$env_words") flags+=("$flag_words")
    [[ " ${trees[*]} " == *" $tree "* ]] || trees+=("$tree")
  done
  read -r -a ab_tests <<<"${AB_TESTS:-}"
  targets+=("${ab_tests[@]}")
}
task_run() {
  local common
  read -r -a common <<<"${AB_COMMON:-}"
  variant_flags=(--seq "${AB_SEQ:-128}" "${common[@]}")
  local batches status=0
  read -r -a batches <<<"${AB_BATCHES:-40 8}"
  gtest "${ab_tests[@]}" || { say "a GPU test failed: nothing timed"; return 1; }
  variant_rounds "$work/ab.log" "${AB_REPS:-3}" 20 "${batches[@]}" || status=1
  local pbs=${AB_PROFILE_BATCH:-8} i
  for i in "${!labels[@]}"; do
    if ((dry_run)); then variant_run "$i" --batch "$pbs" --steps 10 --profile; continue; fi
    variant_run "$i" --batch "$pbs" --steps 10 --profile >/dev/null 2>"$work/profile_bs${pbs}_${labels[$i]}.txt"
  done
  local kernels shape tree substring
  read -r -a kernels <<<"${AB_BENCH:-}"
  read -r -a shape <<<"${AB_BENCH_SHAPE:-40 128}"
  for substring in "${kernels[@]}"; do
    for tree in "${trees[@]}"; do
      x --timeout 240 --to "$work/zt_bench_${substring}_$(basename "$tree").txt" "$(bin_of "$tree")/zt_bench" \
        --only "$substring" --batch "${shape[0]}" --seq "${shape[1]}" || status=1
      ((dry_run)) || say "zt_bench $substring $(basename "$tree"): $(grep -h 'median\|ceilings' \
        "$work/zt_bench_${substring}_$(basename "$tree").txt"* | tr -s ' ' | tr '\n' ';' | cut -c1-900)"
    done
  done
  return "$status"
}
