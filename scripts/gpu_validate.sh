#!/usr/bin/env bash
# One batched run on the GPU machine (HF transformers installed there): builds everything natively for
# sm_90a, runs every test (the GPU label included), regenerates the golden fixtures under that machine's
# transformers/torch and compares them with the committed ones, and rechecks tokenizer parity against its
# transformers version. Results go to $OUT (or ./gpu-validate-out).
#
#   scripts/gpu_validate.sh            # everything
#   ZT_GPU_VALIDATE_SKIP_GOLDEN=1 scripts/gpu_validate.sh
#   ZT_GPU_VALIDATE_XLARGE=1 scripts/gpu_validate.sh     # also convert_hf on a full-size xlarge-mnli
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-validate-out}
mkdir -p "$out"
jobs=$(nproc)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
status=0
step() { echo "== $*" | tee -a "$out/summary.txt"; }

step "build ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
start=$(date +%s)
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$jobs" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; status=1; }
echo "build seconds: $(( $(date +%s) - start ))" | tee -a "$out/summary.txt"

if [[ $status -eq 0 ]]; then
  step "ctest -L gpu"
  ctest --test-dir build-gpu -L gpu --output-on-failure -j8 >"$out/ctest_gpu.log" 2>&1 || status=1
  tail -15 "$out/ctest_gpu.log" | tee -a "$out/summary.txt"
fi

if [[ -z "${ZT_GPU_VALIDATE_SKIP_GOLDEN:-}" ]]; then
  python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" \
    | tee -a "$out/summary.txt"
  step "golden model fixtures regenerated here vs committed"
  mkdir -p "$out/fixtures"
  python3 tools/golden/make_model_fixtures.py --out_dir "$out/fixtures" >"$out/golden.log" 2>&1 &&
    python3 tools/golden/compare_fixtures.py tests/fixtures "$out/fixtures" deberta_tiny.h5 deberta_tiny_padded.h5 \
      deberta_xlarge_layout.h5 >"$out/compare.log" 2>&1 || status=1
  tail -25 "$out/compare.log" | tee -a "$out/summary.txt"
  step "bf16 autocast 50-step loss curve regenerated here vs committed"
  python3 tools/golden/make_mrpc_training_fixture.py --dtype bf16 --out_dir "$out/fixtures" >"$out/golden_bf16.log" 2>&1 &&
    python3 tools/golden/compare_fixtures.py tests/fixtures "$out/fixtures" deberta_mrpc_train50_bf16.h5 \
      >"$out/compare_bf16.log" 2>&1 || status=1
  tail -8 "$out/compare_bf16.log" | tee -a "$out/summary.txt"
  step "tokenizer parity against this machine's transformers"
  python3 tools/golden/make_token_fixture.py --out "$out/mrpc_tokens_here.h5" >"$out/tokens.log" 2>&1 &&
    ZT_MRPC_TOKEN_FIXTURE="$out/mrpc_tokens_here.h5" build-gpu/bin/test_tokenizer_parity >"$out/parity.log" 2>&1 ||
    status=1
  tail -12 "$out/tokens.log" | tee -a "$out/summary.txt"
  tail -4 "$out/parity.log" | tee -a "$out/summary.txt"
fi
if [[ -n "${ZT_GPU_VALIDATE_XLARGE:-}" && $status -eq 0 ]]; then
  step "convert_hf at full xlarge size"
  timeout "${ZT_GPU_VALIDATE_XLARGE_TIMEOUT:-300}" python3 tools/golden/xlarge_convert_check.py --bin build-gpu/bin \
    --work /tmp/xlarge_convert >"$out/xlarge_convert.log" 2>&1 || status=1
  grep -E '^\{|PASS|FAIL|Error|error' "$out/xlarge_convert.log" | tail -12 | tee -a "$out/summary.txt"
  rm -rf /tmp/xlarge_convert
fi

if [[ -d build-gpu ]]; then
  step "ctest -L cpu"
  timeout "${ZT_GPU_VALIDATE_CPU_TIMEOUT:-120}" ctest --test-dir build-gpu -L cpu --output-on-failure -j"$jobs" \
    >"$out/ctest_cpu.log" 2>&1 || status=1
  tail -8 "$out/ctest_cpu.log" | tee -a "$out/summary.txt"
fi

# Keep $OUT within the device tool's limits: drop the regenerated fixture files.
rm -rf "$out/fixtures" "$out/mrpc_tokens_here.h5"
echo "status $status" | tee -a "$out/summary.txt"
exit $status
