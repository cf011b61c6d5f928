// Byte counts as people write them: "24GiB", "24GB", "512MiB", "1.5GiB", "4096". Used by flags such as
// --gpu_memory_limit and by every memory report, so a size printed by one run can be pasted into the next.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace zt {

// Parses a byte count. Units (case-insensitive): B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of
// 1024), and K/M/G/T as shorthands for the binary units. Fractions are allowed with a unit ("1.5GiB"); the
// result is rounded to the nearest byte. Throws zt::Error on empty input, garbage, negative or overflowing
// values, or a fractional plain byte count.
size_t parse_memory_size(std::string_view text);

// Human-readable binary size with up to two decimals: 0 -> "0 B", 1536 -> "1.5 KiB", 24 << 30 -> "24 GiB".
// parse_memory_size(format_memory_size(n)) returns n whenever n is a whole number of the printed unit.
std::string format_memory_size(size_t bytes);

}  // namespace zt
