#!/usr/bin/env bash
# Sets up a fresh machine, builds train_mrpc (and only what it links: no test binaries), and runs it on its
# embedded default. Arguments go to train_mrpc.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target train_mrpc
exec build/bin/train_mrpc "$@"
