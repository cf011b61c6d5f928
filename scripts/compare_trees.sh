#!/usr/bin/env bash
# Before/after check of a change that must not change results: the same train_mrpc runs (CPU backend, the
# embedded tiny default, fp32) with two builds, over the CLI matrix of ZeRO stages 0-3 x world sizes 1-4,
# optimizer offload to cpu and nvme, and parameter offload at stage 3. For each run it compares
#   - every step's train loss and gradient norm in metrics.jsonl, and the dev metrics of the epoch line;
#   - model.h5 and the mid-run checkpoint (step_3.h5, or each rank's file of step_3.zero/) with h5diff:
#     every dataset and attribute equal, bit for bit (the files' own timestamps are not compared);
#   - MRPC.tsv (the test predictions);
#   - the new build resuming the base build's step_3 checkpoint: it must end bit for bit where the base ended.
# Both builds read the same --data_dir (the default is compiled in as each tree's own path, and stored in
# the checkpoints).
#
#   scripts/compare_trees.sh BASE_BIN_DIR NEW_BIN_DIR          # e.g. /tmp/base/build-cpu/bin build-cpu/bin
#   ZT_COMPARE_CASES="s2_w2 s3_w4_nvme" scripts/compare_trees.sh ...   # a subset
#
# Prints one line per case (same / DIFFERENT: what) and a summary; exit status 1 when any case differs.
set -uo pipefail
(($# == 2)) || { echo "usage: $0 BASE_BIN_DIR NEW_BIN_DIR" >&2; exit 2; }
base_bin=$(realpath "$1") new_bin=$(realpath "$2")
for b in "$base_bin" "$new_bin"; do
  [[ -x $b/train_mrpc ]] || { echo "compare_trees: no train_mrpc in $b" >&2; exit 2; }
done
command -v h5diff >/dev/null || { echo "compare_trees: h5diff missing (hdf5-tools; scripts/setup.sh)" >&2; exit 2; }
data="$(cd "$(dirname "$0")/.." && pwd)/data/glue_mrpc"
work=$(mktemp -d "${TMPDIR:-/tmp}/zt_compare_trees.XXXXXX")
trap 'rm -rf "$work"' EXIT
head -41 "$data/dev.tsv" >"$work/small.tsv"
common=(--device cpu --data_dir "$data" --validation_file "$work/small.tsv" --test_file "$work/small.tsv" --max_train_steps 6
        --checkpointing_steps 3 --per_device_train_batch_size 8 --seed 42)

# case name -> "stage world offload_optimizer offload_param"
declare -A cases=()
for stage in 0 1 2 3; do
  for world in 1 2 3 4; do cases["s${stage}_w${world}"]="$stage $world none none"; done
done
for world in 1 2; do
  cases["s2_w${world}_cpu"]="2 $world cpu none"
  cases["s2_w${world}_nvme"]="2 $world nvme none"
  cases["s3_w${world}_cpu_param"]="3 $world cpu cpu"
done
cases["s3_w4_nvme"]="3 4 nvme none"
cases["s1_w3_cpu"]="1 3 cpu none"
read -r -a selected <<<"${ZT_COMPARE_CASES:-$(printf '%s\n' "${!cases[@]}" | sort | tr '\n' ' ')}"

write_config() {  # stage offload_optimizer offload_param file
  local optimizer="" param=""
  case $2 in
    cpu) optimizer=', "offload_optimizer": {"device": "cpu"}' ;;
    nvme) optimizer=', "offload_optimizer": {"device": "nvme", "nvme_path": "'"$work"'/nvme"}' ;;
  esac
  [[ $3 == cpu ]] && param=', "offload_param": {"device": "cpu"}'
  echo '{"zero_optimization": {"stage": '"$1$optimizer$param"'}}' >"$4"
}
# Fields of metrics.jsonl that are results (not timings or memory): one line per record.
results_of() {
  python3 - "$1" <<'EOF'
import json, sys
keys = ("type", "step", "epoch", "train_loss", "loss", "learning_rate", "grad_norm", "eval_accuracy", "eval_f1",
        "eval_loss", "accuracy", "f1", "skipped_steps", "loss_scale")
for line in open(sys.argv[1]):
    r = json.loads(line)
    print({k: r[k] for k in keys if k in r})
EOF
}
# h5diff of two checkpoints: a file, or a sharded folder's files one by one.
same_checkpoint() {
  local a=$1 b=$2 f
  if [[ -d $a ]]; then
    [[ -d $b ]] || return 1
    [[ "$(cd "$a" && ls)" == "$(cd "$b" && ls)" ]] || return 1
    for f in "$a"/*.h5; do h5diff -q "$f" "$b/$(basename "$f")" >/dev/null 2>&1 || return 1; done
    return 0
  fi
  h5diff -q "$a" "$b" >/dev/null 2>&1
}

differences=0
for name in "${selected[@]}"; do
  [[ -n ${cases[$name]:-} ]] || { echo "compare_trees: no case $name" >&2; exit 2; }
  read -r stage world opt param <<<"${cases[$name]}"
  dir="$work/$name"
  mkdir -p "$dir"
  write_config "$stage" "$opt" "$param" "$dir/ds.json"
  args=("${common[@]}" --world_size "$world" --deepspeed_config ../ds.json)
  problems=()
  # Each side runs in its own folder with the same relative --output_dir (the checkpoints store the
  # resolved configuration, output_dir included): base/out, new/out, resumed/out.
  for side in base new; do
    side_bin=$base_bin
    [[ $side == new ]] && side_bin=$new_bin
    rm -rf "$work/nvme" && mkdir -p "$work/nvme" "$dir/$side"
    if ! (cd "$dir/$side" && "$side_bin/train_mrpc" "${args[@]}" --output_dir out >"$dir/$side.log" 2>&1); then
      problems+=("$side run failed: $(grep -m1 'error' "$dir/$side.log")")
    fi
  done
  base=$dir/base/out new=$dir/new/out
  if ((${#problems[@]} == 0)); then
    [[ "$(results_of "$base/metrics.jsonl")" == "$(results_of "$new/metrics.jsonl")" ]] || problems+=("metrics.jsonl")
    cmp -s "$base/MRPC.tsv" "$new/MRPC.tsv" || problems+=("MRPC.tsv")
    h5diff -q "$base/model.h5" "$new/model.h5" >/dev/null 2>&1 || problems+=("model.h5")
    ckpt=step_3.h5
    [[ -d $base/step_3.zero ]] && ckpt=step_3.zero
    same_checkpoint "$base/$ckpt" "$new/$ckpt" || problems+=("$ckpt")
    # The new build continues the base build's checkpoint to the same end.
    mkdir -p "$dir/resumed/out"
    cp -r "$base/$ckpt" "$dir/resumed/out/"
    rm -rf "$work/nvme" && mkdir -p "$work/nvme"
    if (cd "$dir/resumed" && "$new_bin/train_mrpc" "${args[@]}" --output_dir out --resume_from_checkpoint "out/$ckpt" \
      >"$dir/resumed.log" 2>&1); then
      h5diff -q "$base/model.h5" "$dir/resumed/out/model.h5" >/dev/null 2>&1 ||
        problems+=("new build resuming the base checkpoint")
    else
      problems+=("new build cannot resume the base checkpoint: $(grep -m1 'error' "$dir/resumed.log")")
    fi
  fi
  last=$(results_of "$base/metrics.jsonl" 2>/dev/null | grep "'step'" | tail -1)
  if ((${#problems[@]})); then
    differences=$((differences + 1))
    echo "$name: DIFFERENT: ${problems[*]}"
  else
    echo "$name: same ($last)"
  fi
done
echo "compare_trees: $((${#selected[@]} - differences)) same, $differences different"
((differences == 0))
