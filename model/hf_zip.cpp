// ZIP reader for torch checkpoints: central directory → local headers → stored entry bytes.
//
// Layout (all little-endian):
//   end of central directory (EOCD, 22 bytes + comment): sig 0x06054b50, u16 disk, u16 cd_disk,
//     u16 entries_here, u16 entries, u32 cd_size, u32 cd_offset, u16 comment_len
//   ZIP64 locator (20 bytes, just before the EOCD): sig 0x07064b50, u32 disk, u64 zip64_eocd_offset, u32
//   disks ZIP64 EOCD: sig 0x06064b50, u64 record_size, u16 made_by, u16 needed, u32 disk, u32 cd_disk,
//     u64 entries_here, u64 entries, u64 cd_size, u64 cd_offset
//   central header (46 bytes + name + extra + comment): sig 0x02014b50, ... u16 flags @8, u16 method @10,
//     u32 compressed @20, u32 uncompressed @24, u16 name_len @28, u16 extra_len @30, u16 comment_len @32,
//     u32 local_header_offset @42; 0xffffffff fields are in the ZIP64 extra (id 0x0001) in the order
//     uncompressed, compressed, local_header_offset
//   local header (30 bytes + name + extra): sig 0x04034b50, u16 name_len @26, u16 extra_len @28; the data
//     follows. torch pads the local extra so data is 64-byte aligned, so the offset must come from here.
#include <cstring>
#include <unordered_set>

#include "model/hf_readers.h"
#include "runtime/check.h"

namespace zt {
namespace {

// Bounds-checked little-endian reads from the archive.
class ZipBytes {
 public:
  ZipBytes(ByteSpan file, const std::string& source) : file_(file), source_(source) {}
  void need(uint64_t offset, uint64_t length, const char* what) const {
    ZT_CHECK(offset <= file_.size() && length <= file_.size() - offset, source_, ": ", what, " at offset ",
             offset, " (", length, " bytes) runs past the end of the ", file_.size(), "-byte file");
  }
  uint64_t le(uint64_t offset, int bytes, const char* what) const {
    need(offset, static_cast<uint64_t>(bytes), what);
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | file_[static_cast<size_t>(offset) + i];
    return v;
  }
  uint16_t u16(uint64_t o, const char* what) const { return static_cast<uint16_t>(le(o, 2, what)); }
  uint32_t u32(uint64_t o, const char* what) const { return static_cast<uint32_t>(le(o, 4, what)); }
  uint64_t u64(uint64_t o, const char* what) const { return le(o, 8, what); }
  ByteSpan span(uint64_t offset, uint64_t length, const char* what) const {
    need(offset, length, what);
    return file_.subspan(static_cast<size_t>(offset), static_cast<size_t>(length));
  }
  size_t size() const { return file_.size(); }

