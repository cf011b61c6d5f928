#!/usr/bin/env bash
# The one way to run zerotrain on the GPU machine: one configure-and-build step, then a task.
#
#   scripts/device/run.sh [--dry-run] <task> [args]
#
# Tasks (scripts/device/tasks/<task>.sh; each names the build targets it needs and what it runs):
#   tests                       every GPU test (ctest -L gpu), the record kept
#   goals                       the goals table (scripts/bench_vs_torch.py --goals), continued across calls
#   ab <base-tree> [variant..]  the training step of two trees (or variants) timed in turn, last losses compared
#   bench                       every kernel (zt_bench) and the step at the goals' shapes
#   profile [BxS ...]           the step profile and every kernel's time (ncu) per shape
#   offload [--deepspeed]       CPU offload: its GPU tests, CPU AdamW, offloaded steps, largest batches
#   zero [--np N]               ZeRO stages: memory per rank at world 1/2/4, the blog's configs, mpirun curves
#   disk [--deepspeed]          the disk tier: disk rates, the NVMe-offloaded step, the largest model
#   validate [--xlarge]         golden fixtures and tokenizer parity regenerated here, compared with the committed
#   flash [--quick]             the flash attention: its GPU tests, long-sequence steps, the core, determinism
#   long [--candidate DIR|FILE.patch [--candidate-only]] [--with-compile]
#                               long documents: GPU tests, 1x16384, steps and cores beside FlashDeBERTa/df (compile
#                               opt-in); a candidate kernel tree tested and timed beside this one in the same call
#   plan [--quick] [--parts L]  issue 40: calibration, plan grids vs --auto_plan per cap, partial, delayed, 6.2 B, DeepSpeed
#   flashdiag                   the flash backward's time by part (scripts/device/patches/flashdiag.patch, applied
#                               to this copy only), at 4x2048 and 1x8192
#   flashncu [--candidate DIR|FILE.patch]
#                               Nsight Compute's full set on one flash backward launch at 4x2048 (by SASS line)
#
# The build: build-gpu/ (Ninja, Release, sm_90a), only the targets the task needs, liburing always (the disk
# tier's io_uring backend): from .device-deps/ (scripts/device_deps.sh here; carry ".device-deps") or the
# system; neither ends the call before the build. NCCL_NVLS_ENABLE=0 for every run.
# Outputs: $OUT/summary.txt (one line per result, as it lands) and $OUT/<task>.tgz (the raw outputs, packed
# after every result: the device tool brings back at most 8 files, and a call cut short keeps what it measured).
# --dry-run prints the plan (liburing source, build, every command) and runs nothing.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
device_dir=$root/scripts/device

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}
refuse() {  # the reason; exit 2 before anything is built
  echo "scripts/device/run.sh: $*" >&2
  exit 2
}

dry_run=0
while [[ ${1:-} == --* ]]; do
  case $1 in
  --dry-run) dry_run=1 ;;
  --help) usage ;;
  *) refuse "unknown option $1" ;;
  esac
  shift
done
(($# >= 1)) || usage
task=$1
shift
[[ $task =~ ^[a-z_]+$ && -f $device_dir/tasks/$task.sh ]] ||
  refuse "unknown task '$task' (tasks: $(cd "$device_dir/tasks" && ls -- *.sh | sed 's/\.sh$//' | tr '\n' ' '))"

out=${OUT:-$root/device-out}
work=${ZT_DEVICE_WORK:-/tmp/zt-device}/$task  # raw outputs of this call; packed into $out/$task.tgz
summary=$out/summary.txt
bin=build-gpu/bin
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start)) s"; }
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

