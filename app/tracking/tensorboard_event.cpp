#include "app/tracking/tensorboard_event.h"

#include <bit>

namespace zt::tracking {

namespace {

// Wire types of the protobuf encoding.
enum Wire : uint32_t { varint_wire = 0, fixed64_wire = 1, length_delimited_wire = 2, fixed32_wire = 5 };

// Appends protobuf fields to a message's bytes.
class ProtoWriter {
 public:
  void varint(int field, uint64_t value) {
    if (value == 0) return;  // proto3 default: not written
    key(field, varint_wire);
    raw_varint(value);
  }
  void fixed64(int field, double value) {
    if (value == 0) return;
    key(field, fixed64_wire);
    little_endian(std::bit_cast<uint64_t>(value), 8);
  }
  void fixed32(int field, float value) {
    if (value == 0) return;
    key(field, fixed32_wire);
    little_endian(std::bit_cast<uint32_t>(value), 4);
  }
  // A string, bytes or an embedded message (its encoded bytes); a message is written even when empty, as
  // a set sub-message is.
  void bytes(int field, std::string_view data) {
    key(field, length_delimited_wire);
    raw_varint(data.size());
    out_.append(data);
  }
  std::string take() { return std::move(out_); }

 private:
  void key(int field, Wire wire) { raw_varint((static_cast<uint64_t>(field) << 3) | wire); }
  void raw_varint(uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>((value & 0x7f) | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }
  void little_endian(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// Event field numbers.
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;

ProtoWriter event_head(double wall_time, int64_t step) {
  ProtoWriter event;
  event.fixed64(kWallTime, wall_time);
  event.varint(kStep, static_cast<uint64_t>(step));  // int64: two's complement as a varint
  return event;
}

// An Event holding a Summary with one Value.
std::string summary_event(double wall_time, int64_t step, std::string value) {
  ProtoWriter summary;
  summary.bytes(1, value);  // Summary.value
  ProtoWriter event = event_head(wall_time, step);
  event.bytes(kSummary, summary.take());
  return event.take();
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  ProtoWriter event = event_head(wall_time, 0);
  event.bytes(kFileVersion, "brain.Event:2");
  return event.take();
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  ProtoWriter v;
  v.bytes(1, tag);      // Value.tag
  v.fixed32(2, value);  // Value.simple_value
  return summary_event(wall_time, step, v.take());
}

std::string encode_text_event(double wall_time, int64_t step, std::string_view tag, std::string_view text) {
  ProtoWriter tensor;
  constexpr uint64_t kDtString = 7;
  tensor.varint(1, kDtString);  // TensorProto.dtype
  tensor.bytes(8, text);        // TensorProto.string_val
  ProtoWriter plugin;
  plugin.bytes(1, "text");  // PluginData.plugin_name
  ProtoWriter metadata;
  metadata.bytes(1, plugin.take());  // SummaryMetadata.plugin_data
  ProtoWriter v;
  v.bytes(1, tag);              // Value.tag
  v.bytes(8, tensor.take());    // Value.tensor
  v.bytes(9, metadata.take());  // Value.metadata
  return summary_event(wall_time, step, v.take());
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  ProtoWriter session;
  constexpr uint64_t kStart = 1;
  session.varint(1, kStart);  // SessionLog.status
  ProtoWriter event = event_head(wall_time, step);
  event.bytes(kSessionLog, session.take());
  return event.take();
}

}  // namespace zt::tracking
