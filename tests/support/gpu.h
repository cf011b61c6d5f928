// GPU tests skip themselves (ctest reports them as skipped) where no CUDA device is present.
#pragma once

#include <gtest/gtest.h>

#include "runtime/device.h"

#define ZT_SKIP_WITHOUT_GPU() \
  if (!::zt::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine"
