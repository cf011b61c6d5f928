#include "app/tracking/run_tracker.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/tracking/tensorboard_writer.h"
#include "runtime/atomic_file.h"
#include "runtime/check.h"

namespace zt::tracking {

namespace fs = std::filesystem;

RunTracker::RunTracker(RunTrackerOptions options) : options_(std::move(options)) {
  if (!enabled()) return;
  std::error_code error;
  fs::create_directories(options_.output_dir, error);
  ZT_CHECK(!error, "--output_dir ", options_.output_dir, ": cannot create it (", error.message(), ")");
  metrics_path_ = (fs::path(options_.output_dir) / "metrics.jsonl").string();
  if (options_.resumed && fs::exists(metrics_path_)) drop_lines_after_checkpoint(metrics_path_);
  metrics_.open(metrics_path_, std::ios::app);
  ZT_CHECK(metrics_.good(), "cannot write ", metrics_path_);
  if (options_.tensorboard) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(run_dir());
    if (options_.resumed) {
      tensorboard_->start_session(options_.resumed_step + 1);
      tensorboard_->flush();
    }
  }
}

RunTracker::~RunTracker() = default;

std::string RunTracker::run_dir() const {
  if (!enabled() || !options_.tensorboard) return {};
  return (fs::path(options_.output_dir) / "runs" / options_.run_name).string();
}

void RunTracker::drop_lines_after_checkpoint(const std::string& path) const {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot read ", path);
  std::string kept, line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    const nlohmann::json entry = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    bool keep = false;
    if (entry.is_object() && entry.contains("step") && entry["step"].is_number_integer()) {
      const std::string type = entry.value("type", std::string("epoch"));
      if (type == "step") keep = entry["step"].get<int64_t>() <= options_.resumed_step;
      // An epoch line is logged at the step that ends the epoch, before that step's checkpoint.
      if (type == "epoch")
        keep = entry.contains("epoch") && entry["epoch"].is_number_integer() &&
               entry["epoch"].get<int64_t>() <= options_.finished_epochs &&
               entry["step"].get<int64_t>() <= options_.resumed_step;
    }
    if (keep) {
      kept += line + "\n";
    } else {
      ++dropped;
    }
  }
  if (dropped == 0) return;
  atomic_write_file(path, [&](const std::string& temp) {
    std::ofstream out(temp, std::ios::binary);
    out << kept;
    out.close();
    ZT_CHECK(!out.fail(), "cannot write ", temp, " (disk full?)");
  });
  std::printf("metrics.jsonl: dropped %lld line%s written after the checkpoint (step %lld)\n",
              static_cast<long long>(dropped), dropped == 1 ? "" : "s",
              static_cast<long long>(options_.resumed_step));
}

void RunTracker::log_text(std::string_view tag, std::string_view text, int64_t step) {
  if (!tensorboard_) return;
  // Four leading spaces make each line Markdown code, so the columns of `text` stay aligned.
  std::ostringstream code;
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) code << "    " << line << "\n";
  tensorboard_->add_text(tag, code.str(), step);
  tensorboard_->flush();
}

void RunTracker::log_step(int64_t step, const std::vector<Scalar>& scalars) {
  if (!enabled()) return;
  nlohmann::json line = {{"type", "step"}, {"step", step}};
  for (const Scalar& s : scalars) {
    line[s.tag] = s.value;
    if (tensorboard_) tensorboard_->add_scalar(s.tag, s.value, step);
  }
  metrics_ << line.dump() << "\n";
  metrics_.flush();
  ZT_CHECK(metrics_.good(), "cannot write ", metrics_path_, " (disk full?)");
  if (tensorboard_) tensorboard_->flush();
}

void RunTracker::log_epoch(int64_t epoch, int64_t step, const std::vector<Scalar>& scalars) {
  if (!enabled()) return;
  nlohmann::json line = {{"type", "epoch"}, {"epoch", epoch}, {"step", step}};
  for (const Scalar& s : scalars) {
    line[s.tag] = s.value;
    if (tensorboard_) tensorboard_->add_scalar("epoch/" + s.tag, s.value, step);
  }
  metrics_ << line.dump() << "\n";
  metrics_.flush();
  ZT_CHECK(metrics_.good(), "cannot write ", metrics_path_, " (disk full?)");
  if (tensorboard_) tensorboard_->flush();
}

}  // namespace zt::tracking
