#include "runtime/text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt {

std::string read_text_file(const std::string& path, size_t max_bytes, std::string_view what) {
  std::error_code ignored;
  // Opening a directory for reading succeeds on Linux and then reads nothing: "empty" would mislead.
  ZT_CHECK(!std::filesystem::is_directory(path, ignored), what, " ", path, " is a directory, not a file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  ZT_CHECK(file != nullptr, "cannot open ", what, " ", path, " (", std::strerror(errno), ")");
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const size_t got = std::fread(buffer, 1, sizeof(buffer), file.get());
    ZT_CHECK(text.size() + got <= max_bytes, what, " ", path, " is larger than the limit of ",
             format_memory_size(max_bytes), " (not a ", what, "?)");
    text.append(buffer, got);
    if (got < sizeof(buffer)) break;
  }
  ZT_CHECK(!std::ferror(file.get()), "cannot read ", what, " ", path, " (", std::strerror(errno), ")");
  return text;
}

}  // namespace zt
