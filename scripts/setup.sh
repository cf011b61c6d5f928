#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build zerotrain. Safe to run twice: packages already
# present are skipped, so a prepared machine (the GPU box, which has no registries) is left untouched.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libeigen3-dev          # CPU reference backend
  libhdf5-dev            # checkpoints and golden fixtures
  libsentencepiece-dev   # tokenizer (HF slow-tokenizer parity)
  nlohmann-json3-dev     # config.json / DeepSpeed JSON
  libgtest-dev libgmock-dev
  clang-format
  clang libclang-rt-14-dev   # libFuzzer targets of the checkpoint readers (scripts/run_fuzzers.sh)
  libopenmpi-dev openmpi-bin # mpirun -np N train_mrpc: rank bootstrap (runtime/mpi_launch.h); optional
  liburing-dev           # io_uring backend of the disk tier (runtime/direct_io.h); optional
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

if ! command -v nvcc >/dev/null 2>&1 && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: nvcc not found: the CPU backend builds alone (CUDA code is skipped)"
fi
