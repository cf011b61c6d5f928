#include "runtime/check.h"

namespace zt::detail {

void throw_check_failure(const char* file, int line, const char* statement, const std::string& message) {
  std::ostringstream out;
  out << message;
  if (statement != nullptr) out << " [check failed: " << statement << "]";
  out << " (" << file << ":" << line << ")";
  throw Error(out.str());
}

}  // namespace zt::detail
