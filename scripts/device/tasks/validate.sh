# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# validate [--xlarge]: the golden fixtures regenerated under this machine's transformers/torch and compared
# with the committed ones (the tiny models, the xlarge layout, the bf16 autocast 50-step loss curve), and
# tokenizer parity against its transformers. --xlarge: also convert_hf on a full-size xlarge-mnli
# (tools/golden/xlarge_convert_check.py, up to 300 s).
targets=(test_tokenizer_parity convert_hf)
xlarge=0
task_args() {
  case "$*" in
  "") ;;
  --xlarge) xlarge=1 ;;
  *) refuse "validate takes [--xlarge] (got: $*)" ;;
  esac
}
task_run() {
  local status=0 fixtures=$work/../fixtures
  ((dry_run)) || { rm -rf "$fixtures" && mkdir -p "$fixtures"; }
  ((dry_run)) || say "$(python3 -c 'import transformers, torch; print("transformers", transformers.__version__, "torch", torch.__version__)' 2>&1)"
  x --to "$work/golden.log" python3 tools/golden/make_model_fixtures.py --out_dir "$fixtures" || status=1
  x --to "$work/compare.log" python3 tools/golden/compare_fixtures.py tests/fixtures "$fixtures" deberta_tiny.h5 \
    deberta_tiny_padded.h5 deberta_xlarge_layout.h5 || status=1
  ((dry_run)) || say "golden model fixtures: $(tail -25 "$work/compare.log")"
  x --to "$work/golden_bf16.log" python3 tools/golden/make_mrpc_training_fixture.py --dtype bf16 --out_dir "$fixtures" ||
    status=1
  x --to "$work/compare_bf16.log" python3 tools/golden/compare_fixtures.py tests/fixtures "$fixtures" \
    deberta_mrpc_train50_bf16.h5 || status=1
  ((dry_run)) || say "bf16 loss curve: $(tail -8 "$work/compare_bf16.log")"
  x --to "$work/tokens.log" python3 tools/golden/make_token_fixture.py --out "$fixtures/mrpc_tokens_here.h5" || status=1
  x --to "$work/parity.log" env ZT_MRPC_TOKEN_FIXTURE="$fixtures/mrpc_tokens_here.h5" $bin/test_tokenizer_parity ||
    status=1
  ((dry_run)) || say "tokenizer parity: $(tail -4 "$work/parity.log")"
  if ((xlarge)); then
    x --timeout 300 --to "$work/xlarge_convert.log" python3 tools/golden/xlarge_convert_check.py --bin $bin \
      --work /tmp/xlarge_convert || status=1
    ((dry_run)) || say "convert_hf at xlarge size: $(grep -E '^\{|PASS|FAIL|Error|error' "$work/xlarge_convert.log" | tail -12)"
    ((dry_run)) || rm -rf /tmp/xlarge_convert
  fi
  ((dry_run)) || rm -rf "$fixtures"
  return "$status"
}
