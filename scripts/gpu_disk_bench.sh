#!/usr/bin/env bash
# The disk tier's record in one device call (issue 15), side by side in one run on the GPU machine:
#   1. the disk: `dd` with O_DIRECT (write, then read) and bench_disk (the disk tier's own store: write, read
#      and read+write per block size and queue depth);
#   2. the CPU AdamW over the xlarge shard (bench_cpu_adam);
#   3. the xlarge bf16 step at ZeRO-2 with the optimizer offloaded to host memory and to the disk tier
#      (bench_train_step --offload optimizer [--nvme_path]), and the disk tier at ZeRO-3 (DeepSpeed's row);
#   4. the floor max(disk time of the shard's bytes, CPU AdamW): the state (12 bytes per parameter: master,
#      m, v) is read and written once per step, so the disk time is 12 P / read + 12 P / write at bench_disk's
#      best rates, and the disk-tier step's excess over the host-offload step is compared with it.
# Everything lands in $OUT (or ./gpu-disk-bench-out); the last lines printed are the summary (JSON).
#
#   ZT_NVME_DIR=/local_nvme scripts/gpu_disk_bench.sh        # default dir: /tmp/zt-nvme
#   ZT_DISK_BENCH_SYNC=1 ...                                   # also the disk tier with 1 buffer, no overlap
#   ZT_DISK_STEPS=1 (timed steps after 3 warm-up ones), ZT_DISK_BENCH_SUB_GROUPS=0 (skip the sub-group run),
#   ZT_DISK_BENCH_ZERO3=0 (skip the ZeRO-3 run)
#   ZT_DISK_BENCH_DEEPSPEED=1 ...   # then DeepSpeed's NVMe offload in the same call (scripts/ds_nvme_anchor.sh,
#                                   # ~5 more minutes; carry [".ds", ".device-deps"]): its async_io op built against
#                                   # the carried libaio, its own disk rates, ZeRO-2 and ZeRO-3 with
#                                   # offload_optimizer nvme at batch 40; results in deepspeed/ and the summary
# The H200 machine's disk (2026-12-03): 1.6-1.9 GB/s write, 1.2-1.6 GB/s read with O_DIRECT, so the xlarge
# state (10.6 GB read and written) costs ~12 s a step there: each disk-tier run is ~1 minute per step.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/gpu-disk-bench-out}
dir=${ZT_NVME_DIR:-/tmp/zt-nvme}
mkdir -p "$out" "$dir"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
build=${ZT_BUILD_DIR:-build-gpu}
# shellcheck disable=SC2046  # the flags are words
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release $(scripts/device_cmake_flags.sh) >"$out/configure.log" 2>&1 &&
  cmake --build "$build" -j"$(nproc)" --target bench_disk bench_cpu_adam bench_train_step >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
bin=$build/bin
df -h "$dir" >"$out/df.txt" 2>&1
findmnt -T "$dir" >>"$out/df.txt" 2>&1

# 1. The disk: 8 GiB with dd, then the disk tier's store (4 GiB per configuration).
dd if=/dev/zero of="$dir/dd.bin" bs=4M count="${ZT_DD_BLOCKS:-2048}" oflag=direct conv=fsync 2>"$out/dd_write.txt"
dd if="$dir/dd.bin" of=/dev/null bs=4M iflag=direct 2>"$out/dd_read.txt"
rm -f "$dir/dd.bin"
"$bin/bench_disk" --dir "$dir" --size "${ZT_DISK_BENCH_SIZE:-4GiB}" --record 256MiB --block_sizes 1MiB,4MiB --queue_depths 8,32 \
  >"$out/bench_disk.json" 2>"$out/bench_disk.err"

# 2. The CPU AdamW over 887M parameters.
"$bin/bench_cpu_adam" --params "${ZT_ADAM_PARAMS:-887M}" --reps 5 >"$out/bench_cpu_adam.json" 2>"$out/bench_cpu_adam.err"

# 3. The step: optimizer state in host memory, then on the disk tier (4 buffers, both overlaps on).
step() {  # name, then bench_train_step arguments
  local name=$1
  shift
  "$bin/bench_train_step" --batch 40 --seq 128 --dtype bf16 --steps "${ZT_DISK_STEPS:-1}" --zero_stage 2 --offload optimizer \
    --pin_memory --profile "$@" >"$out/$name.json" 2>"$out/$name.txt"
}
# The host-memory step with the update inside step(): the summary's optimizer share of the disk-tier step
# (which cannot overlap the update) is the difference of the two plus the CPU AdamW.
step step_offload_host --no_overlap_update
step step_offload_nvme --nvme_path "$dir" --nvme_buffers 4 --nvme_pipeline
# The same state on disk at ZeRO-3 (parameters on the GPU): DeepSpeed swaps optimizer state only at stage 3,
# so this is the row beside its ZeRO-3 nvme run.
[[ ${ZT_DISK_BENCH_ZERO3:-1} == 1 ]] &&
  step step_offload_nvme_zero3 --nvme_path "$dir" --nvme_buffers 4 --nvme_pipeline --zero_stage 3
