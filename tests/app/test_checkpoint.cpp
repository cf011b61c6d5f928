#include "app/run/checkpoint.h"

#include <gtest/gtest.h>

#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/support/temp_dir_test.h"

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/h5file.h"
#include "tests/app/narrow_model.h"

namespace zt::optim {
namespace {

namespace fs = std::filesystem;

// A DeBERTa-v2 small enough that a checkpoint is a few hundred KiB, with every optional module (conv,
// relative-embedding LayerNorm) so the table has all kinds of tensors.
DebertaConfig tiny_config() {
  DebertaConfig c = test_models::narrow_model(16, 8);
  c.vocab_size = 96;
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 64;
  return c;
}

// Fills every tensor of an arena with random bits, so a restore that drops, reorders or converts any byte
// shows up in memcmp. Padding between tensors stays zero (arenas are zero-filled), as it is never stored.
// Values stay finite (an all-ones exponent loses its top bit), and non-negative when asked (the sign bit is
// cleared), as a load refuses anything else (Note [Loaded values are checked]).
void fill_random_bits(const Arena& arena, uint32_t seed, bool non_negative = false) {
  std::mt19937 generator(seed);
  for (const ArenaSlot& slot : arena.layout().slots()) {
    auto* bytes = static_cast<unsigned char*>(arena.data()) + slot.offset;
    for (size_t i = 0; i < slot.nbytes; ++i) bytes[i] = static_cast<unsigned char>(generator());
    // f32 and bf16, little-endian: the last byte of an element holds the sign and the top 7 exponent bits,
    // the byte before it the lowest exponent bit as its top bit.
    ZT_CHECK(slot.dtype == DType::f32 || slot.dtype == DType::bf16, "fill_random_bits: f32 or bf16 only");
    const size_t size = dtype_size(slot.dtype);
    for (size_t e = 0; e + size <= slot.nbytes; e += size) {
      unsigned char& high = bytes[e + size - 1];
      if ((high & 0x7F) == 0x7F && (bytes[e + size - 2] & 0x80) != 0) high &= 0xBF;
      if (non_negative) high &= 0x7F;
    }
  }
}

// The four arenas of one run. With params_dtype f32 and shared_master, master is the params arena.
struct RunArenas {
  RunArenas(const ParameterTable& table, DType params_dtype, bool shared_master)
      : params("params", table.layout(params_dtype), {.zero_fill = true}),
        master(shared_master ? nullptr
                             : std::make_unique<Arena>("master", table.layout(DType::f32),
                                                       ArenaOptions{.zero_fill = true})),
        adam_m("adam_m", table.layout(DType::f32), {.zero_fill = true}),
        adam_v("adam_v", table.layout(DType::f32), {.zero_fill = true}) {}

  CheckpointArenas view() const {
    return {.params = params, .master = master ? *master : params, .adam_m = adam_m, .adam_v = adam_v};
  }
  void randomize(uint32_t seed) {
    fill_random_bits(params, seed);
    if (master) fill_random_bits(*master, seed + 1);
    fill_random_bits(adam_m, seed + 2);
    fill_random_bits(adam_v, seed + 3, /*non_negative=*/true);
  }

