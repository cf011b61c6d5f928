// Shared by the configuration tests (test_train_config.cpp, test_accelerate_config.cpp): resolve inputs of
// the reference job (xlarge on MRPC) and a temp-file writer for config files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "optim/train_config.h"

namespace zt::optim::config_test {

constexpr int64_t kMrpcTrainRows = 3668;
constexpr int64_t kXlargeHidden = 1536;  // deberta-v2-xlarge

// Writes `text` to a file named `name` in the test's temp directory; returns its path.
inline std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

inline ResolveInputs inputs(int world_size = 1) {
  return {.world_size = world_size, .hidden_size = kXlargeHidden, .num_train_examples = kMrpcTrainRows};
}

}  // namespace zt::optim::config_test
