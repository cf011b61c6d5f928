#include "runtime/check.h"

#include <csignal>
#include <cstdio>
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

int run_tool_main(const char* tool, int argc, char** argv, int (*body)(int, char**)) {
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, error_text(e).c_str());
    return 2;
  }
}

Error with_context(std::string_view context, const Error& e) {
  return Error(str(context, e.message()), str(context, e.what()));
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
