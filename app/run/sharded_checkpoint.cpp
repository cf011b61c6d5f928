#include "app/run/sharded_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <vector>

#include "model/model_file.h"
#include "runtime/check.h"
#include "runtime/h5file.h"

namespace zt::optim {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kZeroCheckpointFormatVersion = 1;
constexpr const char* kStateGroups[3] = {"master", "adam_m", "adam_v"};

std::string rank_file_name(int rank, int world) {
  return str("rank_", rank, "_of_", world, ".h5");
}

// One stored piece of a tensor: a dataset holding elements [tensor_offset, tensor_offset + numel).
struct StoredPiece {
  const H5File* file;
  std::string dataset;
  H5DatasetInfo info;  // shape and dtype as stored
  int64_t tensor_offset;
  int64_t numel;
};

// The files of a checkpoint, opened and checked against each other and against `config`.
struct CheckpointFiles {
  std::vector<H5File> files;
  bool single_file = false;       // the app/run/checkpoint.h format
  bool master_is_params = false;  // single file written by f32 training: the master is params/<name>
  std::string config_json;
  TrainingState state;
};

// The W of the rank_0_of_<W>.h5 file in a step_<N>.zero directory.
int stored_world_size(const std::string& path) {
  int world = 0;
  for (const fs::directory_entry& item : fs::directory_iterator(path)) {
    const std::string name = item.path().filename().string();
    if (name.starts_with("rank_0_of_") && name.ends_with(".h5")) {
      try {
        world = std::stoi(name.substr(10, name.size() - 13));
      } catch (const std::exception&) {
        world = 0;
      }
    }
  }
  ZT_CHECK(world >= 1, "checkpoint ", path, ": cannot read the world size from its rank_0 file name");
  return world;
}

CheckpointFiles open_checkpoint(const std::string& path) {
  CheckpointFiles out;
  if (!is_sharded_checkpoint(path)) {
    out.single_file = true;
    out.files.push_back(H5File::open_read(path));
    const H5File& f = out.files.front();
    ZT_CHECK(f.has_attribute("format") && f.attribute_string("format") == kCheckpointFormat, "checkpoint ",
             path, " is not a zerotrain checkpoint");
    out.master_is_params = f.has_attribute("master_is_params") && f.attribute_int("master_is_params") != 0;
    out.config_json = f.attribute_string("config_json");
    out.state = read_training_state(f);
    return out;
  }
  const int world = stored_world_size(path);
  for (int r = 0; r < world; ++r) {
    const fs::path file = fs::path(path) / rank_file_name(r, world);
    ZT_CHECK(fs::exists(file), "checkpoint ", path, " is incomplete: shard ", file.filename().string(),
             " of a ", world, "-rank run is missing");
    out.files.push_back(H5File::open_read(file.string()));
    const H5File& f = out.files.back();
    ZT_CHECK(f.has_attribute("format") && f.attribute_string("format") == kZeroCheckpointFormat,
             "checkpoint ", file.string(), " is not a zerotrain ZeRO checkpoint shard");
    ZT_CHECK(f.attribute_int("format_version") <= kZeroCheckpointFormatVersion, "checkpoint ", file.string(),
             " has format_version ", f.attribute_int("format_version"), "; this build reads up to ",
             kZeroCheckpointFormatVersion);
    ZT_CHECK(f.attribute_int("world_size") == world && f.attribute_int("rank") == r, "checkpoint ",
             file.string(), " says it is rank ", f.attribute_int("rank"), " of ",
             f.attribute_int("world_size"));
    const TrainingState state = read_training_state(f);
    const std::string json = f.attribute_string("config_json");
    if (r == 0) {
      out.state = state;
      out.config_json = json;
    } else {
      ZT_CHECK(state.optimizer_step == out.state.optimizer_step && json == out.config_json, "checkpoint ",
               path, ": shard ", file.filename().string(), " is from step ", state.optimizer_step,
               " or another model, rank 0's from step ", out.state.optimizer_step,
               " (shards of different runs mixed)");
    }
  }
  return out;
}

// Every stored piece of `name` in state group `group` across the files.
std::vector<StoredPiece> stored_pieces(const CheckpointFiles& ckpt, int group, const std::string& name) {
  std::vector<StoredPiece> pieces;
  std::string dataset = str(kStateGroups[group], "/", name);
  if (ckpt.single_file && group == 0 && ckpt.master_is_params) dataset = str("params/", name);
  for (const H5File& f : ckpt.files) {
    if (!f.exists(dataset)) continue;
    const H5DatasetInfo info = f.info(dataset);
    const int64_t offset =
        f.has_attribute("tensor_offset", dataset) ? f.attribute_int("tensor_offset", dataset) : 0;
    pieces.push_back({&f, dataset, info, offset, info.shape.numel()});
  }
  return pieces;
}

// Copies elements [begin, begin + out.size()) of the tensor from the stored pieces; throws unless they
// cover the range.
void read_range(const std::string& checkpoint, const std::vector<StoredPiece>& pieces,
                const std::string& name, int64_t begin, std::span<float> out) {
  const auto end = begin + static_cast<int64_t>(out.size());
  int64_t covered = 0;
  std::vector<float> buffer;
  for (const StoredPiece& p : pieces) {
    const int64_t lo = std::max(begin, p.tensor_offset), hi = std::min(end, p.tensor_offset + p.numel);
    if (lo >= hi) continue;
    ZT_CHECK(p.info.dtype == DType::f32 && !p.info.raw_bytes, "checkpoint ", p.file->path(), ": ", p.dataset,
             " is ", dtype_name(p.info.dtype), ", expected f32");
    buffer.resize(static_cast<size_t>(p.numel));
    p.file->read(p.dataset, buffer.data(), p.info.shape, DType::f32);
    std::copy(buffer.begin() + (lo - p.tensor_offset), buffer.begin() + (hi - p.tensor_offset),
              out.begin() + (lo - begin));
    covered += hi - lo;
  }
  ZT_CHECK(covered == end - begin, "checkpoint ", checkpoint, ": tensor ", name, " elements [", begin, ", ",
           end, ") are not all stored (", covered,
           " found); the checkpoint is incomplete or of another model");
}

// Where the rank files are written before the directory is committed (renamed to `path`).
std::string unfinished_path(const std::string& path) {
  return path + ".tmp";
}

}  // namespace

