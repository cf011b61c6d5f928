// bench_disk: the disk tier's bandwidth on one directory, measured through the disk tier itself (a swap
// store of optim/swap/ over runtime/direct_io.h), to put beside `dd` and beside the optimizer step's floor
// max(disk time of the shard bytes, CPU AdamW) (issue 15). Prints one JSON object:
//
//   bench_disk --dir /local_nvme [--size 4GiB] [--record 64MiB] [--buffers 4] [--block_sizes 1MiB,4MiB]
//              [--queue_depths 8,32] [--threads 1] [--backend auto|io_uring|thread_pool]
//              [--direct required|automatic|off]
//   {"dir": ..., "bytes": ..., "record_bytes": ..., "io_uring": "available" | reason, "runs": [
//     {"block_size": 1048576, "queue_depth": 8, "threads": 1, "backend": "io_uring", "direct": true,
//      "write_gbps": ..., "read_gbps": ..., "update_gbps": ..., "update_read_write_s": ...}, ...]}
//
// For each (block size, queue depth) a fresh swap file of --size bytes is written record by record (write
// pass), read back (read pass), then read, "updated" and written back with both overlap flags on (update
// pass: the optimizer step's traffic with a no-op update, so its bytes are read + written). GB/s are
// 10^9 bytes per second of the pass's wall time. With --direct off the reads may come from the page cache
// (then they measure memory, not the disk): the JSON says "direct": false.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "optim/swap/swap_pipeline.h"
#include "optim/swap/swap_preflight.h"
#include "optim/swap/swap_store.h"
#include "runtime/check.h"
#include "runtime/direct_io.h"
#include "runtime/flag_table.h"
#include "runtime/memory_size.h"
#include "runtime/signals.h"

