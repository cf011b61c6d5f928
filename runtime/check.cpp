#include "runtime/check.h"

#include <cstdlib>
#include <string_view>

namespace zt {

std::string error_text(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error == nullptr) return e.what();
  const char* verbose = std::getenv("ZT_VERBOSE_ERRORS");
  const bool details =
      verbose != nullptr && std::string_view(verbose) != "" && std::string_view(verbose) != "0";
  return details ? std::string(e.what()) : error->message();
}

namespace detail {

void throw_check_failure(const char* file, int line, const char* statement, const std::string& message) {
  std::ostringstream out;
  out << message;
  if (statement != nullptr) out << " [check failed: " << statement << "]";
  out << " (" << file << ":" << line << ")";
  throw Error(message, out.str());
}

}  // namespace detail
}  // namespace zt
