#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build zerotrain. Safe to run twice: packages already
# present are skipped, so a prepared machine (the GPU box, which has no registries) is left untouched.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  ninja-build            # tests/tools/test_device_runner.py builds a stand-in tree as the GPU runner does
  libeigen3-dev          # CPU reference backend
  libhdf5-dev            # checkpoints and golden fixtures
  hdf5-tools             # h5diff: scripts/compare_trees.sh compares checkpoints of two builds
  libsentencepiece-dev   # tokenizer (HF slow-tokenizer parity)
  nlohmann-json3-dev     # config.json / DeepSpeed JSON
  libgtest-dev libgmock-dev
  clang-format
  clang libclang-rt-14-dev   # libFuzzer targets of the checkpoint readers (scripts/run_fuzzers.sh)
  libopenmpi-dev openmpi-bin # mpirun -np N train_mrpc: rank bootstrap (runtime/mpi_launch.h); optional
  libboost-dev               # Boost.CRC: CRC-32C of TensorBoard event records (app/tracking)
  libyaml-cpp-dev            # Accelerate config files (train_mrpc --config_file)
  python3-venv               # .venv below: Python packages for tests
  liburing-dev           # io_uring backend of the disk tier (runtime/direct_io.h); optional
  patch                  # tests/tools/test_device_runner.py: the device tasks' patches still apply
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# Python packages the tests use, in .venv at the repository root (the system Python is left alone):
# tensorboard's event reader checks train_mrpc's event files (tests/tools/check_tensorboard_events.py).
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
if "$venv/bin/python" -c "import tensorboard" >/dev/null 2>&1; then
  echo "setup: $venv has tensorboard"
elif python3 -m venv "$venv" && "$venv/bin/pip" install -q "tensorboard>=2.10"; then
  echo "setup: installed tensorboard into $venv"
else
  echo "setup: WARNING: could not install tensorboard into $venv (no PyPI here?):" \
    "tracking.tensorboard_events reports skipped (fails in CI)" >&2
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: nvcc not found: the CPU backend builds alone (CUDA code is skipped)"
fi