  Arena params;
  std::unique_ptr<Arena> master;
  Arena adam_m;
  Arena adam_v;
};

void expect_same_bytes(const Arena& a, const Arena& b) {
  ASSERT_EQ(a.bytes(), b.bytes()) << a.name();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << "arena " << a.name() << " differs";
}

TrainingState sample_state() {
  TrainingState s;
  s.optimizer_step = 1234;
  s.micro_step = 4937;
  s.adam_step = 1230;
  s.scheduler_step = 1231;
  s.next_batch = {.epoch = 2, .batch = 17};
  s.seed = 0xF00DFACECAFEBEEFull;  // >= 2^63: must survive the int64 attribute
  s.loss_scaler = {.scale = 32768.0,
                   .iteration = 1234,
                   .last_overflow_iteration = 1100,
                   .hysteresis_left = 1,
                   .skipped_steps = 4};
  s.last_lr = 1.2345678901234567e-05;
  s.epoch_loss_sum = 11.123456789012345;
  s.epoch_optimizer_steps = 17;
  return s;
}

void expect_same_state(const TrainingState& a, const TrainingState& b) {
  EXPECT_EQ(a.optimizer_step, b.optimizer_step);
  EXPECT_EQ(a.micro_step, b.micro_step);
  EXPECT_EQ(a.adam_step, b.adam_step);
  EXPECT_EQ(a.scheduler_step, b.scheduler_step);
  EXPECT_EQ(a.next_batch, b.next_batch);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.loss_scaler.scale, b.loss_scaler.scale);
  EXPECT_EQ(a.loss_scaler.iteration, b.loss_scaler.iteration);
  EXPECT_EQ(a.loss_scaler.last_overflow_iteration, b.loss_scaler.last_overflow_iteration);
  EXPECT_EQ(a.loss_scaler.hysteresis_left, b.loss_scaler.hysteresis_left);
  EXPECT_EQ(a.loss_scaler.skipped_steps, b.loss_scaler.skipped_steps);
  EXPECT_EQ(a.last_lr, b.last_lr);  // exact: doubles are stored as doubles
  EXPECT_EQ(a.epoch_loss_sum, b.epoch_loss_sum);
  EXPECT_EQ(a.epoch_optimizer_steps, b.epoch_optimizer_steps);
}

// Edits a saved checkpoint through the HDF5 C API, for damage the zerotrain API refuses to produce.
void delete_dataset(const std::string& path, const std::string& dataset) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  EXPECT_GE(H5Ldelete(file, dataset.c_str(), H5P_DEFAULT), 0) << dataset;
  H5Fclose(file);
}

class CheckpointTest : public test::TempDirTest {
 protected:
  // Saves a bf16-params checkpoint of the tiny config with random contents; returns its path.
  std::string save_sample(const std::string& name) {
    RunArenas run(table_, DType::bf16, false);
    run.randomize(7);
    const std::string file = path(name);
    save_training_checkpoint(file, config_, table_, run.view(), sample_state(), kTrainingConfig);
    return file;
  }

  static constexpr std::string_view kTrainingConfig =
      "{\"learning_rate\": 3e-06, \"per_device_train_batch_size\": 8, \"zero_stage\": 2}\n";
  DebertaConfig config_ = tiny_config();
  ParameterTable table_{config_};
};

