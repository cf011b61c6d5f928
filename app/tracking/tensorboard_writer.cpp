#include "app/tracking/tensorboard_writer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "app/tracking/record_file.h"
#include "app/tracking/tensorboard_event.h"
#include "runtime/check.h"

namespace zt::tracking {

namespace {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string event_file_name() {
  static std::atomic<int> writers{0};
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  const long long seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
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
  write_event(encode_file_version_event(wall_time_now()));
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
  write_event(encode_scalar_event(wall_time_now(), step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::add_text(std::string_view tag, std::string_view text, int64_t step) {
  write_event(encode_text_event(wall_time_now(), step, tag, text));
}

void TensorBoardWriter::start_session(int64_t step) {
  write_event(encode_session_start_event(wall_time_now(), step));
}

void TensorBoardWriter::flush() {
  file_.flush();
  ZT_CHECK(file_.good(), "cannot write TensorBoard event file ", path_, " (disk full?)");
}

}  // namespace zt::tracking
