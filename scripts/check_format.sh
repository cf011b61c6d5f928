#!/usr/bin/env bash
# Fails when any C++/CUDA file differs from clang-format's output. Pass --fix to rewrite them.
set -euo pipefail
cd "$(dirname "$0")/.."
# Tracked files and new ones git does not ignore (a file not added yet is checked before its first commit).
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.h' '*.cpp' '*.cu' '*.cuh')
((${#files[@]})) || exit 0
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run --Werror "${files[@]}"
fi
