# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# zero [--np N]: ZeRO stages 0-3 on the xlarge (seq 128, bf16, batch 40 per rank):
#   1. test_zero_training_gpu (every stage's steps equal stage 0's bit for bit);
#   2. the memory table: in-process ranks sharing the GPU, each capped at 24 GiB, world sizes 1, 2 and 4: every
#      rank's peak by category beside the estimator's plan (memory.jsonl, memory.txt);
#   3. the largest stage-0 batch per rank at world size 2 under 24 GiB (the blog's table);
#   4. the blog's DeepSpeed configs (tools/configs/blog_*.json) with train_mrpc at world size 2;
#   5. train_mrpc under `mpirun -np N` (NCCL; default 1, one process per GPU), stages 0-3, 40 steps: each
#      stage's loss curve against stage 0's.
targets=(bench_train_step train_mrpc test_zero_training_gpu)
np=1
task_args() {
  case "$*" in
  "") ;;
  --np\ [1-8]) np=$2 ;;
  *) refuse "zero takes [--np N] with N of 1-8 (got: $*)" ;;
  esac
}
memory_step() {  # WORLD STAGE: one JSON line, or one naming the error
  local line
  if ((dry_run)); then
    echo "run: $bin/bench_train_step --batch 40 --seq 128 --dtype bf16 --steps 5 --zero_stage $2 --world_size $1 --gpu_memory_limit 24GiB"
    return 0
  fi
  line=$(timeout 120 $bin/bench_train_step --batch 40 --seq 128 --dtype bf16 --steps 5 --zero_stage "$2" \
    --world_size "$1" --gpu_memory_limit 24GiB 2>"$work/err.txt" | tail -1)
  [[ $line == \{* ]] && echo "$line" ||
    python3 -c 'import json, sys; print(json.dumps({"world_size": int(sys.argv[1]), "zero_stage": int(sys.argv[2]),
      "error": open(sys.argv[3]).read()[-300:]}))' "$1" "$2" "$work/err.txt"
}
task_run() {
  local world stage cfg
  gtest test_zero_training_gpu
  ((dry_run)) || : >"$work/memory.jsonl"
  for world in 1 2 4; do
    for stage in 0 1 2 3; do
      if ((dry_run)); then memory_step $world $stage; else memory_step $world $stage >>"$work/memory.jsonl"; fi
    done
  done
  if ((!dry_run)); then
    python3 "$device_dir/summaries.py" zero-memory "$work/memory.jsonl" >"$work/memory.txt" 2>&1
    tee -a "$summary" <"$work/memory.txt"
    pack
  fi
  largest_batch "world 2 stage 0" 56 --zero_stage 0 --world_size 2
  for cfg in blog_zero2_fp16 blog_zero3_bf16; do
    x --timeout 240 --to "$work/train_$cfg.txt" $bin/train_mrpc --deepspeed_config tools/configs/$cfg.json \
      --world_size 2 --per_device_train_batch_size 16 --max_train_steps 60 --output_dir "$work/run_$cfg"
    ((dry_run)) || say "$cfg exit $?: $(grep -E '^ZeRO stage|^epoch [0-9]+:|^done|rror' "$work/train_$cfg.txt" | tr '\n' ' ' | head -c 600)"
  done
  ((dry_run)) || command -v mpirun >/dev/null || { say "mpirun: not on this machine"; return 0; }
  for stage in 0 1 2 3; do
    ((dry_run)) || echo "{\"zero_optimization\": {\"stage\": $stage}, \"bf16\": {\"enabled\": true}}" >"$work/z$stage.json"
    x --timeout 300 --to "$work/mpirun_z$stage.txt" mpirun --allow-run-as-root -np "$np" -x NCCL_NVLS_ENABLE \
      $bin/train_mrpc --deepspeed_config "$work/z$stage.json" --max_train_steps 40 --log_every 1 \
      --per_device_train_batch_size 16 --output_dir "$work/run$stage"
    ((dry_run)) || say "mpirun -np $np stage $stage exit $?: $(grep -E '^ZeRO stage|^done' "$work/mpirun_z$stage.txt" | tr '\n' ' ')"
  done
  if ((!dry_run)); then
    python3 "$device_dir/summaries.py" mpirun "$work" 2>&1 | tee -a "$summary"
    pack
  fi
  return 0
}