 private:
  ByteSpan file_;
  const std::string& source_;
};

constexpr uint32_t kEocdSignature = 0x06054b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kZip64EocdSignature = 0x06064b50;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint32_t kLocalSignature = 0x04034b50;

}  // namespace

std::vector<ZipEntry> read_zip_entries(ByteSpan file, const std::string& source) {
  ZipBytes z(file, source);
  ZT_CHECK(file.size() >= 22, source, ": too short for a zip archive (", file.size(), " bytes)");
  // The EOCD is the last record; a trailing comment of up to 65535 bytes may follow it.
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = file.size() > 22 + 65535 ? file.size() - 22 - 65535 : 0;
  for (uint64_t pos = file.size() - 22 + 1; pos-- > lowest;) {
    if (z.u32(pos, "end of central directory") == kEocdSignature &&
        pos + 22 + z.u16(pos + 20, "comment length") == file.size()) {
      eocd = pos;
      break;
    }
  }
  ZT_CHECK(eocd != UINT64_MAX, source, ": no zip end-of-central-directory record (truncated or not a zip)");
  uint64_t entry_count = z.u16(eocd + 10, "entry count");
  uint64_t cd_size = z.u32(eocd + 12, "central directory size");
  uint64_t cd_offset = z.u32(eocd + 16, "central directory offset");
  ZT_CHECK(z.u16(eocd + 4, "disk number") == 0 && z.u16(eocd + 6, "disk number") == 0, source,
           ": multi-disk zip archives are not supported");

  if (entry_count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    ZT_CHECK(eocd >= 20 && z.u32(eocd - 20, "zip64 locator") == kZip64LocatorSignature, source,
             ": zip64 fields without a zip64 locator");
    uint64_t record = z.u64(eocd - 20 + 8, "zip64 locator");
    ZT_CHECK(z.u32(record, "zip64 end of central directory") == kZip64EocdSignature, source,
             ": bad zip64 end-of-central-directory signature at offset ", record);
    entry_count = z.u64(record + 32, "zip64 entry count");
    cd_size = z.u64(record + 40, "zip64 central directory size");
    cd_offset = z.u64(record + 48, "zip64 central directory offset");
  }
  z.need(cd_offset, cd_size, "central directory");
  // Each central header takes at least 46 bytes: bounds the entry count before anything is allocated.
  ZT_CHECK(entry_count <= cd_size / 46, source, ": central directory of ", cd_size, " bytes cannot hold ",
           entry_count, " entries");

  std::vector<ZipEntry> entries;
  entries.reserve(static_cast<size_t>(entry_count));
  std::unordered_set<std::string> names;
  uint64_t pos = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < entry_count; ++i) {
    ZT_CHECK(pos + 46 <= cd_end, source, ": central directory entry ", i, " runs past the directory");
    ZT_CHECK(z.u32(pos, "central header") == kCentralSignature, source,
             ": bad central directory signature at offset ", pos, " (entry ", i, ")");
    const uint16_t flags = z.u16(pos + 8, "flags");
    const uint16_t method = z.u16(pos + 10, "compression method");
    uint64_t compressed = z.u32(pos + 20, "compressed size");
    uint64_t uncompressed = z.u32(pos + 24, "uncompressed size");
    const uint16_t name_len = z.u16(pos + 28, "name length");
    const uint16_t extra_len = z.u16(pos + 30, "extra length");
    const uint16_t comment_len = z.u16(pos + 32, "comment length");
    uint64_t local = z.u32(pos + 42, "local header offset");
    const uint64_t record_end = pos + 46 + name_len + extra_len + comment_len;
    ZT_CHECK(record_end <= cd_end, source, ": central directory entry ", i, " runs past the directory");
    ByteSpan name_bytes = z.span(pos + 46, name_len, "entry name");
    std::string name(name_bytes.begin(), name_bytes.end());

    // ZIP64 extra: the 64-bit values of exactly the fields that hold 0xffffffff, in this order.
    uint64_t extra = pos + 46 + name_len;
    const uint64_t extra_end = extra + extra_len;
    while (extra + 4 <= extra_end) {
      const uint16_t id = z.u16(extra, "extra field");
      const uint16_t size = z.u16(extra + 2, "extra field");
      ZT_CHECK(extra + 4 + size <= extra_end, source, ": extra field of '", name, "' runs past its record");
      if (id == 0x0001) {
        uint64_t field = extra + 4;
        auto take = [&](uint64_t& value) {
          if (value != 0xffffffff) return;
          ZT_CHECK(field + 8 <= extra + 4 + size, source, ": zip64 extra of '", name, "' is too short");
          value = z.u64(field, "zip64 extra");
          field += 8;
        };
        take(uncompressed);
        take(compressed);
        take(local);
      }
      extra += 4 + size;
    }

    ZT_CHECK((flags & 0x1) == 0, source, ": entry '", name, "' is encrypted");
    ZT_CHECK(method == 0, source, ": entry '", name, "' is compressed (method ", method,
             "); torch checkpoints store entries uncompressed, so this archive was re-packed: unzip it and "
             "re-save with torch.save");
    ZT_CHECK(compressed == uncompressed, source, ": stored entry '", name, "' has compressed size ",
             compressed, " != uncompressed size ", uncompressed);
    ZT_CHECK(z.u32(local, "local header") == kLocalSignature, source, ": bad local header signature for '",
             name, "' at offset ", local);
    const uint64_t data =
        local + 30 + z.u16(local + 26, "local name length") + z.u16(local + 28, "local extra length");
    ZipEntry entry;
    entry.name = name;
    entry.data = z.span(data, uncompressed, "entry data");
    ZT_CHECK(names.insert(name).second, source, ": duplicate zip entry '", name, "'");
    entries.push_back(std::move(entry));
    pos = record_end;
  }
  return entries;
}

}  // namespace zt