TEST_F(CheckpointTest, SaveThenLoadRestoresEveryByteAndEveryStateField) {
  RunArenas saved(table_, DType::bf16, false);
  saved.randomize(1);
  const TrainingState state = sample_state();
  const std::string file = path("step_1234.h5");
  save_training_checkpoint(file, config_, table_, saved.view(), state, kTrainingConfig);

  RunArenas restored(table_, DType::bf16, false);
  restored.randomize(99);  // different contents, so an untouched tensor would be caught
  TrainingState loaded;
  load_training_checkpoint(file, config_, table_, restored.view(), loaded);

  expect_same_bytes(saved.params, restored.params);
  expect_same_bytes(*saved.master, *restored.master);
  expect_same_bytes(saved.adam_m, restored.adam_m);
  expect_same_bytes(saved.adam_v, restored.adam_v);
  expect_same_state(state, loaded);

  const CheckpointInfo info = read_checkpoint_info(file);
  EXPECT_EQ(info.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(info.training_config, kTrainingConfig);
  EXPECT_EQ(info.config_json, config_.to_json());
  EXPECT_EQ(info.params_dtype, DType::bf16);
  EXPECT_FALSE(info.master_is_params);
  EXPECT_EQ(info.tensor_count, static_cast<int64_t>(table_.size()));
  expect_same_state(state, info.state);
}

TEST_F(CheckpointTest, TensorsAreStoredPerNameReadableWithoutZerotrainArenas) {
  const std::string file = save_sample("named.h5");
  const H5File f = H5File::open_read(file);
  EXPECT_EQ(f.attribute_string("format"), "zerotrain-checkpoint");
  for (std::string_view group : {"params", "master", "adam_m", "adam_v"}) {
    EXPECT_EQ(f.list(group).size(), table_.size()) << group;
  }
  const ParameterInfo& word = table_.at("deberta.embeddings.word_embeddings.weight");
  const H5DatasetInfo params = f.info("params/" + word.name);
  EXPECT_EQ(params.shape, word.shape);
  EXPECT_EQ(params.dtype, DType::bf16);
  EXPECT_EQ(f.info("adam_v/" + word.name).dtype, DType::f32);
}

TEST_F(CheckpointTest, SharedMasterIsStoredOnceAndRestored) {
  RunArenas saved(table_, DType::f32, true);
  saved.randomize(3);
  const std::string file = path("f32.h5");
  save_training_checkpoint(file, config_, table_, saved.view(), sample_state(), kTrainingConfig);
  {
    const H5File f = H5File::open_read(file);
    EXPECT_FALSE(f.exists("master"));
    EXPECT_EQ(f.attribute_int("master_is_params"), 1);
  }
  RunArenas restored(table_, DType::f32, true);
  TrainingState loaded;
  load_training_checkpoint(file, config_, table_, restored.view(), loaded);
  expect_same_bytes(saved.params, restored.params);
  expect_same_bytes(saved.adam_m, restored.adam_m);
  expect_same_bytes(saved.adam_v, restored.adam_v);

  // A run that keeps a separate master cannot take its master from this file.
  RunArenas separate(table_, DType::f32, false);
  expect_error([&] { load_training_checkpoint(file, config_, table_, separate.view(), loaded); },
               {file, "separate master"});
}

TEST_F(CheckpointTest, WriteInterruptedMidwayLeavesThePreviousCheckpointIntact) {
  const std::string file = save_sample("step_10.h5");
  std::vector<char> before(fs::file_size(file));
  std::ifstream(file, std::ios::binary).read(before.data(), static_cast<std::streamsize>(before.size()));

  // A second save to the same path is killed half way through its tensors: a child process writes under a
  // file-size limit of half a checkpoint, and the kernel kills it with SIGXFSZ when it crosses the limit —
  // a real crash mid-write, with no destructor or error path running.
  RunArenas next(table_, DType::bf16, false);
  next.randomize(2);
  TrainingState state = sample_state();
  state.optimizer_step = 20;
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_DFL);
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = before.size() / 2;
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      save_training_checkpoint(file, config_, table_, next.view(), state, kTrainingConfig);
    } catch (...) {
    }
    _exit(0);  // reached only if the write was not interrupted: the parent reports it
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << "the child write was not killed mid-way";

  std::vector<char> after(fs::file_size(file));
  std::ifstream(file, std::ios::binary).read(after.data(), static_cast<std::streamsize>(after.size()));
  EXPECT_TRUE(before == after) << "the previous checkpoint was modified by the interrupted write";
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "step_10.h5" || name.find(".tmp-") != std::string::npos)
        << "unexpected file " << name;
  }
  EXPECT_EQ(find_latest_checkpoint(dir_).value_or(""), file)
      << "a crash's temp file must not look like a checkpoint";
  RunArenas restored(table_, DType::bf16, false);
  TrainingState loaded;
  load_training_checkpoint(file, config_, table_, restored.view(), loaded);
  EXPECT_EQ(loaded.optimizer_step, 1234);
}

