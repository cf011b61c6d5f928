#!/usr/bin/env bash
# A/B of the xlarge training step on the GPU machine, this tree against a base tree, in one device call:
#
#   git archive <base> | (mkdir -p .ab-base && tar -x -C .ab-base)    # here, before the call
#   scripts/gpu_step_ab.sh [tests...]                                  # there (carry [".ab-base", ...])
#
# Builds bench_train_step in both trees (build-gpu/ and .ab-base/build-gpu/), runs the named GPU test binaries
# of this tree first (a kernel change is timed only once it passes), then bs 40 and bs 8 (seq 128, bf16,
# dropout 0.1) alternating base / new three times each, so drift on the machine shows in both columns, and
# one profiled step of each at bs 40. One line per run in $OUT/ab.log, a summary at its end; the profiles
# and the tests' failures (tests.txt) beside it. The two-variant case of scripts/gpu_step_variants.sh
# (whose AB_SEQ, AB_BATCHES, AB_REPS and AB_COMMON apply here too).
#
# A switch or flag instead of a tree (one build): AB_BASE_TREE=. compares this tree with itself, the new
# runs under AB_NEW_ENV (VAR=value words) and with AB_NEW_ARGS (bench_train_step flags), e.g.
#   AB_BASE_TREE=. AB_NEW_ENV="ZT_GEMM_AUTOTUNE=1" scripts/gpu_step_ab.sh test_gemm_gpu
#   AB_BASE_TREE=. AB_NEW_ARGS="--overlap_optimizer" scripts/gpu_step_ab.sh
# Logs stay under /tmp/ab unless a build fails: the device tool brings back only a few files from $OUT, so a
# later command of the same call can add its own.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
base_tree=${AB_BASE_TREE:-.ab-base}
if [[ ! -d $base_tree ]]; then
  mkdir -p "${OUT:-$PWD/ab-out}"
  echo "no $base_tree tree (see the top of this script)" | tee -a "${OUT:-$PWD/ab-out}/ab.log"
  exit 2
fi
AB_TESTS="$*" AB_PROFILE_BATCH=${AB_PROFILE_BATCH:-40} exec scripts/gpu_step_variants.sh \
  "base|$base_tree||" "new|.|${AB_NEW_ENV:-}|${AB_NEW_ARGS:-}"
