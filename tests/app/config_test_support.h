// Shared by the configuration tests (test_train_config*.cpp, test_accelerate_config.cpp): resolve inputs of
// the reference job (xlarge on MRPC) and a temp-file writer for config files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "app/config/train_config.h"

namespace zt::optim::config_test {

constexpr int64_t kMrpcTrainRows = 3668;
constexpr int64_t kXlargeHidden = 1536;  // deberta-v2-xlarge

// Writes `text` to a file named `name` in the temp directory, prefixed with the process id and the test's
// name: ctest runs the cases of one binary as concurrent processes, which must not share a file.
inline std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "zt_" + std::to_string(::getpid()) + "_" +
                           testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name;
  std::ofstream(path) << text;
  return path;
}

inline ResolveInputs inputs(int world_size = 1) {
  return {.world_size = world_size, .hidden_size = kXlargeHidden, .num_train_examples = kMrpcTrainRows};
}

// `flags` resolved with the DeepSpeed config `json` (named test.json in errors) for the reference job.
inline TrainConfig resolved(const std::vector<std::string>& flags, const std::string& json,
                            int world_size = 1) {
  TrainConfig config = TrainConfig::from_args(flags);
  config.resolve_with_json_text(json, "test.json", inputs(world_size));
  return config;
}

// The line of describe()'s `text` that prints `key` ("" if there is none).
inline std::string line_of(const std::string& text, const std::string& key) {
  const size_t start = text.find("  " + key + " ");
  if (start == std::string::npos) return "";
  return text.substr(start, text.find('\n', start) - start);
}

}  // namespace zt::optim::config_test