TEST_F(CheckpointTest, TruncatedFileIsAClearErrorNamingTheFile) {
  const std::string file = save_sample("truncated.h5");
  fs::resize_file(file, fs::file_size(file) / 2);
  RunArenas run(table_, DType::bf16, false);
  TrainingState state;
  state.optimizer_step = -5;
  expect_error([&] { load_training_checkpoint(file, config_, table_, run.view(), state); },
               {file, "truncated"});
  EXPECT_EQ(state.optimizer_step, -5) << "a failed load must not touch the state";
}

TEST_F(CheckpointTest, ConfigMismatchNamesEveryDifferingField) {
  const std::string file = save_sample("config.h5");
  TrainingState state;

  DebertaConfig three_labels = config_;
  three_labels.num_labels = 3;
  three_labels.id2label = {"a", "b", "c"};
  three_labels.label2id = {{"a", 0}, {"b", 1}, {"c", 2}};
  ParameterTable three_label_table(three_labels);
  RunArenas three_label_run(three_label_table, DType::bf16, false);
  expect_error(
      [&] { load_training_checkpoint(file, three_labels, three_label_table, three_label_run.view(), state); },
      {file, "num_labels: checkpoint 2, this run 3", "id2label"});

  DebertaConfig wider = config_;
  wider.hidden_size = 32;
  wider.embedding_size = 32;
  wider.pooler_hidden_size = 32;
  wider.attention_head_size = 16;
  ParameterTable wider_table(wider);
  RunArenas wider_run(wider_table, DType::bf16, false);
  expect_error([&] { load_training_checkpoint(file, wider, wider_table, wider_run.view(), state); },
               {"hidden_size: checkpoint 16, this run 32", "embedding_size"});

  // Where the model came from is not part of what it computes.
  DebertaConfig renamed = config_;
  renamed.name_or_path = "somewhere/else";
  RunArenas run(table_, DType::bf16, false);
  EXPECT_NO_THROW(load_training_checkpoint(file, renamed, table_, run.view(), state));
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  const std::string file = save_sample("missing.h5");
  const std::string name = "deberta.encoder.layer.1.attention.self.value_proj.bias";
  delete_dataset(file, "adam_m/" + name);
  RunArenas run(table_, DType::bf16, false);
  run.randomize(5);
  std::vector<char> params_before(static_cast<char*>(run.params.data()),
                                  static_cast<char*>(run.params.data()) + run.params.bytes());
  TrainingState state;
  expect_error([&] { load_training_checkpoint(file, config_, table_, run.view(), state); },
               {file, "no tensor 'adam_m/" + name + "'"});
  EXPECT_EQ(std::memcmp(params_before.data(), run.params.data(), run.params.bytes()), 0)
      << "the checks must run before any tensor is overwritten";
}

TEST_F(CheckpointTest, WrongShapeOrDtypeIsNamed) {
  const std::string file = save_sample("shape.h5");
  const std::string name = "classifier.weight";  // [2, 16]
  delete_dataset(file, "master/" + name);
  delete_dataset(file, "params/" + name);
  {
    H5File f = H5File::open_read_write(file);
    std::vector<float> wrong_shape(3 * 16, 0.0f);
    f.write("master/" + name, wrong_shape.data(), {3, 16}, DType::f32);
    std::vector<float> wrong_dtype(2 * 16, 0.0f);
    f.write("params/" + name, wrong_dtype.data(), {2, 16}, DType::f32);
  }
  RunArenas run(table_, DType::bf16, false);
  TrainingState state;
  // params come first: the dtype is reported before the master's shape.
  expect_error([&] { load_training_checkpoint(file, config_, table_, run.view(), state); },
               {"'params/classifier.weight' holds f32, arena 'params' holds bf16"});
  delete_dataset(file, "params/" + name);
  {
    H5File f = H5File::open_read_write(file);
    std::vector<bf16> right(2 * 16, bf16{0});
    f.write("params/" + name, right.data(), {2, 16}, DType::bf16);
  }
  expect_error([&] { load_training_checkpoint(file, config_, table_, run.view(), state); },
               {"'master/classifier.weight' has shape [3, 16], the model expects [2, 16]"});
}

