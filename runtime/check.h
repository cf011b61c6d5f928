// Errors and checks. Every failed check throws zt::Error carrying a message built from the remaining
// arguments (what failed and why, for the user) and the failed statement, file and line (for the developer).
//
//   ZT_CHECK(n > 0, "batch size must be positive, got ", n);
//   ZT_FAIL("unknown dtype '", name, "'");
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace zt {

// what() is the whole report (message, failed statement, file:line), for logs, tests and bug reports;
// message() is the sentence a user needs (what a tool prints unless ZT_VERBOSE_ERRORS=1, see error_text).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message), message_(message) {}
  Error(std::string message, const std::string& report)
      : std::runtime_error(report), message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// The text a command-line tool prints for an error: a zt::Error's message(), or its whole what() (with the
// failed statement and source location) when the environment sets ZT_VERBOSE_ERRORS to anything but "0" or
// empty; what() for other exceptions.
std::string error_text(const std::exception& e);

// The main() of a command-line tool: body(argc, argv)'s exit code, or, when it throws, one line
// "<tool>: error: <error_text>" on stderr and exit code 2. SIGXFSZ is ignored while the body runs, so that
// a write past the file size limit (ulimit -f) fails with EFBIG like a full disk, and is reported as one
// error line, instead of killing the process without a word.
int run_tool_main(const char* tool, int argc, char** argv, int (*body)(int, char**));

// `e` with `context` put before its message and its report, for a caller that adds where a callee failed
// ("in config.json: "): throwing a new Error built from e.what() would show the callee's failed check and
// source location in the message a user sees.
Error with_context(std::string_view context, const Error& e);

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
