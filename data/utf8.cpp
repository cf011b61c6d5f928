#include "data/utf8.h"

#include <cstdint>

namespace zt::data {

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The allowed range of the second byte depends on the lead byte: that is what rules out overlong
    // encodings (E0, F0), surrogates (ED) and values above U+10FFFF (F4).
    size_t length = 0;
    uint8_t second_lo = 0x80, second_hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead == 0xE0) {
      length = 3, second_lo = 0xA0;
    } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
      length = 3;
    } else if (lead == 0xED) {
      length = 3, second_hi = 0x9F;
    } else if (lead == 0xF0) {
      length = 4, second_lo = 0x90;
    } else if (lead >= 0xF1 && lead <= 0xF3) {
      length = 4;
    } else if (lead == 0xF4) {
      length = 4, second_hi = 0x8F;
    } else {
      return i;  // 80..C1 (continuation or overlong 2-byte lead) and F5..FF never start a character
    }
    if (i + length > n) return i;
    if (bytes[i + 1] < second_lo || bytes[i + 1] > second_hi) return i;
    for (size_t k = 2; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
    }
    i += length;
  }
  return std::nullopt;
}

}  // namespace zt::data