TEST_F(CheckpointTest, ExtraTensorForeignFileAndNewerVersionAreRejected) {
  const std::string file = save_sample("extra.h5");
  RunArenas run(table_, DType::bf16, false);
  TrainingState state;
  {
    H5File f = H5File::open_read_write(file);
    std::vector<float> one{1.0f};
    f.write("adam_v/deberta.encoder.layer.7.output.dense.weight", one.data(), {1}, DType::f32);
  }
  expect_error([&] { load_training_checkpoint(file, config_, table_, run.view(), state); },
               {"'adam_v/deberta.encoder.layer.7.output.dense.weight', which the model does not have"});

  const std::string newer = save_sample("newer.h5");
  H5File::open_read_write(newer).set_attribute("format_version", int64_t{2});
  expect_error([&] { load_training_checkpoint(newer, config_, table_, run.view(), state); },
               {newer, "format_version 2", "newer zerotrain"});

  const std::string foreign = path("foreign.h5");
  {
    AtomicH5Writer w(foreign);
    w.file().set_attribute("step", int64_t{3});
    w.commit();
  }
  expect_error([&] { load_training_checkpoint(foreign, config_, table_, run.view(), state); },
               {foreign, "not a zerotrain training checkpoint"});
}

TEST_F(CheckpointTest, SavingAnArenaWithoutATableTensorNamesIt) {
  ArenaLayout partial;
  for (const ParameterInfo& entry : table_.entries()) {
    if (entry.name != "deberta.encoder.rel_embeddings.weight")
      partial.add({entry.name, entry.shape, DType::f32});
  }
  Arena incomplete("adam_v_partial", partial);
  RunArenas run(table_, DType::bf16, false);
  CheckpointArenas arenas{
      .params = run.params, .master = *run.master, .adam_m = run.adam_m, .adam_v = incomplete};
  const std::string file = path("never.h5");
  expect_error([&] { save_training_checkpoint(file, config_, table_, arenas, sample_state(), ""); },
               {"arena 'adam_v_partial' has no tensor 'deberta.encoder.rel_embeddings.weight'"});
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(CheckpointTest, LatestCheckpointIsTheLargestStep) {
  EXPECT_EQ(find_latest_checkpoint(dir_.string()), std::nullopt);
  expect_error([&] { resolve_checkpoint_path(dir_.string()); }, {dir_.string(), "no step_<N>.h5"});
  expect_error([&] { find_latest_checkpoint(path("absent")); }, {"absent", "does not exist"});

  for (const char* name : {"step_2.h5", "step_10.h5", "step_9.h5", "step_99.h5.tmp-123", "step_x.h5",
                           "step_.h5", "step_-5.h5", "notes.txt"}) {
    std::ofstream(path(name)) << "x";
  }
  fs::create_directories(path("step_500.h5"));  // not a regular file
  EXPECT_EQ(checkpoint_path(dir_.string(), 10), path("step_10.h5"));
  EXPECT_EQ(find_latest_checkpoint(dir_.string()), path("step_10.h5"));
  EXPECT_EQ(resolve_checkpoint_path(dir_.string()), path("step_10.h5"));
  EXPECT_EQ(resolve_checkpoint_path(path("step_2.h5")), path("step_2.h5"));
  expect_error([&] { resolve_checkpoint_path(path("step_3.h5")); }, {"step_3.h5", "does not exist"});
}

// Flips `count` bytes at `offset` of a file, as a bad sector or a broken copy does.
void flip_bytes(const std::string& file, size_t offset, size_t count) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  std::vector<char> bytes(count);
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(bytes.data(), static_cast<std::streamsize>(count));
  for (char& b : bytes) b = static_cast<char>(~b);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(count));
}

