#!/usr/bin/env bash
# One device call for the ZeRO work: native build, the GPU tests, the bs-40 bf16 step at ZeRO stages 0-3
# (world size 1: the engine's overhead over stage 0), train_mrpc end to end with a ZeRO-3 config, and the
# step against torch.compile. Everything lands in $OUT (or ./gpu-zero-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-zero-out}
mkdir -p "$out"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" -- -k 0 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
(cd build-gpu && ctest -L gpu -j4 --timeout 300 >"$out/ctest_gpu.txt" 2>&1)
tail -5 "$out/ctest_gpu.txt"
grep -E "Failed|\*\*\*" "$out/ctest_gpu.txt" | head -20
for stage in 0 1 2 3; do
  build-gpu/bin/bench_train_step --batch 40 --seq 128 --dtype bf16 --steps 10 --zero_stage $stage \
    >"$out/step_stage$stage.json" 2>"$out/step_stage$stage.txt"
  echo "stage $stage: $(tr -d '\n' <"$out/step_stage$stage.json" | head -c 400)"
done
cat >"$out/z3.json" <<'JSON'
{"zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": "auto",
 "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"},
 "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}
JSON
timeout 200 build-gpu/bin/train_mrpc --deepspeed_config "$out/z3.json" --max_train_steps 60 \
  --output_dir "$out/z3run" >"$out/train_z3.txt" 2>&1
echo "train_mrpc z3 exit $?"; grep -E "^epoch|^test|^done|error|ZeRO stage" "$out/train_z3.txt" | head
rm -rf "$out/z3run"/*.zero "$out/z3run/model.h5"
timeout 240 python3 scripts/bench_vs_torch.py --zt-bin build-gpu/bin/bench_train_step --batches 40 \
  --dtypes bf16 --impls compile,zerotrain --json-out "$out/bs40_bf16.json" >"$out/bs40_bf16.txt" 2>&1
tail -8 "$out/bs40_bf16.txt"
