#!/usr/bin/env bash
# DeepSpeed's anchor into .ds/ (git-ignored; name it in the device call's carry): the DeepSpeed 0.19.8 wheels,
# ds_anchor.py and run.sh from the shared bench folder (../shared/bench/deepspeed beside the repo, or the folder
# given). The device tasks install the wheels from there (offload --deepspeed, disk --deepspeed, plan).
#
#   scripts/fetch_deepspeed.sh [FOLDER]
set -euo pipefail
cd "$(dirname "$0")/.."
from=${1:-../shared/bench/deepspeed}
[[ -d $from/wheels ]] || { echo "fetch_deepspeed.sh: no $from/wheels (give the folder)" >&2; exit 2; }
rm -rf .ds
mkdir -p .ds
cp -r "$from"/. .ds/
chmod -R u+w .ds
du -sh .ds