// The case: 64 flipped bytes in the middle of a checkpoint trained on and ended in NaN. Now the
// load fails naming the file and the damaged tensor.
TEST_F(CheckpointTest, FlippedBytesInTheMiddleFailTheLoadNamingTheTensor) {
  const std::string file = save_sample("step_10.h5");
  flip_bytes(file, fs::file_size(file) / 2, 64);
  RunArenas run(table_, DType::bf16, false);
  TrainingState state;
  try {
    load_training_checkpoint(file, config_, table_, run.view(), state);
    ADD_FAILURE() << "a damaged checkpoint loaded";
  } catch (const Error& e) {
    const std::string message = e.message();
    EXPECT_NE(message.find(file), std::string::npos) << message;
    EXPECT_NE(message.find("checksum"), std::string::npos) << message;
    const bool names_tensor =
        message.find("'params/") != std::string::npos || message.find("'master/") != std::string::npos ||
        message.find("'adam_m/") != std::string::npos || message.find("'adam_v/") != std::string::npos;
    EXPECT_TRUE(names_tensor) << message;
  }
}

// Damage anywhere (tensor data, names, shapes, attributes, the superblock): a load either fails with a
// zt::Error or, where the damage hit bytes nothing reads, restores exactly what was saved; it never loads
// other values. Before checksums 19 of 20 such corruptions loaded, 7 of them as NaN.
TEST_F(CheckpointTest, RandomDamageNeverLoadsWrongValues) {
  RunArenas saved(table_, DType::bf16, false);
  saved.randomize(7);
  const std::string clean = path("clean.h5");
  save_training_checkpoint(clean, config_, table_, saved.view(), sample_state(), kTrainingConfig);
  const size_t size = fs::file_size(clean);
  std::mt19937 generator(2024);
  int refused = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const std::string damaged = path(str("damaged_", trial, ".h5"));
    fs::copy_file(clean, damaged);
    flip_bytes(damaged, generator() % (size - 20), 20);
    RunArenas restored(table_, DType::bf16, false);
    TrainingState loaded;
    try {
      load_training_checkpoint(damaged, config_, table_, restored.view(), loaded);
    } catch (const Error&) {
      ++refused;
      continue;
    }
    expect_same_bytes(saved.params, restored.params);
    expect_same_bytes(*saved.master, *restored.master);
    expect_same_bytes(saved.adam_m, restored.adam_m);
    expect_same_bytes(saved.adam_v, restored.adam_v);
    expect_same_state(sample_state(), loaded);
  }
  EXPECT_GT(refused, 30) << "most random damage hits data or metadata that is read";
}

// Values that are not damage to the file but would wreck training all the same.
TEST_F(CheckpointTest, NonFiniteOrNegativeSecondMomentsAreRefusedNamingTheTensor) {
  const std::string& name = table_.entries().back().name;
  for (const char* group : {"adam_m", "adam_v", "params"}) {
    RunArenas run(table_, DType::bf16, false);
    run.randomize(5);
    const std::string g(group);
    const Arena& arena = g == "adam_m" ? run.adam_m : g == "adam_v" ? run.adam_v : run.params;
    Tensor tensor = arena.tensor(name);
    if (g == "adam_m") tensor.data_as<float>()[1] = std::numeric_limits<float>::quiet_NaN();
    if (g == "adam_v") tensor.data_as<float>()[1] = -0.5f;
    if (g == "params") tensor.data_as<bf16>()[1] = float_to_bf16(std::numeric_limits<float>::infinity());
    const std::string file = path(g + ".h5");
    save_training_checkpoint(file, config_, table_, run.view(), sample_state(), kTrainingConfig);
    RunArenas restored(table_, DType::bf16, false);
    TrainingState state;
    expect_error([&] { load_training_checkpoint(file, config_, table_, restored.view(), state); },
                 {file, "'" + g + "/" + name + "'", "at element 1"});
  }
}

}  // namespace
}  // namespace zt::optim