namespace {

using zt::swap::SwapPipelineOptions;
using zt::swap::SwapPipelineStats;

struct Options {
  std::string dir;
  size_t bytes = size_t{4} << 30;
  size_t record_bytes = size_t{64} << 20;
  int buffers = 4;
  std::vector<size_t> block_sizes = {size_t{1} << 20, size_t{4} << 20};
  std::vector<int> queue_depths = {8, 32};
  int threads = 1;
  zt::IoBackendChoice backend = zt::IoBackendChoice::automatic;
  zt::DirectIoMode direct = zt::DirectIoMode::required;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

std::string join(const auto& values, auto show) {
  std::string out;
  for (const auto& v : values) {
    if (!out.empty()) out += ',';
    out += show(v);
  }
  return out;
}

using V = const std::string&;
using F = std::string_view;

const auto kFlags = std::to_array<zt::Flag<Options>>({
    {"dir", "DIR", "directory on the disk to measure (required)", [](Options& o, F, V v) { o.dir = v; },
     [](const Options& o) { return o.dir; }},
    {"size", "BYTES", "bytes of the swap file of each pass, e.g. 4GiB",
     [](Options& o, F f, V v) { o.bytes = zt::parse_size_flag(f, v); },
     [](const Options& o) { return zt::format_memory_size(o.bytes); }},
    {"record", "BYTES", "bytes per record (the disk tier's sub-group)",
     [](Options& o, F f, V v) { o.record_bytes = zt::parse_size_flag(f, v); },
     [](const Options& o) { return zt::format_memory_size(o.record_bytes); }},
    {"buffers", "N", "host buffers of the pipeline (3 to 64)",
     [](Options& o, F f, V v) { o.buffers = static_cast<int>(zt::parse_integer_flag(f, v, 3, 64)); },
     [](const Options& o) { return std::to_string(o.buffers); }},
    {"block_sizes", "LIST", "comma-separated I/O block sizes, one pass each",
     [](Options& o, F f, V v) {
       o.block_sizes.clear();
       for (const std::string& part : split(v)) o.block_sizes.push_back(zt::parse_size_flag(f, part));
     },
     [](const Options& o) {
       return join(o.block_sizes, [](size_t b) { return zt::format_memory_size(b); });
     }},
    {"queue_depths", "LIST", "comma-separated queue depths, one pass each",
     [](Options& o, F f, V v) {
       o.queue_depths.clear();
       for (const std::string& part : split(v))
         o.queue_depths.push_back(static_cast<int>(zt::parse_integer_flag(f, part, 1, 4096)));
     },
     [](const Options& o) { return join(o.queue_depths, [](int q) { return std::to_string(q); }); }},
    {"threads", "N", "files written and read in parallel (1 to 64)",
     [](Options& o, F f, V v) { o.threads = static_cast<int>(zt::parse_integer_flag(f, v, 1, 64)); },
     [](const Options& o) { return std::to_string(o.threads); }},
    {"backend", "auto|io_uring|thread_pool", "I/O backend of the disk tier",
     [](Options& o, F f, V v) {
       const std::string b = zt::parse_choice_flag(f, v, {"auto", "io_uring", "thread_pool"});
       o.backend = b == "auto"       ? zt::IoBackendChoice::automatic
                   : b == "io_uring" ? zt::IoBackendChoice::io_uring
                                     : zt::IoBackendChoice::thread_pool;
     },
     [](const Options&) { return std::string("auto"); }},
    {"direct", "required|automatic|off", "O_DIRECT: required, used where the file system has it, or off",
     [](Options& o, F f, V v) {
       const std::string d = zt::parse_choice_flag(f, v, {"required", "automatic", "off"});
       o.direct = d == "required"    ? zt::DirectIoMode::required
                  : d == "automatic" ? zt::DirectIoMode::automatic
                                     : zt::DirectIoMode::off;
     },
     [](const Options&) { return std::string("required"); }},
});

Options parse(int argc, char** argv) {
  Options o;
  if (zt::parse_flags<Options>(kFlags, std::vector<std::string>(argv + 1, argv + argc), o).help) {
    std::fputs(zt::flags_help<Options>(kFlags, Options{}, "usage: bench_disk --dir DIR [--flag value] ...\n")
                   .c_str(),
               stdout);
    std::exit(0);
  }
  ZT_CHECK(!o.dir.empty(), "--dir is required (a directory on the disk to measure); see --help");
  ZT_CHECK(o.record_bytes >= zt::kDirectIoAlignment, "--record must be at least 4 KiB");
  ZT_CHECK(o.bytes >= o.record_bytes, "--size must be at least one --record (",
           zt::format_memory_size(o.record_bytes), ")");
  ZT_CHECK(!o.block_sizes.empty() && !o.queue_depths.empty(), "--block_sizes and --queue_depths need values");
  return o;
}

double round_to(double x, double unit) {
  return std::round(x / unit) * unit;
}

nlohmann::ordered_json measure(const Options& o, size_t block_size, int queue_depth) {
  zt::AsyncFileIo io({.backend = o.backend,
                      .block_size = block_size,
                      .queue_depth = queue_depth,
                      .thread_count = o.threads,
                      .single_submit = false,
                      .overlap_events = true});
  const auto records = static_cast<int64_t>(o.bytes / o.record_bytes);
  zt::swap::SwapStore store(
      {.directory = o.dir,
       .rank = 0,
       .record_bytes = std::vector<size_t>(static_cast<size_t>(records), o.record_bytes),
       .direct = o.direct},
      io);
  std::vector<zt::AlignedBuffer> buffers;
  for (int i = 0; i < o.buffers; ++i) buffers.emplace_back(store.largest_transfer_bytes());
  const auto no_update = [](int64_t, std::span<std::byte>) {};
  const double bytes = static_cast<double>(store.file_bytes());
  SwapPipelineStats write, read, update;
  zt::swap::run_swap_pipeline(store, buffers, 0, records, {.read = false}, no_update, &write);
  zt::swap::run_swap_pipeline(store, buffers, 0, records, {.write = false}, no_update, &read);
  zt::swap::run_swap_pipeline(store, buffers, 0, records, SwapPipelineOptions{}, no_update, &update);
  return {{"block_size", block_size},
          {"queue_depth", queue_depth},
          {"threads", o.threads},
          {"backend", zt::io_backend_name(io.backend())},
          {"direct", store.direct()},
          {"write_gbps", round_to(bytes / write.total_seconds / 1e9, 1e-3)},
          {"read_gbps", round_to(bytes / read.total_seconds / 1e9, 1e-3)},
          {"update_gbps", round_to(2 * bytes / update.total_seconds / 1e9, 1e-3)},
          {"update_read_write_s", round_to(update.total_seconds, 1e-4)}};
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  zt::ScopedStopSignals stop_signals("bench_disk");
  const zt::swap::SwapPreflightReport preflight = zt::swap::preflight_swap_directory(
      {.directory = o.dir, .bytes_needed = o.bytes, .files_needed = 1 + o.threads, .direct = o.direct});
  for (const std::string& notice : preflight.notices)
    std::fprintf(stderr, "bench_disk: note: %s\n", notice.c_str());
  const std::string io_uring = zt::io_uring_unavailable_reason();
  nlohmann::ordered_json result = {
      {"dir", o.dir},
      {"bytes", (o.bytes / o.record_bytes) * zt::round_up_to_alignment(o.record_bytes)},
      {"record_bytes", o.record_bytes},
      {"buffers", o.buffers},
      {"free_bytes", preflight.free_bytes},
      {"direct_io_probe", preflight.direct_io},
      {"io_uring", io_uring.empty() ? std::string("available") : io_uring},
      {"runs", nlohmann::ordered_json::array()}};
  for (const size_t block_size : o.block_sizes) {
    for (const int queue_depth : o.queue_depths) {
      if (zt::stop_requested()) break;
      result["runs"].push_back(measure(o, block_size, queue_depth));
    }
  }
  std::printf("%s\n", result.dump().c_str());
  return zt::stop_exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool_main("bench_disk", argc, argv, run);
}
