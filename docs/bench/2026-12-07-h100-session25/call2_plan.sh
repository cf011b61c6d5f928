#!/usr/bin/env bash
# One device call: the candidates' trees, combined's tests and A/B against main, then the goals side by side on
# combined's tree (as if merged), then the single candidates' A/Bs while time is left (560 s in all).
set -u
root=$PWD
bash .plan/mk_candidates.sh
OUT=$OUT/ab_combined LONG_BUDGET_S=200 scripts/device/run.sh long --candidate .wt-combined --candidate-only 2>&1 |
  grep -v '^run:' | tail -30
echo "== after combined A/B: ${SECONDS} s"
if grep -q "candidate_tests: exit 0" "$OUT/ab_combined/summary.txt"; then
  cp -r .whl .wt-combined/
  (cd .wt-combined && ZT_DEVICE_DEPS=$root/.device-deps OUT=$OUT/goals_combined LONG_BUDGET_S=$((450 - SECONDS)) \
    scripts/device/run.sh long 2>&1 | grep -v '^run:' | tail -40)
else
  echo "combined's tests failed: no goals on it"
fi
echo "== after goals: ${SECONDS} s"
for x in keeplanes stagerows bucketloop diagshared; do
  ((SECONDS < 370)) || { echo "no time for $x"; continue; }
  OUT=$OUT/ab_$x LONG_BUDGET_S=$((455 - SECONDS)) scripts/device/run.sh long --candidate .wt-$x --candidate-only 2>&1 |
    grep -v '^run:' | tail -12
done
echo "== end: ${SECONDS} s"
