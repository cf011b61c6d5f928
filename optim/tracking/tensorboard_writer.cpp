#include "optim/tracking/tensorboard_writer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "optim/tracking/record_file.h"
#include "optim/tracking/tensorboard_event.pb.h"
#include "runtime/check.h"

namespace zt::tracking {

namespace {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

tensorboard::Event event_at(int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_now());
  event.set_step(step);
  return event;
}

std::string serialized(const tensorboard::Event& event) {
  std::string bytes;
  ZT_CHECK(event.SerializeToString(&bytes), "cannot serialize a TensorBoard event");
  return bytes;
}

}  // namespace

std::string event_file_name() {
  static std::atomic<int> writers{0};
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  const long long seconds = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  char name[400];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%ld.%d", seconds, host,
                static_cast<long>(getpid()), writers.fetch_add(1));
  return name;
}

TensorBoardWriter::TensorBoardWriter(const std::string& run_dir) {
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  ZT_CHECK(!error, "TensorBoard run directory ", run_dir, ": cannot create it (", error.message(), ")");
  path_ = (std::filesystem::path(run_dir) / event_file_name()).string();
  file_.open(path_, std::ios::binary | std::ios::trunc);
  ZT_CHECK(file_.good(), "cannot write TensorBoard event file ", path_);
  tensorboard::Event event = event_at(0);
  event.set_file_version("brain.Event:2");
  write_event(serialized(event));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  file_.flush();  // no throw from a destructor; flush() reports write errors while the run goes on
}

void TensorBoardWriter::write_event(const std::string& serialized_event) {
  const std::string record = frame_record(serialized_event);
  file_.write(record.data(), static_cast<std::streamsize>(record.size()));
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step) {
  tensorboard::Event event = event_at(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(static_cast<float>(value));
  write_event(serialized(event));
}

void TensorBoardWriter::add_text(std::string_view tag, std::string_view text, int64_t step) {
  tensorboard::Event event = event_at(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tensorboard::TensorProto* tensor = v->mutable_tensor();
  tensor->set_dtype(tensorboard::DT_STRING);
  tensor->mutable_tensor_shape();  // a scalar: a shape with no dimensions
  tensor->add_string_val(std::string(text));
  write_event(serialized(event));
}

void TensorBoardWriter::start_session(int64_t step) {
  tensorboard::Event event = event_at(step);
  event.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  write_event(serialized(event));
}

void TensorBoardWriter::flush() {
  file_.flush();
  ZT_CHECK(file_.good(), "cannot write TensorBoard event file ", path_, " (disk full?)");
}

}  // namespace zt::tracking
