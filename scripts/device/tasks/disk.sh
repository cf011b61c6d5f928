# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# disk [--deepspeed]: the disk tier's record (the xlarge, seq 128, bf16, batch 40), in one call:
#   1. the disk: dd with O_DIRECT (write, then read) and bench_disk (the tier's own store per block size and
#      queue depth); the CPU AdamW over the xlarge shard (bench_cpu_adam);
#   2. the ZeRO-2 step with the optimizer state in host memory (the update inside step()) and on the disk
#      tier (4 buffers, pipelined), at ZeRO-3, and with sub_group_size 2e7;
#   3. the summary (disk_summary.json): the floor max(disk time of the state's 12 bytes per parameter read
#      and written, CPU AdamW) against the disk-tier step's excess over the host-offload step;
#   4. the largest model under a 32 GiB host cap (ZeRO-3 + both offloads, batch 8, more layers) by the
#      estimator, with and without the disk tier, run; 4 layers more without it must be refused.
# --deepspeed: then DeepSpeed's NVMe offload on the same disk (scripts/device/ds_nvme_anchor.sh, ~5 minutes;
# carry [".ds", ".device-deps"]). ZT_NVME_DIR (default /tmp/zt-nvme) is the tier's folder.
targets=(bench_disk bench_cpu_adam bench_train_step)
with_deepspeed=0
task_args() {
  case "$*" in
  "") ;;
  --deepspeed) with_deepspeed=1 ;;
  *) refuse "disk takes [--deepspeed] (got: $*)" ;;
  esac
}
largest_layers() {  # bench_train_step flags: the most layers (step 4) whose plan fits the host cap and disk
  python3 - "$bin/bench_train_step" "$nvme" "$@" <<'PY'
import json, shutil, subprocess, sys
binary, folder, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
free_gib = shutil.disk_usage(folder).free / 2**30
best = 0
for layers in range(4, 1000, 4):
    out = subprocess.run([binary, "--estimate_only", "--layers", str(layers), *flags], capture_output=True,
                         text=True, check=True).stdout
    plan = json.loads(out)["estimate_gib"]
    if plan["host"] > 32 or plan["disk"] > 0.9 * free_gib:
        break
    best = layers
print(best)
PY
}
disk_step() {  # name, then flags: the bs-40 ZeRO-2 step with the optimizer offloaded, JSON and profile kept
  local name=$1
  shift
  x --timeout 300 --to "$work/$name.json" $bin/bench_train_step --batch 40 --seq 128 --dtype bf16 --steps 1 \
    --zero_stage 2 --offload optimizer --pin_memory --profile "$@"
  ((dry_run)) || say "$name: $(python3 "$device_dir/summaries.py" step <"$work/$name.json" 2>&1 | head -c 400)"
}
nvme=${ZT_NVME_DIR:-/tmp/zt-nvme}
task_run() {
  ((dry_run)) || mkdir -p "$nvme"
  ((dry_run)) || { df -h "$nvme"; findmnt -T "$nvme"; } >"$work/df.txt" 2>&1
  x --to "$work/dd_write.txt" dd if=/dev/zero of="$nvme/dd.bin" bs=4M count=1024 oflag=direct conv=fsync
  x --to "$work/dd_read.txt" dd if="$nvme/dd.bin" of=/dev/null bs=4M iflag=direct
  ((dry_run)) || rm -f "$nvme/dd.bin"
  x --to "$work/bench_disk.json" $bin/bench_disk --dir "$nvme" --size 2GiB --record 256MiB \
    --block_sizes 1MiB,4MiB --queue_depths 8,32
  x --to "$work/bench_cpu_adam.json" $bin/bench_cpu_adam --params 887M --reps 5
  disk_step step_offload_host --no_overlap_update
  disk_step step_offload_nvme --nvme_path "$nvme" --nvme_buffers 4 --nvme_pipeline
  disk_step step_offload_nvme_zero3 --nvme_path "$nvme" --nvme_buffers 4 --nvme_pipeline --zero_stage 3
  disk_step step_offload_nvme_sub_groups --nvme_path "$nvme" --nvme_buffers 4 --nvme_pipeline --sub_group_size 2e7
  if ((!dry_run)); then
    python3 "$device_dir/summaries.py" disk "$work" >"$work/disk_summary.json" 2>&1
    tee -a "$summary" <"$work/disk_summary.json"
    pack
  fi
  # The largest model under --host_memory_limit 32GiB: ZeRO-3 + both offloads, batch 8, xlarge width, deeper.
  local cap=(--zero_stage 3 --offload both --batch 8 --host_memory_limit 32GiB --warmup 0 --steps 1 --repeat_batch)
  local tier=(--nvme_path "$nvme" --nvme_pipeline --sub_group_size 2e7) plain=24 on_disk=24
  if ((!dry_run)); then
    plain=$(largest_layers "${cap[@]}")
    on_disk=$(largest_layers "${cap[@]}" "${tier[@]}")
    say "largest under a 32 GiB host cap by the plan: $plain layers without the disk tier, $on_disk with it"
  fi
  step "host cap 32 GiB, no disk, $plain layers" --layers "$plain" "${cap[@]}"
  step "host cap 32 GiB, no disk, $((plain + 4)) layers (must be refused)" --layers $((plain + 4)) "${cap[@]}"
  STEP_TIMEOUT=420 step "host cap 32 GiB, disk tier, $on_disk layers" --layers "$on_disk" "${cap[@]}" "${tier[@]}"
  if ((with_deepspeed)); then
    x --timeout 520 --to "$work/ds_nvme.txt" env OUT="$work/deepspeed" ZT_NVME_DIR="$nvme" \
      bash scripts/device/ds_nvme_anchor.sh
    ((dry_run)) || say "ds_nvme_anchor exit $?: $(grep -A1 'ds_nvme_anchor summary' "$work/ds_nvme.txt" | tail -1 | head -c 1500)"
  fi
  return 0
}
