// The tensorboard.Event protobuf messages zerotrain writes, encoded in the protobuf wire format.
//
// Note [Why the events are encoded here, not with libprotobuf]
// Debian 12's libsentencepiece.so.0 (our tokenizer) carries its own copy of protobuf-lite and exports its
// symbols (about 1600 google::protobuf ones). A process that also links libprotobuf 3.21 binds part of the
// generated code to one copy and part to the other: MessageLite::AppendPartialToString from sentencepiece's
// copy serializing a 3.21 message crashes (seen: train_mrpc --with_tracking, SIGSEGV). The static
// libprotobuf-lite.a is not position-independent, so it cannot be hidden inside a shared library either.
// Five small messages need only four wire types, so they are written directly, field numbers and types as in
// tensorboard/compat/proto/{event,summary,tensor}.proto (below); tests compare the bytes with what
// TensorBoard's own Python protobuf classes serialize, and read whole runs back with TensorBoard's reader.
//
//   message Event        { double wall_time = 1; int64 step = 2;
//                          oneof what { string file_version = 3; Summary summary = 5;
//                                       SessionLog session_log = 7; } }
//   message Summary      { repeated Value value = 1; }
//   message Value        { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
//                          SummaryMetadata metadata = 9; }
//   message SummaryMetadata { PluginData plugin_data = 1; }   message PluginData { string plugin_name = 1; }
//   message TensorProto  { DataType dtype = 1; repeated bytes string_val = 8; }   DT_STRING = 7; no shape
//                          field: a scalar tensor
//   message SessionLog   { SessionStatus status = 1; }   START = 1
// Fields are written in field-number order and proto3 defaults (0, empty) are left out, as protobuf does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zt::tracking {

// The first event of every file: file_version "brain.Event:2".
std::string encode_file_version_event(double wall_time);
// A scalar summary (Summary.Value.simple_value), as SummaryWriter.add_scalar writes it.
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value);
// A text summary: plugin "text", a scalar DT_STRING tensor holding `text` (SummaryWriter.add_text).
std::string encode_text_event(double wall_time, int64_t step, std::string_view tag, std::string_view text);
// SessionLog START at `step` (Note [Resuming a TensorBoard run] in tensorboard_writer.h).
std::string encode_session_start_event(double wall_time, int64_t step);

}  // namespace zt::tracking
