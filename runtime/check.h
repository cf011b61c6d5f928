// Errors and checks. Every failed check throws zt::Error carrying the failed statement, file, line and a
// message built from the remaining arguments, so a user sees *what* failed and *why* without a debugger.
//
//   ZT_CHECK(n > 0, "batch size must be positive, got ", n);
//   ZT_FAIL("unknown dtype '", name, "'");
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace zt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates any streamable values into one string: str("x=", 3) == "x=3".
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

namespace detail {
[[noreturn]] void throw_check_failure(const char* file, int line, const char* statement,
                                      const std::string& message);
}  // namespace detail

}  // namespace zt

#define ZT_CHECK(cond, ...)                                                                 \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::zt::detail::throw_check_failure(__FILE__, __LINE__, #cond, ::zt::str(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)

#define ZT_FAIL(...) ::zt::detail::throw_check_failure(__FILE__, __LINE__, nullptr, ::zt::str(__VA_ARGS__))
