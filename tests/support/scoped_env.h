// An environment variable set or unset for one scope, then restored to what it was: a test that turns a ZT_*
// switch on or off for some calls must not leave it changed for the tests after it in the same process (the
// pending_switches.* ctest entries run whole binaries with switches already on).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace zt::test {

class ScopedEnv {
 public:
  explicit ScopedEnv(std::string name) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) saved_ = old;
  }
  ~ScopedEnv() {
    if (saved_) {
      setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  // True when the environment took it (setenv/unsetenv succeeded).
  bool set(const char* value) { return setenv(name_.c_str(), value, 1) == 0; }
  bool unset() { return unsetenv(name_.c_str()) == 0; }

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace zt::test
