# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# tests: every GPU-labelled test (ctest -L gpu) of a full build; the record stays in .ab-last/ctest_gpu.txt
# (git-ignored, kept on a warm machine) and in the archive. TESTS_TIMEOUT_S (default 420) bounds ctest.
targets=(all)
task_run() {
  local record=$work/ctest_gpu.txt status
  x --timeout "${TESTS_TIMEOUT_S:-420}" --to "$record" ctest --test-dir build-gpu -L gpu -j4 --timeout 280 \
    --output-on-failure
  status=$?
  ((dry_run)) && return 0
  mkdir -p .ab-last && cp "$record" .ab-last/ctest_gpu.txt
  say "ctest -L gpu exit $status: $(grep -E 'tests passed' "$record" | tail -1)"
  grep -A40 'The following tests FAILED' "$record" | tee -a "$summary"
  return "$status"
}