# The same with zero_optimization.sub_group_size 2e7: records of at most 20M elements (host buffers 0.9 GiB
# instead of the embeddings' 8.8 GiB), the update in 20M-element pieces.
[[ ${ZT_DISK_BENCH_SUB_GROUPS:-1} == 1 ]] &&
  step step_offload_nvme_sub_groups --nvme_path "$dir" --nvme_buffers 4 --nvme_pipeline --sub_group_size 2e7
[[ ${ZT_DISK_BENCH_SYNC:-0} == 1 ]] && step step_offload_nvme_sync --nvme_path "$dir" --nvme_buffers 1

# 4. Optional: DeepSpeed's NVMe offload on the same disk, after ours (its swap folder is $dir/deepspeed).
if [[ ${ZT_DISK_BENCH_DEEPSPEED:-0} == 1 ]]; then
  OUT="$out/deepspeed" ZT_NVME_DIR="$dir" bash scripts/ds_nvme_anchor.sh >"$out/deepspeed.txt" 2>&1
  tail -3 "$out/deepspeed.txt"
fi

# 5. The summary.
python3 - "$out" <<'EOF'
import json, re, sys, pathlib
out = pathlib.Path(sys.argv[1])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except Exception as e:  # a failed stage: say so, keep the rest
        return {"error": f"{name}: {e}"}
def dd_rate(name):
    text = (out / name).read_text() if (out / name).exists() else ""
    m = re.findall(r"copied, [\d.]+ s, ([\d.]+ [kMG]?B/s)", text)
    return m[-1] if m else text.strip()[-200:]
disk = load("bench_disk.json")
runs = disk.get("runs", [])
best_read = max((r["read_gbps"] for r in runs), default=0)
best_write = max((r["write_gbps"] for r in runs), default=0)
adam = load("bench_cpu_adam.json")
params = adam.get("params", 0)
adam_s = adam.get("adamw_seconds_median", 0)
disk_s = 12 * params / 1e9 / best_read + 12 * params / 1e9 / best_write if best_read and best_write else None
host = load("step_offload_host.json")
nvme = load("step_offload_nvme.json")
def optional(name):  # ZT_DISK_BENCH_SYNC, ZT_DISK_BENCH_SUB_GROUPS: a run not asked for is absent, not an error
    return load(name) if (out / name).exists() else {}
sync = optional("step_offload_nvme_sync.json")
sub_groups = optional("step_offload_nvme_sub_groups.json")
zero3 = optional("step_offload_nvme_zero3.json")
floor_s = max(disk_s or 0, adam_s)
summary = {
    "dir": str(disk.get("dir")), "dd_write": dd_rate("dd_write.txt"), "dd_read": dd_rate("dd_read.txt"),
    "bench_disk_best_write_gbps": best_write, "bench_disk_best_read_gbps": best_read,
    "cpu_adamw_s": adam_s, "params": params, "disk_s_for_state": disk_s, "floor_s": floor_s,
    "step_ms_offload_host": host.get("step_ms"), "step_ms_offload_nvme": nvme.get("step_ms"),
    "step_ms_offload_nvme_1_buffer": sync.get("step_ms"),
    "step_ms_offload_nvme_sub_group_2e7": sub_groups.get("step_ms"),
    "step_ms_offload_nvme_zero3": zero3.get("step_ms"),
}
if host.get("step_ms") and nvme.get("step_ms") and floor_s:
    # The disk tier adds the swap traffic to the host-offload step; its optimizer part is compared with the floor.
    summary["nvme_optimizer_s_vs_floor"] = round(((nvme["step_ms"] - host["step_ms"]) / 1e3 + adam_s) / floor_s, 3)
ds_path = out / "deepspeed" / "ds_nvme_anchor.json"
if ds_path.exists():  # ZT_DISK_BENCH_DEEPSPEED=1: DeepSpeed's figures beside ours
    ds = load("deepspeed/ds_nvme_anchor.json")
    build, aio, z3, z2 = (ds.get(k, {}) for k in ("build", "aio", "z3", "z2"))
    summary.update({
        "deepspeed_async_io_build": build.get("async_io", {}).get("status"),
        "deepspeed_aio_write_gbps": aio.get("write_gbps"), "deepspeed_aio_read_gbps": aio.get("read_gbps"),
        "step_ms_deepspeed_zero3_nvme": z3.get("step_ms"), "deepspeed_zero3_nvme_status": z3.get("status"),
        "deepspeed_zero3_nvme_engine_step_ms": (z3.get("phase_ms_fwd_bwd_step") or [None] * 3)[2],
        "deepspeed_zero3_nvme_timers_ms": z3.get("ds_timers_ms_median"),
        "deepspeed_zero3_nvme_peak_gib": z3.get("max_alloc_gib"), "deepspeed_zero3_swap_gb": z3.get("swap_gb_after_steps"),
        "step_ms_deepspeed_zero2_nvme_runs_as_cpu": z2.get("step_ms"), "deepspeed_zero2_swap_gb": z2.get("swap_gb_after_steps"),
    })
    if ds.get("errors"):
        summary["deepspeed_errors_in"] = sorted(ds["errors"])
for name, d in [("bench_disk", disk), ("bench_cpu_adam", adam), ("host", host), ("nvme", nvme),
                ("nvme_sub_groups", sub_groups), ("nvme_zero3", zero3)]:
    if "error" in d:
        summary[f"{name}_error"] = d["error"]
print(json.dumps(summary, indent=1))
EOF
