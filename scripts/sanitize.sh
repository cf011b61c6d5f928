#!/usr/bin/env bash
# Builds the CPU backend and every test under a sanitizer, in a build folder of its own (CUDA off: the
# sanitizers see host code only), and runs the CPU-labelled tests there. Exits non-zero on a failed test or
# any sanitizer report (every report aborts its test). Not part of CI: an instrumented build of the whole tree
# takes ~30 minutes on 2 cores, and the tests run 2-10x slower.
#
#   scripts/sanitize.sh address                      # ASan + UBSan (leaks too), folder build-asan
#   scripts/sanitize.sh thread                       # TSan: the rank threads, the thread pool, the offload
#                                                    # pipeline and the swap I/O threads, folder build-tsan
#   scripts/sanitize.sh thread -R 'Zero|Communicator'   # further arguments go to ctest
#   SANITIZE_BUILD_DIR=/tmp/b scripts/sanitize.sh address
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kind=${1:-}
case "$kind" in
  address)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    build=${SANITIZE_BUILD_DIR:-$root/build-asan}
    # Leaks are reported at exit; UBSan reports abort (no recover) and print a stack.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/scripts/lsan_suppressions.txt}
    ;;
  thread)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    build=${SANITIZE_BUILD_DIR:-$root/build-tsan}
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan_suppressions.txt}
    ;;
  *)
    echo "usage: scripts/sanitize.sh address|thread [ctest arguments...]" >&2
    exit 2
    ;;
esac
shift

"$root/scripts/setup.sh"
# Warnings stay warnings here: GCC 12's -Wmaybe-uninitialized reports false positives inside libstdc++'s
# std::regex once the sanitizers instrument it.
cmake -S "$root" -B "$build" -DZT_CUDA=OFF -DZT_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)"
# The tests' own timeouts were set for uninstrumented code.
ctest --test-dir "$build" -L cpu --output-on-failure --timeout 1800 -j"$(nproc 2>/dev/null || echo 2)" "$@"
