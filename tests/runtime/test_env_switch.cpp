// read_env_switch (runtime/env_switch.h): "1" on; unset, empty and "0" off; anything else an error that names
// the variable, so a typo never runs the default silently.
#include "runtime/env_switch.h"

#include <gtest/gtest.h>

#include "tests/support/error_matchers.h"
#include "tests/support/scoped_env.h"

namespace zt {
namespace {

constexpr const char* kName = "ZT_TEST_ENV_SWITCH";

TEST(EnvSwitch, OnlyOneIsOnAndUnsetEmptyOrZeroAreOff) {
  {
    const test::ScopedEnv unset(kName, nullptr);
    EXPECT_FALSE(read_env_switch(kName));
  }
  for (const char* off : {"", "0"}) {
    const test::ScopedEnv env(kName, off);
    EXPECT_FALSE(read_env_switch(kName)) << "'" << off << "'";
  }
  const test::ScopedEnv on(kName, "1");
  EXPECT_TRUE(read_env_switch(kName));
}

TEST(EnvSwitch, AnythingElseIsAnErrorNamingTheVariable) {
  for (const char* value : {"yes", "true", "on", "2", " 1"}) {
    const test::ScopedEnv env(kName, value);
    EXPECT_ERROR_HAS(read_env_switch(kName), kName);
  }
}

}  // namespace
}  // namespace zt
