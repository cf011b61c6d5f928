// UTF-8 validation (RFC 3629): the well-formed byte sequences of Unicode 15 table 3-7. Overlong forms,
// surrogates (U+D800..U+DFFF), code points above U+10FFFF, stray continuation bytes and sequences cut short
// are all invalid.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace zt::data {

// Byte offset of the first byte that starts an ill-formed sequence, or nullopt when `text` is valid UTF-8.
std::optional<size_t> find_invalid_utf8(std::string_view text);

inline bool is_valid_utf8(std::string_view text) {
  return !find_invalid_utf8(text).has_value();
}

}  // namespace zt::data
