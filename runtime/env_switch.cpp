#include "runtime/env_switch.h"

#include <cstdlib>
#include <string_view>

#include "runtime/check.h"

namespace zt {

bool read_env_switch(const char* name) {
  const char* value = std::getenv(name);
  const std::string_view text = value == nullptr ? std::string_view() : std::string_view(value);
  ZT_CHECK(text.empty() || text == "0" || text == "1", name, " must be 0 or 1, got '", text, "'");
  return text == "1";
}

}  // namespace zt
