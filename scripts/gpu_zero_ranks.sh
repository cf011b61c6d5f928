#!/usr/bin/env bash
# One device call for ZeRO over in-process ranks sharing the one GPU (the issue's H200 acceptance):
#   1. build the targets it needs (native, sm_90a) and run the shared-GPU rank tests;
#   2. the memory table: xlarge, seq 128, bf16, batch 40 per rank, each rank capped at 24 GiB, stages 0-3 at
#      world sizes 1, 2 and 4: every rank's peak by category (steady state, after warm-up) beside the
#      estimator's plan -> memory.jsonl;
#   3. the blog's table on one H200: the largest per-rank batch (multiple of 8) under 24 GiB at world size 2,
#      stages 0-3 (predicted from step 2's figures, then checked: the prediction fits, +8 does not)
#      -> max_batch.jsonl;
#   4. the blog's DeepSpeed configs (tools/configs/blog_zero2_fp16.json, blog_zero3_bf16.json) end to end
#      with train_mrpc at world size 2.
# Everything lands in $OUT (or ./gpu-ranks-out) as gpu_zero_ranks.tgz. Summaries go to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-ranks-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
targets=(bench_train_step train_mrpc test_zero_training_gpu ${EXTRA_TARGETS:-})
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" -- -k 0 >"$out/build.log" 2>&1 ||
  { grep -B2 -A8 "error" "$out/build.log" | head -60; exit 1; }
bin=build-gpu/bin
timeout 300 $bin/test_zero_training_gpu >"$out/test_zero_training_gpu.txt" 2>&1
echo "test_zero_training_gpu exit $?: $(grep -E "PASSED|FAILED" "$out/test_zero_training_gpu.txt" | tr '\n' ' ')"

step() {  # step WORLD STAGE BATCH STEPS -> one JSON line, or an error line
  local line
  line=$(timeout 120 $bin/bench_train_step --batch "$3" --seq 128 --dtype bf16 --steps "$4" --zero_stage "$2" \
    --world_size "$1" --gpu_memory_limit 24GiB 2>"$out/err_w$1_s$2_b$3.txt" | tail -1)
  if [[ "$line" == \{* ]]; then echo "$line"; else echo "{\"world_size\": $1, \"zero_stage\": $2, \"batch\": $3, \"error\": \"$(head -c 200 "$out/err_w$1_s$2_b$3.txt" | tr '\n"' ' _')\"}"; fi
}
: >"$out/memory.jsonl"
for world in 1 2 4; do
  for stage in 0 1 2 3; do step $world $stage 40 5 >>"$out/memory.jsonl"; done
done
python3 - "$out/memory.jsonl" <<'PY'
import json, sys
print("world stage  step_ms  samples/s | per-rank peak GiB (measured / estimated) by category")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(r["world_size"], r["zero_stage"], "ERROR", r["error"][:150]); continue
    m = max(r["ranks"], key=lambda x: x["peak_gib"]); e = r["estimate_gib"]; c = m["peak_by_category_gib"]
    print(f'{r["world_size"]:>5} {r["zero_stage"]:>5} {r["step_ms"]:8.2f} {r["samples_per_s"]:9.1f} | total {m["peak_gib"]:.3f}/{e["total"]:.3f}'
          f' params {c["parameters"]:.3f}/{e["parameters"]:.3f} grads {c["gradients"]:.3f}/{e["gradients"]:.3f}'
          f' master {c["master"]:.3f}/{e["master"]:.3f} adam {c["optimizer"]:.3f}/{e["optimizer"]:.3f}'
          f' comm {c["communication"]:.3f}/{e["buffers"]:.3f} act {c["activations"]:.3f}/{e["activations"]:.3f}'
          f' scratch {c["scratch"]:.3f} other {c["other"]:.3f}')
PY

# 3. Largest per-rank batch at world 2 under 24 GiB: the activations grow linearly in the batch.
: >"$out/max_batch.jsonl"
for stage in 0 1 2 3; do
  guess=$(python3 - "$out/memory.jsonl" "$stage" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("world_size") == 2 and r.get("zero_stage") == int(sys.argv[2]) and "ranks" in r:
        peak = max(x["peak_reserved_gib"] for x in r["ranks"]); act = r["estimate_gib"]["activations"]
        per_sample = act / 40; fixed = peak - act
        print(max(8, int((24 - fixed) / per_sample) // 8 * 8)); break
else:
    print(8)
PY
)
  b=$guess
  for attempt in 1 2 3 4; do
    r=$(step 2 $stage $b 2)
    if [[ "$r" == *'"error"'* ]]; then b=$((b - 8)); else break; fi
  done
  fits=$b
  for attempt in 1 2 3 4; do  # upwards until +8 fails
    above=$(step 2 $stage $((fits + 8)) 2)
    if [[ "$above" == *'"error"'* ]]; then break; fi
    fits=$((fits + 8)); r=$above
  done
  echo "{\"world_size\": 2, \"zero_stage\": $stage, \"predicted\": $guess, \"largest_fitting\": $fits, \"run\": $r}" >>"$out/max_batch.jsonl"
  echo "stage $stage: predicted $guess, largest batch per rank (x2 ranks) $fits; $((fits + 8)) does not fit"
done

# 4. The blog's configs end to end at world size 2.
for cfg in blog_zero2_fp16 blog_zero3_bf16; do
  timeout 240 $bin/train_mrpc --deepspeed_config tools/configs/$cfg.json --world_size 2 \
    --per_device_train_batch_size 16 --max_train_steps 60 --output_dir "$out/run_$cfg" >"$out/train_$cfg.txt" 2>&1
  echo "$cfg exit $?: $(grep -E "^ZeRO stage|^epoch [0-9]+:|^done|rror" "$out/train_$cfg.txt" | tr '\n' ' ' | head -c 600)"
  rm -rf "$out/run_$cfg"
done
# The device returns at most 8 files: everything in one archive.
tar -czf "$out/../gpu_zero_ranks.tgz" -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv "$out/../gpu_zero_ranks.tgz" "$out/"
