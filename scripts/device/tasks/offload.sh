# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# offload [--deepspeed]: CPU offload on one GPU (the xlarge, seq 128, bf16): the offload GPU tests (offloaded
# steps equal device steps bit for bit), CPU AdamW against torch's (scripts/bench_cpu_adam_vs_torch.py), ZeRO-2
# steps with and without the optimizer offloaded (batch 40 and 128, the delayed update), and the largest batch
# under 24 GiB with the optimizer offloaded and with ZeRO-3 + both offloads.
# --deepspeed: DeepSpeed's ZeRO-2 (+ offload) and its largest batch first (.ds/run.sh parts b,d; copy
# ../shared/bench/deepspeed to .ds and carry it), and DeepSpeedCPUAdam beside ours.
targets=(bench_train_step bench_cpu_adam test_zero_offload_gpu test_zero_training_gpu)
with_deepspeed=0
task_args() {
  case "$*" in
  "") ;;
  --deepspeed) with_deepspeed=1 ;;
  *) refuse "offload takes [--deepspeed] (got: $*)" ;;
  esac
  ((with_deepspeed == 0)) || [[ -f .ds/run.sh ]] || refuse "--deepspeed: no .ds/run.sh (copy ../shared/bench/deepspeed to .ds, carry it)"
}
task_run() {
  gtest test_zero_offload_gpu test_zero_training_gpu
  local ds_env=()
  if ((with_deepspeed)); then
    x --to "$work/ds_stdout.txt" env OUT="$work/ds" bash .ds/run.sh --parts b,d --budget-s 300
    ((dry_run)) || say "DeepSpeed parts b,d: exit $? ($(elapsed)); $(tr -d '\n' <"$work/ds/ds_anchor.json" 2>/dev/null | head -c 3000)"
    # .ds/run.sh installed its wheels under /tmp/ds_site: DeepSpeedCPUAdam joins the CPU AdamW table.
    ds_env=(PYTHONPATH=/tmp/ds_site TORCH_EXTENSIONS_DIR=/tmp/tx DS_ACCELERATOR=cuda DS_SKIP_CUDA_CHECK=1)
  fi
  x --timeout 150 --to "$work/cpu_adam.txt" env "${ds_env[@]}" python3 scripts/bench_cpu_adam_vs_torch.py \
    --bench $bin/bench_cpu_adam --params 887M --threads "$(nproc)"
  ((dry_run)) || say "cpu adam exit $?: $(tail -4 "$work/cpu_adam.txt" | tr '\n' ' ')"
  step "zero2 bs40" --batch 40 --zero_stage 2 --steps 5
  step "zero2+offload bs40" --batch 40 --zero_stage 2 --offload optimizer --pin_memory --steps 5 --profile
  step "zero2+offload+dpu bs40" --batch 40 --zero_stage 2 --offload optimizer --pin_memory --delayed_update \
    --steps 5 --profile
  step "zero2+offload bs128" --batch 128 --zero_stage 2 --offload optimizer --pin_memory --steps 5 --profile
  largest_batch "zero2+offload" 112 --zero_stage 2 --offload optimizer --pin_memory
  largest_batch "zero3+both offloads" 120 --zero_stage 3 --offload both --pin_memory
  return 0
}