void remove_unfinished_sharded_checkpoint(const std::string& path) noexcept {
  std::error_code error;
  fs::remove_all(unfinished_path(path), error);
}

std::string sharded_checkpoint_path(const std::string& output_dir, int64_t optimizer_step) {
  return (fs::path(output_dir) / str("step_", optimizer_step, ".zero")).string();
}

void save_sharded_checkpoint(const std::string& path, ZeroEngine& engine, Communicator& comm,
                             const DebertaConfig& config, const TrainingState& state,
                             std::string_view resolved_config_text) {
  const int rank = comm.rank(), world = comm.world_size();
  const std::string temp = unfinished_path(path);
  if (rank == 0) {
    std::error_code error;
    fs::remove_all(temp, error);
    fs::create_directories(temp, error);
    ZT_CHECK(!error, "cannot create checkpoint directory ", temp, ": ", error.message());
  }
  comm.barrier(nullptr);
  {
    H5File file = H5File::create((fs::path(temp) / rank_file_name(rank, world)).string());
    file.set_attribute("format", kZeroCheckpointFormat);
    file.set_attribute("format_version", kZeroCheckpointFormatVersion);
    file.set_attribute("world_size", int64_t{world});
    file.set_attribute("rank", int64_t{rank});
    file.set_attribute("zero_stage", int64_t{engine.options().stage});
    file.set_attribute("config_json", config.to_json());
    write_training_config(file, resolved_config_text);
    write_training_state(file, state);
    std::vector<float> host;
    for (const ZeroEngine::OwnedPiece& piece : engine.owned_pieces()) {
      host.resize(static_cast<size_t>(piece.numel));
      for (int group = 0; group < 3; ++group) {
        engine.read_state(group, piece, host);
        const std::string dataset = str(kStateGroups[group], "/", engine.tensor_name(piece.tensor));
        file.write(dataset, host.data(), Shape{piece.numel}, DType::f32);
        file.set_attribute("tensor_offset", piece.tensor_offset, dataset);
        file.set_attribute("tensor_numel", engine.tensor_numel(piece.tensor), dataset);
      }
    }
    file.close();
  }
  comm.barrier(nullptr);
  if (rank == 0) {
    std::error_code error;
    fs::remove_all(path, error);
    fs::rename(temp, path, error);
    ZT_CHECK(!error, "cannot commit checkpoint ", path, ": ", error.message());
    // The rename is durable only once the parent directory is synced.
    const int dir = ::open(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().c_str(),
                           O_RDONLY | O_DIRECTORY);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
  comm.barrier(nullptr);
}

CheckpointSummary read_checkpoint_summary(const std::string& path) {
  if (!is_sharded_checkpoint(path)) {
    CheckpointInfo info = read_checkpoint_info(path);
    return {std::move(info.training_config), info.state};
  }
  const fs::path file = fs::path(path) / rank_file_name(0, stored_world_size(path));
  const H5File f = H5File::open_read(file.string());
  ZT_CHECK(f.has_attribute("format") && f.attribute_string("format") == kZeroCheckpointFormat, "checkpoint ",
           file.string(), " is not a zerotrain ZeRO checkpoint shard");
  ZT_CHECK(f.has_attribute("training_config"), "checkpoint ", file.string(),
           " has no training_config attribute");
  return {read_training_config(f), read_training_state(f)};
}

TrainingState load_engine_checkpoint(const std::string& path, ZeroEngine& engine,
                                     const DebertaConfig& config) {
  const CheckpointFiles ckpt = open_checkpoint(path);
  check_same_model_config(path, ckpt.config_json, config);
  std::vector<float> host;
  for (int group = 0; group < 3; ++group) {
    for (const ZeroEngine::OwnedPiece& piece : engine.owned_pieces()) {
      const std::string& name = engine.tensor_name(piece.tensor);
      host.resize(static_cast<size_t>(piece.numel));
      read_range(path, stored_pieces(ckpt, group, name), name, piece.tensor_offset, host);
      engine.write_state(group, piece, host);
    }
  }
  engine.refresh_compute_copy();
  return ckpt.state;
}

void consolidate_checkpoint(const std::string& checkpoint, const std::string& model_file) {
  const CheckpointFiles ckpt = open_checkpoint(checkpoint);
  const DebertaConfig config = parse_deberta_config(ckpt.config_json);
  const ParameterTable table(config);
  Arena host("parameters (host)", table.layout(DType::f32));
  for (const ParameterInfo& info : table.entries()) {
    const Tensor t = host.tensor(info.name);
    read_range(checkpoint, stored_pieces(ckpt, 0, info.name), info.name, 0,
               {static_cast<float*>(t.data()), static_cast<size_t>(t.numel())});
  }
  save_model_file(model_file, config, table, host);
}

}  // namespace zt::optim
