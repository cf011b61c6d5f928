#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs train_mrpc on its embedded default. Arguments go to train_mrpc.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/bin/train_mrpc "$@"
