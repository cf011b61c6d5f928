#!/usr/bin/env bash
# A/B of the xlarge training step on the GPU machine, this tree against a base tree, in one device call:
#
#   git archive <base> | (mkdir -p .ab-base && tar -x -C .ab-base)    # here, before the call
#   scripts/gpu_step_ab.sh [tests...]                                  # there (carry [".ab-base", ...])
#
# Builds bench_train_step in both trees (build-gpu/ and .ab-base/build-gpu/), runs the named GPU test binaries
# of this tree first (a kernel change is timed only once it passes), then bs 40 and bs 8 (seq 128, bf16,
# dropout 0.1) alternating base / new three times each, so drift on the machine shows in both columns, and
# one profiled step of each at bs 40. One line per run in $OUT/ab.log; the profiles and the tests' failures
# (tests.txt) beside it.
#
# A switch or flag instead of a tree (one build): AB_BASE_TREE=. compares this tree with itself, the new
# runs under AB_NEW_ENV (VAR=value words) and with AB_NEW_ARGS (bench_train_step flags), e.g.
#   AB_BASE_TREE=. AB_NEW_ENV="ZT_GEMM_AUTOTUNE=1" scripts/gpu_step_ab.sh test_gemm_gpu
#   AB_BASE_TREE=. AB_NEW_ARGS="--overlap_optimizer" scripts/gpu_step_ab.sh Logs stay under /tmp/ab unless a build fails: the device tool brings back only a few
# files from $OUT, so a later command of the same call can add its own.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/ab-out}
logs=/tmp/ab
mkdir -p "$out" "$logs"
log="$out/ab.log"
export NCCL_NVLS_ENABLE=0
say() { echo "$*" | tee -a "$log"; }
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start)) s"; }
base_tree=${AB_BASE_TREE:-.ab-base}
read -r -a new_env <<<"${AB_NEW_ENV:-}"
read -r -a new_args <<<"${AB_NEW_ARGS:-}"
[[ -d $base_tree ]] || { say "no $base_tree tree (see the top of this script)"; exit 2; }
[[ -z "${AB_NEW_ENV:-}${AB_NEW_ARGS:-}" ]] || say "new runs: env ${AB_NEW_ENV:-(none)}, flags ${AB_NEW_ARGS:-(none)}"

build() {  # tree, targets...
  local tree=$1 build_log
  shift
  build_log="$logs/build_$(basename "$tree").log"
  # shellcheck disable=SC2046  # the flags are words
  (cd "$tree" && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release $(scripts/device_cmake_flags.sh) \
    >"$build_log" 2>&1 && cmake --build build-gpu -j"$(nproc)" --target "$@" >>"$build_log" 2>&1) ||
    { say "build of $tree failed:"; grep -B2 -A8 "error" "$build_log" | head -40 | tee -a "$out/tests.txt"; exit 1; }
}
build . bench_train_step "$@"
[[ $base_tree -ef . ]] || build "$base_tree" bench_train_step
say "built: $(elapsed)"

for t in "$@"; do
  timeout 300 build-gpu/bin/"$t" --gtest_brief=1 >"$logs/$t.txt" 2>&1
  say "$t exit $?: $(grep -E '^\[  (PASSED|FAILED)' "$logs/$t.txt" | tr '\n' ' ')"
  grep -B5 -A20 -E 'Failure|FAILED' "$logs/$t.txt" | head -80 >>"$out/tests.txt"
done

run() {  # label, base|new, flags...
  local label=$1 which=$2
  shift 2
  local line
  if [[ $which == base ]]; then
    line=$(timeout 150 "$base_tree/build-gpu/bin/bench_train_step" --seq 128 --dtype bf16 --dropout 0.1 "$@" \
      2>"$logs/err.txt" | tail -1)
  else
    line=$(env "${new_env[@]}" timeout 150 build-gpu/bin/bench_train_step --seq 128 --dtype bf16 --dropout 0.1 \
      "$@" "${new_args[@]}" 2>"$logs/err.txt" | tail -1)
  fi
  if [[ "$line" == \{* ]]; then
    say "$label: $(echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("step_ms", r["step_ms"], "peak_gib", r["peak_gib"], "loss_last", r["losses"][-1])')"
  else
    say "$label: FAILED $(tail -3 "$logs/err.txt" | tr '\n' ' ')"
  fi
}
for bs in 40 8; do
  for rep in 1 2 3; do
    run "bs$bs base #$rep" base --batch "$bs" --steps 20
    run "bs$bs new  #$rep" new --batch "$bs" --steps 20
  done
done
"$base_tree/build-gpu/bin/bench_train_step" --seq 128 --dtype bf16 --dropout 0.1 --batch 40 --steps 10 --profile \
  >/dev/null 2>"$out/profile_bs40_base.txt"
env "${new_env[@]}" build-gpu/bin/bench_train_step --seq 128 --dtype bf16 --dropout 0.1 --batch 40 --steps 10 \
  --profile "${new_args[@]}" >/dev/null 2>"$out/profile_bs40_new.txt"
say "done: $(elapsed)"
