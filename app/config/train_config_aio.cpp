// Disk-tier keys: DeepSpeed's top-level "aio" block, the nvme keys of offload_optimizer / offload_param, and
// --host_memory_limit.
//
// Note [Disk tier keys]
// The disk tier (ZeRO-Infinity's NVMe offload) is optim/swap/ over runtime/direct_io.h. Each key:
//   aio.block_size            honoured: bytes per request (a multiple of 4096, what O_DIRECT transfers)
//   aio.queue_depth           honoured: requests in flight per I/O thread
//   aio.thread_count          honoured: I/O threads, each with its own io_uring ring; DeepSpeed's newer name
//                             intra_op_parallelism is the same key (both at once is an error)
//   aio.single_submit         honoured: one io_uring submit per request instead of one per batch
//   aio.overlap_events        honoured: refill the queue as requests complete (false: batch by batch)
//   aio.use_gds               false accepted; true refused (GPUDirect Storage is not supported)
//   <offload>.nvme_path       the directory of the swap files; required with device nvme
//   <offload>.buffer_count    staging buffers of the swap pipeline; at least what the pipeline flags need
//                             (offload_param: host buffers of one unit slice each, at least 1; the records
//                             after the one in use are read ahead into the others)
//   offload_optimizer.pipeline_read / pipeline_write
//                             honoured: overlap the reads / writes with the CPU update (Note [The swap
//                             pipeline]); DeepSpeed's defaults (false) swap synchronously
//   offload_param.buffer_size, max_in_cpu
//                             accepted, no effect: each buffer holds one unit's slice of the shard (sized to
//                             the largest), and no parameters stay in host memory beyond the buffers
//   --host_memory_limit       every rank's engine charges its host buffers to it (host_memory_budget.h);
//                             with device nvme the optimizer state costs buffer_count records, not the shard
// The io_uring knobs (single_submit, overlap_events, queue_depth) have no counterpart in the thread-pool
// backend that runs where io_uring is unavailable; the run says so when it falls back.
// Disk-tier keys of a section whose device is not nvme, and an aio block without any nvme device, change
// nothing (DeepSpeed ignores them too): describe() prints them with that effect.
// offload_optimizer.device nvme is the CPU offload with the state on disk (ZeroEngineOptions::disk);
// offload_param.device nvme (stage 3, with offload_optimizer cpu or nvme) the stage-3 parameter shard on disk
// (ZeroEngineOptions::param_disk, optim/zero/swapped_parameter_shard.h).
#include "app/config/train_config_sections.h"
#include "optim/swap/swap_pipeline.h"
#include "runtime/direct_io.h"
#include "runtime/memory_size.h"

