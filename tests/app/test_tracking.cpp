// app/tracking: TFRecord framing and CRC-32C against known vectors, the TensorBoard writer's files, and
// metrics.jsonl across a resume. tests/tools/check_tensorboard_events.py reads real runs' event files with
// TensorBoard's own reader.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/tracking/record_file.h"
#include "app/tracking/run_tracker.h"
#include "app/tracking/tensorboard_event.h"
#include "app/tracking/tensorboard_writer.h"
#include "tests/support/temp_dir_test.h"

namespace zt::tracking {
namespace {

namespace fs = std::filesystem;

std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// RFC 3720 (iSCSI) appendix B.4 and the "123456789" check value of CRC-32C.
TEST(RecordFile, Crc32cMatchesPublishedVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
}

// Bytes written by tensorboard 2.21's own RecordWriter (tensorboard.summary.writer.record_writer) for the
// payloads "hello" and "".
TEST(RecordFile, FramingMatchesTensorBoardsRecordWriter) {
  EXPECT_EQ(frame_record("hello"), from_hex("0500000000000000eab2043e68656c6c6fbb1f1c19"));
  EXPECT_EQ(frame_record(""), from_hex("000000000000000029039807d8ea82a2"));
  EXPECT_EQ(masked_crc32c("123456789"), 0xc78ab0e5u);
}

// Bytes that TensorBoard's own protobuf classes (tensorboard.compat.proto.event_pb2, tensorboard 2.21)
// serialize for the same events, wall_time 1.5.
TEST(TensorBoardEvent, EncodingMatchesTensorBoardsProtobufClasses) {
  EXPECT_EQ(encode_file_version_event(1.5), from_hex("09000000000000f83f1a0d627261696e2e4576656e743a32"));
  EXPECT_EQ(encode_scalar_event(1.5, 3, "train/loss", 0.5f),
            from_hex("09000000000000f83f10032a130a110a0a747261696e2f6c6f7373150000003f"));
  // A step above 127 takes a two-byte varint; a negative value's float bits.
  EXPECT_EQ(encode_scalar_event(1.5, 300, "t", -2.0f),
            from_hex("09000000000000f83f10ac022a0a0a080a017415000000c0"));
  EXPECT_EQ(
      encode_text_event(1.5, 2, "config", "lr 1e-4"),
      from_hex(
          "09000000000000f83f10022a210a1f0a06636f6e666967420b080742076c722031652d344a080a060a0474657874"));
  EXPECT_EQ(encode_session_start_event(1.5, 7), from_hex("09000000000000f83f10073a020801"));
}

TEST(RecordFile, ReadStopsAtTheLastWholeRecord) {
  const std::string bytes = frame_record("first") + frame_record("second record") + frame_record("third");
  bool complete = false;
  EXPECT_EQ(read_records(bytes, &complete), (std::vector<std::string>{"first", "second record", "third"}));
  EXPECT_TRUE(complete);
  // Cut anywhere inside the third record (length, its CRC, data or data CRC): the first two remain.
  const size_t third = frame_record("first").size() + frame_record("second record").size();
  for (size_t cut = third; cut < bytes.size(); ++cut) {
    const std::vector<std::string> records = read_records(std::string_view(bytes).substr(0, cut), &complete);
    EXPECT_EQ(records, (std::vector<std::string>{"first", "second record"})) << "cut at " << cut;
    EXPECT_EQ(complete, cut == third);
  }
  // A flipped data byte fails its CRC: reading ends there.
  std::string corrupt = bytes;
  corrupt[frame_record("first").size() + 14] ^= 0x01;
  EXPECT_EQ(read_records(corrupt, &complete), std::vector<std::string>{"first"});
  EXPECT_FALSE(complete);
}

class TrackingTest : public test::TempDirTest {};

TEST_F(TrackingTest, WriterStartsEachFileWithItsVersionAndFramesEveryEvent) {
  std::string path;
  {
    TensorBoardWriter writer(this->path("runs/a"));
    path = writer.path();
    writer.add_scalar("train/loss", 0.5, 3);
    writer.add_text("config", "lr 1e-4", 0);
    writer.start_session(4);
    writer.flush();
  }
  EXPECT_TRUE(fs::path(path).filename().string().starts_with("events.out.tfevents."));
  bool complete = false;
  const std::vector<std::string> records = read_records(read_file(path), &complete);
  EXPECT_TRUE(complete);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(records[1].find("train/loss"), std::string::npos);
  EXPECT_NE(records[2].find("lr 1e-4"), std::string::npos);
  // A second writer in the same directory opens another file (a resumed run appends to the run that way).
  TensorBoardWriter second(this->path("runs/a"));
  EXPECT_NE(second.path(), path);
}

std::vector<nlohmann::json> jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST_F(TrackingTest, MetricsLinesOfStepsAndEpochsAreToldApartAndAResumeDropsWhatCameAfterItsCheckpoint) {
  const std::string out = path("out");
  {
    RunTracker tracker({.output_dir = out, .tensorboard = true});
    for (int64_t step = 1; step <= 6; ++step) tracker.log_step(step, {{"train/loss", 1.0 / step}});
    tracker.log_epoch(1, 4, {{"eval_accuracy", 0.7}});
    tracker.log_epoch(2, 6, {{"eval_accuracy", 0.8}});
    EXPECT_EQ(tracker.run_dir(), (fs::path(out) / "runs" / "glue_no_trainer").string());
  }
  // A line cut short by a kill.
  std::ofstream(path("out/metrics.jsonl"), std::ios::app) << "{\"type\": \"step\", \"st";
  // The checkpoint held 5 steps and one finished epoch: steps 6 and epoch 2 come again after the resume.
  RunTracker resumed(
      {.output_dir = out, .tensorboard = true, .resumed = true, .resumed_step = 5, .finished_epochs = 1});
  resumed.log_step(6, {{"train/loss", 0.25}});
  const std::vector<nlohmann::json> lines = jsonl(path("out/metrics.jsonl"));
  std::vector<std::string> seen;
  for (const nlohmann::json& line : lines)
    seen.push_back(str(line["type"].get<std::string>(), " ", line["step"].get<int64_t>()));
  EXPECT_EQ(seen, (std::vector<std::string>{"step 1", "step 2", "step 3", "step 4", "step 5", "epoch 4",
                                            "step 6"}));
  EXPECT_EQ(lines.back()["train/loss"].get<double>(), 0.25);
  // Two event files in the run directory; the second one starts a session at step 6.
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(resumed.run_dir())) files.push_back(entry.path().string());
  EXPECT_EQ(files.size(), 2u);
}

// A checkpoint at the last step of the run (the resumed run logs no epoch line again): the epoch line at that
// step stays, one logged after it goes.
TEST_F(TrackingTest, AResumeKeepsTheEpochLinesUpToItsCheckpoint) {
  const std::string out = path("out");
  {
    RunTracker tracker({.output_dir = out});
    tracker.log_epoch(1, 6, {{"eval_accuracy", 0.7}});
    tracker.log_epoch(2, 8, {{"eval_accuracy", 0.8}});
  }
  RunTracker resumed({.output_dir = out, .resumed = true, .resumed_step = 6, .finished_epochs = 2});
  const std::vector<nlohmann::json> lines = jsonl(path("out/metrics.jsonl"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["epoch"].get<int64_t>(), 1);
}

TEST_F(TrackingTest, WithoutOutputDirNothingIsWritten) {
  RunTracker tracker({});
  EXPECT_FALSE(tracker.enabled());
  tracker.log_step(1, {{"train/loss", 1.0}});
  EXPECT_TRUE(tracker.run_dir().empty());
}

}  // namespace
}  // namespace zt::tracking
