// TFRecord framing, the container of TensorBoard event files:
//
//   uint64 length            little-endian, bytes of data
//   uint32 masked_crc32c(length's 8 bytes)
//   byte   data[length]      here: one serialized Event message
//   uint32 masked_crc32c(data)
//
// masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c = CRC-32C (Castagnoli, the iSCSI
// checksum) of x; the mask keeps a CRC of data that itself holds CRCs from looking like one. A reader stops
// at the first record whose length or data is cut short, so a file of a killed run still reads up to its
// last whole record (tensorboard's event_file_loader does exactly that).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zt::tracking {

// CRC-32C of `data` (Boost.CRC: polynomial 0x1EDC6F41, reflected, initial and final xor 0xFFFFFFFF).
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// The bytes of one record holding `data`.
std::string frame_record(std::string_view data);

// The records of a TFRecord byte string, up to the last whole one; a record whose length or data CRC does not
// match ends the read as well. `complete` (optional) says whether the bytes ended exactly after a record.
std::vector<std::string> read_records(std::string_view bytes, bool* complete = nullptr);

}  // namespace zt::tracking
