# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# tests: every GPU-labelled test (ctest -L gpu) of a full build; ctest's record (ctest_gpu.txt) in the
# archive, its count and failures in the summary. TESTS_TIMEOUT_S (default 420) bounds ctest.
targets=(all)
task_run() {
  local record=$work/ctest_gpu.txt status
  x --timeout "${TESTS_TIMEOUT_S:-420}" --to "$record" ctest --test-dir build-gpu -L gpu -j4 --timeout 280 \
    --output-on-failure
  status=$?
  ((dry_run)) && return 0
  say "ctest -L gpu exit $status: $(grep -E 'tests passed' "$record" | tail -1)"
  grep -A40 'The following tests FAILED' "$record" | tee -a "$summary"
  return "$status"
}