# --- helpers the tasks use ---------------------------------------------------------------------------------
pack() {
  ((dry_run)) && return 0
  local tmp=$out/$task.tgz.$BASHPID.tmp  # one per process: the trees' builds run side by side
  tar czf "$tmp" -C "$(dirname "$work")" --exclude='*.h5' --exclude='*.zero' \
    --exclude='*.ncu-rep' --exclude='*.nsys-rep' --exclude='*.sqlite' "$task" 2>/dev/null &&
    mv "$tmp" "$out/$task.tgz"
}
say() {  # one result line: to stdout and $OUT/summary.txt, then the outputs packed
  echo "$*"
  ((dry_run)) && return 0
  echo "$*" >>"$summary"
  pack
}
# x [--to FILE] [--timeout S] command...: runs it (stdout to FILE, stderr to FILE's .err), or prints it.
x() {
  local to="" limit=""
  while [[ $1 == --to || $1 == --timeout ]]; do
    [[ $1 == --to ]] && to=$2 || limit=$2
    shift 2
  done
  if ((dry_run)); then
    echo "run: ${limit:+timeout $limit }$*${to:+ > $to}"
    return 0
  fi
  local cmd=("$@")
  [[ -n $limit ]] && cmd=(timeout "$limit" "$@")
  if [[ -n $to ]]; then "${cmd[@]}" >"$to" 2>"$to.err"; else "${cmd[@]}"; fi
}
# step LABEL FLAGS...: one bench_train_step run (seq 128, bf16 unless the flags say otherwise); its JSON line
# goes to steps.jsonl and a digest to the summary. Returns 1 when it failed (or in a dry run).
step() {
  local label=$1 line defaults=()
  shift
  [[ " $* " == *" --seq "* ]] || defaults+=(--seq 128)
  [[ " $* " == *" --dtype "* ]] || defaults+=(--dtype bf16)
  if ((dry_run)); then
    echo "run: $bin/bench_train_step ${defaults[*]} $*    # $label"
    return 1
  fi
  line=$(timeout "${STEP_TIMEOUT:-150}" $bin/bench_train_step "${defaults[@]}" "$@" 2>"$work/err.txt" | tail -1)
  if [[ $line == \{* ]]; then
    echo "$line" >>"$work/steps.jsonl"
    say "$label: $(echo "$line" | python3 "$device_dir/summaries.py" step)"
    grep -E "optimizer|forward|backward|offload" "$work/err.txt" | head -12 >>"$work/profiles.txt"
    return 0
  fi
  say "$label: FAILED $(grep -v '^\s*$' "$work/err.txt" | tail -2 | tr '\n' ' ' | head -c 400)"
  return 1
}
# largest_batch LABEL GUESS FLAGS...: the largest batch (multiple of 8) under 24 GiB: it fits, +8 does not.
largest_batch() {
  local label=$1 b=$2
  shift 2
  ((dry_run)) && { echo "plan: largest batch under 24 GiB, $label, from $b: $*"; return 0; }
  while ((b > 8)) && ! step "$label b$b" --batch "$b" --steps 1 --gpu_memory_limit 24GiB "$@"; do b=$((b - 8)); done
  while ((b < 4096)) && step "$label b$((b + 8))" --batch $((b + 8)) --steps 1 --gpu_memory_limit 24GiB "$@"; do
    b=$((b + 8))
  done
  say "LARGEST under 24 GiB, $label: batch $b"
}
# gtest NAME...: GPU test binaries, one summary line each, failures kept; returns 1 when any failed.
gtest() { gtest_in . "$@"; }
# gtest_in TREE NAME...: the same with TREE's binaries (bin_of); another tree's outputs are named after it.
gtest_in() {
  local tree=$1 t status failed=0 name
  shift
  for t in "$@"; do
    name=$t
    [[ $tree == . ]] || name=$(basename "$tree")_$t
    x --timeout 300 --to "$work/$name.txt" "$(bin_of "$tree")/$t"
    status=$?
    ((dry_run)) && continue
    ((status == 0)) || failed=1
    say "$name exit $status: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$work/$name.txt" | tr '\n' ' ')"
    grep -B3 -A12 "Failure" "$work/$name.txt" | head -40 >>"$work/failures.txt"
  done
  return "$failed"
}
# Variants (the ab task; long --candidate): parallel arrays of label, source tree, env words (ZT_NAME=value) and
# bench_train_step flags; variant_flags are every variant's common flags (the task sets them).
labels=() variant_trees=() envs=() flags=() variant_flags=()
variant_run() {  # variant index, then bench_train_step flags
  local i=$1 env_words flag_words
  shift
  read -r -a env_words <<<"${envs[$i]}"
  read -r -a flag_words <<<"${flags[$i]}"
  x --timeout 150 env "${env_words[@]}" "$(bin_of "${variant_trees[$i]}")/bench_train_step" --dtype bf16 \
    --dropout 0.1 "${variant_flags[@]}" "$@" "${flag_words[@]}"
}
# variant_rounds LOG REPS STEPS BATCH...: per batch, REPS rounds of every variant in turn (so drift on the machine
# shows in every column), one line a run in LOG; then summaries.py ab's lines (mean step per variant, ratio to
# its reference, last losses' bits) as results, kept in LOG's _summary.txt. Returns 1 when a run failed or a
# variant's last loss differs from its reference's.
variant_rounds() {
  local log=$1 reps=$2 steps=$3 bs rep i line
  shift 3
  for i in "${!labels[@]}"; do
    line="variant ${labels[$i]}: tree ${variant_trees[$i]} env ${envs[$i]:-none} flags ${flags[$i]:-none}"
    say "$line"
    ((dry_run)) || echo "$line" >>"$log"
  done
  for bs in "$@"; do
    for rep in $(seq "$reps"); do
      for i in "${!labels[@]}"; do
        if ((dry_run)); then
          variant_run "$i" --batch "$bs" --steps "$steps"
          continue
        fi
        line=$(variant_run "$i" --batch "$bs" --steps "$steps" 2>"$work/err.txt" | tail -1)
        if [[ $line == \{* ]]; then
          echo "bs$bs ${labels[$i]} #$rep: $(echo "$line" | python3 "$device_dir/summaries.py" ab-run)" | tee -a "$log"
          pack
        else
          echo "bs$bs ${labels[$i]} #$rep: FAILED $(tail -3 "$work/err.txt" | tr '\n' ' ')" | tee -a "$log"
        fi
      done
    done
  done
  ((dry_run)) && return 0
  python3 "$device_dir/summaries.py" ab "$log" "${labels[@]}" >"${log%.log}_summary.txt"
  while read -r line; do say "$line"; done <"${log%.log}_summary.txt"
  ! grep -q 'FAILED\|differs' "${log%.log}_summary.txt"
}

# --- the task: its targets, its arguments checked before anything is built ---------------------------------
targets=()             # the task's build targets in this tree; "all" builds everything
other_tree_targets=()  # in the other trees (the ab task's base, long's candidate), when not the same
trees=(.)    # source trees to build (the ab task adds its base tree, long its candidate)
other_tree_build=""    # the other tree's build folder, when not <tree>/build-gpu (one other tree only)
other_tree_optional=0  # 1: a failed build of another tree leaves it out (unbuilt_trees) instead of ending the call
# bin_of TREE: where TREE's binaries are built.
bin_of() {
  if [[ $1 == . ]]; then echo "$bin"; elif [[ -n $other_tree_build ]]; then echo "$other_tree_build/bin"
  else echo "$1/$bin"; fi
}
task_args() { (($# == 0)) || refuse "$task takes no arguments (got: $*)"; }
# candidate_tree DIR|FILE.patch: a task's --candidate (then $candidate), another source tree built beside this
# one into build-gpu-candidate/ (outside the carried folder, whose copy a later call replaces), checked here.
# A patch (`git diff main BRANCH > NAME.patch`, in an ignored folder named in carry) becomes .candidates/NAME:
# this tree's sources with it applied, made on the machine. Kilobytes a candidate instead of a ~14 MB tree
# each, so several fit one call's 64 MiB of carry.
candidate=""
candidate_tree() {
  [[ -n ${1:-} ]] || refuse "$task: --candidate needs a source tree or a .patch"
  local tree=$1
  if [[ $1 == *.patch ]]; then
    [[ -f $1 ]] || refuse "$task: --candidate: no patch at '$1'"
    tree=.candidates/$(basename "$1" .patch)
    if ((dry_run)); then
      echo "candidate: $tree = this tree's sources + $1"
    else
      tree_from_patch "$1" "$tree" || refuse "$task: --candidate: $1 does not apply to this tree"
    fi
  else
    [[ -f $1/CMakeLists.txt ]] || refuse "$task: --candidate: no source tree at '$1'"
    [[ $(realpath "$1") != "$(realpath .)" ]] || refuse "$task: --candidate is this tree"
  fi
  # shellcheck disable=SC2034  # read by the task
  candidate=$tree
  trees+=("$tree")
  other_tree_build=build-gpu-candidate
}
# tree_from_patch PATCH DIR: DIR (made afresh) = this tree's files but builds, outputs and carried folders,
# with PATCH applied (patch -p1, as git diff writes it).
tree_from_patch() {
  rm -rf "$2" && mkdir -p "$2" || return 1
  tar -cf - --exclude='./build*' --exclude='./.candidates' --exclude='./.wt-*' --exclude='./.long' \
    --exclude='./.git' --exclude='./docs/bench' --exclude='./.whl' --exclude='./.device-deps' --exclude='./.plan' \
    --exclude='./device-out' . | tar -xf - -C "$2" || return 1
  patch -s -d "$2" -p1 --forward <"$1"
}
# shellcheck source=/dev/null
source "$device_dir/tasks/$task.sh"
task_args "$@"
((${#targets[@]})) || refuse "task $task names no build targets"

# --- liburing: carried in .device-deps/, else the system's; neither ends the call ---------------------------
deps=${ZT_DEVICE_DEPS:-$root/.device-deps}
uring_flags=()
if [[ -f $deps/liburing/lib/liburing.a && -f $deps/liburing/include/liburing.h ]]; then
  uring_flags=(-DLIBURING_INCLUDE_DIR="$deps/liburing/include" -DLIBURING_LIBRARY="$deps/liburing/lib/liburing.a")
  uring="carried ($deps/liburing)"
elif [[ -f ${ZT_SYSTEM_URING_HEADER:-/usr/include/liburing.h} ]]; then
  uring="system"
else
  refuse "no liburing (the disk tier would fall back to its thread pool): run scripts/device_deps.sh on the" \
    "build machine and carry .device-deps"
fi

# --- one configure-and-build step for every tree -------------------------------------------------------------
# A tree's sources by content (sha1, path), build folders and dot-folders left out. A carried tree keeps the
# mtimes of this machine, and one from `git archive` its commit's: older than the objects of another tree built
# in the same folder before, so Ninja would keep them. The files whose content differs from the last good
# build's are touched before building, and this build's list replaces it only once the build succeeds.
source_hashes() {  # TREE
  (cd "$1" && find . -path './build*' -prune -o -path './.*' -prune -o -type f -print0 | sort -z |
    xargs -0 -r sha1sum)
}
sources_list() {  # TREE: where this call's build keeps the tree's source_hashes (among the outputs)
  echo "$work/build_$(basename "$(realpath "$1")")_sources.txt"
}
touch_changed_sources() {  # TREE BUILT_LIST NEW_LIST
  [[ -f $2 ]] || return 0
  awk 'NR == FNR { built[$2] = $1; next } built[$2] != $1 { print $2 }' "$2" "$3" |
    (cd "$1" && xargs -r -d '\n' touch)
}
build() {  # TREE: configure (Ninja, Release, liburing) and build the task's targets
  local tree=$1 log
  local dir
  dir=$(dirname "$(bin_of "$tree")")
  local configure=(cmake -S "$tree" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${uring_flags[@]}")
  local make=(cmake --build "$dir" -j"$(nproc)") want=("${targets[@]}")
  [[ $tree != . ]] && ((${#other_tree_targets[@]})) && want=("${other_tree_targets[@]}")
  [[ ${want[*]} == all ]] || make+=(--target "${want[@]}")
  if ((dry_run)); then
    echo "build: ${configure[*]}"
    echo "build: ${make[*]}"
    return 0
  fi
  # A build folder another generator made cannot switch to Ninja, nor one configured for another source tree
  # (a candidate under a new name) to this one: start it again.
  local cache=$dir/CMakeCache.txt configured_for
  if [[ -f $cache ]]; then
    configured_for=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")
    if ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$cache" ||
      [[ $(realpath -m "$configured_for") != $(realpath "$tree") ]]; then
      rm -rf "$dir"
    fi
  fi
  log=$work/build_$(basename "$(realpath "$tree")").log
  local sources
  sources=$(sources_list "$tree")
  source_hashes "$tree" >"$sources"
  touch_changed_sources "$tree" "$dir/zt_source_hashes.txt" "$sources"
  if ! { "${configure[@]}" >"$log" 2>&1 && "${make[@]}" >>"$log" 2>&1 &&
    cp "$sources" "$dir/zt_source_hashes.txt"; }; then
    say "build of $tree failed ($(elapsed)):"
    grep -B2 -A8 -E "error|Error" "$log" | head -60 | tee -a "$summary"
    pack
    exit 1
  fi
  say "built $tree (${want[*]}; liburing $uring): $(elapsed)"
}

if ((dry_run)); then
  echo "task: $task $*"
  echo "liburing: $uring"
  echo "outputs: $out/summary.txt, $out/$task.tgz"
else
  rm -rf "$work" "$out/$task.tgz"
  mkdir -p "$out" "$work"
  echo "# $task $* on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)," \
    "zerotrain $(git describe --always --dirty 2>/dev/null || echo unknown)" >>"$summary"
  trap pack EXIT
fi
# Trees build side by side (a fresh machine's build is mostly single-file nvcc tails). A failed build ends the
# call, except another tree's where the task sets other_tree_optional: that tree goes in unbuilt_trees.
unbuilt_trees=()
if ((dry_run || ${#trees[@]} == 1)); then
  for tree in "${trees[@]}"; do build "$tree"; done
else
  builds=()
  for tree in "${trees[@]}"; do
    build "$tree" &
    builds+=($!)
  done
  for i in "${!trees[@]}"; do
    wait "${builds[$i]}" && continue
    [[ ${trees[$i]} != . ]] && ((${other_tree_optional:-0})) || exit 1
    unbuilt_trees+=("${trees[$i]}")
  done
fi
task_run "$@"
status=$?
say "$task done: exit $status, $(elapsed)"
exit "$status"
