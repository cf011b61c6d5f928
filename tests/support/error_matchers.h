// Expecting a zt::Error whose message names given parts, for tests of code that rejects input.
//
//   EXPECT_ERROR_HAS(config.resolve(inputs()), "--world_size 4", "num_processes");
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/check.h"

namespace zt::test {

// The message of the zt::Error that `action` throws ("" if it throws none).
template <typename Action>
std::string error_of(Action action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace zt::test

#define EXPECT_ERROR_HAS(action, ...)                                                                   \
  do {                                                                                                  \
    const std::string message = ::zt::test::error_of([&] { action; });                                  \
    ASSERT_FALSE(message.empty()) << "no error from " #action;                                          \
    for (const char* part : {__VA_ARGS__}) {                                                            \
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' missing from: " << message; \
    }                                                                                                   \
  } while (0)
