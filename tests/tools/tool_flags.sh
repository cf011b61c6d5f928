#!/usr/bin/env bash
# Every tool parses its flags with the flag table (runtime/flag_table.h): a misspelt flag is named with the
# closest one, and --help lists the table. Run by ctest:  tests/tools/tool_flags.sh BIN_DIR
set -uo pipefail
bin=$1
failures=0
# expect TOOL_ARGS... -- PATTERN: the run's output matches PATTERN (extended regex).
expect() {
  local args=() pattern
  while [[ $1 != -- ]]; do args+=("$1"); shift; done
  pattern=$2
  local out
  out=$("$bin/${args[0]}" "${args[@]:1}" 2>&1)
  if grep -qE -- "$pattern" <<<"$out"; then
    echo "ok   ${args[*]}"
  else
    echo "FAIL ${args[*]}: no '$pattern' in: $out"
    failures=$((failures + 1))
  fi
}
expect bench_cpu_adam --rep 3 -- "unknown flag '--rep' \(did you mean 'reps'\?\)"
expect bench_cpu_adam --help -- "--isa auto\|scalar\|avx2\|avx512 .*\[default: auto\]"
expect bench_disk --dri /tmp -- "unknown flag '--dri' \(did you mean 'dir'\?\)"
expect bench_disk --help -- "--queue_depths LIST .*\[default: 8,32\]"
expect bench_train_step --bach 4 -- "unknown flag '--bach' \(did you mean 'batch'\?\)"
expect bench_train_step --help -- "--nvme_param_buffers N"
expect zt_bench --onyl gemm -- "unknown flag '--onyl' \(did you mean 'only'\?\)"
expect zt_bench --help -- "--seq L .*\[default: 128\]"
expect convert_hf import --seeds 1 a b -- "unknown flag '--seeds' \(did you mean 'seed'\?\)"
expect convert_hf import --help -- "--num_labels N"
expect train_mrpc --learning_rat 1 -- "did you mean 'learning_rate'"
if ((failures)); then
  echo "tool_flags: $failures checks failed"
  exit 1
fi
echo "tool_flags: all checks passed"