namespace zt::optim::config_detail {

namespace {

constexpr int64_t kMaxBufferCount = 1024;
constexpr int64_t kMaxAioThreads = 64;  // runtime/direct_io.h's bound
constexpr int64_t kMaxQueueDepth = 4096;

bool any_nvme(const TrainConfig& c) {
  return c.zero.offload_optimizer.nvme.enabled || c.zero.offload_param.nvme.enabled;
}

bool any_offload(const TrainConfig& c) {
  return c.zero.offload_optimizer.enabled || c.zero.offload_param.enabled;
}

}  // namespace

void resolve_nvme_offload(ResolveContext& context, JsonSection& section, std::string_view key,
                          std::string_view device, NvmeOffloadSettings& settings) {
  TrainConfig& c = context.config;
  const bool optimizer = key == "offload_optimizer";
  settings = NvmeOffloadSettings{};
  settings.buffer_count = optimizer ? 4 : 5;  // DeepSpeed's defaults
  settings.enabled = device == "nvme";

  auto integer = [&](const char* name, int64_t& field, int64_t minimum, int64_t maximum) {
    const JsonValue<int64_t> v = section.integer(name, minimum, maximum);
    if (v.given()) {
      field = v.value;
      set_json_origin(c, v.path, v.path);
    }
    return v;
  };
  auto boolean = [&](const char* name, bool& field) {
    const JsonValue<bool> v = section.boolean(name);
    if (v.given()) {
      field = v.value;
      set_json_origin(c, v.path, v.path);
    }
    return v;
  };
  const JsonValue<std::string> path = section.string("nvme_path");
  if (path.given()) {
    settings.nvme_path = path.value;
    set_json_origin(c, path.path, path.path);
  }
  const JsonValue<int64_t> buffers = integer("buffer_count", settings.buffer_count, 1, kMaxBufferCount);
  if (optimizer) {
    boolean("pipeline_read", settings.pipeline_read);
    boolean("pipeline_write", settings.pipeline_write);
  } else {
    integer("buffer_size", settings.buffer_size, 1, std::numeric_limits<int64_t>::max());
    integer("max_in_cpu", settings.max_in_cpu, 0, std::numeric_limits<int64_t>::max());
  }
  if (!settings.enabled) return;
  ZT_CHECK(!settings.nvme_path.empty(), context.where(), section.path_of("nvme_path"),
           " is required with device nvme: the directory (on a fast local disk) for the swap files");
  const int needed = swap::swap_pipeline_min_buffers(
      {.pipeline_read = settings.pipeline_read, .pipeline_write = settings.pipeline_write});
  ZT_CHECK(settings.buffer_count >= needed, context.where(), buffers.path, " = ", settings.buffer_count,
           " is too few: the swap pipeline needs ", needed, " (one record being updated",
           settings.pipeline_read ? ", one read ahead" : "",
           settings.pipeline_write ? ", one written behind" : "", ")");
}

void resolve_disk_tier(ResolveContext& context) {
  TrainConfig& c = context.config;
  c.aio = AioSettings{};
  if (std::optional<JsonSection> aio = context.section("aio")) {
    auto integer = [&](const char* name, int64_t& field, int64_t minimum, int64_t maximum) {
      const JsonValue<int64_t> v = aio->integer(name, minimum, maximum);
      if (v.given()) {
        field = v.value;
        set_json_origin(c, v.path, v.path);
      }
      return v;
    };
    auto boolean = [&](const char* name, bool& field) {
      const JsonValue<bool> v = aio->boolean(name);
      if (v.given()) {
        field = v.value;
        set_json_origin(c, v.path, v.path);
      }
      return v;
    };
    const JsonValue<int64_t> block = integer("block_size", c.aio.block_size, 4096, int64_t{1} << 30);
    ZT_CHECK(!block.given() || block.value % static_cast<int64_t>(kDirectIoAlignment) == 0, context.where(),
             block.path, " must be a multiple of ", kDirectIoAlignment,
             " (O_DIRECT transfers whole blocks), got ", block.value);
    integer("queue_depth", c.aio.queue_depth, 1, kMaxQueueDepth);
    const JsonValue<int64_t> threads = integer("thread_count", c.aio.thread_count, 1, kMaxAioThreads);
    const JsonValue<int64_t> newer = aio->integer("intra_op_parallelism", 1, kMaxAioThreads);
    ZT_CHECK(!(threads.given() && newer.given()), context.where(), "has both ", threads.path, " and ",
             newer.path, " (its newer name); keep one");
    if (newer.given()) {
      c.aio.thread_count = newer.value;
      set_json_origin(c, threads.path, newer.path);
    }
    boolean("single_submit", c.aio.single_submit);
    boolean("overlap_events", c.aio.overlap_events);
    const JsonValue<bool> gds = aio->boolean("use_gds");
    ZT_CHECK(
        !(gds.given() && gds.value), context.where(), gds.path,
        " true: GPUDirect Storage is not supported (the disk tier stages through host buffers); set it to "
        "false or remove it");
  }

  ZT_CHECK(c.host_memory_limit == 0 || any_offload(c) || c.auto_plan, "--host_memory_limit ",
           format_memory_size(c.host_memory_limit),
           " caps the host memory of offloaded state, but nothing is offloaded (set "
           "zero_optimization.offload_optimizer.device to cpu or nvme)");
}

void describe_nvme_offload(const TrainConfig& c, DescribeWriter& out, std::string_view key,
                           const NvmeOffloadSettings& settings) {
  const std::string prefix = str("zero_optimization.", key, ".");
  const bool optimizer = key == "offload_optimizer";
  struct Line {
    std::string name;
    std::string value;
  };
  std::vector<Line> lines = {{"nvme_path", settings.nvme_path},
                             {"buffer_count", std::to_string(settings.buffer_count)}};
  if (optimizer) {
    lines.push_back({"pipeline_read", show_bool(settings.pipeline_read)});
    lines.push_back({"pipeline_write", show_bool(settings.pipeline_write)});
  } else {
    lines.push_back({"buffer_size", std::to_string(settings.buffer_size)});
    lines.push_back({"max_in_cpu", std::to_string(settings.max_in_cpu)});
  }
  for (const Line& line : lines) {
    const std::string name = prefix + line.name;
    // Without device nvme only the keys the JSON gave are shown, so that none is silently dropped.
    if (settings.enabled) {
      if (!optimizer && line.name == "buffer_count") {
        out.line(name, line.value, "host buffers of one unit slice each; the next units are read ahead");
      } else if (!optimizer && line.name == "buffer_size") {
        out.line(name, line.value, "none; each buffer holds one unit's slice (sized to the largest)");
      } else if (!optimizer && line.name == "max_in_cpu") {
        out.line(name, line.value, "none; only the buffers are in host memory");
      } else {
        out.line(name, line.value);
      }
    } else if (c.origin_of(name) == Origin::json) {
      out.line(name, line.value, "none; the device is not nvme");
    }
  }
}

void describe_aio(const TrainConfig& c, DescribeWriter& out) {
  const bool given =
      c.origin_of("aio.block_size") == Origin::json || c.origin_of("aio.queue_depth") == Origin::json ||
      c.origin_of("aio.thread_count") == Origin::json || c.origin_of("aio.single_submit") == Origin::json ||
      c.origin_of("aio.overlap_events") == Origin::json;
  if (!given && !any_nvme(c)) return;
  const std::string_view effect = any_nvme(c) ? std::string_view{} : "none; nothing is offloaded to disk";
  out.group("disk tier (aio)");
  out.line("aio.block_size", std::to_string(c.aio.block_size), effect);
  out.line("aio.queue_depth", std::to_string(c.aio.queue_depth), effect);
  out.line("aio.thread_count", std::to_string(c.aio.thread_count), effect);
  out.line("aio.single_submit", show_bool(c.aio.single_submit), effect);
  out.line("aio.overlap_events", show_bool(c.aio.overlap_events), effect);
}

}  // namespace zt::optim::config_detail
