// Sets (or, with nullptr, unsets) one environment variable for a scope and restores what was there.
//
//   const test::ScopedEnv cache("ZT_MACHINE_FIGURES", path.c_str());
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace zt::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    set(value);
  }
  ~ScopedEnv() { set(saved_ ? saved_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void set(const char* value) const {
    if (value != nullptr)
      setenv(name_.c_str(), value, 1);
    else
      unsetenv(name_.c_str());
  }
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace zt::test
