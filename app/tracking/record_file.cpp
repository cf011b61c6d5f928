#include "app/tracking/record_file.h"

#include <boost/crc.hpp>
#include <cstring>

namespace zt::tracking {

namespace {

// CRC-32C (Castagnoli): width 32, polynomial 0x1EDC6F41, init and xorout 0xFFFFFFFF, reflected in and out.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

constexpr uint32_t kMaskDelta = 0xa282ead8u;

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t read_le(std::string_view bytes, int count) {
  uint64_t value = 0;
  for (int i = 0; i < count; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[static_cast<size_t>(i)])) << (8 * i);
  return value;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  Crc32c crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + kMaskDelta;
}

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  append_le(out, data.size(), 8);
  append_le(out, masked_crc32c(out), 4);
  out.append(data);
  append_le(out, masked_crc32c(data), 4);
  return out;
}

std::vector<std::string> read_records(std::string_view bytes, bool* complete) {
  std::vector<std::string> records;
  size_t at = 0;
  while (bytes.size() - at >= 12) {
    const std::string_view header = bytes.substr(at, 8);
    if (read_le(bytes.substr(at + 8, 4), 4) != masked_crc32c(header)) break;
    const uint64_t length = read_le(header, 8);
    const size_t remaining = bytes.size() - at;
    if (remaining < 16 || length > remaining - 16) break;
    const std::string_view data = bytes.substr(at + 12, length);
    if (read_le(bytes.substr(at + 12 + length, 4), 4) != masked_crc32c(data)) break;
    records.emplace_back(data);
    at += 16 + length;
  }
  if (complete != nullptr) *complete = at == bytes.size();
  return records;
}

}  // namespace zt::tracking
