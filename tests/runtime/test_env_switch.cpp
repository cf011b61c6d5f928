// read_env_switch (runtime/env_switch.h): "1" on; unset, empty and "0" off; anything else an error that names
// the variable, so a typo never runs the default silently.
#include "runtime/env_switch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/check.h"

namespace zt {
namespace {

constexpr const char* kName = "ZT_TEST_ENV_SWITCH";

TEST(EnvSwitch, OnlyOneIsOnAndUnsetEmptyOrZeroAreOff) {
  unsetenv(kName);
  EXPECT_FALSE(read_env_switch(kName));
  setenv(kName, "", 1);
  EXPECT_FALSE(read_env_switch(kName));
  setenv(kName, "0", 1);
  EXPECT_FALSE(read_env_switch(kName));
  setenv(kName, "1", 1);
  EXPECT_TRUE(read_env_switch(kName));
  unsetenv(kName);
}

TEST(EnvSwitch, AnythingElseIsAnErrorNamingTheVariable) {
  for (const char* value : {"yes", "true", "on", "2", " 1"}) {
    setenv(kName, value, 1);
    try {
      read_env_switch(kName);
      ADD_FAILURE() << "'" << value << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(kName), std::string::npos) << e.what();
    }
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace zt
