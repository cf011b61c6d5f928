// Reading a small input file (config.json, a DeepSpeed config, an index) whole, with a size limit: /dev/zero,
// a never-ending FIFO or a large file given by mistake is then an error naming the file and the limit,
// instead of memory growing until the process is killed. The file is opened and read once, so a FIFO
// works.
//
//   const std::string text = read_text_file(path, kMaxConfigFileBytes, "config file");
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace zt {

// Config files are a few KiB; 16 MiB leaves room for label maps with many thousands of entries.
inline constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;

// The whole file. Throws zt::Error naming the file (`what` says what it should be, e.g. "config file") when
// it is a directory, cannot be opened or read, or holds more than max_bytes bytes.
std::string read_text_file(const std::string& path, size_t max_bytes, std::string_view what);

}  // namespace zt
