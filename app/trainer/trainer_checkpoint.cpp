// MrpcTrainer's checkpoints (save, resume), the consolidated parameters and the final model file.
#include <cstdio>

#include "app/run/checkpoint.h"
#include "app/run/resume_config.h"
#include "app/run/sharded_checkpoint.h"
#include "app/trainer/trainer.h"
#include "app/trainer/trainer_impl.h"
#include "model/model_file.h"
#include "runtime/log.h"

namespace zt::optim {

Arena MrpcTrainer::Impl::consolidated_parameters() {
  // Zero-filled: the padding between tensors compares equal between runs.
  Arena host("parameters (host)", table.layout(DType::f32), {.zero_fill = true});
  run_ranks([&](int r) { at(r).engine->gather_full_master(r == 0 ? &host : nullptr); });
  return host;
}

void MrpcTrainer::save_checkpoint(const std::string& output_dir) {
  Impl& s = *impl_;
  TrainingState state;
  state.optimizer_step = s.counters.optimizer_step;
  state.micro_step = s.counters.micro_step;
  state.adam_step = s.local_rank().engine->adamw().step_count();
  state.scheduler_step = s.counters.scheduler_step;
  state.loss_scaler = s.local_rank().scaler.state();
  if (s.input.train_batcher) state.next_batch = s.input.train_batcher->position();
  state.seed = s.config.seed;
  state.last_lr = s.reports.steps.empty() ? 0.0 : s.reports.steps.back().lr;
  state.epoch_loss_sum = s.counters.epoch_loss_sum;
  state.epoch_optimizer_steps = s.counters.epoch_optimizer_steps;
  const std::string text = s.config.describe();
  std::string path;
  if (s.config.zero.stage == 0) {
    // Every rank holds the whole state: rank 0 writes the single-file format (the fp32 master is written
    // as the params group in f32 runs; a 16-bit copy is re-derived from the master on load).
    path = checkpoint_path(output_dir, s.counters.optimizer_step);
    Arena master = s.consolidated_parameters();
    Arena m("adam_m (host)", s.table.layout(DType::f32)), v("adam_v (host)", s.table.layout(DType::f32));
    ZeroEngine& engine = *s.local_rank().engine;
    for (const ZeroEngine::OwnedPiece& piece : engine.owned_pieces()) {
      const Tensor tm = m.tensor(engine.tensor_name(piece.tensor)),
                   tv = v.tensor(engine.tensor_name(piece.tensor));
      engine.read_state(1, piece, {static_cast<float*>(tm.data()), static_cast<size_t>(piece.numel)});
      engine.read_state(2, piece, {static_cast<float*>(tv.data()), static_cast<size_t>(piece.numel)});
    }
    if (s.main_process())
      save_training_checkpoint(path, s.model_config, s.table, {master, master, m, v}, state, text);
    if (s.local_count < s.world) s.comms.front()->barrier();  // the file exists for every process after this
  } else {
    path = sharded_checkpoint_path(output_dir, s.counters.optimizer_step);
    try {
      s.run_ranks([&](int r) {
        RankState& rank = s.at(r);
        save_sharded_checkpoint(path, *rank.engine, *rank.comm, s.model_config, state, text);
      });
    } catch (...) {
      if (s.main_process()) remove_unfinished_sharded_checkpoint(path);
      throw;
    }
  }
  ZT_LOG(info) << "checkpoint: " << path << " (step " << s.counters.optimizer_step << ")";
}

void MrpcTrainer::load_checkpoint(const std::string& path) {
  Impl& s = *impl_;
  const std::string file = resolve_checkpoint_path(path);
  // Note [Resuming with changed settings] (app/run/resume_config.h): before anything is loaded, a change that
  // makes the rest another run is refused; the others are said.
  const CheckpointSummary summary = read_checkpoint_summary(file);
  for (const std::string& line : check_resume_config(file, summary.training_config, s.config.describe()))
    std::printf("%s\n", line.c_str());
  if (!s.input.train_set) s.load_data();
  std::vector<TrainingState> states(static_cast<size_t>(s.world));
  s.run_ranks([&](int r) {
    states[static_cast<size_t>(r)] = load_engine_checkpoint(file, *s.at(r).engine, s.model_config);
  });
  const TrainingState& state = states[static_cast<size_t>(s.first_rank)];
  ZT_CHECK(state.seed == s.config.seed, "checkpoint ", file, " was trained with --seed ", state.seed,
           "; resuming with --seed ", s.config.seed, " would change the data order and dropout masks");
  s.counters.optimizer_step = state.optimizer_step;
  s.counters.micro_step = state.micro_step;
  s.counters.scheduler_step = state.scheduler_step;
  s.counters.epoch_loss_sum = state.epoch_loss_sum;
  s.counters.epoch_optimizer_steps = state.epoch_optimizer_steps;
  for (RankState& rank : s.ranks) {
    rank.engine->adamw().set_step_count(state.adam_step);
    if (s.compute == DType::f16) rank.scaler.load_state(state.loss_scaler);
  }
  s.input.train_batcher->seek(state.next_batch);
  s.resumed_from = file;
  std::printf("resumed from %s: step %lld, epoch %lld, batch %lld\n", file.c_str(),
              static_cast<long long>(state.optimizer_step),
              static_cast<long long>(state.next_batch.epoch + 1),
              static_cast<long long>(state.next_batch.batch));
}

void MrpcTrainer::write_model(const std::string& model_path) {
  Impl& s = *impl_;
  // Collective, tensor by tensor into the file: the host holds one tensor, not a copy of the model.
  std::unique_ptr<ModelFileWriter> writer;
  if (s.main_process()) writer = std::make_unique<ModelFileWriter>(model_path, s.model_config);
  std::vector<float> values;
  s.run_ranks([&](int r) {
    ZeroEngine::TensorSink take;
    if (r == 0 && writer) {
      take = [&](size_t k, const Tensor& on_device) {
        values.resize(static_cast<size_t>(on_device.numel()));
        const Tensor host(values.data(), on_device.shape(), DType::f32);
        copy_tensor(on_device, host);
        writer->write(s.table.entries()[k].name, host);
      };
    }
    s.at(r).engine->gather_full_master(take);
  });
  if (writer) writer->commit();
  std::printf("model: %s (load with --model_name_or_path, export with convert_hf export)\n",
              model_path.c_str());
}

}  // namespace zt::optim
