#!/usr/bin/env bash
# On the device: .wt-NAME for every .plan/NAME.patch = this tree (sources only) with the patch applied.
set -euo pipefail
for p in .plan/*.patch; do
  name=$(basename "$p" .patch)
  rm -rf ".wt-$name" && mkdir ".wt-$name"
  tar -cf - --exclude='./build*' --exclude='./.wt-*' --exclude='./.long' --exclude='./docs/bench' \
    --exclude='./.plan' --exclude='./.whl' --exclude='./.device-deps' --exclude='./.git' . | tar -xf - -C ".wt-$name"
  patch -s -d ".wt-$name" -p1 <"$p"
  echo "candidate .wt-$name from $p"
done
